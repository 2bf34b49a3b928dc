/** The "Growth" section: medians per database, size and query, each against the smallest size of the run. */
import { dateLine, type Machine, machineLine, markdownTable, median, type Settings, type WrkResult } from './common.ts'
import type { Usage, Workload } from './measure.ts'
import type { RunningTarget } from './targets.ts'

/** The rare status, with RARE_COUNT pets evenly spread at every size. */
export const RARE_STATUS = 'pending'
/** A fixed count, not a share: every size serves full pages, while the status gets rarer as the table grows. */
export const RARE_COUNT = 50
/** Page sizes in turn (mean 20): at 1k, three sizes give thousands of distinct pages, more than the cache's 1000. */
export const LIMITS = [19, 20, 21]
/** Starting ids per query (fewer where the data has fewer): with LIMITS, 6000 distinct URLs. */
export const STARTS = 2000

/** The issue's bound: latency at any size within this factor of the latency at 1k. */
export const GROWTH_TARGET = 1.3

export interface GrowthTarget {
  name: string
  database: string
  pets: number
  /** Wall time of the bulk insert and what makes it durable and ready; bytes on disk. */
  seeded: { seconds: number; bytes: number }
  live: RunningTarget
  workloads: Workload[]
  urls: { rare: number; deep: number }
  petsPerPage: { rare: number; deep: number }
}

export interface GrowthRun {
  target: string
  query: string
  round: number
  result: WrkResult
  usage: Usage
}

const QUERIES: Record<string, string> = {
  rare: `rare status (\`?limit=20&status=${RARE_STATUS}\`)`,
  deep: 'deep pages (`?limit=20&cursor=…`, last pages)',
}

/** 1000 → 1k, 100000 → 100k, 1000000 → 1M. */
function short(n: number): string {
  return n >= 1e6 && n % 1e6 === 0 ? `${n / 1e6}M` : n >= 1e3 && n % 1e3 === 0 ? `${n / 1e3}k` : String(n)
}

function summarise(runs: GrowthRun[], info: GrowthTarget, query: string) {
  const mine = runs.filter((r) => r.target === info.name && r.query === query)
  if (mine.length === 0) return null
  const database = mine.flatMap((r) => r.usage.databaseMicros ?? [])
  return {
    info,
    query,
    rate: median(mine.map((r) => r.result.requestsPerSecond)),
    p50: median(mine.map((r) => r.result.p50)),
    p99: median(mine.map((r) => r.result.p99)),
    serviceMicros: median(mine.map((r) => r.usage.serviceMicros)),
    databaseMicros: database.length ? median(database) : null,
    failures: mine.reduce((sum, r) => sum + r.result.non2xx + r.result.socketErrors, 0),
  }
}

const ratio = (n: number) => `${n.toFixed(2)}×`

export interface GrowthInput {
  settings: Settings
  started: Date
  host: Machine
  contention: number | null
  targets: GrowthTarget[]
  runs: GrowthRun[]
  skipped: string
}

export function growthSection(input: GrowthInput): { markdown: string; summary: string } {
  const { targets, runs, settings } = input
  const databases = [...new Set(targets.map((t) => t.database))]
  const baseline = Math.min(...targets.map((t) => t.pets))
  const base = short(baseline)

  const seeding = markdownTable(
    ['database', 'pets', 'seeding s', 'pets/s', 'on disk MB', 'bytes/pet'],
    targets.map((t) => [
      t.database,
      t.pets.toLocaleString('en'),
      t.seeded.seconds.toFixed(2),
      Math.round(t.pets / t.seeded.seconds).toLocaleString('en'),
      (t.seeded.bytes / 1e6).toFixed(1),
      (t.seeded.bytes / t.pets).toFixed(0),
    ]),
    2,
  )

  const verdicts: string[] = []
  const lines: string[][] = []
  for (const database of databases) {
    for (const query of Object.keys(QUERIES)) {
      const rows = targets.filter((t) => t.database === database).flatMap((t) => summarise(runs, t, query) ?? [])
      const first = rows.find((r) => r.info.pets === baseline)
      if (!first) continue
      const clauses: { p50: string[]; p99: string[] } = { p50: [], p99: [] }
      let met = { p50: true, p99: true }
      for (const r of rows) {
        const cpu = r.serviceMicros + (r.databaseMicros ?? 0)
        const firstCpu = first.serviceMicros + (first.databaseMicros ?? 0)
        lines.push([
          database,
          query,
          short(r.info.pets),
          String(r.info.urls[query as 'rare' | 'deep']),
          r.info.petsPerPage[query as 'rare' | 'deep'].toFixed(0),
          r.rate.toFixed(0),
          r.p50.toFixed(2),
          r.p99.toFixed(2),
          ratio(r.p50 / first.p50),
          ratio(r.p99 / first.p99),
          r.serviceMicros.toFixed(0),
          r.databaseMicros === null ? '' : r.databaseMicros.toFixed(0),
          ratio(cpu / firstCpu),
          String(r.failures),
        ])
        if (r === first) continue
        for (const which of ['p50', 'p99'] as const) {
          const factor = r[which] / first[which]
          clauses[which].push(`${short(r.info.pets)} ${ratio(factor)}`)
          if (factor > GROWTH_TARGET) met = { ...met, [which]: false }
        }
      }
      verdicts.push(
        `- **${database}**, ${QUERIES[query]}: p50 ${clauses.p50.join(', ')}: ${met.p50 ? 'met' : 'not met'}; ` +
          `p99 ${clauses.p99.join(', ')}: ${met.p99 ? 'met' : 'not met'}.`,
      )
    }
  }
  const latency = markdownTable(
    `database|query|pets|distinct URLs|pets/page|req/s|p50 ms|p99 ms|p50 ÷ ${base}|p99 ÷ ${base}|service µs/req|PostgreSQL µs/req|CPU/req ÷ ${base}|non-2xx + errors`.split(
      '|',
    ),
    lines,
    2,
  )
  const cache = cacheCheck(input)
  const verdict = `**Target** (p50 and p99 within ${GROWTH_TARGET}× of ${base}; medians over ${settings.rounds} rounds):\n\n${verdicts.join('\n')}`
  const summary =
    `**Seeding and size on disk:**\n\n${seeding}\n\n` +
    `**Latency** under wrk's ${settings.connections} connections, medians over ${settings.rounds} rounds:\n\n${latency}\n\n${verdict}\n\n${cache}`
  return { markdown: document(input, summary), summary }
}

/** SQLite caches pages: the cycled URLs must cost what a miss costs, far more than one URL repeated. */
function cacheCheck(input: GrowthInput): string {
  const sqlite = input.targets.filter((t) => t.database === 'sqlite')
  const pairs = sqlite.flatMap((t) => {
    const deep = summarise(input.runs, t, 'deep')
    const one = summarise(input.runs, t, 'one')
    return deep && one ? [{ t, deep, one }] : []
  })
  if (pairs.length === 0) return ''
  const table = markdownTable(
    ['pets', 'cycled deep pages p50 ms', 'service µs/req', 'one page repeated p50 ms', 'service µs/req '],
    pairs.map(({ t, deep, one }) => [
      short(t.pets),
      deep.p50.toFixed(2),
      deep.serviceMicros.toFixed(0),
      one.p50.toFixed(2),
      one.serviceMicros.toFixed(0),
    ]),
    1,
  )
  const lowest = Math.min(...pairs.map((p) => p.deep.serviceMicros / p.one.serviceMicros))
  const reading =
    lowest >= 1.3
      ? `At every size a cycled request cost the service at least ${ratio(lowest)} the CPU of a repeated one, which the page cache answers: the cycled requests were answered by the database, not the cache.`
      : `Warning: at some size a cycled request cost only ${ratio(lowest)} the CPU of a repeated (cached) one, so some cycled requests may have been answered by the cache.`
  return `**Cache check** (SQLite; PostgreSQL never caches pages):\n\n${table}\n\n${reading}`
}

function document(input: GrowthInput, summary: string): string {
  const { settings, started, host, contention, skipped } = input
  const wait = contention === null ? '' : `; some task waited for a CPU ${contention.toFixed(0)}% of the run's time`
  const hasPostgres = input.targets.some((t) => t.database === 'postgres')
  return `## Growth

Generated by \`npm run bench:growth\` (bench/growth.ts): do not edit by hand, run it again
(\`npm run bench\` keeps this section as it is). The issue: a page of a rare status and pages deep in
a cursor walk stay within ${GROWTH_TARGET}× of their latency at 1k pets, at 100k and 1M.

${machineLine(host)}
${dateLine(started, 'npm run bench:growth')}
**Load:** load average ${host.loadAverage} at the start${wait}: the machine is shared, so p99 in
particular moves with what else runs; the CPU per request (service, and PostgreSQL's backends)
moves much less.${skipped ? ` ${skipped}` : ''}

${summary}

### How the growth is measured

- **Data:** a fresh database per size and database, ids 1..N; ${RARE_COUNT} pets, evenly spread, have the rare status
  \`${RARE_STATUS}\` at every size (1 in 20 at 1k, 1 in 20,000 at 1M: every size serves full pages, and a
  page without an index would scan 1000 times more rows at 1M than at 1k), the others are 80% \`available\`, 20% \`sold\`.
  Seeded in bulk: the store creates the schema, then SQLite gets one prepared INSERT per pet in one
  transaction through node:sqlite on the file, then a WAL checkpoint${hasPostgres ? '; PostgreSQL gets `INSERT … SELECT unnest(…)` per 50,000 pets in one transaction, then `VACUUM ANALYZE` (what autovacuum would do next)' : ''}. Seeding time is
  that wall time. **On disk:** the SQLite file plus its WAL after seeding${hasPostgres ? '; for PostgreSQL, `pg_total_relation_size` of every table of the schema (indexes and TOAST included)' : ''}.
- **Queries:** **rare**: \`GET /v1/pets?limit=20&status=${RARE_STATUS}&cursor=…\`, starting at up to ${STARTS} ids spread
  over the range where a page is full;
  **deep**: \`GET /v1/pets?limit=20&cursor=…\` starting after each of the last ${STARTS} pets (every id at 1k).
- **Defeating the page cache:** the service keeps the last 1000 serialized pages (first in, first
  out). Each run cycles through every URL of its set in a fixed shuffled order (bench/lua/cycle.lua),
  with page sizes ${LIMITS.join(', ')} in turn (mean 20): at 1k there are only 1000 pets, hence at
  most about 1000 distinct pages of one size, no more than the cache holds, so three sizes are needed
  for thousands of distinct URLs; a URL comes back only after thousands of other pages were stored,
  long after it was evicted. Deep cursors come from walking the API (\`Link: <…>; rel="next"\`, limit=100
  to the tail, then limit=1). The rare status has too few pages for that (3 at every size), so its cursors are
  minted with the service's own secret, read from the database, and codec (src/domain/pagination.ts): each
  equals what the service issues for a page ending at that id, which the bench checks against the
  walked cursors before measuring. The cache check above compares with one URL repeated.${hasPostgres ? ' PostgreSQL never caches pages; it gets the same kind of URLs.' : ''}
- **Load:** \`wrk -t1 -c${settings.connections} -d${settings.seconds}s --latency\` pinned to CPU ${settings.clientCpu}; each service pinned to CPU
  ${settings.serverCpu}${hasPostgres ? `, its PostgreSQL backends to CPU ${settings.postgresCpu}` : ''}, as in the main bench. Every size's service runs side by side;
  ${settings.warmupSeconds} s warm-up per query and size, then ${settings.rounds} rounds, each running every query on every size in
  turn; p50, p99 and CPU per request are medians over the rounds, failures are totals (a failed
  request would time an error page, so they must be 0). CPU/req is the service's CPU per request
  plus PostgreSQL's, from /proc (bench/measure.ts).
- **Running it:** \`npm run bench:growth\` (about ${Math.ceil(estimateMinutes(input))} minutes here). Settings:
  \`BENCH_GROWTH_SIZES\` (1000,100000,1000000), \`BENCH_GROWTH_DATABASES\` (sqlite,postgres; PostgreSQL
  is skipped with a note when it does not answer), and the main bench's \`BENCH_SECONDS\`,
  \`BENCH_ROUNDS\`, \`BENCH_WARMUP_SECONDS\`, \`BENCH_CONNECTIONS\`, \`BENCH_*_CPU\`, \`BENCH_POSTGRES_URL\`, \`BENCH_DOC\`.
`
}

function estimateMinutes(input: GrowthInput): number {
  const { settings, targets } = input
  const queries = targets.reduce((sum, t) => sum + (t.database === 'sqlite' ? 3 : 2), 0)
  const seeding = targets.reduce((sum, t) => sum + t.seeded.seconds + t.pets / 50_000, 0)
  return (queries * (settings.warmupSeconds + settings.rounds * settings.seconds) + seeding) / 60
}
