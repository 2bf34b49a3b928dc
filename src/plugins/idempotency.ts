/**
 * Idempotent retries of POSTs (draft-ietf-httpapi-idempotency-key-header): a request with an
 * `Idempotency-Key` header claims the key for the calling API key before it writes; the write
 * and its response are stored in one transaction. A retry with the same key and the same request
 * replays that response (status, body, Location) with `Idempotent-Replayed: true` and writes
 * nothing; the same key for a different request is 422; a retry while the first is still running
 * is 409. Records are kept for IDEMPOTENCY_TTL_MS.
 *
 * `app.idempotent` holds the route hooks, to spread into the options of each POST route that takes
 * the header: a preHandler, which runs after validation, so a refused request claims nothing; and an
 * onResponse hook that releases the claim of a request that failed.
 */
import { hash } from 'node:crypto'
import type { FastifyInstance, FastifyReply, FastifyRequest, HookHandlerDoneFunction } from 'fastify'
import fp from 'fastify-plugin'
import { ApiError } from '../errors.ts'
import { backgroundJob } from '../observability/background.ts'
import type { IdempotencyRef } from '../store/types.ts'

declare module 'fastify' {
  interface FastifyInstance {
    idempotent: { preHandler: RouteHook; onResponse: RouteHook }
  }
  interface FastifyRequest {
    /** Set when this request holds an Idempotency-Key claim; pass it to the store's write. */
    idempotency: IdempotencyRef | null
  }
  interface FastifyContextConfig {
    /** The Location of a replayed response, from its body (for 201 responses). */
    replayLocation?: (body: never, request: FastifyRequest) => string
  }
}

type RouteHook = (request: FastifyRequest, reply: FastifyReply, done: HookHandlerDoneFunction) => void

/** How long a key is remembered: a day, like Stripe, long enough for any client's retries. */
export const IDEMPOTENCY_TTL_MS = 24 * 3600 * 1000
/** A claim this old without a response belongs to a request that died; its key may be used again. */
const STALE_CLAIM_MS = 60_000
const PURGE_INTERVAL_MS = 10 * 60_000

/** JSON with object keys sorted, so that the same body sent twice has the same fingerprint. */
function canonical(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonical).join(',')}]`
  if (value === null || typeof value !== 'object') return JSON.stringify(value) ?? 'null'
  const entries = Object.keys(value)
    .sort()
    .map((k) => `${JSON.stringify(k)}:${canonical((value as Record<string, unknown>)[k])}`)
  return `{${entries.join(',')}}`
}

/** What makes two requests "the same request" for a key: method, URL and body (keys in any order). */
export function requestFingerprint(method: string, url: string, body: unknown): string {
  return hash('sha256', `${method} ${url} ${canonical(body)}`, 'base64url')
}

export default fp<{ eventRetentionMs: number }>(
  async (app, { eventRetentionMs }) => {
    app.decorateRequest('idempotency', null)

    /** Claims the key (false), or replays the stored response (true); 409 and 422 are thrown. */
    async function claim(request: FastifyRequest, reply: FastifyReply, header: string): Promise<boolean> {
      // The draft sends the key as a structured-field string ("…"); plain tokens are accepted too.
      const key = header.length > 1 && header.startsWith('"') && header.endsWith('"') ? header.slice(1, -1) : header
      const scope = request.caller.keyId
      const fingerprint = requestFingerprint(request.method, request.url, request.body)
      const now = Date.now()
      const state = await app.store.claimIdempotencyKey({
        scope,
        key,
        fingerprint,
        expiresAt: new Date(now + IDEMPOTENCY_TTL_MS).toISOString(),
        staleBefore: new Date(now - STALE_CLAIM_MS).toISOString(),
      })
      if (state.state === 'claimed') {
        request.idempotency = { scope, key }
        return false
      }
      if (state.state === 'in_progress') throw new ApiError('idempotency_conflict')
      if (state.state === 'mismatch') throw new ApiError('idempotency_key_reused')
      const body = JSON.parse(state.body)
      const location = request.routeOptions.config.replayLocation?.(body as never, request)
      if (location) reply.header('location', location)
      reply.code(state.status).header('idempotent-replayed', 'true').send(body)
      return true
    }

    app.decorate('idempotent', {
      // Callback style: most requests send no key, and then cost no promise here.
      preHandler(request, reply, done) {
        const header = request.headers['idempotency-key']
        if (typeof header !== 'string') return done()
        // A hook that answers the request itself must not call done().
        claim(request, reply, header).then((replayed) => replayed || done(), done)
      },
      // A claimed request that did not succeed wrote nothing (the write completes the claim in its
      // own transaction), so its key is released for the client's retry.
      onResponse(request, reply, done) {
        if (request.idempotency && reply.statusCode >= 400) {
          app.store
            .releaseIdempotencyKey(request.idempotency)
            .catch((err) => request.log.warn({ err }, 'could not release an idempotency key'))
        }
        done()
      },
    } satisfies FastifyInstance['idempotent'])

    // The housekeeping sweep of every instance: expired records, and events past EVENT_RETENTION_DAYS.
    const job = backgroundJob(app.log, 'purge')
    const purge = setInterval(() => {
      const now = Date.now()
      const eventsBefore = new Date(now - eventRetentionMs).toISOString()
      app.store.purgeExpired(new Date(now).toISOString(), eventsBefore).then(job.worked, job.failed)
    }, PURGE_INTERVAL_MS).unref()
    app.addHook('onClose', async () => clearInterval(purge))
  },
  { name: 'idempotency', dependencies: ['store'] },
)
