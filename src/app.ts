/**
 * The Animal Store application, as one Fastify plugin: the table of contents. src/server.ts runs
 * it as a process; the tests build it the same way (test/helper.ts). Plugins start in this order,
 * and a request passes them top to bottom.
 */
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import type { Config } from './config.ts'
import http from './http/index.ts'
import metrics from './observability/metrics.ts'
import auth from './plugins/auth.ts'
import errorHandler from './plugins/error-handler.ts'
import eventStream from './plugins/event-stream.ts'
import idempotency from './plugins/idempotency.ts'
import openapi from './plugins/openapi.ts'
import orderExpiry from './plugins/order-expiry.ts'
import preconditions from './plugins/preconditions.ts'
import rateLimit from './plugins/rate-limit.ts'
import scopes from './plugins/scopes.ts'
import stability from './plugins/stability.ts'
import store from './plugins/store.ts'
import tracing from './plugins/tracing.ts'
import unrouted from './plugins/unrouted.ts'
import webhookDelivery from './plugins/webhook-delivery.ts'
import portal from './portal/index.ts'
import events from './routes/events.ts'
import health from './routes/health.ts'
import messages from './routes/messages.ts'
import orders from './routes/orders.ts'
import pets from './routes/pets.ts'
import webhooks from './routes/webhooks.ts'
import { validatorCompiler } from './schemas/validation.ts'

export { serverOptions } from './http/options.ts'

export interface AppOptions {
  config: Config
}

async function animalStore(fastify: FastifyInstance, { config }: AppOptions): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>()
  // Strict bodies, coerced parameters (decisions 3, 4, 7).
  app.setValidatorCompiler(validatorCompiler)

  // The wire first: framing, Host, bodies, pipelining, draining. Nothing after it sees a malformed request.
  await app.register(http, { config })
  // Traces, when OTEL_EXPORTER_OTLP_ENDPOINT is set (or OTEL_TRACES_EXPORTER=console): a span per
  // request from here on, then its handler's and its database calls'. Else nothing is registered.
  if (config.otelTracesExporter !== null) await app.register(tracing, { config })
  // Every error below becomes {code, message, status}.
  await app.register(errorHandler)
  // Conditional requests (If-Match, If-None-Match) on every route.
  await app.register(preconditions)
  // The database, opened and migrated before any route can use it.
  await app.register(store, { config })
  // Metrics on their own port (METRICS_PORT), before the routes so that its hooks time every one.
  await app.register(metrics, { config })
  // Who is calling, then how often: a key is checked before anything else about a request.
  await app.register(rateLimit, { config })
  await app.register(auth, { config })
  // What the key may do: each operation's scope (403 without it).
  await app.register(scopes)
  // Requests no route takes (404, 405): registered before the routes, so that it sees them all.
  await app.register(unrouted)
  // Safe retries of writes, claimed in the same transaction as the write; and the housekeeping sweep.
  await app.register(idempotency, { eventRetentionMs: config.eventRetentionMs })
  // Beta and experimental operations: offered, marked, and opted into per request.
  await app.register(stability, { config })
  // Holds of placed orders end on time, on every instance.
  await app.register(orderExpiry)
  // Webhook events leave the outbox, signed, at least once, from every instance.
  await app.register(webhookDelivery, { config })
  // The live stream of the account's events, fed from the store on every instance.
  await app.register(eventStream, { config })
  // The OpenAPI document, built from the routes' schemas.
  await app.register(openapi, { config })

  // The API, then the people's side.
  await app.register(health)
  await app.register(pets, { prefix: '/v1' })
  await app.register(messages, { prefix: '/v1' })
  await app.register(orders, { prefix: '/v1', orderHoldMs: config.orderHoldMs })
  await app.register(webhooks, {
    prefix: '/v1',
    urlPolicy: { allowHttp: config.webhookAllowHttp, allowPrivate: config.webhookAllowPrivate },
  })
  await app.register(events, { prefix: '/v1' })
  await app.register(portal, { config })
}

// Not encapsulated: src/server.ts and the tests reach its decorations (startDraining, store) on their root.
export default fp(animalStore, { name: 'animal-store' })
