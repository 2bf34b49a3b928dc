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
    { schema: { hide: true, response: { 200: jsonResponse('Ready.', Status), ...errorResponses(503) } } },
    async function ready() {
      // Shutting down: a balancer should send no more here.
      if (app.draining) {
        throw new ApiError('service_unavailable', 'The service is shutting down.', {
          'retry-after': String(RETRY_AFTER_SECONDS),
        })
      }
      try {
        const timeout = sleep(READY_TIMEOUT_MS, undefined, { ref: false }).then(() =>
          Promise.reject(new Error('timeout')),
        )
        await Promise.race([app.store.ping(), timeout])
      } catch (error) {
        // Logged as any outage is: one warn line with the cause, no stack (a balancer probes often).
        throw new DatabaseUnavailableError(`not ready: ${error instanceof Error ? error.message : String(error)}`)
      }
      return { status: 'ready' }
    },
  )
}

export default fp(health, { name: 'health', dependencies: ['http', 'store'], encapsulate: true })
