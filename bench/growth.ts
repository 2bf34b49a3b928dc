/**
 * `npm run bench:growth`: does the service stay as fast as the catalogue grows? Seeds 1k, 100k and
 * 1M pets (SQLite, and PostgreSQL when it answers), reports seeding time and size on disk, and
 * measures with wrk the latency of a page of a rare status and of pages deep in a cursor walk,
 * each cycling through thousands of distinct URLs so that the page cache answers none of them
 * (bench/growth-urls.ts). Every size runs side by side, rounds interleaved; medians reported;
 * the "Growth" section of docs/performance.md rewritten (the rest of the file is left alone).
 *
 * Settings: BENCH_GROWTH_SIZES (1000,100000,1000000), BENCH_GROWTH_DATABASES (sqlite,postgres),
 * and the main bench's BENCH_SECONDS, BENCH_ROUNDS, BENCH_WARMUP_SECONDS, BENCH_CONNECTIONS,
 * BENCH_SERVER_CPU, BENCH_CLIENT_CPU, BENCH_POSTGRES_CPU, BENCH_POSTGRES_URL, BENCH_NICE, BENCH_DOC.
 */
import { writeFileSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { ROOT } from '../scripts/start-command.ts'
import { cursorSecret, RARE_COUNT, RARE_STATUS, type Seeded, seedPostgres, seedSqlite } from './growth-data.ts'
import { type GrowthRun, type GrowthTargetInfo, growthSection } from './growth-report.ts'
import { deepPaths, petsPerPage, rarePaths } from './growth-urls.ts'
import { measure } from './measure.ts'
import { createSchema, POSTGRES_URL, postgresProblem } from './postgres.ts'
import { cleaningUp, cleanup, cleanupOnExit, tempDir } from './processes.ts'
import { cpuPressureMicros, machine } from './report.ts'
import { readOrEmpty, withSection } from './sections.ts'
import { readSettings } from './settings.ts'
import { type BenchContext, type RunningTarget, startPostgresService, startSqliteService } from './targets.ts'
import type { Workload } from './workloads.ts'
import { ensureTools } from './wrk.ts'

const CYCLE = join(import.meta.dirname, 'lua', 'cycle.lua')

function log(line: string): void {
  process.stderr.write(`${line}\n`)
}

function fail(message: string): never {
  log(`growth: ${message}`)
  process.exit(1)
}

function sizes(): number[] {
  const text = process.env.BENCH_GROWTH_SIZES?.trim() || '1000,100000,1000000'
  const values = text.split(',').map((v) => Number(v.trim()))
  if (values.some((v) => !Number.isInteger(v) || v < 1000 || v > 10_000_000 || v % RARE_COUNT) || values.length < 2) {
    fail(`BENCH_GROWTH_SIZES must list at least two multiples of ${RARE_COUNT} from 1000 to 10000000 (got "${text}")`)
  }
  // The smallest is the baseline the others are compared with.
  return [...new Set(values)].sort((a, b) => a - b)
}

function databases(): { list: ('sqlite' | 'postgres')[]; chosen: boolean } {
  const text = process.env.BENCH_GROWTH_DATABASES?.trim()
  const values = (text || 'sqlite,postgres').split(',').map((v) => v.trim())
  const unknown = values.find((v) => v !== 'sqlite' && v !== 'postgres')
  if (unknown) fail(`BENCH_GROWTH_DATABASES: unknown "${unknown}" (known: sqlite, postgres)`)
  return { list: values as ('sqlite' | 'postgres')[], chosen: Boolean(text) }
}

interface Prepared extends GrowthTargetInfo {
  live: RunningTarget
  workloads: Workload[]
}

function cycling(name: string, description: string, file: string): Workload {
  return { name, description, path: '/v1/pets', script: CYCLE, scriptArgs: (key) => [key, file] }
}

/** Seeds one database, starts the service on it and collects the URLs of each query. */
async function prepare(context: BenchContext, database: 'sqlite' | 'postgres', pets: number): Promise<Prepared> {
  const name = `${database}-${pets}`
  log(`growth: seeding ${name}`)
  let seeded: Seeded
  let live: RunningTarget
  let secret: () => Promise<string>
  if (database === 'sqlite') {
    const path = join(context.dir, `${name}.db`)
    seeded = await seedSqlite(path, pets)
    live = await startSqliteService(context, `sqlite:${path}`)
    secret = () => cursorSecret({ sqlitePath: path })
  } else {
    const schema = await createSchema(`growth_${pets}`)
    seeded = await seedPostgres(schema, pets)
    live = await startPostgresService(context, schema)
    secret = () => cursorSecret({ schema: schema.name })
  }
  log(
    `growth: ${name} seeded in ${seeded.seconds.toFixed(1)} s, ${(seeded.bytes / 1e6).toFixed(1)} MB; collecting URLs`,
  )
  const key = await secret()
  const rare = await rarePaths(live, pets, key)
  const deep = await deepPaths(live, pets, key)
  const files = { rare: join(context.dir, `${name}-rare.txt`), deep: join(context.dir, `${name}-deep.txt`) }
  writeFileSync(files.rare, `${rare.join('\n')}\n`)
  writeFileSync(files.deep, `${deep.join('\n')}\n`)
  const workloads = [
    cycling('rare', `GET /v1/pets?limit=20&status=${RARE_STATUS}&cursor=…`, files.rare),
    cycling('deep', 'GET /v1/pets?limit=20&cursor=… (last pages)', files.deep),
  ]
  // Pages are cached on SQLite only: the same deep page over and over shows what a cache hit costs.
  if (database === 'sqlite') {
    const one = join(context.dir, `${name}-one.txt`)
    writeFileSync(one, `${deep[0]}\n`)
    workloads.push(cycling('one', 'one deep page, repeated (served from the cache)', one))
  }
  return {
    name,
    database,
    pets,
    seeded,
    live,
    workloads,
    urls: { rare: rare.length, deep: deep.length },
    petsPerPage: { rare: await petsPerPage(live, rare), deep: await petsPerPage(live, deep) },
  }
}

async function main(): Promise<void> {
  const settings = readSettings()
  const wanted = databases()
  const counts = sizes()
  ensureTools()
  cleanupOnExit()
  let skipped = ''
  if (wanted.list.includes('postgres')) {
    const problem = await postgresProblem()
    if (problem !== null) {
      const where = new URL(POSTGRES_URL).host
      if (wanted.chosen) fail(`PostgreSQL at ${where} does not answer (${problem})`)
      skipped = `PostgreSQL at ${where} did not answer (${problem}), so it was skipped; set BENCH_POSTGRES_URL to measure it.`
      log(`growth: note: ${skipped}`)
      wanted.list = wanted.list.filter((d) => d !== 'postgres')
    }
  }
  const started = new Date()
  const host = machine()
  const pressureAtStart = cpuPressureMicros()
  const context: BenchContext = {
    serverCpu: settings.serverCpu,
    clusterCpu: settings.clusterCpu,
    postgresCpu: settings.postgresCpu,
    pets: 0,
    dir: tempDir(),
  }
  const targets: Prepared[] = []
  for (const database of wanted.list) for (const pets of counts) targets.push(await prepare(context, database, pets))

  const run = async (target: Prepared, workload: Workload, seconds: number) =>
    measure(settings, target.live, workload, seconds, target.pets)
  if (settings.warmupSeconds > 0) {
    log(`growth: warming up, ${settings.warmupSeconds} s per query and database`)
    for (const target of targets)
      for (const workload of target.workloads) await run(target, workload, settings.warmupSeconds)
  }
  const runs: GrowthRun[] = []
  for (let round = 1; round <= settings.rounds; round++) {
    for (const query of ['rare', 'deep', 'one']) {
      for (const target of targets) {
        const workload = target.workloads.find((w) => w.name === query)
        if (!workload) continue
        const { result, usage } = await run(target, workload, settings.seconds)
        runs.push({ target: target.name, query, round, result, usage })
        log(
          `round ${round}/${settings.rounds} ${query.padEnd(4)} ${target.name.padEnd(16)} ${result.requestsPerSecond.toFixed(0).padStart(6)} req/s` +
            `  p50 ${result.p50.toFixed(2)} ms  p99 ${result.p99.toFixed(2)} ms  non-2xx ${result.non2xx}` +
            `  service ${(usage.serviceMicrosPerRequest ?? 0).toFixed(0)} µs/req`,
        )
      }
    }
  }
  for (const target of targets) await target.live.stop()
  const pressureAtEnd = cpuPressureMicros()
  const contention =
    pressureAtStart === null || pressureAtEnd === null
      ? null
      : (pressureAtEnd - pressureAtStart) / 10 / (Date.now() - started.getTime())

  const { markdown, summary } = growthSection({ settings, started, host, contention, targets, runs, skipped })
  process.stdout.write(`\n${summary}\n`)
  if (settings.doc) {
    const path = resolve(ROOT, settings.doc)
    const existing = readOrEmpty(path) || '# Performance\n\nRun `npm run bench` for the main tables.\n'
    writeFileSync(path, withSection(existing, 'growth', markdown))
    log(`growth: wrote the Growth section of ${settings.doc}`)
  }
}

try {
  await main()
} catch (error) {
  if (!cleaningUp()) log(`growth: ${error instanceof Error ? error.message : String(error)}`)
  process.exitCode = 1
} finally {
  await cleanup()
}
