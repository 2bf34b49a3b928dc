/**
 * `npm test`: the whole suite on SQLite, then again on PostgreSQL.
 *
 * The PostgreSQL half uses TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test),
 * each test in a schema of its own. When TEST_POSTGRES_URL is set the server must answer (CI sets
 * it); when it is not set and no server answers at the default address, that half is skipped and
 * the run says so.
 */
import { spawnSync } from 'node:child_process'
import { globSync } from 'node:fs'

const DEFAULT_POSTGRES_URL = 'postgres://postgres@127.0.0.1:5432/test'
const explicit = process.env.TEST_POSTGRES_URL
const postgresUrl = explicit || DEFAULT_POSTGRES_URL
const only = process.argv.slice(2) // `npm test -- test/routes/pets.test.ts` runs just those files

const all = (only.length > 0 ? only : globSync('test/**/*.test.ts')).sort()
const onlyFor = { sqlite: ['test/store/sqlite.test.ts'], postgres: ['test/store/postgres.test.ts', 'test/postgres/'] }
const files = (database: 'sqlite' | 'postgres') => {
  const other = onlyFor[database === 'sqlite' ? 'postgres' : 'sqlite']
  return all.filter((file) => !other.some((prefix) => file.startsWith(prefix)))
}

function run(database: 'sqlite' | 'postgres'): boolean {
  console.log(`\n━━━ ${database === 'sqlite' ? 'SQLite' : `PostgreSQL (${postgresUrl})`} ━━━\n`)
  const env = { ...process.env, TEST_DATABASE: database, TEST_POSTGRES_URL: postgresUrl }
  const result = spawnSync(process.execPath, ['--test', '--test-concurrency=2', ...files(database)], {
    env,
    stdio: 'inherit',
  })
  return result.status === 0
}

async function postgresAnswers(): Promise<string | null> {
  const pg = await import('pg').catch(() => null)
  if (!pg) return "the optional dependency 'pg' is not installed"
  const client = new pg.default.Client({ connectionString: postgresUrl, connectionTimeoutMillis: 3000 })
  try {
    await client.connect()
    await client.query('SELECT 1')
    return null
  } catch (error) {
    return String(error)
  } finally {
    await client.end().catch(() => {})
  }
}

const sqliteOk = run('sqlite')
const problem = await postgresAnswers()
let postgresOk = true
if (problem && !explicit) {
  console.log(
    `\n━━━ PostgreSQL half NOT RUN: no server answered at ${postgresUrl} (${problem}).\n` +
      '    Only the SQLite half ran. To run the PostgreSQL half, start PostgreSQL or set\n' +
      '    TEST_POSTGRES_URL=postgres://user@host:port/database and run npm test again.\n',
  )
} else if (problem) {
  console.log(`\n━━━ PostgreSQL half FAILED: TEST_POSTGRES_URL=${postgresUrl} does not answer (${problem}).\n`)
  postgresOk = false
} else {
  postgresOk = run('postgres')
}
process.exitCode = sqliteOk && postgresOk ? 0 : 1
