/**
 * Requests no route takes: 405 with Allow when the path exists with other methods, else 404, and
 * `OPTIONS *`. They are refused before any body is read, and under /v1 only after the key check
 * (decisions 9, 25, 51). The table of paths is ours: Fastify's findRoute and hasRoute look up a
 * route's pattern, not the methods a request path would match (decision 73).
 */
import type { FastifyReply, FastifyRequest, onRequestHookHandler } from 'fastify'
import fp from 'fastify-plugin'
import { ApiError } from '../errors.ts'
import { originForm } from '../http/framing.ts'
import { sendError } from './error-handler.ts'
import { OPENAPI_PATH } from './openapi.ts'

function decodedPath(path: string): string {
  if (!path.includes('%')) return path
  try {
    return decodeURI(path)
  } catch {
    return path
  }
}

/** Under /v1 the key is checked before anything else about a request, even on unknown routes. */
function needsKey(url: string): boolean {
  // Decoded as the router decodes it: `/%761/pets` is /v1/pets.
  const path = decodedPath(originForm(url).split('?')[0] as string)
  return (path === '/v1' || path.startsWith('/v1/')) && path !== OPENAPI_PATH
}

export type UnroutedHandler = (error: Error, request: FastifyRequest, reply: FastifyReply) => void

/**
 * Fastify's `frameworkErrors` handler, for requests it cannot route (an undecodable URL such as
 * `%zz`, a parameter too long): they reach only the root instance, outside every plugin's hooks, so
 * the part of the app that owns the path answers (answerUnrouted), or a plain Error 400.
 */
export function frameworkError(error: Error, request: FastifyRequest, reply: FastifyReply): void {
  request.server.unroutable(error, request, reply)
}

declare module 'fastify' {
  interface FastifyInstance {
    /** Why a request no route takes is refused: 405 with its Allow header when the path exists, else 404. */
    unroutedError: (request: FastifyRequest) => ApiError
    /** Lets a part of the app answer, under its own path prefix, the requests Fastify cannot route. */
    answerUnrouted: (prefix: string, handler: UnroutedHandler) => void
    unroutable: UnroutedHandler
  }
}

export default fp(
  async (app) => {
    // Paths and methods of every route, to tell "no such path" (404) from "wrong method" (405).
    const routes: { pattern: RegExp; methods: string[] }[] = []
    const addRoute = (url: string, methods: string[]) => {
      const source = url.replace(/[.*+?^${}()|[\]\\]/g, '\\$&').replace(/:[^/]+/g, '[^/]+')
      const pattern = new RegExp(`^${source}$`)
      const existing = routes.find((r) => r.pattern.source === pattern.source)
      if (existing) existing.methods.push(...methods)
      else routes.push({ pattern, methods: [...methods] })
    }
    app.addHook('onRoute', (route) => {
      const methods = ([] as string[]).concat(route.method)
      addRoute(route.url, methods)
      // A plugin's "/" route answers at its prefix with and without the slash (`/docs`, `/docs/`).
      if (route.prefix && route.url === route.prefix) addRoute(`${route.prefix}/`, methods)
    })

    /** 405 with Allow when the path exists with other methods, else 404. */
    const routeError = (request: FastifyRequest): ApiError => {
      // RFC 10008 §2: a QUERY request must say what its body is, whatever the path.
      if (request.method === 'QUERY' && request.headers['content-type'] === undefined) {
        return new ApiError('bad_request', 'A QUERY request needs a Content-Type (RFC 10008 §2).')
      }
      const path = request.url.split('?')[0] as string
      // The router matched the decoded path (`/v1/%70ets` is `/v1/pets`): so do we.
      const allowed = routes.find((r) => r.pattern.test(decodedPath(path)))?.methods
      if (allowed && !allowed.includes(request.method)) {
        const allow = [...new Set(allowed)].sort().join(', ')
        const message = `${request.method} is not allowed on ${path}; allowed: ${allow}.`
        return new ApiError('method_not_allowed', message, { allow })
      }
      return new ApiError('not_found', `No route for ${request.method} ${path}.`)
    }
    app.decorate('unroutedError', routeError)
    const notFound = async (request: FastifyRequest) => {
      throw routeError(request)
    }
    // Unknown routes are answered from an onRequest hook, before any body is read or parsed: what
    // a body holds cannot change a 404 or 405, and no one gets to make us parse it. Under /v1 the
    // key comes first (and a valid key's request is counted, as any other). Each scope below holds
    // only a not-found handler, so the real routes never run this hook.
    const refuseUnrouted: onRequestHookHandler = (request, reply, done) => {
      // `OPTIONS *` asks about the server itself (RFC 9110 §9.3.7): the methods some route takes.
      if (request.url === '*' && request.method === 'OPTIONS') {
        const allow = [...new Set(routes.flatMap((r) => r.methods))].sort().join(', ')
        return void reply.code(204).header('allow', allow).send()
      }
      if (!needsKey(request.url)) return done(routeError(request))
      app.authenticate(request, reply, (refused) => {
        if (refused) return done(refused)
        app.rateLimit(request, reply, (limited?: Error) => done(limited ?? routeError(request)))
      })
    }
    // The root's too: the router may take `/%761/pets` for /v1 only once decoded.
    for (const prefix of ['', '/v1']) {
      await app.register(
        async (scope) => {
          scope.addHook('onRequest', refuseUnrouted)
          scope.setNotFoundHandler(notFound)
        },
        { prefix },
      )
    }

    const owners: [prefix: string, handler: UnroutedHandler][] = []
    app.decorate('answerUnrouted', (prefix: string, handler: UnroutedHandler) => {
      owners.push([prefix, handler])
    })
    app.decorate('unroutable', (error: Error, request: FastifyRequest, reply: FastifyReply) => {
      const path = originForm(request.url)
      const owner = owners.find(([prefix]) => path.startsWith(prefix))
      ;(owner?.[1] ?? sendError)(error, request, reply)
    })
    app.answerUnrouted('/v1/', (error, request, reply) => {
      if (!needsKey(request.url)) return void sendError(error, request, reply)
      app.authenticate(request, reply, (refused) => {
        if (refused) return void sendError(refused, request, reply)
        app.rateLimit(request, reply, (limited) => sendError(limited ?? error, request, reply))
      })
    })
  },
  { name: 'unrouted', dependencies: ['error-handler', 'auth', 'rate-limit'] },
)
