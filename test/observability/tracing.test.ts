/**
 * Traces: an OTLP/HTTP collector on loopback receives the spans of requests, of their store calls
 * and of webhook deliveries, as JSON; with no endpoint nothing is sent and nothing is registered.
 *
 * The OpenTelemetry API is process-wide: the tests of this file run one after another, and each
 * app's close shuts its SDK down and unregisters it (src/observability/tracing.ts).
 */
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterEach, before, describe, it, type TestContext } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { context, type ProxyTracerProvider, propagation, ROOT_CONTEXT, trace } from '@opentelemetry/api'
import { pino } from 'pino'
import { loadConfig } from '../../src/config.ts'
import { REQUEST_ID_ATTRIBUTE, SHUTDOWN_EXPORT_MS, startTracing, tracedStore } from '../../src/observability/tracing.ts'
import type { Store } from '../../src/store/types.ts'
import { newWebhookSecret } from '../../src/webhooks/signing.ts'
import { bearer, build, testDatabaseUrl } from '../helper.ts'
import { cliKey, type ServerProcess, startServer } from '../processes.ts'
import { until } from '../wait.ts'
import { receiver } from '../webhooks/receiver.ts'

interface OtlpValue {
  stringValue?: string
  intValue?: number | string
  boolValue?: boolean
}
interface OtlpSpan {
  traceId: string
  spanId: string
  parentSpanId?: string
  name: string
  kind: number
  attributes: { key: string; value: OtlpValue }[]
  status: { code?: number; message?: string }
  events?: { name: string }[]
}
interface Span extends OtlpSpan {
  serviceName: string | undefined
  attribute(key: string): string | number | boolean | undefined
}

const SPAN_KIND_SERVER = 2
const SPAN_KIND_CLIENT = 3
const STATUS_ERROR = 2

/** An OTLP/HTTP collector: takes JSON trace exports at POST /v1/traces, and keeps their spans. */
async function collector(t: TestContext) {
  const spans: Span[] = []
  const requests: { method?: string; url?: string; type?: string }[] = []
  /** How many spans each export held. */
  const batches: number[] = []
  const server = http.createServer((request, response) => {
    const chunks: Buffer[] = []
    request.on('data', (chunk: Buffer) => chunks.push(chunk))
    request.on('end', () => {
      requests.push({ method: request.method, url: request.url, type: request.headers['content-type'] })
      if (request.method === 'POST' && request.url === '/v1/traces') {
        const body = JSON.parse(Buffer.concat(chunks).toString())
        const before = spans.length
        for (const { resource, scopeSpans } of body.resourceSpans ?? []) {
          const service = resource?.attributes?.find((a: { key: string }) => a.key === 'service.name')
          for (const { spans: batch } of scopeSpans ?? []) {
            for (const span of batch as OtlpSpan[]) {
              spans.push({
                ...span,
                serviceName: service?.value?.stringValue,
                attribute(key) {
                  const value = span.attributes.find((a) => a.key === key)?.value
                  if (value === undefined) return undefined
                  if (value.intValue !== undefined) return Number(value.intValue)
                  return value.stringValue ?? value.boolValue
                },
              })
            }
          }
        }
        batches.push(spans.length - before)
      }
      response.setHeader('content-type', 'application/json')
      response.end('{}')
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.after(() => {
    server.closeAllConnections()
    return new Promise((resolve) => server.close(resolve))
  })
  return { endpoint: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, spans, requests, batches }
}

/** Sends the spans ended so far (the SDK batches them for up to 5 s). */
async function flush(): Promise<void> {
  const provider = (trace.getTracerProvider() as ProxyTracerProvider).getDelegate() as { forceFlush?(): Promise<void> }
  assert.ok(provider.forceFlush, 'a tracer provider is registered')
  await provider.forceFlush()
}

/** A W3C traceparent of a sampled remote span. */
function remoteParent() {
  const traceId = randomBytes(16).toString('hex')
  const spanId = randomBytes(8).toString('hex')
  return { traceId, spanId, traceparent: `00-${traceId}-${spanId}-01` }
}

/**
 * Once `server` serves (the SDK loads on start, which takes a few seconds more than startServer's
 * wait on a busy machine), adds a pet called `name` under a remote parent: the 201, and that parent.
 */
async function postTraced(server: ServerProcess, secret: string, name: string) {
  await server.waitForLog((line) => line.msg === 'serving', 60_000)
  const remote = remoteParent()
  const response = await fetch(`${server.url}/v1/pets`, {
    method: 'POST',
    headers: { ...bearer(secret), 'content-type': 'application/json', traceparent: remote.traceparent },
    body: JSON.stringify({ name, categoryId: 2 }),
  })
  assert.equal(response.status, 201)
  return { remote, response }
}

/** Whether `span` descends from the span `ancestorId` in `spans`. */
function descends(spans: Span[], span: Span, ancestorId: string): boolean {
  for (let at: Span | undefined = span; at?.parentSpanId; ) {
    if (at.parentSpanId === ancestorId) return true
    const parentId: string = at.parentSpanId
    at = spans.find((s) => s.spanId === parentId)
  }
  return false
}

describe('Traces (OpenTelemetry, OTLP/HTTP)', () => {
  // The SDK takes seconds to load on a busy machine: loaded once here, not within an app's plugin timeout.
  before(() => Promise.all([import('@opentelemetry/sdk-node'), import('@fastify/otel')]))
  // Should an app fail to start, its SDK would stay registered for the next test.
  afterEach(() => {
    trace.disable()
    propagation.disable()
    context.disable()
  })

  it('a request is a span continuing its traceparent, with its route, status and request id; its store calls are under it', async (t) => {
    const otlp = await collector(t)
    const test = await build(
      t,
      { OTEL_EXPORTER_OTLP_ENDPOINT: otlp.endpoint, OTEL_SERVICE_NAME: 'store-under-test' },
      {
        setup: (app) =>
          app.get('/v1/test-failure', () => {
            throw new Error('the service failed')
          }),
      },
    )
    const key = await test.newKey()
    const remote = remoteParent()

    const created = await test.app.inject({
      method: 'POST',
      url: '/v1/pets',
      headers: { ...bearer(key.secret), 'content-type': 'application/json', traceparent: remote.traceparent },
      payload: { name: 'Traced', categoryId: 1 },
    })
    assert.equal(created.statusCode, 201, created.body)
    const petId = created.json().id
    const missing = await test.app.inject({ url: '/v1/pets/999999', headers: bearer(key.secret) })
    assert.equal(missing.statusCode, 404)
    const failure = await test.app.inject({ url: '/v1/test-failure', headers: bearer(key.secret) })
    assert.equal(failure.statusCode, 500)
    await flush()

    const spans = await until('the request spans exported', () => {
      const found = otlp.spans.filter((s) => s.traceId === remote.traceId)
      return found.some((s) => s.name === 'POST /v1/pets') ? found : null
    })
    // Only what reached /v1/traces: on a busy machine another file's process may knock on a port reused.
    const exports = otlp.requests.filter((r) => r.url === '/v1/traces')
    assert.deepEqual([...new Set(exports.map((r) => `${r.method} ${r.type}`))], ['POST application/json'])
    const request = spans.find((s) => s.name === 'POST /v1/pets')
    assert.ok(request)
    assert.equal(request.serviceName, 'store-under-test')
    assert.equal(request.kind, SPAN_KIND_SERVER)
    assert.equal(request.parentSpanId, remote.spanId)
    assert.equal(request.attribute('http.route'), '/v1/pets')
    assert.equal(request.attribute('http.request.method'), 'POST')
    assert.equal(request.attribute('http.response.status_code'), 201)
    assert.notEqual(request.status.code, STATUS_ERROR)
    assert.equal(request.attribute(REQUEST_ID_ATTRIBUTE), created.headers['x-request-id'])

    // The write (after the body was read: the handler's span carries the trace) and the key's check.
    const createPet = spans.find((s) => s.name === 'store.createPet')
    assert.ok(createPet, `no store.createPet span among ${spans.map((s) => s.name).join(', ')}`)
    assert.equal(createPet.kind, SPAN_KIND_CLIENT)
    assert.equal(createPet.attribute('db.operation'), 'createPet')
    assert.equal(createPet.attribute('db.system'), process.env.TEST_DATABASE === 'postgres' ? 'postgresql' : 'sqlite')
    assert.ok(descends(spans, createPet, request.spanId))
    const storeSpans = spans.filter((s) => s.name.startsWith('store.'))
    assert.ok(storeSpans.length >= 2, storeSpans.map((s) => s.name).join(', '))
    for (const span of storeSpans) assert.ok(descends(spans, span, request.spanId), span.name)
    // The pet cache's look at its change feed is its own bookkeeping, not the request's work.
    assert.ok(!storeSpans.some((s) => s.name === 'store.petChanges'), storeSpans.map((s) => s.name).join(', '))

    // Without a traceparent, a trace of its own.
    const notFound = otlp.spans.find((s) => s.attribute(REQUEST_ID_ATTRIBUTE) === missing.headers['x-request-id'])
    assert.ok(notFound)
    assert.notEqual(notFound.traceId, remote.traceId)
    assert.equal(notFound.parentSpanId ?? '', '')
    assert.equal(notFound.name, 'GET /v1/pets/:petId')
    assert.equal(notFound.attribute('http.response.status_code'), 404)
    // A 4xx is the client's outcome: status unset, no exception (the HTTP conventions for server spans).
    assert.equal(notFound.status.code ?? 0, 0, JSON.stringify(notFound.status))
    assert.deepEqual(notFound.events ?? [], [])
    // A 5xx is the service's failure: ERROR, with the exception.
    const failed = await until('the 5xx span exported', () =>
      otlp.spans.find((s) => s.attribute(REQUEST_ID_ATTRIBUTE) === failure.headers['x-request-id']),
    )
    assert.equal(failed.attribute('http.response.status_code'), 500)
    assert.equal(failed.status.code, STATUS_ERROR)
    assert.ok(failed.events?.some((e) => e.name === 'exception'))
    // One span a request: no span per hook or per handler.
    assert.deepEqual(
      spans.filter((s) => !s.name.startsWith('store.') && s.spanId !== request.spanId).map((s) => s.name),
      [],
    )
    // Store calls made outside any request (the test's own newKey, the delivery loop) make no spans.
    for (const span of otlp.spans.filter((s) => s.name.startsWith('store.'))) {
      assert.ok(
        otlp.spans.some((s) => s.spanId === span.parentSpanId),
        `${span.name} has no exported parent`,
      )
    }
    assert.ok(petId > 0)
  })

  it('spans are exported 128 at a time, as soon as 128 have ended (decision 125)', async (t) => {
    const otlp = await collector(t)
    const test = await build(t, { OTEL_EXPORTER_OTLP_ENDPOINT: otlp.endpoint })
    const key = await test.newKey()
    for (let i = 0; i < 130; i++) {
      const response = await test.app.inject({ url: '/v1/pets', headers: bearer(key.secret) })
      assert.equal(response.statusCode, 200)
    }
    // Sooner than the SDK's timer (5 s), which is all that would send a batch of its 512.
    await until('a batch exported', () => otlp.batches.length > 0, { timeoutMs: 3000 })
    assert.equal(otlp.batches[0], 128)
    await flush() // the rest, while the collector is there
  })

  it('without OTEL_EXPORTER_OTLP_ENDPOINT nothing is sent, and nothing is registered', async (t) => {
    const otlp = await collector(t)
    const test = await build(t)
    assert.equal(test.config.otelTracesUrl, null)
    const key = await test.newKey()
    const remote = remoteParent()
    const response = await test.app.inject({
      url: '/v1/pets',
      headers: { ...bearer(key.secret), traceparent: remote.traceparent },
    })
    assert.equal(response.statusCode, 200)
    // No global tracer provider, propagator or context manager; no plugin (the store is not wrapped
    // for traces: no span is made, so nothing is sent).
    assert.equal(trace.getTracer('probe').startSpan('probe').isRecording(), false)
    assert.deepEqual(propagation.fields(), [])
    const marked = ROOT_CONTEXT.setValue(Symbol('probe'), true)
    assert.equal(
      context.with(marked, () => context.active()),
      ROOT_CONTEXT,
    )
    assert.equal(test.app.hasPlugin('@fastify/otel'), false)
    assert.equal(test.app.hasPlugin('tracing'), false)
    await sleep(300)
    assert.deepEqual(otlp.requests, [])
  })

  it('a webhook delivery attempt is a span of the trace of the request that made the event, and its POST carries it', async (t) => {
    const otlp = await collector(t)
    const test = await build(t, {
      OTEL_EXPORTER_OTLP_ENDPOINT: otlp.endpoint,
      EXPERIMENTAL_FEATURES: 'webhooks',
      WEBHOOK_ALLOW_PRIVATE_URLS: 'true',
      WEBHOOK_ALLOW_HTTP: 'true',
    })
    const key = await test.newKey()
    const hook = await receiver(t)
    await test.app.store.createWebhookEndpoint({
      accountId: key.accountId,
      url: `${hook.url}?token=secret`,
      events: ['message.created'],
      description: '',
      secret: newWebhookSecret(),
    })
    const remote = remoteParent()
    const sent = await test.app.inject({
      method: 'POST',
      url: '/v1/messages',
      headers: { ...bearer(key.secret), 'content-type': 'application/json', traceparent: remote.traceparent },
      payload: { message: 'traced hook' },
    })
    assert.equal(sent.statusCode, 202, sent.body)
    await until('received', () => hook.received.length === 1)
    const traceparent = String(hook.received[0]?.headers.traceparent)
    const [, traceId, spanId] = /^00-([0-9a-f]{32})-([0-9a-f]{16})-01$/.exec(traceparent) ?? []
    assert.ok(traceId && spanId, `traceparent: ${traceparent}`)

    // The outcome is recorded within the attempt's span, then it ends.
    const spans = await until('the delivery span exported', async () => {
      await flush()
      const found = otlp.spans.filter((s) => s.traceId === traceId)
      return found.some((s) => s.name === 'store.recordDelivery') ? found : null
    })
    const delivery = spans.find((s) => s.spanId === spanId)
    assert.ok(delivery)
    assert.equal(delivery.name, 'webhook deliver')
    assert.equal(delivery.kind, SPAN_KIND_CLIENT)
    assert.equal(delivery.attribute('http.response.status_code'), 200)
    assert.equal(delivery.attribute('animal_store.webhook.attempt'), 1)
    assert.equal(delivery.attribute('animal_store.webhook.event_id'), hook.received[0]?.id)
    assert.equal(delivery.attribute('url.full'), hook.url)
    assert.notEqual(delivery.status.code, STATUS_ERROR)
    const recorded = spans.find((s) => s.name === 'store.recordDelivery')
    assert.equal(recorded?.parentSpanId, spanId)
    // The delivery continues the trace the request's traceparent named: its parent is a span of
    // that request (the one active when the event was written), later than the request itself.
    assert.equal(traceId, remote.traceId)
    const request = spans.find((s) => s.name === 'POST /v1/messages')
    assert.equal(request?.parentSpanId, remote.spanId)
    const ancestors: string[] = []
    for (let id = delivery.parentSpanId; id; id = spans.find((s) => s.spanId === id)?.parentSpanId) ancestors.push(id)
    assert.ok(request && ancestors.includes(request.spanId), `ancestors ${ancestors} of the delivery`)
  })

  it('a server process continues a traceparent over HTTP, and sends its spans when stopped', async (t) => {
    const otlp = await collector(t)
    // Batches wait for a minute: only the shutdown's flush can send these spans.
    const env = {
      DATABASE_URL: await testDatabaseUrl(t),
      OTEL_EXPORTER_OTLP_ENDPOINT: otlp.endpoint,
      OTEL_BSP_SCHEDULE_DELAY: '60000',
    }
    const secret = await cliKey(env)
    const server = await startServer(t, { ...env, LOG_LEVEL: 'info' }, { ready: false })
    const { remote, response } = await postTraced(server, secret, 'Over the wire')
    assert.deepEqual(otlp.requests, [])
    assert.equal(await server.stop('SIGTERM'), 0)
    const spans = otlp.spans.filter((s) => s.traceId === remote.traceId)
    const request = spans.find((s) => s.name === 'POST /v1/pets')
    assert.ok(request, `spans: ${otlp.spans.map((s) => s.name).join(', ')}`)
    assert.equal(request.parentSpanId, remote.spanId)
    assert.equal(request.attribute(REQUEST_ID_ATTRIBUTE), response.headers.get('x-request-id'))
    const createPet = spans.find((s) => s.name === 'store.createPet')
    assert.ok(createPet && descends(spans, createPet, request.spanId))
  })

  it('a collector that does not answer holds a SIGTERM for 2 s at most: the spans are dropped, the exit is 0', async (t) => {
    // Takes each export and never answers it.
    const held: http.ServerResponse[] = []
    const silent = http.createServer((_request, response) => held.push(response))
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve))
    t.after(() => {
      silent.closeAllConnections()
      silent.close()
    })
    const env = {
      DATABASE_URL: await testDatabaseUrl(t),
      OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${(silent.address() as AddressInfo).port}`,
    }
    const secret = await cliKey(env)
    const server = await startServer(t, { ...env, LOG_LEVEL: 'info' }, { ready: false })
    await postTraced(server, secret, 'Never exported')
    const stoppedAt = Date.now()
    assert.equal(await server.stop('SIGTERM'), 0)
    const took = Date.now() - stoppedAt
    assert.ok(took < SHUTDOWN_EXPORT_MS + 3000, `the exit took ${took} ms`)
    assert.ok(held.length > 0, 'the spans were offered to the collector')
    assert.ok(server.logs().some((line) => line.level === 40 && /traces still batched/.test(String(line.msg))))
  })

  it('OTEL_TRACES_EXPORTER=console: no collector, each span a JSON line on stderr; stdout keeps its log', async (t) => {
    const env = { DATABASE_URL: await testDatabaseUrl(t) }
    const secret = await cliKey(env)
    const server = await startServer(
      t,
      { ...env, OTEL_TRACES_EXPORTER: 'console', LOG_LEVEL: 'info' },
      { ready: false },
    )
    const { remote, response } = await postTraced(server, secret, 'Seen on the console')
    assert.equal(await server.stop('SIGTERM'), 0)
    const spans = server
      .stderr()
      .split('\n')
      .filter(Boolean)
      .map((line) => JSON.parse(line))
      .filter((span) => span.traceId === remote.traceId)
    const request = spans.find((s) => s.span === 'POST /v1/pets')
    assert.ok(request, server.stderr())
    assert.deepEqual([request.kind, request.parentSpanId, request.status], ['server', remote.spanId, 'unset'])
    assert.equal(request.attributes[REQUEST_ID_ATTRIBUTE], response.headers.get('x-request-id'))
    assert.equal(request.attributes['http.response.status_code'], 201)
    assert.ok(request.durationMs > 0)
    const createPet = spans.find((s) => s.span === 'store.createPet')
    assert.ok(createPet && createPet.parentSpanId !== null)
    // Every line of stdout is still a log line (logs() throws on one that is not JSON).
    assert.ok(server.logs().some((line) => line.msg === 'serving'))
  })

  it('the traced store behaves as the store: results, errors, synchronous or not', async (t) => {
    const otlp = await collector(t)
    const config = loadConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: `${otlp.endpoint}/` })
    assert.equal(config.otelTracesUrl, `${otlp.endpoint}/v1/traces`)
    const tracing = await startTracing(config)
    assert.ok(tracing)
    t.after(() => tracing.shutdown(pino({ level: 'silent' })))
    class Fake {
      #rows = [1, 2]
      count() {
        return this.#rows.length
      }
      boom(): never {
        throw new RangeError('sync failure')
      }
      async later(value: number) {
        await sleep(1)
        return value + this.#rows.length
      }
      async reject() {
        throw new TypeError('async failure')
      }
      label = 'plain'
    }
    const store = tracedStore(new Fake() as unknown as Store, 'postgres://x@h/db') as unknown as Fake
    const outcomes = await trace.getTracer('test').startActiveSpan('parent', async (parent) => {
      const results = [
        store.count(),
        (() => {
          try {
            return store.boom()
          } catch (error) {
            return error
          }
        })(),
        await store.later(40),
        await store.reject().catch((error: unknown) => error),
        store.label,
      ]
      parent.end()
      return { results, parentId: parent.spanContext().spanId }
    })
    const [count, boom, later, rejected, label] = outcomes.results
    assert.equal(count, 2)
    assert.ok(boom instanceof RangeError)
    assert.equal(later, 42)
    assert.ok(rejected instanceof TypeError)
    assert.equal(label, 'plain')
    // Outside a span: the store's own call, no span.
    assert.equal(store.count(), 2)
    assert.equal(store.count, store.count, 'one wrapper per method')
    await flush()
    const spans = await until('store spans', () => (otlp.spans.length >= 5 ? otlp.spans : null))
    const byName = (name: string) => spans.filter((s) => s.name === `store.${name}`)
    assert.equal(byName('count').length, 1)
    for (const name of ['count', 'boom', 'later', 'reject']) {
      const [span] = byName(name)
      assert.equal(span?.parentSpanId, outcomes.parentId, name)
      assert.equal(span?.attribute('db.system'), 'postgresql')
      assert.equal(span?.attribute('db.operation'), name)
    }
    assert.equal(byName('boom')[0]?.status.code, STATUS_ERROR)
    assert.equal(byName('boom')[0]?.status.message, 'sync failure')
    assert.equal(byName('reject')[0]?.status.code, STATUS_ERROR)
    assert.ok(byName('reject')[0]?.events?.some((e) => e.name === 'exception'))
    assert.notEqual(byName('later')[0]?.status.code, STATUS_ERROR)
  })
})
