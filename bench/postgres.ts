/** The machine's PostgreSQL (shared with the tests): a schema per database, and a watcher of a target's backends. */
import { spawnSync } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import pg from 'pg'
import { atCleanup, log } from './common.ts'

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

/** A note when PostgreSQL does not answer and is skipped ('' otherwise); an error when a setting named it. */
export async function skipPostgres(wanted: boolean, chosen: boolean, what: string): Promise<string> {
  if (!wanted) return ''
  const problem = await adminQuery('SELECT 1').then(
    () => '',
    (error: Error) => error.message || String(error),
  )
  if (!problem) return ''
  const where = new URL(POSTGRES_URL).host
  if (chosen) throw new Error(`PostgreSQL at ${where} does not answer (${problem})`)
  const note = `PostgreSQL at ${where} did not answer (${problem}), so ${what} skipped; set BENCH_POSTGRES_URL to measure it.`
  log(`bench: note: ${note}`)
  return note
}

export interface BenchSchema {
  name: string
  /** For the service, the store and the CLI: this schema, and an application_name to find its backends by. */
  databaseUrl: string
  drop(): Promise<void>
}

/** A fresh schema named bench_… (recognisable if a SIGKILLed run leaves it), dropped at the end in any case. */
export async function createSchema(label: string): Promise<BenchSchema> {
  const name = `bench_${label.replace(/\W/g, '_')}_${randomBytes(4).toString('hex')}`
  await adminQuery(`CREATE SCHEMA ${name}`)
  let dropped: Promise<unknown> | null = null
  const drop = async () => {
    dropped ??= adminQuery(`DROP SCHEMA IF EXISTS ${name} CASCADE`)
    await dropped
  }
  atCleanup(drop)
  const url = new URL(POSTGRES_URL)
  url.searchParams.set('options', `-c search_path=${name}`)
  // The store passes application_name to each connection: the watcher finds the backends by it.
  url.searchParams.set('application_name', name)
  return { name, databaseUrl: url.toString(), drop }
}

/** A target's backends, through one kept connection; with `pinTo`, each is pinned there as soon as it is seen. */
export class BackendWatcher {
  #client: pg.Client | null = null
  #pinned = new Set<number>()
  readonly applicationName: string
  readonly pinTo: string | null
  constructor(applicationName: string, pinTo: string | null) {
    this.applicationName = applicationName
    this.pinTo = pinTo
  }

  async sample(): Promise<{ pids: number[]; active: number }> {
    if (!this.#client) {
      this.#client = new pg.Client({ connectionString: POSTGRES_URL, application_name: 'animal-store-bench-watch' })
      await this.#client.connect()
    }
    const { rows } = await this.#client.query<{ pid: number; state: string | null }>({
      name: 'backends',
      text: "SELECT pid, state FROM pg_stat_activity WHERE application_name = $1 AND backend_type = 'client backend'",
      values: [this.applicationName],
    })
    for (const { pid } of rows) {
      if (!this.pinTo || this.#pinned.has(pid)) continue
      this.#pinned.add(pid)
      spawnSync('taskset', ['-p', '-c', this.pinTo, String(pid)], { stdio: 'ignore' })
    }
    return { pids: rows.map((r) => r.pid), active: rows.filter((r) => r.state === 'active').length }
  }

  async close(): Promise<void> {
    await this.#client?.end()
    this.#client = null
  }
}
