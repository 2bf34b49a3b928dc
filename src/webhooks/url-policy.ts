/**
 * The early, friendly check of a webhook endpoint's URL, when it is created: one sentence saying
 * what is wrong. The check that counts is made again when connecting (send.ts), on the address
 * the name resolves to then; this one spares a customer an endpoint that could never receive.
 */
import { isIP } from 'node:net'
import ipaddr from 'ipaddr.js'

export interface UrlPolicy {
  /** Plain http:// endpoints (development only). */
  allowHttp: boolean
  /** Endpoints on private, loopback and other non-public addresses (development only). */
  allowPrivate: boolean
}

export const MAX_WEBHOOK_URL_LENGTH = 2048

/**
 * The URL as events will be sent to it, in the WHATWG parser's form (`https:example.com/h` is
 * `https://example.com/h`), so that what an endpoint shows is what is used; or why it cannot be.
 */
export function webhookUrl(url: string, policy: UrlPolicy): { url: string } | { problem: string } {
  const problem = webhookUrlProblem(url, policy)
  if (problem !== null) return { problem }
  const { href } = new URL(url)
  // The parser's form can be longer (a non-ASCII path is percent-encoded, each byte in 3 characters).
  if (href.length > MAX_WEBHOOK_URL_LENGTH) return { problem: tooLong }
  return { url: href }
}

const tooLong = `The URL is longer than ${MAX_WEBHOOK_URL_LENGTH} characters.`

/** What is wrong with `url` as a webhook endpoint, as a sentence, or null when nothing is. */
export function webhookUrlProblem(url: string, policy: UrlPolicy): string | null {
  if (url.length > MAX_WEBHOOK_URL_LENGTH) return tooLong
  if (!URL.canParse(url)) return 'The URL is not an absolute URL (such as https://example.com/webhooks).'
  // The parser drops tabs and line breaks and trims spaces: the URL shown would not be the one used.
  if (/[\s\p{Cc}]/u.test(url)) return 'The URL must not contain spaces or control characters.'
  const parsed = new URL(url)
  if (parsed.protocol !== 'https:' && !(parsed.protocol === 'http:' && policy.allowHttp)) {
    return policy.allowHttp ? 'The URL must start with https:// or http://.' : 'The URL must start with https://.'
  }
  if (parsed.username !== '' || parsed.password !== '') return 'The URL must not contain a username or password.'
  if (parsed.hostname === '') return 'The URL has no host.'
  if (parsed.port === '0') return 'The URL has port 0, on which nothing can receive.'
  // A fragment (an empty one too) is never sent: the endpoint would show a URL other than the one used.
  if (parsed.hash !== '' || parsed.href.endsWith('#')) return 'The URL must not have a #fragment: it is never sent.'
  if (policy.allowPrivate) return null
  // The URL parser has already turned 0x7f.1, 2130706433 and the like into dotted IPv4.
  const host = parsed.hostname.replace(/^\[(.*)\]$/, '$1')
  if (isIP(host) !== 0) {
    const problem = addressProblem(host)
    return problem && `The URL's host ${host} is ${problem}; webhooks are sent to public addresses only.`
  }
  const name = host.replace(/\.$/, '')
  if (name === 'localhost' || name.endsWith('.localhost')) {
    return `The URL's host ${host} is this machine; webhooks are sent to public addresses only.`
  }
  return null
}

const RANGE_WORDS: Record<string, string> = {
  private: 'a private address',
  loopback: 'a loopback address',
  linkLocal: 'a link-local address',
  uniqueLocal: 'a unique-local address',
  unspecified: 'the unspecified address',
  multicast: 'a multicast address',
  broadcast: 'the broadcast address',
  carrierGradeNat: 'a carrier-grade NAT address',
  ipv4Mapped: 'an IPv4-mapped IPv6 address (write the IPv4 address itself)',
}

/**
 * What is wrong with an IP address as a destination (a phrase), or null for a public one. Like
 * request-filtering-agent, every range ipaddr.js names other than `unicast` is refused; and also
 * the deprecated IPv4-compatible ::/96 (::7f00:1), which ipaddr.js counts as unicast.
 */
export function addressProblem(address: string): string | null {
  if (!ipaddr.isValid(address)) return 'not an IP address'
  const parsed = ipaddr.parse(address)
  const range = parsed.range()
  if (range === 'unicast') return isIpv4Compatible(address) ? 'an IPv4-compatible IPv6 address (deprecated)' : null
  return RANGE_WORDS[range] ?? `a reserved or special-purpose address (${range})`
}

const IPV4_COMPATIBLE = ipaddr.parseCIDR('::/96') as [ipaddr.IPv6, number]

/**
 * Whether `address` is in ::/96, the deprecated IPv4-compatible form (::7f00:1 for 127.0.0.1).
 * ipaddr.js, hence request-filtering-agent, counts these as unicast; a host with the (old) sit
 * tunnel route for ::/96 would carry them to the IPv4 address, so they are refused here.
 */
export function isIpv4Compatible(address: string): boolean {
  if (isIP(address) !== 6) return false
  const parsed = ipaddr.parse(address)
  return parsed.kind() === 'ipv6' && (parsed as ipaddr.IPv6).match(IPV4_COMPATIBLE)
}
