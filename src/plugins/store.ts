import fp from 'fastify-plugin'
import { openStore, type Store } from '../store/index.ts'

declare module 'fastify' {
  interface FastifyInstance {
    store: Store
  }
}

/** Opens the database (migrating it) for the app's lifetime and closes it after the last request. */
export default fp<{ databaseUrl: string }>(
  async (app, { databaseUrl }) => {
    const store = await openStore(databaseUrl)
    app.decorate('store', store)
    app.addHook('onClose', () => store.close())
  },
  { name: 'store' },
)
