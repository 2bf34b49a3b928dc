/**
 * Traces of requests (src/observability/tracing.ts), registered only when OTEL_EXPORTER_OTLP_ENDPOINT
 * is set or OTEL_TRACES_EXPORTER=console: starts the SDK, and registers @fastify/otel before the routes, whose request span each
 * route's hooks end. At close, after the plugins registered later (the webhook deliveries, the
 * store), the spans still batched are sent.
 */
import fp from 'fastify-plugin'
import type { Config } from '../config.ts'
import { startTracing } from '../observability/tracing.ts'

export default fp<{ config: Config }>(
  async (app, { config }) => {
    const tracing = await startTracing(config)
    if (tracing === null) return
    app.addHook('onClose', () => tracing.shutdown(app.log))
    await app.register(tracing.instrumentation.plugin())
  },
  { name: 'tracing' },
)
