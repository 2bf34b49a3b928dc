/** docs/performance.md: the machine, the method and the tables of one run, all generated. */

import { startCommand } from '../scripts/start-command.ts'
import type { FsyncCost } from './disk.ts'
import type { Machine, Measurement } from './report.ts'
import { changedSettings, type Settings } from './settings.ts'
import { POOL_SIZE, TARGETS } from './targets.ts'
import type { Workload } from './workloads.ts'
import { wrkVersion } from './wrk.ts'

export interface DocumentInput {
  settings: Settings
  started: Date
  host: Machine
  disk: FsyncCost
  markdown: string
  verdict: string
  labels: Record<string, string>
  workloads: Workload[]
  measurements: Measurement[]
  /** Percent of the run's time during which some task waited for a CPU. */
  contention: number | null
  /** MB of each target's RSS that maps files (the node executable), at the end of the rounds. */
  fileBacked: Record<string, number>
  /** Where the CPU went (bench/limits.ts), and one sentence per PostgreSQL row on what limits it. */
  cpu: string
  limits: string[]
  /** Why the PostgreSQL targets were skipped, when they were. */
  skipped: string
  /** PostgreSQL's version, when a PostgreSQL target ran. */
  postgresVersion: string | null
}

/** Lowest and highest rate of a target per workload, to show how far one round can be from another. */
function spread(measurements: Measurement[], workloads: Workload[], target: string): string {
  return workloads
    .map((w) => {
      const rates = measurements
        .filter((m) => m.workload === w.name && m.target === target)
        .map((m) => m.result.requestsPerSecond)
      return `${w.name} ${Math.min(...rates).toFixed(0)}–${Math.max(...rates).toFixed(0)}`
    })
    .join(', ')
}

/** The PostgreSQL part of the results: where the CPU went and what limits each PostgreSQL target. */
function postgresResults(input: DocumentInput, postgres: string[]): string {
  if (postgres.length === 0) {
    return input.skipped ? `**PostgreSQL:** not measured in this run. ${input.skipped}\n\n` : ''
  }
  return `### Where the CPU went, and where the PostgreSQL limit is

Medians over the rounds, from /proc: CPU time of the service's processes, of the PostgreSQL
backends serving that target (found by their \`application_name\`), and of wrk, as a share of one
core over the run and per request; how busy each core was (whoever used it: the machine is shared);
and, sampled every 100 ms from \`pg_stat_activity\`, how many of the target's connections were
executing a statement, of those open.

${input.cpu}

${input.limits.join('\n\n')}

`
}

/** How the PostgreSQL targets are set up and pinned, for "How it is measured". */
function postgresMethod(input: DocumentInput, postgres: string[]): string {
  if (postgres.length === 0) return ''
  const { settings, labels } = input
  const two = postgres.filter((t) => t !== 'postgres-1').map((t) => labels[t])
  return `
- **PostgreSQL** (${input.postgresVersion ?? "the machine's server"}, \`BENCH_POSTGRES_URL\`, default
  \`postgres://postgres@127.0.0.1:5432/test\`): each PostgreSQL target gets a schema of its own
  (\`search_path\` in its \`DATABASE_URL\`), seeded through the store with the same pets as SQLite
  and dropped at the end, also on Ctrl-C. Pool: \`DATABASE_POOL_SIZE=${POOL_SIZE}\` per instance. Pages
  are never cached on PostgreSQL (\`petsVersion()\` is null: other instances write), so list20,
  list100 and mix ask PostgreSQL on every read; single pets are cached by id on every target, so
  **get** is served mostly from memory after the warm-up. On SQLite a page with a next page stays
  cached whatever is added (decision 47), so the mix's reads are answered from memory too, and what
  the mix measures is its writes: with one request in ten a write, about 1.6 of the 16 in flight
  are writes, so each commit (and its fsync) serves one or two of them, not the POST workload's 15.
- **Instances and pinning:** wrk is pinned to CPU ${settings.clientCpu} throughout.${
    postgres.includes('postgres-1')
      ? `
  \`${labels['postgres-1']}\` is one process pinned to CPU ${settings.serverCpu}, like the SQLite rows; PostgreSQL's
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
}

/** The start script's settings as written: its environment settings, then its node options. */
function scriptSettings(): string {
  const { env, nodeArgs } = startCommand()
  return [...Object.entries(env).map(([name, value]) => `${name}=${value}`), ...nodeArgs].join(' ')
}

export function documentation(input: DocumentInput): string {
  const { settings, started, host, disk, markdown, verdict, labels, workloads, measurements, contention } = input
  const primary = settings.targets[0] as string
  const postgres = settings.targets.filter((t) => TARGETS[t]?.database === 'postgres')
  const wait = contention === null ? '' : `; some task waited for a CPU ${contention.toFixed(0)}% of the run's time`
  const fileBacked = Object.entries(input.fileBacked)
    .map(([name, mb]) => `${mb.toFixed(0)} MB for ${labels[name]}`)
    .join(', ')
  const quiet = settings.targets.includes('sqlite-warn')
    ? ' The `sqlite, LOG_LEVEL=warn` rows are the same service without the request log, to show what logging costs.'
    : ''
  const nice = settings.nice ? ` Servers and wrk ran at \`nice -n ${settings.nice}\`.` : ''
  return `# Performance

Generated by \`npm run bench\` (bench/): do not edit by hand, run it again. The service is compared
with the ceiling of Node on one core, measured in the same run; compare ratios rather than raw
rates across machines and runs.

## Results

**Machine:** ${host.cpu}, ${host.cores} cores, Node ${host.node}, ${host.os}, ${wrkVersion()}.
**Disk:** a 16 KiB write and its fsync, where the SQLite databases are, took ${disk.wallMicros.toFixed(0)} µs (median of 200),
${disk.cpuMicros.toFixed(0)} µs of them on the CPU. Each batch of POSTs waits for one, and the writer thread spends that CPU on the service's core.
**Date:** ${started.toISOString().slice(0, 16).replace('T', ' ')} UTC. **Command:** \`${`${changedSettings()} npm run bench`.trim()}\`.
**Load:** load average ${host.loadAverage} at the start${wait} (/proc/pressure/cpu, the bench's own
processes included): the machine is shared, so read the spread below the table before trusting a
difference of a few percent.

${markdown}

**Targets** (${labels[primary]}, POST with \`synchronous=FULL\`): ${verdict}

Lowest–highest rate over the rounds (req/s), ${labels[primary]}: ${spread(measurements, workloads, primary)};
${postgres.map((t) => `${labels[t]}: ${spread(measurements, workloads, t)};\n`).join('')}ceiling: ${spread(measurements, workloads, 'ceiling')}.

${postgresResults(input, postgres)}
## How it is measured

- **Data:** ${settings.pets.toLocaleString('en')} pets in a fresh database per service target, seeded through the
  store with common pet names, 70% available, 15% pending, 15% sold; one account and API key made
  with the CLI (\`animal-store keys create\`). POST workloads add rows as they run.
- **Start:** each service target runs \`src/server.ts\` as \`npm start\` does (package.json's start
  script: \`${scriptSettings()}\`), and is started once before the measured start, as a deployment's
  first start fills Node's compile cache. The ceiling runs with Node's defaults.
  \`BENCH_TARGETS=sqlite,sqlite-v8-defaults,ceiling\` adds the service without the script's memory
  settings too (decision 54).
- **Workloads**, each with a valid key: ${workloads.map((w) => `**${w.name}** ${w.description}`).join('; ')}.
- **Load:** \`wrk -t1 -c${settings.connections} -d${settings.seconds}s --latency\` (Debian's wrk; Lua scripts in bench/lua) pinned
  to CPU ${settings.clientCpu} with taskset; every single-process server pinned to CPU ${settings.serverCpu}.${nice} Before any measuring, one
  request per workload must answer 2xx.${postgresMethod(input, postgres)}
- **Rounds:** ${settings.rounds} rounds, each on every target started afresh (a new process on a new,
  seeded database): two starts of the same server can differ by 15% in CPU per request for as long
  as they run, so the medians are over ${settings.rounds} starts, not one start's luck. Each round
  warms every workload up on every target for ${settings.warmupSeconds} s, then runs every workload
  on every target in turn (A B A B…), so a slow moment of the machine hits both sides.
- **Figures:** req/s, p50 and p99 are medians over the rounds; the ratio is the median of each
  round's service/ceiling ratio; non-2xx and socket errors are totals over the rounds; RSS is the
  highest VmRSS of the server process (summed over a cluster's primary and workers), sampled every
  250 ms during the runs. Of the RSS, about
  ${fileBacked} maps files (mostly the node executable, shared between Node processes).
- **Logging:** the \`${labels[primary]}\` rows run the service as in production, one JSON log line
  per request at \`LOG_LEVEL=info\`, with stdout sent to /dev/null (a pipe or a file would add the cost
  of its reader or of the disk).${quiet} The targets are checked on the \`LOG_LEVEL=info\` rows.
- **Ceiling:** bench/ceiling.ts, a bare \`node:http\` server answering the same routes with the
  service's own responses captured before the run (bodies and route headers), checking nothing.

## Running it

\`npm run bench\` needs \`taskset\` (util-linux) and \`wrk\` (installed with apt-get when run as root)
and two cores; it takes about ${Math.ceil(estimateSeconds(settings, workloads.length) / 60)} minutes with these settings. Settings, as environment
variables: \`BENCH_SECONDS\` (5), \`BENCH_ROUNDS\` (3), \`BENCH_WARMUP_SECONDS\` (2), \`BENCH_CONNECTIONS\`
(16), \`BENCH_PETS\` (10000), \`BENCH_TARGETS\` (sqlite,sqlite-warn,postgres-1,postgres-2,ceiling; the
PostgreSQL ones are skipped with a note when PostgreSQL does not answer, and fail the run when named
here), \`BENCH_POSTGRES_URL\`, \`BENCH_WORKLOADS\` (list20,list100,get,post,mix), \`BENCH_SERVER_CPU\`
(0), \`BENCH_CLUSTER_CPU\` (0,1), \`BENCH_CLIENT_CPU\` (1), \`BENCH_POSTGRES_CPU\` (the client's), \`BENCH_NICE\` (unset;
e.g. -10 as root keeps other processes off the bench's cores, and slows them meanwhile),
\`BENCH_DOC\` (docs/performance.md; empty to write nothing).

Where the time goes: \`npx node bench/profile.ts list20 15\` runs the service under one workload with
\`--cpu-prof\` and prints self time by group (routing, validation, auth, SQLite, serialization,
logging, HTTP) and the top functions, for the main thread and for the SQLite writer thread.
`
}

function estimateSeconds(settings: Settings, workloads: number): number {
  const perTarget = settings.rounds * workloads * (settings.warmupSeconds + settings.seconds)
  // Seeding and starting, every round: a few seconds per target, a few more for a PostgreSQL schema.
  return settings.targets.length * (perTarget + 8 * settings.rounds)
}
