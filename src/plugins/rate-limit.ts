/**
 * Rate limits per API key: `app.rateLimit` is an onRequest hook that runs right after
 * `app.authenticate`. Every authenticated response carries the IETF draft headers
 * (draft-ietf-httpapi-ratelimit-headers: `RateLimit-Policy: "default";q=<limit>;w=<seconds>` and
 * `RateLimit: "default";r=<remaining>;t=<seconds to reset>`); past the limit, 429 with Retry-After.
 *
 * Counters live in memory, or in Redis when REDIS_URL is set so that every instance shares them.
 * `app.rateCounter` is also what auth uses to slow down addresses that keep sending bad keys.
 * Ours rather than @fastify/rate-limit, whose headers are another draft's and whose 429s cost more
 * (decision 85).
 */
import type { FastifyReply, FastifyRequest, HookHandlerDoneFunction } from 'fastify'
import fp from 'fastify-plugin'
import type { Config } from '../config.ts'
import { ApiError } from '../errors.ts'
import { type Counter, type Hit, memoryCounter, redisCounter } from './rate-limit-counters.ts'

declare module 'fastify' {
  interface FastifyInstance {
    rateLimit: (request: FastifyRequest, reply: FastifyReply, done: HookHandlerDoneFunction) => void
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
    // Made once: a 429 differs from the next only by its headers, set on the reply. A new Error
    // per refusal (its stack trace) was a sixth of the cost of a 429 (decision 84).
    const refusal = new ApiError(
      'rate_limited',
      `This API key made more than ${limit} requests in ${windowMs / 1000} s.`,
    )
    /** Sets the headers of a counted hit, and refuses it past the limit. */
    const apply = ({ count, resetMs }: Hit, reply: FastifyReply, done: HookHandlerDoneFunction) => {
      const reset = Math.ceil(resetMs / 1000)
      reply.header('ratelimit-policy', policy)
      reply.header('ratelimit', `"default";r=${Math.max(0, limit - count)};t=${reset}`)
      if (count <= limit) return done()
      app.metrics?.rateLimited('api_key')
      reply.header('retry-after', String(reset))
      done(refusal)
    }
    // Callback style, so that the in-memory counter costs no promise on every request.
    app.decorate('rateLimit', (request: FastifyRequest, reply: FastifyReply, done: HookHandlerDoneFunction) => {
      if (limit === 0) return done()
      const hit = counter.hit(`key:${request.caller.keyId}`, windowMs)
      if (hit instanceof Promise) hit.then((counted) => apply(counted, reply, done), done)
      else apply(hit, reply, done)
    })
  },
  { name: 'rate-limit' },
)
