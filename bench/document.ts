/** docs/performance.md from one run of `npm run bench`: medians, ratios, targets, where the CPU went, the method. */
import { startCommand } from '../scripts/start-command.ts'
import { dateLine, type Machine, machineLine, markdownTable, median, type Settings, type WrkResult } from './common.ts'
import { type Usage, WORKLOADS, type Workload } from './measure.ts'
import { STREAM_COUNT, STREAMS } from './streams.ts'
import { BASE_SUFFIX, POOL_SIZE, type RunningTarget, TARGETS } from './targets.ts'

export interface Measurement {
  target: string
  workload: string
  round: number
  result: WrkResult
  /** Highest RSS seen during the run, MB, over the target's processes. */
  rssMb: number
  usage: Usage
  /** Run under --cpu-prof (BENCH_PROFILE's round): the profiler's samples swell its RSS. */
  profiled?: boolean
}

type Row = ReturnType<typeof summarise>[number]

/** The issue's latency and memory targets, checked on the first service target. */
const P99_TARGET_MS = 5
const RSS_TARGET_MB = 150

/** Each figure's median over the runs (a core's busy share with that core's). */
function medianUsage(usages: Usage[]): Usage {
  const of = (pick: (u: Usage) => number | null | undefined) => {
    const values = usages.flatMap((u) => pick(u) ?? [])
    return values.length ? median(values) : null
  }
  const first = usages[0] as Usage
  const fields = Object.keys(first).map((k) => [k, of((u) => u[k as keyof Usage] as number | null)])
  return { ...Object.fromEntries(fields), cores: first.cores.map((_, i) => of((u) => u.cores[i]) ?? 0) } as Usage
}

/** One row per workload and target; the ratio is the median of per-round ratios (a round shares the machine's mood). */
function summarise(measurements: Measurement[], workloads: Workload[], targets: string[]) {
  return workloads.flatMap((w) => {
    const ceiling = measurements.filter((m) => m.workload === w.name && m.target === 'ceiling')
    return targets.flatMap((target) => {
      const runs = measurements.filter((m) => m.workload === w.name && m.target === target)
      if (runs.length === 0) return []
      const ratios = runs.flatMap((run) => {
        const pair = ceiling.find((c) => c.round === run.round)
        return pair && target !== 'ceiling' ? [run.result.requestsPerSecond / pair.result.requestsPerSecond] : []
      })
      const of = (pick: (r: WrkResult) => number) => median(runs.map((r) => pick(r.result)))
      const sum = (pick: (r: WrkResult) => number) => runs.reduce((n, r) => n + pick(r.result), 0)
      return {
        workload: w.name,
        target,
        rate: of((r) => r.requestsPerSecond),
        ceilingRate: ceiling.length ? median(ceiling.map((c) => c.result.requestsPerSecond)) : null,
        ratio: ratios.length ? median(ratios) : null,
        /** This target's rate over its BENCH_BASE twin's, median of the rounds' ratios. */
        vsBase: pairedRatio(measurements, w.name, target, `${target}${BASE_SUFFIX}`),
        p50: of((r) => r.p50),
        p99: of((r) => r.p99),
        non2xx: sum((r) => r.non2xx),
        socketErrors: sum((r) => r.socketErrors),
        // A profiled round's RSS holds the profiler's samples: the others' say what the service holds.
        rssMb: Math.max(
          ...(runs.some((r) => !r.profiled) ? runs.filter((r) => !r.profiled) : runs).map((r) => r.rssMb),
        ),
        usage: medianUsage(runs.map((r) => r.usage)),
      }
    })
  })
}

/** Median over the rounds of target `a`'s rate over `b`'s in the same round (null: not both measured). */
function pairedRatio(measurements: Measurement[], workload: string, a: string, b: string): number | null {
  const rate = (target: string, round: number) =>
    measurements.find((m) => m.workload === workload && m.target === target && m.round === round)?.result
      .requestsPerSecond
  const ratios = measurements.flatMap((m) => {
    if (m.workload !== workload || m.target !== a) return []
    const other = rate(b, m.round)
    return other ? [m.result.requestsPerSecond / other] : []
  })
  return ratios.length ? median(ratios) : null
}

const fixed = (n: number, digits = 0) => n.toFixed(digits)
const pct = (n: number) => `${fixed(n)}%`

function table(rows: Row[], label: (t: string) => string): string {
  // With BENCH_BASE, each target's rate over its base twin's, on the target's rows.
  const based = rows.some((r) => r.vsBase !== null)
  const header = [
    ...'workload|target|req/s|ceiling req/s|ratio'.split('|'),
    ...(based ? ['new/base'] : []),
    ...'p50 ms|p99 ms|non-2xx|socket errors|RSS MB'.split('|'),
  ]
  const lines = rows.map((r) => [
    r.workload,
    label(r.target),
    fixed(r.rate),
    r.target === 'ceiling' || r.ceilingRate === null ? '' : fixed(r.ceilingRate),
    r.ratio === null ? '' : `${fixed(r.ratio, 2)}×`,
    ...(based ? [r.vsBase === null ? '' : `${fixed(r.vsBase, 2)}×`] : []),
    fixed(r.p50, 2),
    fixed(r.p99, 2),
    `${r.non2xx}`,
    `${r.socketErrors}`,
    fixed(r.rssMb),
  ])
  return markdownTable(header, lines, 2)
}

/** Whether the issue's targets are met on `target`, e.g. "list20 ≥ 0.5× (0.31×): not met". */
function targetsLine(rows: Row[], workloads: Workload[], target: string): string {
  const mine = rows.filter((r) => r.target === target)
  const clauses: [boolean, string][] = []
  for (const w of workloads) {
    const row = mine.find((r) => r.workload === w.name)
    const other = mine.find((r) => r.workload === w.target)
    if (typeof w.target === 'number' && row?.ratio != null) {
      clauses.push([row.ratio >= w.target, `${w.name} ≥ ${w.target}× (${fixed(row.ratio, 2)}×)`])
    } else if (row && other) {
      // A refusal must cost no more than a cached read: its rate at least the read's.
      clauses.push([
        row.rate >= other.rate,
        `${w.name} ≥ ${other.workload}'s rate (${fixed(row.rate)} against ${fixed(other.rate)} req/s)`,
      ])
    }
  }
  if (mine.length) {
    const worst = mine.reduce((a, b) => (b.p99 > a.p99 ? b : a))
    clauses.push([
      worst.p99 <= P99_TARGET_MS,
      `p99 ≤ ${P99_TARGET_MS} ms (worst ${fixed(worst.p99, 2)} ms, ${worst.workload})`,
    ])
    const rss = Math.max(...mine.map((r) => r.rssMb))
    clauses.push([rss <= RSS_TARGET_MB, `RSS ≤ ${RSS_TARGET_MB} MB (${fixed(rss)} MB)`])
  }
  const met = clauses.filter(([ok]) => ok).length
  return `${met} of ${clauses.length} targets met: ${clauses.map(([ok, text]) => `${text}: ${ok ? 'met' : 'not met'}`).join('; ')}.`
}

/**
 * What no change to the service's own code goes below, per workload: the ceiling's CPU per request
 * (node:http and the socket), bare Fastify's (the framework), and the service's beyond it (its own
 * stages); writes on SQLite add the disk's commit. Empty without the ceiling and the floor target.
 */
function floorsSection(rows: Row[], targets: string[], disk: { cpuMicros: number }, label: (t: string) => string) {
  const services = targets.filter((t) => TARGETS[t]?.kind === 'service')
  const micros = (target: string, workload: string) =>
    rows.find((r) => r.target === target && r.workload === workload)?.usage.serviceMicros
  const lines = [...new Set(rows.map((r) => r.workload))].flatMap((workload) => {
    const [ceiling, floor] = [micros('ceiling', workload), micros('fastify-floor', workload)]
    if (ceiling === undefined || floor === undefined) return []
    return [
      [
        workload,
        fixed(ceiling),
        fixed(floor),
        ...services.map((t) => {
          const own = micros(t, workload)
          return own === undefined ? '' : `${fixed(own)} (+${fixed(own - floor)})`
        }),
      ],
    ]
  })
  if (lines.length === 0) return ''
  const header = ['workload', 'ceiling (node:http)', 'floor (bare Fastify)', ...services.map(label)]
  return `### Floors

CPU per request of the service's processes, in µs (medians over the rounds, from the table above),
next to what serving the same answers costs with nothing of ours: the ceiling is node:http and the
socket (parsing, one write(2) that wakes wrk), the floor is bare Fastify on top of it; in brackets,
what the service spends beyond the floor, which is its own stages (auth, rate limit, wire guards,
cache, store, log, serialization: the CPU budget by stage below, with \`BENCH_PROFILE\`). A write on
SQLite also waits for its commit: with \`synchronous=FULL\` each commit costs at least the disk's
fsync, ${fixed(disk.cpuMicros)} µs of CPU here, on the service's core; a POST alone in its batch (the
mix's) pays it whole, one of sixteen in a batch pays a sixteenth. On PostgreSQL the commit is the
database's CPU, in the PostgreSQL column of the table above.

${markdownTable(header, lines, 1)}

The service's own stages have floors of their own: the wire guards, auth, rate limit, scopes and
preconditions are map lookups and string tests on headers Node has parsed already; a cached read
needs no query and no serialization (the cache keeps the JSON it sent), a missed one an indexed
query (on the main thread with SQLite, a round trip with PostgreSQL); the request log is one line
formatted and copied into a 4 KiB chunk, written whole. None of them can be cheaper than bare Fastify's own hook
and reply handling, which is what the floor column already counts once.`
}

function cpuTable(rows: Row[], running: Map<string, RunningTarget>, label: (t: string) => string): string {
  const header =
    'workload|target|server CPUs|PostgreSQL CPUs|service CPU|service µs/req|PostgreSQL CPU|PostgreSQL µs/req|wrk CPU|busy per core|executing / open connections'.split(
      '|',
    )
  const lines = rows.map(({ usage: u, target, workload }) => {
    const pg = u.database !== null
    return [
      workload,
      label(target),
      running.get(target)?.cpus ?? '',
      pg ? (running.get(target)?.databaseCpus ?? 'any') : '',
      pct(u.service),
      fixed(u.serviceMicros),
      pg ? pct(u.database ?? 0) : '',
      pg ? fixed(u.databaseMicros ?? 0) : '',
      pct(u.wrk),
      u.cores.map((busy, i) => `${i}: ${pct(busy)}`).join(', '),
      u.activeBackends === null ? '' : `${fixed(u.activeBackends, 1)} / ${fixed(u.backends ?? 0)}`,
    ]
  })
  return markdownTable(header, lines, 4)
}

/** CPU numbers of a taskset list ("0", "0,1", "0-3"). */
const cpuNumbers = (cpus: string) =>
  cpus.split(',').flatMap((part) => {
    const [from, to = from] = part.split('-').map(Number) as [number, number?]
    return Array.from({ length: to - from + 1 }, (_, i) => from + i)
  })

const rounded = (n: number) => `~${(Math.round(n / 100) * 100).toLocaleString('en')} req/s`

/** What limits a PostgreSQL target: from CPU per request (busy cores prove little on a shared machine) and the pool. */
function limitSentence(row: Row, live: RunningTarget, label: string, reference?: { label: string; row: Row }): string {
  const u = row.usage
  const [service, database, wrk] = [u.serviceMicros, u.databaseMicros ?? 0, u.wrkMicros]
  const own = cpuNumbers(live.cpus)
  const pool = (live.poolSize ?? 0) * live.instances
  const executing = u.activeBackends ?? 0
  const side = live.databaseCpus ? cpuNumbers(live.databaseCpus) : []
  const bounds =
    own.length === 1
      ? [
          { what: `the service's core (CPU ${own[0]})`, rate: 1e6 / service },
          {
            what: side.length
              ? `PostgreSQL's backends beside wrk (CPU ${live.databaseCpus})`
              : 'PostgreSQL and wrk on the other cores',
            rate: ((side.length || u.cores.length - 1) * 1e6) / (database + wrk),
          },
        ]
      : [
          {
            what: `the machine's ${u.cores.length} cores, shared by ${live.instances} instances, PostgreSQL and wrk`,
            rate: (u.cores.length * 1e6) / (service + database + wrk),
          },
        ]
  const [tightest, next] = bounds.toSorted((a, b) => a.rate - b.rate) as [(typeof bounds)[0], (typeof bounds)[0]?]
  // Within a quarter of each other, both sides are the limit: noise could swap them.
  const verdict =
    pool > 0 && executing >= 0.8 * pool
      ? `the pool: ${fixed(executing, 1)} of its ${pool} connections were executing a statement on average`
      : next && next.rate < tightest.rate * 1.25
        ? `both sides, about equally: ${tightest.what} and ${next.what}`
        : tightest.what
  const ref = reference?.row.usage.serviceMicros
  // SQLite answers repeated reads from its page cache, which PostgreSQL targets do not have.
  const compared =
    ref === undefined
      ? ''
      : row.workload === 'post'
        ? ` (the same write on ${reference?.label}: ${fixed(ref)} µs, so going to PostgreSQL costs the service about ${fixed(service - ref)} µs more)`
        : ` (on ${reference?.label}, which answers this repeated read from its page cache: ${fixed(ref)} µs)`
  const others = Math.max(0, u.cores.reduce((a, b) => a + b, 0) - u.service - (u.database ?? 0) - u.wrk)
  return (
    `**${label}**, ${row.workload}: per request the service used ${fixed(service)} µs of CPU${compared}, ` +
    `PostgreSQL ${fixed(database)} µs and wrk ${fixed(wrk)} µs, and ${fixed(executing, 1)} of the ${pool} pool ` +
    `connections were executing a statement on average${row.workload === 'post' ? ' (a write executes until its commit is on disk)' : ''}. ` +
    `On a quiet machine that caps ${bounds.map((b) => `${b.what} at ${rounded(b.rate)}`).join(' and ')}, so the limit is **${verdict}**. ` +
    `(Measured: ${fixed(row.rate)} req/s, while other processes on this shared machine used about ${pct(others)} of a core.)`
  )
}

export interface ReportInput {
  settings: Settings
  targets: string[]
  running: Map<string, RunningTarget>
  started: Date
  host: Machine
  disk: { wallMicros: number; cpuMicros: number }
  workloads: Workload[]
  measurements: Measurement[]
  /** Percent of the run's time during which some task waited for a CPU. */
  contention: number | null
  /** MB of each target's RSS that maps files (the node executable), at the end. */
  fileBacked: Record<string, number>
  /** Why the PostgreSQL targets were skipped, when they were. */
  skipped: string
  postgresVersion: string | null
  /** This checkout's commit, and BENCH_BASE's root and commit when set. */
  head: string
  base: { root: string; commit: string } | null
  /** The targets the Streams section measured in this run (bench/streams.ts); none when not chosen. */
  streamTargets: string[]
}

export function report(input: ReportInput): { markdown: string; summary: string } {
  const { targets, running, workloads, measurements } = input
  const label = (t: string) => TARGETS[t]?.label ?? t
  const rows = summarise(measurements, workloads, targets)
  const primary = targets[0] as string
  const postgres = targets.filter((t) => TARGETS[t]?.database === 'postgres')
  const expected = (name: string) => workloads.find((w) => w.name === name)?.probes?.[0]?.status ?? 200
  const refuses = (name: string) => workloads.some((w) => w.name === name && w.refused)
  const failed = rows.filter(
    (r) => r.socketErrors + (expected(r.workload) < 300 && !refuses(r.workload) ? r.non2xx : 0) > 0,
  )
  const warning = failed.length
    ? `Warning: unexpected answers or socket errors in ${failed.map((r) => `${r.workload} on ${label(r.target)}`).join(', ')}; those rows measure failures, not the service. `
    : ''
  const verdict = `${warning}${targetsLine(rows, workloads, primary)}`
  const markdown = table(rows, label)
  const cpu = [cpuTable(rows, running, label), floorsSection(rows, targets, input.disk, label)]
    .filter(Boolean)
    .join('\n\n')
  // The limit of a PostgreSQL target under the workloads that reach PostgreSQL on every request.
  const limits = rows
    .filter((r) => postgres.includes(r.target) && ['list20', 'post'].includes(r.workload))
    .map((r) => {
      // A base twin against the base's sqlite.
      const reference = r.target.endsWith(BASE_SUFFIX) ? `sqlite${BASE_SUFFIX}` : 'sqlite'
      const sqlite = rows.find((s) => s.target === reference && s.workload === r.workload)
      const live = running.get(r.target) as RunningTarget
      return limitSentence(r, live, label(r.target), sqlite && { label: label(reference), row: sqlite })
    })
  const versus = (a: string, b: string) =>
    workloads
      .flatMap((w) => {
        const ratio = pairedRatio(measurements, w.name, a, b)
        return ratio === null ? [] : [`${w.name} ${fixed(ratio, 2)}×`]
      })
      .join(', ')
  const peer = targets.includes('peer')
    ? `**Against the peer** (bench/peer.ts): the rate of ${label(primary)} over the peer's, median of the rounds' ratios: ${versus(primary, 'peer') || 'no workload measured on both'}.`
    : ''
  const twins = targets.filter((t) => targets.includes(`${t}${BASE_SUFFIX}`))
  const based = input.base
    ? `**New against base**: this checkout (${input.head}) against BENCH_BASE (${input.base.commit}), each target's rate over its base twin's, median of the rounds' ratios (above 1: the new commit is faster): ${twins
        .map((t) => `${t}: ${versus(t, `${t}${BASE_SUFFIX}`) || 'no workload measured on both'}`)
        .join('; ')}.`
    : ''
  const comparisons = [based, peer].filter(Boolean).join('\n\n')
  const summary = `${markdown}\n\n${comparisons ? `${comparisons}\n\n` : ''}${label(primary)}: ${verdict}\n\n${cpu}\n\n${limits.join('\n\n')}\n`
  return {
    markdown: documentation(input, { markdown, comparisons, verdict, cpu, limits, postgres, label }),
    summary,
  }
}

interface Parts {
  markdown: string
  /** Sentences comparing the service with the peer and with the base. */
  comparisons: string
  verdict: string
  cpu: string
  limits: string[]
  postgres: string[]
  label: (t: string) => string
}

function documentation(
  input: ReportInput,
  { markdown, comparisons, verdict, cpu, limits, postgres, label }: Parts,
): string {
  const { settings, targets, started, host, disk, workloads, measurements, contention } = input
  const primary = targets[0] as string
  const spread = (target: string) =>
    workloads
      .flatMap((w) => {
        const rates = measurements
          .filter((m) => m.workload === w.name && m.target === target)
          .map((m) => m.result.requestsPerSecond)
        // The peer skips some workloads.
        return rates.length ? [`${w.name} ${fixed(Math.min(...rates))}–${fixed(Math.max(...rates))}`] : []
      })
      .join(', ')
  const wait = contention === null ? '' : `; some task waited for a CPU ${fixed(contention)}% of the run's time`
  const fileBacked = Object.entries(input.fileBacked)
    .map(([name, mb]) => `${fixed(mb)} MB for ${label(name)}`)
    .join(', ')
  const { env, nodeArgs } = startCommand()
  const script = [...Object.entries(env).map(([name, value]) => `${name}=${value}`), ...nodeArgs].join(' ')
  const two = postgres.filter((t) => t.startsWith('postgres-2')).map(label)
  // Seeding and starting take a few seconds per target and round; the streams run twice per target and round, and drain.
  const seconds =
    targets.length * settings.rounds * (workloads.length * (settings.warmupSeconds + settings.seconds) + 8) +
    input.streamTargets.length * settings.rounds * (settings.warmupSeconds + 2 * settings.seconds + 12)
  return `# Performance

Generated by \`npm run bench\` (bench/): do not edit by hand, run it again. The service is compared
with the ceiling of Node on one core, measured in the same run; compare ratios rather than raw
rates across machines and runs.

## Contents

- [Results](#results): the rates, the targets, and where the CPU went
- [How it is measured](#how-it-is-measured)
- [Running it](#running-it)
- [Growth](#growth): pages at 1k, 100k and 1M pets (\`npm run bench:growth\`)
- [Streams](#streams): ${STREAM_COUNT} live event streams while messages are posted (\`BENCH_WORKLOADS=streams\`)

## Results

${machineLine(host)}
**Disk:** a 16 KiB write and its fsync, where the SQLite databases are, took ${fixed(disk.wallMicros)} µs (median of 200),
${fixed(disk.cpuMicros)} µs of them on the CPU. Each batch of POSTs waits for one, and the writer thread spends that CPU on the service's core.
${dateLine(started, 'npm run bench')}
**Commit:** ${input.head}${input.base ? `; **base** (the \`@base\` rows, \`BENCH_BASE\`): ${input.base.commit}` : ''}.
**Load:** load average ${host.loadAverage} at the start${wait} (/proc/pressure/cpu, the bench's own
processes included): the machine is shared, so read the spread below the table before trusting a
difference of a few percent.

${markdown}

${comparisons ? `${comparisons}\n\n` : ''}**Targets** (${label(primary)}, POST with \`synchronous=FULL\`): ${verdict}

Lowest–highest rate over the rounds (req/s), ${label(primary)}: ${spread(primary)};
${[`${primary}${BASE_SUFFIX}`, ...postgres, 'peer']
  .filter((t) => targets.includes(t))
  .map((t) => `${label(t)}: ${spread(t)};\n`)
  .join('')}ceiling: ${spread('ceiling')}.

${
  postgres.length === 0
    ? input.skipped
      ? `**PostgreSQL:** not measured in this run. ${input.skipped}\n\n`
      : ''
    : `### Where the CPU went, and where the PostgreSQL limit is

Medians over the rounds, from /proc: CPU time of the service's processes, of the PostgreSQL
backends serving that target (found by their \`application_name\`), and of wrk, as a share of one
core over the run and per request; how busy each core was (whoever used it: the machine is shared);
and, sampled every 100 ms from \`pg_stat_activity\`, how many of the target's connections were
executing a statement, of those open.

${cpu}

${limits.join('\n\n')}

`
}
## How it is measured

- **Data:** ${settings.pets.toLocaleString('en')} pets in a fresh database per service target, seeded through the
  store with common pet names, 70% available, 15% pending, 15% sold; one account and API key made
  with the CLI (\`animal-store keys create\`). POST workloads add rows as they run.
- **Start:** each service target runs \`src/server.ts\` as \`npm start\` does (package.json's start
  script: \`${script}\`), and is started once before the measured start, as a deployment's
  first start fills Node's compile cache. The ceiling runs with Node's defaults.
  \`BENCH_TARGETS=sqlite,sqlite-v8-defaults,ceiling\` adds the service without the script's memory
  settings too (decision 54); \`sqlite-traced\` and \`postgres-1-traced\` add it with traces on
  (\`OTEL_EXPORTER_OTLP_ENDPOINT\`), exported to a collector in the bench's process that drops them.
- **Old and new:** with \`BENCH_BASE=<another checkout of this repository>\`, each service target
  X also runs from that checkout as \`X@base\`, in the same rounds, next to X (after it in odd rounds,
  before it in even ones, so that neither always goes first; use an even BENCH_ROUNDS): that checkout's
  start script and server, its CLI making the key, and its store (\`openStore\`, hence its
  migrations) seeding the same pets, since an older commit may have another schema. Only the
  order workloads' extra pets on PostgreSQL are inserted by the bench's own SQL (one statement), into
  that checkout's \`pets\` table. The table's **new/base** column is X's rate over \`X@base\`'s, the
  median of the rounds' ratios; both also have their ratio to the ceiling.
- **Peer:** \`BENCH_TARGETS=sqlite,peer,ceiling\` adds bench/peer.ts, the reference the project
  compares itself with: the same pets API as a competent engineer would write it with plain
  Fastify 5 and node:sqlite and none of the service's features (no cache, writes on the main thread
  each in its own commit, no rate limits, idempotency or ETags): JSON schemas for validation and
  serialization, prepared statements, WAL with \`synchronous=FULL\`, a bearer key looked up by its
  SHA-256 in a table, one log line per request at \`LOG_LEVEL=info\`, Node's default options. It is
  seeded with the same pets, pinned and measured as the service, and serves list20, list100, get,
  unauthorized, post and mix only (the run skips it on the others).
- **Floor:** \`BENCH_TARGETS=…,fastify-floor,ceiling\` adds bench/fastify-floor.ts, Fastify 5 answering
  with the same captured responses as the ceiling through routes of the service's shapes, with no
  hook, schema, log or store: what any Fastify app spends per request. Its ratio is the framework's
  floor; what the service spends beyond it is its own stages (the CPU budget by stage).
- **Workloads**, each with a valid key unless said: ${workloads.map((w) => `**${w.name}** ${w.description}`).join('; ')}.
  The service runs with \`RATE_LIMIT=1000000000\` and \`AUTH_FAILURE_LIMIT=1000000\`: the limiters
  count every request, as in production, but refuse only where a workload means them to.
- **Load:** \`wrk -t1 -c${settings.connections} -d${settings.seconds}s --latency\` (Debian's wrk; Lua scripts in bench/lua) pinned
  to CPU ${settings.clientCpu} with taskset; every single-process server pinned to CPU ${settings.serverCpu}.${settings.nice ? ` Servers and wrk ran at \`nice -n ${settings.nice}\`.` : ''} Before any measuring, one
  request per workload must get its status (2xx, or the refusal's 401 or 429).${
    postgres.length
      ? `
- **PostgreSQL** (${input.postgresVersion ?? "the machine's server"}, \`BENCH_POSTGRES_URL\`, default
  \`postgres://postgres@127.0.0.1:5432/test\`): each PostgreSQL target gets a schema of its own
  (\`search_path\` in its \`DATABASE_URL\`), seeded through the store with the same pets as SQLite
  and dropped at the end, also on Ctrl-C. Pool: \`DATABASE_POOL_SIZE=${POOL_SIZE}\` per instance. Reads
  are cached beside the store (src/store/pet-cache.ts, decision 98) until the pet change feed says
  a pet they hold changed: a write forgets its pet and the pages that could hold it (a new pet only
  the last pages), and writes of other kinds forget nothing. So in the mixes the first pages stay
  cached, and the gets (random ids of ${settings.pets.toLocaleString('en')}) miss only once per pet. About 1.6 of the 16 requests in flight are writes, so each commit (and its
  fsync) serves one or two of them, not the POST workload's 15 (in mix-orders, half of them cancels).
- **Instances and pinning:** wrk is pinned to CPU ${settings.clientCpu} throughout.${
          postgres.includes('postgres-1')
            ? `
  \`${label('postgres-1')}\` is one process pinned to CPU ${settings.serverCpu}, like the SQLite rows; PostgreSQL's
  backends also need CPU, so the backends serving it (only those: found by \`application_name\`, pinned
  with \`taskset -p\` as they connect) run on CPU ${settings.postgresCpu}, beside wrk, and the service keeps its core to
  itself, as the SQLite service does. The rest of PostgreSQL (WAL writer, checkpointer) is the
  machine's and is left alone.`
            : ''
        }${
          two.length
            ? ` \`${two.join('`, `')}\` is \`WORKERS=2\`: node:cluster forks two workers that share one port.
  There is no load balancer on this machine and wrk loads one address, so sharing the port is how
  two instances on one database get the load (the primary only hands out connections, and counts
  in the RSS). Two workers on one core would measure nothing, so the workers run on CPUs
  ${settings.clusterCpu} and PostgreSQL's backends are not pinned: workers, PostgreSQL and wrk share both cores,
  which is what two instances on a two-core box with its database means. Its ratio is therefore to
  a ceiling of one process on one core, not a share of it.`
            : ''
        }`
      : ''
  }
- **Rounds:** ${settings.rounds} rounds, each on every target started afresh (a new process on a new,
  seeded database): two starts of the same server can differ by 15% in CPU per request for as long
  as they run, so the medians are over ${settings.rounds} starts, not one start's luck. Where a workload
  reads any seeded pet (get, mix, mix-orders), each target first gets every seeded pet once, as a
  service that has run a while holds what it serves (a few seconds of warm-up would leave a uniform
  draw over ${settings.pets} ids mostly missing). Each round
  warms every workload up on every target for ${settings.warmupSeconds} s, then runs every workload
  on every target in turn (A B A B…), so a slow moment of the machine hits both sides.
- **Figures:** req/s, p50 and p99 are medians over the rounds; the ratio is the median of each
  round's service/ceiling ratio; non-2xx and socket errors are totals over the rounds; RSS is the
  highest VmRSS of the server process (summed over a cluster's primary and workers), sampled every
  100 ms during the runs, leaving out the round run under \`BENCH_PROFILE\` (the profiler's samples
  swell it) when there are others. Of the RSS, about
  ${fileBacked} maps files (mostly the node executable, shared between Node processes).
- **Logging:** the \`${label(primary)}\` rows run the service as in production, one JSON log line
  per request at \`LOG_LEVEL=info\`, with stdout sent to /dev/null (a pipe or a file would add the cost
  of its reader or of the disk).${targets.includes('sqlite-warn') ? ' The `sqlite, LOG_LEVEL=warn` rows are the same service without the request log, to show what logging costs.' : ''} The targets are checked on the \`LOG_LEVEL=info\` rows.
- **Ceiling:** bench/ceiling.ts, a bare \`node:http\` server answering the same routes with the
  service's own responses captured before the run (bodies and route headers; the refusals told
  apart by their key; a mix's requests by their path, each answered as the workload it comes from,
  an order's cancel with a captured cancel), checking nothing.

## Running it

\`npm run bench\` needs \`taskset\` (util-linux) and \`wrk\` (installed with apt-get when run as root)
and two cores; it takes about ${Math.ceil(seconds / 60)} minutes with these settings. Settings, as environment
variables: \`BENCH_SECONDS\` (5), \`BENCH_ROUNDS\` (3), \`BENCH_WARMUP_SECONDS\` (2), \`BENCH_CONNECTIONS\`
(16), \`BENCH_PETS\` (10000), \`BENCH_ORDER_PETS\` (available pets for order, one per request: 20000 per
second of warm-up and run), \`BENCH_TARGETS\` (sqlite,sqlite-warn,postgres-1,postgres-2,ceiling; also
${Object.keys(TARGETS)
  .filter((t) => !['sqlite', 'sqlite-warn', 'postgres-1', 'postgres-2', 'ceiling'].includes(t) && !t.includes('@'))
  .join(', ')}; the PostgreSQL ones are skipped with a note when PostgreSQL does not answer, and fail the run
when named here), \`BENCH_POSTGRES_URL\`, \`BENCH_WORKLOADS\` (${[...WORKLOADS.map((w) => w.name), STREAMS].join(',')}; \`${STREAMS}\` is the
[Streams](#streams) section, which \`BENCH_WORKLOADS=${STREAMS}\` alone measures and rewrites by itself), \`BENCH_SERVER_CPU\`
(0), \`BENCH_CLUSTER_CPU\` (0,1), \`BENCH_CLIENT_CPU\` (1), \`BENCH_POSTGRES_CPU\` (the client's), \`BENCH_NICE\` (unset;
e.g. -10 as root keeps other processes off the bench's cores, and slows them meanwhile),
\`BENCH_DOC\` (docs/performance.md; empty to write nothing), \`BENCH_BASE\` (unset; a checkout to measure
against, below).

Old against new: check the older commit out beside this one, with the packages, and name it in
\`BENCH_BASE\`; each chosen service target then gets its \`@base\` twin, e.g.
\`git worktree add /tmp/base <commit> && ln -s "$PWD/node_modules" /tmp/base/node_modules\`, then
\`BENCH_BASE=/tmp/base BENCH_ROUNDS=4 BENCH_TARGETS=sqlite,postgres-1,ceiling
BENCH_WORKLOADS=list20,get,post,mix,mix-orders BENCH_DOC= npm run bench\`, and \`git worktree remove /tmp/base\` afterwards.

Where the time goes: \`BENCH_PROFILE=<folder>\` runs the last round's servers with \`--cpu-prof\` and
leaves one \`.cpuprofile\` per thread there (the service's main thread and its SQLite writer), to
open in Chrome DevTools or speedscope; e.g. \`BENCH_PROFILE=/tmp/prof BENCH_TARGETS=sqlite,ceiling
BENCH_WORKLOADS=list20 BENCH_ROUNDS=1 BENCH_SECONDS=15 BENCH_DOC= npm run bench\`. The report then
ends with each service's CPU budget by stage (bench/stages.ts): every sample of its main thread
while it served requests, charged to the innermost stage on its stack (wire guards, auth, rate
limit, scopes, preconditions, cache, store, handler, serialization, log, Fastify, and node:http
with the socket, which is what the ceiling spends), in µs per request. One workload per run gives
that workload's budget.
`
}
