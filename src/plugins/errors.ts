/**
 * Every error response goes through here, so every one is `{code, message, status}` JSON:
 * thrown ApiErrors, Fastify's own (validation, bad JSON, 413, 415), unknown routes (404),
 * known paths with the wrong method (405 + Allow) and unexpected failures (500, masked, logged).
 */
import { randomUUID } from 'node:crypto'
import type { IncomingMessage, Server, ServerResponse } from 'node:http'
import type { Socket } from 'node:net'
import { type Duplex, finished } from 'node:stream'
import type { FastifyBaseLogger, FastifyInstance, FastifyReply, FastifyRequest, onRequestHookHandler } from 'fastify'
import fp from 'fastify-plugin'
import { redactApiKeys } from '../api-keys.ts'
import { ApiError, ERRORS, type ErrorCode, toApiError, toErrorBody } from '../errors.ts'
import { lastAnswer } from '../pipelining.ts'
import { DatabaseUnavailableError } from '../store/types.ts'
import { OPENAPI_PATH } from './openapi.ts'
import { BODY_FAILED, type BodyRequest, hasBody, REFUSE_BODY } from './request-body.ts'

// Not `import { STATUS_CODES } from 'node:http'`: building node:http's ES module namespace reads
// its lazy WebSocket export, which loads Node's bundled undici (fetch) and web streams, about
// 13 MB of RSS that nothing here uses. The CommonJS exports object reads no export.
const { STATUS_CODES, METHODS, maxHeaderSize } = process.getBuiltinModule('node:http')

/**
 * A well-formed request line, its method and version: with a method Node does not know, that is
 * 501, and with another major version than 1 (Node's parser refuses HTTP/3.0) 505, not malformed HTTP.
 */
const REQUEST_LINE = /^(?:\r\n)*([!#$%&'*+.^_`|~0-9A-Za-z-]+) [^ \r\n]+ HTTP\/(\d)\.(\d)\r\n/

/** How long a socket answered by hand may take to receive its answer before it is destroyed. */
const RAW_SOCKET_GRACE_MS = 5000

/**
 * The Error response to a request that never reaches Fastify: status, headers and body. It is
 * logged as `request refused`, like the others, under the request id the answer carries, so that
 * a client quoting it can be found.
 */
function rawError(log: FastifyBaseLogger, socket: Socket | undefined, code: ErrorCode, message?: string) {
  const error = new ApiError(code, message)
  const body = JSON.stringify(toErrorBody(error))
  const headers = {
    // Every 4xx answer carries a Date (RFC 9110 §6.6.1), these written by hand too.
    date: new Date().toUTCString(),
    'content-type': 'application/json; charset=utf-8',
    'content-length': String(Buffer.byteLength(body)),
    'x-request-id': randomUUID(),
    connection: 'close',
  }
  const status = ERRORS[code][0]
  const { remoteAddress } = socket ?? {}
  const detail = redactApiKeys(error.message)
  log.info({ requestId: headers['x-request-id'], remoteAddress, status, code, detail }, 'request refused')
  return { status, headers, body }
}

/** The same, as the bytes to write straight to a socket. */
function rawErrorResponse(log: FastifyBaseLogger, socket: Socket, code: ErrorCode, message?: string): string {
  const { status, headers, body } = rawError(log, socket, code, message)
  const lines = Object.entries(headers).map(([name, value]) => `${name}: ${value}\r\n`)
  return `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\n${lines.join('')}\r\n${body}`
}

/**
 * The response a socket is writing, if any: Node's own `_httpMessage` (http-terminator reads it
 * too). The next waiting response of a pipelined connection takes its place when it finishes.
 */
export function responseOn(socket: Duplex): ServerResponse | null | undefined {
  return (socket as Duplex & { _httpMessage?: ServerResponse | null })._httpMessage
}

/**
 * Requests Node's HTTP parser rejects before Fastify sees them (malformed, headers too large, too
 * slow) still get the Error body, written straight to the socket. Passed as `clientErrorHandler`.
 */
export function clientErrorHandler(this: FastifyInstance, error: Error & { code?: string }, socket: Socket): void {
  if (error.code === 'ECONNRESET' || error.code === 'EPIPE' || !socket.writable) {
    socket.destroy()
    return
  }
  // The answer of the last request read: with pipelining, others may be waiting behind the one
  // being written, and the refusal must come after all of them.
  const pending = lastAnswer(socket) ?? responseOn(socket)
  const request = pending?.req as BodyRequest | undefined
  // The body of the request being answered went wrong (a bad chunk, the client closed its side
  // halfway, the deadline): no more of this connection can be read. That request is answered by its
  // route, now if it is reading the body, or as soon as it begins to (its hooks, such as a key
  // lookup, may still be running); the connection ends with that answer, whatever it is.
  if (pending && request && !request.complete) {
    const refusal = bodyError(error)
    if (request[REFUSE_BODY]?.(refusal)) return
    request[BODY_FAILED] = refusal
    pending.shouldKeepAlive = false
    if (pending.writableFinished) socket.end()
    else pending.once('finish', () => socket.end())
    return
  }
  const answer = clientErrorAnswer(error, (code, message) => rawErrorResponse(this.log, socket, code, message))
  // Answers go in request order (RFC 9112 §9.3.2): a request before the bad one, still being
  // answered, is answered first. If that answer closes the connection, there is no one left to tell.
  const send = () => {
    if (socket.writable && !socket.writableEnded) socket.end(answer)
  }
  if (pending && !pending.writableFinished) pending.once('finish', send)
  else send()
}

/** The line of the bytes given to Node's parser that it failed in (`rawPacket` and `bytesParsed` of a clientError). */
function failedLine(error: Error & { rawPacket?: unknown; bytesParsed?: unknown }): string {
  const { rawPacket, bytesParsed } = error
  if (!Buffer.isBuffer(rawPacket)) return ''
  const at = typeof bytesParsed === 'number' ? Math.min(bytesParsed, rawPacket.length) : 0
  return rawPacket.subarray(at > 0 ? rawPacket.lastIndexOf(0x0a, at - 1) + 1 : 0).toString('latin1')
}

function bodyError(error: Error & { code?: string }): ApiError {
  if (error.code === 'HPE_INVALID_EOF_STATE') {
    return new ApiError('bad_request', 'The connection was closed before the whole body arrived.')
  }
  if (error.code === 'ERR_HTTP_REQUEST_TIMEOUT') return new ApiError('request_timeout')
  // Trailer fields count against the same limit as the headers (Node's maxHeaderSize).
  if (error.code === 'HPE_HEADER_OVERFLOW') {
    return new ApiError('headers_too_large', `The trailer fields are larger than the limit of ${maxHeaderSize} bytes.`)
  }
  return new ApiError('bad_request', "The body's chunked encoding is malformed (RFC 9112 §7.1).")
}

function clientErrorAnswer(
  error: Error & { code?: string },
  rawErrorResponse: (code: ErrorCode, message?: string) => string,
): string {
  if (error.code === 'HPE_HEADER_OVERFLOW') {
    const message = `The request line and headers are larger than the limit of ${maxHeaderSize} bytes.`
    return rawErrorResponse('headers_too_large', message)
  }
  // A well-formed request line whose method Node does not know, or whose major version is not 1
  // (anything else is malformed). The line is the one the parser stopped in: requests pipelined
  // before it came in the same bytes.
  const [, method, major, minor] = REQUEST_LINE.exec(failedLine(error)) ?? []
  if (error.code === 'HPE_INVALID_METHOD' && major === '1' && Number(minor) <= 1 && !METHODS.includes(method ?? '')) {
    return rawErrorResponse('not_implemented', 'This method is not supported (RFC 9110 §9.1).')
  }
  if (error.code === 'HPE_INVALID_VERSION' && Number(major) >= 2) {
    return rawErrorResponse('http_version_not_supported')
  }
  if (error.code === 'HPE_INVALID_URL') {
    const where = / (query|path|fragment)$/.exec(error.message)?.[1]
    return rawErrorResponse(
      'bad_request',
      `The request target${where ? `'s ${where}` : ''} holds a character that must be percent-encoded (a control, or one outside ASCII: RFC 3986 §2.1).`,
    )
  }
  return rawErrorResponse(error.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? 'request_timeout' : 'bad_request')
}

/**
 * Requests Node answers itself unless told otherwise: an `Expect` other than 100-continue (417)
 * and CONNECT (this is not a proxy). Both get the Error body too.
 */
export function rawErrorResponses(server: Server, log: FastifyBaseLogger): void {
  server.on('checkExpectation', (request: IncomingMessage, response: ServerResponse) => {
    const { status, headers, body } = rawError(log, request.socket, 'expectation_failed')
    response.writeHead(status, headers).end(body)
  })
  // Node hands a CONNECT socket over bare (no error listener, no timeout): answer, then close it
  // outright, whatever the client does, so that it can neither crash the process nor hold a slot.
  server.on('connect', (request: IncomingMessage, socket: Duplex) => {
    socket.on('error', () => socket.destroy())
    const answer = rawErrorResponse(
      log,
      request.socket,
      'bad_request',
      'CONNECT is not supported: this is not a proxy.',
    )
    const send = () => {
      socket.end(answer, () => socket.destroy())
      setTimeout(() => socket.destroy(), RAW_SOCKET_GRACE_MS).unref()
    }
    // Answers go in request order (RFC 9112 §9.3.2): requests pipelined before the CONNECT, still
    // being answered on this socket, are answered first (their writes may be committed already).
    // Node gives the socket to the next waiting answer as each one finishes.
    const afterPending = () => {
      const pending = responseOn(socket)
      // One destroyed unfinished (the client went) would call back at once, forever: send instead.
      if (pending && !pending.writableFinished && !pending.destroyed && !socket.destroyed)
        finished(pending, afterPending)
      else send()
    }
    afterPending()
  })
}

/**
 * `/v1/pets/` matches `/v1/pets/:petId` with an empty id, which fails validation: but no such
 * path is documented, so it is 404 like any other unknown path (decision 26).
 */
function emptyPathParameter(error: unknown, request: FastifyRequest): boolean {
  if ((error as { validationContext?: unknown } | null)?.validationContext !== 'params') return false
  return Object.values(request.params as Record<string, unknown>).includes('')
}

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

/** `http://host/v1/pets` → `/v1/pets`: a target in absolute form, as the router reads it. */
export function originForm(url: string): string {
  return url.charCodeAt(0) === 47 /* / */ ? url : url.replace(/^https?:\/\/[^/?#]*/i, '')
}

export type UnroutedHandler = (error: Error, request: FastifyRequest, reply: FastifyReply) => void

/** Who answers unroutable requests under which path prefix, per HTTP server (the app's and each test's). */
const unrouted = new WeakMap<Server, [prefix: string, handler: UnroutedHandler][]>()

/**
 * Lets a part of the app answer, under its own path prefix, the requests Fastify cannot route (an
 * undecodable URL such as `%zz`, a parameter too long). They reach only the root instance, outside
 * every plugin's hooks and decorations, through `frameworkError`.
 */
export function answerUnrouted(server: Server, prefix: string, handler: UnroutedHandler): void {
  unrouted.set(server, [...(unrouted.get(server) ?? []), [prefix, handler]])
}

/** Fastify's `frameworkErrors` handler: the part of the app that owns the path answers, or a plain Error 400. */
export function frameworkError(error: Error, request: FastifyRequest, reply: FastifyReply): void {
  const path = originForm(request.url)
  const owner = unrouted.get(request.server.server)?.find(([prefix]) => path.startsWith(prefix))
  const handler = owner?.[1] ?? sendError
  handler(error, request, reply)
}

/**
 * Logs an error answered as `sent`: failures (5xx) at error, with the stack; a database outage at
 * warn, in one line; answers we chose (4xx, 501, our own 503s) at info. `what` names the request
 * in the message ("portal request failed").
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
    // A message can echo what the client sent (a field name, a path): mask anything shaped like a key.
    request.log.info({ code: sent.code, detail: redactApiKeys(sent.message) }, `${what} refused`)
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
  interface FastifyContextConfig {
    /** Sets headers every answer of the route carries: its handler calls it, and sendError for every error. */
    answerHeaders?: (request: FastifyRequest, reply: FastifyReply) => unknown
  }
  interface FastifyInstance {
    /** Why a request no route takes is refused: 405 with its Allow header when the path exists, else 404. */
    unroutedError: (request: FastifyRequest) => ApiError
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

    app.setErrorHandler(sendError)
    answerUnrouted(app.server, '/v1/', (error, request, reply) => {
      if (!needsKey(request.url)) return void sendError(error, request, reply)
      app.authenticate(request, reply, (refused) => {
        if (refused) return void sendError(refused, request, reply)
        app.rateLimit(request, reply, (limited) => sendError(limited ?? error, request, reply))
      })
    })
  },
  { name: 'errors' },
)
