/**
 * Bearer API keys (RFC 6750). `app.authenticate` is an onRequest hook: it runs before the body is
 * read or validated, so a bad key gets 401 whatever else is wrong with the request.
 *
 * Verified keys are cached in memory for `apiKeyCacheMs`, by the key itself: a request with a cached
 * key costs a map lookup, neither a SHA-256 nor a database round-trip (decision 56). That bounds
 * how long another process's revocation takes to be seen; a revocation through this process
 * (`app.forgetApiKey`) and an expiry take effect at once. Keys found unknown are remembered as long,
 * so that a client repeating one costs no database lookup either (decision 84).
 */
import type { FastifyPluginAsyncTypebox, TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import type { FastifyInstance, FastifyPluginOptions, FastifyReply, FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import type { Config } from '../config.ts'
import { apiKeyDeployment, hashApiKey } from '../domain/api-keys.ts'
import { grantedScopes } from '../domain/scopes.ts'
import { ApiError, type ErrorCode } from '../errors.ts'
import { BoundedMap } from '../lib/bounded-map.ts'
import { type ApiKey, DatabaseUnavailableError } from '../store/types.ts'
import { clientNetwork, type Hit } from './rate-limit-counters.ts'

/**
 * A resource module of the API (src/routes/) as a plugin: a scope of its own, in which every route
 * takes an API key, then counts against that key's rate limit, before anything else is judged.
 */
export function apiRoutes<Options extends FastifyPluginOptions>(
  routes: FastifyPluginAsyncTypebox<Options>,
  name: string,
  dependencies: string[],
) {
  const plugin = async (app: FastifyInstance, options: Options) => {
    app.addHook('onRequest', app.authenticate)
    app.addHook('onRequest', app.rateLimit)
    await routes(app.withTypeProvider<TypeBoxTypeProvider>(), options)
  }
  return fp(plugin, { name, dependencies: ['auth', 'rate-limit', ...dependencies], encapsulate: true })
}

export interface Caller {
  keyId: string
  accountId: number
  /** The scopes the key grants (write implying read); null: every scope. */
  scopes: ReadonlySet<string> | null
}

type Done = (error?: Error) => void
type Hook = (request: FastifyRequest, reply: FastifyReply, done: Done) => void

declare module 'fastify' {
  interface FastifyInstance {
    authenticate: Hook
    /** Drops a key from the cache after it was revoked here, so it is refused at once. */
    forgetApiKey: (keyId: string) => void
    /**
     * Whether a request with this Authorization header would be let in now, as far as its key goes
     * (what keeps a long-lived answer, an event stream, open); synchronous for a cached key.
     */
    admits: (authorization: string | undefined) => boolean | Promise<boolean>
  }
  interface FastifyRequest {
    /** The verified API key of an authenticated request. */
    caller: Readonly<Caller>
  }
}

interface CachedKey {
  key: ApiKey
  /** What an admitted request's `caller` is: made once per entry, not once per request. */
  caller: Readonly<Caller>
  expiresAtMs: number
  verifiedAtMs: number
  /** When this process last queued a "last used" update for the key. */
  touchedAtMs: number
}

/** "Last used" is recorded to the minute: enough for people, and one write per key per minute at most. */
const TOUCH_INTERVAL_MS = 60_000

/** Enough for every active key of a large deployment; beyond it the oldest entries are dropped. */
const CACHE_ENTRIES = 10_000
const REALM = 'animal-store'
const BEARER = /^Bearer +([^\s]+) *$/i
/**
 * No credentials of ours: another scheme (Basic, Bearer-Token…), or `Bearer` with no token. `Bearer`
 * and a token after a tab or a no-break space is a key sent in a malformed header instead.
 */
const NO_BEARER_TOKEN = /^(?!bearer(\s|$))|^bearer\s*$/i
/** One of our keys sent without its scheme (`Authorization: as_test_…`): meant as a key, malformed. */
const KEY_WITHOUT_SCHEME = /^\s*as_(live|test)_/

export default fp<{ config: Config }>(
  async (app, { config }) => {
    /** Keys found valid, by the key (only valid keys get an entry, so clients cannot fill it with junk). */
    const cache = new BoundedMap<string, CachedKey>(CACHE_ENTRIES)
    /**
     * Well-formed keys the store did not know, and when it said so. A key is random and shown only
     * once made, so none can be used before it exists: an entry cannot hide a key made since.
     */
    const unknown = new BoundedMap<string, number>(CACHE_ENTRIES)
    const wrongDeployment = refused(
      'invalid_api_key',
      `This is a ${config.deployment === 'production' ? 'staging' : 'production'} key; this is the ${config.deployment} deployment.`,
    )

    async function lookup(secret: string, now: number): Promise<CachedKey | null> {
      const cached = cache.get(secret)
      if (cached && now - cached.verifiedAtMs < config.apiKeyCacheMs) return cached
      const key = await app.store.findApiKeyByHash(hashApiKey(secret))
      if (!key) {
        cache.delete(secret)
        unknown.delete(secret) // re-inserted as the newest, so that the oldest entries go first
        unknown.set(secret, now)
        return null
      }
      const entry = {
        key,
        caller: Object.freeze({ keyId: key.id, accountId: key.accountId, scopes: grantedScopes(key.scopes) }),
        expiresAtMs: key.expiresAt ? Date.parse(key.expiresAt) : Infinity,
        verifiedAtMs: now,
        touchedAtMs: cached?.touchedAtMs ?? 0,
      }
      cache.set(secret, entry)
      return entry
    }

    app.decorate('forgetApiKey', (keyId: string) => {
      for (const [secret, entry] of cache) if (entry.key.id === keyId) cache.delete(secret)
    })

    // Last use of each key, written in batches: at most once per key per TOUCH_INTERVAL_MS.
    const usage = new Map<string, string>()
    const flushUsage = async () => {
      if (usage.size === 0) return
      const usages = [...usage].map(([id, at]) => ({ id, at }))
      usage.clear()
      // A database outage is logged as the requests log it (src/plugins/error-handler.ts): one line, no stack.
      await app.store
        .touchApiKeys(usages)
        .catch((err) =>
          app.log.warn(
            err instanceof DatabaseUnavailableError ? { detail: err.message } : { err },
            'could not record key usage',
          ),
        )
    }
    const flusher = setInterval(flushUsage, TOUCH_INTERVAL_MS).unref()
    app.addHook('onClose', async () => {
      clearInterval(flusher)
      await flushUsage()
    })

    /** Addresses that sent too many bad keys, and until when they get 429 (this process's view). */
    const blocked = new BoundedMap<string, number>(CACHE_ENTRIES)

    /**
     * What the cache alone says about an Authorization header: the key's entry, or why it is
     * refused; or, when only the store can tell, the key to look up.
     */
    function verifyCached(header: string | undefined, now: number): CachedKey | ApiError | string {
      const secret = header && BEARER.exec(header)?.[1]
      if (!secret) {
        // RFC 6750 §3.1: a request with no bearer token at all gets a challenge without an error code.
        if (!header || (NO_BEARER_TOKEN.test(header) && !KEY_WITHOUT_SCHEME.test(header))) return MISSING
        return MALFORMED_HEADER
      }
      const entry = cache.get(secret)
      // A fresh cache entry is a key already found valid for this deployment: skip straight to its state.
      if (entry && now - entry.verifiedAtMs < config.apiKeyCacheMs) return admission(entry, now)
      const unknownAt = unknown.get(secret)
      if (unknownAt !== undefined && now - unknownAt < config.apiKeyCacheMs) return UNKNOWN
      const deployment = apiKeyDeployment(secret)
      if (!deployment) return MALFORMED_KEY
      if (deployment !== config.deployment) return wrongDeployment
      return secret
    }

    /** Milliseconds the client is still blocked for bad keys, or 0. */
    function blockedFor(client: string, now: number): number {
      const until = blocked.get(client) ?? 0
      return until > now ? until - now : 0
    }

    /**
     * Counts a bad key against the client (its address, or its IPv6 /64), and answers how long it
     * is now blocked (0: not). At once with the memory counter: no promise on the refusal path.
     */
    function countFailure(client: string, now: number): number | Promise<number> {
      if (config.authFailureLimit === 0) return 0
      const block = ({ count, resetMs }: Hit) => {
        if (count <= config.authFailureLimit) return 0
        blocked.set(client, now + resetMs)
        return resetMs
      }
      const hit = app.rateCounter.hit(`auth-failure:${client}`, config.rateLimitWindowMs)
      return hit instanceof Promise ? hit.then(block) : block(hit)
    }

    /** 429 for a client blocked for another `ms`. */
    function tooMany(reply: FastifyReply, ms: number, done: Done): void {
      app.metrics?.rateLimited('auth_failures')
      reply.header('retry-after', String(Math.ceil(ms / 1000)))
      done(TOO_MANY_FAILURES)
    }

    /**
     * Admits the request as the key's caller, or refuses it. A bad key counts against the client's
     * address, and an address past the limit gets 429 for its bad keys; its valid keys are still
     * served, since one address may be many clients (a NAT, a proxy).
     */
    function settle(
      request: FastifyRequest,
      reply: FastifyReply,
      verdict: CachedKey | ApiError,
      now: number,
      done: Done,
    ): void {
      if (verdict instanceof ApiError) {
        if (verdict === MISSING) return void done(verdict)
        const client = clientNetwork(request.ip)
        const blockMs = blockedFor(client, now)
        if (blockMs > 0) return void tooMany(reply, blockMs, done)
        const counted = countFailure(client, now)
        const answer = (ms: number) => (ms > 0 ? tooMany(reply, ms, done) : done(verdict))
        if (typeof counted === 'number') answer(counted)
        else counted.then(answer, done)
        return
      }
      request.caller = verdict.caller
      if (now - verdict.touchedAtMs >= TOUCH_INTERVAL_MS) {
        verdict.touchedAtMs = now
        usage.set(verdict.key.id, new Date(now).toISOString())
      }
      done()
    }

    app.decorate('admits', (authorization: string | undefined) => {
      const now = Date.now()
      const verdict = verifyCached(authorization, now)
      if (typeof verdict !== 'string') return !(verdict instanceof ApiError)
      return lookup(verdict, now).then((entry) => !(admission(entry, now) instanceof ApiError))
    })

    app.decorateRequest('caller', null as unknown as Caller)
    // Callback style, and synchronous for a cached key: almost every request costs no promise here.
    app.decorate('authenticate', (request: FastifyRequest, reply: FastifyReply, done: Done) => {
      const now = Date.now()
      const verdict = verifyCached(request.headers.authorization, now)
      if (typeof verdict !== 'string') return settle(request, reply, verdict, now, done)
      // Only the store can tell. An address blocked for bad keys gets no lookups (they are what the
      // block saves), except for a key this process has found valid before: its clients behind the
      // same NAT or proxy go on being served.
      const blockMs = cache.has(verdict) ? 0 : blockedFor(clientNetwork(request.ip), now)
      if (blockMs > 0) return tooMany(reply, blockMs, done)
      lookup(verdict, now).then((entry) => settle(request, reply, admission(entry, now), now, done), done)
    })
  },
  { name: 'auth', dependencies: ['store', 'rate-limit'] },
)

/** What a cached or looked-up key gets now: admitted (its entry), or why not. */
function admission(entry: CachedKey | null, now: number): CachedKey | ApiError {
  if (!entry) return UNKNOWN
  if (entry.key.revokedAt) return REVOKED
  if (now >= entry.expiresAtMs) return EXPIRED
  return entry
}

/** A refusal with RFC 6750's challenge: `invalid_token` for a key that is not good, `invalid_request` for a malformed header. */
function refused(code: ErrorCode, message?: string, reason = 'invalid_token'): ApiError {
  const error = new ApiError(code, message)
  error.headers = {
    'www-authenticate': `Bearer realm="${REALM}", error="${reason}", error_description="${error.message.replace(/["\\]/g, "'")}"`,
  }
  return error
}

// Every refusal is one of these, made once and never changed: a flood of bad keys then costs no
// Error (its stack trace was the largest single cost of a refusal) nor challenge text per request.
const MISSING = new ApiError('missing_api_key', undefined, { 'www-authenticate': `Bearer realm="${REALM}"` })
const MALFORMED_HEADER = refused(
  'invalid_api_key',
  'The Authorization header must be: Bearer <API_KEY>.',
  'invalid_request',
)
const MALFORMED_KEY = refused('invalid_api_key', 'The API key is malformed.')
const UNKNOWN = refused('invalid_api_key', 'The API key is not known.')
const REVOKED = refused('revoked_api_key')
const EXPIRED = refused('expired_api_key')
/** Its Retry-After is set on the reply: it is all that differs between two such refusals. */
const TOO_MANY_FAILURES = new ApiError('rate_limited', 'Too many requests with invalid API keys from this address.')
