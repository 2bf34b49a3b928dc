/**
 * Why a request cannot be taken whatever its route: its version, Host, target form, percent-encoding,
 * Transfer-Encoding, forwarded headers, and the headers that must come once (decisions 25, 50, 65).
 */
import type { FastifyRequest } from 'fastify'
import { ApiError } from '../errors.ts'
import { malformedOrigin, validHost } from './host.ts'
import { wellEncoded } from './percent-encoding.ts'

export function framingError(request: FastifyRequest): ApiError | undefined {
  const raw = request.raw
  // Node's parser takes any version it can read: we speak 1.0 and 1.1; another major is 505.
  if (raw.httpVersionMajor > 1) {
    return new ApiError('http_version_not_supported', undefined, { connection: 'close' })
  }
  if (raw.httpVersionMajor !== 1 || raw.httpVersionMinor > 1) {
    return new ApiError('bad_request', 'The HTTP version must be HTTP/1.1 or HTTP/1.0.', { connection: 'close' })
  }
  if (!request.headers.host && raw.httpVersionMinor === 1) {
    return new ApiError('bad_request', 'The Host header is required (HTTP/1.1).')
  }
  const target = raw.url as string
  if (target === '*' && request.method !== 'OPTIONS') {
    return new ApiError('bad_request', 'The request target "*" is only for OPTIONS (RFC 9112 §3.2.4).')
  }
  if (target.charCodeAt(0) !== 47 /* / */ && target !== '*') {
    const refused = absoluteForm(request, target)
    if (refused) return refused
  }
  if (target.includes('#')) return new ApiError('bad_request', 'The request target must not hold a fragment ("#").')
  const query = target.indexOf('?')
  if (query !== -1 && target.includes('%', query) && !wellEncoded(target.slice(query + 1))) {
    return new ApiError('bad_request', 'The query string holds a malformed percent-encoding, or one that is not UTF-8.')
  }
  const coding = transferCodingError(request.headers['transfer-encoding'])
  if (coding) return coding
  const malformed = malformedOrigin(request)
  if (malformed) return new ApiError('bad_request', `The ${malformed} header is malformed.`)
  return repeatedHeader(raw.rawHeaders)
}

/** Node frames a body by its final coding alone: one that is not chunked leaves no end to find (RFC 9112 §6.1). */
function transferCodingError(coding: string | undefined): ApiError | undefined {
  if (coding === undefined || coding.trim().toLowerCase() === 'chunked') return undefined
  if (!/(?:^|,)\s*chunked\s*$/i.test(coding)) {
    return new ApiError('bad_request', 'Transfer-Encoding must end in "chunked" (RFC 9112 §6.1).', {
      connection: 'close',
    })
  }
  return new ApiError('not_implemented', 'Transfer-Encoding other than "chunked" is not supported (RFC 9112 §6.1).')
}

/**
 * Which of two copies a parser keeps is not something to bet a credential or a body on (RFC 9110
 * §5.3): Node keeps the first Content-Type, another parser the last; Node joins two Idempotency-Keys.
 */
function repeatedHeader(names: string[]): ApiError | undefined {
  let hosts = 0
  let authorizations = 0
  let contentTypes = 0
  let idempotencyKeys = 0
  for (let i = 0; i < names.length; i += 2) {
    const name = names[i] as string
    if (name.length === 4 && name.toLowerCase() === 'host' && ++hosts > 1) return sentTwice('Host')
    if (name.length === 13 && name.toLowerCase() === 'authorization' && ++authorizations > 1) {
      return sentTwice('Authorization')
    }
    if (name.length === 12 && name.toLowerCase() === 'content-type' && ++contentTypes > 1) {
      return sentTwice('Content-Type')
    }
    if (name.length === 15 && name.toLowerCase() === 'idempotency-key' && ++idempotencyKeys > 1) {
      return sentTwice('Idempotency-Key')
    }
  }
  return undefined
}

const sentTwice = (name: string) => new ApiError('bad_request', `The ${name} header must be sent once.`)

/**
 * A target in absolute form (`GET http://host/v1/pets`, as sent to proxies): its host replaces
 * Host (RFC 9112 §3.2.2), held to Host's rule as written, and its path becomes the target.
 */
function absoluteForm(request: FastifyRequest, target: string): ApiError | undefined {
  const url = URL.parse(target)
  if (!url || (url.protocol !== 'http:' && url.protocol !== 'https:') || !url.host) {
    return new ApiError('bad_request', 'The request target must be a path, or an absolute http(s) URL.')
  }
  // RFC 9110 §4.2.4: user information in an http(s) URI is an error (it is a phishing device).
  if (url.username || url.password) {
    return new ApiError('bad_request', 'The request target must not hold user information (user:password@).')
  }
  // As written: the URL parser rewrites numeric hosts ("010.0.0.1" becomes 8.0.0.1; decision 50).
  if (!validHost(target.slice(url.protocol.length + 2).split(/[/?#]/, 1)[0] as string)) {
    return new ApiError('bad_request', "The request target's host is malformed.")
  }
  request.headers.host = url.host
  request.targetScheme = url.protocol === 'https:' ? 'https' : 'http'
  // The path as sent (not normalized: the router read it so), for 404s, 405s, the key check and logs.
  const rest = originForm(target)
  request.raw.url = rest.startsWith('/') ? rest : `/${rest}`
  return undefined
}

/** `http://host/v1/pets` → `/v1/pets`: a target in absolute form, as the router reads it. */
export function originForm(url: string): string {
  return url.charCodeAt(0) === 47 /* / */ ? url : url.replace(/^https?:\/\/[^/?#]*/i, '')
}

declare module 'fastify' {
  interface FastifyRequest {
    /** The scheme of a target sent in absolute form: that target is the target URI (RFC 9112 §3.3). */
    targetScheme: 'http' | 'https' | null
  }
}
