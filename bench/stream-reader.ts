/**
 * The streams measurement's reader (bench/streams.ts starts it, pinned beside wrk): opens N live
 * event streams (GET /v1/events, text/event-stream) and times each event from the message's
 * createdAt to its arrival here, in a process of its own so that reading never takes the server's
 * event loop. Arguments: base URL, API key, N. It answers the lines its stdin gets with JSON lines
 * on stdout: {"ready":…} once every stream has its `retry:` (from then on each gets every new
 * event), {"failed":…} at the first stream refused, "count" → {"received":…}, "stop" → its result,
 * then it exits.
 */
import http from 'node:http'
import { createInterface } from 'node:readline'

const [baseUrl, key, countText] = process.argv.slice(2)
const count = Number(countText)
if (!baseUrl || !key || !Number.isInteger(count) || count < 1) {
  process.stderr.write('usage: stream-reader.ts <base URL> <API key> <streams>\n')
  process.exit(2)
}

/** Latencies by 0.1 ms, up to a minute; the rest counted as beyond. */
const BUCKET_MS = 0.1
const buckets = new Uint32Array(600_000)
let beyond = 0
/** How many streams got each event id. */
const seen = new Map<string, number>()
/** Events each stream got. */
const perStream = new Uint32Array(count)
let received = 0
let unparsed = 0
let [firstAt, lastAt] = [0, 0]
let opened = 0
/** Streams that ended while we still read them (the server cuts one whose backlog passes 1 MiB). */
let cut = 0
const refused: string[] = []
let stopping = false

const say = (value: unknown, then?: () => void) => void process.stdout.write(`${JSON.stringify(value)}\n`, then)
// Wall-clock milliseconds with a fraction: the server's createdAt is wall-clock too (same machine).
const now = () => performance.timeOrigin + performance.now()

/** The createdAt of the message: the one inside `"data":{…}` (the event's own comes before it). */
function createdAt(data: string): number {
  const inner = data.indexOf('"data":{')
  const at = data.indexOf('"createdAt":"', inner === -1 ? 0 : inner)
  return at === -1 ? Number.NaN : Date.parse(data.slice(at + 13, data.indexOf('"', at + 13)))
}

function onFrame(stream: number, frame: string, arrived: number): void {
  if (frame.startsWith('retry:')) {
    if (++opened === count) say({ ready: true, at: now() })
    return
  }
  // Comments, and where the stream began (its `position` frame): no event.
  if (frame.startsWith(':') || frame.includes('\nevent: position\n')) return
  const idAt = frame.startsWith('id: ') ? 0 : frame.indexOf('\nid: ') + 1
  const dataAt = frame.indexOf('data: ')
  if (idAt === 0 && !frame.startsWith('id: ')) return void unparsed++
  if (dataAt === -1) return void unparsed++
  const id = frame.slice(idAt + 4, frame.indexOf('\n', idAt))
  const created = createdAt(frame.slice(dataAt + 6))
  if (Number.isNaN(created)) return void unparsed++
  seen.set(id, (seen.get(id) ?? 0) + 1)
  perStream[stream] = (perStream[stream] ?? 0) + 1
  received++
  firstAt ||= arrived
  lastAt = arrived
  const bucket = Math.max(0, Math.round((arrived - created) / BUCKET_MS))
  if (bucket < buckets.length) buckets[bucket] = (buckets[bucket] ?? 0) + 1
  else beyond++
}

const agent = new http.Agent({ keepAlive: false, maxSockets: Number.POSITIVE_INFINITY })
const requests: http.ClientRequest[] = []
for (let stream = 0; stream < count; stream++) {
  const request = http.get(`${baseUrl}/v1/events`, {
    agent,
    headers: {
      accept: 'text/event-stream',
      authorization: `Bearer ${key}`,
      'animal-store-beta': 'webhooks',
    },
  })
  requests.push(request)
  request.on('error', (error) => {
    if (stopping) return
    refused.push(`stream ${stream}: ${error.message}`)
    if (refused.length === 1) say({ failed: refused[0] })
  })
  request.on('response', (response) => {
    response.setEncoding('utf8')
    if (response.statusCode !== 200) {
      let body = ''
      response.on('data', (chunk: string) => {
        body += chunk
      })
      response.on('end', () => {
        refused.push(`stream ${stream}: ${response.statusCode} ${body.slice(0, 300)}`)
        if (refused.length === 1) say({ failed: refused[0] })
      })
      return
    }
    let buffer = ''
    response.on('data', (chunk: string) => {
      const arrived = now()
      buffer += chunk
      let from = 0
      for (let end = buffer.indexOf('\n\n'); end !== -1; end = buffer.indexOf('\n\n', from)) {
        onFrame(stream, buffer.slice(from, end), arrived)
        from = end + 2
      }
      buffer = buffer.slice(from)
    })
    response.on('close', () => {
      if (!stopping) cut++
    })
  })
}

/** The latency under which `share` of the events arrived, ms. */
function percentile(share: number): number | null {
  if (received === 0) return null
  const rank = Math.ceil(share * received)
  let sum = 0
  for (let i = 0; i < buckets.length; i++) {
    sum += buckets[i] ?? 0
    if (sum >= rank) return i * BUCKET_MS
  }
  // Among those beyond a minute.
  return Number.POSITIVE_INFINITY
}

const cpuFrom = process.cpuUsage()
createInterface({ input: process.stdin }).on('line', (line) => {
  const command = line.trim()
  if (command === 'count') {
    const cpu = process.cpuUsage(cpuFrom)
    say({ received, opened, cut, refused: refused.length, cpuMicros: cpu.user + cpu.system })
  } else if (command === 'stop') {
    stopping = true
    for (const request of requests) request.destroy()
    const cpu = process.cpuUsage(cpuFrom)
    say(
      {
        result: {
          received,
          unparsed,
          beyond,
          opened,
          cut,
          refused,
          firstAt,
          lastAt,
          p50: percentile(0.5),
          p99: percentile(0.99),
          max: percentile(1),
          perStream: [...perStream],
          seen: Object.fromEntries(seen),
          cpuMicros: cpu.user + cpu.system,
        },
      },
      () => process.exit(0),
    )
  }
})
