/**
 * Where the CPU went during one wrk run, from /proc: the service's processes, the PostgreSQL
 * backends serving it, wrk, and how busy each core was. Rates alone cannot say whether a target
 * is limited by its own core, the database, the pool or the machine; these shares can.
 */
import { spawnSync } from 'node:child_process'
import { readFileSync } from 'node:fs'
import type { BackendWatcher } from './postgres.ts'

const TICKS_PER_SECOND = Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout.trim()) || 100

export interface Usage {
  /** Wall time the shares are of, seconds. */
  wallSeconds: number
  /** Percent of one core, over the run's wall time. */
  service: number
  /** PostgreSQL backends of this target (null without a database server). */
  database: number | null
  wrk: number
  /** Busy percent of each core (user, system, interrupts; not idle, iowait or steal). */
  cores: number[]
  /** Average backends executing a statement, and the most connections seen (null without PostgreSQL). */
  activeBackends: number | null
  backends: number | null
  /** CPU microseconds per request of the service and of PostgreSQL, filled in once the request count is known. */
  serviceMicrosPerRequest?: number
  databaseMicrosPerRequest?: number | null
  wrkMicrosPerRequest?: number
}

/** utime + stime of a process, in clock ticks; null once it is gone. */
function processTicks(pid: number): number | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
    // The command name may contain spaces and parentheses: fields are counted after the last ')'.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
    return Number(fields[11]) + Number(fields[12])
  } catch {
    return null
  }
}

/** Per core: [busy, total] ticks since boot. */
function coreTicks(): [number, number][] {
  const lines = readFileSync('/proc/stat', 'utf8').split('\n')
  return lines
    .filter((line) => /^cpu\d+ /.test(line))
    .map((line) => {
      const [user, nice, system, idle, iowait, irq, softirq, steal] = line.split(/\s+/).slice(1).map(Number) as number[]
      const busy = (user ?? 0) + (nice ?? 0) + (system ?? 0) + (irq ?? 0) + (softirq ?? 0)
      return [busy, busy + (idle ?? 0) + (iowait ?? 0) + (steal ?? 0)]
    })
}

/**
 * Sums the CPU of a changing set of processes: a process seen at the first sample counts from
 * there, one that appears later (a new pool connection, a restarted worker) counts from its start,
 * and one that disappears keeps what it had used at its last sample.
 */
class ProcessGroup {
  #seen = new Map<number, { base: number; last: number }>()
  #started = false

  sample(pids: Iterable<number>): void {
    for (const pid of pids) {
      const ticks = processTicks(pid)
      if (ticks === null) continue
      const known = this.#seen.get(pid)
      if (known) known.last = ticks
      else this.#seen.set(pid, { base: this.#started ? 0 : ticks, last: ticks })
    }
  }

  start(): void {
    this.#started = true
  }

  ticks(): number {
    let sum = 0
    for (const { base, last } of this.#seen.values()) sum += last - base
    return sum
  }
}

export class UsageMeter {
  #servicePids: () => number[]
  #watcher: BackendWatcher | null
  #service = new ProcessGroup()
  #database = new ProcessGroup()
  #wrk = new ProcessGroup()
  #wrkPid: number | null = null
  #cores: [number, number][] = []
  #startedAt = 0
  #activeSum = 0
  #samples = 0
  #mostBackends = 0
  #timer: NodeJS.Timeout | null = null
  #pending: Promise<void> = Promise.resolve()

  constructor(servicePids: () => number[], watcher: BackendWatcher | null) {
    this.#servicePids = servicePids
    this.#watcher = watcher
  }

  async start(intervalMs = 100): Promise<void> {
    await this.#sample(false)
    this.#service.start()
    this.#database.start()
    this.#wrk.start()
    this.#cores = coreTicks()
    this.#startedAt = performance.now()
    this.#timer = setInterval(() => {
      // One sample at a time: a slow pg_stat_activity answer must not pile samples up.
      this.#pending = this.#pending.then(() => this.#sample(true))
    }, intervalMs)
  }

  /** wrk's pid, once it is spawned (its CPU is sampled until it exits). */
  setWrk(pid: number): void {
    this.#wrkPid = pid
  }

  async stop(): Promise<Usage> {
    if (this.#timer) clearInterval(this.#timer)
    await this.#pending
    await this.#sample(false)
    const wallSeconds = (performance.now() - this.#startedAt) / 1000
    const percent = (ticks: number) => (100 * ticks) / TICKS_PER_SECOND / wallSeconds
    const cores = coreTicks().map(([busy, total], i) => {
      const [busy0, total0] = this.#cores[i] ?? [0, 0]
      return total > total0 ? (100 * (busy - busy0)) / (total - total0) : 0
    })
    const watched = this.#watcher !== null
    return {
      wallSeconds,
      service: percent(this.#service.ticks()),
      database: watched ? percent(this.#database.ticks()) : null,
      wrk: percent(this.#wrk.ticks()),
      cores,
      activeBackends: watched && this.#samples ? this.#activeSum / this.#samples : null,
      backends: watched ? this.#mostBackends : null,
    }
  }

  async #sample(counting: boolean): Promise<void> {
    this.#service.sample(this.#servicePids())
    if (this.#wrkPid !== null) this.#wrk.sample([this.#wrkPid])
    if (!this.#watcher) return
    const { pids, active } = await this.#watcher.sample()
    this.#database.sample(pids)
    this.#mostBackends = Math.max(this.#mostBackends, pids.length)
    if (counting) {
      // The watcher's own statement is never counted: it has another application_name.
      this.#activeSum += active
      this.#samples++
    }
  }
}

/** The processes of a server: the pid itself and, for a node:cluster primary, its workers. */
export function withChildren(pid: number): number[] {
  try {
    const children = readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim()
    return [pid, ...(children ? children.split(' ').map(Number) : [])]
  } catch {
    return [pid]
  }
}
