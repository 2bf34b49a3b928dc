/**
 * `npm run bench:growth`: pages of a rare status and deep cursor pages at 1k, 100k and 1M pets, each
 * cycling through thousands of URLs so that the page cache answers none; writes the "Growth" section.
 */
import { statSync, writeFileSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { DatabaseSync } from 'node:sqlite'
import pg from 'pg'
import { ROOT } from '../scripts/start-command.ts'
import {
  contention,
  ensureTools,
  fail,
  list,
  log,
  machine,
  main,
  readSettings,
  readText,
  tempDir,
  withSection,
} from './common.ts'
import {
  type GrowthRun,
  type GrowthTarget,
  growthSection,
  LIMITS,
  RARE_COUNT,
  RARE_STATUS,
  STARTS,
} from './growth-report.ts'
import { measure, type Workload } from './measure.ts'
import { adminQuery, type BenchSchema, createSchema, skipPostgres } from './postgres.ts'
import { cursorCodec, openStore } from './src.ts'
import { baseEnv, type Context, NAMES, type RunningTarget, random, startPostgres, startService } from './targets.ts'

/** Pets 1..count: every (count / RARE_COUNT)th has the rare status, the others 80% available, 20% sold. */
function* rows(count: number): Generator<[string, number, string]> {
  const next = random(7)
  for (let id = 1; id <= count; id++) {
    const name = NAMES[Math.floor(next() * NAMES.length)] as string
    const category = 1 + Math.floor(next() * 8)
    const common = next() < 0.8 ? 'available' : 'sold'
    yield [name, category, id % (count / RARE_COUNT) === 0 ? RARE_STATUS : common]
  }
}

/** Seeds in bulk in one transaction (a million createPet calls would time the seeding); its seconds and bytes on disk. */
async function seed(databaseUrl: string, count: number, schema?: string): Promise<{ seconds: number; bytes: number }> {
  await (await openStore({ databaseUrl, poolSize: 1, timeoutMs: 30_000 })).close()
  const started = performance.now()
  let check: { n: number; top: number }
  let bytes: () => Promise<number>
  if (!schema) {
    const path = databaseUrl.slice('sqlite:'.length)
    const db = new DatabaseSync(path)
    const insert = db.prepare('INSERT INTO pets (name, category_id, status) VALUES (?, ?, ?)')
    db.exec('BEGIN')
    for (const row of rows(count)) insert.run(...row)
    db.exec('COMMIT')
    // Into the main file, so that the size is the database's, not a WAL awaiting its checkpoint.
    db.exec('PRAGMA wal_checkpoint(TRUNCATE)')
    check = db.prepare('SELECT count(*) AS n, max(id) AS top FROM pets').get() as typeof check
    db.close()
    const size = (file: string) => (readText(file) ? statSync(file).size : 0)
    bytes = async () => size(path) + size(`${path}-wal`)
  } else {
    const client = new pg.Client({ connectionString: databaseUrl })
    await client.connect()
    await client.query('BEGIN')
    const all = [...rows(count)]
    for (let i = 0; i < count; i += 50_000) {
      const chunk = all.slice(i, i + 50_000)
      const columns = [0, 1, 2].map((c) => chunk.map((row) => row[c]))
      await client.query(
        'INSERT INTO pets (name, category_id, status) SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[])',
        columns,
      )
    }
    await client.query('COMMIT')
    // What autovacuum would do soon after such a load: statistics for the planner, a visibility map.
    await client.query('VACUUM ANALYZE pets')
    check = (await client.query('SELECT count(*)::int AS n, max(id)::int AS top FROM pets')).rows[0]
    await client.end()
    const sql = `SELECT sum(pg_total_relation_size(c.oid)) AS bytes FROM pg_class c
       JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relkind = 'r'`
    bytes = async () => Number((await adminQuery<{ bytes: string }>(sql, [schema]))[0]?.bytes ?? 0)
  }
  const seconds = (performance.now() - started) / 1000
  if (check.n !== count || check.top !== count)
    throw new Error(`seeded ${check.n} pets up to id ${check.top}, not 1..${count}`)
  return { seconds, bytes: await bytes() }
}

/** One page: its ids and the cursor of its `next` link (null on the last page). */
async function page(live: RunningTarget, path: string): Promise<{ ids: number[]; cursor: string | null }> {
  const response = await fetch(`${live.baseUrl}${path}`, { headers: { authorization: `Bearer ${live.key}` } })
  const body = await response.text()
  if (response.status !== 200) throw new Error(`GET ${path} answered ${response.status}: ${body}`)
  const next = /<([^>]+)>; rel="next"/.exec(response.headers.get('link') ?? '')?.[1]
  const ids = (JSON.parse(body) as { id: number }[]).map((p) => p.id)
  return { ids, cursor: next ? new URL(next).searchParams.get('cursor') : null }
}

const pagePath = (limit: number, cursor: string, status?: string) =>
  `/v1/pets?${new URLSearchParams({ limit: `${limit}`, ...(status && { status }), cursor })}`

/** Every cursor at each page size, in a fixed shuffled order (no run walks the table in id order). */
function spread(cursors: string[], status?: string): string[] {
  const paths = cursors.flatMap((cursor) => LIMITS.map((limit) => pagePath(limit, cursor, status)))
  const next = random(11)
  for (let i = paths.length - 1; i > 0; i--) {
    const j = Math.floor(next() * (i + 1))
    ;[paths[i], paths[j]] = [paths[j] as string, paths[i] as string]
  }
  return paths
}

/** Deep pages: cursors after the last STARTS ids, walked (limit=100, then 1); each must be the codec's. */
async function deepPaths(live: RunningTarget, count: number, codec: ReturnType<typeof cursorCodec>) {
  const last = count - Math.max(...LIMITS)
  const first = Math.max(1, last - STARTS + 1)
  const cursors: string[] = []
  for (let afterId = 0, cursor: string | null = null; afterId < last; ) {
    const limit = afterId + 100 < first ? 100 : 1
    const result: Awaited<ReturnType<typeof page>> = await page(
      live,
      cursor ? pagePath(limit, cursor) : `/v1/pets?limit=${limit}`,
    )
    if (result.ids[0] !== afterId + 1 || result.ids.length !== limit || !result.cursor) {
      throw new Error(`the walk after id ${afterId} returned ids ${result.ids.slice(0, 3).join(', ')}…`)
    }
    afterId = result.ids.at(-1) as number
    cursor = result.cursor
    if (cursor !== codec.encode(afterId, undefined)) throw new Error(`the cursor after ${afterId} is not the codec's`)
    if (afterId >= first) cursors.push(cursor)
  }
  return spread(cursors)
}

/** Rare status: too few pages to walk, so cursors are minted with the service's secret, checked against a walk. */
async function rarePaths(live: RunningTarget, count: number, codec: ReturnType<typeof cursorCodec>) {
  const rare = Array.from({ length: RARE_COUNT }, (_, i) => ((i + 1) * count) / RARE_COUNT)
  let cursor: string | null = null
  for (const id of rare.slice(0, 3)) {
    const result: Awaited<ReturnType<typeof page>> = await page(
      live,
      cursor ? pagePath(1, cursor, RARE_STATUS) : `/v1/pets?limit=1&status=${RARE_STATUS}`,
    )
    if (result.ids[0] !== id || result.cursor !== codec.encode(id, RARE_STATUS))
      throw new Error(`the rare walk at ${id} is not the codec's`)
    cursor = result.cursor
  }
  // From a start before this one, every page size finds a full page.
  const end = rare[rare.length - Math.max(...LIMITS)] as number
  const wanted = Math.min(STARTS, end - 1)
  const starts = new Set(Array.from({ length: wanted }, (_, j) => 1 + Math.floor((j * (end - 1)) / wanted)))
  return spread(
    [...starts].map((id) => codec.encode(id, RARE_STATUS)),
    RARE_STATUS,
  )
}

/** Seeds one database, starts the service on it and writes the URLs each query cycles through. */
async function prepare(context: Context, database: string, pets: number): Promise<GrowthTarget> {
  const name = `${database}-${pets}`
  log(`growth: seeding ${name}`)
  let live: RunningTarget
  let schema: BenchSchema | undefined
  let seeded: GrowthTarget['seeded']
  if (database === 'sqlite') {
    const url = `sqlite:${join(context.dir, `${name}.db`)}`
    seeded = await seed(url, pets)
    live = await startService(context, baseEnv(url))
  } else {
    schema = await createSchema(`growth_${pets}`)
    seeded = await seed(schema.databaseUrl, pets, schema.name)
    live = await startPostgres(context, schema)
  }
  log(
    `growth: ${name} seeded in ${seeded.seconds.toFixed(1)} s, ${(seeded.bytes / 1e6).toFixed(1)} MB; collecting URLs`,
  )
  // The secret the service signs cursors with, which it made at its start in the database it serves.
  const query = "SELECT value FROM secrets WHERE name = 'cursor'"
  let secret: string | undefined
  if (schema)
    secret = (await adminQuery<{ value: string }>(query.replace('secrets', `${schema.name}.secrets`)))[0]?.value
  else {
    const db = new DatabaseSync(join(context.dir, `${name}.db`), { readOnly: true })
    secret = (db.prepare(query).get() as { value: string }).value
    db.close()
  }
  const codec = cursorCodec(secret as string)
  const paths = { rare: await rarePaths(live, pets, codec), deep: await deepPaths(live, pets, codec) }
  const cycling = (query: string, description: string, urls: string[]): Workload => {
    const file = join(context.dir, `${name}-${query}.txt`)
    writeFileSync(file, `${urls.join('\n')}\n`)
    return {
      name: query,
      description,
      path: '/v1/pets',
      script: join(import.meta.dirname, 'lua', 'cycle.lua'),
      scriptArgs: (key) => [key, file],
    }
  }
  const workloads = [cycling('rare', 'rare status', paths.rare), cycling('deep', 'last pages', paths.deep)]
  // Pages are cached on SQLite only: the same deep page over and over shows what a cache hit costs.
  if (database === 'sqlite') workloads.push(cycling('one', 'one deep page, repeated', paths.deep.slice(0, 1)))
  const perPage = async (urls: string[]) => {
    let count = 0
    for (const path of urls.slice(0, 30)) count += (await page(live, path)).ids.length
    return count / Math.min(30, urls.length)
  }
  return {
    name,
    database,
    pets,
    seeded,
    live,
    workloads,
    urls: { rare: paths.rare.length, deep: paths.deep.length },
    petsPerPage: { rare: await perPage(paths.rare), deep: await perPage(paths.deep) },
  }
}

await main('growth', async () => {
  const settings = readSettings()
  const text = process.env.BENCH_GROWTH_SIZES?.trim() || '1000,100000,1000000'
  // The smallest size is the baseline the others are compared with.
  const sizes = [...new Set(text.split(',').map(Number))].sort((a, b) => a - b)
  if (sizes.length < 2 || sizes.some((n) => !Number.isInteger(n) || n < 1000 || n > 10_000_000 || n % RARE_COUNT)) {
    fail(`BENCH_GROWTH_SIZES must list at least two multiples of ${RARE_COUNT} from 1000 to 10000000 (got "${text}")`)
  }
  let databases = list('BENCH_GROWTH_DATABASES', ['sqlite', 'postgres'], ['sqlite', 'postgres'])
  ensureTools()
  const chosen = Boolean(process.env.BENCH_GROWTH_DATABASES?.trim())
  const skipped = await skipPostgres(databases.includes('postgres'), chosen, 'it was')
  if (skipped) databases = databases.filter((d) => d !== 'postgres')
  const started = new Date()
  const host = machine()
  const waited = contention()
  const context: Context = { ...settings, pets: 0, dir: tempDir() }
  const targets: GrowthTarget[] = []
  for (const database of databases) for (const pets of sizes) targets.push(await prepare(context, database, pets))
  if (settings.warmupSeconds > 0) {
    log(`growth: warming up, ${settings.warmupSeconds} s per query and database`)
    for (const t of targets)
      for (const w of t.workloads) await measure(settings, t.live, w, settings.warmupSeconds, t.pets)
  }
  const runs: GrowthRun[] = []
  for (let round = 1; round <= settings.rounds; round++) {
    for (const query of ['rare', 'deep', 'one']) {
      for (const t of targets) {
        const workload = t.workloads.find((w) => w.name === query)
        if (!workload) continue
        const { result, usage } = await measure(settings, t.live, workload, settings.seconds, t.pets)
        runs.push({ target: t.name, query, round, result, usage })
        log(
          `round ${round}/${settings.rounds} ${query.padEnd(4)} ${t.name.padEnd(16)} ${result.requestsPerSecond.toFixed(0).padStart(6)} req/s` +
            `  p50 ${result.p50.toFixed(2)} ms  p99 ${result.p99.toFixed(2)} ms  non-2xx ${result.non2xx}  service ${usage.serviceMicros.toFixed(0)} µs/req`,
        )
      }
    }
  }
  for (const t of targets) await t.live.stop()
  const { markdown, summary } = growthSection({ settings, started, host, contention: waited(), targets, runs, skipped })
  process.stdout.write(`\n${summary}\n`)
  if (settings.doc) {
    const path = resolve(ROOT, settings.doc)
    const existing = readText(path) || '# Performance\n\nRun `npm run bench` for the main tables.\n'
    writeFileSync(path, withSection(existing, 'growth', markdown))
    log(`growth: wrote the Growth section of ${settings.doc}`)
  }
})
