/**
 * Every error response goes through here, so every one is `{code, message, status}` JSON:
 * thrown ApiErrors, Fastify's own (validation, bad JSON, 413, 415), unknown routes (404),
 * known paths with the wrong method (405 + Allow) and unexpected failures (500, masked, logged).
 */
import { STATUS_CODES } from 'node:http'
import type { Socket } from 'node:net'
import type { FastifyReply, FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import { redactApiKeys } from '../api-keys.ts'
import { ApiError, ERRORS, type ErrorCode, toApiError, toErrorBody } from '../errors.ts'

/**
 * Requests Node's HTTP parser rejects before Fastify sees them (malformed, headers too large, too
 * slow) still get the Error body, written straight to the socket. Passed as `clientErrorHandler`.
 */
export function clientErrorHandler(error: Error & { code?: string }, socket: Socket): void {
  if (error.code === 'ECONNRESET' || error.code === 'EPIPE' || !socket.writable) {
    socket.destroy()
    return
  }
  const code: ErrorCode =
    error.code === 'HPE_HEADER_OVERFLOW'
      ? 'headers_too_large'
      : error.code === 'ERR_HTTP_REQUEST_TIMEOUT'
        ? 'request_timeout'
        : 'bad_request'
  const [status, message] = ERRORS[code]
  const body = JSON.stringify({ code, message, status })
  socket.end(
    `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nContent-Type: application/json; charset=utf-8\r\n` +
      `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
  )
}

/**
 * Sends any error as the Error body, logging 5xx at error (with the cause) and 4xx at info.
 * Also Fastify's `frameworkErrors` handler, for URLs it cannot decode before routing.
 */
export function sendError(error: unknown, request: FastifyRequest, reply: FastifyReply): FastifyReply {
  const sent = toApiError(error)
  if (sent.statusCode >= 500) request.log.error({ err: error }, 'request failed')
  // A message can echo what the client sent (a field name, a path): mask anything shaped like a key.
  else request.log.info({ code: sent.code, detail: redactApiKeys(sent.message) }, 'request refused')
  if (sent.headers) reply.headers(sent.headers)
  return reply.code(sent.statusCode).header('x-request-id', request.id).send(toErrorBody(sent))
}

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

    app.setErrorHandler(sendError)
  },
  { name: 'errors' },
)
