/**
 * The growth bench's databases: N pets seeded in bulk (the store creates the schema; the rows go
 * in with one statement per chunk, in one transaction, since a million createPet calls would time
 * the seeding, not the service), their size on disk, and the cursor secret the service keeps there.
 */
import { statSync } from 'node:fs'
import { DatabaseSync } from 'node:sqlite'
import pg from 'pg'
import { adminQuery, type BenchSchema } from './postgres.ts'
import { NAMES, random } from './seed.ts'
import { openStore } from './src.ts'

/** The rare status: RARE_COUNT pets at every size. */
export const RARE_STATUS = 'pending'
/**
 * Pets of the rare status at every size, spread evenly: 1 in 20 at 1k, 1 in 20,000 at 1M. A fixed
 * count, not a share, so that every size serves full pages (the comparison is of table size
 * alone) while the status gets rarer as the table grows: without an index, a page would scan
 * 400 rows at 1k and 400,000 at 1M.
 */
export const RARE_COUNT = 50

/** Every how many ids a pet has the rare status (sizes are multiples of RARE_COUNT). */
function rareEvery(count: number): number {
  if (count % RARE_COUNT !== 0) throw new Error(`the growth sizes must be multiples of ${RARE_COUNT} (got ${count})`)
  return count / RARE_COUNT
}

export interface Seeded {
  /** Wall time of the bulk insert and what makes it durable and ready (checkpoint, or VACUUM ANALYZE). */
  seconds: number
  /** Bytes on disk: SQLite file + WAL; PostgreSQL tables with their indexes and TOAST. */
  bytes: number
}

/** Pets with ids 1..count in order: rare status by id, the others 80% available, 20% sold. */
function* rows(count: number): Generator<[string, number, string]> {
  const next = random(7)
  const every = rareEvery(count)
  for (let id = 1; id <= count; id++) {
    const name = NAMES[Math.floor(next() * NAMES.length)] as string
    const category = 1 + Math.floor(next() * 8)
    const common = next() < 0.8 ? 'available' : 'sold'
    yield [name, category, id % every === 0 ? RARE_STATUS : common]
  }
}

/** Ids of the rare pets of a set of `count` pets. */
export function rareIds(count: number): number[] {
  const every = rareEvery(count)
  return Array.from({ length: RARE_COUNT }, (_, i) => (i + 1) * every)
}

async function migrate(databaseUrl: string): Promise<void> {
  await (await openStore({ databaseUrl, poolSize: 1, timeoutMs: 30_000 })).close()
}

function fileBytes(path: string): number {
  try {
    return statSync(path).size
  } catch {
    return 0
  }
}

export async function seedSqlite(path: string, count: number): Promise<Seeded> {
  await migrate(`sqlite:${path}`)
  const started = performance.now()
  const db = new DatabaseSync(path)
  try {
    const insert = db.prepare('INSERT INTO pets (name, category_id, status) VALUES (?, ?, ?)')
    db.exec('BEGIN')
    for (const row of rows(count)) insert.run(...row)
    db.exec('COMMIT')
    // Into the main file, so that the size below is the database's, not a WAL waiting for a checkpoint.
    db.exec('PRAGMA wal_checkpoint(TRUNCATE)')
    const { n, top } = db.prepare('SELECT count(*) AS n, max(id) AS top FROM pets').get() as { n: number; top: number }
    if (n !== count || top !== count) throw new Error(`seeded ${n} pets up to id ${top}, expected ids 1..${count}`)
  } finally {
    db.close()
  }
  const seconds = (performance.now() - started) / 1000
  return { seconds, bytes: fileBytes(path) + fileBytes(`${path}-wal`) }
}

export async function seedPostgres(schema: BenchSchema, count: number): Promise<Seeded> {
  await migrate(schema.databaseUrl)
  const client = new pg.Client({ connectionString: schema.databaseUrl })
  await client.connect()
  const started = performance.now()
  try {
    await client.query('BEGIN')
    const chunk: [string[], number[], string[]] = [[], [], []]
    const flush = async () => {
      await client.query(
        'INSERT INTO pets (name, category_id, status) SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[])',
        chunk,
      )
      for (const column of chunk) column.length = 0
    }
    for (const [name, category, status] of rows(count)) {
      chunk[0].push(name)
      chunk[1].push(category)
      chunk[2].push(status)
      if (chunk[0].length === 50_000) await flush()
    }
    if (chunk[0].length) await flush()
    await client.query('COMMIT')
    // What autovacuum would do soon after such a load: statistics for the planner, a visibility map.
    await client.query('VACUUM ANALYZE pets')
    const { rows: check } = await client.query('SELECT count(*)::int AS n, max(id)::int AS top FROM pets')
    if (check[0].n !== count || check[0].top !== count) {
      throw new Error(`seeded ${check[0].n} pets up to id ${check[0].top}, expected ids 1..${count}`)
    }
  } finally {
    await client.end()
  }
  const seconds = (performance.now() - started) / 1000
  const [size] = await adminQuery<{ bytes: string }>(
    `SELECT sum(pg_total_relation_size(c.oid)) AS bytes FROM pg_class c
       JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relkind = 'r'`,
    [schema.name],
  )
  return { seconds, bytes: Number(size?.bytes ?? 0) }
}

/** The secret the service signs cursors with (it creates it at start, in the database it serves). */
export async function cursorSecret(database: { sqlitePath: string } | { schema: string }): Promise<string> {
  if ('sqlitePath' in database) {
    const db = new DatabaseSync(database.sqlitePath, { readOnly: true })
    try {
      return (db.prepare("SELECT value FROM secrets WHERE name = 'cursor'").get() as { value: string }).value
    } finally {
      db.close()
    }
  }
  const [row] = await adminQuery<{ value: string }>(
    `SELECT value FROM ${database.schema}.secrets WHERE name = 'cursor'`,
  )
  if (!row) throw new Error(`no cursor secret in schema ${database.schema}`)
  return row.value
}
