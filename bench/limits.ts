/**
 * Where the CPU went during the runs (bench/usage.ts), as a table, and for each PostgreSQL target
 * a sentence saying what limits it, derived from those shares rather than guessed: a core that is
 * busy all the time, a pool whose connections are all executing, or neither (then the requests
 * spend their time waiting on round trips).
 */
import { markdownTable, type Row } from './report.ts'
import type { Usage } from './usage.ts'

/** What the report needs to know of a running target beyond its rows. */
export interface TargetShape {
  label: string
  /** taskset CPU list of its servers, e.g. "0" or "0,1". */
  cpus: string
  /** PostgreSQL: connections per instance, and instances. */
  poolSize?: number
  instances: number
  /** Where its PostgreSQL backends were pinned, or null/absent when not. */
  databaseCpus?: string | null
}

/** CPU numbers of a taskset list ("0", "0,1", "0-3"). */
export function cpuNumbers(list: string): number[] {
  return list.split(',').flatMap((part) => {
    const [from, to] = part.split('-').map(Number) as [number, number | undefined]
    return Array.from({ length: (to ?? from) - from + 1 }, (_, i) => from + i)
  })
}

const pct = (n: number) => `${n.toFixed(0)}%`

function cores(usage: Usage): string {
  return usage.cores.map((busy, i) => `${i}: ${pct(busy)}`).join(', ')
}

export function cpuTable(rows: Row[], shapes: Record<string, TargetShape>): string {
  const header = [
    'workload',
    'target',
    'server CPUs',
    'PostgreSQL CPUs',
    'service CPU',
    'service µs/req',
    'PostgreSQL CPU',
    'PostgreSQL µs/req',
    'wrk CPU',
    'busy per core',
    'executing / open connections',
  ]
  const lines = rows.flatMap((r) => {
    const u = r.usage
    const shape = shapes[r.target]
    if (!u || !shape) return []
    return [
      [
        r.workload,
        shape.label,
        shape.cpus,
        u.database === null ? '' : (shape.databaseCpus ?? 'any'),
        pct(u.service),
        (u.serviceMicrosPerRequest ?? 0).toFixed(0),
        u.database === null ? '' : pct(u.database),
        u.databaseMicrosPerRequest == null ? '' : u.databaseMicrosPerRequest.toFixed(0),
        pct(u.wrk),
        cores(u),
        u.activeBackends === null ? '' : `${u.activeBackends.toFixed(1)} / ${(u.backends ?? 0).toFixed(0)}`,
      ],
    ]
  })
  return markdownTable(header, lines, 4)
}

const rate = (n: number) => `~${(Math.round(n / 100) * 100).toLocaleString('en')} req/s`

/**
 * What limits a PostgreSQL target under `row`'s workload, in two or three sentences. The machine is
 * shared, so busy cores alone prove little: the verdict comes from CPU per request (which other
 * processes barely change), turned into the rate each side could sustain on a quiet machine, and
 * from how many pool connections were executing a statement. `reference` is the same workload on
 * SQLite, to show what the round trip to PostgreSQL costs the service.
 */
export function limitSentence(row: Row, shape: TargetShape, reference?: { label: string; row: Row }): string {
  const u = row.usage
  if (!u || u.database === null) return ''
  const service = u.serviceMicrosPerRequest ?? 0
  const database = u.databaseMicrosPerRequest ?? 0
  const wrk = u.wrkMicrosPerRequest ?? 0
  const own = cpuNumbers(shape.cpus)
  const pool = (shape.poolSize ?? 0) * shape.instances
  const executing = u.activeBackends ?? 0
  const bounds: { what: string; rate: number }[] = []
  if (own.length === 1) {
    bounds.push({ what: `the service's core (CPU ${own[0]})`, rate: 1e6 / service })
    const side = shape.databaseCpus ? cpuNumbers(shape.databaseCpus) : []
    const sideCores = side.length || u.cores.length - 1
    bounds.push({
      what: side.length
        ? `PostgreSQL's backends beside wrk (CPU ${shape.databaseCpus})`
        : 'PostgreSQL and wrk on the other cores',
      rate: (sideCores * 1e6) / (database + wrk),
    })
  } else {
    bounds.push({
      what: `the machine's ${u.cores.length} cores, shared by ${shape.instances} instances, PostgreSQL and wrk`,
      rate: (u.cores.length * 1e6) / (service + database + wrk),
    })
  }
  const sorted = [...bounds].sort((a, b) => a.rate - b.rate)
  const [tightest, next] = sorted as [{ what: string; rate: number }, { what: string; rate: number } | undefined]
  const poolBound = pool > 0 && executing >= 0.8 * pool
  // Within a quarter of each other, the two sides are both the limit: noise could swap them.
  const close = next !== undefined && next.rate < tightest.rate * 1.25
  const verdict = poolBound
    ? `the pool: ${executing.toFixed(1)} of its ${pool} connections were executing a statement on average`
    : close
      ? `both sides, about equally: ${tightest.what} and ${next.what}`
      : tightest.what
  const ref = reference?.row.usage?.serviceMicrosPerRequest
  // SQLite serves repeated reads from its page cache, which PostgreSQL targets do not have.
  const compared =
    ref === undefined
      ? ''
      : row.workload === 'post'
        ? ` (the same write on ${reference?.label}: ${ref.toFixed(0)} µs, so going to PostgreSQL costs the service about ${(service - ref).toFixed(0)} µs more)`
        : ` (on ${reference?.label}, which answers this repeated read from its page cache: ${ref.toFixed(0)} µs)`
  const ours = u.service + (u.database ?? 0) + u.wrk
  const others = Math.max(0, u.cores.reduce((a, b) => a + b, 0) - ours)
  return (
    `**${shape.label}**, ${row.workload}: per request the service used ${service.toFixed(0)} µs of CPU${compared}, ` +
    `PostgreSQL ${database.toFixed(0)} µs and wrk ${wrk.toFixed(0)} µs, and ${executing.toFixed(1)} of the ${pool} pool ` +
    `connections were executing a statement on average${row.workload === 'post' ? ' (a write executes until its commit is on disk)' : ''}. On a quiet machine that caps ${bounds
      .map((b) => `${b.what} at ${rate(b.rate)}`)
      .join(' and ')}, so the limit is **${verdict}**. ` +
    `(Measured: ${row.requestsPerSecond.toFixed(0)} req/s, while other processes on this shared machine used about ${pct(others)} of a core.)`
  )
}
