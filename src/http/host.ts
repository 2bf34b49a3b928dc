/**
 * Which Host (or, behind a trusted proxy, X-Forwarded-Host) and scheme a request may have: they are
 * copied into Location and Link, so anything else could forge link values there. The app refuses
 * a request whose Host or X-Forwarded-Proto is not one (framing.ts).
 */
import { isIPv4, isIPv6 } from 'node:net'
import type { FastifyRequest } from 'fastify'

/** A name or an IP literal, and a port. */
const HOST = /^(?:([\w-]+(?:\.[\w-]+)*\.?)|\[([0-9A-Fa-f:.]+)\])(?::([0-9]{0,5}))?$/

/** The last host found valid: nearly every request names the same one, and checking it costs three regular expressions. */
let lastValid: string | null = null

/** Whether `host` (a Host header's value, or the authority of an absolute-form target) is a name or an IP literal as written, with a port. */
export function validHost(host: string): boolean {
  if (host === lastValid) return true
  if (!checkHost(host)) return false
  lastValid = host
  return true
}

function checkHost(host: string): boolean {
  const match = HOST.exec(host)
  if (!match) return false
  const [, name, ipv6, port] = match
  if (name !== undefined ? !validName(name) : !isIPv6(ipv6 as string)) return false
  return port === undefined || Number(port) <= 65_535
}

/**
 * A label URL parsers read as a number: decimal digits, or `0x` and hex digits (the WHATWG URL
 * standard's "ends in a number" check).
 */
const NUMERIC_LABEL = /^(?:\d+|0x[0-9a-f]*)$/i

/** A name whose last label is a number is an IPv4 address to URL parsers: then it must be one, in dotted decimal. */
function validName(name: string): boolean {
  const last = /(?:^|\.)([^.]+)\.?$/.exec(name)?.[1] ?? ''
  return !NUMERIC_LABEL.test(last) || isIPv4(name.replace(/\.$/, ''))
}

/**
 * Which header makes the request's origin (scheme and Host) unfit for links, if any: the app
 * refuses such a request, and an answer that may be that refusal builds no link from it.
 */
export function malformedOrigin(
  request: FastifyRequest,
): 'Host' | 'X-Forwarded-Host' | 'X-Forwarded-Proto' | undefined {
  const host = request.host
  // Behind a trusted proxy the host comes from X-Forwarded-Host: then that is the header to blame.
  if (host && !validHost(host)) return host === request.headers.host ? 'Host' : 'X-Forwarded-Host'
  // Without X-Forwarded-Proto the scheme is the connection's own; behind a trusted proxy it comes from it.
  const forwarded = request.headers['x-forwarded-proto'] !== undefined
  if (forwarded && request.protocol !== 'http' && request.protocol !== 'https') return 'X-Forwarded-Proto'
  return undefined
}

/**
 * The scheme for links: the scheme of a target sent in absolute form, unless a trusted proxy's
 * X-Forwarded-Proto names another than the connection's; otherwise Fastify's (that header when
 * trusted, else the connection's).
 */
export function linkScheme(request: FastifyRequest): string {
  const protocol = request.protocol
  const target = request.targetScheme
  if (target === null) return protocol
  // Fastify's protocol differs from the connection's only when a trusted proxy said so.
  const own = (request.raw.socket as { encrypted?: boolean } | undefined)?.encrypted ? 'https' : 'http'
  return protocol !== own ? protocol : target
}

/** Scheme and host the client used (X-Forwarded-* honoured when TRUST_PROXY is on), for absolute links (decision 18). */
export function requestOrigin(request: FastifyRequest): string {
  // An HTTP/1.0 client may send no Host: then the address it reached us at stands in.
  const { localAddress = '', localPort } = request.socket
  const host = request.host || `${localAddress.includes(':') ? `[${localAddress}]` : localAddress}:${localPort}`
  return `${linkScheme(request)}://${host}`
}
