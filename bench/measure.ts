/** The workloads, and one wrk run with /proc sampled for the peak RSS and where the CPU went (service, PostgreSQL, wrk). */
import { spawnSync } from 'node:child_process'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { ROOT } from '../scripts/start-command.ts'
import { contention, readText, type Settings, type WrkResult, wrk } from './common.ts'
import { openStoreAt } from './src.ts'
import { RACE_PETS, type RunningTarget, UNKNOWN_KEY } from './targets.ts'

export interface Workload {
  name: string
  description: string
  /** The URL's path; for a request without a script, also the path wrk sends. */
  path: string
  /** A Lua script of bench/lua, and the arguments its init(args) gets. */
  script?: string
  scriptArgs?: (key: string, pets: number, live: RunningTarget) => string[]
  /** Minimum service/ceiling ratio aimed at, or the workload whose rate this one must reach. */
  target?: number | string
  /**
   * Requests like the workload's, sent in turn before measuring, each with the status it must get
   * (default: one GET of `path`, 200; none for a mix, whose requests are other workloads'). Each
   * answer is a fixture the ceiling replays, named `fixture` (default: the workload's name).
   */
  probes?: Probe[]
  /** It orders pets: the service targets get available pets seeded for it (BENCH_ORDER_PETS). */
  orders?: boolean
  /** It reads any seeded pet: each target reads every one first (readEverySeededPet). */
  readsSeededPets?: boolean
  /** Which key it sends: the target's (default), a well-formed unknown one, or one past its rate limit. */
  key?: 'unknown' | 'limited'
  /** The status most of its answers have by design (the race's 409s): not counted as failures. */
  refused?: number
  /** On a service target, before and after each wrk run: sets its pets up; checks what it did, and says it. */
  before?: (live: RunningTarget) => Promise<void>
  after?: (live: RunningTarget, result: WrkResult, connections: number) => Promise<string>
}

export interface Probe {
  method: 'GET' | 'POST'
  /** Default: the workload's path; a function gets the previous probe's answer (an order's, to cancel it). */
  path?: string | ((previous: string) => string)
  body?: string | ((live: RunningTarget) => string)
  status: number
  fixture?: string
}

export const LUA = join(import.meta.dirname, 'lua')
/** The NewPet the POST workloads send (bench/lua/mix.lua carries the same text). */
const NEW_PET = '{"name":"Biscuit","categoryId":3,"status":"available"}'
/** The NewMessage the webhooks workload and the streams measurement (bench/streams.ts) send. */
export const NEW_MESSAGE = '{"message":"Biscuit is ready for pick-up"}'
const get = {
  path: '/v1/pets/1',
  script: join(LUA, 'get.lua'),
  scriptArgs: (key: string, pets: number) => [key, `${pets}`],
}

const BETA = { 'animal-store-beta': 'orders' }
/** The next pet of the order workload's run, or the first race pet on the ceiling (it checks nothing). */
const nextOrderPet = (live: RunningTarget) => (live.orderPets ? live.orderPets.next++ : 1)

/** GET or POST through the service's API with the bench's key and the beta opt-in; the parsed answer. */
async function api<T>(live: RunningTarget, path: string, method = 'GET'): Promise<T> {
  const response = await fetch(`${live.baseUrl}${path}`, {
    method,
    headers: { authorization: `Bearer ${live.key}`, ...BETA },
  })
  if (!response.ok) throw new Error(`${method} ${path} answered ${response.status}: ${await response.text()}`)
  return (await response.json()) as T
}
const placeOrder: Probe = {
  method: 'POST',
  path: '/v1/store/orders',
  body: (live) => `{"petId":${nextOrderPet(live)}}`,
  status: 201,
}
const placedOn = (live: RunningTarget, petId: number) =>
  api<{ id: string }[]>(live, `/v1/store/orders?petId=${petId}&status=placed`)
const racePets = (live: RunningTarget) =>
  Array.from({ length: RACE_PETS }, (_, i) => (live.orderPets?.first as number) + i)

/** Before a race: the race pets' orders canceled, so that each pet has exactly one order to win again. */
async function freeRacePets(live: RunningTarget): Promise<void> {
  if (!live.orderPets) return
  for (const petId of racePets(live)) {
    for (const { id } of await placedOn(live, petId)) await api(live, `/v1/store/orders/${id}/cancel`, 'POST')
  }
}

/** After a race: one 201 per pet, 409 for the rest, and each pet with exactly one placed order. */
async function checkRace(live: RunningTarget, result: WrkResult): Promise<string> {
  const { 201: created = 0, 409: refused = 0, ...other } = result.script
  const counts = `201: ${created}, 409: ${refused}${Object.keys(other).length ? `, other: ${JSON.stringify(other)}` : ''}`
  if (!live.orderPets) return counts
  const twice: number[] = []
  for (const petId of racePets(live)) if ((await placedOn(live, petId)).length !== 1) twice.push(petId)
  if (created !== RACE_PETS || Object.keys(other).length > 0 || twice.length > 0) {
    throw new Error(`race: ${counts}; pets without exactly one placed order: ${twice.join(', ') || 'none'}`)
  }
  return `${counts}; each of the ${RACE_PETS} pets has one placed order`
}

/** After a mix-orders run: the pets it asked for are used, and every answer was a 2xx. */
async function checkOrderMix(live: RunningTarget, result: WrkResult): Promise<string> {
  const { placed = 0, canceled = 0, ...statuses } = result.script
  if (live.orderPets) live.orderPets.next += placed
  if (live.orderPets && live.orderPets.next > live.orderPets.last)
    throw new Error('mix-orders: out of pets; raise BENCH_ORDER_PETS')
  const counts = Object.entries(statuses).map(([status, n]) => `${status}: ${n}`)
  return `orders asked for ${placed}, cancels ${canceled}; answers ${counts.join(', ')}`
}

/** The webhooks workload's receiver of a target, and where a run started: its count and the time then. */
interface Hooked {
  received: number
  close(): Promise<void>
  from?: { received: number; at: number }
}
const hooked = new WeakMap<RunningTarget, Hooked>()
/** How long the webhooks workload waits after its run for the outbox to drain (so the next workload is not measured beside the backlog). */
const DRAIN_MS = 60_000

/**
 * Before a webhooks run on a service target: a receiver on 127.0.0.1 in this process answering 204
 * at once, and an endpoint of the bench's account subscribed to message.created pointing at it
 * (made through the store, as the API would: once per target).
 */
async function subscribeReceiver(live: RunningTarget): Promise<void> {
  if (!live.databaseUrl) return
  let hook = hooked.get(live)
  if (!hook) {
    const state: Hooked = { received: 0, close: async () => {} }
    const server = http.createServer((request, response) => {
      request.resume()
      request.on('end', () => {
        state.received++
        response.writeHead(204).end()
      })
    })
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    state.close = () => new Promise((resolve) => server.close(() => resolve()))
    const stop = live.stop
    live.stop = async () => {
      await stop()
      server.closeAllConnections()
      await state.close()
    }
    // The store of the checkout the target runs from: BENCH_BASE's may have other migrations.
    const openStore = await openStoreAt(live.root ?? ROOT)
    const store = await openStore({ databaseUrl: live.databaseUrl, poolSize: 1, timeoutMs: 30_000 })
    try {
      const account = await store.findAccountByEmail('bench@example.com')
      if (!account) throw new Error('webhooks: no bench@example.com account')
      await store.createWebhookEndpoint({
        accountId: account.id,
        url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`,
        events: ['message.created'],
        description: 'bench receiver',
        secret: `whsec_${Buffer.alloc(32, 7).toString('base64')}`,
      })
    } finally {
      await store.close()
    }
    hook = state
    hooked.set(live, hook)
  }
  hook.from = { received: hook.received, at: performance.now() }
}

/** The outbox as /readyz reports it (store.outboxStats()). */
async function outboxDepth(live: RunningTarget): Promise<number> {
  const ready = (await (await fetch(`${live.baseUrl}/readyz`)).json()) as { outbox?: { depth: number } }
  if (ready.outbox === undefined) throw new Error(`webhooks: /readyz has no outbox: ${JSON.stringify(ready)}`)
  return ready.outbox.depth
}

/** After a webhooks run: deliveries a second over the run (the receiver's count), the outbox left, and how long it took to drain. */
async function deliveryRate(live: RunningTarget, result: WrkResult): Promise<string> {
  const hook = hooked.get(live)
  if (!hook?.from) return ''
  const seconds = (performance.now() - hook.from.at) / 1000
  const delivered = hook.received - hook.from.received
  const depth = await outboxDepth(live)
  const drainFrom = performance.now()
  let left = depth
  while (left > 0 && performance.now() - drainFrom < DRAIN_MS) {
    await sleep(100)
    left = await outboxDepth(live)
  }
  const drained =
    left === 0
      ? `drained in ${((performance.now() - drainFrom) / 1000).toFixed(1)} s`
      : `${left} left after ${DRAIN_MS / 1000} s`
  const accepted = (result.requests - result.non2xx) / seconds
  return (
    `accepted ${accepted.toFixed(0)} msg/s, delivered ${(delivered / seconds).toFixed(0)}/s ` +
    `(${delivered} in ${seconds.toFixed(1)} s), outbox depth at the end ${depth}, ${drained}`
  )
}

/** `target`: the service/ceiling ratio aimed at (issue text), or the workload whose rate a refusal must reach. */
export const WORKLOADS: Workload[] = [
  { name: 'list20', description: 'GET /v1/pets?limit=20', path: '/v1/pets?limit=20', target: 0.6 },
  {
    name: 'list100',
    description: 'GET /v1/pets?limit=100&status=available',
    path: '/v1/pets?limit=100&status=available',
    target: 0.3,
  },
  { name: 'get', description: 'GET /v1/pets/{id}, random seeded id', ...get, target: 0.6, readsSeededPets: true },
  {
    name: 'unauthorized',
    description: 'the same GET with a well-formed key that is in no database (401)',
    ...get,
    key: 'unknown',
    target: 'get',
    probes: [{ method: 'GET', status: 401 }],
  },
  {
    name: 'ratelimited',
    description: 'the same GET with one key past its rate limit (429; an instance of its own with `RATE_LIMIT=1`)',
    ...get,
    key: 'limited',
    target: 'get',
    probes: [{ method: 'GET', status: 429 }],
  },
  {
    name: 'post',
    description: 'POST /v1/pets',
    path: '/v1/pets',
    script: join(LUA, 'post.lua'),
    scriptArgs: (key) => [key, NEW_PET],
    target: 0.35,
    probes: [{ method: 'POST', body: NEW_PET, status: 201 }],
  },
  {
    name: 'order',
    description: 'POST /v1/store/orders, each request for another available pet',
    path: '/v1/store/orders',
    script: join(LUA, 'order.lua'),
    scriptArgs: (key, _, live) => [key, String(live.orderPets?.next ?? 1), '0'],
    target: 0.3,
    probes: [placeOrder],
    orders: true,
    // Pets asked for and not answered when wrk stopped may be ordered too: at most one per connection.
    after: async (live, result, connections) => {
      if (live.orderPets) live.orderPets.next += result.requests + connections
      if (live.orderPets && live.orderPets.next > live.orderPets.last)
        throw new Error('order: out of pets; raise BENCH_ORDER_PETS')
      return ''
    },
  },
  {
    name: 'race',
    description: `POST /v1/store/orders for the same ${RACE_PETS} pets, freed before each run (one 201 per pet, 409 for the rest)`,
    path: '/v1/store/orders',
    script: join(LUA, 'order.lua'),
    scriptArgs: (key, _, live) => [key, String(live.orderPets?.first ?? 1), String(RACE_PETS)],
    probes: [placeOrder],
    orders: true,
    refused: 409,
    before: freeRacePets,
    after: checkRace,
  },
  {
    name: 'webhooks',
    description:
      'POST /v1/messages with one endpoint subscribed to message.created at a receiver on 127.0.0.1 (in the bench process, 204 at once); deliveries a second and the outbox depth at the end',
    path: '/v1/messages',
    script: join(LUA, 'post.lua'),
    scriptArgs: (key) => [key, NEW_MESSAGE],
    probes: [{ method: 'POST', body: NEW_MESSAGE, status: 202 }],
    before: subscribeReceiver,
    after: deliveryRate,
  },
  {
    name: 'mix',
    description:
      'reads and writes as users send them: of every ten requests, five GET /v1/pets?limit=20, four GET /v1/pets/{id} (random seeded id), one POST /v1/pets',
    path: '/v1/pets',
    script: join(LUA, 'mix.lua'),
    scriptArgs: (key, pets) => [key, `${pets}`],
    target: 0.45,
    readsSeededPets: true,
    probes: [],
  },
  {
    name: 'mix-orders',
    description:
      "the mix's reads, its one write in ten an order: POST /v1/store/orders for another available pet, or POST /v1/store/orders/{id}/cancel of an order placed earlier in the run, in turn",
    path: '/v1/pets',
    script: join(LUA, 'mix-orders.lua'),
    scriptArgs: (key, pets, live) => [key, `${pets}`, String(live.orderPets?.next ?? 1)],
    readsSeededPets: true,
    // An order placed and canceled: the cancel is the ceiling's answer to any …/cancel.
    probes: [
      { ...placeOrder, fixture: 'placed' },
      {
        method: 'POST',
        path: (placed) => `/v1/store/orders/${(JSON.parse(placed) as { id: string }).id}/cancel`,
        status: 200,
        fixture: 'cancel',
      },
    ],
    orders: true,
    after: checkOrderMix,
  },
]

export interface Usage {
  wallSeconds: number
  /** Percent of one core over the run. */
  service: number
  /** The target's PostgreSQL backends; null without PostgreSQL. */
  database: number | null
  wrk: number
  /** Busy percent of each core (user, system, interrupts). */
  cores: number[]
  /** Backends executing a statement on average, and the most connections seen; null without PostgreSQL. */
  activeBackends: number | null
  backends: number | null
  /** CPU µs per request. */
  serviceMicros: number
  databaseMicros: number | null
  wrkMicros: number
}

const TICKS = Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout.trim()) || 100

/** utime + stime of a process in clock ticks; null once it is gone. */
function ticks(pid: number): number | null {
  const stat = readText(`/proc/${pid}/stat`)
  // The command name may hold spaces and parentheses: count fields after the last ')'.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
  return stat ? Number(fields[11]) + Number(fields[12]) : null
}

/** Per core: [busy, total] ticks since boot. */
const coreTicks = () =>
  readText('/proc/stat')
    .split('\n')
    .filter((line) => /^cpu\d+ /.test(line))
    .map((line) => {
      const [user, nice, system, idle, iowait, irq, softirq, steal] = line.split(/\s+/).slice(1).map(Number) as number[]
      const busy = (user ?? 0) + (nice ?? 0) + (system ?? 0) + (irq ?? 0) + (softirq ?? 0)
      return [busy, busy + (idle ?? 0) + (iowait ?? 0) + (steal ?? 0)] as const
    })

/** CPU ticks of a changing set of processes: a newcomer (a pool connection) counts from its start, a leaver keeps its last. */
function processGroup() {
  const seen = new Map<number, { base: number; last: number }>()
  let counting = false
  return {
    sample(pids: number[], start = false) {
      for (const pid of pids) {
        const now = ticks(pid)
        if (now === null) continue
        const known = seen.get(pid)
        if (known) known.last = now
        else seen.set(pid, { base: counting ? 0 : now, last: now })
      }
      counting ||= start
    },
    ticks: () => [...seen.values()].reduce((sum, { base, last }) => sum + last - base, 0),
  }
}

/** Resident memory of processes now, MB: VmRSS, or RssFile for the part that maps files (node itself). */
export const memoryMb = (pids: number[], field = 'VmRSS') =>
  pids.reduce(
    (kb, pid) => kb + Number(new RegExp(`^${field}:\\s+(\\d+)`, 'm').exec(readText(`/proc/${pid}/status`))?.[1] ?? 0),
    0,
  ) / 1024

export async function measure(
  settings: Settings,
  target: RunningTarget,
  workload: Workload,
  seconds: number,
  pets: number,
) {
  const live = workload.key === 'limited' ? (target.limited ?? target) : target
  const key = workload.key === 'unknown' ? UNKNOWN_KEY : live.key
  await workload.before?.(live)
  const [service, database, wrkGroup] = [processGroup(), processGroup(), processGroup()]
  let wrkPid = 0
  let [active, samples, mostBackends] = [0, 0, 0]
  const sample = async (counting = false) => {
    service.sample(live.pids)
    if (wrkPid) wrkGroup.sample([wrkPid])
    if (!live.backends) return
    const backends = await live.backends.sample()
    database.sample(backends.pids)
    mostBackends = Math.max(mostBackends, backends.pids.length)
    // The watcher's own statement is never counted: it has another application_name.
    if (counting) [active, samples] = [active + backends.active, samples + 1]
  }
  await sample()
  service.sample([], true)
  database.sample([], true)
  wrkGroup.sample([], true)
  const cores0 = coreTicks()
  const since = performance.now()
  const waited = contention()
  let peak = memoryMb(live.pids)
  let pending = Promise.resolve()
  const timer = setInterval(() => {
    peak = Math.max(peak, memoryMb(live.pids))
    // One sample at a time: a slow pg_stat_activity answer must not pile samples up.
    pending = pending.then(() => sample(true))
  }, 100)
  const args = [`-c${settings.connections}`, `-d${seconds}s`]
  if (workload.script) args.push('-s', workload.script)
  // Scripted workloads set the key themselves; the others get it as a header.
  else args.push('-H', `Authorization: Bearer ${key}`)
  args.push(`${live.baseUrl}${workload.path}`)
  if (workload.scriptArgs) args.push('--', ...workload.scriptArgs(key, pets, live))
  let result: WrkResult
  try {
    result = await wrk(settings.clientCpu, args, (pid) => {
      wrkPid = pid
    })
  } finally {
    clearInterval(timer)
    await pending
    await sample()
  }
  const wallSeconds = (performance.now() - since) / 1000
  const percent = (n: number) => (100 * n) / TICKS / wallSeconds
  const micros = (share: number) => (result.requests ? ((share / 100) * wallSeconds * 1e6) / result.requests : 0)
  const cores1 = coreTicks()
  const watched = Boolean(live.backends)
  const usage = {
    wallSeconds,
    service: percent(service.ticks()),
    database: watched ? percent(database.ticks()) : null,
    wrk: percent(wrkGroup.ticks()),
    cores: cores0.map(([busy, total], i) => {
      const [busy1, total1] = cores1[i] ?? [busy, total]
      return total1 > total ? (100 * (busy1 - busy)) / (total1 - total) : 0
    }),
    activeBackends: watched && samples ? active / samples : null,
    backends: watched ? mostBackends : null,
  }
  const full: Usage = {
    ...usage,
    serviceMicros: micros(usage.service),
    databaseMicros: usage.database === null ? null : micros(usage.database),
    wrkMicros: micros(usage.wrk),
  }
  const note = (await workload.after?.(live, result, settings.connections)) ?? ''
  return { result, rssMb: Math.max(peak, memoryMb(live.pids)), contention: waited(), usage: full, note }
}

/**
 * GET /v1/pets/1…pets once each, 16 at a time, before a round is measured: a service that has run a
 * while holds the pets it serves, and the few seconds of a warm-up would leave a uniform draw over
 * 10,000 ids mostly missing (a miss is a query: on PostgreSQL, one across the network). Every target
 * gets the same requests, the peer and the ceiling too.
 */
export async function readEverySeededPet(live: RunningTarget, pets: number): Promise<void> {
  let next = 1
  const reader = async () => {
    while (next <= pets) await api(live, `/v1/pets/${next++}`)
  }
  await Promise.all(Array.from({ length: 16 }, reader))
}
