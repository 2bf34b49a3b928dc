/**
 * Every error response goes through here, so every one is `{code, message, status}` JSON:
 * thrown ApiErrors, Fastify's own (validation, bad JSON, 413, 415), unknown routes (404),
 * known paths with the wrong method (405 + Allow) and unexpected failures (500, masked, logged).
 */
import fp from 'fastify-plugin'
import { ApiError, toErrorBody } from '../errors.ts'

export default fp(
  async (app) => {
    // Paths and methods of every route, to tell "no such path" (404) from "wrong method" (405).
    const routes: { pattern: RegExp; methods: string[] }[] = []
    app.addHook('onRoute', (route) => {
      const source = route.url.replace(/[.*+?^${}()|[\]\\]/g, '\\$&').replace(/:[^/]+/g, '[^/]+')
      const pattern = new RegExp(`^${source}$`)
      const methods = ([] as string[]).concat(route.method)
      const existing = routes.find((r) => r.pattern.source === pattern.source)
      if (existing) existing.methods.push(...methods)
      else routes.push({ pattern, methods })
    })

    app.setNotFoundHandler((request) => {
      const path = request.url.split('?')[0] as string
      const allowed = routes.find((r) => r.pattern.test(path))?.methods
      if (allowed && !allowed.includes(request.method)) {
        const allow = [...new Set(allowed)].sort().join(', ')
        throw new ApiError('method_not_allowed', `${request.method} is not allowed on ${path}; allowed: ${allow}.`, {
          allow,
        })
      }
      throw new ApiError('not_found', `No route for ${request.method} ${path}.`)
    })

    app.setErrorHandler((error, request, reply) => {
      const body = toErrorBody(error)
      if (body.status >= 500) request.log.error({ err: error }, 'request failed')
      else request.log.info({ code: body.code, detail: body.message }, 'request refused')
      if (error instanceof ApiError && error.headers) reply.headers(error.headers)
      return reply.code(body.status).send(body)
    })
  },
  { name: 'errors' },
)
