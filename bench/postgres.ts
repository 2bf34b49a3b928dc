/**
 * PostgreSQL for the bench: whether it answers, a schema of its own per database (so a bench run
 * never meets the tests' tables, or another run's), and a watcher of the backends serving one
 * target. The server is the machine's own (BENCH_POSTGRES_URL), shared with the test suites.
 */
import { spawnSync } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import pg from 'pg'
import { atCleanup } from './processes.ts'

export const POSTGRES_URL = process.env.BENCH_POSTGRES_URL?.trim() || 'postgres://postgres@127.0.0.1:5432/test'

/** Runs one statement on a connection of its own (the bench's, never a service's). */
export async function adminQuery<T = Record<string, unknown>>(sql: string, values: unknown[] = []): Promise<T[]> {
  const client = new pg.Client({ connectionString: POSTGRES_URL, connectionTimeoutMillis: 3000 })
  await client.connect()
  try {
    return (await client.query(sql, values)).rows as T[]
  } finally {
    await client.end()
  }
}

/** Null when PostgreSQL answers; otherwise why not, to print. */
export async function postgresProblem(): Promise<string | null> {
  try {
    await adminQuery('SELECT 1')
    return null
  } catch (error) {
    return error instanceof Error ? error.message || String(error) : String(error)
  }
}

export interface BenchSchema {
  name: string
  /** DATABASE_URL for the service, the store and the CLI: this schema, and an application_name to find its backends by. */
  databaseUrl: string
  applicationName: string
  drop(): Promise<void>
}

/**
 * A fresh schema, dropped by drop() or, if the run ends first (error, Ctrl-C), by the clean-up,
 * after the servers have stopped. Named bench_… so that one left by a SIGKILLed run is recognisable.
 */
export async function createSchema(label: string): Promise<BenchSchema> {
  const name = `bench_${label.replace(/\W/g, '_')}_${randomBytes(4).toString('hex')}`
  await adminQuery(`CREATE SCHEMA ${name}`)
  let dropped: Promise<void> | null = null
  const drop = () => {
    dropped ??= adminQuery(`DROP SCHEMA IF EXISTS ${name} CASCADE`).then(() => {})
    return dropped
  }
  atCleanup(drop)
  const url = new URL(POSTGRES_URL)
  url.searchParams.set('options', `-c search_path=${name}`)
  // The store passes the URL's application_name to every connection of its pool.
  url.searchParams.set('application_name', name)
  return { name, databaseUrl: url.toString(), applicationName: name, drop }
}

export interface BackendSample {
  /** Server processes of the connections that carry this application_name. */
  pids: number[]
  /** How many of them were executing a statement at that moment. */
  active: number
}

/**
 * Lists the backends of one application_name through one connection kept open for the run (a
 * connection per sample would cost PostgreSQL more than the sampling measures). With `pinTo`, each
 * backend is pinned to those CPUs as soon as it is seen: only this target's backends, never the
 * server's other processes (its WAL writer and checkpointer stay where they are).
 */
export class BackendWatcher {
  #client: pg.Client | null = null
  #pinned = new Set<number>()
  readonly applicationName: string
  readonly pinTo: string | null

  constructor(applicationName: string, pinTo: string | null = null) {
    this.applicationName = applicationName
    this.pinTo = pinTo
  }

  async sample(): Promise<BackendSample> {
    if (!this.#client) {
      const client = new pg.Client({ connectionString: POSTGRES_URL, application_name: 'animal-store-bench-watch' })
      await client.connect()
      this.#client = client
    }
    const { rows } = await this.#client.query<{ pid: number; state: string | null }>({
      name: 'backends',
      text: "SELECT pid, state FROM pg_stat_activity WHERE application_name = $1 AND backend_type = 'client backend'",
      values: [this.applicationName],
    })
    const pids = rows.map((r) => r.pid)
    if (this.pinTo) for (const pid of pids) this.#pin(pid, this.pinTo)
    return { pids, active: rows.filter((r) => r.state === 'active').length }
  }

  /** Pins a backend (once) with taskset -p; a backend that has just exited is no longer ours to pin. */
  #pin(pid: number, cpus: string): void {
    if (this.#pinned.has(pid)) return
    this.#pinned.add(pid)
    spawnSync('taskset', ['-p', '-c', cpus, String(pid)], { stdio: 'ignore' })
  }

  async close(): Promise<void> {
    await this.#client?.end()
    this.#client = null
  }
}
