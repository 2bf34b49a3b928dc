import assert from 'node:assert/strict'
import {
  closeSync,
  existsSync,
  mkdirSync,
  openSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  writeFileSync,
  writeSync,
} from 'node:fs'
import { Session } from 'node:inspector/promises'
import { dirname, join } from 'node:path'
import { DatabaseSync } from 'node:sqlite'
import { describe, it, type TestContext } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { readMigrations } from '../../src/store/migrations.ts'
import { SqliteStore } from '../../src/store/sqlite.ts'
import { PRUNE_CHUNK } from '../../src/store/sqlite-writer.ts'
import { DatabaseNotSetUpError, DatabaseUnavailableError, PET_FEED_KEPT } from '../../src/store/types.ts'
import { plain, tempDir } from '../helper.ts'
import { until } from '../wait.ts'
import { checkUndeliveredUpgrade, storeContract, type UpgradedMessages } from './contract.ts'

/** The names of the store's first pets, in id order. */
const petNames = async (store: SqliteStore) => (await store.listPets({ limit: 10 })).pets.map((pet) => pet.name)
/** Whether each of several writes sent together was fulfilled or rejected. */
const outcomes = (results: PromiseSettledResult<unknown>[]) => results.map((result) => result.status)

/**
 * Ends this process's worker threads from inside, as a crash would (process.exit in a worker ends
 * that thread only), through the inspector: the store keeps its writer to itself.
 */
async function killWorkerThreads(t: TestContext): Promise<void> {
  const session = new Session()
  session.connect()
  t.after(() => session.disconnect())
  const attached: Promise<string> = new Promise((resolve) => {
    session.on('NodeWorker.attachedToWorker', ({ params }) => resolve(params.sessionId))
  })
  await session.post('NodeWorker.enable', { waitForDebuggerOnStart: false })
  const sessionId = await attached
  const exit = { id: 1, method: 'Runtime.evaluate', params: { expression: 'process.exit(1)' } }
  await session.post('NodeWorker.sendMessageToWorker', { sessionId, message: JSON.stringify(exit) })
}

/** A function that says which worker threads this process started since the call (asked through the inspector). */
async function workerThreads(t: TestContext): Promise<() => string[]> {
  const session = new Session()
  session.connect()
  t.after(() => session.disconnect())
  const seen: string[] = []
  session.on('NodeWorker.attachedToWorker', ({ params }) => seen.push(params.workerInfo.workerId))
  // Those already running (another test's store) are told on enabling: they are not new.
  await session.post('NodeWorker.enable', { waitForDebuggerOnStart: false })
  await new Promise((resolve) => setImmediate(resolve))
  const before = seen.length
  return () => seen.slice(before)
}

storeContract('SQLite', async (t) => {
  const store = await SqliteStore.open(`sqlite:${join(tempDir(t), 'db.sqlite')}`)
  t.after(() => store.close())
  return store
})

// The CLI's store: the same contract with each write committed on this thread, no writer thread.
storeContract('SQLite, direct writes', async (t) => {
  const store = await SqliteStore.open(`sqlite:${join(tempDir(t), 'db.sqlite')}`, { direct: true })
  t.after(() => store.close())
  return store
})

describe('SQLite store: durability and migrations (point 11)', () => {
  it('prunes a backlog of the pet feed a chunk per transaction, keeping the newest rows', async (t) => {
    const path = join(tempDir(t), 'db.sqlite')
    const store = await SqliteStore.open(`sqlite:${path}`)
    t.after(() => store.close())
    const db = new DatabaseSync(path)
    t.after(() => db.close())
    const backlog = PET_FEED_KEPT.rows + 2 * PRUNE_CHUNK + 123
    db.exec(`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ${backlog})
      INSERT INTO pet_changes (pet_id, old_status, new_status) SELECT i, NULL, 'available' FROM n`)
    const batches: number[] = []
    store.onWriterBatch((writes) => batches.push(writes))
    await store.purgeExpired(new Date().toISOString(), new Date(0).toISOString())
    // The sweep's own transaction, then two full chunks and the rest, each committed on its own.
    assert.deepEqual(batches, [1, 1, 1, 1])
    assert.deepEqual(
      plain(db.prepare('SELECT count(*) AS rows, min(seq) AS first, max(seq) AS last FROM pet_changes').get()),
      {
        rows: PET_FEED_KEPT.rows,
        first: backlog - PET_FEED_KEPT.rows + 1,
        last: backlog,
      },
    )
  })

  it('creates the file and its folder, in WAL mode, with the versioned migrations applied once', async (t) => {
    const path = join(tempDir(t), 'nested', 'folder', 'db.sqlite')
    await (await SqliteStore.open(`sqlite:${path}`)).close()
    await (await SqliteStore.open(`sqlite://${path}`)).close() // reopening applies nothing twice
    const db = new DatabaseSync(path)
    t.after(() => db.close())
    assert.deepEqual(plain(db.prepare('PRAGMA journal_mode').get()), { journal_mode: 'wal' })
    const applied = db.prepare('SELECT version, name FROM schema_migrations ORDER BY version').all()
    const expected = readMigrations('sqlite').map(({ version, name }) => ({ version, name }))
    assert.ok(expected.length >= 2)
    assert.deepEqual(plain(applied), expected)
  })

  it('upgrades a version 2 database: the pets, their ids and the highest id given are kept, the rules still hold', async (t) => {
    const path = join(tempDir(t), 'db.sqlite')
    const old = new DatabaseSync(path)
    old.exec(
      `CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL) STRICT`,
    )
    for (const { version, name, sql } of readMigrations('sqlite').slice(0, 2)) {
      old.exec(sql)
      old.prepare("INSERT INTO schema_migrations VALUES (?, ?, 'x')").run(version, name)
    }
    old.exec(`INSERT INTO pets (id, name, category_id, status) VALUES (1, 'a', 1, 'sold'), (7, 'b', 2, 'pending')`)
    // Ids up to 9 were given once (the highest id ever given counts, not the highest kept).
    old.exec(`UPDATE sqlite_sequence SET seq = 9 WHERE name = 'pets'`)
    old.close()
    const store = await SqliteStore.open(`sqlite:${path}`)
    t.after(() => store.close())
    assert.deepEqual(plain((await store.listPets({ limit: 10 })).pets), [
      { id: 1, name: 'a', categoryId: 1, status: 'sold' },
      { id: 7, name: 'b', categoryId: 2, status: 'pending' },
    ])
    assert.equal((await store.createPet({ name: 'c', categoryId: 3 })).id, 10)
    assert.deepEqual(
      (await store.listPets({ limit: 10, status: 'pending' })).pets.map((p) => p.id),
      [7],
    )
    const db = new DatabaseSync(path)
    t.after(() => db.close())
    for (const status of ['lost', 'Sold', '']) {
      assert.throws(
        () => db.prepare("INSERT INTO pets (name, category_id, status) VALUES ('x', 1, ?)").run(status),
        /CHECK/,
      )
    }
    assert.throws(() => db.exec(`INSERT INTO pets (name, category_id, status) VALUES ('x', 0, 'sold')`), /CHECK/)
  })

  it('upgrading marks undelivered the messages the sweep had failed for want of an endpoint, and only those', async (t) => {
    const path = join(tempDir(t), 'db.sqlite')
    // As the version before left them: failed by its sweep; failed at its one endpoint.
    const leaveAsBefore = ({ lonely, tried, waiting }: UpgradedMessages) => {
      const db = new DatabaseSync(path)
      db.prepare("UPDATE messages SET status = 'failed' WHERE id IN (?, ?)").run(lonely, tried)
      db.prepare('UPDATE messages SET fanout = 1 WHERE id IN (?, ?)').run(tried, waiting)
      // Nor the migrations after it: the version before had none of them.
      db.exec(`DELETE FROM schema_migrations
        WHERE version >= (SELECT version FROM schema_migrations WHERE name = 'undelivered_messages');
        DROP TABLE event_log; DROP INDEX deliveries_failed;
        DROP INDEX deliveries_endpoint_due; DROP INDEX deliveries_leased`)
      db.close()
    }
    const reopen = async () => {
      const upgraded = await SqliteStore.open(`sqlite:${path}`)
      t.after(() => upgraded.close())
      return upgraded
    }
    await checkUndeliveredUpgrade(await SqliteStore.open(`sqlite:${path}`), leaveAsBefore, reopen)
  })

  it('names the file when SQLite cannot open it (a folder given as the path)', async (t) => {
    const folder = tempDir(t)
    await assert.rejects(SqliteStore.open(`sqlite:${folder}`), (error: Error) => {
      assert.ok(error.message.startsWith(`${folder}: `), error.message)
      return true
    })
  })

  it('names the file when it is not a database, and refuses a missing one when asked for an existing one', async (t) => {
    const path = join(tempDir(t), 'notes.txt')
    writeFileSync(
      path,
      'not a database, just words long enough to fill a header of one hundred bytes or so.\n'.repeat(20),
    )
    await assert.rejects(SqliteStore.open(`sqlite:${path}`), (error: Error) => {
      assert.match(error.message, new RegExp(`^${path.replaceAll('.', '\\.')}: file is not a database`))
      return true
    })
    const missing = join(tempDir(t), 'folder', 'db.sqlite')
    await assert.rejects(
      SqliteStore.open(`sqlite:${missing}`, { existing: true }),
      (error: Error) =>
        error instanceof DatabaseNotSetUpError &&
        error.message === `No SQLite database at ${missing}: check DATABASE_URL`,
    )
    assert.equal(existsSync(dirname(missing)), false)
  })

  it("refuses, and leaves as it is, a file without its tables (empty, or another program's) when asked for an existing one", async (t) => {
    const empty = join(tempDir(t), 'empty.db')
    writeFileSync(empty, '')
    const other = join(tempDir(t), 'other.db')
    const db = new DatabaseSync(other)
    db.exec('CREATE TABLE notes (body TEXT)')
    db.close()
    const otherBytes = readFileSync(other)
    for (const path of [empty, other]) {
      const opening = SqliteStore.open(`sqlite:${path}`, { existing: true })
      // Were it opened, its writer thread would keep the test run from ending.
      t.after(() =>
        opening.then(
          (store) => store.close(),
          () => {},
        ),
      )
      await assert.rejects(
        opening,
        (error: Error) =>
          error instanceof DatabaseNotSetUpError &&
          error.message === `The SQLite file ${path} holds no Animal Store tables: check DATABASE_URL`,
      )
    }
    assert.equal(statSync(empty).size, 0)
    assert.deepEqual(readFileSync(other), otherBytes)
    // Once set up, it is one.
    await (await SqliteStore.open(`sqlite:${empty}`)).close()
    await (await SqliteStore.open(`sqlite:${empty}`, { existing: true })).close()
  })

  it('refuses a folder it cannot make in one error, even where mkdir misbehaves (/proc), rather than spin', {
    timeout: 10_000,
  }, async () => {
    await assert.rejects(
      SqliteStore.open('sqlite:/proc/animal-store-test/db.sqlite'),
      /^Error: \/proc\/animal-store-test\/db\.sqlite: ENOENT/,
    )
  })

  it('answers reads and writes of a corrupt file as unavailable (503), and says not ready once a write failed', async (t) => {
    const path = join(tempDir(t), 'db.sqlite')
    const store = await SqliteStore.open(`sqlite:${path}`)
    await Promise.all(Array.from({ length: 2000 }, (_, i) => store.createPet({ name: `pet ${i}`, categoryId: 1 })))
    await store.close()
    const file = openSync(path, 'r+')
    // From page 42 to the end: the pets' (the schema's 40 or so pages come first; dbstat shows them).
    const bytes = statSync(path).size - 41 * 4096
    writeSync(file, Buffer.alloc(bytes, 0xab), 0, bytes, 41 * 4096)
    closeSync(file)
    const damaged = await SqliteStore.open(`sqlite:${path}`)
    t.after(() => damaged.close())
    const walk = async () => {
      for (let after: number | null | undefined; after !== null; ) {
        after = (await damaged.listPets({ limit: 100, afterId: after ?? undefined })).nextAfterId
      }
    }
    await assert.rejects(walk(), DatabaseUnavailableError)
    await assert.rejects(damaged.createPet({ name: 'x', categoryId: 1 }), DatabaseUnavailableError)
    await assert.rejects(damaged.ping(), DatabaseUnavailableError)
  })

  it('keeps every acknowledged write after the store is reopened', async (t) => {
    const url = `sqlite:${join(tempDir(t), 'db.sqlite')}`
    const store = await SqliteStore.open(url)
    const pets = await Promise.all(
      Array.from({ length: 20 }, (_, i) => store.createPet({ name: `p${i}`, categoryId: i + 1 })),
    )
    await store.close()
    const reopened = await SqliteStore.open(url)
    t.after(() => reopened.close())
    const page = await reopened.listPets({ limit: 100 })
    assert.deepEqual(plain(page.pets), plain(pets))
  })

  it('commits writes that arrive together in one transaction, and one failing write spares the others', async (t) => {
    const store = await SqliteStore.open(`sqlite:${join(tempDir(t), 'db.sqlite')}`)
    t.after(() => store.close())
    const results = await Promise.allSettled([
      store.createPet({ name: 'a', categoryId: 1 }),
      store.createAccount('dup@example.com'),
      store.createAccount('dup@example.com'),
      // Violates the CHECK constraint: rejected alone.
      store.createPet({ name: 'bad', categoryId: -1 }),
      store.createPet({ name: 'b', categoryId: 1 }),
    ])
    assert.deepEqual(outcomes(results), ['fulfilled', 'fulfilled', 'fulfilled', 'rejected', 'fulfilled'])
    const accounts = results.slice(1, 3).map((r) => (r as PromiseFulfilledResult<unknown>).value)
    assert.equal(accounts.filter(Boolean).length, 1)
    assert.deepEqual(await petNames(store), ['a', 'b'])
  })

  it('undoes the whole of a write of several statements that fails halfway, and keeps its batch-mates', async (t) => {
    const path = join(tempDir(t), 'db.sqlite')
    const store = await SqliteStore.open(`sqlite:${path}`)
    t.after(() => store.close())
    // An idempotent create is an insert, then the idempotency record's update: make the update fail.
    const db = new DatabaseSync(path)
    db.exec(`CREATE TRIGGER refuse_done BEFORE UPDATE ON idempotency_keys WHEN NEW.state = 'done'
      BEGIN SELECT RAISE(ABORT, 'refused'); END`)
    db.close()
    const claim = { scope: 'key_1', key: 'k1', fingerprint: 'f', expiresAt: '2999-01-01T00:00:00.000Z' }
    assert.deepEqual(await store.claimIdempotencyKey({ ...claim, staleBefore: '2000-01-01T00:00:00.000Z' }), {
      state: 'claimed',
    })
    const results = await Promise.allSettled([
      store.createPet({ name: 'a', categoryId: 1 }),
      store.createPet({ name: 'half', categoryId: 1 }, { scope: 'key_1', key: 'k1' }),
      store.createPet({ name: 'b', categoryId: 1 }),
    ])
    assert.deepEqual(outcomes(results), ['fulfilled', 'rejected', 'fulfilled'])
    assert.deepEqual(await petNames(store), ['a', 'b'])
  })

  it('refuses writes (and says not ready) once its file is deleted under it: they could not survive a restart', async (t) => {
    const path = join(tempDir(t), 'db.sqlite')
    const store = await SqliteStore.open(`sqlite:${path}`)
    t.after(() => store.close())
    await store.createPet({ name: 'before', categoryId: 1 })
    await store.ping()
    for (const suffix of ['', '-wal', '-shm']) rmSync(`${path}${suffix}`, { force: true })
    await assert.rejects(store.createPet({ name: 'lost', categoryId: 1 }), DatabaseUnavailableError)
    await assert.rejects(store.createAccount('lost@example.com'), DatabaseUnavailableError)
    await assert.rejects(store.ping(), DatabaseUnavailableError)
  })

  it('fails writes at once (and says not ready) after its writer thread dies, then starts a new one and writes again', async (t) => {
    const store = await SqliteStore.open(`sqlite:${join(tempDir(t), 'db.sqlite')}`)
    t.after(() => store.close())
    await store.createPet({ name: 'before', categoryId: 1 })
    await killWorkerThreads(t)
    // The thread's exit reaches this thread as an event: wait for it (up to 5 s), then readiness fails.
    const ready = () =>
      store.ping().then(
        () => true,
        () => false,
      )
    await until('readiness failing', async () => !(await ready()), { timeoutMs: 5000, everyMs: 10 })
    await assert.rejects(store.ping(), DatabaseUnavailableError)
    // Before, the write went to the dead thread as a message, and its promise never settled. The
    // 2 s is a deadline, not a wait: the race ends as soon as the write settles.
    const write = store.createPet({ name: 'lost', categoryId: 1 })
    const settled = await Promise.race([
      write.then(
        () => 'resolved',
        () => 'rejected',
      ),
      sleep(2000, 'still waiting'),
    ])
    assert.equal(settled, 'rejected')
    await assert.rejects(write, DatabaseUnavailableError)
    // Reads still work: they run on this thread's own connection.
    assert.equal((await store.listPets({ limit: 10 })).pets.length, 1)
    // A second later a new writer is ready, and writes are durable again.
    await until('a new writer thread ready', ready, { timeoutMs: 5000, everyMs: 10 })
    await store.ping()
    await store.createPet({ name: 'after', categoryId: 1 })
    assert.deepEqual(await petNames(store), ['before', 'after'])
  })

  it('refuses writes once its file is replaced by another one at the same path', async (t) => {
    const dir = tempDir(t)
    const path = join(dir, 'db.sqlite')
    const store = await SqliteStore.open(`sqlite:${path}`)
    t.after(() => store.close())
    await (await SqliteStore.open(`sqlite:${join(dir, 'other.sqlite')}`)).close()
    renameSync(join(dir, 'other.sqlite'), path)
    await assert.rejects(store.createPet({ name: 'lost', categoryId: 1 }), DatabaseUnavailableError)
    await assert.rejects(store.ping(), DatabaseUnavailableError)
  })

  for (const suffix of ['-wal', '-shm']) {
    it(`refuses writes, and says not ready, once its ${suffix} file is removed (a commit there would be lost)`, async (t) => {
      const path = join(tempDir(t), 'db.sqlite')
      const store = await SqliteStore.open(`sqlite:${path}`)
      t.after(() => store.close())
      await store.createPet({ name: 'before', categoryId: 1 })
      await store.ping()
      rmSync(`${path}${suffix}`)
      await assert.rejects(store.createPet({ name: 'lost', categoryId: 1 }), DatabaseUnavailableError)
      await assert.rejects(store.ping(), DatabaseUnavailableError)
    })
  }

  it('refuses a write into a file moved away from its path without writing it there (a 503 is not applied)', async (t) => {
    const dir = tempDir(t)
    const path = join(dir, 'db.sqlite')
    const store = await SqliteStore.open(`sqlite:${path}`)
    t.after(() => store.close())
    await store.createPet({ name: 'before', categoryId: 1 })
    mkdirSync(join(dir, 'moved'))
    for (const suffix of ['', '-wal', '-shm']) renameSync(`${path}${suffix}`, join(dir, 'moved', `db.sqlite${suffix}`))
    await assert.rejects(store.createPet({ name: 'refused', categoryId: 1 }), DatabaseUnavailableError)
    const moved = new DatabaseSync(join(dir, 'moved', 'db.sqlite'))
    t.after(() => moved.close())
    assert.deepEqual(
      moved
        .prepare('SELECT name FROM pets ORDER BY id')
        .all()
        .map(({ name }) => name),
      ['before'],
    )
  })

  it('says not ready while its writes fail (another process holds the write lock), and ready again once one succeeds', async (t) => {
    const path = join(tempDir(t), 'db.sqlite')
    const store = await SqliteStore.open(`sqlite:${path}`)
    t.after(() => store.close())
    await store.ping()
    const other = new DatabaseSync(path)
    t.after(() => other.close())
    other.exec('BEGIN EXCLUSIVE')
    // The writer waits its busy timeout (5 s) for the lock, then fails: reads still answer.
    await assert.rejects(store.createPet({ name: 'blocked', categoryId: 1 }), DatabaseUnavailableError)
    await assert.rejects(store.ping(), DatabaseUnavailableError)
    other.exec('ROLLBACK')
    await store.createPet({ name: 'after', categoryId: 1 })
    await store.ping()
  })

  it('opens a database whose schema is current without its write lock: another process holding it does not delay the open', async (t) => {
    const path = join(tempDir(t), 'db.sqlite')
    await (await SqliteStore.open(`sqlite:${path}`)).close()
    const other = new DatabaseSync(path)
    t.after(() => other.close())
    other.exec('BEGIN EXCLUSIVE')
    // Before, each open took the write lock once per migration, waiting out the 5 s busy timeout.
    const started = performance.now()
    const store = await SqliteStore.open(`sqlite:${path}`, { direct: true })
    t.after(() => store.close())
    assert.ok(performance.now() - started < 2000, `the open waited ${performance.now() - started} ms`)
    other.exec('ROLLBACK')
    assert.ok(await store.createAccount('after@example.com'))
  })

  it('writes directly on its own thread: no writer thread, each write durable before it settles, the rules kept', async (t) => {
    const path = join(tempDir(t), 'db.sqlite')
    const threads = await workerThreads(t)
    const store = await SqliteStore.open(`sqlite:${path}`, { direct: true })
    t.after(() => store.close())
    assert.deepEqual(threads(), [], 'a direct store started a thread')
    const account = await store.createAccount('one@example.com')
    assert.ok(account)
    // The database, not this thread, keeps one account per email.
    assert.equal(await store.createAccount('ONE@example.com'), null)
    await store.close()
    await assert.rejects(store.createAccount('late@example.com'), DatabaseUnavailableError)
    const db = new DatabaseSync(path)
    t.after(() => db.close())
    assert.deepEqual(plain(db.prepare('SELECT email FROM accounts').all()), [{ email: 'one@example.com' }])
  })

  it('refuses direct writes once its file is deleted under it, as the writer thread does', async (t) => {
    const path = join(tempDir(t), 'db.sqlite')
    const store = await SqliteStore.open(`sqlite:${path}`, { direct: true })
    t.after(() => store.close())
    await store.createPet({ name: 'before', categoryId: 1 })
    rmSync(path)
    await assert.rejects(store.createPet({ name: 'lost', categoryId: 1 }), DatabaseUnavailableError)
    await assert.rejects(store.ping(), DatabaseUnavailableError)
  })

  it('refuses a database whose schema is newer than the code', async (t) => {
    const path = join(tempDir(t), 'db.sqlite')
    await (await SqliteStore.open(`sqlite:${path}`)).close()
    const db = new DatabaseSync(path)
    db.prepare("INSERT INTO schema_migrations (version, name, applied_at) VALUES (99, 'future', 'x')").run()
    db.close()
    await assert.rejects(SqliteStore.open(`sqlite:${path}`), /schema version 99, newer than this code/)
  })

  it('stores API keys only as hashes: the secret is nowhere in the database file', async (t) => {
    const dir = tempDir(t)
    const store = await SqliteStore.open(`sqlite:${join(dir, 'db.sqlite')}`)
    const { generateApiKey } = await import('../../src/domain/api-keys.ts')
    const account = await store.createAccount('hash@example.com')
    const generated = generateApiKey('production')
    await store.createApiKey({
      accountId: account?.id as number,
      name: 'k',
      prefix: generated.prefix,
      hash: generated.hash,
      expiresAt: null,
    })
    await store.close()
    const files = ['db.sqlite', 'db.sqlite-wal'].map((f) => join(dir, f)).filter((f) => existsSync(f))
    const bytes = Buffer.concat(files.map((f) => readFileSync(f)))
    assert.ok(!bytes.includes(generated.secret))
    assert.ok(!bytes.includes(generated.secret.slice(12)))
  })
})
