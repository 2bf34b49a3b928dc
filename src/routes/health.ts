import { setTimeout as sleep } from 'node:timers/promises'
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import fp from 'fastify-plugin'
import Type from 'typebox'
import { ApiError, RETRY_AFTER_SECONDS } from '../errors.ts'
import { errorResponses, jsonResponse } from '../schemas/common.ts'
import { DatabaseUnavailableError } from '../store/types.ts'

/** A readiness check that takes longer than this counts as a failure, so probes never hang. */
const READY_TIMEOUT_MS = 2000
const Status = Type.Object({ status: Type.String() })
const Ready = Type.Object({
  status: Type.String(),
  // The webhook outbox, so that a backlog is seen before it matters (decision 87).
  outbox: Type.Object({
    depth: Type.Integer({ description: 'Deliveries not yet delivered nor given up.' }),
    oldestAgeSeconds: Type.Union([Type.Number(), Type.Null()], {
      description: 'How long the oldest of them has waited, or null.',
    }),
  }),
})

/** Liveness and readiness probes for load balancers and orchestrators. No API key needed. */
const health: FastifyPluginAsyncTypebox = async (app) => {
  app.get(
    '/healthz',
    { schema: { hide: true, response: { 200: jsonResponse('Alive.', Status) } } },
    async function alive() {
      return { status: 'ok' }
    },
  )

  app.get(
    '/readyz',
    { schema: { hide: true, response: { 200: jsonResponse('Ready.', Ready), ...errorResponses(503) } } },
    async function ready() {
      // Shutting down: a balancer should send no more here.
      if (app.draining) {
        throw new ApiError('service_unavailable', 'The service is shutting down.', {
          'retry-after': String(RETRY_AFTER_SECONDS),
        })
      }
      let outbox: { depth: number; oldestAt: string | null }
      try {
        const timeout = sleep(READY_TIMEOUT_MS, undefined, { ref: false }).then(() =>
          Promise.reject(new Error('timeout')),
        )
        await Promise.race([app.store.ping(), timeout])
        outbox = await Promise.race([app.store.outboxStats(), timeout])
      } catch (error) {
        // Logged as any outage is: one warn line with the cause, no stack (a balancer probes often).
        throw new DatabaseUnavailableError(`not ready: ${error instanceof Error ? error.message : String(error)}`)
      }
      const oldestAgeSeconds = outbox.oldestAt === null ? null : (Date.now() - Date.parse(outbox.oldestAt)) / 1000
      return { status: 'ready', outbox: { depth: outbox.depth, oldestAgeSeconds } }
    },
  )
}

export default fp(health, { name: 'health', dependencies: ['http', 'store'], encapsulate: true })
