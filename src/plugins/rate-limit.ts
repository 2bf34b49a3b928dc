/**
 * Rate limits per API key: `app.rateLimit` is an onRequest hook that runs right after
 * `app.authenticate`. Every authenticated response carries the IETF draft headers
 * (draft-ietf-httpapi-ratelimit-headers: `RateLimit-Policy: "default";q=<limit>;w=<seconds>` and
 * `RateLimit: "default";r=<remaining>;t=<seconds to reset>`); past the limit, 429 with Retry-After.
 *
 * Counters live in memory, or in Redis when REDIS_URL is set so that every instance shares them.
 * `app.rateCounter` is also what auth uses to slow down addresses that keep sending bad keys.
 */
import type { FastifyReply, FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import type { Config } from '../config.ts'
import { ApiError } from '../errors.ts'
import { type Counter, memoryCounter, redisCounter } from '../rate-limit.ts'

declare module 'fastify' {
  interface FastifyInstance {
    rateLimit: (request: FastifyRequest, reply: FastifyReply) => Promise<void>
    rateCounter: Counter
  }
}

/** How long the limiter stays quiet after logging that Redis failed (it fails open meanwhile). */
const ERROR_LOG_INTERVAL_MS = 10_000
/** How long Redis may take to count a hit before the request goes ahead uncounted. */
const REDIS_TIMEOUT_MS = 250

export default fp<{ config: Config }>(
  async (app, { config }) => {
    let lastLogged = 0
    const onError = (err: unknown) => {
      if (Date.now() - lastLogged < ERROR_LOG_INTERVAL_MS) return
      lastLogged = Date.now()
      app.log.warn({ err }, 'rate-limit counters unavailable in Redis: requests are not being limited')
    }
    const counter = config.redisUrl ? await redisCounter(config.redisUrl, REDIS_TIMEOUT_MS, onError) : memoryCounter()
    app.decorate('rateCounter', counter)
    app.addHook('onClose', () => counter.close())

    const { rateLimit: limit, rateLimitWindowMs: windowMs } = config
    const policy = `"default";q=${limit};w=${windowMs / 1000}`
    app.decorate('rateLimit', async (request: FastifyRequest, reply: FastifyReply) => {
      if (limit === 0) return
      const { count, resetMs } = await counter.hit(`key:${request.caller.keyId}`, windowMs)
      const reset = Math.ceil(resetMs / 1000)
      reply.header('ratelimit-policy', policy)
      reply.header('ratelimit', `"default";r=${Math.max(0, limit - count)};t=${reset}`)
      if (count > limit) {
        throw new ApiError('rate_limited', `This API key made more than ${limit} requests in ${windowMs / 1000} s.`, {
          'retry-after': String(reset),
        })
      }
    })
  },
  { name: 'rate-limit' },
)
