/**
 * The "Streams" section of `npm run bench` (issue 39): 100 live event streams (GET /v1/events,
 * Server-Sent Events) on one instance while POST /v1/messages runs as the bench's POST workloads
 * do. Chosen as `streams` in BENCH_WORKLOADS; on the targets sqlite and postgres-1 of BENCH_TARGETS.
 * Each round, on each target afresh: the POSTs without streams, then with 100 streams read by
 * bench/stream-reader.ts (a process of its own, pinned beside wrk); the events each stream got are
 * checked against the store's event log, and timed from the message's createdAt to their arrival.
 */
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { setTimeout as sleep } from 'node:timers/promises'
import { ROOT } from '../scripts/start-command.ts'
import {
  dateLine,
  log,
  type Machine,
  machineLine,
  markdownTable,
  median,
  type Settings,
  type Started,
  start,
} from './common.ts'
import { LUA, measure, NEW_MESSAGE, type Workload } from './measure.ts'
import { type FeedPosition, openStoreAt, type Store } from './src.ts'
import { type Context, type RunningTarget, TARGETS } from './targets.ts'

/** Its name in BENCH_WORKLOADS. */
export const STREAMS = 'streams'
/** Streams held open on the one instance (its EVENT_STREAMS_PER_KEY is raised to this). */
export const STREAM_COUNT = 100
/** The targets it runs on, when BENCH_TARGETS chooses them: one instance each, SQLite and PostgreSQL. */
export const STREAM_TARGETS = ['sqlite', 'postgres-1']
/** After the POSTs: how long the streams may go without a new event before the bench stops waiting, and at most. */
const STALL_MS = 5000
const DRAIN_MS = 60_000
/** How long the streams may take to open. */
const OPEN_MS = 30_000

/** The POSTs, the webhooks workload's message with no endpoint subscribed. */
const POSTS: Workload = {
  name: STREAMS,
  description: 'POST /v1/messages',
  path: '/v1/messages',
  script: join(LUA, 'post.lua'),
  scriptArgs: (key) => [key, NEW_MESSAGE],
}

/** One POST run as the section reports it. */
interface PostRun {
  rate: number
  rssMb: number
  serviceMicros: number
  /** Non-2xx answers and socket errors. */
  failures: number
}

interface Delivery {
  /** message.created events committed after the streams opened (the store's log). */
  events: number
  /** Of those, the ones the streams got, all streams together, and the ones they did not. */
  delivered: number
  missing: number
  /** Streams that missed at least one event; streams the server ended while we read them. */
  streamsShort: number
  cut: number
  /** Delivered events a second: all streams together, from the first arrival to the last. */
  perSecond: number
  /** Commit (the message's createdAt) to arrival at the reader, ms. */
  p50: number | null
  p99: number | null
  max: number | null
  /** The reader's CPU during the POST run, percent of one core. */
  readerCpu: number
}

export interface StreamRun {
  target: string
  round: number
  without: PostRun
  with: PostRun
  delivery: Delivery
}

interface ReaderResult {
  received: number
  unparsed: number
  beyond: number
  opened: number
  cut: number
  refused: string[]
  firstAt: number
  lastAt: number
  p50: number | null
  p99: number | null
  max: number | null
  perStream: number[]
  seen: Record<string, number>
  cpuMicros: number
}

interface ReaderCount {
  received: number
  opened: number
  cut: number
  refused: number
  cpuMicros: number
}

/** bench/stream-reader.ts, pinned to the client CPU, talking JSON lines over its stdin and stdout. */
function startReader(settings: Settings, live: RunningTarget) {
  const script = join(import.meta.dirname, 'stream-reader.ts')
  const args = [script, live.baseUrl, live.key, String(STREAM_COUNT)]
  const child: Started = start(settings.clientCpu, process.execPath, args, process.env, ROOT, true)
  const replies: { resolve(value: unknown): void; reject(error: Error): void }[] = []
  let signalReady: () => void = () => {}
  let failReady: (error: Error) => void = () => {}
  const ready = new Promise<void>((resolve, reject) => {
    signalReady = resolve
    failReady = reject
  })
  const gone = (why: string) => {
    const error = new Error(`streams: the reader ${why}:\n${child.stderr()}`)
    failReady(error)
    for (const reply of replies.splice(0)) reply.reject(error)
  }
  void child.exited.then((code) => gone(`exited (${code})`))
  const late = setTimeout(
    () => failReady(new Error(`streams: ${STREAM_COUNT} streams did not open within ${OPEN_MS / 1000} s`)),
    OPEN_MS,
  )
  void ready.then(
    () => clearTimeout(late),
    () => clearTimeout(late),
  )
  createInterface({ input: child.child.stdout as NodeJS.ReadableStream }).on('line', (line) => {
    const message = JSON.parse(line) as { ready?: true; failed?: string }
    if (message.ready) signalReady()
    else if (message.failed) failReady(new Error(`streams: a stream was refused: ${message.failed}`))
    else replies.shift()?.resolve(message)
  })
  const ask = <T>(command: string) =>
    new Promise<T>((resolve, reject) => {
      replies.push({ resolve: resolve as (value: unknown) => void, reject })
      child.child.stdin?.write(`${command}\n`)
    })
  return {
    ready,
    count: () => ask<ReaderCount>('count'),
    result: () => ask<{ result: ReaderResult }>('stop').then((r) => r.result),
    stop: () => child.stop(),
  }
}

/** The ids of the message.created events committed after `head`, read through the store's feed. */
async function eventsAfter(store: Store, head: FeedPosition): Promise<string[]> {
  const ids: string[] = []
  let position = head
  for (;;) {
    const page = await store.eventFeed(position, 1000)
    for (const { event } of page.events) if (event.type === 'message.created') ids.push(event.id)
    position = page.position
    if (page.events.length < 1000) return ids
  }
}

const postRun = (m: Awaited<ReturnType<typeof measure>>): PostRun => ({
  rate: m.result.requestsPerSecond,
  rssMb: m.rssMb,
  serviceMicros: m.usage.serviceMicros,
  failures: m.result.non2xx + m.result.socketErrors,
})

/** One round on one target: a fresh instance, the POSTs without streams, then with them. */
async function round(settings: Settings, context: Context, name: string, index: number): Promise<StreamRun> {
  const target = TARGETS[name]
  if (!target) throw new Error(`streams: no target ${name}`)
  log(`streams: starting ${target.label}, EVENT_STREAMS_PER_KEY=${STREAM_COUNT}`)
  const live = await target.start({ ...context, orderPets: 0 }, { EVENT_STREAMS_PER_KEY: String(STREAM_COUNT) })
  try {
    const probe = await fetch(`${live.baseUrl}${POSTS.path}`, {
      method: 'POST',
      body: NEW_MESSAGE,
      headers: { authorization: `Bearer ${live.key}`, 'content-type': 'application/json' },
    })
    if (probe.status !== 202)
      throw new Error(`streams: POST ${POSTS.path} answered ${probe.status}: ${await probe.text()}`)
    if (settings.warmupSeconds > 0) await measure(settings, live, POSTS, settings.warmupSeconds, settings.pets)
    const without = postRun(await measure(settings, live, POSTS, settings.seconds, settings.pets))
    // Requests wrk left in flight commit now, before the streams open, not during.
    await sleep(500)
    const openStore = await openStoreAt(live.root ?? ROOT)
    const store = await openStore({ databaseUrl: live.databaseUrl as string, poolSize: 1, timeoutMs: 30_000 })
    const reader = startReader(settings, live)
    try {
      await reader.ready
      const head = await store.eventFeedHead()
      const from = await reader.count()
      const measured = await measure(settings, live, POSTS, settings.seconds, settings.pets)
      const to = await reader.count()
      const ids = await eventsAfter(store, head)
      const expected = ids.length * STREAM_COUNT
      // The last events reach the streams within the feed's poll and the reader's backlog.
      const drainFrom = performance.now()
      let [received, movedAt] = [to.received, performance.now()]
      while (
        received < expected &&
        performance.now() - movedAt < STALL_MS &&
        performance.now() - drainFrom < DRAIN_MS
      ) {
        await sleep(100)
        const now = await reader.count()
        if (now.received > received) [received, movedAt] = [now.received, performance.now()]
      }
      const result = await reader.result()
      let delivered = 0
      for (const id of ids) delivered += Math.min(STREAM_COUNT, result.seen[id] ?? 0)
      const seconds = (result.lastAt - result.firstAt) / 1000
      const delivery: Delivery = {
        events: ids.length,
        delivered,
        missing: expected - delivered,
        streamsShort: result.perStream.filter((n) => n < ids.length).length,
        cut: result.cut,
        perSecond: seconds > 0 ? delivered / seconds : 0,
        p50: result.p50,
        p99: result.p99,
        max: result.max,
        readerCpu: (100 * (to.cpuMicros - from.cpuMicros)) / 1e6 / measured.usage.wallSeconds,
      }
      const run = { target: name, round: index, without, with: postRun(measured), delivery }
      log(
        `streams round ${index}/${settings.rounds} ${name.padEnd(10)} POST ${without.rate.toFixed(0)} → ${run.with.rate.toFixed(0)} req/s` +
          `  RSS ${without.rssMb.toFixed(0)} → ${run.with.rssMb.toFixed(0)} MB  ${delivery.perSecond.toFixed(0)} events/s` +
          `  missing ${delivery.missing} of ${expected}  p50 ${delivery.p50?.toFixed(1)} ms  p99 ${delivery.p99?.toFixed(1)} ms` +
          `  reader CPU ${delivery.readerCpu.toFixed(0)}%${result.cut ? `  cut ${result.cut}` : ''}`,
      )
      return run
    } finally {
      await reader.stop()
      await store.close()
    }
  } finally {
    await live.stop()
  }
}

/** Every round on every chosen stream target, in turn (A B A B…, each afresh). */
export async function measureStreams(settings: Settings, context: Context, targets: string[]): Promise<StreamRun[]> {
  const runs: StreamRun[] = []
  for (let index = 1; index <= settings.rounds; index++)
    for (const name of targets) runs.push(await round(settings, context, name, index))
  return runs
}

const fixed = (n: number | null, digits = 0) =>
  n === null
    ? ''
    : Number.isFinite(n)
      ? n.toLocaleString('en', { maximumFractionDigits: digits, minimumFractionDigits: digits })
      : '> 60000'

export interface StreamsInput {
  settings: Settings
  started: Date
  host: Machine
  head: string
  contention: number | null
  targets: string[]
  runs: StreamRun[]
  /** Why the PostgreSQL target was skipped, when it was. */
  skipped: string
}

/** The section, between its markers in docs/performance.md; and what the terminal gets. */
export function streamsSection(input: StreamsInput): { markdown: string; summary: string } {
  const { settings, runs } = input
  const label = (t: string) => TARGETS[t]?.label ?? t
  const rows = input.targets.flatMap((target) => {
    const mine = runs.filter((r) => r.target === target)
    if (mine.length === 0) return []
    const of = (pick: (r: StreamRun) => number | null) => {
      const values = mine.flatMap((r) => pick(r) ?? [])
      return values.length ? median(values) : null
    }
    const sum = (pick: (r: StreamRun) => number) => mine.reduce((n, r) => n + pick(r), 0)
    return [
      {
        target,
        without: of((r) => r.without.rate) as number,
        with: of((r) => r.with.rate) as number,
        ratio: of((r) => r.with.rate / r.without.rate) as number,
        perSecond: of((r) => r.delivery.perSecond) as number,
        events: sum((r) => r.delivery.events),
        missing: sum((r) => r.delivery.missing),
        streamsShort: sum((r) => r.delivery.streamsShort),
        cut: sum((r) => r.delivery.cut),
        p50: of((r) => r.delivery.p50),
        p99: of((r) => r.delivery.p99),
        max: Math.max(...mine.map((r) => r.delivery.max ?? 0)),
        rssWithout: Math.max(...mine.map((r) => r.without.rssMb)),
        rssWith: Math.max(...mine.map((r) => r.with.rssMb)),
        microsWithout: of((r) => r.without.serviceMicros) as number,
        microsWith: of((r) => r.with.serviceMicros) as number,
        failures: sum((r) => r.without.failures + r.with.failures),
        readerCpu: of((r) => r.delivery.readerCpu) as number,
      },
    ]
  })
  const header = [
    'target',
    'POST/s without',
    `POST/s with ${STREAM_COUNT} streams`,
    'with/without',
    'events/s to the streams',
    'events missing',
    'p50 ms',
    'p99 ms',
    'RSS MB without',
    'RSS MB with',
    'service µs/POST without',
    'service µs/POST with',
  ]
  const table = markdownTable(
    header,
    rows.map((r) => [
      label(r.target),
      fixed(r.without),
      fixed(r.with),
      `${fixed(r.ratio, 2)}×`,
      fixed(r.perSecond),
      `${fixed(r.missing)} of ${fixed(r.events * STREAM_COUNT)}`,
      fixed(r.p50, 1),
      fixed(r.p99, 1),
      fixed(r.rssWithout),
      fixed(r.rssWith),
      fixed(r.microsWithout),
      fixed(r.microsWith),
    ]),
    1,
  )
  const verdicts = rows.map((r) => {
    const got =
      r.missing === 0
        ? `every stream got every one of the ${fixed(r.events)} events`
        : `${fixed(r.missing)} events missing over ${r.streamsShort} streams short of ${fixed(r.events)}${r.cut ? `, ${r.cut} streams cut by the server (backlog past 1 MiB)` : ''}`
    const failed = r.failures ? `; ${r.failures} POSTs failed (non-2xx or socket errors)` : ''
    return `- **${label(r.target)}**: ${got}${failed}; slowest event ${fixed(r.max, 1)} ms; the reader used ${fixed(r.readerCpu)}% of CPU ${settings.clientCpu}.`
  })
  const wait =
    input.contention === null ? '' : `; some task waited for a CPU ${fixed(input.contention)}% of the run's time`
  const rounds =
    settings.rounds === 1 ? 'One round' : `Medians over ${settings.rounds} rounds (the ratio: of the rounds' ratios)`
  const summary = `${table}\n\n${verdicts.join('\n')}\n`
  const markdown = `## Streams

Generated by \`npm run bench\` (bench/streams.ts, the \`streams\` of \`BENCH_WORKLOADS\`): do not edit by
hand, run it again; \`BENCH_WORKLOADS=streams npm run bench\` measures and rewrites only this section,
and a run without \`streams\` keeps it as it is. Issue 39: ${STREAM_COUNT} live event streams (\`GET /v1/events\`,
Server-Sent Events, decision 116) on one instance while \`POST /v1/messages\` runs at the bench's rate.

${machineLine(input.host)}
${dateLine(input.started, 'npm run bench')}
**Commit:** ${input.head}.
**Load:** load average ${input.host.loadAverage} at the start${wait}: the machine is shared.

${rows.length ? table : 'No stream target was measured.'}

${verdicts.join('\n')}
${input.skipped ? `\n**PostgreSQL:** not measured in this run. ${input.skipped}\n` : ''}
### How the streams are measured

Each round, each target (${STREAM_TARGETS.join(' and ')}, as BENCH_TARGETS chooses them) starts afresh as in
the main bench, with \`EVENT_STREAMS_PER_KEY=${STREAM_COUNT}\`, pinned to CPU ${settings.serverCpu}: \`POST /v1/messages\`
(bench/lua/post.lua, the webhooks workload's message, no endpoint subscribed) is warmed up for
${settings.warmupSeconds} s, runs ${settings.seconds} s without streams (\`wrk -t1 -c${settings.connections}\`, pinned to CPU ${settings.clientCpu}), then
bench/stream-reader.ts, a Node process of its own pinned beside wrk, opens ${STREAM_COUNT} streams with the
bench's key and, once each has its \`retry:\`, the same POSTs run again. An event's latency is its
arrival at the reader (the wall-clock time of the chunk it came in) minus the \`createdAt\` of the
message it carries (the service's clock as it writes the message, just before the commit; one
machine, one clock): it includes the group commit, the feed's poll of the store every 200 ms, and
the reader's wait for its share of the core it has with wrk. Events/s is what the ${STREAM_COUNT} streams got
together, from the first arrival to the last. After the POSTs the bench waits until every stream
has every event (or ${STALL_MS / 1000} s pass without a new one), then checks each stream's events against the
\`message.created\` events the store's log holds after the streams opened (read through its feed):
*missing* counts those a stream never got. POST/s and the service's CPU per POST are wrk's and
/proc's as in the main bench, RSS the peak VmRSS during each run; the without run goes first, so the
ratio also holds a few seconds of growth of the tables. ${rounds}, RSS the highest, missing a total.
`
  return { markdown, summary }
}
