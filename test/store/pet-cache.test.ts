/**
 * The pet cache keeps itself (decision 98): it forgets the pets written and the pages that could
 * hold them, whoever wrote them, and nothing else. Hits and misses are the cache's own counts.
 */
import assert from 'node:assert/strict'
import { DatabaseSync } from 'node:sqlite'
import { describe, it, type TestContext } from 'node:test'
import { cursorCodec } from '../../src/domain/pagination.ts'
import type { PetStatus } from '../../src/schemas/pets.ts'
import { openStore, type Store } from '../../src/store/index.ts'
import { FRESH_MS } from '../../src/store/pet-cache.ts'
import { sqlitePath } from '../../src/store/sqlite.ts'
import { bearer, build, DATABASE, POSTGRES_URL, plain, postgres, type TestApp } from '../helper.ts'
import { until } from '../wait.ts'

const STATUSES: PetStatus[] = ['available', 'pending', 'sold']

async function withPets(t: TestContext, count: number) {
  const test = await build(t, { EXPERIMENTAL_FEATURES: 'webhooks' })
  const { secret } = await test.newKey()
  for (let i = 0; i < count; i++) {
    await test.app.store.createPet({ name: `p${i}`, categoryId: 1, status: STATUSES[i % 3] as PetStatus })
  }
  // Another process on the same database: here, another store (its own connection and writer).
  const other = await openStore({ databaseUrl: test.config.databaseUrl, poolSize: 2, timeoutMs: 5000 })
  t.after(() => other.close())
  await test.app.petCache.sync()
  return { test, secret, other }
}

const get = (test: TestApp, secret: string, url: string) => test.app.inject({ url, headers: bearer(secret) })
const stats = (test: TestApp) => test.app.petCache.stats()

/** After what `other` committed has been read from the feed: at once on SQLite, by the next poll on PostgreSQL. */
async function fed(test: TestApp) {
  // A request arrives in a later turn of the event loop than the commit, as over a socket.
  await new Promise((resolve) => setImmediate(resolve))
  await test.app.petCache.sync()
}

describe(`Pet cache: it forgets what changed, and only that (${DATABASE})`, () => {
  it('writes that change no pet (a message, a key used, a refused order) leave cached pets and pages in place', async (t) => {
    const { test, secret } = await withPets(t, 30)
    const reads = ['/v1/pets?limit=20', '/v1/pets?limit=5&status=sold', '/v1/pets/1', '/v1/pets/2']
    for (const url of reads) assert.equal((await get(test, secret, url)).statusCode, 200)
    const before = stats(test)
    for (const url of reads) await get(test, secret, url)
    assert.equal(stats(test).misses, before.misses, 'a second read is a hit')

    const message = await test.app.inject({
      method: 'POST',
      url: '/v1/messages',
      headers: bearer(secret),
      payload: { message: 'hello' },
    })
    assert.equal(message.statusCode, 202)
    const another = await test.newKey() // and its first use records its last use
    assert.equal((await get(test, another.secret, '/v1/pets?limit=20')).statusCode, 200)
    // Pet 2 is pending (not available): the order is refused, and nothing changes.
    const refused = await test.app.inject({
      method: 'POST',
      url: '/v1/store/orders',
      headers: { ...bearer(secret), 'animal-store-beta': 'orders' },
      payload: { petId: 2 },
    })
    assert.equal(refused.statusCode, 409, refused.body)
    await fed(test)
    const after = stats(test)
    for (const url of reads) await get(test, secret, url)
    assert.equal(stats(test).misses, after.misses, 'a write that changed no pet forgot a cached read')
  })

  it('a pet written by another process is seen at the next read, and only what could hold it is read again', async (t) => {
    const { test, secret, other } = await withPets(t, 30)
    // Pet n was made with STATUSES[(n - 1) % 3]: pet 7 is available.
    const first = '/v1/pets?limit=5' // ids 1-5: cannot hold pet 7
    const second = '/v1/pets?limit=5&cursor=' // filled below: ids 6-10
    const sold = '/v1/pets?limit=20&status=sold' // pet 7 is available, and stays out of it
    const firstPage = await get(test, secret, first)
    const next = /cursor=([^&>]+)/.exec(String(firstPage.headers.link))?.[1] as string
    for (const url of [first, second + next, sold, '/v1/pets/7', '/v1/pets/8']) await get(test, secret, url)

    const changed = await other.updatePet(7, { name: 'renamed' })
    assert.ok('updated' in changed)
    await fed(test)
    const before = stats(test)
    assert.equal((await get(test, secret, '/v1/pets/7')).json().name, 'renamed')
    assert.equal((await get(test, secret, second + next)).json()[1].name, 'renamed')
    assert.equal(stats(test).misses, before.misses + 2, 'the changed pet and the page that holds it are read again')
    for (const url of [first, sold, '/v1/pets/8']) await get(test, secret, url)
    assert.equal(stats(test).misses, before.misses + 2, 'a page that cannot hold pet 7, or pet 8, was forgotten')

    // A new pet has the largest id: it can only be on a last page of its status.
    const created = await other.createPet({ name: 'new', categoryId: 1, status: 'sold' })
    await fed(test)
    const now = stats(test)
    for (const url of [first, second + next]) await get(test, secret, url)
    assert.equal(stats(test).misses, now.misses, 'a full page was forgotten for a pet created after it')
    const soldNames = (await get(test, secret, sold)).json().map((pet: { id: number }) => pet.id)
    assert.ok(soldNames.includes(created.id), 'the last page of its status lists the new pet')
  })

  it('after any mix of writes by another process, every cached page and pet is what the database holds', async (t) => {
    const { test, secret, other } = await withPets(t, 40)
    const urls = [
      ...[3, 7, 20, 100].map((limit) => `/v1/pets?limit=${limit}`),
      ...STATUSES.flatMap((status) => [2, 10].map((limit) => `/v1/pets?limit=${limit}&status=${status}`)),
      ...[1, 5, 9, 13, 40].map((id) => `/v1/pets/${id}`),
    ]
    // Second pages too: their range starts after an id.
    for (const url of ['/v1/pets?limit=3', '/v1/pets?limit=7&status=available']) {
      const link = String((await get(test, secret, url)).headers.link)
      urls.push(`/v1/pets?${/\?([^>]+)>/.exec(link)?.[1]}`)
    }
    // mulberry32: the same writes every run.
    let seed = 7
    const random = (n: number) => {
      seed = (seed + 0x6d2b79f5) | 0
      let x = Math.imul(seed ^ (seed >>> 15), 1 | seed)
      x = (x + Math.imul(x ^ (x >>> 7), 61 | x)) ^ x
      return Math.floor((((x ^ (x >>> 14)) >>> 0) / 4_294_967_296) * n)
    }
    // One write at a time, each checked: several at once would hide a page wrongly kept behind another.
    for (let round = 0; round < 40; round++) {
      for (const url of urls) await get(test, secret, url)
      if (random(5) === 0) await other.createPet({ name: `n${round}`, categoryId: 2, status: 'available' })
      else {
        const to = STATUSES[random(3)] as PetStatus
        // Half of them on the last pet of a full page, where a range is easiest to get wrong.
        const id = random(2) === 0 ? ([3, 7, 20, 4, 9, 10] as const)[random(6)] : 1 + random(40)
        await other.updatePet(id, { status: to === 'pending' ? 'sold' : to, name: `r${round}` })
      }
      await fed(test)
      for (const url of urls) {
        const served = await get(test, secret, url)
        assert.deepEqual(served.json(), await expected(other, url), `round ${round}: ${url} served stale`)
      }
    }
  })

  it('a full page whose last matching pet beyond it leaves the filter loses its next link', async (t) => {
    const { test, secret, other } = await withPets(t, 9) // sold: 3, 6, 9
    const page = await get(test, secret, '/v1/pets?limit=2&status=sold')
    assert.match(String(page.headers.link), /rel="next"/)
    assert.ok('updated' in (await other.updatePet(9, { status: 'available' })))
    await fed(test)
    const now = await get(test, secret, '/v1/pets?limit=2&status=sold')
    assert.deepEqual(
      now.json().map((pet: { id: number }) => pet.id),
      [3, 6],
    )
    assert.equal(now.headers.link, undefined, 'a link to an empty page')
  })

  it('rows pruned past a reader make it forget everything, not miss a change', async (t) => {
    const { test, secret } = await withPets(t, 3)
    assert.equal((await get(test, secret, '/v1/pets/1')).json().name, 'p0')
    // Changed, and the change's row pruned before this instance read it (a reader long asleep).
    if (DATABASE === 'postgres') {
      await sql(test, "UPDATE pets SET name = 'renamed' WHERE id = 1")
      await sql(test, "UPDATE pet_changes SET changed_at = now() - interval '1 day'")
      await test.app.store.purgeExpired(new Date().toISOString(), new Date(0).toISOString())
    } else {
      // The sweep keeps the newest rows: as if it kept one.
      await sql(
        test,
        "UPDATE pets SET name = 'renamed' WHERE id = 1; UPDATE pets SET name = 'later' WHERE id = 3;" +
          'DELETE FROM pet_changes WHERE seq < (SELECT max(seq) FROM pet_changes)',
      )
    }
    await fed(test)
    assert.equal((await get(test, secret, '/v1/pets/1')).json().name, 'renamed')
  })

  it('a pet changed from a session of another search_path, or in psql, still reaches the feed', async (t) => {
    if (DATABASE !== 'postgres') return t.skip('PostgreSQL only: SQLite has no schemas')
    const { test, secret } = await withPets(t, 3)
    assert.equal((await get(test, secret, '/v1/pets/1')).json().name, 'p0')
    const schema = new URL(test.config.databaseUrl).searchParams.get('options')?.replace('-c search_path=', '')
    await postgres(`UPDATE ${schema}.pets SET name = 'qualified' WHERE id = 1`, POSTGRES_URL)
    await fed(test)
    assert.equal((await get(test, secret, '/v1/pets/1')).json().name, 'qualified')
  })

  it('a transaction left open elsewhere on the server neither hides a change nor empties the cache', async (t) => {
    if (DATABASE !== 'postgres') return t.skip('PostgreSQL only: SQLite commits one at a time')
    const { test, secret, other } = await withPets(t, 3)
    // An idle transaction holding a transaction id, in another database of the server.
    const pg = (await import('pg')).default
    const idle = new pg.Client({ connectionString: POSTGRES_URL.replace(/\/[^/?]*(\?|$)/, '/postgres$1') })
    await idle.connect()
    t.after(() => idle.end())
    await idle.query('BEGIN')
    await idle.query('SELECT pg_current_xact_id()')
    assert.ok('updated' in (await other.updatePet(1, { name: 'changed' })))
    await fed(test)
    assert.equal((await get(test, secret, '/v1/pets/1')).json().name, 'changed')
    await get(test, secret, '/v1/pets/2')
    const before = stats(test)
    for (let i = 0; i < 3; i++) await fed(test) // polls that see the same open transaction
    await get(test, secret, '/v1/pets/1')
    await get(test, secret, '/v1/pets/2')
    assert.equal(stats(test).misses, before.misses, 'the same change forgotten again at every poll')
    await idle.query('ROLLBACK')
  })

  it('a move refused because the hold had ended frees the pet at once, on this instance too', async (t) => {
    const test = await build(t)
    const { secret, accountId } = await test.newKey()
    const pet = await test.app.store.createPet({ name: 'held', categoryId: 1, status: 'available' })
    const placed = await test.app.store.placeOrder({ accountId, petId: pet.id, holdMs: 1 })
    assert.ok('placed' in placed)
    const reads = [`/v1/pets/${pet.id}`, '/v1/pets?status=pending']
    for (const url of reads) await get(test, secret, url) // cached while the hold still shows
    await new Promise((resolve) => setTimeout(resolve, 10))
    // Before any sweep: the move expires the order first (Store.transitionOrder), then is refused.
    const canceled = await test.app.inject({
      method: 'POST',
      url: `/v1/store/orders/${placed.placed.id}/cancel`,
      headers: { ...bearer(secret), 'animal-store-beta': 'orders' },
    })
    assert.equal(canceled.statusCode, 409, canceled.body)
    assert.match(canceled.json().message, /expired/)
    assert.equal((await get(test, secret, reads[0] as string)).json().status, 'available')
    assert.deepEqual((await get(test, secret, reads[1] as string)).json(), [])
  })

  it('a write through this instance is listed by its next read, on either database', async (t) => {
    const { test, secret } = await withPets(t, 3)
    await get(test, secret, '/v1/pets?limit=20')
    const payload = { name: 'mine', categoryId: 1 }
    assert.equal(
      (await test.app.inject({ method: 'POST', url: '/v1/pets', headers: bearer(secret), payload })).statusCode,
      201,
    )
    const listed = (await get(test, secret, '/v1/pets?limit=20')).json().map((pet: { name: string }) => pet.name)
    assert.ok(listed.includes('mine'), listed.join())
  })

  it(`a pet written elsewhere is served fresh within ${FRESH_MS} ms, without anyone asking the cache to look`, async (t) => {
    const { test, secret, other } = await withPets(t, 3)
    assert.equal((await get(test, secret, '/v1/pets/1')).json().status, 'available')
    const changed = await other.updatePet(1, { status: 'sold' })
    assert.ok('updated' in changed)
    const start = Date.now()
    await until('the change served', async () => (await get(test, secret, '/v1/pets/1')).json().status === 'sold', {
      timeoutMs: FRESH_MS,
      everyMs: 5,
    })
    t.diagnostic(
      `${DATABASE}: another process's pet write served after ${Date.now() - start} ms (bound ${FRESH_MS} ms)`,
    )
  })
})

/** Runs SQL on the test's database, outside the app: as an operator's script or psql would. */
async function sql(test: TestApp, statement: string): Promise<void> {
  if (DATABASE === 'postgres') {
    await postgres(statement, test.config.databaseUrl)
    return
  }
  const db = new DatabaseSync(sqlitePath(test.config.databaseUrl))
  db.exec(statement)
  db.close()
}

/** What the database holds for a URL of the reads above. */
async function expected(store: Store, url: string): Promise<unknown> {
  const { pathname, searchParams } = new URL(url, 'http://x')
  const id = /^\/v1\/pets\/(\d+)$/.exec(pathname)?.[1]
  if (id) return plain(await store.getPet(Number(id)))
  const status = (searchParams.get('status') ?? undefined) as PetStatus | undefined
  const cursor = searchParams.get('cursor')
  const codec = cursorCodec(await store.secret('cursor', () => 'unused: the app made it'))
  const afterId = cursor === null ? 0 : codec.decode(cursor, status)
  return plain((await store.listPets({ limit: Number(searchParams.get('limit')), status, afterId })).pets)
}
