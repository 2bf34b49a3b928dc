/**
 * Delivers the outbox, on every instance (decision 87). A delivery is claimed under a lease, so
 * that one instance at a time sends it; it is signed (Standard Webhooks), sent, and its outcome
 * recorded under that lease. An instance that dies loses its leases when they run out, and another
 * takes them over: every event reaches its endpoints at least once. Where the operator has the
 * `webhooks` feature off, nothing is sent: deliveries wait, visible in the outbox (decision 96).
 */
import { setMaxListeners } from 'node:events'
import fp from 'fastify-plugin'
import type { Config } from '../config.ts'
import { backgroundJob } from '../observability/background.ts'
import { tracedDeliveries, traceHeaders } from '../observability/tracing.ts'
import { WEBHOOKS_STABILITY } from '../schemas/webhooks.ts'
import type { ClaimedDelivery } from '../store/types.ts'
import { retryDelayMs } from '../webhooks/schedule.ts'
import { closeWebhookAgents, type SendResult, sendWebhook } from '../webhooks/send.ts'
import { signatureHeaders } from '../webhooks/signing.ts'

/** How often each instance looks for due deliveries (and for messages no endpoint was subscribed to). */
const POLL_MS = 500
/** Deliveries in flight per instance. */
const CONCURRENCY = 32
/** Deliveries in flight per endpoint, from every instance: a slow one holds up no other (decision 122). */
export const ENDPOINT_CONCURRENCY = 8
/** A lease outlives the attempt's own bound by this much: the outcome is recorded within it. */
const LEASE_MARGIN_MS = 10_000
/** A write that may have made an event starts a pass this soon (many writes, one pass). */
const NUDGE_MS = 20
/**
 * At shutdown, attempts under way get this share of SHUTDOWN_TIMEOUT_SECONDS to be answered; then
 * they are cut short and recorded as not delivered (retried later), so that the process exits in time.
 */
const SHUTDOWN_SHARE = 0.3

declare module 'fastify' {
  interface FastifyInstance {
    webhookDeliveries: {
      /** Look for due deliveries soon (an event may have just been written). */
      nudge(): void
      /** Deliveries this instance is sending now. */
      inFlight(): number
    }
  }
}

export default fp<{ config: Config }>(
  async (app, { config }) => {
    const { store } = app
    const sends = app.offers(WEBHOOKS_STABILITY)
    const leaseMs = config.webhookTimeoutMs + LEASE_MARGIN_MS
    const sending = new Set<Promise<unknown>>()
    let claiming = false
    /** The pass under way (settled when none): shutdown waits for it, then for what it started. */
    let passing: Promise<void> = Promise.resolve()
    let polling: Promise<void> = Promise.resolve()
    let again = false
    let closing = false
    let nudged: NodeJS.Timeout | null = null
    const shutDown = new AbortController()
    // Each attempt in flight listens to it: more than the default 10 is no leak.
    setMaxListeners(CONCURRENCY + 1, shutDown.signal)
    let cut: NodeJS.Timeout | null = null
    const pass = backgroundJob(app.log, 'webhook delivery pass')
    const marking = backgroundJob(app.log, 'marking undelivered messages')

    const attempt = async (delivery: ClaimedDelivery): Promise<SendResult> => {
      const started = new Date()
      const headers = {
        ...signatureHeaders(delivery.eventId, started, delivery.body, delivery.secrets),
        ...traceHeaders(),
      }
      const result = await sendWebhook(delivery.url, headers, delivery.body, {
        timeoutMs: config.webhookTimeoutMs,
        allowPrivate: config.webhookAllowPrivate,
        signal: shutDown.signal,
      })
      const gone = result.status === 410
      // Cut short by the shutdown: not the endpoint's failure, so never its last one; due again at once.
      const shutOut = shutDown.signal.aborted && result.status === null
      const delay =
        result.delivered || gone ? null : shutOut ? 0 : retryDelayMs(delivery.attempts, config.webhookRetryScheduleMs)
      const recorded = await store.recordDelivery({
        id: delivery.id,
        lease: delivery.lease,
        at: started.toISOString(),
        answeredAt: new Date().toISOString(),
        delivered: result.delivered,
        status: result.status,
        error: result.error,
        retryAt: delay === null ? null : new Date(Date.now() + delay).toISOString(),
        disableEndpoint: gone,
      })
      app.metrics?.webhookDelivery(recorded === null ? 'lease_lost' : recorded === 'pending' ? 'retry' : recorded)
      app.log.info(
        {
          delivery: delivery.id,
          event: delivery.eventId,
          attempt: delivery.attempts,
          status: result.status,
          error: result.error ?? undefined,
          ms: result.ms,
          leaseLost: recorded === null ? true : undefined,
        },
        result.delivered ? 'webhook delivered' : 'webhook not delivered',
      )
      return result
    }
    // With tracing on, each attempt is a span, which its POST carries (`traceparent`).
    const deliver = config.otelTracesExporter === null ? attempt : tracedDeliveries(attempt)

    /** Claims due deliveries while slots are free, and starts them. One pass at a time. */
    const fill = async (): Promise<void> => {
      if (!sends) return
      if (claiming) {
        again = true
        return
      }
      claiming = true
      let done = () => {}
      passing = new Promise((resolve) => (done = resolve))
      try {
        do {
          again = false
          // Once attempts are being cut short, none is claimed: it would be cut at once, and claimed again.
          while (!closing && !shutDown.signal.aborted && sending.size < CONCURRENCY && (await store.deliveriesDue())) {
            const claimed = await store.claimDeliveries(
              CONCURRENCY - sending.size,
              leaseMs,
              ENDPOINT_CONCURRENCY,
              config.webhookTimeoutMs,
            )
            if (claimed.length === 0) break
            for (const delivery of claimed) {
              const running: Promise<unknown> = deliver(delivery)
                .catch((err) => app.log.warn({ err, delivery: delivery.id }, 'webhook outcome not recorded'))
                .finally(() => {
                  sending.delete(running)
                  void fill()
                })
              sending.add(running)
            }
          }
        } while (again && !closing)
        pass.worked()
      } catch (err) {
        // The database is away: the next poll tries again, and the leases taken run out meanwhile.
        pass.failed(err)
      } finally {
        claiming = false
        done()
      }
    }

    const poll = async () => {
      try {
        await store.markUndeliveredMessages()
        marking.worked()
      } catch (err) {
        marking.failed(err)
      }
      await fill()
    }

    const timer = setInterval(() => {
      polling = poll()
    }, POLL_MS).unref()
    const nudge = () => {
      if (nudged !== null || closing) return
      nudged = setTimeout(() => {
        nudged = null
        void fill()
      }, NUDGE_MS).unref()
    }
    app.decorate('webhookDeliveries', { nudge, inFlight: () => sending.size })
    // A write that succeeded may have stored an event: look for it now rather than at the next poll.
    // Callback-style: it runs on every request, and an async hook costs a promise each time.
    app.addHook('onResponse', (request, reply, done) => {
      if (request.method !== 'GET' && request.method !== 'HEAD' && reply.statusCode < 300) nudge()
      done()
    })
    // Counted from when the shutdown begins, not from onClose, which runs once requests have drained.
    app.addHook('preClose', (done) => {
      cut = setTimeout(() => shutDown.abort(), config.shutdownTimeoutMs * SHUTDOWN_SHARE)
      done()
    })
    app.addHook('onClose', async () => {
      closing = true
      clearInterval(timer)
      if (nudged !== null) clearTimeout(nudged)
      // Attempts under way, including those a pass claimed as closing began, finish and are
      // recorded before the store closes; those still unanswered after their share are cut short.
      await polling
      await passing
      while (sending.size > 0) await Promise.allSettled([...sending])
      if (cut !== null) clearTimeout(cut)
      closeWebhookAgents()
    })
  },
  { name: 'webhook-delivery', dependencies: ['store', 'stability'] },
)
