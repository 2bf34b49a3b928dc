import fp from 'fastify-plugin'
import type { Config } from '../config.ts'
import { openStore, type Store } from '../store/index.ts'

declare module 'fastify' {
  interface FastifyInstance {
    store: Store
  }
}

/** Opens the database (migrating it) for the app's lifetime and closes it after the last request. */
export default fp<{ config: Config }>(
  async (app, { config }) => {
    const store = await openStore({
      databaseUrl: config.databaseUrl,
      poolSize: config.databasePoolSize,
      timeoutMs: config.databaseTimeoutMs,
    })
    app.decorate('store', store)
    app.addHook('onClose', () => store.close())
  },
  { name: 'store' },
)
