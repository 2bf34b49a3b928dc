/**
 * The one mapper to `{code, message, status}`: every error Fastify or a route raises is sent here,
 * through toApiError (src/errors.ts), and logged once; a 5xx is masked and logged with its stack.
 */
import type { FastifyReply, FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import { ApiError, DatabaseUnavailableError, toApiError, toErrorBody } from '../errors.ts'
import { hasBody } from '../http/request-body.ts'

/**
 * `/v1/pets/` matches `/v1/pets/:petId` with an empty id, which fails validation: but no such
 * path is documented, so it is 404 like any other unknown path (decision 26).
 */
function emptyPathParameter(error: unknown, request: FastifyRequest): boolean {
  if ((error as { validationContext?: unknown } | null)?.validationContext !== 'params') return false
  return Object.values(request.params as Record<string, unknown>).includes('')
}

/**
 * Logs an error answered as `sent`: failures (5xx) at error, with the stack; a database outage at
 * warn, in one line; answers we chose (4xx, 501, our own 503s) in the request's line, at info.
 * `what` names the request in a failure's message ("portal request failed").
 */
export function logError(error: unknown, sent: ApiError, request: FastifyRequest, what = 'request'): void {
  if (error instanceof DatabaseUnavailableError) {
    // An outage fails every request alike, thousands a second: one line each, without a stack (it
    // is always the store's), at warn. The store's own error says what is down.
    request.log.warn({ code: sent.code, detail: error.message }, 'database unavailable')
  } else if (sent.statusCode >= 500 && sent.code !== 'not_implemented' && !(error instanceof ApiError)) {
    // (A 501 is the client's doing, a method or coding we do not take, not a failure of ours; an
    // ApiError is an answer we chose, such as /readyz's 503 while shutting down.)
    request.log.error({ err: error }, `${what} failed`)
  } else {
    // An answer we chose says why in the request's own line (src/observability/request-log.ts,
    // which masks anything shaped like a key): a second line cost more than the rest of a refusal
    // (decision 84).
    request.refusal = sent
  }
}

/** Sends any error as the Error body, logged by logError. */
export function sendError(error: unknown, request: FastifyRequest, reply: FastifyReply): FastifyReply {
  // An empty path parameter (`/v1/pets/`) is no route at all: it gets none of the route's own headers.
  const noRoute = emptyPathParameter(error, request)
  const sent = noRoute
    ? new ApiError('not_found', `No route for ${request.method} ${request.url.split('?')[0]}.`)
    : toApiError(error)
  if (sent.code === 'payload_too_large') {
    sent.message = `The request body is larger than this operation's limit of ${request.routeOptions.bodyLimit} bytes.`
  }
  logError(error, sent, request)
  if (sent.headers) reply.headers(sent.headers)
  if (!noRoute) request.routeOptions.config.answerHeaders?.(request, reply)
  // Refused before its body arrived (a bad key, a wrong path): the connection ends with the answer,
  // instead of Node draining the rest of a body nobody reads, however long.
  if (!request.raw.complete && hasBody(request.headers)) reply.header('connection', 'close')
  return reply.code(sent.statusCode).header('x-request-id', request.id).send(toErrorBody(sent))
}

declare module 'fastify' {
  interface FastifyRequest {
    /** An answer we chose (a 4xx, 501, our own 503) sent: the request log gives its code and detail (logError). */
    refusal: ApiError | null
  }
  interface FastifyContextConfig {
    /** Sets headers every answer of the route carries: its handler calls it, and sendError for every error. */
    answerHeaders?: (request: FastifyRequest, reply: FastifyReply) => unknown
  }
}

export default fp(
  async (app) => {
    app.decorateRequest('refusal', null)
    app.setErrorHandler(sendError)
  },
  { name: 'error-handler' },
)
