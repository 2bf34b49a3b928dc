import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { assertNotOffered, bearer, build, errorBody, suiteApp, type TestApp } from '../helper.ts'
import { until } from '../wait.ts'
import { receiver } from '../webhooks/receiver.ts'

const BETA = { 'animal-store-beta': 'webhooks' }
const ON = { EXPERIMENTAL_FEATURES: 'webhooks' }
const ISO = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/
const SECRET = /^whsec_[A-Za-z0-9+/]{32}$/
const NEW = { url: 'https://example.com/hooks', events: ['order.placed', 'message.created'] }
/** Deliveries to loopback receivers, retried once a twentieth of a second later. */
const LOOPBACK = {
  ...ON,
  WEBHOOK_ALLOW_HTTP: 'true',
  WEBHOOK_ALLOW_PRIVATE_URLS: 'true',
  WEBHOOK_RETRY_SCHEDULE: '0.05',
}

/** Headers of a key of a new account with these scopes (stored text; null: every scope), opted in. */
async function keyWith(test: TestApp, scopes: string | null) {
  const { secret } = await test.newKey({ scopes })
  return { ...bearer(secret), ...BETA }
}

/** A new account of `test` (an app built with ON), and helpers to call the API with its key. */
async function setUp(test: TestApp) {
  const { secret, accountId } = await test.newKey()
  const headers = { ...bearer(secret), ...BETA }
  const call = (method: 'GET' | 'POST' | 'PATCH' | 'DELETE', url: string, payload?: object, extra = {}) =>
    test.app.inject({ method, url: `/v1${url}`, headers: { ...headers, ...extra }, ...(payload && { payload }) })
  const create = async (body: object = NEW) => {
    const response = await call('POST', '/webhook-endpoints', body)
    assert.equal(response.statusCode, 201, response.body)
    return response.json()
  }
  return { test, secret, accountId, headers, call, create }
}

describe('Webhook endpoints (experimental)', () => {
  // Endpoints belong to an account, and each test makes accounts of its own: one app with webhooks
  // on serves them, but for tests of another configuration.
  const shared = suiteApp(ON)

  it('do not exist unless EXPERIMENTAL_FEATURES names webhooks: 404, and absent from the document', async (t) => {
    // Webhooks off: another configuration than the suite's.
    const test = await build(t)
    const { secret } = await test.newKey()
    const requests = (
      [
        ['GET', '/v1/webhook-endpoints'],
        ['POST', '/v1/webhook-endpoints'],
        ['GET', '/v1/webhook-endpoints/we_x/deliveries'],
      ] as const
    ).map(([method, url]) => ({ method, url, headers: { ...bearer(secret), ...BETA }, payload: NEW }))
    await assertNotOffered(test, requests, '/webhook', 'WebhookEndpoint')
  })

  it('where offered, each operation needs Animal-Store-Beta: webhooks (400), after the key (401)', async () => {
    const { test, secret } = await setUp(await shared())
    const without = await test.app.inject({ url: '/v1/webhook-endpoints', headers: bearer(secret) })
    assert.equal(without.statusCode, 400)
    assert.equal(errorBody(without).code, 'beta_opt_in_required')
    assert.match(errorBody(without).message, /experimental: send the header "Animal-Store-Beta: webhooks"/)
    assert.equal((await test.app.inject({ url: '/v1/webhook-endpoints', headers: BETA })).statusCode, 401)
    const document = (await test.app.inject({ url: '/v1/openapi.json' })).json()
    const operations = Object.values<Record<string, { 'x-stability': string; operationId: string }>>(document.paths)
      .flatMap((item) => Object.values(item))
      .filter((operation) => operation.operationId.match(/Webhook/))
    assert.deepEqual(operations.map((operation) => operation.operationId).sort(), [
      'createWebhookEndpoint',
      'deleteWebhookEndpoint',
      'getWebhookEndpoint',
      'listWebhookDeliveries',
      'listWebhookEndpoints',
      'recoverWebhookDeliveries',
      'redeliverWebhook',
      'rotateWebhookSecret',
      'sendWebhookTestEvent',
      'updateWebhookEndpoint',
    ])
    for (const operation of operations) assert.equal(operation['x-stability'], 'experimental', operation.operationId)
  })

  it('createWebhookEndpoint: 201 with the secret and Location; list and get never show the secret', async () => {
    const { test, accountId, call } = await setUp(await shared())
    const response = await call('POST', '/webhook-endpoints', { ...NEW, description: 'Order sync' })
    assert.equal(response.statusCode, 201, response.body)
    const created = response.json()
    assert.match(created.id, /^we_[0-9A-Za-z]{16}$/)
    assert.match(created.secret, SECRET)
    assert.deepEqual(
      { ...created, id: 'x', secret: 'x', createdAt: 'x' },
      {
        id: 'x',
        url: NEW.url,
        events: ['message.created', 'order.placed'],
        description: 'Order sync',
        status: 'enabled',
        disabledReason: null,
        createdAt: 'x',
        secretRotatedAt: null,
        secret: 'x',
      },
    )
    assert.match(created.createdAt, ISO)
    assert.equal(response.headers.location, `http://localhost:80/v1/webhook-endpoints/${created.id}`)
    const { secret: _, ...shown } = created
    const got = await call('GET', `/webhook-endpoints/${created.id}`)
    assert.equal(got.statusCode, 200)
    assert.deepEqual(got.json(), shown)
    const second = await call('POST', '/webhook-endpoints', { url: 'https://example.org/h', events: ['order.expired'] })
    assert.equal(second.json().description, '')
    assert.notEqual(second.json().secret, created.secret)
    const list = await call('GET', '/webhook-endpoints')
    assert.equal(list.statusCode, 200)
    assert.deepEqual(
      list.json().map((endpoint: { id: string }) => endpoint.id),
      [second.json().id, created.id],
    )
    assert.ok(!list.body.includes('whsec_'), 'the list shows no secret')
    assert.ok(!got.body.includes('whsec_'), 'the endpoint shows no secret')
    // Kept, since every delivery is signed with it.
    assert.equal((await test.app.store.getWebhookEndpoint(accountId, created.id))?.secret, created.secret)
  })

  it('createWebhookEndpoint: an Idempotency-Key replays the 201, secret and Location included, creating nothing', async () => {
    const { call } = await setUp(await shared())
    const key = { 'idempotency-key': 'hook-1' }
    const first = await call('POST', '/webhook-endpoints', NEW, key)
    const again = await call('POST', '/webhook-endpoints', NEW, key)
    assert.equal(again.statusCode, 201)
    assert.equal(again.headers['idempotent-replayed'], 'true')
    assert.deepEqual(again.json(), first.json())
    assert.equal(again.headers.location, first.headers.location)
    assert.equal((await call('GET', '/webhook-endpoints')).json().length, 1)
    const other = await call('POST', '/webhook-endpoints', { ...NEW, description: 'else' }, key)
    assert.equal(errorBody(other).code, 'idempotency_key_reused')
  })

  it('refuses bodies that break the rules: events 1..5 unique and known, description ≤ 200, no extra field', async () => {
    const { call } = await setUp(await shared())
    for (const body of [
      { url: NEW.url },
      { events: NEW.events },
      { ...NEW, events: [] },
      { ...NEW, events: ['order.placed', 'order.placed'] },
      { ...NEW, events: ['pet.adopted'] },
      { ...NEW, description: 'x'.repeat(201) },
      { ...NEW, description: '\u001b[31mred' },
      { ...NEW, description: 'two\nlines' },
      { ...NEW, secret: 'whsec_mine' },
      { ...NEW, url: 42 },
    ]) {
      const response = await call('POST', '/webhook-endpoints', body)
      assert.equal(response.statusCode, 400, JSON.stringify(body))
      assert.equal(errorBody(response).code, 'validation_failed', JSON.stringify(body))
    }
    // Said in words, not the validator's ("must NOT have fewer than 1 items").
    const messageFor = async (events: unknown[]) =>
      errorBody(await call('POST', '/webhook-endpoints', { ...NEW, events })).message
    assert.equal(await messageFor([]), 'body.events must have at least 1 item')
    assert.equal(
      await messageFor(['order.placed', 'order.placed']),
      'body.events must not repeat an item (items 0 and 1 are the same)',
    )
    assert.equal((await call('POST', '/webhook-endpoints', { ...NEW, description: 'x'.repeat(200) })).statusCode, 201)
  })

  it('order.* and message.* stand for every type of that resource, listed one by one, as GET /v1/events takes them', async () => {
    const { call } = await setUp(await shared())
    const orders = ['order.placed', 'order.completed', 'order.canceled', 'order.expired']
    const created = await call('POST', '/webhook-endpoints', { ...NEW, events: ['order.*'] })
    assert.equal(created.statusCode, 201, created.body)
    assert.deepEqual(created.json().events, orders)
    const patched = await call('PATCH', `/webhook-endpoints/${created.json().id}`, {
      events: ['message.*', 'order.placed'],
    })
    assert.equal(patched.statusCode, 200, patched.body)
    assert.deepEqual(patched.json().events, ['message.created', 'order.placed'])
    const both = await call('POST', '/webhook-endpoints', { ...NEW, events: ['order.*', 'order.placed', 'message.*'] })
    assert.deepEqual(both.json().events, ['message.created', ...orders])
    assert.equal((await call('POST', '/webhook-endpoints', { ...NEW, events: ['webhook.*'] })).statusCode, 400)
  })

  it('refuses URLs events cannot go to: not https, private or loopback addresses, credentials, not absolute', async () => {
    const { call } = await setUp(await shared())
    for (const [url, message] of [
      ['http://example.com/hooks', 'The URL must start with https://.'],
      [
        'https://10.0.0.1/hooks',
        "The URL's host 10.0.0.1 is a private address; webhooks are sent to public addresses only.",
      ],
      [
        'https://127.0.0.1/hooks',
        "The URL's host 127.0.0.1 is a loopback address; webhooks are sent to public addresses only.",
      ],
      [
        'https://localhost:8443/hooks',
        "The URL's host localhost is this machine; webhooks are sent to public addresses only.",
      ],
      ['https://user:pw@example.com/hooks', 'The URL must not contain a username or password.'],
      ['/hooks', 'The URL is not an absolute URL (such as https://example.com/webhooks).'],
    ]) {
      const response = await call('POST', '/webhook-endpoints', { ...NEW, url })
      assert.equal(response.statusCode, 400, url)
      assert.deepEqual(errorBody(response), { code: 'invalid_webhook_url', message, status: 400 })
    }
    assert.equal((await call('GET', '/webhook-endpoints')).json().length, 0)
  })

  it('WEBHOOK_ALLOW_HTTP and WEBHOOK_ALLOW_PRIVATE_URLS admit http:// and private addresses (development)', async (t) => {
    const http = await setUp(await build(t, { ...ON, WEBHOOK_ALLOW_HTTP: 'true' }))
    assert.equal(
      (await http.call('POST', '/webhook-endpoints', { ...NEW, url: 'http://example.com/h' })).statusCode,
      201,
    )
    const stillPrivate = await http.call('POST', '/webhook-endpoints', { ...NEW, url: 'http://192.168.1.2/h' })
    assert.equal(errorBody(stillPrivate).code, 'invalid_webhook_url')
    const both = await setUp(await build(t, { ...ON, WEBHOOK_ALLOW_HTTP: 'true', WEBHOOK_ALLOW_PRIVATE_URLS: 'true' }))
    assert.equal(
      (await both.call('POST', '/webhook-endpoints', { ...NEW, url: 'http://127.0.0.1:9/h' })).statusCode,
      201,
    )
  })

  it('an account has at most 16 endpoints: the 17th is 409 webhook_endpoint_limit; deleting one makes room', async () => {
    const { test, call, create } = await setUp(await shared())
    const endpoints = []
    for (let i = 0; i < 16; i++) endpoints.push(await create({ ...NEW, url: `https://example.com/${i}` }))
    const refused = await call('POST', '/webhook-endpoints', NEW)
    assert.equal(refused.statusCode, 409)
    assert.equal(errorBody(refused).code, 'webhook_endpoint_limit')
    // Another account has its own 16.
    const other = await keyWith(test, null)
    const theirs = await test.app.inject({ method: 'POST', url: '/v1/webhook-endpoints', headers: other, payload: NEW })
    assert.equal(theirs.statusCode, 201)
    assert.equal((await call('DELETE', `/webhook-endpoints/${endpoints[0].id}`)).statusCode, 204)
    assert.equal((await call('POST', '/webhook-endpoints', NEW)).statusCode, 201)
  })

  it('updateWebhookEndpoint: a merge patch, either media type; the URL is checked; status disables and enables', async () => {
    const { call, create } = await setUp(await shared())
    const created = await create({ ...NEW, description: 'before' })
    const patch = (body: unknown, type = 'application/merge-patch+json') =>
      call('PATCH', `/webhook-endpoints/${created.id}`, body as object, { 'content-type': type })
    const described = await patch({ description: 'after' })
    assert.equal(described.statusCode, 200, described.body)
    const { secret: _, ...shown } = created
    assert.deepEqual(described.json(), { ...shown, description: 'after' })
    const moved = await patch({ url: 'https://example.net/new', events: ['order.canceled'] }, 'application/json')
    assert.equal(moved.statusCode, 200)
    assert.equal(moved.json().url, 'https://example.net/new')
    assert.deepEqual(moved.json().events, ['order.canceled'])
    assert.equal(moved.json().description, 'after')
    const disabled = await patch({ status: 'disabled' })
    assert.equal(disabled.json().status, 'disabled')
    assert.equal(typeof disabled.json().disabledReason, 'string')
    const enabled = await patch({ status: 'enabled' })
    assert.equal(enabled.json().status, 'enabled')
    assert.equal(enabled.json().disabledReason, null)
    const unchanged = await patch({})
    assert.equal(unchanged.statusCode, 200)
    assert.deepEqual(unchanged.json(), enabled.json())
    const bad = await patch({ url: 'https://10.1.2.3/' })
    assert.equal(errorBody(bad).code, 'invalid_webhook_url')
    // Kept as events will be sent to it: the shown URL is the one used.
    for (const [sent, kept] of [
      ['https:example.net/h', 'https://example.net/h'],
      ['https:///Example.NET/a/../b', 'https://example.net/b'],
      ['HTTPS://example.net', 'https://example.net/'],
    ]) {
      const normalised = await patch({ url: sent }, 'application/json')
      assert.equal(normalised.json().url, kept, sent)
    }
    await patch({ url: 'https://example.net/new' }, 'application/json')
    for (const body of [{ description: null }, { status: 'paused' }, { secret: 'x' }, { events: [] }, ['x']]) {
      const response = await patch(body)
      assert.equal(response.statusCode, 400, JSON.stringify(body))
      assert.equal(errorBody(response).code, 'validation_failed')
    }
    const after = await call('GET', `/webhook-endpoints/${created.id}`)
    assert.deepEqual(after.json(), enabled.json(), 'a refused patch changes nothing')
    assert.equal((await patch({ description: 'x' }, 'text/plain')).statusCode, 415)
  })

  it('deleteWebhookEndpoint: 204, then the endpoint is 404 for every operation; unknown is 404', async () => {
    const { call, create } = await setUp(await shared())
    const created = await create()
    const deleted = await call('DELETE', `/webhook-endpoints/${created.id}`)
    assert.equal(deleted.statusCode, 204)
    assert.equal(deleted.body, '')
    for (const [method, url, body] of [
      ['GET', `/webhook-endpoints/${created.id}`],
      ['PATCH', `/webhook-endpoints/${created.id}`, { description: 'x' }],
      ['DELETE', `/webhook-endpoints/${created.id}`],
      ['POST', `/webhook-endpoints/${created.id}/rotate-secret`],
      ['GET', `/webhook-endpoints/${created.id}/deliveries`],
      ['POST', `/webhook-endpoints/${created.id}/deliveries/dlv_x/redeliver`],
      ['POST', `/webhook-endpoints/${created.id}/test`],
      ['POST', `/webhook-endpoints/${created.id}/recover`, { since: '2026-01-01T00:00:00Z' }],
      ['GET', '/webhook-endpoints/we_unknown'],
    ] as const) {
      const response = await call(method, url, body)
      assert.equal(response.statusCode, 404, `${method} ${url}`)
      assert.equal(errorBody(response).code, 'webhook_endpoint_not_found', `${method} ${url}`)
    }
    assert.deepEqual((await call('GET', '/webhook-endpoints')).json(), [])
  })

  it('rotateWebhookSecret: 200 with a new secret, secretRotatedAt, and the old secret signing for 24 hours', async () => {
    const { test, accountId, call, create } = await setUp(await shared())
    const created = await create()
    const before = Date.now()
    const response = await call('POST', `/webhook-endpoints/${created.id}/rotate-secret`)
    assert.equal(response.statusCode, 200, response.body)
    const rotated = response.json()
    assert.match(rotated.secret, SECRET)
    assert.notEqual(rotated.secret, created.secret)
    assert.match(rotated.secretRotatedAt, ISO)
    assert.ok(Date.parse(rotated.secretRotatedAt) >= before - 1000)
    const grace = Date.parse(rotated.previousSecretExpiresAt) - before
    assert.ok(grace >= 86_400_000 - 1000 && grace <= 86_400_000 + 5000, `grace ${grace} ms`)
    assert.equal(rotated.id, created.id)
    const stored = await test.app.store.getWebhookEndpoint(accountId, created.id)
    assert.equal(stored?.secret, rotated.secret)
    const got = (await call('GET', `/webhook-endpoints/${created.id}`)).json()
    assert.equal(got.secretRotatedAt, rotated.secretRotatedAt)
    assert.equal(got.secret, undefined)
    // That both secrets then sign, each verifying at a receiver, is test/plugins/webhook-delivery.test.ts's
    // (claiming here would race the app's own delivery loop for the delivery).
  })

  it('listWebhookDeliveries and redeliverWebhook: the recent deliveries; a resend is 202 and pending again', async (t) => {
    // The delivery loop runs: nothing listens on port 1, and one quick retry ends each delivery.
    // Another configuration, and its nudge replaced below: an app of its own.
    const { test, call, create } = await setUp(
      await build(t, { ...ON, WEBHOOK_RETRY_SCHEDULE: '0.05', WEBHOOK_ALLOW_PRIVATE_URLS: 'true' }),
    )
    const nudges: number[] = []
    // Counts the nudges the route gives the delivery loop.
    const { nudge } = test.app.webhookDeliveries
    test.app.webhookDeliveries.nudge = () => {
      nudges.push(Date.now())
      nudge()
    }
    const endpoint = await create({ url: 'https://127.0.0.1:1/m', events: ['message.created'] })
    const other = await create({ url: 'https://example.com/o', events: ['order.placed'] })
    for (const text of ['one', 'two', 'three']) {
      assert.equal((await call('POST', '/messages', { message: text })).statusCode, 202)
    }
    const listed = await call('GET', `/webhook-endpoints/${endpoint.id}/deliveries?limit=2`)
    assert.equal(listed.statusCode, 200, listed.body)
    const deliveries = listed.json()
    assert.equal(deliveries.length, 2)
    assert.deepEqual(Object.keys(deliveries[0]).sort(), [
      'attempts',
      'createdAt',
      'deliveredAt',
      'eventId',
      'eventType',
      'id',
      'lastAttemptAt',
      'lastError',
      'lastStatus',
      'nextAttemptAt',
      'status',
    ])
    assert.match(deliveries[0].id, /^dlv_/)
    assert.equal(deliveries[0].eventType, 'message.created')
    assert.ok(['pending', 'failed'].includes(deliveries[0].status))
    assert.equal((await call('GET', `/webhook-endpoints/${endpoint.id}/deliveries`)).json().length, 3)
    assert.deepEqual((await call('GET', `/webhook-endpoints/${other.id}/deliveries`)).json(), [])
    for (const query of ['limit=0', 'limit=101', 'cursor=x']) {
      const refused = await call('GET', `/webhook-endpoints/${endpoint.id}/deliveries?${query}`)
      assert.equal(refused.statusCode, 400, query)
    }

    // A delivery that ran out: a resend makes it pending again, due now, and nudges the delivery loop.
    const claimed = await until('a delivery failed', async () =>
      (await call('GET', `/webhook-endpoints/${endpoint.id}/deliveries`))
        .json()
        .find((d: { status: string }) => d.status === 'failed'),
    )
    assert.equal(claimed.attempts, 2)
    const resent = await call('POST', `/webhook-endpoints/${endpoint.id}/deliveries/${claimed.id}/redeliver`)
    assert.equal(resent.statusCode, 202, resent.body)
    assert.equal(resent.json().id, claimed.id)
    assert.equal(resent.json().status, 'pending')
    assert.match(resent.json().nextAttemptAt, ISO)
    assert.equal(nudges.length, 1)

    // Through another endpoint of the account, or unknown: 404; the endpoint disabled: 409.
    const elsewhere = await call('POST', `/webhook-endpoints/${other.id}/deliveries/${claimed.id}/redeliver`)
    assert.equal(errorBody(elsewhere).code, 'delivery_not_found')
    const unknown = await call('POST', `/webhook-endpoints/${endpoint.id}/deliveries/dlv_unknown/redeliver`)
    assert.equal(errorBody(unknown).code, 'delivery_not_found')
    await call('PATCH', `/webhook-endpoints/${endpoint.id}`, { status: 'disabled' })
    const disabled = await call('POST', `/webhook-endpoints/${endpoint.id}/deliveries/${claimed.id}/redeliver`)
    assert.equal(disabled.statusCode, 409)
    assert.equal(errorBody(disabled).code, 'webhook_endpoint_disabled')
    assert.equal(nudges.length, 1)
    // Disabled between the route's look and the store's resend (a hostile pass met it): 409 too, not 404.
    await call('PATCH', `/webhook-endpoints/${endpoint.id}`, { status: 'enabled' })
    const { store } = test.app
    const redeliver = store.redeliver.bind(store)
    store.redeliver = async (...args) => {
      await store.updateWebhookEndpoint(args[0], endpoint.id, { enabled: false })
      return redeliver(...args)
    }
    const raced = await call('POST', `/webhook-endpoints/${endpoint.id}/deliveries/${claimed.id}/redeliver`)
    assert.equal(errorBody(raced).code, 'webhook_endpoint_disabled')
  })

  it('sendWebhookTestEvent: 202 with a webhook.test event, sent signed to that endpoint alone, recorded like any', async (t) => {
    const { call, create } = await setUp(await build(t, LOOPBACK))
    const hook = await receiver(t)
    const other = await receiver(t)
    const endpoint = await create({ url: hook.url, events: ['order.placed'], description: 'probe' })
    await create({ url: other.url, events: ['order.placed'] })
    const response = await call('POST', `/webhook-endpoints/${endpoint.id}/test`)
    assert.equal(response.statusCode, 202, response.body)
    const event = response.json()
    const { secret, ...shown } = endpoint
    assert.deepEqual(Object.keys(event).sort(), ['createdAt', 'data', 'id', 'type'])
    assert.match(event.id, /^evt_/)
    assert.equal(event.type, 'webhook.test')
    assert.match(event.createdAt, ISO)
    assert.deepEqual(event.data, shown)
    await until('received', () => hook.received.length === 1)
    const [got] = hook.received
    assert.equal(got?.id, event.id)
    assert.deepEqual(got?.event, { type: 'webhook.test', timestamp: event.createdAt, data: shown })
    assert.equal(hook.verifiesWith(secret), true)
    // Listed among its deliveries and the account's events; sent to no other endpoint.
    const delivered = await until('delivered', async () => {
      const [delivery] = (await call('GET', `/webhook-endpoints/${endpoint.id}/deliveries`)).json()
      return delivery?.status === 'delivered' ? delivery : null
    })
    assert.deepEqual([delivered.eventId, delivered.eventType], [event.id, 'webhook.test'])
    assert.deepEqual((await call('GET', `/events/${event.id}`)).json(), event)
    assert.equal(other.received.length, 0)
    // A disabled endpoint gets none (409); an unknown one is 404; a body is refused.
    await call('PATCH', `/webhook-endpoints/${endpoint.id}`, { status: 'disabled' })
    const disabled = await call('POST', `/webhook-endpoints/${endpoint.id}/test`)
    assert.equal(disabled.statusCode, 409)
    assert.equal(errorBody(disabled).code, 'webhook_endpoint_disabled')
    const unknown = await call('POST', '/webhook-endpoints/we_unknown/test')
    assert.equal(errorBody(unknown).code, 'webhook_endpoint_not_found')
    assert.equal((await call('GET', '/events?type=webhook.test')).json().length, 1)
  })

  it('recoverWebhookDeliveries: the failed deliveries since then are sent again; 202 with how many', async (t) => {
    const { call, create } = await setUp(await build(t, LOOPBACK))
    const hook = await receiver(t)
    hook.answer = () => 503
    const endpoint = await create({ url: hook.url, events: ['message.created'] })
    const before = (await call('POST', '/messages', { message: 'before' })).json()
    const deliveries = async () => (await call('GET', `/webhook-endpoints/${endpoint.id}/deliveries`)).json()
    await until('failed', async () => (await deliveries())[0]?.status === 'failed')
    await until('the clock past it', () => Date.now() > Date.parse(before.createdAt) + 1)
    const since = new Date().toISOString()
    for (const message of ['one', 'two']) await call('POST', '/messages', { message })
    await until('all failed', async () => (await deliveries()).every((d: { status: string }) => d.status === 'failed'))
    assert.equal(hook.received.length, 6)

    // The receiver is back: the two since then are sent again, and delivered; the one before is not.
    hook.answer = () => 200
    const recovered = await call('POST', `/webhook-endpoints/${endpoint.id}/recover`, { since })
    assert.equal(recovered.statusCode, 202, recovered.body)
    assert.deepEqual(recovered.json(), { queued: 2, more: false })
    await until(
      'delivered',
      async () => (await deliveries()).filter((d: { status: string }) => d.status === 'delivered').length === 2,
    )
    const [two, one, old] = await deliveries()
    assert.deepEqual([two.status, one.status, old.status], ['delivered', 'delivered', 'failed'])
    assert.equal(hook.received.length, 8)
    assert.deepEqual((await call('POST', `/webhook-endpoints/${endpoint.id}/recover`, { since })).json(), {
      queued: 0,
      more: false,
    })

    for (const body of [{}, { since: 'yesterday' }, { since: '2026-02-30T00:00:00Z' }, { since, until: since }]) {
      const refused = await call('POST', `/webhook-endpoints/${endpoint.id}/recover`, body)
      assert.equal(refused.statusCode, 400, JSON.stringify(body))
      assert.equal(errorBody(refused).code, 'validation_failed')
    }
    const unknown = await call('POST', '/webhook-endpoints/we_unknown/recover', { since })
    assert.equal(errorBody(unknown).code, 'webhook_endpoint_not_found')
    await call('PATCH', `/webhook-endpoints/${endpoint.id}`, { status: 'disabled' })
    const disabled = await call('POST', `/webhook-endpoints/${endpoint.id}/recover`, { since })
    assert.equal(disabled.statusCode, 409)
    assert.equal(errorBody(disabled).code, 'webhook_endpoint_disabled')
  })

  it("another account's endpoint is 404 for every operation, and left as it was", async () => {
    const { test, call, create } = await setUp(await shared())
    const mine = await create({ url: 'https://example.com/m', events: ['message.created'] })
    await call('POST', '/messages', { message: 'hi' })
    const [delivery] = (await call('GET', `/webhook-endpoints/${mine.id}/deliveries`)).json()
    const stranger = await keyWith(test, null)
    for (const [method, url, payload] of [
      ['GET', `/v1/webhook-endpoints/${mine.id}`],
      ['PATCH', `/v1/webhook-endpoints/${mine.id}`, { description: 'mine now' }],
      ['POST', `/v1/webhook-endpoints/${mine.id}/rotate-secret`],
      ['GET', `/v1/webhook-endpoints/${mine.id}/deliveries`],
      ['POST', `/v1/webhook-endpoints/${mine.id}/deliveries/${delivery.id}/redeliver`],
      ['POST', `/v1/webhook-endpoints/${mine.id}/test`],
      ['POST', `/v1/webhook-endpoints/${mine.id}/recover`, { since: '2026-01-01T00:00:00Z' }],
      ['DELETE', `/v1/webhook-endpoints/${mine.id}`],
    ] as const) {
      const response = await test.app.inject({ method, url, headers: stranger, ...(payload && { payload }) })
      assert.equal(response.statusCode, 404, `${method} ${url}`)
      assert.equal(errorBody(response).code, 'webhook_endpoint_not_found')
    }
    assert.deepEqual((await test.app.inject({ url: '/v1/webhook-endpoints', headers: stranger })).json(), [])
    const { secret: _, ...shown } = mine
    assert.deepEqual((await call('GET', `/webhook-endpoints/${mine.id}`)).json(), shown)
  })

  it('scopes: webhooks:read lists and reads, webhooks:write is needed to change; write implies read', async () => {
    const { test } = await setUp(await shared())
    const reader = await keyWith(test, 'webhooks:read')
    const writer = await keyWith(test, 'webhooks:write orders:read messages:read')
    const other = await keyWith(test, 'pets:write orders:write messages:write')
    const created = await test.app.inject({
      method: 'POST',
      url: '/v1/webhook-endpoints',
      headers: writer,
      payload: NEW,
    })
    assert.equal(created.statusCode, 201)
    const id = created.json().id
    for (const url of [
      '/v1/webhook-endpoints',
      `/v1/webhook-endpoints/${id}`,
      `/v1/webhook-endpoints/${id}/deliveries`,
    ]) {
      assert.equal((await test.app.inject({ url, headers: writer })).statusCode, 200, url)
      const refused = await test.app.inject({ url, headers: other })
      assert.equal(refused.statusCode, 403, url)
      assert.match(refused.headers['www-authenticate'] as string, /scope="webhooks:read"/)
    }
    assert.equal((await test.app.inject({ url: '/v1/webhook-endpoints', headers: reader })).statusCode, 200)
    for (const [method, url] of [
      ['POST', '/v1/webhook-endpoints'],
      ['PATCH', `/v1/webhook-endpoints/${id}`],
      ['DELETE', `/v1/webhook-endpoints/${id}`],
      ['POST', `/v1/webhook-endpoints/${id}/rotate-secret`],
      ['POST', `/v1/webhook-endpoints/${id}/deliveries/dlv_x/redeliver`],
      ['POST', `/v1/webhook-endpoints/${id}/test`],
      ['POST', `/v1/webhook-endpoints/${id}/recover`],
    ] as const) {
      const response = await test.app.inject({ method, url, headers: reader, payload: {} })
      assert.equal(response.statusCode, 403, `${method} ${url}`)
      assert.equal(errorBody(response).code, 'insufficient_scope')
      assert.match(response.headers['www-authenticate'] as string, /scope="webhooks:write"/)
    }
  })

  it('scopes: receiving an event takes the read scope of its resource (orders:read, messages:read)', async () => {
    const { test } = await setUp(await shared())
    const hooksOnly = await keyWith(test, 'webhooks:write')
    const withOrders = await keyWith(test, 'webhooks:write orders:write')
    const create = (headers: Record<string, string>, events: string[]) =>
      test.app.inject({ method: 'POST', url: '/v1/webhook-endpoints', headers, payload: { ...NEW, events } })
    assert.equal((await create(hooksOnly, ['order.*'])).statusCode, 403)
    const refused = await create(hooksOnly, ['order.placed'])
    assert.equal(refused.statusCode, 403)
    assert.equal(errorBody(refused).code, 'insufficient_scope')
    assert.match(errorBody(refused).message, /order\.placed.*orders:read/)
    assert.match(refused.headers['www-authenticate'] as string, /scope="orders:read"/)
    assert.equal((await create(withOrders, ['message.created'])).statusCode, 403)
    const created = await create(withOrders, ['order.placed', 'order.expired'])
    assert.equal(created.statusCode, 201, created.body)
    // Changing the subscription is judged the same way.
    const widened = await test.app.inject({
      method: 'PATCH',
      url: `/v1/webhook-endpoints/${created.json().id}`,
      headers: { ...withOrders, 'content-type': 'application/merge-patch+json' },
      payload: { events: ['message.created'] },
    })
    assert.equal(widened.statusCode, 403)
    assert.match(widened.headers['www-authenticate'] as string, /scope="messages:read"/)
    // Nothing was created by the refused request.
    // Nor can a key point an endpoint whose events it may not read somewhere else, or enable it.
    const owner = await test.newKey({ email: 'owner@example.com' })
    const all = { ...bearer(owner.secret), ...BETA }
    const full = await test.app.inject({ method: 'POST', url: '/v1/webhook-endpoints', headers: all, payload: NEW })
    assert.equal(full.statusCode, 201, full.body)
    const narrow = await test.newKey({ email: 'owner@example.com', scopes: 'webhooks:write' })
    const hooksOnlyOfThatAccount = { ...bearer(narrow.secret), ...BETA }
    for (const payload of [{ url: 'https://attacker.example/hook' }, { status: 'enabled' }]) {
      const moved = await test.app.inject({
        method: 'PATCH',
        url: `/v1/webhook-endpoints/${full.json().id}`,
        headers: { ...hooksOnlyOfThatAccount, 'content-type': 'application/merge-patch+json' },
        payload,
      })
      assert.equal(moved.statusCode, 403, JSON.stringify(payload))
    }
    const renamed = await test.app.inject({
      method: 'PATCH',
      url: `/v1/webhook-endpoints/${full.json().id}`,
      headers: { ...hooksOnlyOfThatAccount, 'content-type': 'application/merge-patch+json' },
      payload: { description: 'renamed' },
    })
    assert.equal(renamed.statusCode, 200, renamed.body)
    // Nothing was created by the refused requests.
    const listed = await test.app.inject({ url: '/v1/webhook-endpoints', headers: withOrders })
    assert.equal(listed.json().length, 1)
  })
})
