/**
 * Bearer API keys (RFC 6750). `app.authenticate` is an onRequest hook: it runs before the body is
 * read or validated, so a bad key gets 401 whatever else is wrong with the request.
 *
 * Verified keys are cached in memory for `apiKeyCacheMs`, so a request costs one SHA-256 and a map
 * lookup, not a database round-trip. That bounds how long another process's revocation takes to be
 * seen; a revocation through this process (`app.forgetApiKey`) and an expiry take effect at once.
 */
import type { FastifyReply, FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import { apiKeyDeployment, hashApiKey } from '../api-keys.ts'
import type { Config } from '../config.ts'
import { ApiError, type ErrorCode } from '../errors.ts'
import type { ApiKey } from '../store/types.ts'

export interface Caller {
  keyId: string
  accountId: number
}

declare module 'fastify' {
  interface FastifyInstance {
    authenticate: (request: FastifyRequest, reply: FastifyReply) => Promise<void>
    /** Drops a key from the cache after it was revoked here, so it is refused at once. */
    forgetApiKey: (keyId: string) => void
  }
  interface FastifyRequest {
    /** The verified API key of an authenticated request. */
    caller: Caller
  }
}

interface CachedKey {
  key: ApiKey
  expiresAtMs: number
  verifiedAtMs: number
}

/** Enough for every active key of a large deployment; beyond it the oldest entries are dropped. */
const CACHE_ENTRIES = 10_000
const REALM = 'animal-store'
const BEARER = /^Bearer +([^\s]+) *$/i

export default fp<{ config: Config }>(
  async (app, { config }) => {
    const cache = new Map<string, CachedKey>()

    async function lookup(hash: string, now: number): Promise<CachedKey | null> {
      const cached = cache.get(hash)
      if (cached && now - cached.verifiedAtMs < config.apiKeyCacheMs) return cached
      const key = await app.store.findApiKeyByHash(hash)
      if (!key) {
        cache.delete(hash)
        return null
      }
      const entry = { key, expiresAtMs: key.expiresAt ? Date.parse(key.expiresAt) : Infinity, verifiedAtMs: now }
      if (cache.size >= CACHE_ENTRIES) cache.delete(cache.keys().next().value as string)
      cache.set(hash, entry)
      return entry
    }

    app.decorate('forgetApiKey', (keyId: string) => {
      for (const [hash, entry] of cache) if (entry.key.id === keyId) cache.delete(hash)
    })

    app.decorateRequest('caller', null as unknown as Caller)
    app.decorate('authenticate', async (request: FastifyRequest) => {
      const header = request.headers.authorization
      if (!header) {
        throw new ApiError('missing_api_key', undefined, { 'www-authenticate': `Bearer realm="${REALM}"` })
      }
      const secret = BEARER.exec(header)?.[1]
      if (!secret) throw refused('invalid_api_key', 'The Authorization header must be: Bearer <API_KEY>.')
      const deployment = apiKeyDeployment(secret)
      if (!deployment) throw refused('invalid_api_key', 'The API key is malformed.')
      if (deployment !== config.deployment) {
        throw refused('invalid_api_key', `This is a ${deployment} key; this is the ${config.deployment} deployment.`)
      }
      const now = Date.now()
      const entry = await lookup(hashApiKey(secret), now)
      if (!entry) throw refused('invalid_api_key', 'The API key is not known.')
      if (entry.key.revokedAt) throw refused('revoked_api_key')
      if (now >= entry.expiresAtMs) throw refused('expired_api_key')
      request.caller = { keyId: entry.key.id, accountId: entry.key.accountId }
    })
  },
  { name: 'auth', dependencies: ['store'] },
)

function refused(code: ErrorCode, message?: string): ApiError {
  const error = new ApiError(code, message)
  error.headers = {
    'www-authenticate': `Bearer realm="${REALM}", error="invalid_token", error_description="${error.message.replace(/["\\]/g, "'")}"`,
  }
  return error
}
