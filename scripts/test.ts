/**
 * `npm test`: the whole suite, on SQLite and on PostgreSQL, the two halves side by side.
 * `npm run test:quick`: the edit loop's tier: unit, route and store-contract tests, SQLite only.
 * `npm test -- test/x.test.ts …`: just those files, on both databases; `npm test -- --list`: which files each half runs.
 *
 * A file that never reaches the test database (it uses none of test/helper.ts's database-bound
 * exports, directly or through another test module) runs once, in the SQLite half.
 *
 * The PostgreSQL half uses TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test),
 * each test in a schema of its own; a missing database on a server that answers is created. When
 * TEST_POSTGRES_URL is set the server must answer (CI sets it); when it is not set and no server
 * answers at the default address, that half is not run and the run says so.
 *
 * The whole suite measures coverage of src/ with Node's own (--experimental-test-coverage), in
 * each half, and fails a half below COVERAGE_FLOOR. It counts the code the test processes run and
 * the code of the child processes they start (the server, the CLI), which inherit the runner's
 * NODE_V8_COVERAGE and write their share when they exit; a child killed with SIGKILL writes none.
 * A run of named files, or the quick tier, measures nothing: a part cannot meet a floor set for the
 * whole. Each half also writes an lcov report to coverage/<database>.lcov.info.
 */
import { spawn } from 'node:child_process'
import { createWriteStream, existsSync, globSync, mkdirSync, readFileSync } from 'node:fs'
import { dirname, join, relative, resolve } from 'node:path'

type Database = 'sqlite' | 'postgres'

const DEFAULT_POSTGRES_URL = 'postgres://postgres@127.0.0.1:5432/test'
const explicit = process.env.TEST_POSTGRES_URL
const postgresUrl = explicit || DEFAULT_POSTGRES_URL
const args = process.argv.slice(2)
const quick = args.includes('--quick')
const listOnly = args.includes('--list') // print each half's files and stop
const only = args.filter((arg) => arg !== '--quick' && arg !== '--list') // `npm test -- test/routes/pets.test.ts` runs just those

/** The edit loop's tier: what runs in-process against the app and the store, no server processes. */
const QUICK = [
  'test/domain/',
  'test/routes/',
  'test/plugins/',
  'test/store/sqlite.test.ts',
  'test/webhooks/',
  'test/errors.test.ts',
  'test/config.test.ts',
]
/** Percentages measured on both halves (see docs/testing.md), rounded down, less a point or two. */
const COVERAGE_FLOOR = { lines: 96, branches: 91, functions: 92 }
const coverage = only.length === 0 && !quick && process.env.TEST_COVERAGE !== '0'
/**
 * Files each half runs at once, the two halves side by side: four on two cores, since most tests
 * wait on sockets, timers and child processes; more starved the process tests' servers.
 */
const CONCURRENCY = Number(process.env.TEST_CONCURRENCY) || 2
/** How long a half may run: several times its length on a busy 2-core machine. */
const HALF_DEADLINE_MS = 20 * 60_000

const OTHER_STORE: Record<Database, string[]> = {
  sqlite: ['src/store/postgres.ts'],
  postgres: ['src/store/sqlite.ts', 'src/store/sqlite-writer.ts'],
}
const ONLY_FOR: Record<Database, string[]> = {
  sqlite: ['test/store/sqlite.test.ts'],
  postgres: ['test/store/postgres.test.ts', 'test/store/postgres-webhooks.test.ts', 'test/postgres/'],
}

let all = (only.length > 0 ? only : globSync('test/**/*.test.ts')).map((file) => relative('.', file)).sort()
if (quick) all = all.filter((file) => QUICK.some((prefix) => file.startsWith(prefix)))

/**
 * What test/helper.ts exports that depends on TEST_DATABASE. A file that imports none of them
 * (tempDir, bearer, … are the same on either database), and does not read TEST_DATABASE itself,
 * tests the same thing in both halves: test/processes.ts starts servers on the SQLite file a test
 * names, and a file like test/server.test.ts or test/readme.test.ts names only those.
 */
const DATABASE_BOUND = new Set(['DATABASE', 'POSTGRES_URL', 'testDatabaseUrl', 'postgres', 'build', 'suiteApp'])

/**
 * A test file that builds apps on the test database but tests what the database cannot change (the
 * wire before any route, the portal's pages in a browser, the typed client) says so in a line
 * `// One database: <why>`, and runs in the SQLite half only.
 */
const ONE_DATABASE = /^\/\/ One database: \S/m

/** Whether `file` reaches the test database: it uses a DATABASE_BOUND name of test/helper.ts, at any depth. */
function usesDatabase(file: string, seen = new Set<string>()): boolean {
  if (seen.has(file) || !existsSync(file)) return false // (a specifier in a string: not a module of ours)
  seen.add(file)
  const source = readFileSync(file, 'utf8')
  if (source.includes('TEST_DATABASE')) return true
  for (const [, names, specifier] of source.matchAll(
    /import\s*(?:type\s*)?(\{[^}]*\}|\*[^'"]*)?\s*(?:from\s*)?'(\.{1,2}\/[^']+\.ts)'/g,
  )) {
    const target = relative('.', resolve(dirname(file), specifier as string))
    if (!target.startsWith('test/')) continue
    if (target === join('test', 'helper.ts')) {
      const imported = (names ?? '*').replace(/[{}]/g, '').split(',')
      if (
        imported.some(
          (name) =>
            name.trim() === '*' ||
            name.trim().startsWith('*') ||
            DATABASE_BOUND.has(
              name
                .replace(/^\s*type\s+/, '')
                .split(/\s+as\s+/)[0]
                ?.trim() ?? '',
            ),
        )
      )
        return true
    } else if (usesDatabase(target, seen)) return true
  }
  for (const [, specifier] of source.matchAll(/import\(\s*'(\.{1,2}\/[^']+\.ts)'/g)) {
    const target = relative('.', resolve(dirname(file), specifier as string))
    if (target.startsWith('test/') && usesDatabase(target, seen)) return true
  }
  return false
}

/**
 * The files a half runs: those that reach the database, in both; those that never do, in the
 * SQLite half; those that say `// One database:`, in the PostgreSQL half when it runs (either fits
 * them, and this evens out the two halves' lengths), else in the SQLite half.
 */
function files(database: Database, postgresRuns: boolean): string[] {
  const other = ONLY_FOR[database === 'sqlite' ? 'postgres' : 'sqlite']
  const once: Database = postgresRuns ? 'postgres' : 'sqlite'
  return all.filter((file) => {
    if (other.some((prefix) => file.startsWith(prefix))) return false
    if (ONE_DATABASE.test(readFileSync(file, 'utf8'))) return database === once
    return database === 'sqlite' || usesDatabase(file)
  })
}

function coverageArgs(database: Database): string[] {
  if (!coverage) return []
  mkdirSync('coverage', { recursive: true })
  return [
    '--experimental-test-coverage',
    '--test-coverage-include=src/**',
    '--test-coverage-exclude=src/client/schema.ts', // generated by npm run client:generate
    // Each half measures the code it can reach: the other database's store is the other half's.
    ...OTHER_STORE[database].map((file) => `--test-coverage-exclude=${file}`),
    `--test-coverage-lines=${COVERAGE_FLOOR.lines}`,
    `--test-coverage-branches=${COVERAGE_FLOOR.branches}`,
    `--test-coverage-functions=${COVERAGE_FLOOR.functions}`,
    '--test-reporter=spec',
    '--test-reporter-destination=stdout',
    '--test-reporter=lcov',
    `--test-reporter-destination=coverage/${database}.lcov.info`,
    '--test-reporter=./scripts/test-times.ts',
    `--test-reporter-destination=coverage/${database}.times`,
  ]
}

const title = (database: Database) => (database === 'sqlite' ? 'SQLite' : `PostgreSQL (${postgresUrl})`)

/**
 * Runs one half. The first half streams to the terminal; the other is written to a log and printed
 * whole once it ends, so that the two never interleave.
 */
function run(database: Database, list: string[], live: boolean): Promise<{ ok: boolean; print: () => void }> {
  if (list.length === 0) return Promise.resolve({ ok: true, print: () => {} })
  const env = { ...process.env, TEST_DATABASE: database, TEST_POSTGRES_URL: postgresUrl }
  const heading = `\n━━━ ${title(database)}: ${list.length} files ━━━\n`
  const log = join('coverage', `${database}.log`)
  if (live) console.log(heading)
  else mkdirSync('coverage', { recursive: true })
  // No --test-force-exit: with files run side by side it drops the last verdicts of a file, failures
  // included, and the run still passes (nodejs/node#64833; seen here as a file's missing tail). A
  // file that never ends (something a failed test started still holds its event loop) is stopped by
  // the half's deadline instead, and the half fails saying so.
  const child = spawn(
    process.execPath,
    ['--test', `--test-concurrency=${CONCURRENCY}`, ...coverageArgs(database), ...list],
    { env, stdio: live ? 'inherit' : ['ignore', 'pipe', 'pipe'] },
  )
  let late = false
  const deadline = setTimeout(() => {
    late = true
    child.kill('SIGTERM')
  }, HALF_DEADLINE_MS)
  if (!live) {
    const out = createWriteStream(log)
    child.stdout?.pipe(out)
    child.stderr?.pipe(out)
  }
  return new Promise((done) => {
    child.on('close', (code) => {
      clearTimeout(deadline)
      const lateLine = `\n━━━ ${title(database)}: STOPPED after ${HALF_DEADLINE_MS / 60_000} minutes: a file did not end (see the last ones started above).\n`
      if (late && live) console.log(lateLine)
      done({
        ok: code === 0 && !late,
        print: () => {
          if (live) return
          console.log(heading)
          process.stdout.write(readFileSync(log))
          if (late) console.log(lateLine)
        },
      })
    })
  })
}

/** Null when the PostgreSQL half can run; else why not. Creates the database when only it is missing. */
async function postgresReady(): Promise<string | null> {
  const pg = await import('pg').catch(() => null)
  if (!pg) return "the optional dependency 'pg' is not installed"
  const connect = async (url: string) => {
    const client = new pg.default.Client({ connectionString: url, connectionTimeoutMillis: 3000 })
    await client.connect()
    return client
  }
  try {
    const client = await connect(postgresUrl)
    await client.end()
    return null
  } catch (error) {
    // 3D000: the server answers, the database is not there. Make it, from the server's own database.
    if ((error as { code?: string }).code !== '3D000') return String(error)
    const url = new URL(postgresUrl)
    const name = decodeURIComponent(url.pathname.slice(1))
    url.pathname = '/postgres'
    try {
      const admin = await connect(url.toString())
      await admin.query(`CREATE DATABASE "${name.replaceAll('"', '""')}"`).finally(() => admin.end())
      console.log(`━━━ Created the PostgreSQL database "${name}" for the tests.`)
      return null
    } catch (createError) {
      return `the database "${name}" does not exist and could not be created (${createError}); create it with: createdb ${name}`
    }
  }
}

if (listOnly) {
  for (const database of ['sqlite', 'postgres'] as const) console.log(`${database}: ${files(database, true).join(' ')}`)
  process.exit(0)
}

const problem = quick ? 'not in the quick tier' : await postgresReady()
const postgresRuns = problem === null
const halves: Promise<{ ok: boolean; print: () => void }>[] = [run('sqlite', files('sqlite', postgresRuns), true)]
let postgresOk = true
if (problem && (quick || !explicit)) {
  if (!quick) {
    console.log(
      `\n━━━ PostgreSQL half NOT RUN: ${postgresUrl} did not answer (${problem}).\n` +
        '    Only the SQLite half runs. To run the PostgreSQL half, start PostgreSQL or set\n' +
        '    TEST_POSTGRES_URL=postgres://user@host:port/database and run npm test again.\n',
    )
  }
} else if (problem) {
  console.log(`\n━━━ PostgreSQL half FAILED: TEST_POSTGRES_URL=${postgresUrl} does not answer (${problem}).\n`)
  postgresOk = false
} else {
  halves.push(run('postgres', files('postgres', true), false))
}
const results = await Promise.all(halves)
for (const result of results) result.print()
process.exitCode = results.every((result) => result.ok) && postgresOk ? 0 : 1
