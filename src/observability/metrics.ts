/**
 * Prometheus metrics (prom-client), served on a listener of their own (METRICS_HOST:METRICS_PORT,
 * GET /metrics), never on the API's: what they show about the traffic and the database is for
 * operators. With METRICS_PORT unset this plugin adds nothing: no hooks, no listener.
 *
 * Label values are bounded: an operation is a route's operationId or one of a few fixed names,
 * never a URL; no label ever holds an id or a key.
 *
 * Names follow Prometheus' naming guide: what is the application's own has its prefix,
 * `animal_store_`; the HTTP server's are the usual `http_…`, and Node's prom-client's defaults
 * (`process_…`, `nodejs_…`).
 */
import type * as Http from 'node:http'
import type { Server } from 'node:http'
import { createRequire } from 'node:module'
import type { AddressInfo } from 'node:net'
import type { FastifyReply, FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from 'prom-client'
import type { Config } from '../config.ts'
import { ORDER_STATUSES } from '../schemas/orders.ts'
import { PET_STATUSES } from '../schemas/pets.ts'

// Required, not imported: an ES import of node:http loads Node's bundled undici (see webhooks/send.ts).
const { createServer } = createRequire(import.meta.url)('node:http') as typeof Http

export type RefusalReason = 'api_key' | 'auth_failures'
export type DeliveryOutcome = 'delivered' | 'retry' | 'failed' | 'lease_lost'

/** What other plugins count: each a fixed set of labels, bound once. */
export interface Metrics {
  /** A 429: the key's rate limit (`api_key`), or its address's bad keys (`auth_failures`). */
  rateLimited(reason: RefusalReason): void
  /** A webhook delivery attempt's outcome, as recorded. */
  webhookDelivery(outcome: DeliveryOutcome): void
}

declare module 'fastify' {
  interface FastifyInstance {
    /** null when METRICS_PORT is not set. */
    metrics: Metrics | null
    /** Where /metrics is served (its port, when METRICS_PORT=0), once the app is ready; else null. */
    metricsAddress: AddressInfo | null
  }
  interface FastifyContextConfig {
    /** The route's `operation` label (set when the route is added). */
    metricsOperation?: string
  }
}

/** Seconds: a cached read takes well under a millisecond, a slow write or an outage seconds. */
const DURATION_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]
const BATCH_BUCKETS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
const COMMIT_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5]
/**
 * The database's numbers (counts by status, the outbox) are read at most this often, whoever
 * scrapes: the counts scan their tables. Scrapes come every 15 s or so.
 */
const DATABASE_READ_MS = 5000

/** Routes without an operationId, by their path's first segment: portal pages, docs, probes. */
function fixedOperation(url: string | undefined): string {
  if (url === undefined) return 'unrouted'
  if (url === '/healthz' || url === '/readyz') return 'health'
  if (url.endsWith('/openapi.json')) return 'openapi'
  if (url === '/docs' || url.startsWith('/docs/')) return 'docs'
  if (url === '/' || url === '/portal' || url.startsWith('/portal/')) return 'portal'
  return 'other'
}

export default fp<{ config: Config }>(
  async (app, { config }) => {
    app.decorate('metricsAddress', null)
    if (config.metricsPort === null) {
      app.decorate('metrics', null)
      return
    }
    const register = new Registry()
    collectDefaultMetrics({ register })

    // ─── HTTP ───
    const labelNames = ['operation', 'method', 'status_class'] as const
    const requests = new Counter({
      name: 'http_requests_total',
      help: 'Requests answered, by operation (operationId, or a fixed name), method and status class.',
      labelNames,
      registers: [register],
    })
    const durations = new Histogram({
      name: 'http_request_duration_seconds',
      help: 'Time from receiving a request to the end of its answer.',
      labelNames,
      buckets: DURATION_BUCKETS,
      registers: [register],
    })
    let inFlight = 0
    new Gauge({
      name: 'http_requests_in_flight',
      help: 'Requests received and not yet answered.',
      registers: [register],
      collect() {
        this.set(inFlight)
      },
    })
    const refusals = new Counter({
      name: 'animal_store_rate_limit_refusals_total',
      help: "429 answers: the key's rate limit (api_key) or its address's bad keys (auth_failures).",
      labelNames: ['reason'],
      registers: [register],
    })

    // Each route's operation label, worked out once when the route is added.
    app.addHook('onRoute', (route) => {
      const operation = (route.schema?.operationId as string | undefined) ?? fixedOperation(route.url)
      route.config = { ...route.config, metricsOperation: operation }
    })
    // One child per label set, found by a short string: prom-client would hash the labels every time.
    const children = new Map<string, { count: Counter; duration: Histogram }>()
    const child = (operation: string, method: string, statusClass: string) => {
      const key = `${operation} ${method} ${statusClass}`
      let found = children.get(key)
      if (!found) {
        const labels = { operation, method, status_class: statusClass }
        found = {
          count: requests.labels(labels) as unknown as Counter,
          duration: durations.labels(labels) as unknown as Histogram,
        }
        children.set(key, found)
      }
      return found
    }
    // 'close' comes once per answer, sent or abandoned (onResponse misses a client that left).
    const answered = () => {
      inFlight--
    }
    app.addHook('onRequest', (_request: FastifyRequest, reply: FastifyReply, done: () => void) => {
      inFlight++
      reply.raw.on('close', answered)
      done()
    })
    app.addHook('onResponse', (request: FastifyRequest, reply: FastifyReply, done: () => void) => {
      const operation = request.routeOptions.config.metricsOperation ?? fixedOperation(request.routeOptions.url)
      const { count, duration } = child(operation, request.method, `${Math.floor(reply.statusCode / 100)}xx`)
      count.inc()
      duration.observe(reply.elapsedTime / 1000)
      done()
    })

    // ─── DATABASE ───
    const { store } = app
    const stats = store.stats()
    if (stats.pool) {
      new Gauge({
        name: 'animal_store_db_pool_connections',
        help: 'PostgreSQL pool: connections open (total), of them idle, and callers waiting for one.',
        labelNames: ['state'],
        registers: [register],
        collect() {
          const { pool } = store.stats()
          if (!pool) return
          this.set({ state: 'total' }, pool.total)
          this.set({ state: 'idle' }, pool.idle)
          this.set({ state: 'waiting' }, pool.waiting)
        },
      })
    }
    if (stats.queryErrors !== undefined) {
      new Counter({
        name: 'animal_store_db_query_errors_total',
        help: 'PostgreSQL statements and transactions that failed (each attempt).',
        registers: [register],
        collect() {
          this.reset()
          this.inc(store.stats().queryErrors ?? 0)
        },
      })
    }
    if (store.onWriterBatch) {
      const sizes = new Histogram({
        name: 'animal_store_sqlite_writer_batch_size',
        help: 'Writes committed together by the SQLite writer thread, per transaction.',
        buckets: BATCH_BUCKETS,
        registers: [register],
      })
      const commits = new Histogram({
        name: 'animal_store_sqlite_commit_seconds',
        help: "Seconds from a writer batch's BEGIN to its COMMIT on disk.",
        buckets: COMMIT_BUCKETS,
        registers: [register],
      })
      store.onWriterBatch((size, seconds) => {
        sizes.observe(size)
        commits.observe(seconds)
      })
    }

    // ─── WHAT THE DATABASE HOLDS ───
    let read: { at: number; values: Promise<DatabaseNumbers | null> } | null = null
    const fromDatabase = (): Promise<DatabaseNumbers | null> => {
      if (read && Date.now() - read.at < DATABASE_READ_MS) return read.values
      const values = Promise.all([store.inventory(), store.orderCounts(), store.outboxStats()]).then(
        ([pets, orders, outbox]) => ({ pets, orders, outbox }),
        (err) => {
          // A scrape during an outage still shows the rest (and the process); these go missing.
          app.log.warn({ detail: err instanceof Error ? err.message : String(err) }, 'metrics: database unreadable')
          return null
        },
      )
      read = { at: Date.now(), values }
      return values
    }
    /** A gauge of what the database holds, set from the numbers a scrape reads (or left empty in an outage). */
    const databaseGauge = (
      options: { name: string; help: string; labelNames?: string[] },
      show: (gauge: Gauge, numbers: DatabaseNumbers) => void,
    ) =>
      new Gauge({
        ...options,
        registers: [register],
        async collect() {
          this.reset()
          const numbers = await fromDatabase()
          if (numbers) show(this, numbers)
          // A gauge without labels cannot go missing (it reads 0 once reset): NaN says "unknown".
          else if (options.labelNames === undefined) this.set(Number.NaN)
        },
      })
    databaseGauge({ name: 'animal_store_pets', help: 'Pets by status.', labelNames: ['status'] }, (gauge, { pets }) => {
      for (const status of PET_STATUSES) gauge.set({ status }, pets[status])
    })
    databaseGauge(
      { name: 'animal_store_orders', help: 'Orders (of every account) by status.', labelNames: ['status'] },
      (gauge, { orders }) => {
        for (const status of ORDER_STATUSES) gauge.set({ status }, orders[status])
      },
    )
    databaseGauge(
      { name: 'animal_store_webhook_outbox_depth', help: 'Webhook deliveries neither delivered nor given up.' },
      (gauge, { outbox }) => gauge.set(outbox.depth),
    )
    databaseGauge(
      {
        name: 'animal_store_webhook_outbox_oldest_age_seconds',
        help: 'Age of the oldest undelivered webhook delivery (0 when none).',
      },
      (gauge, { outbox: { oldestAt } }) =>
        gauge.set(oldestAt === null ? 0 : Math.max(0, (Date.now() - Date.parse(oldestAt)) / 1000)),
    )
    const deliveries = new Counter({
      name: 'animal_store_webhook_deliveries_total',
      help: 'Webhook delivery attempts by outcome: delivered, retry (to be tried again), failed (given up), lease_lost.',
      labelNames: ['outcome'],
      registers: [register],
    })

    // Bound once: every label value a caller can pass (the types allow no other).
    const refusedBy = {
      api_key: refusals.labels({ reason: 'api_key' }),
      auth_failures: refusals.labels({ reason: 'auth_failures' }),
    }
    const outcomes = {
      delivered: deliveries.labels({ outcome: 'delivered' }),
      retry: deliveries.labels({ outcome: 'retry' }),
      failed: deliveries.labels({ outcome: 'failed' }),
      lease_lost: deliveries.labels({ outcome: 'lease_lost' }),
    }
    // Present at 0 from the start: a rate() over a series that appears with its first increment misses it.
    for (const counter of [...Object.values(refusedBy), ...Object.values(outcomes)]) counter.inc(0)
    app.decorate('metrics', {
      rateLimited: (reason: RefusalReason) => refusedBy[reason].inc(),
      webhookDelivery: (outcome: DeliveryOutcome) => outcomes[outcome].inc(),
    } satisfies Metrics)

    // ─── THE LISTENER ───
    const server: Server = createServer((request, response) => {
      const path = (request.url ?? '').split('?')[0]
      const text = { 'content-type': 'text/plain; charset=utf-8' }
      if (path !== '/metrics') {
        response.writeHead(404, text).end('Not found: this listener serves GET /metrics only.\n')
        return
      }
      if (request.method !== 'GET' && request.method !== 'HEAD') {
        response.writeHead(405, { ...text, allow: 'GET, HEAD' }).end('Method not allowed: GET /metrics.\n')
        return
      }
      register.metrics().then(
        (text) => {
          response.writeHead(200, { 'content-type': register.contentType })
          response.end(request.method === 'HEAD' ? undefined : text)
        },
        (err) => {
          app.log.error({ err }, 'metrics: collection failed')
          response.writeHead(500, { 'content-type': 'text/plain; charset=utf-8' }).end('Collection failed\n')
        },
      )
    })
    // With the app: a port taken stops the start, as the API's own would.
    app.addHook('onReady', async () => {
      await new Promise<void>((resolve, reject) => {
        server.once('error', reject)
        server.listen(config.metricsPort as number, config.metricsHost, () => {
          server.off('error', reject)
          resolve()
        })
      })
      app.metricsAddress = server.address() as AddressInfo
    })
    app.addHook('onClose', async () => {
      if (!server.listening) return
      server.closeAllConnections()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    })
  },
  { name: 'metrics', dependencies: ['store'] },
)

interface DatabaseNumbers {
  pets: Record<(typeof PET_STATUSES)[number], number>
  orders: Record<(typeof ORDER_STATUSES)[number], number>
  outbox: { depth: number; oldestAt: string | null }
}
