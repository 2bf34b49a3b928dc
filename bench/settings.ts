/** The bench's knobs, from the environment (BENCH_*), checked once so a typo fails at the start. */
import { TARGETS } from './targets.ts'
import { WORKLOADS } from './workloads.ts'

export interface Settings {
  seconds: number
  rounds: number
  warmupSeconds: number
  connections: number
  pets: number
  targets: string[]
  /** Whether BENCH_TARGETS chose the targets (then a PostgreSQL that does not answer is an error, not a skip). */
  targetsChosen: boolean
  workloads: string[]
  serverCpu: string
  clientCpu: string
  /** CPUs of a target with several instances (postgres-2). */
  clusterCpu: string
  /** CPUs of the PostgreSQL backends of a one-instance target (postgres-1): wrk's by default. */
  postgresCpu: string
  /** BENCH_NICE, read where processes start (bench/processes.ts); 0 when unset. */
  nice: number
  /** Where the markdown report goes; empty: nowhere. */
  doc: string
}

function integer(name: string, fallback: number, min: number, max = Number.MAX_SAFE_INTEGER): number {
  const text = process.env[name]?.trim()
  if (!text) return fallback
  const value = Number(text)
  if (!Number.isInteger(value) || value < min || value > max) {
    fail(`${name} must be an integer from ${min} to ${max} (got "${text}")`)
  }
  return value
}

function list(name: string, fallback: string[], known: string[]): string[] {
  const text = process.env[name]?.trim()
  if (!text) return fallback
  const values = text.split(',').map((v) => v.trim())
  const unknown = values.find((v) => !known.includes(v))
  if (unknown) fail(`${name}: unknown "${unknown}" (known: ${known.join(', ')})`)
  return values
}

function fail(message: string): never {
  process.stderr.write(`bench: ${message}\n`)
  process.exit(1)
}

/** Every target; the PostgreSQL ones are dropped, with a note, when PostgreSQL does not answer (bench/run.ts). */
export const DEFAULT_TARGETS = ['sqlite', 'sqlite-warn', 'postgres-1', 'postgres-2', 'ceiling']

export function readSettings(): Settings {
  const targets = list('BENCH_TARGETS', DEFAULT_TARGETS, Object.keys(TARGETS))
  // The ceiling answers with a service's responses, and the ratios need both.
  if (!targets.includes('ceiling') || targets.length < 2) fail('BENCH_TARGETS needs "ceiling" and a service target')
  return {
    seconds: integer('BENCH_SECONDS', 5, 1),
    rounds: integer('BENCH_ROUNDS', 3, 1),
    warmupSeconds: integer('BENCH_WARMUP_SECONDS', 2, 0),
    connections: integer('BENCH_CONNECTIONS', 16, 1),
    pets: integer('BENCH_PETS', 10_000, 100),
    // Services first: the ceiling is built from a service's answers.
    targets: [...targets.filter((t) => t !== 'ceiling'), 'ceiling'],
    targetsChosen: Boolean(process.env.BENCH_TARGETS?.trim()),
    workloads: list(
      'BENCH_WORKLOADS',
      WORKLOADS.map((w) => w.name),
      WORKLOADS.map((w) => w.name),
    ),
    serverCpu: process.env.BENCH_SERVER_CPU?.trim() || '0',
    clientCpu: process.env.BENCH_CLIENT_CPU?.trim() || '1',
    clusterCpu: process.env.BENCH_CLUSTER_CPU?.trim() || '0,1',
    postgresCpu: process.env.BENCH_POSTGRES_CPU?.trim() || process.env.BENCH_CLIENT_CPU?.trim() || '1',
    nice: integer('BENCH_NICE', 0, -20, 19),
    doc: process.env.BENCH_DOC ?? 'docs/performance.md',
  }
}

/** The settings that differ from the defaults, as the environment part of the command line. */
export function changedSettings(): string {
  return Object.entries(process.env)
    .filter(([name]) => name.startsWith('BENCH_'))
    .map(([name, value]) => `${name}=${value}`)
    .join(' ')
}
