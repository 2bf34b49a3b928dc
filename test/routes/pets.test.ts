import assert from 'node:assert/strict'
import { DatabaseSync } from 'node:sqlite'
import { describe, it } from 'node:test'
import type { LightMyRequestResponse } from 'fastify'
import { openStore } from '../../src/store/index.ts'
import { FRESH_MS } from '../../src/store/pet-cache.ts'
import { sqlitePath } from '../../src/store/sqlite.ts'
import { bearer, build, DATABASE, errorBody, postgres, suiteApp, type TestApp } from '../helper.ts'
import { until } from '../wait.ts'

async function seed(t: TestApp, secret: string, pets: { name: string; categoryId: number; status?: string }[]) {
  const created = []
  for (const pet of pets) {
    const response = await t.app.inject({ method: 'POST', url: '/v1/pets', headers: bearer(secret), payload: pet })
    assert.equal(response.statusCode, 201, response.body)
    created.push(response.json())
  }
  return created
}

/** Follows `Link: <…>; rel="next"` from `url` to the end; returns every page. */
async function walk(t: TestApp, secret: string, url: string) {
  const pages = []
  let next: string | undefined = url
  while (next) {
    const response: LightMyRequestResponse = await t.app.inject({ method: 'GET', url: next, headers: bearer(secret) })
    assert.equal(response.statusCode, 200, response.body)
    pages.push(response.json())
    const href = /^<([^>]+)>; rel="next"$/.exec(String(response.headers.link ?? ''))?.[1]
    next = href ? new URL(href).pathname + new URL(href).search : undefined
  }
  return pages
}

describe('createPet: POST /v1/pets (point 1)', () => {
  // Pets are global to the store: tests that look only at the pets they made share one app, tests
  // that store nothing share another (whose store stays empty), and a test that lists every pet has
  // an app of its own.
  const shared = suiteApp()
  const empty = suiteApp()

  it('returns 201 with the Pet, its new id, and a Location that fetches it', async () => {
    const app = await shared()
    const { secret } = await app.newKey()
    const response = await app.app.inject({
      method: 'POST',
      url: '/v1/pets',
      headers: bearer(secret),
      payload: { name: 'Rex', categoryId: 7, status: 'pending' },
    })
    assert.equal(response.statusCode, 201)
    const pet = response.json()
    assert.deepEqual(pet, { id: pet.id, name: 'Rex', categoryId: 7, status: 'pending' })
    assert.ok(Number.isSafeInteger(pet.id) && pet.id >= 1)
    assert.equal(response.headers.location, `http://localhost:80/v1/pets/${pet.id}`)
    const fetched = await app.app.inject({
      url: new URL(response.headers.location as string).pathname,
      headers: bearer(secret),
    })
    assert.deepEqual(fetched.json(), pet)
  })

  it('defaults status to available and assigns distinct increasing ids', async () => {
    const app = await shared()
    const { secret } = await app.newKey()
    const pets = await seed(app, secret, [
      { name: 'a', categoryId: 1 },
      { name: 'b', categoryId: 1 },
      { name: 'c', categoryId: 1 },
    ])
    assert.deepEqual(
      pets.map((p) => p.status),
      ['available', 'available', 'available'],
    )
    assert.ok(pets[0].id < pets[1].id && pets[1].id < pets[2].id)
  })

  it('keeps concurrent creates apart: every 201 is a distinct stored pet', async (t) => {
    // Lists every pet of the store: an app of its own.
    const app = await build(t)
    const { secret } = await app.newKey()
    const responses = await Promise.all(
      Array.from({ length: 50 }, (_, i) =>
        app.app.inject({
          method: 'POST',
          url: '/v1/pets',
          headers: bearer(secret),
          payload: { name: `p${i}`, categoryId: 1 },
        }),
      ),
    )
    const ids = responses.map((r) => r.json().id)
    assert.equal(new Set(ids).size, 50)
    const listed = await app.app.inject({ url: '/v1/pets?limit=100', headers: bearer(secret) })
    assert.deepEqual(
      listed.json().map((p: { id: number }) => p.id),
      [...ids].sort((a, b) => a - b),
    )
  })

  it('refuses a number that only rounds to an integer (1.0000000000000001); takes one written another way (1.0, 10e-1)', async () => {
    const app = await shared()
    const { secret } = await app.newKey()
    const post = (categoryId: string) =>
      app.app.inject({
        method: 'POST',
        url: '/v1/pets',
        headers: { ...bearer(secret), 'content-type': 'application/json' },
        payload: `{"name":"Rex 2e.5","categoryId":${categoryId}}`,
      })
    for (const inexact of [
      '1.0000000000000001',
      '0.99999999999999999',
      '2.00000000000000000001e0',
      '123456789012345678.5',
    ]) {
      const response = await post(inexact)
      assert.equal(response.statusCode, 400, inexact)
      assert.match(errorBody(response).message, /body\.categoryId must be an integer/)
    }
    // Nesting too deep for a reviver is still refused for what it is, not called invalid JSON.
    const deep = await post(`1, "extra": ${'['.repeat(8000)}2.5${']'.repeat(8000)}`)
    assert.equal(errorBody(deep).code, 'validation_failed')
    for (const [exact, stored] of [
      ['1.0', 1],
      ['10e-1', 1],
      ['0.2e1', 2],
      ['3E0', 3],
    ] as const) {
      const response = await post(exact)
      assert.equal(response.statusCode, 201, exact)
      assert.equal(response.json().categoryId, stored)
    }
  })

  const invalid: [string, unknown, RegExp][] = [
    ['name missing', { categoryId: 1 }, /body\.name is required/],
    ['categoryId missing', { name: 'Rex' }, /body\.categoryId is required/],
    ['a misspelt field', { nam: 'Rex', categoryId: 1 }, /^body\.name is required \(body\.nam is not a known field\)$/],
    ['categoryId as a string "7"', { name: 'Rex', categoryId: '7' }, /body\.categoryId must be an integer/],
    ['name as a number', { name: 5, categoryId: 1 }, /body\.name must be a string/],
    ['categoryId fractional', { name: 'Rex', categoryId: 1.5 }, /body\.categoryId must be an integer/],
    ['categoryId zero', { name: 'Rex', categoryId: 0 }, /body\.categoryId must be at least 1/],
    [
      'categoryId above 2^53-1 (not exact in JSON)',
      { name: 'Rex', categoryId: 9007199254740992 },
      /body\.categoryId must be at most 9007199254740991/,
    ],
    ['categoryId null', { name: 'Rex', categoryId: null }, /body\.categoryId must be an integer/],
    [
      'status unknown',
      { name: 'Rex', categoryId: 1, status: 'lost' },
      /body\.status must be one of: available, pending, sold/,
    ],
    ['name empty', { name: '', categoryId: 1 }, /body\.name must be at least 1 character long/],
    ['name blank', { name: '   ', categoryId: 1 }, /body\.name is invalid/],
    // Zero-width space, word joiner, byte order mark, a bidi control, a C0 control, braille blank, an annotation anchor.
    ['name invisible', { name: '\u200b\u2060\ufeff\u202e\u0001\u2800\ufff9', categoryId: 1 }, /body\.name is invalid/],
    ['name too long', { name: 'x'.repeat(201), categoryId: 1 }, /body\.name must be at most 200 characters long/],
    ['an unknown field', { name: 'Rex', categoryId: 1, color: 'red' }, /body\.color is not a known field/],
    ['an id (assigned by the service)', { id: 5, name: 'Rex', categoryId: 1 }, /body\.id is not a known field/],
    ['an array', [{ name: 'Rex', categoryId: 1 }], /body must be an object/],
    ['a string', 'Rex', /body must be an object/],
    ['null', null, /body must be an object/],
  ]
  for (const [what, payload, message] of invalid) {
    it(`refuses a body with ${what}: 400 validation_failed naming the field, nothing stored`, async () => {
      const app = await empty()
      const { secret } = await app.newKey()
      const response = await app.app.inject({
        method: 'POST',
        url: '/v1/pets',
        headers: { ...bearer(secret), 'content-type': 'application/json' },
        payload: JSON.stringify(payload),
      })
      assert.equal(response.statusCode, 400)
      const body = errorBody(response)
      assert.equal(body.code, 'validation_failed')
      assert.match(body.message, message)
      const listed = await app.app.inject({ url: '/v1/pets', headers: bearer(secret) })
      assert.deepEqual(listed.json(), [])
    })
  }

  it('accepts the limits exactly: 200-character name and categoryId 2^53-1', async () => {
    const app = await shared()
    const { secret } = await app.newKey()
    const payload = { name: 'ü'.repeat(200), categoryId: 9007199254740991 }
    const response = await app.app.inject({ method: 'POST', url: '/v1/pets', headers: bearer(secret), payload })
    assert.equal(response.statusCode, 201)
    assert.match(response.body, /"categoryId":9007199254740991/)
    assert.equal(response.json().name, payload.name)
  })
})

describe('listPets: GET /v1/pets (points 1 and 5)', () => {
  // As for createPet: a test that reads whole lists or pages of pets has an app of its own.
  const shared = suiteApp()
  const empty = suiteApp()

  it('returns a JSON array ordered by id, 20 by default', async (t) => {
    const app = await build(t)
    const { secret } = await app.newKey()
    const pets = await seed(
      app,
      secret,
      Array.from({ length: 25 }, (_, i) => ({ name: `pet${i}`, categoryId: i + 1 })),
    )
    const response = await app.app.inject({ url: '/v1/pets', headers: bearer(secret) })
    assert.equal(response.statusCode, 200)
    assert.match(String(response.headers['content-type']), /^application\/json/)
    assert.deepEqual(response.json(), pets.slice(0, 20))
  })

  it('returns [] and no Link when the store is empty', async () => {
    const app = await empty()
    const { secret } = await app.newKey()
    const response = await app.app.inject({ url: '/v1/pets', headers: bearer(secret) })
    assert.equal(response.statusCode, 200)
    assert.deepEqual(response.json(), [])
    assert.equal(response.headers.link, undefined)
  })

  it('honours limit from 1 to 100', async () => {
    // At least 101 pets, whoever made the others.
    const app = await shared()
    const { secret } = await app.newKey()
    await seed(
      app,
      secret,
      Array.from({ length: 101 }, (_, i) => ({ name: `pet${i}`, categoryId: 1 })),
    )
    for (const [limit, count] of [
      [1, 1],
      [7, 7],
      [100, 100],
    ]) {
      const response = await app.app.inject({ url: `/v1/pets?limit=${limit}`, headers: bearer(secret) })
      assert.equal(response.json().length, count)
    }
  })

  const badQueries: [string, RegExp][] = [
    ['limit=0', /query\.limit must be at least 1/],
    ['limit=101', /query\.limit must be at most 100/],
    ['limit=-1', /query\.limit must be at least 1/],
    ['limit=abc', /query\.limit must be a decimal integer/],
    ['limit=1.5', /query\.limit must be a decimal integer/],
    ['limit=1e1', /query\.limit must be a decimal integer/],
    ['limit=', /query\.limit must be a decimal integer/],
    ['limit=5&limit=6', /query\.limit must be given once/],
    ['status=lost', /query\.status must be one of: available, pending, sold/],
    ['status=AVAILABLE', /query\.status must be one of/],
    ['status=sold&status=pending', /query\.status must be given once/],
    ['offset=10', /query\.offset is not a known field/],
    // A name of the client's own is repeated cut short (not 15 KB of it), and visible when empty.
    [`${'x'.repeat(15_000)}=1`, /^query\.x{64}… is not a known field$/],
    ['=1', /^query\."" is not a known field$/],
  ]
  for (const [query, message] of badQueries) {
    it(`refuses ?${query.slice(0, 40)} with 400 validation_failed`, async () => {
      const app = await empty()
      const { secret } = await app.newKey()
      const response = await app.app.inject({ url: `/v1/pets?${query}`, headers: bearer(secret) })
      assert.equal(response.statusCode, 400)
      const body = errorBody(response)
      assert.equal(body.code, 'validation_failed')
      assert.match(body.message, message)
    })
  }

  it('filters by status', async (t) => {
    const app = await build(t)
    const { secret } = await app.newKey()
    const pets = await seed(app, secret, [
      { name: 'a', categoryId: 1, status: 'sold' },
      { name: 'b', categoryId: 1, status: 'available' },
      { name: 'c', categoryId: 1, status: 'sold' },
      { name: 'd', categoryId: 1, status: 'pending' },
    ])
    for (const status of ['available', 'pending', 'sold']) {
      const response = await app.app.inject({ url: `/v1/pets?status=${status}`, headers: bearer(secret) })
      assert.deepEqual(
        response.json(),
        pets.filter((p) => p.status === status),
      )
    }
  })

  it('paginates with Link rel="next" and an opaque cursor: every pet exactly once, in order', async (t) => {
    const app = await build(t)
    const { secret } = await app.newKey()
    const pets = await seed(
      app,
      secret,
      Array.from({ length: 23 }, (_, i) => ({ name: `pet${i}`, categoryId: 1, status: i % 3 ? 'available' : 'sold' })),
    )
    const pages = await walk(app, secret, '/v1/pets?limit=5')
    assert.deepEqual(
      pages.map((p) => p.length),
      [5, 5, 5, 5, 3],
    )
    assert.deepEqual(pages.flat(), pets)
    const sold = await walk(app, secret, '/v1/pets?limit=3&status=sold')
    assert.deepEqual(
      sold.flat(),
      pets.filter((p) => p.status === 'sold'),
    )
    assert.ok(sold.length > 1)
  })

  it('gives no Link on an exactly full last page', async (t) => {
    const app = await build(t)
    const { secret } = await app.newKey()
    await seed(app, secret, [
      { name: 'a', categoryId: 1 },
      { name: 'b', categoryId: 1 },
    ])
    const response = await app.app.inject({ url: '/v1/pets?limit=2', headers: bearer(secret) })
    assert.equal(response.json().length, 2)
    assert.equal(response.headers.link, undefined)
  })

  it('builds the next link as an absolute RFC 8288 link carrying limit, status and cursor', async () => {
    // At least two sold pets, whoever made the others.
    const app = await shared()
    const { secret } = await app.newKey()
    await seed(app, secret, [
      { name: 'a', categoryId: 1, status: 'sold' },
      { name: 'b', categoryId: 1, status: 'sold' },
    ])
    const response = await app.app.inject({
      url: '/v1/pets?limit=1&status=sold',
      headers: { ...bearer(secret), host: 'api.example.test' },
    })
    const link = String(response.headers.link)
    const match = /^<(http:\/\/api\.example\.test\/v1\/pets\?[^>]+)>; rel="next"$/.exec(link)
    assert.ok(match, link)
    const next = new URL(match[1] as string)
    assert.equal(next.searchParams.get('limit'), '1')
    assert.equal(next.searchParams.get('status'), 'sold')
    assert.match(next.searchParams.get('cursor') as string, /^[\w-]+\.[\w-]+$/)
  })

  it('refuses forged, edited or mismatched cursors with 400 invalid_cursor', async (t) => {
    const app = await build(t)
    const { secret } = await app.newKey()
    await seed(app, secret, [
      { name: 'a', categoryId: 1, status: 'sold' },
      { name: 'b', categoryId: 1, status: 'sold' },
    ])
    const first = await app.app.inject({ url: '/v1/pets?limit=1&status=sold', headers: bearer(secret) })
    const cursor = new URL(/<([^>]+)>/.exec(String(first.headers.link))?.[1] as string).searchParams.get(
      'cursor',
    ) as string
    const [payload, mac] = cursor.split('.') as [string, string]
    const forged = `${Buffer.from('0.sold').toString('base64url')}.${mac}`
    const edited = `${payload}.${mac.startsWith('A') ? 'B' : 'A'}${mac.slice(1)}`
    const padded = `${payload}.${mac.slice(0, -1)}${String.fromCharCode(mac.charCodeAt(21) ^ 1)}`
    for (const url of [
      `/v1/pets?cursor=${forged}&status=sold`,
      `/v1/pets?cursor=${edited}&status=sold`,
      `/v1/pets?cursor=${padded}&status=sold`, // same bytes, another spelling: still refused
      `/v1/pets?cursor=${cursor}`, // issued for status=sold, used without
      `/v1/pets?cursor=${cursor}&status=available`,
      '/v1/pets?cursor=not-a-cursor',
      `/v1/pets?cursor=${'x'.repeat(150)}`,
      `/v1/pets?cursor=${cursor}.tampered&status=sold`, // anything after a valid cursor is an edit
      `/v1/pets?cursor=${cursor}....&status=sold`,
      // The text `undefined` is not "no cursor", even once the first page is cached (it was, above).
      '/v1/pets?limit=1&status=sold&cursor=undefined',
    ]) {
      const response = await app.app.inject({ url, headers: bearer(secret) })
      assert.equal(response.statusCode, 400, url)
      assert.equal(errorBody(response).code, 'invalid_cursor', url)
    }
    const ok = await app.app.inject({ url: `/v1/pets?cursor=${cursor}&status=sold&limit=5`, headers: bearer(secret) })
    assert.equal(ok.statusCode, 200)
    assert.equal(ok.json().length, 1)
  })

  it('refuses repeated or oversized cursor parameters with 400', async () => {
    const app = await empty()
    const { secret } = await app.newKey()
    for (const query of ['cursor=a&cursor=b', `cursor=${'x'.repeat(201)}`, 'cursor=']) {
      const response = await app.app.inject({ url: `/v1/pets?${query}`, headers: bearer(secret) })
      assert.equal(response.statusCode, 400, query)
      assert.equal(errorBody(response).code, 'validation_failed')
    }
  })
})

describe('listPets and getPet stay fresh while responses are cached', () => {
  it('a repeated page reflects pets added through this process and through another one', async (t) => {
    const app = await build(t)
    const { secret } = await app.newKey()
    const list = async () => (await app.app.inject({ url: '/v1/pets?limit=5', headers: bearer(secret) })).json()
    await seed(app, secret, [{ name: 'a', categoryId: 1 }])
    assert.equal((await list()).length, 1)
    assert.equal((await list()).length, 1)
    await seed(app, secret, [{ name: 'b', categoryId: 1 }])
    assert.equal((await list()).length, 2)
    // Another process (here: another connection to the same database) adds a pet.
    const other = await openStore({ databaseUrl: app.config.databaseUrl, poolSize: 1, timeoutMs: 2000 })
    t.after(() => other.close())
    await other.createPet({ name: 'elsewhere', categoryId: 1 })
    // SQLite sees another process's commit at once; PostgreSQL within the freshness bound.
    const all = async () => (await list()).map((p: { name: string }) => p.name).join() === 'a,b,elsewhere'
    if (DATABASE === 'sqlite') assert.ok(await all())
    else await until('the pet added elsewhere listed', all, { timeoutMs: FRESH_MS + 500, everyMs: 50 })
    const first = await app.app.inject({ url: '/v1/pets?limit=1', headers: bearer(secret) })
    const next = String(first.headers.link).match(/<[^>]+(\/v1\/pets\?[^>]+)>/)?.[1] as string
    await other.createPet({ name: 'later', categoryId: 1 })
    const pages = [await app.app.inject({ url: next, headers: bearer(secret) })]
    assert.equal(pages[0]?.json()[0].name, 'b')
  })

  it('every cached page is read again once a pet changed behind the service, not only the last', async (t) => {
    const app = await build(t)
    const { secret } = await app.newKey()
    const names = async (url: string) =>
      (await app.app.inject({ url, headers: bearer(secret) })).json().map((p: { name: string }) => p.name)
    await seed(
      app,
      secret,
      ['a', 'b', 'c'].map((name) => ({ name, categoryId: 1 })),
    )
    assert.deepEqual(await names('/v1/pets?limit=2'), ['a', 'b'])
    assert.deepEqual(await names('/v1/pets?limit=5'), ['a', 'b', 'c'])
    // Pets change now: a page with a next page is as stale as any other once a pet changed
    // (the change feed: SQLite at once, PostgreSQL within the freshness bound; decision 98).
    const rename = "UPDATE pets SET name = 'renamed' WHERE name = 'a'"
    if (DATABASE === 'sqlite') {
      const db = new DatabaseSync(sqlitePath(app.config.databaseUrl))
      db.exec(rename)
      db.close()
    } else await postgres(rename, app.config.databaseUrl)
    // A request arrives in a later turn of the event loop than the commit, as over a socket
    // (the feed is looked at once per turn; decision 98).
    await new Promise((resolve) => setImmediate(resolve))
    const renamed = async () =>
      (await names('/v1/pets?limit=2')).join() === 'renamed,b' &&
      (await names('/v1/pets?limit=5')).join() === 'renamed,b,c'
    if (DATABASE === 'sqlite') assert.ok(await renamed())
    else await until('the renamed pet listed', renamed, { timeoutMs: FRESH_MS + 500, everyMs: 50 })
  })

  it('a pet that did not exist yet is found once created (misses are not cached)', async (t) => {
    const app = await build(t)
    const { secret } = await app.newKey()
    assert.equal((await app.app.inject({ url: '/v1/pets/1', headers: bearer(secret) })).statusCode, 404)
    await seed(app, secret, [{ name: 'a', categoryId: 1 }])
    assert.equal((await app.app.inject({ url: '/v1/pets/1', headers: bearer(secret) })).statusCode, 200)
    assert.equal((await app.app.inject({ url: '/v1/pets/1', headers: bearer(secret) })).json().name, 'a')
  })
})

describe('getPet: GET /v1/pets/{petId} (points 1 and 6)', () => {
  // Two pets at most are made in `shared` (ids 1 and 2): an id such as 999 stays unknown there.
  const shared = suiteApp()
  const empty = suiteApp()

  it('returns the Pet', async () => {
    const app = await shared()
    const { secret } = await app.newKey()
    const [pet] = await seed(app, secret, [{ name: 'Rex', categoryId: 3, status: 'sold' }])
    const response = await app.app.inject({ url: `/v1/pets/${pet.id}`, headers: bearer(secret) })
    assert.equal(response.statusCode, 200)
    assert.deepEqual(response.json(), pet)
  })

  const assertDeprecated = (response: LightMyRequestResponse, what: string) => {
    assert.match(String(response.headers.deprecation), /^@\d+$/, what)
    assert.ok(Number(String(response.headers.deprecation).slice(1)) * 1000 <= Date.UTC(2030, 11, 5))
    assert.equal(response.headers.sunset, 'Thu, 05 Dec 2030 00:00:00 GMT', what)
    assert.equal(
      response.headers.link,
      '<http://h.test/v1/pets>; rel="successor-version", <http://h.test/docs#/pets/getPet>; rel="deprecation"; type="text/html"',
      what,
    )
  }

  it('is deprecated: Deprecation (RFC 9745), Sunset 5 Dec 2030 (RFC 8594) and a successor Link, on every answer', async () => {
    const app = await shared()
    const { secret } = await app.newKey()
    const [pet] = await seed(app, secret, [{ name: 'Rex', categoryId: 3 }])
    const answers: [string, Record<string, string>, number][] = [
      [`/v1/pets/${pet.id}`, bearer(secret), 200],
      // Again: from the cache of serialized pets this time.
      [`/v1/pets/${pet.id}`, bearer(secret), 200],
      ['/v1/pets/999', bearer(secret), 404],
      ['/v1/pets/abc', bearer(secret), 400],
      [`/v1/pets/${pet.id}`, {}, 401],
    ]
    for (const [url, headers, status] of answers) {
      const response = await app.app.inject({ url, headers: { ...headers, host: 'h.test' } })
      assert.equal(response.statusCode, status, url)
      assertDeprecated(response, `${status} ${url}`)
    }
  })

  it('builds no Link from a Host (or X-Forwarded-Proto) that its answer refuses', async (t) => {
    const app = await build(t, { TRUST_PROXY: 'true' })
    const { secret } = await app.newKey()
    for (const headers of [
      { host: 'evil.example/x>; rel="preload", <http://evil.example' },
      { host: 'h.test', 'x-forwarded-proto': 'x>; rel="preload", <http' },
    ]) {
      const response = await app.app.inject({ url: '/v1/pets/1', headers: { ...bearer(secret), ...headers } })
      assert.equal(response.statusCode, 400)
      assert.equal(response.headers.link, undefined, JSON.stringify(headers))
      assert.equal(response.headers.sunset, 'Thu, 05 Dec 2030 00:00:00 GMT')
    }
  })

  it('is removed on its Sunset date: from 2030-12-05T00:00:00Z on, 410 operation_removed, still with the headers', async (t) => {
    // Fakes Date, which the app's caches read: an app of its own.
    const app = await build(t)
    const { secret } = await app.newKey()
    const [pet] = await seed(app, secret, [{ name: 'Rex', categoryId: 3 }])
    const get = () => app.app.inject({ url: `/v1/pets/${pet.id}`, headers: { ...bearer(secret), host: 'h.test' } })
    // Only Date is faked: timers (and so the app's own machinery) run as usual.
    t.mock.timers.enable({ apis: ['Date'], now: Date.UTC(2030, 11, 5) - 1 })
    assert.equal((await get()).statusCode, 200)
    t.mock.timers.setTime(Date.UTC(2030, 11, 5))
    const removed = await get()
    assert.equal(removed.statusCode, 410)
    assert.equal(errorBody(removed).code, 'operation_removed')
    assertDeprecated(removed, 'after the sunset')
    // Whatever the id: the operation is gone, so what it would have refused does not matter.
    for (const id of ['abc', '99999999999999999999999', '-1']) {
      const response = await app.app.inject({ url: `/v1/pets/${id}`, headers: bearer(secret) })
      assert.equal(response.statusCode, 410, id)
    }
    // The key is still checked first.
    assert.equal((await app.app.inject({ url: `/v1/pets/${pet.id}` })).statusCode, 401)
    // Its successor goes on.
    assert.equal((await app.app.inject({ url: '/v1/pets?limit=1', headers: bearer(secret) })).statusCode, 200)
  })

  it('returns 404 pet_not_found for an id no pet has, and 400 for one no pet can have or that is not written plainly', async () => {
    const app = await empty()
    const { secret } = await app.newKey()
    for (const id of ['1', '12345', '9007199254740991']) {
      const response = await app.app.inject({ url: `/v1/pets/${id}`, headers: bearer(secret) })
      assert.equal(response.statusCode, 404, id)
      assert.equal(errorBody(response).code, 'pet_not_found')
      assert.equal(errorBody(response).message, `No pet with id ${id}.`)
    }
    // Ids run from 1 to 2^53-1, as the document says; `01` would be an alias of 1 (decision 99).
    for (const id of ['0', '-5', '9007199254740992', '9223372036854775807', '-9223372036854775808', '007', '01']) {
      const response = await app.app.inject({ url: `/v1/pets/${id}`, headers: bearer(secret) })
      assert.equal(response.statusCode, 400, id)
      assert.equal(errorBody(response).code, 'validation_failed', id)
      assert.match(errorBody(response).message, /^path\.petId /, id)
    }
    // Past the highest id, however far, the message names that bound (not an int64's).
    for (const id of ['9007199254740992', '9223372036854775807', '99999999999999999999']) {
      const response = await app.app.inject({ url: `/v1/pets/${id}`, headers: bearer(secret) })
      assert.equal(errorBody(response).message, 'path.petId must be at most 9007199254740991', id)
    }
    for (const id of ['-9223372036854775808', '-99999999999999999999']) {
      const response = await app.app.inject({ url: `/v1/pets/${id}`, headers: bearer(secret) })
      assert.equal(errorBody(response).message, 'path.petId must be at least 1', id)
    }
  })

  it('refuses query parameters it does not define, as every operation does (400 validation_failed)', async () => {
    const test = await empty()
    const { secret } = await test.newKey()
    const json = { ...bearer(secret), 'content-type': 'application/json' }
    for (const [method, url, payload] of [
      ['GET', '/v1/pets/1?x=1', undefined],
      ['POST', '/v1/pets?x=1', '{"name":"Rex","categoryId":1}'],
      ['POST', '/v1/messages?dryRun=true', '{"message":"hi"}'],
    ] as const) {
      const response = await test.app.inject({ method, url, headers: json, payload })
      assert.equal(response.statusCode, 400, url)
      assert.match(errorBody(response).message, /^query\.\w+ is not a known field/)
    }
    assert.deepEqual((await test.app.inject({ url: '/v1/pets', headers: bearer(secret) })).json(), [])
  })

  it('refuses a petId that is not a decimal int64 with 400 validation_failed (never 5xx)', async () => {
    const app = await empty()
    const { secret } = await app.newKey()
    for (const id of [
      'abc',
      '1.5',
      '1e3',
      '0x10',
      '+1',
      '%201',
      '9223372036854775808',
      '-9223372036854775809',
      '9'.repeat(40),
    ]) {
      const response = await app.app.inject({ url: `/v1/pets/${id}`, headers: bearer(secret) })
      assert.equal(response.statusCode, 400, id)
      const body = errorBody(response)
      assert.equal(body.code, 'validation_failed')
      assert.match(body.message, /path\.petId must be/)
    }
    // Past the router's 500-character limit for a parameter: still a validation error, not "malformed".
    for (const id of ['1'.repeat(501), `${'0'.repeat(500)}1`]) {
      const response = await app.app.inject({ url: `/v1/pets/${id}`, headers: bearer(secret) })
      assert.equal(response.statusCode, 400)
      assert.deepEqual(errorBody(response), {
        code: 'validation_failed',
        message: 'A path parameter must be at most 500 characters long.',
        status: 400,
      })
    }
  })
})

describe('updatePet: PATCH /v1/pets/{petId} (JSON Merge Patch) and the pet ETag', () => {
  // Each test patches a pet of its own, in one app; but for the two that count every pet or change
  // one behind the app's back (they have apps of their own). No test here makes pet 999.
  const shared = suiteApp()

  /** A pet made through the API in `app`, and a PATCH helper with a content type and extra headers. */
  async function setup(app: TestApp) {
    const { secret, accountId } = await app.newKey()
    const [pet] = await seed(app, secret, [{ name: 'Rex', categoryId: 1 }])
    const patch = (body: unknown, headers: Record<string, string> = {}, id: number | string = pet.id) =>
      app.app.inject({
        method: 'PATCH',
        url: `/v1/pets/${id}`,
        headers: { ...bearer(secret), 'content-type': 'application/merge-patch+json', ...headers },
        payload: typeof body === 'string' ? body : JSON.stringify(body),
      })
    const get = (headers: Record<string, string> = {}) =>
      app.app.inject({ url: `/v1/pets/${pet.id}`, headers: { ...bearer(secret), ...headers } })
    return { app, secret, accountId, pet: pet as { id: number }, patch, get }
  }

  it('merges: the fields sent change, the others stay; as merge-patch+json and as application/json', async () => {
    const { pet, patch, get } = await setup(await shared())
    // Read first, so that the answers below also prove the cached read was forgotten.
    assert.equal((await get()).json().name, 'Rex')
    const renamed = await patch({ name: 'Max' })
    assert.equal(renamed.statusCode, 200, renamed.body)
    assert.deepEqual(renamed.json(), { id: pet.id, name: 'Max', categoryId: 1, status: 'available' })
    assert.deepEqual((await get()).json(), renamed.json())
    const moved = await patch({ categoryId: 9, status: 'sold' }, { 'content-type': 'application/json; charset=utf-8' })
    assert.equal(moved.statusCode, 200, moved.body)
    assert.deepEqual(moved.json(), { id: pet.id, name: 'Max', categoryId: 9, status: 'sold' })
    const caseless = await patch({ status: 'available' }, { 'content-type': 'Application/Merge-Patch+JSON' })
    assert.equal(caseless.json().status, 'available')
    // An empty patch changes nothing, and says what the pet is.
    const empty = await patch({})
    assert.equal(empty.statusCode, 200)
    assert.deepEqual(empty.json(), { id: pet.id, name: 'Max', categoryId: 9, status: 'available' })
    assert.deepEqual((await get()).json(), empty.json())
  })

  it('refuses null, unknown fields, bodies that are not objects and invalid values: 400, the pet unchanged', async () => {
    const { pet, patch, get } = await setup(await shared())
    const before = await get()
    for (const [body, message] of [
      [{ name: null }, /^body\.name must be a string, not null$/],
      [{ categoryId: null }, /^body\.categoryId must be an integer, not null$/],
      [{ status: null }, /^body\.status must be a string, not null$/],
      [{ color: 'brown' }, /^body\.color is not a known field$/],
      [{ id: pet.id }, /^body\.id is not a known field$/],
      [{ name: 'Max', extra: 1 }, /^body\.extra is not a known field$/],
      [[{ name: 'Max' }], /^body must be an object$/],
      ['"Max"', /^body must be an object$/],
      ['42', /^body must be an object$/],
      ['null', /^body must be an object, not null$/],
      [{ name: '' }, /^body\.name must be at least 1 character long$/],
      [{ name: '\u200b' }, /^body\.name is invalid/],
      [{ categoryId: 0 }, /^body\.categoryId must be at least 1$/],
      [{ categoryId: '7' }, /^body\.categoryId must be an integer$/],
      [{ status: 'lost' }, /^body\.status must be one of: available, pending, sold$/],
    ] as const) {
      const response = await patch(body)
      assert.equal(response.statusCode, 400, JSON.stringify(body))
      const error = errorBody(response)
      assert.equal(error.code, 'validation_failed')
      assert.match(error.message, message, JSON.stringify(body))
    }
    assert.equal((await patch('{"name":')).statusCode, 400)
    assert.equal(errorBody(await patch('{"name":')).code, 'invalid_json')
    // Media types: neither text nor a merge patch sent to anything but PATCH.
    const text = await patch({ name: 'Max' }, { 'content-type': 'text/plain' })
    assert.equal(text.statusCode, 415)
    assert.equal(errorBody(text).code, 'unsupported_media_type')
    const latin1 = await patch({ name: 'Max' }, { 'content-type': 'application/merge-patch+json; charset=latin1' })
    assert.equal(latin1.statusCode, 415)
    const after = await get()
    assert.equal(after.body, before.body)
    assert.equal(after.headers.etag, before.headers.etag)
  })

  it('application/merge-patch+json is taken by PATCH only: a POST sending it is 415, nothing stored', async (t) => {
    const { app, secret } = await setup(await build(t))
    const response = await app.app.inject({
      method: 'POST',
      url: '/v1/pets',
      headers: { ...bearer(secret), 'content-type': 'application/merge-patch+json' },
      payload: '{"name":"Max","categoryId":1}',
    })
    assert.equal(response.statusCode, 415)
    assert.equal(errorBody(response).code, 'unsupported_media_type')
    assert.equal((await app.app.inject({ url: '/v1/pets', headers: bearer(secret) })).json().length, 1)
  })

  it('404 pet_not_found for an id that does not exist, conditions or not', async () => {
    const { patch } = await setup(await shared())
    for (const id of ['999', '9007199254740991']) {
      for (const headers of [{}, { 'if-match': '*' }, { 'if-match': '"999-1"' }] as Record<string, string>[]) {
        const response = await patch({ name: 'Max' }, headers, id)
        assert.equal(response.statusCode, 404, `${id} ${JSON.stringify(headers)}`)
        assert.equal(errorBody(response).code, 'pet_not_found')
      }
    }
    for (const id of ['abc', '0', '01', '9007199254740992'])
      assert.equal((await patch({ name: 'Max' }, {}, id)).statusCode, 400, id)
  })

  it('409: a held pet keeps its status (pet_held), and no PATCH makes a pet pending (pending_by_order_only)', async () => {
    const { app, accountId, pet, patch, get } = await setup(await shared())
    const pending = await patch({ status: 'pending' })
    assert.equal(pending.statusCode, 409)
    assert.equal(errorBody(pending).code, 'pending_by_order_only')
    assert.equal((await get()).json().status, 'available')
    // An order holds the pet (through the store: the order routes are another change).
    const placed = await app.app.store.placeOrder({ accountId, petId: pet.id, holdMs: 3_600_000 })
    assert.ok('placed' in placed)
    for (const status of ['available', 'sold']) {
      const held = await patch({ status, name: 'Max' })
      assert.equal(held.statusCode, 409, status)
      assert.deepEqual(errorBody(held), {
        code: 'pet_held',
        message: 'A placed order holds this pet: its status changes only by completing or canceling the order.',
        status: 409,
      })
    }
    // Nothing of a refused patch is applied; its other fields may change on their own.
    assert.equal((await get()).json().name, 'Rex')
    const renamed = await patch({ name: 'Max', status: 'pending' })
    assert.equal(renamed.statusCode, 200, renamed.body)
    assert.deepEqual(renamed.json(), { id: pet.id, name: 'Max', categoryId: 1, status: 'pending' })
  })

  it('GET and PATCH give a strong ETag that moves with every change, and only with a change', async () => {
    const { pet, patch, get } = await setup(await shared())
    const first = await get()
    assert.equal(first.headers.etag, `"${pet.id}-1"`)
    // Served from the cache: the same tag.
    assert.equal((await get()).headers.etag, first.headers.etag)
    const changed = await patch({ name: 'Max' })
    assert.equal(changed.headers.etag, `"${pet.id}-2"`)
    assert.equal((await get()).headers.etag, changed.headers.etag)
    // A patch that changes nothing keeps the version: repeating a PATCH is harmless.
    const same = await patch({ name: 'Max' })
    assert.equal(same.statusCode, 200)
    assert.equal(same.headers.etag, changed.headers.etag)
    // getPet stays deprecated; updatePet is not.
    assert.equal((await get()).headers.deprecation, '@1767225600')
    assert.equal(same.headers.deprecation, undefined)
    assert.equal(same.headers.sunset, undefined)
  })

  it('If-Match: the current tag or * changes the pet; a stale, weak or unknown tag is 412 and changes nothing', async () => {
    const { pet, patch, get } = await setup(await shared())
    const v1 = String((await get()).headers.etag)
    const ok = await patch({ name: 'Max' }, { 'if-match': v1 })
    assert.equal(ok.statusCode, 200, ok.body)
    const v2 = String(ok.headers.etag)
    assert.notEqual(v2, v1)
    for (const ifMatch of [v1, `W/${v2}`, '"other"', `"${pet.id + 1}-2"`, 'garbage']) {
      const stale = await patch({ name: 'Lost update' }, { 'if-match': ifMatch })
      assert.equal(stale.statusCode, 412, ifMatch)
      assert.equal(errorBody(stale).code, 'precondition_failed')
    }
    assert.equal((await get()).json().name, 'Max')
    // Any tag in a list, or *, holds for the current version.
    const listed = await patch({ categoryId: 2 }, { 'if-match': `${v1}, ${v2}` })
    assert.equal(listed.statusCode, 200, listed.body)
    const any = await patch({ categoryId: 3 }, { 'if-match': '*' })
    assert.equal(any.statusCode, 200)
    assert.equal(any.json().categoryId, 3)
    // If-None-Match on a PATCH: * (the pet exists) and the current tag fail, another tag holds.
    assert.equal((await patch({ name: 'X' }, { 'if-none-match': '*' })).statusCode, 412)
    assert.equal((await patch({ name: 'X' }, { 'if-none-match': String(any.headers.etag) })).statusCode, 412)
    assert.equal((await patch({ name: 'Y' }, { 'if-none-match': v1 })).statusCode, 200)
  })

  it('GET with If-None-Match: the current tag is 304 with the ETag, an old one the new pet', async () => {
    const { patch, get } = await setup(await shared())
    const v1 = String((await get()).headers.etag)
    const notModified = await get({ 'if-none-match': v1 })
    assert.equal(notModified.statusCode, 304)
    assert.equal(notModified.body, '')
    assert.equal(notModified.headers.etag, v1)
    assert.equal(notModified.headers.deprecation, '@1767225600')
    assert.equal((await get({ 'if-none-match': `W/${v1}` })).statusCode, 304)
    await patch({ status: 'sold' })
    const changed = await get({ 'if-none-match': v1 })
    assert.equal(changed.statusCode, 200)
    assert.equal(changed.json().status, 'sold')
    assert.notEqual(changed.headers.etag, v1)
    assert.equal((await get({ 'if-match': v1 })).statusCode, 412)
    assert.equal((await get({ 'if-match': String(changed.headers.etag) })).statusCode, 200)
  })

  it('a change made by another process is seen: at once on SQLite, within the freshness bound on PostgreSQL', async (t) => {
    const { app, pet, get } = await setup(await build(t))
    assert.equal((await get()).json().status, 'available')
    // Another process: here, another store on the same database (its own connection and writer).
    const other = await openStore({ databaseUrl: app.config.databaseUrl, poolSize: 1, timeoutMs: 2000 })
    t.after(() => other.close())
    const changed = await other.updatePet(pet.id, { status: 'sold' })
    assert.ok('updated' in changed)
    const start = Date.now()
    let seen = await get()
    // SQLite: the feed is read when data_version moved, so the next read is fresh; PostgreSQL:
    // the next poll of the feed forgets it (POLL_MS), within FRESH_MS. Read every 5 ms, deadline twice that.
    if (DATABASE === 'postgres') {
      const sold = async () => {
        seen = await get()
        return seen.json().status === 'sold'
      }
      await until('the change seen', sold, { timeoutMs: 2 * FRESH_MS, everyMs: 5 }).catch(() => {})
    }
    assert.equal(seen.json().status, 'sold')
    assert.equal(seen.headers.etag, `"${pet.id}-${changed.updated.version}"`)
    t.diagnostic(`${DATABASE}: another process's change seen after ${Date.now() - start} ms (bound ${FRESH_MS} ms)`)
  })
})
