/**
 * Authorization by scope (decision 77): a route names the scope it needs in `config.scope`; a key
 * without it gets 403 `insufficient_scope` with the RFC 6750 §3.1 challenge naming the scope. The
 * OpenAPI document lists each operation's scope in its security requirement.
 */
import type { onRequestHookHandler } from 'fastify'
import fp from 'fastify-plugin'
import type { Scope } from '../domain/scopes.ts'
import { ApiError } from '../errors.ts'
import { errorResponses } from '../schemas/common.ts'

declare module 'fastify' {
  interface FastifyContextConfig {
    scope?: Scope
  }
}

/** 403 `insufficient_scope` with the RFC 6750 §3.1 challenge naming `scope`. */
export function insufficientScope(scope: Scope, message = `This API key lacks the scope ${scope}.`): ApiError {
  return new ApiError('insufficient_scope', message, {
    'www-authenticate': `Bearer realm="animal-store", error="insufficient_scope", scope="${scope}"`,
  })
}

export default fp(
  async (app) => {
    app.addHook('onRoute', (route) => {
      const scope = route.config?.scope
      if (!scope) return
      const { default: _, ...forbidden } = errorResponses(403)
      const response = { ...(route.schema?.response as object), ...forbidden }
      route.schema = { ...route.schema, security: [{ bearerAuth: [scope] }], response }
      const refusal = insufficientScope(scope)
      // After the key check (the route's plugin hooks run first), so request.caller is set.
      const authorize: onRequestHookHandler = (request, _reply, done) => {
        const granted = request.caller.scopes
        done(granted === null || granted.has(scope) ? undefined : refusal)
      }
      route.onRequest = [...[route.onRequest ?? []].flat(), authorize]
    })
  },
  { name: 'scopes', dependencies: ['auth'] },
)
