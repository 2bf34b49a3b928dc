import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { assertError, assertNotOffered, bearer, build, errorBody, suiteApp, type TestApp } from '../helper.ts'
import { sqlRows } from '../sql.ts'
import { until } from '../wait.ts'

const ON = { EXPERIMENTAL_FEATURES: 'webhooks' }
/** Both opt-ins: the events' and the orders' (placing an order makes events too). */
const BETA = { 'animal-store-beta': 'webhooks, orders' }
const ISO = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/

interface Event {
  id: string
  type: string
  createdAt: string
  data: Record<string, unknown>
}

/** A new account of `test` with a key of these scopes (null: every scope), and calls with that key. */
async function setUp(test: TestApp, scopes: string | null = null, email?: string) {
  const { secret, accountId } = await test.newKey({ scopes, ...(email && { email }) })
  const headers = { ...bearer(secret), ...BETA }
  const call = (method: 'GET' | 'POST', url: string, payload?: object) =>
    test.app.inject({ method, url: `/v1${url}`, headers, ...(payload && { payload }) })
  /** GET of a list of events, answered 200. */
  const list = async (query = '') => {
    const response = await call('GET', `/events${query}`)
    assert.equal(response.statusCode, 200, response.body)
    return response
  }
  const types = async (query = '') => (await list(query)).json().map((event: Event) => event.type)
  const send = async (message: string) => {
    const response = await call('POST', '/messages', { message })
    assert.equal(response.statusCode, 202, response.body)
    return response.json()
  }
  /** Places an order for a new pet and completes it: two events. */
  const order = async () => {
    const pet = await test.app.store.createPet({ name: 'rex', categoryId: 1 })
    const placed = await call('POST', '/store/orders', { petId: pet.id })
    assert.equal(placed.statusCode, 201, placed.body)
    const completed = await call('POST', `/store/orders/${placed.json().id}/complete`)
    assert.equal(completed.statusCode, 200, completed.body)
    return [placed.json(), completed.json()]
  }
  return { test, secret, accountId, headers, call, list, types, send, order }
}

/** The link to the next page, as a path under the app, or null. */
const nextPage = (link: string | string[] | undefined) =>
  typeof link === 'string'
    ? (/^<http:\/\/localhost:80(\/v1\/events\?[^>]+)>; rel="next"$/.exec(link)?.[1] ?? null)
    : null

describe('Events (experimental)', () => {
  // Events belong to an account, and each test makes accounts of its own: one app with webhooks on
  // serves them, but for tests of another configuration.
  const shared = suiteApp(ON)

  it('do not exist unless EXPERIMENTAL_FEATURES names webhooks: 404, and absent from the document', async (t) => {
    const test = await build(t)
    const { secret } = await test.newKey()
    const requests = ['/v1/events', '/v1/events/evt_x'].map((url) => ({ url, headers: { ...bearer(secret), ...BETA } }))
    await assertNotOffered(test, requests, '/events', 'Event')
  })

  it('where offered, experimental like the webhook operations: the opt-in, and x-stability in the document', async () => {
    const { test, secret } = await setUp(await shared())
    const without = await test.app.inject({ url: '/v1/events', headers: bearer(secret) })
    assert.equal(errorBody(without).code, 'beta_opt_in_required')
    const document = (await test.app.inject({ url: '/v1/openapi.json' })).json()
    for (const [path, operationId] of [
      ['/events', 'listEvents'],
      ['/events/{eventId}', 'getEvent'],
    ]) {
      const operation = document.paths[path as string].get
      assert.equal(operation.operationId, operationId)
      assert.equal(operation['x-stability'], 'experimental')
      assert.deepEqual(operation.security, [{ bearerAuth: ['webhooks:read'] }])
    }
  })

  it('listEvents: every event of the account, newest first, as the API returned its resource; getEvent reads one', async () => {
    const { test, call, list, send, order } = await setUp(await shared())
    // No endpoint is subscribed: the events are recorded all the same.
    const message = await send('hello')
    const [placed, completed] = await order()
    const response = await list()
    assert.equal(response.headers.link, undefined)
    const events: Event[] = response.json()
    assert.deepEqual(
      events.map((event) => [event.type, event.data.id]),
      [
        ['order.completed', placed.id],
        ['order.placed', placed.id],
        ['message.created', message.id],
      ],
    )
    const [done, , sent] = events
    assert.deepEqual(Object.keys(sent ?? {}).sort(), ['createdAt', 'data', 'id', 'type'])
    assert.match(sent?.id ?? '', /^evt_[0-9A-Za-z]{16}$/)
    assert.match(sent?.createdAt ?? '', ISO)
    assert.deepEqual(sent?.data, message)
    assert.equal(sent?.createdAt, message.createdAt)
    assert.deepEqual(done?.data, completed)
    const got = await call('GET', `/events/${sent?.id}`)
    assert.equal(got.statusCode, 200, got.body)
    assert.deepEqual(got.json(), sent)
    // Only the account's own: another's is 404, as an unknown one.
    const stranger = await setUp(test)
    assert.deepEqual((await stranger.list()).json(), [])
    for (const id of [sent?.id, 'evt_unknown']) {
      const missing = await stranger.call('GET', `/events/${id}`)
      assertError(missing, 404, 'event_not_found', `No event ${id} for this account.`)
    }
  })

  it('listEvents: pages of `limit` with Link rel="next", each event once; the cursor is tied to its filters', async () => {
    const { call, list, send } = await setUp(await shared())
    const sent = []
    for (let i = 0; i < 5; i++) sent.push(await send(`m${i}`))
    const seen: string[] = []
    let path: string | null = '/v1/events?limit=2'
    let pages = 0
    let cursor = ''
    while (path !== null) {
      const response = await call('GET', path.slice('/v1'.length))
      assert.equal(response.statusCode, 200, response.body)
      seen.push(...response.json().map((event: Event) => event.data.message))
      path = nextPage(response.headers.link)
      if (path) cursor = new URL(path, 'http://x').searchParams.get('cursor') ?? ''
      pages++
    }
    assert.deepEqual(seen, ['m4', 'm3', 'm2', 'm1', 'm0'])
    assert.equal(pages, 3)
    // With filters, whose values hold dots, the links lead on just as well.
    for (const filters of ['type=message.created', 'type=message.*&createdAfter=2000-01-01T00:00:00Z']) {
      const walked: string[] = []
      for (let at: string | null = `/v1/events?limit=2&${filters}`; at !== null; ) {
        const response = await call('GET', at.slice('/v1'.length))
        assert.equal(response.statusCode, 200, response.body)
        walked.push(...response.json().map((event: Event) => event.data.message))
        at = nextPage(response.headers.link)
      }
      assert.deepEqual(walked, seen, filters)
    }
    // The filters travel in the link, spelled as the store reads them.
    const filtered = await list('?limit=1&type=message.*')
    assert.match(filtered.headers.link as string, /[?&]type=message\.created&/)
    const elsewhere = await call('GET', `/events?type=order.*&cursor=${cursor}`)
    assert.equal(elsewhere.statusCode, 400)
    assert.equal(errorBody(elsewhere).code, 'invalid_cursor')
    const forged = await call('GET', '/events?cursor=abc.def')
    assert.equal(errorBody(forged).code, 'invalid_cursor')
  })

  it('listEvents: `type` takes one type, several separated by commas, or a wildcard; `createdAfter` an instant', async () => {
    const { types, send, order } = await setUp(await shared())
    const first = await send('first')
    await until('the clock past the first event', () => Date.now() > Date.parse(first.createdAt) + 1)
    const cut = new Date().toISOString()
    await until('the clock past the cut', () => Date.now() > Date.parse(cut) + 1)
    await order()
    await send('last')
    assert.deepEqual(await types('?type=order.placed'), ['order.placed'])
    assert.deepEqual(await types('?type=order.*'), ['order.completed', 'order.placed'])
    assert.deepEqual(await types('?type=message.created,order.completed'), [
      'message.created',
      'order.completed',
      'message.created',
    ])
    assert.deepEqual(await types('?type=order.expired,webhook.*'), [])
    // A space after a comma, as people write lists (and the link to the next page keeps working).
    assert.deepEqual(
      await types('?type=order.placed,%20message.created'),
      await types('?type=message.created,order.placed'),
    )
    assert.deepEqual(await types(`?createdAfter=${cut}`), ['message.created', 'order.completed', 'order.placed'])
    // Any offset, the same instant.
    // (With its milliseconds: cut to the second, it would take in the first message or not, by chance.)
    const offset = new Date(Date.parse(cut) + 3_600_000).toISOString().replace('Z', '+01:00')
    const inParis = `?createdAfter=${encodeURIComponent(offset)}&type=message.created`
    assert.deepEqual(await types(inParis), ['message.created'])
    assert.deepEqual(await types(`?createdAfter=${cut}&type=message.created`), ['message.created'])
    // RFC 3339 §5.6: t and z may be written lower case.
    const lower = cut.replace('T', 't').replace('Z', 'z')
    assert.deepEqual(await types(`?createdAfter=${lower}&type=message.created`), ['message.created'])
    assert.deepEqual(await types('?createdAfter=9999-12-31T23:59:59Z'), [])
  })

  it('refuses bad input with a 400 JSON error naming it, never a 5xx', async () => {
    const { call } = await setUp(await shared())
    for (const [query, message] of [
      [
        'type=pet.adopted',
        /^query\.type \("pet\.adopted"\) is invalid: Only events of these types, separated by commas: message\.created, .*; or message\.\*, order\.\*, webhook\.\* for every type of one resource\.$/,
      ],
      ['type=order.placed,', /^query\.type \("order\.placed,"\) is invalid/],
      ['type=Order.placed', /^query\.type \("Order\.placed"\) is invalid/],
      ['type=order.**', /^query\.type \("order\.\*\*"\) is invalid/],
      ['type=*', /^query\.type \("\*"\) is invalid/],
      [`type=${'order.placed,'.repeat(50)}order.placed`, /^query\.type must be at most 500 characters long$/],
      ['type=order.placed&type=message.created', /^query\.type must be given once$/],
      [
        'createdAfter=yesterday',
        /^query\.createdAfter must be a date and time such as 2026-11-22T12:00:00Z \(RFC 3339\)$/,
      ],
      ['createdAfter=2026-02-30T00:00:00Z', /^query\.createdAfter must be a date and time/],
      ['createdAfter=2026-11-22', /^query\.createdAfter must be a date and time/],
      ['createdAfter=2026-11-22T12:00:00', /^query\.createdAfter must be a date and time/],
      // A + not written as %2B arrives as a space.
      [
        'createdAfter=2026-11-22T12:00:00+01:00',
        /^query\.createdAfter must be a date and time.*; in a URL, write \+ as %2B$/,
      ],
      // A space elsewhere is no offset: no word of %2B.
      [
        'createdAfter=2026-11-22%2012:00:00Z',
        /^query\.createdAfter must be a date and time such as 2026-11-22T12:00:00Z \(RFC 3339\)$/,
      ],
      ['createdAfter=%2B275760-09-13T00:00:00Z', /^query\.createdAfter must be a date and time/],
      ['createdAfter=99999-01-01T00:00:00Z', /^query\.createdAfter must be a date and time/],
      ['createdAfter=0000-01-01T00:00:00Z', /^query\.createdAfter must be a date and time/],
      ['createdAfter=0001-01-01T00:00:00%2B01:00', /^query\.createdAfter must be a date and time/],
      ['createdAfter=9999-12-31T23:59:59-01:00', /^query\.createdAfter must be a date and time/],
      [`createdAfter=${'9'.repeat(5000)}`, /^query\.createdAfter must be at most 40 characters long$/],
      ['createdAfter=', /^query\.createdAfter must be a date and time/],
      ['limit=0', /^query\.limit must be at least 1$/],
      ['limit=101', /^query\.limit must be at most 100$/],
      ['since=2026-11-22T12:00:00Z', /^query\.since is not a known field$/],
    ] as const) {
      const response = await call('GET', `/events?${query}`)
      assert.equal(response.statusCode, 400, query)
      assert.equal(response.headers['content-type'], 'application/json; charset=utf-8', query)
      assert.equal(errorBody(response).code, 'validation_failed', query)
      assert.match(errorBody(response).message, message, query)
    }
    for (const id of ['%00', 'x'.repeat(101)]) {
      const response = await call('GET', `/events/${id}`)
      assert.equal(response.statusCode, 400, id)
      assert.equal(errorBody(response).code, 'validation_failed', id)
    }
    // The edges that are valid.
    for (const query of [
      'createdAfter=0001-01-01T00:00:00Z',
      'createdAfter=9999-12-31T23:59:59.999999999Z',
      'createdAfter=2028-02-29T00:00:00-12:00',
      'type=webhook.test,order.*,message.*',
    ]) {
      assert.equal((await call('GET', `/events?${query}`)).statusCode, 200, query)
    }
  })

  it('scopes: webhooks:read, and the read scope of what each event carries (as a subscription takes)', async () => {
    const test = await shared()
    const email = `scopes-${Date.now()}@example.com`
    const owner = await setUp(test, null, email)
    const message = await owner.send('hi')
    await owner.order()
    const endpoint = await owner.call('POST', '/webhook-endpoints', {
      url: 'https://example.com/hooks',
      events: ['order.placed'],
    })
    const probe = await owner.call('POST', `/webhook-endpoints/${endpoint.json().id}/test`)
    assert.equal(probe.statusCode, 202, probe.body)
    const [messageEvent] = (await owner.list('?type=message.created')).json()
    assert.equal(messageEvent.data.id, message.id)

    // webhooks:read alone: the test events only; naming another type, or reading one, is 403.
    const hooks = await setUp(test, 'webhooks:read', email)
    assert.deepEqual(await hooks.types(), ['webhook.test'])
    for (const [url, scope] of [
      ['/events?type=order.*', 'orders:read'],
      ['/events?type=webhook.test,message.created', 'messages:read'],
      [`/events/${messageEvent.id}`, 'messages:read'],
    ] as const) {
      const refused = await hooks.call('GET', url)
      assert.equal(refused.statusCode, 403, url)
      assert.equal(errorBody(refused).code, 'insufficient_scope')
      assert.match(refused.headers['www-authenticate'] as string, new RegExp(`scope="${scope}"`))
    }
    assert.equal((await hooks.call('GET', `/events/${probe.json().id}`)).statusCode, 200)
    // With orders:read (orders:write implies it): the order events too.
    const orders = await setUp(test, 'webhooks:read orders:write', email)
    assert.deepEqual(await orders.types(), ['webhook.test', 'order.completed', 'order.placed'])
    assert.deepEqual(await owner.types(), ['webhook.test', 'order.completed', 'order.placed', 'message.created'])
    // Without webhooks:read, none at all.
    const messages = await setUp(test, 'messages:read orders:read', email)
    for (const url of ['/events', `/events/${messageEvent.id}`]) {
      const refused = await messages.call('GET', url)
      assert.equal(refused.statusCode, 403, url)
      assert.match(refused.headers['www-authenticate'] as string, /scope="webhooks:read"/)
    }
  })
})

describe('Events: retention', () => {
  it('the housekeeping sweep of every instance deletes events older than EVENT_RETENTION_DAYS', async (t) => {
    // Time itself is the subject: the sweep's interval, only (the app's other timers run on it too).
    t.mock.timers.enable({ apis: ['setInterval'] })
    const test = await build(t, { ...ON, EVENT_RETENTION_DAYS: '2' })
    const { list, send } = await setUp(test)
    await send('old')
    await send('recent')
    const [recent, old] = (await list()).json() as Event[]
    const ago = (days: number) => new Date(Date.now() - days * 86_400_000).toISOString()
    const backdate = (id: string, at: string) =>
      sqlRows(test.config.databaseUrl, `UPDATE event_log SET created_at = '${at}' WHERE id = '${id}'`)
    await backdate(old?.id ?? '', ago(3))
    await backdate(recent?.id ?? '', ago(1))
    t.mock.timers.tick(10 * 60_000)
    await until('the old event purged', async () => (await list()).json().length === 1)
    assert.deepEqual(
      (await list()).json().map((event: Event) => event.id),
      [recent?.id],
    )
  })
})
