/**
 * One delivery attempt of a webhook: a POST that never throws, is bounded in time and in what it
 * reads, follows no redirect, and (unless allowed) reaches no private address. The address check
 * is request-filtering-agent's, made on the address the socket connects to, after DNS, so a name
 * that resolves to a private address (or changes to one: DNS rebinding) is refused too.
 */
import { lookup as dnsLookup, type LookupAddress, type LookupOptions } from 'node:dns'
import type * as Http from 'node:http'
import type * as Https from 'node:https'
import { createRequire } from 'node:module'
import { isIpv4Compatible } from './url-policy.ts'

// Required, not imported: an ES import of node:http reads its lazy WebSocket export, which loads
// Node's bundled undici, about 13 MB the service never uses (test/server.test.ts).
const require = createRequire(import.meta.url)
const http = require('node:http') as typeof Http
const https = require('node:https') as typeof Https

export interface SendResult {
  /** The endpoint answered 2xx. */
  delivered: boolean
  /** The response's status, or null when there was none. */
  status: number | null
  /** Why there was no status ('timeout', 'connection refused', 'address not allowed: …'), else null. */
  error: string | null
  /** How long the attempt took. */
  ms: number
}

export interface SendOptions {
  /** Bounds the whole attempt: connecting, sending, the response's headers and body. */
  timeoutMs: number
  /** Connect to private, loopback and other non-public addresses too (development only). */
  allowPrivate: boolean
  /** Ends the attempt at once, unanswered (the instance is shutting down). */
  signal?: AbortSignal
}

export const USER_AGENT = 'AnimalStore-Webhooks/1'
/** Of a response's body, read (and thrown away) at most this much; past it the connection is dropped. */
export const MAX_RESPONSE_BYTES = 64 * 1024
/** An idle kept-alive socket is closed after this long: before the 5 s after which Node servers close theirs. */
const IDLE_SOCKET_MS = 4000

/** Sends `body` to `url` with `headers`; resolves with what happened, never rejects. */
export function sendWebhook(
  url: string,
  headers: Record<string, string>,
  body: string,
  options: SendOptions,
): Promise<SendResult> {
  const started = performance.now()
  const result = (status: number | null, error: string | null): SendResult => ({
    delivered: status !== null && status >= 200 && status < 300,
    status,
    error,
    ms: Math.round(performance.now() - started),
  })
  if (!URL.canParse(url)) return Promise.resolve(result(null, 'invalid url'))
  const target = new URL(url)
  if (target.protocol !== 'https:' && target.protocol !== 'http:') {
    return Promise.resolve(result(null, 'unsupported scheme'))
  }
  // The one kind of address request-filtering-agent lets through (see isIpv4Compatible); a name
  // resolving to one is refused by guardedLookup, an address written in the URL here.
  const host = target.hostname.replace(/^\[(.*)\]$/, '$1')
  if (!options.allowPrivate && isIpv4Compatible(host)) {
    return Promise.resolve(result(null, `address not allowed: ${host}`))
  }
  if (!options.allowPrivate && filtering === null) {
    return loadFiltering().then(() => sendWebhook(url, headers, body, options))
  }

  return new Promise((resolve) => {
    let status: number | null = null
    let settled = false
    let request: Http.ClientRequest | undefined
    const finish = (error: string | null) => {
      if (settled) return
      settled = true
      clearTimeout(timer)
      options.signal?.removeEventListener('abort', abort)
      // Once the status is known it is the outcome, whatever then happens to the body.
      resolve(result(status, status === null ? error : null))
    }
    const timer = setTimeout(() => {
      finish('timeout')
      request?.destroy()
    }, options.timeoutMs)
    const abort = () => {
      finish('canceled: the instance shut down')
      request?.destroy()
    }
    if (options.signal?.aborted) return abort()
    options.signal?.addEventListener('abort', abort, { once: true })
    try {
      const secure = target.protocol === 'https:'
      request = (secure ? https : http).request(target, {
        method: 'POST',
        agent: agentFor(secure, options.allowPrivate),
        headers: {
          ...headers,
          'content-type': 'application/json',
          'content-length': String(Buffer.byteLength(body)),
          'user-agent': USER_AGENT,
        },
      })
    } catch (error) {
      // A header value http refuses (a line break, say).
      finish(describe(error))
      return
    }
    request.on('response', (response) => {
      status = response.statusCode ?? null
      let bytes = 0
      response.on('data', (chunk: Buffer) => {
        bytes += chunk.length
        if (bytes > MAX_RESPONSE_BYTES) {
          finish(null)
          response.destroy()
        }
      })
      response.on('end', () => finish(null))
      response.on('error', () => finish(null))
      response.on('close', () => finish(null))
    })
    request.on('error', (error) => finish(describe(error)))
    request.end(body)
  })
}

/** Drops the kept-alive sockets (at shutdown); later sends open new ones. */
export function closeWebhookAgents(): void {
  for (const agent of agents.values()) agent.destroy()
  agents.clear()
}

/**
 * request-filtering-agent, loaded at the first guarded send: an ES module that imports node:http,
 * which loads Node's bundled undici (about 13 MB) in every process that loads it.
 */
let filtering: typeof import('request-filtering-agent') | null = null
async function loadFiltering(): Promise<void> {
  filtering ??= await import('request-filtering-agent')
}

/** One agent per scheme and policy, shared by every send so that connections are reused. */
const agents = new Map<string, Http.Agent>()

function agentFor(secure: boolean, allowPrivate: boolean): Http.Agent {
  const key = `${secure ? 'https' : 'http'} ${allowPrivate ? 'open' : 'guarded'}`
  let agent = agents.get(key)
  if (!agent) {
    const common = { keepAlive: true, timeout: IDLE_SOCKET_MS }
    if (allowPrivate) agent = secure ? new https.Agent(common) : new http.Agent(common)
    else {
      const guarded = { ...common, lookup: guardedLookup }
      const { RequestFilteringHttpAgent, RequestFilteringHttpsAgent } = filtering as NonNullable<typeof filtering>
      agent = secure ? new RequestFilteringHttpsAgent(guarded) : new RequestFilteringHttpAgent(guarded)
    }
    agents.set(key, agent)
  }
  return agent
}

class AddressNotAllowedError extends Error {
  readonly address: string
  constructor(address: string) {
    super(`address not allowed: ${address}`)
    this.address = address
  }
}

/** dns.lookup, refusing IPv4-compatible results; request-filtering-agent then checks the rest. */
function guardedLookup(
  hostname: string,
  options: LookupOptions,
  callback: (error: Error | null, address: string | LookupAddress[], family?: number) => void,
): void {
  dnsLookup(hostname, { ...options, all: true }, (error, addresses) => {
    if (error) return callback(error, [])
    const refused = addresses.find(({ address }) => isIpv4Compatible(address))
    if (refused) return callback(new AddressNotAllowedError(refused.address), [])
    if (options.all) return callback(null, addresses)
    const [first] = addresses as [LookupAddress]
    callback(null, first.address, first.family)
  })
}

/** A failure as a few words for the delivery log. */
function describe(error: unknown): string {
  if (error instanceof AddressNotAllowedError) return error.message
  const { code, message = String(error) } = error as NodeJS.ErrnoException
  // request-filtering-agent's refusal: "DNS lookup 127.0.0.1(family:4, host:localhost) is not allowed. …"
  const refused = /^DNS lookup (.+?)\(family:.*\) is not allowed/.exec(message)
  if (refused) return `address not allowed: ${refused[1]}`
  switch (code) {
    case 'ECONNREFUSED':
      return 'connection refused'
    case 'ECONNRESET':
      return message === 'socket hang up' ? 'connection closed without a response' : 'connection reset'
    case 'ENOTFOUND':
      return 'dns: no such host'
    case 'EAI_AGAIN':
      return 'dns: temporary failure'
    case 'EHOSTUNREACH':
      return 'host unreachable'
    case 'ENETUNREACH':
      return 'network unreachable'
    case 'ETIMEDOUT':
      return 'connect timed out'
  }
  if (code === 'ERR_INVALID_CHAR' || code === 'ERR_INVALID_HTTP_TOKEN') return `invalid header: ${message}`
  if (code?.startsWith('HPE_')) return 'invalid http response'
  if (/^(EPROTO|ERR_TLS_|ERR_SSL_|CERT_|UNABLE_TO_|DEPTH_ZERO_|SELF_SIGNED_|HOSTNAME_MISMATCH)/.test(code ?? '')) {
    return `tls: ${code}`
  }
  return (code ?? message).slice(0, 200)
}
