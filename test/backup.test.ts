/**
 * `animal-store backup <file>`, run for real: the CLI as a child process beside a real server
 * process writing to the same SQLite file under concurrent POST /v1/pets, then a new server
 * started on the copy, restored as docs/operations.md says. SQLite only: PostgreSQL is backed up with
 * pg_dump, which the CLI only names.
 */
import assert from 'node:assert/strict'
import { copyFileSync, existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, it } from 'node:test'
import { isDeepStrictEqual } from 'node:util'
import type { Pet } from '../src/schemas/pets.ts'
import { runCli } from './cli-run.ts'
import { DATABASE, tempDir } from './helper.ts'
import { cli, cliKey, type Exit, runNode, startServer } from './processes.ts'
import { openStream, startOf } from './sse.ts'
import { until } from './wait.ts'

const CLIENTS = 6
const SQLITE_ONLY = DATABASE !== 'sqlite' && 'SQLite only: the CLI backs up SQLite (PostgreSQL: pg_dump)'

const BETA = { 'animal-store-beta': 'webhooks' }

async function postMessage(url: string, headers: Record<string, string>, message: string): Promise<void> {
  const response = await fetch(`${url}/v1/messages`, { method: 'POST', headers, body: JSON.stringify({ message }) })
  assert.equal(response.status, 202, await response.text())
}

/** Every pet GET /v1/pets serves at `url`, following its Link pages. */
async function allPets(url: string, key: string): Promise<Map<number, Pet>> {
  const pets = new Map<number, Pet>()
  for (let next: string | null = `${url}/v1/pets?limit=100`; next !== null; ) {
    const response = await fetch(next, { headers: { authorization: `Bearer ${key}` } })
    assert.equal(response.status, 200)
    for (const pet of (await response.json()) as Pet[]) pets.set(pet.id, pet)
    next = /<([^>]+)>; rel="next"/.exec(response.headers.get('link') ?? '')?.[1] ?? null
  }
  return pets
}

describe('CLI: backup under load (SQLite)', { skip: SQLITE_ONLY }, () => {
  it('copies every pet acknowledged before it began; the restored copy starts and serves', {
    timeout: 90_000,
  }, async (t) => {
    const dir = tempDir(t)
    const env = { DATABASE_URL: `sqlite:${join(dir, 'live.db')}`, RATE_LIMIT: '0', EXPERIMENTAL_FEATURES: 'webhooks' }
    const key = await cliKey(env, 'backup@example.com')
    const headers = { authorization: `Bearer ${key}`, 'content-type': 'application/json' }
    const server = await startServer(t, env)

    const acknowledged: Pet[] = []
    let running = true
    const client = async (n: number) => {
      for (let i = 0; running; i++) {
        const body = { name: `b${n}-${i}`, categoryId: n + 1, status: 'available' }
        const response = await fetch(`${server.url}/v1/pets`, { method: 'POST', headers, body: JSON.stringify(body) })
        const sent = (await response.json()) as Pet
        assert.equal(response.status, 201, JSON.stringify(sent))
        acknowledged.push(sent)
      }
    }
    const clients = Array.from({ length: CLIENTS }, (_, n) => client(n))
    await until('300 pets acknowledged', () => acknowledged.length >= 300, { timeoutMs: 30_000 })

    // A stream opened before the backup: the key that seals its positions is in the database.
    const early = await openStream(`${server.url}/v1/events`, { ...headers, ...BETA })
    await early.next()
    assert.ok(startOf(await early.next()))
    early.close()

    // Everything acknowledged before the backup starts must be in it; the load goes on meanwhile.
    const before = acknowledged.slice()
    const target = join(dir, 'backups', 'copy.db')
    const run = await cli(['backup', target], env)
    const during = acknowledged.length - before.length
    running = false
    await Promise.all(clients)
    assert.equal(run.code, 0, `backup failed: ${run.stderr}`)
    assert.equal(run.stderr, '')
    assert.match(run.stdout, /^Backed up .*live\.db to .*copy\.db: \d+ pages, \d+ bytes, in [\d.]+ s\.\n$/)
    assert.ok(during > 0, 'no pet was acknowledged while the backup ran: it proves nothing about load')
    assert.deepEqual(readdirSync(join(dir, 'backups')), ['copy.db'], 'the backup left other files')
    // Events after the backup, then a stream's position after them: lost with the restore.
    const messages = (url: string, n: number) =>
      Promise.all(Array.from({ length: n }, (_, i) => postMessage(url, headers, `message ${i}`)))
    await messages(server.url, 3)
    const stream = await openStream(`${server.url}/v1/events`, { ...headers, ...BETA })
    await stream.next()
    const lost = startOf(await stream.next()) as string
    stream.close()
    await server.stop('SIGTERM')

    // Restore as docs/operations.md says: the copy at the DATABASE_URL path, with no -wal or -shm beside it.
    const restoredPath = join(tempDir(t), 'restored.db')
    copyFileSync(target, restoredPath)
    const restoredEnv = { ...env, DATABASE_URL: `sqlite:${restoredPath}` }
    const restored = await startServer(t, restoredEnv, { ready: '/readyz' })
    const served = await allPets(restored.url, key)
    const missing = before.filter((pet) => !isDeepStrictEqual(served.get(pet.id), pet))
    assert.deepEqual(missing, [], 'pets acknowledged before the backup began are missing from it, or changed')

    const created = await fetch(`${restored.url}/v1/pets`, {
      method: 'POST',
      headers,
      body: JSON.stringify({ name: 'after restore', categoryId: 1 }),
    })
    assert.equal(created.status, 201)
    const newId = ((await created.json()) as Pet).id
    assert.ok(!served.has(newId), `the restored copy gave a new pet the id ${newId} of one it holds`)
    // Its log numbers events again from the backup's point: a position given after the backup would
    // skip the new ones. It is refused, whatever the restored log's head has reached.
    await messages(restored.url, 5)
    const resumed = await openStream(`${restored.url}/v1/events`, { ...headers, ...BETA, 'last-event-id': lost })
    assert.equal(resumed.status, 410, 'a position from after the backup is taken by the restored copy')
    assert.equal(JSON.parse(resumed.error).code, 'last_event_id_unknown')
    assert.equal((await fetch(`${restored.url}/readyz`)).status, 200)
    assert.equal(await restored.stop('SIGTERM'), 0)
    t.diagnostic(
      `acknowledged before the backup=${before.length}, while it ran=${during}, in the copy=${served.size}; ${run.stdout.trim()}`,
    )
  })
})

// The refusals run the CLI in this process (its main), but for one that used to hang: only a
// process can be killed.
describe('CLI: backup refusals', { skip: SQLITE_ONLY }, () => {
  /** The run `run` failed with `code`, one line on stderr and nothing on stdout; returns that line. */
  function failed(run: Exit, args: string[], code: number): string {
    assert.equal(run.code, code, `animal-store ${args.join(' ')} exited ${run.code}: ${run.stderr}`)
    assert.equal(run.stdout, '')
    assert.match(run.stderr, /^animal-store: [^\n]+\n$/)
    return run.stderr.trimEnd()
  }

  /** A run (in this process) that fails with `code`, one line on stderr and nothing on stdout; returns that line. */
  async function fails(env: Record<string, string>, args: string[], code: number): Promise<string> {
    return failed(await runCli(args, env), args, code)
  }

  /** A database with an account in it, at live.db in a new folder. */
  async function live(t: Parameters<typeof tempDir>[0]) {
    const dir = tempDir(t)
    const env = { DATABASE_URL: `sqlite:${join(dir, 'live.db')}` }
    assert.equal((await runCli(['accounts', 'create', 'a@example.com'], env)).code, 0)
    return { dir, env }
  }

  it('refuses a target that exists (exit 1, naming it) and leaves it as it was', async (t) => {
    const { dir, env } = await live(t)
    const target = join(dir, 'existing.db')
    writeFileSync(target, 'keep me')
    assert.match(await fails(env, ['backup', target], 1), /existing\.db already exists/)
    assert.equal(readFileSync(target, 'utf8'), 'keep me')
    assert.ok(!existsSync(`${target}.partial`))
  })

  it('refuses a PostgreSQL DATABASE_URL (exit 1), naming pg_dump and the database, not the password', async () => {
    const env = { DATABASE_URL: 'postgres://shop:s3cret@db.example.com:5432/animals' }
    const line = await fails(env, ['backup', 'animals.dump'], 1)
    assert.match(line, /pg_dump --format=custom --file=animals\.dump postgres:\/\/shop@db\.example\.com:5432\/animals$/)
    assert.doesNotMatch(line, /s3cret/)
  })

  it('refuses a missing SQLite database (exit 1) and writes no backup', async (t) => {
    const dir = tempDir(t)
    const env = { DATABASE_URL: `sqlite:${join(dir, 'none.db')}` }
    assert.match(await fails(env, ['backup', join(dir, 'copy.db')], 1), /No SQLite database at .*none\.db/)
    assert.deepEqual(readdirSync(dir), [])
  })

  it('refuses a target whose folder cannot be made (under /proc) in one line, at once, rather than spin', async (t) => {
    const { env } = await live(t)
    // A real process: where Node's recursive mkdir spins, it spins forever, and only a kill ends it.
    const args = ['backup', '/proc/animal-store-test/copy.db']
    const run = await runNode(['bin/animal-store.ts', ...args], env, 10_000)
    assert.equal(run.signal, null, 'the backup did not end by itself within 10 s')
    assert.match(
      failed(run, args, 1),
      /^animal-store: Cannot make the folder \/proc\/animal-store-test for the backup: no such file or directory \(ENOENT\)\.$/,
    )
  })

  it('names the real cause when a folder of the target is a file (not an internal .partial file)', async (t) => {
    const { dir, env } = await live(t)
    writeFileSync(join(dir, 'afile'), 'a file, not a folder')
    const line = await fails(env, ['backup', join(dir, 'afile', 'sub', 'copy.db')], 1)
    assert.equal(
      line,
      `animal-store: Cannot make the folder ${join(dir, 'afile', 'sub')} for the backup: ${join(dir, 'afile')} is a file, not a folder (ENOTDIR).`,
    )
  })

  for (const [what, args] of [
    ['a missing file argument', ['backup']],
    ['an extra argument', ['backup', 'a.db', 'b.db']],
    ['an option', ['backup', 'a.db', '--name', 'x']],
  ] as const) {
    it(`is a usage error (exit 2): ${what}`, async (t) => {
      const dir = tempDir(t)
      await fails({ DATABASE_URL: `sqlite:${join(dir, 'live.db')}` }, [...args], 2)
      assert.deepEqual(readdirSync(dir), [])
    })
  }
})
