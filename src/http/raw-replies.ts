/**
 * Answers written straight to the socket, for requests that never reach Fastify: what Node's parser
 * refuses (malformed, headers too large, too slow), a body that breaks off, `Expect` other than
 * 100-continue, and CONNECT. Each is the Error body, logged as `request refused` (decision 52).
 */
import { randomUUID } from 'node:crypto'
import type { IncomingMessage, Server, ServerResponse } from 'node:http'
import type { Socket } from 'node:net'
import { type Duplex, finished } from 'node:stream'
import type { FastifyBaseLogger, FastifyInstance } from 'fastify'
import { redactApiKeys } from '../domain/api-keys.ts'
import { ApiError, ERRORS, type ErrorCode, toErrorBody } from '../errors.ts'
import { lingeringClose } from './lingering-close.ts'
import { lastAnswer } from './pipelining.ts'
import { failBody } from './request-body.ts'

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
  const request = pending?.req
  // The body of the request being answered went wrong (a bad chunk, the client closed its side
  // halfway, the deadline): no more of this connection can be read. That request is answered by its
  // route, now if it is reading the body, or as soon as it begins to (its hooks, such as a key
  // lookup, may still be running); the connection ends with that answer, whatever it is.
  if (pending && request && !request.complete) {
    if (failBody(request, bodyError(error))) return
    pending.shouldKeepAlive = false
    if (pending.writableFinished) lingeringClose(socket)
    else pending.once('finish', () => lingeringClose(socket))
    return
  }
  const answer = clientErrorAnswer(error, (code, message) => rawErrorResponse(this.log, socket, code, message))
  // Answers go in request order (RFC 9112 §9.3.2): a request before the bad one, still being
  // answered, is answered first. If that answer closes the connection, there is no one left to tell.
  // The client may still be sending (headers too large, a body): the close lingers.
  const send = () => {
    if (!socket.writable || socket.writableEnded) return
    socket.write(answer)
    lingeringClose(socket)
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
