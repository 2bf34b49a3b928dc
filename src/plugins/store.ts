import type { FastifyReply } from 'fastify'
import fp from 'fastify-plugin'
import type { Config } from '../config.ts'
import { activeTraceparent, tracedStore } from '../observability/tracing.ts'
import { openStore, type Store } from '../store/index.ts'
import { cachedStore, PetCache, type Read } from '../store/pet-cache.ts'

declare module 'fastify' {
  interface FastifyInstance {
    store: Store
    /** Pet reads through the cache, which follows the pet change feed by itself (decision 98). */
    petCache: PetCache
  }
  interface FastifyReply {
    /** Sends a cached read as JSON, serialized once by the first route's 200 schema that sends it. */
    sendRead(read: Read<unknown>): FastifyReply
  }
}

const JSON_TYPE = 'application/json; charset=utf-8'

/** Opens the database (migrating it) for the app's lifetime and closes it after the last request. */
export default fp<{ config: Config }>(
  async (app, { config }) => {
    const opened = await openStore({
      databaseUrl: config.databaseUrl,
      poolSize: config.databasePoolSize,
      timeoutMs: config.databaseTimeoutMs,
      // With tracing on, an event keeps the trace of the request that made it, for its deliveries.
      ...(config.otelTracesExporter !== null && { traceparent: activeTraceparent }),
    })
    // With tracing on, each call made for a request is a span of its trace.
    const traced = config.otelTracesExporter === null ? opened : tracedStore(opened, config.databaseUrl)
    const cache = new PetCache(traced)
    await cache.start()
    app.decorate('store', cachedStore(traced, cache))
    app.decorate('petCache', cache)
    app.decorateReply('sendRead', function sendRead(this: FastifyReply, read: Read<unknown>) {
      read.json ??= (this.getSerializationFunction('200', 'application/json') as (value: unknown) => string)(read.value)
      // A string with a JSON type is sent as it is. (The type provider expects the schema's object type.)
      return this.type(JSON_TYPE).send(read.json as never)
    })
    app.addHook('onClose', () => {
      cache.stop()
      return opened.close()
    })
  },
  { name: 'store' },
)
