/**
 * Request bodies. They must arrive within REQUEST_TIMEOUT_SECONDS (408): Node's own request timeout
 * stops counting once the headers are in, so a client that stalls halfway through its body would
 * hold the request until the socket idles out, with no answer.
 *
 * API bodies are JSON text in UTF-8 (RFC 8259 §8.1), as sent: Fastify's parser (with `__proto__`
 * and `constructor` keys refused) behind checks that nothing was decoded by guesswork. A JSON Merge
 * Patch (`application/merge-patch+json`, RFC 7396) is JSON under the same rules, taken by PATCH only.
 *
 * - bytes that are not UTF-8, and `\uD800`-style escapes of lone surrogates, are 400 `invalid_json`
 *   instead of turning silently into U+FFFD when stored;
 * - a `charset` other than UTF-8, or any `Content-Encoding`, is 415: we would decode it wrongly;
 * - a number that is not an integer but reads as one (`1.0000000000000001` parses to 1) is made
 *   NaN, so that an integer field refuses it instead of storing the rounded value;
 * - an API operation that reads no body (cancelOrder, DELETE…) refuses one that holds anything
 *   (`{}` and no body pass), as unknown fields are refused everywhere else (decision 7).
 */
import { isUtf8 } from 'node:buffer'
import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from 'node:http'
import { Readable } from 'node:stream'
import type { preParsingHookHandler, preValidationHookHandler } from 'fastify'
import fp from 'fastify-plugin'
import { ApiError } from '../errors.ts'

const BODY_METHODS = new Set(['POST', 'PUT', 'PATCH', 'DELETE'])

/** For an API operation that reads no body: none, or `{}`, passes; anything else is 400 (decision 7). */
const refuseBody: preValidationHookHandler = (request, _reply, done) => {
  const { body } = request
  const empty =
    body === undefined ||
    (typeof body === 'object' && body !== null && !Array.isArray(body) && Object.keys(body).length === 0)
  done(empty ? undefined : new ApiError('validation_failed', 'This operation takes no body: send none (or {}).'))
}
/** Each charset parameter of a media type, quoted or not (a quote left open matches as empty). */
const CHARSETS = /;\s*charset\s*=\s*(?:"([^"]*)"|([^";\s]*))/gi
/** Whether a media type may name a charset at all: the cheap test before CHARSETS. */
const CHARSET = /charset/i
/** A digit then a decimal point or an exponent: only then can a number have been rounded to an integer. */
const FRACTION_OR_EXPONENT = /\d[.eE]/
/** The media types whose bodies are JSON text (RFC 8259, RFC 7396). */
const JSON_TYPES = ['application/json', 'application/merge-patch+json']
/** A merge patch is a patch document: a body of any other method that claims to be one is 415. */
const MERGE_PATCH = /^\s*application\/merge-patch\+json\s*(?:;|$)/i
/** A JSON escape of a surrogate code unit: only then can parsed text hold a lone one. */
const SURROGATE_ESCAPE = /\\u[dD][89a-fA-F]/

/**
 * On the raw request, where the client error handler finds it (it has the socket, no Fastify
 * request): how to answer if the body breaks off, and why it broke off before its route read it.
 * Properties, not a module WeakMap: a long-lived WeakMap of requests under way cost a POST a third
 * of its throughput, promoting each request it held (decision 64).
 */
const REFUSE = Symbol('refuse body')
const FAILED = Symbol('body failed')
type BodyRequest = IncomingMessage & { [REFUSE]?: (error: ApiError) => boolean; [FAILED]?: ApiError }

/**
 * The body of a request cannot go on (malformed framing, the client closed its side, the deadline):
 * its route answers with `error` now if it is reading the body (true), or when it begins to (false).
 */
export function failBody(request: IncomingMessage, error: ApiError): boolean {
  const raw = request as BodyRequest
  if (raw[REFUSE]?.(error)) return true
  raw[FAILED] = error
  return false
}

export default fp(
  async (app) => {
    // `Expect: 100-continue`: Node would send 100 Continue at once. It is sent when something
    // starts reading the body instead, so that a refusal the headers decide (401, 404, 405, 413 by
    // Content-Length, 415, 429) comes in its place and the client never sends the body (RFC 9110
    // §10.1.1). Node's own draining of an unread body after the answer sends nothing.
    app.server.on('checkContinue', (request: IncomingMessage, response: ServerResponse) => {
      request.once('resume', () => {
        if (!response.headersSent) response.writeContinue()
      })
      app.server.emit('request', request, response)
    })

    // Only on routes that take a body (a hook on every route would cost every GET too). A coding or
    // charset we cannot read is refused before the body is read: it would only be thrown away.
    // The whole request must arrive within REQUEST_TIMEOUT_SECONDS (0: no deadline): Node checks
    // that (its requestTimeout), and its clientError reaches the route's refusal below.
    const bodyStart: preParsingHookHandler = (request, reply, payload, done) => {
      const failed = (request.raw as BodyRequest)[FAILED]
      if (failed) return done(failed)
      const headers = request.headers
      const refused = encodingError(headers) ?? mediaTypeError(request.method, headers)
      if (refused) return done(refused)
      // Neither Content-Length nor Transfer-Encoding: no body (RFC 9112 §6.3). Node has ended such a
      // request's stream without a word (optimizeEmptyRequests, decision 63), and a parser that read
      // it would wait for its 'end' forever: it reads an empty stream instead.
      if (!hasBody(headers)) return done(null, Readable.from([]))
      const refuse = (error: ApiError) => {
        if (request.raw.complete || reply.sent) return false
        reply.header('connection', 'close').send(error)
        return true
      }
      ;(request.raw as BodyRequest)[REFUSE] = refuse
      done(null, payload)
    }
    app.addHook('onRoute', (route) => {
      const methods = ([] as string[]).concat(route.method)
      if (!methods.some((method) => BODY_METHODS.has(method))) return
      route.preParsing = [bodyStart, ...([] as preParsingHookHandler[]).concat(route.preParsing ?? [])]
      // The API's operations (they have schemas; the portal's forms do not) that read no body.
      if (route.url.startsWith('/v1/') && route.schema && route.schema.body === undefined) {
        route.preValidation = [refuseBody, ...([] as preValidationHookHandler[]).concat(route.preValidation ?? [])]
      }
    })

    // Bodies are JSON only: anything else, text/plain included, is 415.
    app.removeContentTypeParser('text/plain')
    const parse = app.getDefaultJsonParser('error', 'error')
    app.removeContentTypeParser('application/json')
    // Routes have refused codings and charsets already, and merge patches sent to anything but PATCH (bodyStart).
    app.addContentTypeParser(JSON_TYPES, { parseAs: 'buffer' }, (request, body, done) => {
      const bytes = body as Buffer
      if (!isUtf8(bytes)) return done(new ApiError('invalid_json', 'The request body is not valid UTF-8.'), undefined)
      const text = bytes.toString()
      parse(request, text, (error, value) => {
        // Valid JSON that the parser refused: a key that could pollute prototypes. Say so (Fastify's
        // error does not tell, so the text is parsed again, only on this error path).
        if (error && parsesAsJson(text)) {
          return done(
            new ApiError(
              'invalid_json',
              'The request body holds a "__proto__" or "constructor.prototype" key: not accepted.',
            ),
          )
        }
        if (error) return done(error, undefined)
        if (SURROGATE_ESCAPE.test(text) && !wellFormed(value)) {
          return done(
            new ApiError('invalid_json', 'The request body holds a lone surrogate escape (\\uD800 to \\uDFFF).'),
          )
        }
        // Parsed again, only when it may matter: the first parse has already refused what it must.
        done(null, FRACTION_OR_EXPONENT.test(text) ? withInexactAsNaN(text, value) : value)
      })
    })
  },
  { name: 'request-body' },
)

/** Whether a request says a body follows (RFC 9112 §6.3). */
export function hasBody(headers: IncomingHttpHeaders): boolean {
  const length = headers['content-length']
  return headers['transfer-encoding'] !== undefined || (length !== undefined && length !== '0')
}

function parsesAsJson(text: string): boolean {
  try {
    JSON.parse(text)
    return true
  } catch {
    return false
  }
}

function encodingError(headers: IncomingHttpHeaders): ApiError | undefined {
  const encoding = headers['content-encoding']
  // Node joins a header sent twice with ", ": `identity` given twice is still no coding.
  if (encoding?.split(',').some((coding) => coding.trim().toLowerCase() !== 'identity')) {
    return new ApiError('unsupported_media_type', 'Content-Encoding is not supported: send the body uncompressed.', {
      'accept-encoding': 'identity',
    })
  }
  // Every charset given must be UTF-8: which of two a parser keeps varies. Most requests name none,
  // and are spared matchAll, which copies the regular expression on every call.
  const contentType = headers['content-type'] ?? ''
  if (!CHARSET.test(contentType)) return undefined
  const charsets = [...contentType.matchAll(CHARSETS)].map((m) => (m[1] ?? m[2] ?? '').toLowerCase())
  if (charsets.some((charset) => charset !== 'utf-8' && charset !== 'utf8')) {
    return new ApiError('unsupported_media_type', 'Send the body as application/json in UTF-8 (charset=utf-8).')
  }
  return undefined
}

function mediaTypeError(method: string, headers: IncomingHttpHeaders): ApiError | undefined {
  if (method === 'PATCH' || !MERGE_PATCH.test(headers['content-type'] ?? '')) return undefined
  return new ApiError(
    'unsupported_media_type',
    'application/merge-patch+json is taken by PATCH only: send application/json.',
  )
}

/**
 * The body parsed again with `inexactToNaN`. A reviver recurses, and fails on nesting that plain
 * parsing takes (thousands of levels): such a body is kept as first parsed, and no schema of ours
 * takes one anyway.
 */
function withInexactAsNaN(text: string, value: unknown): unknown {
  try {
    return JSON.parse(text, inexactToNaN)
  } catch {
    return value
  }
}

/** A JSON.parse reviver: an integer-valued number whose text is not an integer (1.0000000000000001) becomes NaN. */
function inexactToNaN(_key: string, value: unknown, context?: { source?: string }): unknown {
  if (typeof value !== 'number' || !Number.isInteger(value) || context?.source === undefined) return value
  const [, whole = '', fraction = '', exponent = '0'] =
    /^-?(\d+)(?:\.(\d+))?(?:[eE]([+-]?\d+))?$/.exec(context.source) ?? []
  // The digits that are still after the decimal point once the exponent has moved it must all be 0.
  const digits = whole + fraction
  const point = whole.length + Number(exponent)
  return /^0*$/.test(digits.slice(Math.max(point, 0))) ? value : Number.NaN
}

/** Whether every string in a parsed JSON value, keys included, is well-formed Unicode (walked without recursion: depth is the client's). */
function wellFormed(value: unknown): boolean {
  const pending: unknown[] = [value]
  while (pending.length > 0) {
    const item = pending.pop()
    if (typeof item === 'string') {
      if (!item.isWellFormed()) return false
    } else if (Array.isArray(item)) {
      for (const child of item) pending.push(child)
    } else if (typeof item === 'object' && item !== null) {
      for (const [key, child] of Object.entries(item)) {
        if (!key.isWellFormed()) return false
        pending.push(child)
      }
    }
  }
  return true
}
