/**
 * `animal-store listen`: the account's events, as they happen, forwarded to a receiver on the
 * developer's machine as webhook deliveries (the same body and Standard Webhooks signature), so the
 * receiver's code is the one production runs, with no endpoint registered and no public URL. It
 * reads the live stream (GET /v1/events, text/event-stream) through the typed client, which
 * reconnects with Last-Event-ID; it remembers what it forwarded, so nothing is forwarded twice in a
 * session. Imported by src/cli.ts only for this command: the operator's commands load none of it.
 */
import { createHmac } from 'node:crypto'
import { parseArgs } from 'node:util'
import { CliError, printable, UsageError } from './cli.ts'
import { AnimalStoreError, createAnimalStoreClient, type Event, streamEvents } from './client/index.ts'
import { type Config, clientApiKey, clientApiUrl } from './config.ts'
import { apiKeyDeployment } from './domain/api-keys.ts'
import { ALL_EVENT_TYPES, EVENT_TYPE_FILTERS, eventBody, filterNames, scopeToReceive } from './domain/events.ts'
import { BoundedMap } from './lib/bounded-map.ts'
import { signatureHeaders } from './webhooks/signing.ts'

/** How many forwarded event ids a session remembers: far more than a reconnection can replay twice. */
const REMEMBERED = 100_000
/** How long the receiver has to answer, as the service gives an endpoint by default. */
const FORWARD_TIMEOUT_MS = 10_000

const OPTIONS = {
  'forward-to': { type: 'string' },
  events: { type: 'string' },
  url: { type: 'string' },
  'api-key': { type: 'string' },
  'resume-after': { type: 'string' },
  'print-secret': { type: 'boolean' },
} as const

/** What listen reads and writes: main's print, and what ends it (Ctrl-C, SIGTERM, or a test). */
export interface ListenIo {
  env: Record<string, string | undefined> | undefined
  print: (line: string) => void | Promise<void>
  signal: AbortSignal
}

/**
 * The secret listen signs with: derived from the API key, so the same in every session of that
 * key, and `--print-secret` can give it to the receiver before listen runs (decision 117). An
 * HMAC: the secret tells nothing of the key.
 */
export function listenSecret(apiKey: string): string {
  const bytes = createHmac('sha256', apiKey).update('animal-store listen signing secret').digest()
  return `whsec_${bytes.subarray(0, 24).toString('base64')}`
}

/** Runs `animal-store listen <argv>` until `io.signal` aborts (exit 0), or throws a CliError (exit 1) or UsageError (2). */
export async function listen(argv: string[], config: Config, io: ListenIo): Promise<void> {
  const { values, tokens } = parseArgs({ args: argv, options: OPTIONS, strict: true, tokens: true })
  const given = new Set<string>()
  for (const token of tokens) {
    if (token.kind !== 'option') continue
    if (given.has(token.name)) throw new UsageError(`--${token.name} is given more than once.`)
    given.add(token.name)
  }
  const apiKey = values['api-key'] ?? clientApiKey(io.env)
  if (!apiKey) throw new UsageError('An API key is required: export API_KEY=… or pass --api-key.')
  // The checksum catches a mistyped key here, before it gives a secret that no delivery will match.
  if (apiKeyDeployment(apiKey) === null) {
    throw new UsageError(
      'The API key is malformed (a character mistyped, missing or extra): copy it whole, as `keys create` ' +
        'or the portal showed it, into API_KEY or --api-key.',
    )
  }
  const secret = listenSecret(apiKey)
  if (values['print-secret']) {
    const others = [...given].filter((name) => name !== 'print-secret' && name !== 'api-key')
    if (others.length > 0)
      throw new UsageError(`--print-secret takes no other option than --api-key (not --${others[0]}).`)
    return io.print(secret)
  }
  const target = receiverUrl(values['forward-to'])
  // As the typed client's examples find it; else this machine's PORT (always a valid address).
  const api =
    values.url !== undefined
      ? apiUrl(values.url, '--url')
      : apiUrl(clientApiUrl(io.env) ?? `http://127.0.0.1:${config.port}`, 'ANIMAL_STORE_URL')
  const types = values.events === undefined ? undefined : eventTypes(values.events)
  const resumeAfter = values['resume-after']
  if (resumeAfter !== undefined && !/^evt_[0-9A-Za-z]{1,96}$/.test(resumeAfter)) {
    throw new UsageError(`--resume-after must be an event id (evt_…, as listen prints them), not "${resumeAfter}".`)
  }

  const say = (line: string) => io.print(printable(line))
  const client = createAnimalStoreClient({ baseUrl: api, apiKey })
  const forwarded = new BoundedMap<string, true>(REMEMBERED)
  let lostAt = 0
  const events = streamEvents(client, {
    ...(types !== undefined && { types }),
    ...(resumeAfter !== undefined && { lastEventId: resumeAfter }),
    signal: io.signal,
    onOpen({ reconnected, lastEventId }) {
      if (!reconnected) {
        say(`Your signing secret for this key is ${secret} (animal-store listen --print-secret prints it alone).`)
        say(`Ready: forwarding ${types ?? 'every event'} from ${api} to ${target.href} (Ctrl-C to stop).`)
        // A note only: a failure here leaves the stream to say what is wrong.
        if (types === undefined) {
          unreadable(client, io.signal)
            .then((note) => note && say(note))
            .catch(() => {})
        }
        return
      }
      const seconds = ((performance.now() - lostAt) / 1000).toFixed(1)
      say(`${clock()}  reconnected after ${seconds} s${lastEventId ? `, resuming after ${lastEventId}` : ''}`)
    },
    onLost({ reason }) {
      lostAt = performance.now()
      say(`${clock()}  lost the connection (${why(reason)}); reconnecting`)
    },
  })
  try {
    for await (const event of events) {
      if (forwarded.has(event.id)) continue
      forwarded.set(event.id, true)
      const answer = await forward(event, target, secret, io.signal)
      // Stopped while forwarding: the POST was cut short by the stop, not by the receiver.
      if (io.signal.aborted) break
      await say(`${clock()}  ${event.type.padEnd(15)}  ${event.id}  → ${answer}`)
    }
  } catch (error) {
    if (error instanceof AnimalStoreError) throw new CliError(refusal(error, api))
    // A network error, or a server that took the connection and never answered.
    if (error instanceof TypeError || (error as Error).name === 'TimeoutError') {
      throw new CliError(`Cannot reach the API at ${api}: ${why(error)}.`)
    }
    throw error
  }
}

/** POSTs `event` to the receiver as a delivery would; says what came of it: `204 in 12 ms`. */
async function forward(event: Event, target: URL, secret: string, signal: AbortSignal): Promise<string> {
  const body = eventBody(event.type, event.createdAt, event.data)
  const started = performance.now()
  const took = () => `in ${Math.round(performance.now() - started)} ms`
  try {
    const response = await fetch(target, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...signatureHeaders(event.id, new Date(), body, [secret]) },
      body,
      // As a delivery: a redirect is an answer, not followed.
      redirect: 'manual',
      signal: AbortSignal.any([signal, AbortSignal.timeout(FORWARD_TIMEOUT_MS)]),
    })
    await response.body?.cancel()
    return `${response.status} ${took()}`
  } catch (error) {
    if ((error as Error).name === 'TimeoutError') return `no answer within ${FORWARD_TIMEOUT_MS / 1000} s`
    return `failed ${took()}: ${why(error)}`
  }
}

/** What went wrong, in a few words: the system's code (ECONNREFUSED) when there is one. */
function why(error: unknown): string {
  const cause = (error as { cause?: { code?: string; message?: string } })?.cause
  if (cause?.message || cause?.code) return (cause.message || cause.code) as string
  return error instanceof Error ? error.message : String(error)
}

/** The API's refusal as one line: its message, and where it helps what to do. */
function refusal(error: AnimalStoreError, api: string): string {
  const hint =
    error.status === 404
      ? ` (${api} has no event stream: is the server started with EXPERIMENTAL_FEATURES=webhooks?)`
      : error.code === 'last_event_id_unknown'
        ? ' Run listen again (without --resume-after) to forward the events from now on.'
        : ''
  return `${api} answered ${error.status}: ${error.message.replace(/^\w+: /, '')}${hint}`
}

/** The local time, HH:MM:SS. */
function clock(): string {
  return new Date().toTimeString().slice(0, 8)
}

function receiverUrl(text: string | undefined): URL {
  if (text === undefined) {
    throw new UsageError('--forward-to is required: the URL of your receiver, e.g. http://127.0.0.1:4000/hook.')
  }
  const url = URL.canParse(text) ? new URL(text) : null
  if (!url || (url.protocol !== 'http:' && url.protocol !== 'https:')) {
    throw new UsageError(`--forward-to must be an http:// or https:// URL, not "${text}".`)
  }
  return url
}

/** The API's base address, ending in /v1 (added when the URL given has no path). */
function apiUrl(text: string, source: '--url' | 'ANIMAL_STORE_URL'): string {
  const url = URL.canParse(text) ? new URL(text) : null
  if (!url || (url.protocol !== 'http:' && url.protocol !== 'https:')) {
    throw new UsageError(`${source} must be the API's http:// or https:// address, not "${text}".`)
  }
  const path = url.pathname.replace(/\/+$/, '')
  return `${url.origin}${path === '' ? '/v1' : path}`
}

/** `--events` as the API's `type` takes it: names separated by commas (spaces around them dropped). */
function eventTypes(text: string): string {
  const names = filterNames(text)
  const unknown = names.find((name) => !EVENT_TYPE_FILTERS.includes(name))
  if (unknown !== undefined) {
    throw new UsageError(`--events: "${unknown}" is not an event type, nor one of ${EVENT_TYPE_FILTERS.join(', ')}.`)
  }
  return names.join(',')
}

/**
 * Without --events, the stream carries only the types the key may read: a key without
 * `messages:read` gets no message.created, and would look as if none happened. Asks the API, which
 * refuses (403) a type the key may not read; a line naming what is left out, or null.
 */
async function unreadable(
  client: ReturnType<typeof createAnimalStoreClient>,
  stop: AbortSignal,
): Promise<string | null> {
  const byScope = Map.groupBy(ALL_EVENT_TYPES, scopeToReceive)
  const missing: string[] = []
  const signal = AbortSignal.any([stop, AbortSignal.timeout(FORWARD_TIMEOUT_MS)])
  for (const [scope, types] of byScope) {
    const query = { type: types.join(','), limit: 1 }
    const { response } = await client.GET('/events', { params: { query }, signal })
    if (response.status === 403) missing.push(`${types.join(', ')} (${scope})`)
  }
  if (missing.length === 0 || stop.aborted) return null
  return `Note: this key may not read ${missing.join(', ')}: those events are not forwarded.`
}
