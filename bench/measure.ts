/** The workloads, and one wrk run with /proc sampled for the peak RSS and where the CPU went (service, PostgreSQL, wrk). */
import { spawnSync } from 'node:child_process'
import { join } from 'node:path'
import { contention, readText, type Settings, type WrkResult, wrk } from './common.ts'
import { type RunningTarget, UNKNOWN_KEY } from './targets.ts'

export interface Workload {
  name: string
  description: string
  /** The URL's path; for a request without a script, also the path wrk sends. */
  path: string
  /** A Lua script of bench/lua, and the arguments its init(args) gets. */
  script?: string
  scriptArgs?: (key: string, pets: number) => string[]
  /** Minimum service/ceiling ratio aimed at, or the workload whose rate this one must reach. */
  target?: number | string
  /** One request like the workload's, sent before measuring, and the status it must get. */
  probe?: { method: 'GET' | 'POST'; body?: string; status: number }
  /** Which key it sends: the target's (default), a well-formed unknown one, or one past its rate limit. */
  key?: 'unknown' | 'limited'
}

const LUA = join(import.meta.dirname, 'lua')
/** The NewPet the POST workloads send (bench/lua/post.lua and mix.lua carry the same text). */
const NEW_PET = '{"name":"Biscuit","categoryId":3,"status":"available"}'
const get = {
  path: '/v1/pets/1',
  script: join(LUA, 'get.lua'),
  scriptArgs: (key: string, pets: number) => [key, `${pets}`],
}

/** `target`: the service/ceiling ratio aimed at (issue text), or the workload whose rate a refusal must reach. */
export const WORKLOADS: Workload[] = [
  { name: 'list20', description: 'GET /v1/pets?limit=20', path: '/v1/pets?limit=20', target: 0.5 },
  {
    name: 'list100',
    description: 'GET /v1/pets?limit=100&status=available',
    path: '/v1/pets?limit=100&status=available',
    target: 0.3,
  },
  { name: 'get', description: 'GET /v1/pets/{id}, random seeded id', ...get, target: 0.6 },
  {
    name: 'unauthorized',
    description: 'the same GET with a well-formed key that is in no database (401)',
    ...get,
    key: 'unknown',
    target: 'get',
    probe: { method: 'GET', status: 401 },
  },
  {
    name: 'ratelimited',
    description: 'the same GET with one key past its rate limit (429; an instance of its own with `RATE_LIMIT=1`)',
    ...get,
    key: 'limited',
    target: 'get',
    probe: { method: 'GET', status: 429 },
  },
  {
    name: 'post',
    description: 'POST /v1/pets',
    path: '/v1/pets',
    script: join(LUA, 'post.lua'),
    scriptArgs: (key) => [key],
    target: 0.4,
    probe: { method: 'POST', body: NEW_PET, status: 201 },
  },
  {
    name: 'mix',
    description: '90% GET /v1/pets?limit=20, 10% POST /v1/pets',
    path: '/v1/pets',
    script: join(LUA, 'mix.lua'),
    scriptArgs: (key) => [key],
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
  if (workload.scriptArgs) args.push('--', ...workload.scriptArgs(key, pets))
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
  return { result, rssMb: Math.max(peak, memoryMb(live.pids)), contention: waited(), usage: full }
}
