import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import Fastify from 'fastify'
import { loadConfig } from '../../src/config.ts'
import stability from '../../src/plugins/stability.ts'
import { bearer, build, errorBody, suiteApp, type TestApp } from '../helper.ts'
import { until } from '../wait.ts'

const BETA = { 'animal-store-beta': 'orders' }

/** A new account of `test`, and helpers to make pets and place orders with its key. */
async function setUp(test: TestApp) {
  const { secret, accountId } = await test.newKey()
  const headers = { ...bearer(secret), ...BETA }
  const newPet = async (status?: string) =>
    (
      await test.app.inject({
        method: 'POST',
        url: '/v1/pets',
        headers: bearer(secret),
        payload: { name: 'Rex', categoryId: 1, ...(status && { status }) },
      })
    ).json() as { id: number }
  const place = (petId: number, extra: Record<string, string> = {}) =>
    test.app.inject({ method: 'POST', url: '/v1/store/orders', headers: { ...headers, ...extra }, payload: { petId } })
  const petStatus = async (id: number) =>
    (await test.app.inject({ url: `/v1/pets/${id}`, headers: bearer(secret) })).json().status
  return { test, secret, accountId, headers, newPet, place, petStatus }
}

/** The path and query of a Link header's rel="next" target. */
function nextPath(link: string): string {
  const target = new URL(/<([^>]+)>; rel="next"/.exec(link)?.[1] as string)
  return target.pathname + target.search
}

describe('Store: orders and inventory (beta)', () => {
  // Orders belong to an account, and each test orders pets of its own: one app serves them, but for
  // the inventory (counts of every pet in the store) and a shorter hold (another configuration).
  const shared = suiteApp()

  it('is opt-in: without Animal-Store-Beta: orders, 400 naming the header; the key is checked first', async () => {
    const { test, secret, newPet } = await setUp(await shared())
    const pet = await newPet()
    const without = await test.app.inject({
      method: 'POST',
      url: '/v1/store/orders',
      headers: bearer(secret),
      payload: { petId: pet.id },
    })
    assert.equal(without.statusCode, 400)
    assert.equal(errorBody(without).code, 'beta_opt_in_required')
    assert.match(errorBody(without).message, /Animal-Store-Beta: orders/)
    for (const url of ['/v1/store/orders', '/v1/store/inventory', '/v1/store/orders/ord_x']) {
      assert.equal((await test.app.inject({ url, headers: bearer(secret) })).statusCode, 400, url)
      assert.equal((await test.app.inject({ url, headers: BETA })).statusCode, 401, url)
    }
    const listed = await test.app.inject({
      url: '/v1/store/inventory',
      headers: { ...bearer(secret), 'animal-store-beta': 'other, Orders' },
    })
    assert.equal(listed.statusCode, 200)
    assert.equal(
      (await test.app.inject({ url: `/v1/pets/${pet.id}`, headers: bearer(secret) })).json().status,
      'available',
    )
  })

  it('placeOrder: 201 with the Order and Location; the pet is pending; a second order is 409', async () => {
    const { test, headers, newPet, place, petStatus } = await setUp(await shared())
    const pet = await newPet()
    const before = Date.now()
    const response = await place(pet.id)
    assert.equal(response.statusCode, 201, response.body)
    const order = response.json()
    assert.deepEqual(Object.keys(order).sort(), ['createdAt', 'expiresAt', 'id', 'petId', 'status', 'updatedAt'])
    assert.match(order.id, /^ord_[0-9A-Za-z]{16}$/)
    assert.equal(order.petId, pet.id)
    assert.equal(order.status, 'placed')
    assert.match(order.createdAt, /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/)
    const hold = Date.parse(order.expiresAt) - before
    assert.ok(hold >= 1800_000 - 1000 && hold <= 1800_000 + 5000, `hold ${hold} ms`)
    assert.equal(response.headers.location, `http://localhost:80/v1/store/orders/${order.id}`)
    assert.equal(await petStatus(pet.id), 'pending')
    const again = await place(pet.id)
    assert.equal(again.statusCode, 409)
    assert.equal(errorBody(again).code, 'pet_not_available')
    const fetched = await test.app.inject({ url: `/v1/store/orders/${order.id}`, headers })
    assert.deepEqual(fetched.json(), order)
  })

  it('placeOrder: an unknown pet is 404, a sold or pending pet 409, a bad body 400', async () => {
    const { newPet, place } = await setUp(await shared())
    const sold = await newPet('sold')
    const pending = await newPet('pending')
    assert.equal(errorBody(await place(sold.id + 100)).code, 'pet_not_found')
    assert.equal((await place(sold.id + 100)).statusCode, 404)
    for (const id of [sold.id, pending.id]) assert.equal(errorBody(await place(id)).code, 'pet_not_available')
    for (const petId of [0, -1, 'x', 1.5, null]) {
      const response = await place(petId as number)
      assert.equal(response.statusCode, 400, String(petId))
      assert.equal(errorBody(response).code, 'validation_failed')
    }
  })

  it('placeOrder with Idempotency-Key: a retry replays the same order, and places no second one', async () => {
    const { test, headers, newPet, place } = await setUp(await shared())
    const pet = await newPet()
    const first = await place(pet.id, { 'idempotency-key': 'order-1' })
    const retry = await place(pet.id, { 'idempotency-key': 'order-1' })
    assert.equal(first.statusCode, 201)
    assert.equal(retry.statusCode, 201)
    assert.equal(retry.headers['idempotent-replayed'], 'true')
    assert.deepEqual(retry.json(), first.json())
    assert.equal(retry.headers.location, first.headers.location)
    const list = await test.app.inject({ url: '/v1/store/orders', headers })
    assert.equal(list.json().length, 1)
  })

  it('complete sells the pet, cancel frees it; a repeat is 200; another final move is 409', async () => {
    const { test, headers, newPet, place, petStatus } = await setUp(await shared())
    const move = (id: string, action: string) =>
      test.app.inject({ method: 'POST', url: `/v1/store/orders/${id}/${action}`, headers })
    const a = (await place((await newPet()).id)).json()
    const completed = await move(a.id, 'complete')
    assert.equal(completed.statusCode, 200)
    assert.equal(completed.json().status, 'completed')
    assert.ok(completed.json().updatedAt >= a.updatedAt)
    assert.equal(await petStatus(a.petId), 'sold')
    assert.deepEqual((await move(a.id, 'complete')).json(), completed.json())
    const conflict = await move(a.id, 'cancel')
    assert.equal(conflict.statusCode, 409)
    assert.equal(errorBody(conflict).code, 'order_conflict')
    assert.match(errorBody(conflict).message, /completed/)

    const b = (await place((await newPet()).id)).json()
    assert.equal((await move(b.id, 'cancel')).json().status, 'canceled')
    assert.equal(await petStatus(b.petId), 'available')
    assert.equal((await move(b.id, 'cancel')).statusCode, 200)
    assert.equal((await move(b.id, 'complete')).statusCode, 409)
    // The freed pet can be ordered again.
    assert.equal((await place(b.petId)).statusCode, 201)
  })

  it("another account's order is 404 (never 403), for reading and for moving it", async () => {
    const { test, newPet, place } = await setUp(await shared())
    const order = (await place((await newPet()).id)).json()
    const stranger = { ...bearer((await test.newKey()).secret), ...BETA }
    for (const [method, url] of [
      ['GET', `/v1/store/orders/${order.id}`],
      ['POST', `/v1/store/orders/${order.id}/cancel`],
      ['POST', `/v1/store/orders/${order.id}/complete`],
      ['GET', '/v1/store/orders/ord_doesnotexist0000'],
    ] as const) {
      const response = await test.app.inject({ method, url, headers: stranger })
      assert.equal(response.statusCode, 404, url)
      assert.equal(errorBody(response).code, 'order_not_found')
    }
    // An id that is blank, or not printable, is quoted, so that the message shows what was sent.
    const blank = await test.app.inject({ method: 'POST', url: '/v1/store/orders/%20/complete', headers: stranger })
    assert.equal(errorBody(blank).message, 'No order " " for this account.')
    const quoted = await test.app.inject({ url: '/v1/store/orders/%22ord_x%22', headers: stranger })
    assert.equal(errorBody(quoted).message, 'No order "\\"ord_x\\"" for this account.')
    const plain = await test.app.inject({ url: '/v1/store/orders/ord_doesnotexist0000', headers: stranger })
    assert.equal(errorBody(plain).message, 'No order ord_doesnotexist0000 for this account.')
    assert.deepEqual((await test.app.inject({ url: '/v1/store/orders', headers: stranger })).json(), [])
  })

  it('listOrders: newest first, limit, status and petId filters, Link rel="next" pages to the end', async () => {
    const { test, headers, newPet, place } = await setUp(await shared())
    const placed = []
    for (let i = 0; i < 5; i++) placed.push((await place((await newPet()).id)).json())
    await test.app.inject({ method: 'POST', url: `/v1/store/orders/${placed[1].id}/cancel`, headers })
    const seen: string[] = []
    let url: string | undefined = '/v1/store/orders?limit=2'
    while (url) {
      const page: { statusCode: number; body: string; json: () => { id: string }[]; headers: Record<string, unknown> } =
        await test.app.inject({ url, headers })
      assert.equal(page.statusCode, 200, page.body)
      seen.push(...page.json().map((o: { id: string }) => o.id))
      const link = page.headers.link as string | undefined
      url = link ? nextPath(link) : undefined
    }
    assert.deepEqual(seen, placed.map((o) => o.id).reverse())
    const canceled = await test.app.inject({ url: '/v1/store/orders?status=canceled', headers })
    assert.deepEqual(
      canceled.json().map((o: { id: string }) => o.id),
      [placed[1].id],
    )
    const byPet = await test.app.inject({ url: `/v1/store/orders?petId=${placed[3].petId}`, headers })
    assert.deepEqual(
      byPet.json().map((o: { id: string }) => o.id),
      [placed[3].id],
    )
    const first = await test.app.inject({ url: '/v1/store/orders?limit=1&status=placed', headers })
    const cursor = /cursor=([^&>]+)/.exec(first.headers.link as string)?.[1]
    const misused = await test.app.inject({ url: `/v1/store/orders?cursor=${cursor}`, headers })
    assert.equal(misused.statusCode, 400)
    assert.equal(errorBody(misused).code, 'invalid_cursor')
    assert.match(
      errorBody(misused).message,
      /issued for status=placed: send it with the filters of the link that gave it/,
    )
    const unfiltered = /cursor=([^&>]+)/.exec(
      (await test.app.inject({ url: '/v1/store/orders?limit=1', headers })).headers.link as string,
    )?.[1]
    const withPet = await test.app.inject({ url: `/v1/store/orders?petId=1&cursor=${unfiltered}`, headers })
    assert.match(errorBody(withPet).message, /issued for the list without filters/)
    // Nor is an orders cursor one of another list's, though both hold an id and a filter.
    const asPets = await test.app.inject({ url: `/v1/pets?cursor=${unfiltered}`, headers })
    assert.equal(asPets.statusCode, 400)
    assert.equal(errorBody(asPets).code, 'invalid_cursor')
    // An id no pet has lists nothing; one no pet can have (ids run from 1 to 2^53-1) is a 400.
    const none = await test.app.inject({ url: '/v1/store/orders?petId=9007199254740991', headers })
    assert.equal(none.statusCode, 200)
    assert.deepEqual(none.json(), [])
    for (const query of [
      'limit=0',
      'limit=101',
      'status=gone',
      'petId=x',
      'cursor=',
      'other=1',
      'petId=0',
      'petId=01',
    ]) {
      const response = await test.app.inject({ url: `/v1/store/orders?${query}`, headers })
      assert.equal(response.statusCode, 400, query)
    }
  })

  it('getInventory: counts of pets by status, every key present', async (t) => {
    const { test, headers, newPet, place } = await setUp(await build(t))
    assert.deepEqual((await test.app.inject({ url: '/v1/store/inventory', headers })).json(), {
      available: 0,
      pending: 0,
      sold: 0,
    })
    await newPet()
    await newPet('sold')
    await place((await newPet()).id)
    assert.deepEqual((await test.app.inject({ url: '/v1/store/inventory', headers })).json(), {
      available: 1,
      pending: 1,
      sold: 1,
    })
  })

  it('a hold ends by itself: after ORDER_HOLD_SECONDS the order is expired and the pet available', async (t) => {
    const { test, headers, newPet, place, petStatus } = await setUp(await build(t, { ORDER_HOLD_SECONDS: '1' }))
    const order = (await place((await newPet()).id)).json()
    // Polled every 50 ms: a tighter loop would spend the key's rate limit before the hold ends.
    await until(
      'the order expired',
      async () => (await test.app.inject({ url: `/v1/store/orders/${order.id}`, headers })).json().status === 'expired',
      { timeoutMs: 10_000, everyMs: 50 },
    )
    assert.equal(await petStatus(order.petId), 'available')
    const expired = (await test.app.inject({ url: `/v1/store/orders/${order.id}`, headers })).json()
    assert.ok(Date.parse(expired.updatedAt) >= Date.parse(expired.expiresAt))
    assert.equal(
      (await test.app.inject({ method: 'POST', url: `/v1/store/orders/${order.id}/complete`, headers })).statusCode,
      409,
    )
  })

  it('the OpenAPI document marks every store operation x-stability: beta, with a badge', async () => {
    const { test } = await setUp(await shared())
    const document = (await test.app.inject({ url: '/v1/openapi.json' })).json()
    const operations = Object.values(
      document.paths as Record<
        string,
        Record<
          string,
          {
            operationId: string
            'x-stability'?: string
            description: string
            parameters?: { in: string; name: string; required?: boolean }[]
          }
        >
      >,
    ).flatMap((path) => Object.values(path))
    const store = operations.filter((o) =>
      ['placeOrder', 'listOrders', 'getOrder', 'cancelOrder', 'completeOrder', 'getInventory'].includes(o.operationId),
    )
    assert.equal(store.length, 6)
    for (const operation of store) {
      assert.equal(operation['x-stability'], 'beta', operation.operationId)
      assert.match(operation.description, /^\*\*Beta\*\*/)
      // Declared, so that a client generated from the document can send it.
      const optIn = operation.parameters?.find((p) => p.in === 'header' && p.name === 'animal-store-beta')
      assert.ok(optIn, `${operation.operationId} declares the Animal-Store-Beta header`)
    }
    assert.ok(operations.filter((o) => !store.includes(o)).every((o) => o['x-stability'] === undefined))
  })
})

describe('Stability: experimental operations', () => {
  // A test route under the one experimental feature there is (EXPERIMENTAL_FEATURE_NAMES).
  const experimental = { level: 'experimental', feature: 'webhooks' } as const
  const withGizmo = (test: TestApp['app']) =>
    test.register(async (scope) => {
      if (!scope.offers(experimental)) return
      scope.get('/v1/gizmos', { config: { stability: experimental } }, async () => ({ ok: true }))
    })

  it('off by default: no such route (404) and absent from the document', async (t) => {
    const test = await build(t, {}, { setup: (app) => void withGizmo(app) })
    const { secret } = await test.newKey()
    const response = await test.app.inject({
      url: '/v1/gizmos',
      headers: { ...bearer(secret), 'animal-store-beta': 'webhooks' },
    })
    assert.equal(response.statusCode, 404)
    assert.equal(errorBody(response).code, 'not_found')
    assert.equal((await test.app.inject({ url: '/v1/openapi.json' })).json().paths['/gizmos'], undefined)
  })

  it('enabled by EXPERIMENTAL_FEATURES: offered, marked experimental, and still opt-in per request', async (t) => {
    const test = await build(t, { EXPERIMENTAL_FEATURES: 'webhooks' }, { setup: (app) => void withGizmo(app) })
    const response = await test.app.inject({ url: '/v1/gizmos', headers: { 'animal-store-beta': 'webhooks' } })
    assert.equal(response.statusCode, 200)
    const refused = await test.app.inject({ url: '/v1/gizmos' })
    assert.equal(refused.statusCode, 400)
    assert.match(errorBody(refused).message, /experimental: send the header "Animal-Store-Beta: webhooks"/)
    const document = (await test.app.inject({ url: '/v1/openapi.json' })).json()
    assert.equal(document.paths['/gizmos'].get['x-stability'], 'experimental')
  })

  it('a route under an experimental feature operators cannot name does not start', async (t) => {
    const app = Fastify()
    t.after(() => app.close())
    await app.register(stability, { config: loadConfig({}) })
    const unnamed = { level: 'experimental', feature: 'gizmos' } as const
    await assert.rejects(async () => {
      app.get('/v1/gizmos', { config: { stability: unnamed } }, async () => ({}))
      await app.ready()
    }, /"gizmos" is missing from EXPERIMENTAL_FEATURE_NAMES/)
  })
})
