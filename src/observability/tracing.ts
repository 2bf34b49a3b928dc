/**
 * Traces (OpenTelemetry), sent to an OTLP/HTTP collector as JSON when OTEL_EXPORTER_OTLP_ENDPOINT
 * is set, or written to stderr, a line a span, with OTEL_TRACES_EXPORTER=console (no collector
 * needed: for a look on a development machine). Otherwise nothing here runs: the SDK and @fastify/otel are not even loaded (they
 * are imported on start), and the app registers no plugin and wraps no store (src/app.ts).
 *
 * What a trace holds, and where it is made:
 * - a request's span, by @fastify/otel (src/plugins/tracing.ts), named `{method} {route}`, with the
 *   request id and status; it continues the trace of an incoming W3C `traceparent` (@fastify/otel
 *   extracts it). One span a request: no span per hook or handler, which would double its cost;
 * - a span per store call under it (tracedStore);
 * - a span per webhook delivery attempt (tracedDeliveries), whose POST carries its `traceparent`.
 *
 * No module patching: this is ESM without loader hooks, where `require`-hooking instrumentations
 * (http, pg) do not apply. Every span is made by code we can see.
 */

import type { FastifyOtelInstrumentation } from '@fastify/otel'
import {
  type Attributes,
  context,
  propagation,
  ROOT_CONTEXT,
  type Span,
  SpanKind,
  SpanStatusCode,
  trace,
} from '@opentelemetry/api'
import type { tracing as sdkTracing } from '@opentelemetry/sdk-node'
import type { FastifyBaseLogger, FastifyRequest } from 'fastify'
import type { Config } from '../config.ts'
import type { ClaimedDelivery, Store } from '../store/types.ts'
import type { SendResult } from '../webhooks/send.ts'

const TRACER_NAME = 'animal-store'
/** The request id (X-Request-Id) on a request's span: no semantic convention names one. */
export const REQUEST_ID_ATTRIBUTE = 'animal_store.request_id'

/**
 * How long a shutdown waits for the spans still batched to reach the collector. A collector that is
 * down or hangs would hold the exit for the exporter's own timeout and retries (10 s), past the
 * shutdown's grace, and fail it: the spans are dropped instead, and the log says so.
 */
export const SHUTDOWN_EXPORT_MS = 2000

export interface Tracing {
  /** @fastify/otel's instrumentation: its `plugin()` is registered before the routes. */
  instrumentation: FastifyOtelInstrumentation
  /**
   * Exports what is batched (for SHUTDOWN_EXPORT_MS at most; a failure is logged, not thrown),
   * stops, and unregisters the OpenTelemetry globals (so that another start may follow).
   */
  shutdown(log: FastifyBaseLogger): Promise<void>
}

/**
 * Starts the SDK (traces only) when `config.otelTracesExporter` is set; null when it is not. OTLP:
 * the spans are batched (the SDK's BatchSpanProcessor, OTEL_BSP_* apply) and sent to
 * `${endpoint}/v1/traces`. Console: each is written as it ends.
 */
export async function startTracing(config: Config): Promise<Tracing | null> {
  if (config.otelTracesExporter === null) return null
  // Loaded only now: the SDK takes a few seconds to import, and tracing-off processes never pay it.
  const [{ NodeSDK, tracing }, { OTLPTraceExporter }, { FastifyOtelInstrumentation }] = await Promise.all([
    import('@opentelemetry/sdk-node'),
    import('@opentelemetry/exporter-trace-otlp-http'),
    import('@fastify/otel'),
  ])
  const instrumentation = new FastifyOtelInstrumentation({
    // A span per hook or per handler would be most of a trace, and of its cost: the request says enough.
    instrumentHooks: false,
    instrumentHandler: false,
    requestHook: describeRequest,
  })
  const sdk = new NodeSDK({
    serviceName: config.otelServiceName,
    spanProcessors: [
      clientErrorsAreNotFailures,
      config.otelTracesExporter === 'console'
        ? new tracing.SimpleSpanProcessor(stderrExporter)
        : new tracing.BatchSpanProcessor(new OTLPTraceExporter({ url: config.otelTracesUrl ?? undefined }), {
            maxExportBatchSize: config.otelExportBatchSize,
          }),
    ],
    instrumentations: [instrumentation],
    // Traces only. Left unset, the SDK would also export metrics and logs over OTLP by default.
    metricReaders: [],
    logRecordProcessors: [],
  })
  sdk.start()
  return {
    instrumentation,
    async shutdown(log) {
      instrumentation.disable()
      let timer: NodeJS.Timeout | undefined
      const late = new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`not sent within ${SHUTDOWN_EXPORT_MS} ms`)), SHUTDOWN_EXPORT_MS)
        timer.unref()
      })
      try {
        await Promise.race([sdk.shutdown(), late])
      } catch (error) {
        log.warn({ err: error }, 'traces still batched at shutdown were dropped: the collector did not take them')
      } finally {
        clearTimeout(timer)
        trace.disable()
        propagation.disable()
        context.disable()
      }
    },
  }
}

/** Names a request's span as the HTTP conventions do (`GET /v1/pets/:petId`), and adds its request id. */
function describeRequest(span: Span, request: FastifyRequest): void {
  const route = request.routeOptions.url
  span.updateName(route === undefined ? request.method : `${request.method} ${route}`)
  span.setAttribute(REQUEST_ID_ATTRIBUTE, request.id)
}

/**
 * A 4xx answer is the client's outcome, not a failure of the service: its span keeps status unset
 * and records no exception, as the HTTP semantic conventions say for server spans. @fastify/otel
 * marks every error thrown as one (a 404 too), so this undoes it as the span ends, before export.
 */
const clientErrorsAreNotFailures = {
  onStart() {},
  onEnding(span: Span) {
    const ending = span as Span & {
      attributes: Attributes
      status: { code: SpanStatusCode }
      events: { name: string }[]
    }
    const status = ending.attributes['http.response.status_code']
    if (typeof status !== 'number' || status >= 500 || ending.status.code !== SpanStatusCode.ERROR) return
    ending.status = { code: SpanStatusCode.UNSET }
    ending.events = ending.events.filter((event) => event.name !== 'exception')
  },
  onEnd() {},
  forceFlush: () => Promise.resolve(),
  shutdown: () => Promise.resolve(),
}

/**
 * OTEL_TRACES_EXPORTER=console: each span as one JSON line on stderr. Not the SDK's
 * ConsoleSpanExporter, which prints several lines of util.inspect among the JSON log lines of
 * stdout; this keeps the log parseable and the spans easy to grep or pipe to `jq`.
 */
const stderrExporter: sdkTracing.SpanExporter = {
  export(spans, done) {
    for (const span of spans) process.stderr.write(`${JSON.stringify(spanLine(span))}\n`)
    done({ code: 0 }) // ExportResultCode.SUCCESS
  },
  shutdown: () => Promise.resolve(),
}

const SPAN_KINDS = ['internal', 'server', 'client', 'producer', 'consumer']
const SPAN_STATUSES = ['unset', 'ok', 'error']
const milliseconds = ([seconds, nanoseconds]: [number, number]) => seconds * 1000 + nanoseconds / 1e6

function spanLine(span: sdkTracing.ReadableSpan) {
  const { traceId, spanId } = span.spanContext()
  return {
    span: span.name,
    traceId,
    spanId,
    parentSpanId: span.parentSpanContext?.spanId ?? null,
    kind: SPAN_KINDS[span.kind],
    start: new Date(milliseconds(span.startTime)).toISOString(),
    durationMs: Math.round(milliseconds(span.duration) * 1000) / 1000,
    status: SPAN_STATUSES[span.status.code],
    ...(span.status.message && { statusMessage: span.status.message }),
    attributes: span.attributes,
    ...(span.events.length > 0 && { events: span.events.map(({ name, attributes }) => ({ name, attributes })) }),
  }
}

function failed(span: Span, error: unknown): void {
  span.recordException(error instanceof Error ? error : String(error))
  span.setStatus({ code: SpanStatusCode.ERROR, message: error instanceof Error ? error.message : String(error) })
  span.end()
}

/**
 * The store, with a span per method call made within a traced request or delivery (`db.operation`:
 * the method's name). Calls made outside one (the delivery loop's polls, order expiry) are not
 * traced: every instance makes several a second, and each would be a trace of its own.
 * Behaviour is the store's own: the same results, the same errors, synchronous or not.
 */
export function tracedStore(store: Store, databaseUrl: string): Store {
  // Not traced: the pet cache's look at its change feed (src/store/pet-cache.ts), its own
  // bookkeeping once per turn of the event loop, not the work of the request it falls in.
  const untraced = new Set<string>(['petChanges'])
  const tracer = trace.getTracer(TRACER_NAME)
  const system = databaseUrl.startsWith('sqlite:') ? 'sqlite' : 'postgresql'
  const wrapped = new WeakMap<(...args: unknown[]) => unknown, (...args: unknown[]) => unknown>()
  const wrap = (method: (...args: unknown[]) => unknown, name: string) => {
    if (untraced.has(name)) return method.bind(store)
    const attributes: Attributes = {
      'db.system': system,
      'db.system.name': system,
      'db.operation': name,
      'db.operation.name': name,
    }
    return (...args: unknown[]): unknown => {
      const parent = context.active()
      // Called on the store itself, not the proxy: its private fields are the store's.
      if (trace.getSpan(parent)?.isRecording() !== true) return Reflect.apply(method, store, args)
      const span = tracer.startSpan(`store.${name}`, { kind: SpanKind.CLIENT, attributes }, parent)
      let result: unknown
      try {
        result = Reflect.apply(method, store, args)
      } catch (error) {
        failed(span, error)
        throw error
      }
      if (typeof (result as PromiseLike<unknown> | null)?.then !== 'function') {
        span.end()
        return result
      }
      return (result as PromiseLike<unknown>).then(
        (value) => {
          span.end()
          return value
        },
        (error: unknown) => {
          failed(span, error)
          throw error
        },
      )
    }
  }
  return new Proxy(store, {
    get(target, name) {
      const value: unknown = Reflect.get(target, name, target)
      if (typeof value !== 'function' || typeof name !== 'string') return value
      const method = value as (...args: unknown[]) => unknown
      let traced = wrapped.get(method)
      if (traced === undefined) {
        traced = wrap(method, name)
        wrapped.set(method, traced)
      }
      return traced
    },
  })
}

/**
 * Headers that carry the active span's trace to where a request goes (W3C `traceparent`, and
 * `tracestate` when there is one). Without tracing there is no propagator, and no header.
 */
export function traceHeaders(): Record<string, string> {
  const headers: Record<string, string> = {}
  propagation.inject(context.active(), headers)
  return headers
}

/** The active span's W3C traceparent, or null (no span, or tracing off): what an event keeps. */
export function activeTraceparent(): string | null {
  return traceHeaders().traceparent ?? null
}

/**
 * Each delivery attempt as a span of its own (`webhook deliver`), active while it runs: its POST
 * carries it (traceHeaders) and its outcome's store call is under it. Its parent is the span that
 * made the event (the `traceparent` kept with it), so a delivery continues the trace of the
 * request that caused it, on any instance and however late; an event kept none starts a trace.
 */
export function tracedDeliveries(
  attempt: (delivery: ClaimedDelivery) => Promise<SendResult>,
): (delivery: ClaimedDelivery) => Promise<SendResult> {
  const tracer = trace.getTracer(TRACER_NAME)
  return (delivery) => {
    const target = URL.canParse(delivery.url) ? new URL(delivery.url) : null
    const attributes: Attributes = {
      'http.request.method': 'POST',
      'animal_store.webhook.delivery_id': delivery.id,
      'animal_store.webhook.event_id': delivery.eventId,
      'animal_store.webhook.attempt': delivery.attempts,
    }
    // Without the query: a receiver may take a token there.
    if (target) {
      attributes['url.full'] = `${target.origin}${target.pathname}`
      attributes['server.address'] = target.hostname
    }
    return tracer.startActiveSpan(
      'webhook deliver',
      { kind: SpanKind.CLIENT, attributes },
      delivery.traceparent === null
        ? ROOT_CONTEXT
        : propagation.extract(ROOT_CONTEXT, { traceparent: delivery.traceparent }),
      async (span): Promise<SendResult> => {
        let result: SendResult
        try {
          result = await attempt(delivery)
        } catch (error) {
          failed(span, error)
          throw error
        }
        if (result.status !== null) span.setAttribute('http.response.status_code', result.status)
        if (!result.delivered) {
          span.setAttribute('error.type', result.status === null ? (result.error ?? 'error') : String(result.status))
          span.setStatus({ code: SpanStatusCode.ERROR, message: result.error ?? `status ${result.status}` })
        }
        span.end()
        return result
      },
    )
  }
}
