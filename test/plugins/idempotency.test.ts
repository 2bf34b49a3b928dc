import assert from 'node:assert/strict'
import { DatabaseSync } from 'node:sqlite'
import { describe, it } from 'node:test'
import { requestFingerprint } from '../../src/plugins/idempotency.ts'
import { sqlitePath } from '../../src/store/sqlite.ts'
import { bearer, build, DATABASE, errorBody, postgres, suiteApp, type TestApp, testDatabaseUrl } from '../helper.ts'

const json = { 'content-type': 'application/json' }

/** Runs SQL on the app's database from a connection of its own: a real fault, injected from outside. */
function runSql(url: string, sqlite: string, pg: string): Promise<unknown> {
  if (DATABASE === 'postgres') return postgres(pg, url)
  const db = new DatabaseSync(sqlitePath(url))
  db.exec(sqlite)
  db.close()
  return Promise.resolve()
}

const postPet = (test: TestApp, headers: Record<string, string>, payload: string | object) =>
  test.app.inject({ method: 'POST', url: '/v1/pets', headers, payload })

describe('Idempotency-Key on POST /v1/pets and POST /v1/messages (draft-ietf-httpapi-idempotency-key-header)', () => {
  // Idempotency keys belong to an API key, and each test makes its own: one app serves the tests
  // that look at nothing else. Those that count every pet in the store (pets are global) have apps
  // of their own.
  const shared = suiteApp()

  it('a retry with the same key and body replays the first response and creates nothing', async (t) => {
    const test = await build(t)
    const { secret } = await test.newKey()
    const send = (key: string) =>
      postPet(test, { ...bearer(secret), 'idempotency-key': key }, { name: 'Rex', categoryId: 1 })
    const first = await send('order-1')
    assert.equal(first.statusCode, 201)
    assert.equal(first.headers['idempotent-replayed'], undefined)
    for (const key of ['order-1', '"order-1"']) {
      const retry = await send(key)
      assert.equal(retry.statusCode, 201)
      assert.equal(retry.headers['idempotent-replayed'], 'true')
      assert.equal(retry.body, first.body)
      assert.equal(retry.headers.location, first.headers.location)
    }
    const listed = await test.app.inject({ url: '/v1/pets', headers: bearer(secret) })
    assert.equal(listed.json().length, 1)
  })

  it('treats the same body with its fields in another order as the same request', async () => {
    const test = await shared()
    const { secret } = await test.newKey()
    const headers = { ...bearer(secret), ...json, 'idempotency-key': 'k' }
    const first = await postPet(test, headers, '{"name":"Rex","categoryId":1}')
    const retry = await postPet(test, headers, '{"categoryId":1,"name":"Rex"}')
    assert.equal(retry.headers['idempotent-replayed'], 'true')
    assert.equal(retry.body, first.body)
  })

  it('the same key with a different body: 422 idempotency_key_reused, nothing created', async (t) => {
    const test = await build(t)
    const { secret } = await test.newKey()
    const headers = { ...bearer(secret), 'idempotency-key': 'k' }
    await postPet(test, headers, { name: 'Rex', categoryId: 1 })
    const other = await postPet(test, headers, { name: 'Tom', categoryId: 1 })
    assert.equal(other.statusCode, 422)
    assert.equal(errorBody(other).code, 'idempotency_key_reused')
    assert.equal((await test.app.inject({ url: '/v1/pets', headers: bearer(secret) })).json().length, 1)
  })

  it('while the first request with a key is in flight: 409 idempotency_conflict', async (t) => {
    const test = await build(t)
    const { secret, keyId } = await test.newKey()
    const headers = { ...bearer(secret), 'idempotency-key': 'busy' }
    // Two identical requests at once: one does the work, the other finds the key taken.
    const [a, b] = await Promise.all([
      postPet(test, headers, { name: 'Rex', categoryId: 1 }),
      postPet(test, headers, { name: 'Rex', categoryId: 1 }),
    ])
    const statuses = [a.statusCode, b.statusCode].sort()
    assert.ok(
      (statuses[0] === 201 && statuses[1] === 409) ||
        (statuses[0] === 201 && statuses[1] === 201 && [a, b].some((r) => r.headers['idempotent-replayed'])),
      String(statuses),
    )
    // And deterministically: a claim held by a request still running (made here through the store).
    const now = Date.now()
    await test.app.store.claimIdempotencyKey({
      scope: keyId,
      key: 'held',
      fingerprint: requestFingerprint('POST', '/v1/messages', { message: 'hi' }),
      expiresAt: new Date(now + 60_000).toISOString(),
      staleBefore: new Date(now - 60_000).toISOString(),
    })
    const conflict = await test.app.inject({
      method: 'POST',
      url: '/v1/messages',
      headers: { ...bearer(secret), 'idempotency-key': 'held' },
      payload: { message: 'hi' },
    })
    assert.equal(conflict.statusCode, 409)
    assert.equal(errorBody(conflict).code, 'idempotency_conflict')
    assert.equal((await test.app.inject({ url: '/v1/pets', headers: bearer(secret) })).json().length, 1)
  })

  it('keys belong to the API key that sent them: another key with the same Idempotency-Key creates its own pet', async () => {
    const test = await shared()
    const one = await test.newKey()
    const two = await test.newKey()
    const send = (secret: string) =>
      postPet(test, { ...bearer(secret), 'idempotency-key': 'same' }, { name: 'Rex', categoryId: 1 })
    const a = await send(one.secret)
    const b = await send(two.secret)
    assert.equal(b.headers['idempotent-replayed'], undefined)
    assert.notEqual(a.json().id, b.json().id)
  })

  it('replays POST /v1/messages with its 202 and creates one message', async () => {
    const test = await shared()
    const { secret, accountId } = await test.newKey()
    const send = () =>
      test.app.inject({
        method: 'POST',
        url: '/v1/messages',
        headers: { ...bearer(secret), 'idempotency-key': 'msg-1' },
        payload: { message: 'hello' },
      })
    const first = await send()
    const retry = await send()
    assert.equal(retry.statusCode, 202)
    assert.equal(retry.headers['idempotent-replayed'], 'true')
    assert.equal(retry.body, first.body)
    assert.equal((await test.app.store.listMessages({ accountId: accountId, limit: 10 })).messages.length, 1)
  })

  it('a refused request claims nothing: the key works for the corrected request', async () => {
    const test = await shared()
    const { secret } = await test.newKey()
    const headers = { ...bearer(secret), 'idempotency-key': 'fix-me' }
    const bad = await postPet(test, headers, { name: 'Rex' })
    assert.equal(bad.statusCode, 400)
    const good = await postPet(test, headers, { name: 'Rex', categoryId: 1 })
    assert.equal(good.statusCode, 201)
    assert.equal(good.headers['idempotent-replayed'], undefined)
  })

  it('a claimed request whose write fails releases its key: the retry is done, not 409', async (t) => {
    // Adds a trigger to the database, and lists every pet.
    const url = await testDatabaseUrl(t)
    const test = await build(t, { DATABASE_URL: url })
    const { secret } = await test.newKey()
    const headers = { ...bearer(secret), 'idempotency-key': 'retry-me' }
    // The database refuses this one insert, after the key was claimed.
    await runSql(
      url,
      "CREATE TRIGGER refuse_boom BEFORE INSERT ON pets WHEN NEW.name = 'Boom' BEGIN SELECT RAISE(ABORT, 'refused'); END",
      `CREATE FUNCTION refuse_boom() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'refused'; END $$;
       CREATE TRIGGER refuse_boom BEFORE INSERT ON pets FOR EACH ROW WHEN (NEW.name = 'Boom') EXECUTE FUNCTION refuse_boom()`,
    )
    const failed = await postPet(test, headers, { name: 'Boom', categoryId: 1 })
    assert.equal(failed.statusCode, 500)
    await runSql(url, 'DROP TRIGGER refuse_boom', 'DROP TRIGGER refuse_boom ON pets')
    const retry = await postPet(test, headers, { name: 'Boom', categoryId: 1 })
    assert.equal(retry.statusCode, 201)
    assert.equal(retry.headers['idempotent-replayed'], undefined)
    const pets = (await test.app.inject({ url: '/v1/pets', headers: bearer(secret) })).json()
    assert.deepEqual(
      pets.map((pet: { name: string }) => pet.name),
      ['Boom'],
    )
  })

  it('takes a quoted key of 255 characters: the quotes do not count', async () => {
    const test = await shared()
    const { secret } = await test.newKey()
    const key = `"${'k'.repeat(255)}"`
    const first = await postPet(test, { ...bearer(secret), 'idempotency-key': key }, { name: 'Rex', categoryId: 1 })
    assert.equal(first.statusCode, 201, first.body)
    const again = await postPet(test, { ...bearer(secret), 'idempotency-key': key }, { name: 'Rex', categoryId: 1 })
    assert.equal(again.headers['idempotent-replayed'], 'true')
    assert.equal(again.json().id, first.json().id)
  })

  it('refuses a malformed Idempotency-Key with 400 naming the header and its rule', async () => {
    const test = await shared()
    const { secret } = await test.newKey()
    for (const key of [
      'has space',
      'x'.repeat(256),
      `"${'x'.repeat(256)}"`,
      'tab\there',
      'ünïcode',
      '""',
      '"a',
      'a"b',
    ]) {
      const response = await postPet(
        test,
        { ...bearer(secret), 'idempotency-key': key },
        { name: 'Rex', categoryId: 1 },
      )
      assert.equal(response.statusCode, 400, key)
      assert.match(
        errorBody(response).message,
        /^header\.idempotency-key is invalid: 1 to 255 visible ASCII characters/,
      )
    }
  })
})
