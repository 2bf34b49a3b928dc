import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { randomUUID } from 'node:crypto'
import { describe, it, type TestContext } from 'node:test'
import pg from 'pg'
import { readMigrations } from '../../src/store/migrations.ts'
import { PostgresStore } from '../../src/store/postgres.ts'
import { DatabaseNotSetUpError, DatabaseUnavailableError, STREAM_POSITIONS_SECRET } from '../../src/store/types.ts'
import { POSTGRES_URL, postgres, testDatabaseUrl } from '../helper.ts'
import { slowEvent } from '../sql.ts'
import { until } from '../wait.ts'
import { checkUndeliveredUpgrade, storeContract, type UpgradedMessages } from './contract.ts'

const open = async (t: TestContext, databaseUrl?: string) => {
  const store = await PostgresStore.open({
    databaseUrl: databaseUrl ?? (await testDatabaseUrl(t)),
    poolSize: 5,
    timeoutMs: 2000,
  })
  t.after(() => store.close())
  return store
}

storeContract('PostgreSQL', (t) => open(t))

const schemaOf = (url: string) => /search_path%3D(\w+)/.exec(url)?.[1] as string

describe('PostgreSQL store: migrations, int64, outages (scale-out point 1)', () => {
  it('asked for an existing database, refuses a schema with no tables, naming it, and creates nothing', async (t) => {
    const url = await testDatabaseUrl(t)
    await assert.rejects(
      PostgresStore.open({ databaseUrl: url, poolSize: 2, timeoutMs: 2000, existing: true }),
      (error: Error) =>
        error instanceof DatabaseNotSetUpError &&
        error.message ===
          `Schema "${schemaOf(url)}" of database "test" holds no Animal Store tables: check DATABASE_URL`,
    )
    assert.deepEqual(
      await postgres(`SELECT table_name FROM information_schema.tables WHERE table_schema = '${schemaOf(url)}'`),
      [],
    )
    // Tables in a later schema of the search_path are not this one's: migrating would put them here.
    const other = await testDatabaseUrl(t)
    await open(t, other)
    const both = new URL(url)
    both.searchParams.set('options', `-c search_path=${schemaOf(url)},${schemaOf(other)}`)
    await assert.rejects(
      PostgresStore.open({ databaseUrl: both.toString(), poolSize: 2, timeoutMs: 2000, existing: true }),
      DatabaseNotSetUpError,
    )
    assert.deepEqual(
      await postgres(`SELECT table_name FROM information_schema.tables WHERE table_schema = '${schemaOf(url)}'`),
      [],
    )
    // Once set up, it opens.
    await open(t, url)
    const again = await PostgresStore.open({ databaseUrl: url, poolSize: 2, timeoutMs: 2000, existing: true })
    await again.close()
  })

  it('a search_path naming no schema that exists is refused in words that name it', async (t) => {
    const url = new URL(POSTGRES_URL)
    url.searchParams.set('options', '-c search_path=no_such_schema_here')
    await assert.rejects(
      open(t, url.toString()),
      /^Error: No schema of search_path \(no_such_schema_here\) exists in database "test": create it, or fix DATABASE_URL$/,
    )
  })

  it('applies its migrations once when several instances start together', async (t) => {
    const url = await testDatabaseUrl(t)
    await Promise.all(Array.from({ length: 5 }, () => open(t, url)))
    const rows = await postgres(`SELECT version, name FROM ${schemaOf(url)}.schema_migrations ORDER BY version`)
    const expected = readMigrations('postgres').map(({ version, name }) => ({ version, name }))
    assert.ok(expected.length >= 2)
    assert.deepEqual(rows, expected)
  })

  it('keeps ids as bigint columns and returns them as exact numbers', async (t) => {
    const url = await testDatabaseUrl(t)
    const store = await open(t, url)
    const columns = await postgres(
      `SELECT table_name, column_name, data_type FROM information_schema.columns
       WHERE table_schema = '${schemaOf(url)}' AND column_name IN ('id', 'category_id', 'account_id') AND table_name IN ('pets', 'accounts')
       ORDER BY table_name, column_name`,
    )
    assert.ok(
      columns.every((c) => (c as { data_type: string }).data_type === 'bigint'),
      JSON.stringify(columns),
    )
    await postgres(`ALTER TABLE ${schemaOf(url)}.pets ALTER COLUMN id RESTART WITH 9007199254740990`)
    const pet = await store.createPet({ name: 'edge', categoryId: 9007199254740991 })
    assert.equal(pet.id, 9007199254740990)
    assert.equal(pet.categoryId, 9007199254740991)
    assert.deepEqual(await store.getPet(9007199254740990), pet)
  })

  it('the event feed holds back what commits after an open transaction of its database, not of another: nothing is read out of order', async (t) => {
    const url = await testDatabaseUrl(t)
    const store = await open(t, url)
    const account = await store.createAccount('feed@example.com')
    assert.ok(account)
    const head = await store.eventFeedHead()
    // A transaction that takes its seq first and commits last.
    const slow = await slowEvent(t, url, account.id)
    const fast = await store.createMessage(account.id, 'committed first')
    // Read now, the fast event would put the reader past the slow one's seq for good: it waits instead.
    assert.deepEqual((await store.eventFeed(head, 10)).events, [])
    await slow.commit()
    const read = await store.eventFeed(head, 10)
    assert.deepEqual(
      read.events.map(({ event }) => (event.id === 'evt_slow' ? 'slow' : (event.data as { id: string }).id)),
      ['slow', fast.id],
    )
    // By seq alone a reader would have passed the slow event before it was visible, and missed it.
    const [slowAt, fastAt] = read.events.map(({ position }) => position)
    assert.ok(slowAt && fastAt && slowAt.seq < fastAt.seq && slowAt.tx < fastAt.tx)

    // A transaction open in another database of the server writes no event here: it holds nothing back.
    const elsewhere = new pg.Client({ connectionString: POSTGRES_URL.replace(/\/[^/?]*(\?|$)/, '/postgres$1') })
    await elsewhere.connect()
    t.after(() => elsewhere.end())
    await elsewhere.query('BEGIN')
    await elsewhere.query('SELECT pg_current_xact_id()')
    const meanwhile = await store.createMessage(account.id, 'while another database waits')
    const after = await store.eventFeed(read.position, 10)
    assert.deepEqual(
      after.events.map(({ event }) => (event.data as { id: string }).id),
      [meanwhile.id],
    )
    await elsewhere.query('ROLLBACK')
  })

  it('puts events restored from another server (xids ahead of its own), all of them, before every event to come, and forgets the stream key', async (t) => {
    const url = await testDatabaseUrl(t)
    const store = await open(t, url)
    const account = await store.createAccount('restored@example.com')
    assert.ok(account)
    const made = await store.createMessage(account.id, 'made here')
    const key = await store.secret(STREAM_POSITIONS_SECRET, () => 'the old server key')
    // As pg_restore leaves a dump of a server whose transaction ids had gone further than this one's.
    await postgres(
      `SET search_path TO ${schemaOf(url)}; INSERT INTO event_log (id, account_id, type, data, created_at, xid)
        VALUES ('evt_restored', ${account.id}, 'message.created', '{}', now(), '999999999999')`,
    )
    await store.close()
    const reopened = await open(t, url)
    const rows = await postgres(`SELECT id, xid::text AS xid FROM ${schemaOf(url)}.event_log ORDER BY seq`)
    // All of them, in seq order: moving only those ahead would put the newer before the older.
    assert.deepEqual(
      rows.map((row) => (row as { xid: string }).xid),
      ['1', '1'],
      `${made.id}'s event and the restored one`,
    )
    const fresh = await reopened.secret(STREAM_POSITIONS_SECRET, () => 'a new key')
    assert.notEqual(fresh, key)
    // A new event comes after the restored one in the stream's order.
    const head = await reopened.eventFeedHead()
    assert.ok(head.tx > 1n)
    const feed = await reopened.eventFeed({ tx: 1n, seq: Number.MAX_SAFE_INTEGER }, 10)
    await reopened.createMessage(account.id, 'after the restore')
    const after = await reopened.eventFeed(feed.position, 10)
    assert.deepEqual(
      after.events.map(({ event }) => (event.data as { message: string }).message),
      ['after the restore'],
    )
  })

  it("opens a schema that is current without the migrators' lock: another instance migrating does not hold it up", async (t) => {
    const url = await testDatabaseUrl(t)
    await (await open(t, url)).close()
    const migrator = new pg.Client({ connectionString: POSTGRES_URL })
    await migrator.connect()
    t.after(() => migrator.end())
    await migrator.query(`SELECT pg_advisory_lock(hashtext('animal-store:${schemaOf(url)}'))`)
    // Before, every open waited for that lock, and failed at its 2 s timeout.
    const started = Date.now()
    const store = await open(t, url)
    assert.ok(Date.now() - started < 1500, `the open waited ${Date.now() - started} ms`)
    assert.ok(await store.createAccount('after@example.com'))
  })

  it('upgrading marks undelivered the messages the sweep had failed for want of an endpoint, and only those', async (t) => {
    const url = await testDatabaseUrl(t)
    const schema = schemaOf(url)
    // As the version before left them: failed by its sweep; failed at its one endpoint.
    const leaveAsBefore = ({ lonely, tried }: UpgradedMessages) =>
      postgres(`UPDATE ${schema}.messages SET status = 'failed' WHERE id IN ('${lonely}', '${tried}');
      UPDATE ${schema}.messages SET fanout = 1 WHERE id <> '${lonely}';
      DELETE FROM ${schema}.schema_migrations
        WHERE version >= (SELECT version FROM ${schema}.schema_migrations WHERE name = 'undelivered_messages');
      DROP TABLE ${schema}.event_log; DROP INDEX ${schema}.deliveries_failed;
      DROP INDEX ${schema}.deliveries_endpoint_due; DROP INDEX ${schema}.deliveries_leased`)
    await checkUndeliveredUpgrade(await open(t, url), leaveAsBefore, () => open(t, url))
  })

  it('refuses a database whose schema is newer than the code', async (t) => {
    const url = await testDatabaseUrl(t)
    await (await open(t, url)).close()
    await postgres(`INSERT INTO ${schemaOf(url)}.schema_migrations (version, name) VALUES (99, 'future')`)
    await assert.rejects(open(t, url), /schema version 99, newer than this code/)
  })

  it('says DatabaseUnavailableError, within its timeout, when nothing answers', async () => {
    const started = Date.now()
    await assert.rejects(
      PostgresStore.open({ databaseUrl: 'postgres://postgres@127.0.0.1:1/test', poolSize: 1, timeoutMs: 1000 }),
      DatabaseUnavailableError,
    )
    assert.ok(Date.now() - started < 5000)
  })

  it('calls a bad setting a bad setting, not an outage (a statement_timeout that is not one)', async (t) => {
    const url = new URL(await testDatabaseUrl(t))
    url.searchParams.set('options', '-c statement_timeout=abc')
    await assert.rejects(open(t, url.toString()), (error: Error) => {
      assert.ok(!(error instanceof DatabaseUnavailableError), String(error))
      assert.match(error.message, /statement_timeout/)
      return true
    })
  })

  it('recovers by itself after its connections are terminated (pg_terminate_backend)', async (t) => {
    const url = new URL(await testDatabaseUrl(t))
    const name = `animal-store-${randomUUID()}`
    url.searchParams.set('application_name', name)
    const store = await open(t, url.toString())
    // Fill the pool (5): after the kill every idle connection is dead.
    await Promise.all([store.createPet({ name: 'before', categoryId: 1 }), ...[1, 2, 3, 4, 5].map(() => store.ping())])
    // Killed from another process, synchronously: this event loop does not turn in between, so the
    // pool has not yet heard that its connections are gone and the next read meets them all.
    const killed = execFileSync(
      process.execPath,
      [
        '--input-type=module',
        '-e',
        `import pg from 'pg'; const c = new pg.Client(${JSON.stringify(POSTGRES_URL)}); await c.connect();
         const r = await c.query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = '${name}'");
         console.log(r.rowCount); await c.end()`,
      ],
      { encoding: 'utf8' },
    )
    assert.ok(Number(killed) >= 2, `killed ${killed}`)
    // Reads retry past connections the server closed, so the first read after the outage already succeeds.
    assert.equal((await store.listPets({ limit: 10 })).pets.length, 1)
    await store.createPet({ name: 'after', categoryId: 1 })
    assert.equal((await store.listPets({ limit: 10 })).pets.length, 2)
  })

  it('a connection terminated in the middle of a transaction fails that write (DatabaseUnavailableError), and the process lives on', async (t) => {
    const url = new URL(await testDatabaseUrl(t))
    const name = `animal-store-${randomUUID()}`
    url.searchParams.set('application_name', name)
    const store = await open(t, url.toString())
    const schema = schemaOf(url.toString())
    // An insert that takes a while, so that its backend can be terminated under it.
    await postgres(`CREATE FUNCTION ${schema}.slow() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN PERFORM pg_sleep(3); RETURN NEW; END $$;
      CREATE TRIGGER slow BEFORE INSERT ON ${schema}.pets FOR EACH ROW WHEN (NEW.name = 'slow') EXECUTE FUNCTION ${schema}.slow()`)
    const claim = { scope: 'key_1', key: 'k1', fingerprint: 'f', expiresAt: later(), staleBefore: earlier() }
    assert.deepEqual(await store.claimIdempotencyKey(claim), { state: 'claimed' })
    // An idempotent create is one transaction on a checked-out connection (the insert, then the claim's update).
    const write = store.createPet({ name: 'slow', categoryId: 1 }, { scope: 'key_1', key: 'k1' })
    const outcome = write.then(
      () => null,
      (error: unknown) => error,
    )
    // Killed once the insert is inside the trigger's pg_sleep: in the middle of the transaction.
    const pid = await until('the insert sleeping in its trigger', async () => {
      const [row] = (await postgres(
        `SELECT pid FROM pg_stat_activity WHERE application_name = '${name}' AND state = 'active'
         AND query LIKE 'INSERT INTO pets%' AND wait_event = 'PgSleep'`,
      )) as { pid: number }[]
      return row?.pid
    })
    assert.deepEqual(await postgres(`SELECT pg_terminate_backend(${pid}) AS killed`), [{ killed: true }])
    assert.ok((await outcome) instanceof DatabaseUnavailableError)
    // Had the connection's 'error' event gone unheard, the process would end when its socket's end
    // arrives: wait until the backend is gone (its socket closed), then the writes below turn the loop.
    await until(
      'the terminated backend gone',
      async () => (await postgres(`SELECT 1 FROM pg_stat_activity WHERE pid = ${pid}`)).length === 0,
    )
    assert.equal((await store.createPet({ name: 'after', categoryId: 1 })).name, 'after')
    assert.deepEqual(
      (await store.listPets({ limit: 10 })).pets.map((p) => p.name),
      ['after'],
    )
  })
})

const later = () => new Date(Date.now() + 3_600_000).toISOString()
const earlier = () => new Date(Date.now() - 3_600_000).toISOString()

describe('PostgreSQL store: a password set while a sign-in starts its session (row locks)', () => {
  const later = new Date(Date.now() + 3_600_000).toISOString()
  /** A store with an account whose password hash is scrypt$old, and another connection, for a transaction the test holds open. */
  const setUp = async (t: TestContext) => {
    const url = await testDatabaseUrl(t)
    // The store's connections carry a name of their own, to find the one that waits on a lock.
    const named = new URL(url)
    const name = `animal-store-${randomUUID()}`
    named.searchParams.set('application_name', name)
    const store = await open(t, named.toString())
    const account = await store.createAccount('race@example.com', 'scrypt$old')
    assert.ok(account)
    const other = new pg.Client({ connectionString: url })
    await other.connect()
    t.after(() => other.end())
    /** Resolves once a statement of the store waits for a lock (held by `other`'s transaction). */
    const storeWaitsOnLock = () =>
      until(
        'a statement of the store waiting on a lock',
        async () =>
          (
            await postgres(
              `SELECT pid FROM pg_stat_activity WHERE application_name = '${name}' AND wait_event_type = 'Lock'`,
            )
          ).length > 0,
      )
    return { store, account, other, storeWaitsOnLock }
  }

  it('a session insert that waits on a password being set re-checks the hash, and stores nothing', async (t) => {
    const { store, account, other: setter, storeWaitsOnLock } = await setUp(t)
    await setter.query('BEGIN')
    await setter.query("UPDATE accounts SET password_hash = 'scrypt$new' WHERE id = $1", [account.id])
    const inserted = store.createSession({
      hash: 's1',
      accountId: account.id,
      expiresAt: later,
      passwordHash: 'scrypt$old',
    })
    await storeWaitsOnLock() // the insert now waits for the row
    await setter.query('DELETE FROM sessions WHERE account_id = $1', [account.id])
    await setter.query('COMMIT')
    assert.equal(await inserted, false)
    assert.equal(await store.findSession('s1'), null)
  })

  it('a password set while a session insert holds the row ends that session too', async (t) => {
    const { store, account, other: signIn, storeWaitsOnLock } = await setUp(t)
    await signIn.query('BEGIN')
    await signIn.query(
      `INSERT INTO sessions (id, account_id, created_at, expires_at)
       SELECT 's2', id, now(), $2 FROM accounts WHERE id = $1 AND password_hash = 'scrypt$old' FOR SHARE`,
      [account.id, later],
    )
    const set = store.setAccountPassword(account.id, 'scrypt$new')
    await storeWaitsOnLock() // the update now waits for the row
    await signIn.query('COMMIT')
    assert.equal(await set, true)
    assert.equal(await store.findSession('s2'), null, 'a session made with the old password outlived it')
  })
})
