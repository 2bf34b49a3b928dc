/**
 * The typed client (animal-store/client): generated from the served OpenAPI document and kept
 * current, shown in docs/client.md by a quickstart that runs verbatim, able to walk every page, and
 * opting in to the beta operations (orders) by itself.
 */
import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { type AddressInfo, createServer, type Socket } from 'node:net'
import { join } from 'node:path'
import { describe, it } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import {
  AnimalStoreError,
  allMessages,
  allOrders,
  allPets,
  BETA_FEATURES,
  createAnimalStoreClient,
  type Event,
  type Message,
  nextLink,
  type Order,
  streamEvents,
  unwrap,
} from 'animal-store/client'
import { CLIENT_TYPES_FILE, generateClientTypes, servedDocument } from '../scripts/generate-client.ts'
import { bearer, build, errorBody, suiteApp, testDatabaseUrl } from './helper.ts'
import { cliKey, ROOT, runNode, startServer } from './processes.ts'
import { assertShows, codeBlocks, docSection } from './readme.ts'
import { until } from './wait.ts'

// One database: the client speaks HTTP; the operations it calls are tested on each in test/routes/.

const CLIENT_PAGE = 'docs/client.md'

/** A section of docs/client.md (client-quickstart, client-orders): its code and promised output. */
function pageQuickstart(section = 'client-quickstart'): { code: string; output: string[] } {
  const blocks = codeBlocks(docSection(CLIENT_PAGE, section))
  const code = blocks.find((block) => block.lang === 'ts')?.body
  const output = blocks.find((block) => block.lang === 'text')?.body
  assert.ok(code && output, `the ${CLIENT_PAGE} section ${section} lacks its code or its output`)
  return { code, output: output.trimEnd().split('\n') }
}

describe('Typed client: generated from the served OpenAPI document', () => {
  it(`${CLIENT_TYPES_FILE} is what npm run client:generate produces now (run it after changing the API)`, async () => {
    const checkedIn = readFileSync(join(ROOT, CLIENT_TYPES_FILE), 'utf8')
    assert.ok(checkedIn === (await generateClientTypes()), `${CLIENT_TYPES_FILE} is stale: run npm run client:generate`)
  })
})

// Each example docs/client.md shows: its file, the page's section of its code and output, what it is.
for (const [example, marker, what] of [
  ['quickstart', 'client-quickstart', 'the quickstart'],
  ['orders', 'client-orders', 'the orders example'],
] as const) {
  describe(`Typed client: ${what} of docs/client.md`, () => {
    it(`docs/client.md shows examples/${example}.ts verbatim`, () => {
      assert.equal(pageQuickstart(marker).code, readFileSync(join(ROOT, `examples/${example}.ts`), 'utf8'))
    })

    it(`runs with npx node examples/${example}.ts against a fresh server and prints what docs/client.md says`, {
      timeout: 60_000,
    }, async (t) => {
      const databaseUrl = await testDatabaseUrl(t)
      const server = await startServer(t, { DATABASE_URL: databaseUrl })
      const apiKey = await cliKey({ DATABASE_URL: databaseUrl })
      const run = await runNode([`examples/${example}.ts`], { API_KEY: apiKey, ANIMAL_STORE_URL: `${server.url}/v1` })
      assert.equal(run.code, 0, run.stderr)
      assertShows(run.stdout, pageQuickstart(marker).output, what)
    })
  })
}

describe('Typed client: the quickstart without a key', () => {
  it('says what to set (API_KEY, from the portal or keys create) and exits 1, without a stack trace', async () => {
    const run = await runNode(['examples/quickstart.ts'], { API_KEY: '', ANIMAL_STORE_URL: 'http://127.0.0.1:9/v1' })
    assert.equal(run.code, 1)
    assert.equal(run.stdout, '')
    assert.equal(
      run.stderr,
      'Set API_KEY to one of your keys, from the portal (http://127.0.0.1:9/portal) or from\n' +
        '"npx animal-store keys create you@example.com": export API_KEY=as_test_…\n',
    )
  })
})

// The tests that look only at what they made (their key's orders and messages, their animals by
// id) share one app; those that count every animal of the store have an app of their own.
const shared = suiteApp()

describe('Typed client: calls and pages', () => {
  it('allPets follows Link rel="next" to the end: every animal once, in id order, with the filter kept', async (t) => {
    // Expects the store's animals to be exactly its five: an app of its own.
    const test = await build(t)
    const { secret } = await test.newKey()
    const statuses = ['available', 'sold', 'sold', 'pending', 'sold'] as const
    for (const [i, status] of statuses.entries()) {
      const created = await test.app.inject({
        method: 'POST',
        url: '/v1/pets',
        headers: bearer(secret),
        payload: { name: `pet ${i + 1}`, categoryId: 1, status },
      })
      assert.equal(created.statusCode, 201)
    }
    const requests: string[] = []
    const fetch = injectFetch(test.app)
    const client = createAnimalStoreClient({
      baseUrl: 'http://animal-store.test/v1/',
      apiKey: secret,
      fetch: async (input, init) => {
        requests.push(new Request(input, init).url)
        return fetch(input, init)
      },
    })
    const ids = async (query?: Parameters<typeof allPets>[1]) => {
      const seen: number[] = []
      for await (const pet of allPets(client, query)) seen.push(pet.id)
      return seen
    }
    assert.deepEqual(await ids({ limit: 2 }), [1, 2, 3, 4, 5])
    assert.equal(requests.length, 3, 'three pages of two')
    assert.match(requests[1] as string, /^http:\/\/animal-store\.test\/v1\/pets\?limit=2&cursor=/)
    assert.deepEqual(await ids({ status: 'sold', limit: 1 }), [2, 3, 5])
    assert.deepEqual(await ids(), [1, 2, 3, 4, 5])
  })

  it('unwrap throws an AnimalStoreError with the API code, status and request id', async () => {
    const test = await shared()
    const client = createAnimalStoreClient({
      baseUrl: 'http://animal-store.test/v1',
      apiKey: 'as_test_wrong',
      fetch: injectFetch(test.app),
    })
    const result = await client.GET('/pets')
    assert.equal(result.response.status, 401)
    assert.throws(
      () => unwrap(result),
      (error) =>
        error instanceof AnimalStoreError &&
        error.code === 'invalid_api_key' &&
        error.status === 401 &&
        typeof error.requestId === 'string',
    )
  })

  it('PATCH changes an animal; with If-Match from the ETag, a stale version is refused (412)', async () => {
    const test = await shared()
    const { secret } = await test.newKey()
    const client = createAnimalStoreClient({
      baseUrl: 'http://animal-store.test/v1',
      apiKey: secret,
      fetch: injectFetch(test.app),
    })
    const rex = unwrap(await client.POST('/pets', { body: { name: 'Rex', categoryId: 1 } }))
    const read = await client.GET('/pets/{petId}', { params: { path: { petId: rex.id } } })
    const etag = read.response.headers.get('etag') as string
    const path = { petId: rex.id }
    const sold = await client.PATCH('/pets/{petId}', { params: { path }, body: { status: 'sold' } })
    assert.deepEqual(unwrap(sold), { ...rex, status: 'sold' })
    const stale = await client.PATCH('/pets/{petId}', {
      params: { path, header: { 'if-match': etag } },
      body: { name: 'Max' },
    })
    assert.equal(stale.response.status, 412)
    assert.throws(
      () => unwrap(stale),
      (error) => error instanceof AnimalStoreError && error.code === 'precondition_failed',
    )
  })

  it('nextLink reads the rel="next" target among several links, and null when there is none', () => {
    assert.equal(nextLink('<https://a.test/v1/pets?cursor=x>; rel="next"'), 'https://a.test/v1/pets?cursor=x')
    assert.equal(nextLink('<https://a.test/v1/pets>; rel="successor-version"'), null)
    assert.equal(nextLink('<https://a.test/1>; rel="prev", <https://a.test/3>; rel=next'), 'https://a.test/3')
    assert.equal(nextLink(null), null)
  })
})

describe('Typed client: beta operations (orders)', () => {
  it('BETA_FEATURES names exactly the operations the served document marks x-stability, with their feature', async () => {
    const document = JSON.parse(await servedDocument()) as {
      paths: Record<string, Record<string, { 'x-stability'?: string; description?: string }>>
    }
    const marked: Record<string, string> = {}
    for (const [path, operations] of Object.entries(document.paths)) {
      for (const operation of Object.values(operations)) {
        if (!operation['x-stability']) continue
        // The badge names the opt-in: "send `Animal-Store-Beta: <feature>`".
        const feature = /Animal-Store-Beta: ([\w-]+)/.exec(operation.description ?? '')?.[1]
        assert.ok(feature, `${path}: a beta operation whose description names no feature`)
        assert.ok(marked[path] === undefined || marked[path] === feature, `${path}: two features`)
        marked[path] = feature
      }
    }
    assert.ok(Object.keys(marked).length >= 5, 'the document marks no beta operations')
    assert.deepEqual({ ...BETA_FEATURES }, marked)
  })

  it('covers every store operation and sends Animal-Store-Beta: orders for them, and only for them', async (t) => {
    // Checks the inventory, which counts every animal of the store: an app of its own.
    const test = await build(t)
    const { secret } = await test.newKey()
    const sent: { method: string; path: string; beta: string | null }[] = []
    const client = recordingClient(test.app, secret, sent)
    const rex = unwrap(await client.POST('/pets', { body: { name: 'Rex', categoryId: 1 } }))
    const tom = unwrap(await client.POST('/pets', { body: { name: 'Tom', categoryId: 1 } }))

    const placed = await client.POST('/store/orders', { body: { petId: rex.id } })
    assert.equal(placed.response.status, 201)
    const order = unwrap(placed)
    assert.match(order.id, /^ord_/)
    assert.equal(order.status, 'placed')
    assert.ok(placed.response.headers.get('location')?.endsWith(`/v1/store/orders/${order.id}`))
    assert.deepEqual(
      unwrap(await client.GET('/store/orders/{orderId}', { params: { path: { orderId: order.id } } })),
      order,
    )
    assert.deepEqual(unwrap(await client.GET('/store/inventory')), { available: 1, pending: 1, sold: 0 })
    const completed = unwrap(
      await client.POST('/store/orders/{orderId}/complete', { params: { path: { orderId: order.id } } }),
    )
    assert.equal(completed.status, 'completed')
    const second = unwrap(await client.POST('/store/orders', { body: { petId: tom.id } }))
    const canceled = unwrap(
      await client.POST('/store/orders/{orderId}/cancel', { params: { path: { orderId: second.id } } }),
    )
    assert.equal(canceled.status, 'canceled')
    const listed = unwrap(await client.GET('/store/orders', { params: { query: { limit: 10 } } }))
    assert.deepEqual(
      listed.map((o) => [o.id, o.status]),
      [
        [second.id, 'canceled'],
        [order.id, 'completed'],
      ],
    )
    assert.deepEqual(unwrap(await client.GET('/store/inventory')), { available: 1, pending: 0, sold: 1 })

    const store = sent.filter((request) => request.path.startsWith('/v1/store/'))
    // All six: placeOrder, getOrder, getInventory, completeOrder, cancelOrder, listOrders.
    const operations = new Set(store.map((r) => `${r.method} ${r.path.replace(/ord_\w+/, '{orderId}').split('?')[0]}`))
    assert.deepEqual([...operations].sort(), [
      'GET /v1/store/inventory',
      'GET /v1/store/orders',
      'GET /v1/store/orders/{orderId}',
      'POST /v1/store/orders',
      'POST /v1/store/orders/{orderId}/cancel',
      'POST /v1/store/orders/{orderId}/complete',
    ])
    for (const request of store) assert.equal(request.beta, 'orders', `${request.method} ${request.path}`)
    for (const request of sent.filter((r) => !r.path.startsWith('/v1/store/')))
      assert.equal(request.beta, null, `${request.method} ${request.path} carries the beta header`)

    // What the client spares its users: the same call without the header is refused.
    const bare = await test.app.inject({ url: '/v1/store/inventory', headers: bearer(secret) })
    assert.equal(bare.statusCode, 400)
    assert.equal(errorBody(bare).code, 'beta_opt_in_required')
  })

  it('keeps the beta features a caller sends and adds orders to them', async () => {
    const test = await shared()
    const { secret } = await test.newKey()
    const sent: { method: string; path: string; beta: string | null }[] = []
    const client = recordingClient(test.app, secret, sent)
    const inventory = await client.GET('/store/inventory', { headers: { 'Animal-Store-Beta': 'something-else' } })
    assert.equal(inventory.response.status, 200)
    assert.equal(sent[0]?.beta, 'something-else, orders')
    unwrap(await client.GET('/store/inventory', { headers: { 'Animal-Store-Beta': 'ORDERS' } }))
    assert.equal(sent[1]?.beta, 'ORDERS')
  })

  it('refusals come back as AnimalStoreError codes: pet_not_found, pet_not_available, order_conflict, order_not_found', async () => {
    const test = await shared()
    const { secret } = await test.newKey()
    const client = recordingClient(test.app, secret, [])
    const code = async (
      call: Promise<{ data?: unknown; error?: { code: string; message: string; status: number }; response: Response }>,
    ) => {
      try {
        unwrap(await call)
      } catch (error) {
        assert.ok(error instanceof AnimalStoreError)
        return `${error.status} ${error.code}`
      }
      return 'no error'
    }
    const sold = unwrap(await client.POST('/pets', { body: { name: 'Sold', categoryId: 1, status: 'sold' } }))
    const rex = unwrap(await client.POST('/pets', { body: { name: 'Rex', categoryId: 1 } }))
    assert.equal(await code(client.POST('/store/orders', { body: { petId: 999 } })), '404 pet_not_found')
    assert.equal(await code(client.POST('/store/orders', { body: { petId: sold.id } })), '409 pet_not_available')
    const order = unwrap(await client.POST('/store/orders', { body: { petId: rex.id } }))
    unwrap(await client.POST('/store/orders/{orderId}/cancel', { params: { path: { orderId: order.id } } }))
    assert.equal(
      await code(client.POST('/store/orders/{orderId}/complete', { params: { path: { orderId: order.id } } })),
      '409 order_conflict',
    )
    assert.equal(
      await code(client.GET('/store/orders/{orderId}', { params: { path: { orderId: 'ord_0000000000000000' } } })),
      '404 order_not_found',
    )
  })

  it('allOrders follows Link rel="next" to the end: every order once, newest first, with the filters kept', async () => {
    const test = await shared()
    const { secret } = await test.newKey()
    const sent: { method: string; path: string; beta: string | null }[] = []
    const client = recordingClient(test.app, secret, sent)
    const orders: Order[] = []
    for (const name of ['a', 'b', 'c', 'd', 'e']) {
      const pet = unwrap(await client.POST('/pets', { body: { name, categoryId: 1 } }))
      orders.push(unwrap(await client.POST('/store/orders', { body: { petId: pet.id } })))
    }
    for (const order of orders.slice(0, 3))
      unwrap(await client.POST('/store/orders/{orderId}/cancel', { params: { path: { orderId: order.id } } }))
    const ids = async (query?: Parameters<typeof allOrders>[1]) => {
      const seen: string[] = []
      for await (const order of allOrders(client, query)) seen.push(order.id)
      return seen
    }
    const newestFirst = orders.map((o) => o.id).reverse()
    sent.length = 0
    assert.deepEqual(await ids({ limit: 2 }), newestFirst)
    assert.equal(sent.length, 3, 'three pages of at most two')
    assert.match(sent[1]?.path as string, /^\/v1\/store\/orders\?limit=2&cursor=/)
    assert.deepEqual(await ids({ status: 'canceled', limit: 1 }), newestFirst.slice(2))
    assert.deepEqual(await ids({ petId: orders[1]?.petId, limit: 1 }), [orders[1]?.id])
    assert.deepEqual(await ids(), newestFirst)
  })
})

describe('Typed client: messages, webhook endpoints and events (experimental)', () => {
  it('allMessages walks every page newest first, keeping the status filter; getMessage reads one back', async () => {
    const test = await shared()
    const { secret } = await test.newKey()
    const sent: { method: string; path: string; beta: string | null }[] = []
    const client = recordingClient(test.app, secret, sent)
    const messages = []
    for (const message of ['a', 'b', 'c']) messages.push(unwrap(await client.POST('/messages', { body: { message } })))
    const texts = async (query?: Parameters<typeof allMessages>[1]) => {
      const seen: string[] = []
      for await (const message of allMessages(client, query)) seen.push(message.message)
      return seen
    }
    sent.length = 0
    assert.deepEqual(await texts({ limit: 2 }), ['c', 'b', 'a'])
    assert.equal(sent.length, 2)
    // No endpoint is subscribed: the delivery loop marks them undelivered within a second.
    await until('all undelivered', async () => (await texts({ status: 'undelivered' })).length === 3)
    assert.deepEqual(await texts({ status: 'undelivered', limit: 1 }), ['c', 'b', 'a'])
    assert.deepEqual(await texts({ status: 'queued' }), [])
    const id = messages[0]?.id as string
    assert.deepEqual(unwrap(await client.GET('/messages/{messageId}', { params: { path: { messageId: id } } })), {
      ...messages[0],
      status: 'undelivered',
      statusReason: 'no enabled endpoint subscribed to message.created',
    })
    for (const request of sent) assert.equal(request.beta, null, request.path)
  })

  it('covers every webhook and event operation and sends Animal-Store-Beta: webhooks for them, and only for them', async (t) => {
    const test = await build(t, { EXPERIMENTAL_FEATURES: 'webhooks' })
    const { secret } = await test.newKey()
    const sent: { method: string; path: string; beta: string | null }[] = []
    const client = recordingClient(test.app, secret, sent)
    const created = await client.POST('/webhook-endpoints', {
      body: { url: 'https://example.com/hooks', events: ['message.created'] },
    })
    assert.equal(created.response.status, 201)
    const endpoint = unwrap(created)
    assert.match(endpoint.secret, /^whsec_/)
    const path = { endpointId: endpoint.id }
    assert.equal(unwrap(await client.GET('/webhook-endpoints')).length, 1)
    assert.equal(unwrap(await client.GET('/webhook-endpoints/{endpointId}', { params: { path } })).id, endpoint.id)
    const patched = await client.PATCH('/webhook-endpoints/{endpointId}', {
      params: { path },
      body: { description: 'Order sync' },
      headers: { 'content-type': 'application/merge-patch+json' },
    })
    assert.equal(unwrap(patched).description, 'Order sync')
    const rotated = unwrap(await client.POST('/webhook-endpoints/{endpointId}/rotate-secret', { params: { path } }))
    assert.notEqual(rotated.secret, endpoint.secret)
    assert.match(rotated.previousSecretExpiresAt, /Z$/)
    unwrap(await client.POST('/messages', { body: { message: 'hi' } }))
    const [delivery] = unwrap(
      await client.GET('/webhook-endpoints/{endpointId}/deliveries', { params: { path, query: { limit: 5 } } }),
    )
    assert.ok(delivery)
    const resent = await client.POST('/webhook-endpoints/{endpointId}/deliveries/{deliveryId}/redeliver', {
      params: { path: { ...path, deliveryId: delivery.id } },
    })
    // 409 delivery_in_progress when the app's own delivery loop is attempting it at that moment:
    // either answer comes from the operation itself, reached with the opt-in header.
    assert.ok(
      resent.response.status === 202 || resent.error?.code === 'delivery_in_progress',
      `redeliver answered ${resent.response.status}`,
    )
    const probe = await client.POST('/webhook-endpoints/{endpointId}/test', { params: { path } })
    assert.equal(probe.response.status, 202)
    const event = unwrap(probe)
    assert.equal(event.type, 'webhook.test')
    const recovery = unwrap(
      await client.POST('/webhook-endpoints/{endpointId}/recover', {
        params: { path },
        body: { since: new Date(Date.now() + 60_000).toISOString() },
      }),
    )
    assert.deepEqual(recovery, { queued: 0, more: false })
    const events = unwrap(await client.GET('/events', { params: { query: { type: 'webhook.*,message.created' } } }))
    assert.deepEqual(
      events.map((e) => e.type),
      ['webhook.test', 'message.created'],
    )
    const eventId = event.id
    assert.deepEqual(unwrap(await client.GET('/events/{eventId}', { params: { path: { eventId } } })), event)
    const deleted = await client.DELETE('/webhook-endpoints/{endpointId}', { params: { path } })
    assert.equal(deleted.response.status, 204)
    try {
      unwrap(await client.GET('/webhook-endpoints/{endpointId}', { params: { path } }))
      assert.fail('a deleted endpoint was found')
    } catch (error) {
      assert.ok(error instanceof AnimalStoreError)
      assert.equal(error.code, 'webhook_endpoint_not_found')
    }
    const experimental = (path: string) => path.startsWith('/v1/webhook-endpoints') || path.startsWith('/v1/events')
    const hooks = sent.filter((request) => experimental(request.path))
    assert.equal(hooks.length, 13)
    for (const request of hooks) assert.equal(request.beta, 'webhooks', `${request.method} ${request.path}`)
    for (const request of sent.filter((r) => !experimental(r.path)))
      assert.equal(request.beta, null, `${request.method} ${request.path}`)
  })
  it('streamEvents replays the events after lastEventId, then yields each new one as it happens, until its signal aborts', async (t) => {
    const test = await build(t, { EXPERIMENTAL_FEATURES: 'webhooks' })
    const api = await test.app.listen({ port: 0, host: '127.0.0.1' })
    const { secret } = await test.newKey()
    const client = createAnimalStoreClient({ baseUrl: `${api}/v1`, apiKey: secret })
    const send = async (message: string) => unwrap(await client.POST('/messages', { body: { message } }))
    for (const message of ['a', 'b', 'c']) await send(message)
    const [, , first] = unwrap(await client.GET('/events', { params: { query: { type: 'message.created' } } }))
    const stop = new AbortController()
    const seen: Event[] = []
    const opened: boolean[] = []
    const reading = (async () => {
      const options = { lastEventId: first?.id as string, signal: stop.signal }
      for await (const event of streamEvents(client, { ...options, onOpen: (open) => opened.push(open.reconnected) }))
        seen.push(event)
    })()
    const texts = () => seen.map((event) => (event.data as Message).message)
    await until('b and c replayed', () => texts().length === 2)
    await send('d')
    await until('d as it happens', () => texts().length === 3)
    stop.abort()
    await reading
    assert.deepEqual(texts(), ['b', 'c', 'd'])
    assert.deepEqual(opened, [false])
    const stored = unwrap(
      await client.GET('/events/{eventId}', { params: { path: { eventId: seen[2]?.id as string } } }),
    )
    assert.deepEqual(seen[2], stored)
  })

  it('streamEvents started on an account with no event loses none of those made while it reconnects', async (t) => {
    const test = await build(t, { EXPERIMENTAL_FEATURES: 'webhooks', EVENT_STREAM_HEARTBEAT_SECONDS: '60' })
    const api = await test.app.listen({ port: 0, host: '127.0.0.1' })
    const { secret } = await test.newKey()
    const client = createAnimalStoreClient({ baseUrl: `${api}/v1`, apiKey: secret })
    const send = async (message: string) => unwrap(await client.POST('/messages', { body: { message } }))
    const stop = new AbortController()
    const seen: string[] = []
    const opened: boolean[] = []
    const timeline: string[] = []
    let lost: Promise<unknown> | null = null
    const reading = (async () => {
      // A silent stream is given up after 300 ms: the connection drops, with no event seen yet.
      const options = { signal: stop.signal, idleTimeoutMs: 300, retryMs: 400 }
      const events = streamEvents(client, {
        ...options,
        onOpen: (open) => {
          opened.push(open.reconnected)
          timeline.push(open.reconnected ? 'reconnected' : 'opened')
        },
        // Made while the client is away, before it reconnects (at least 200 ms later).
        onLost: () => {
          lost ??= Promise.all(['away 1', 'away 2', 'away 3'].map((text, i) => sleep(i * 5).then(() => send(text))))
        },
      })
      for await (const event of events) {
        seen.push((event.data as Message).message)
        timeline.push('event')
      }
    })()
    try {
      await until('the three made while away', () => seen.length >= 3, { timeoutMs: 15_000 })
      await lost
      await send('back')
      await until('the one made after', () => seen.includes('back'), { timeoutMs: 15_000 })
    } finally {
      stop.abort()
      await reading
    }
    assert.deepEqual(seen.slice(0, 3).sort(), ['away 1', 'away 2', 'away 3'])
    assert.equal(seen.at(-1), 'back')
    assert.equal(new Set(seen).size, seen.length, 'none twice')
    assert.equal(opened[0], false)
    assert.ok(opened.includes(true))
    // The caught-up event comes with the connection it resumes, after onOpen says so.
    assert.ok(timeline.indexOf('reconnected') < timeline.indexOf('event'), timeline.join(' '))
  })

  it('streamEvents gives up on a server that takes the connection and never answers: a TimeoutError', async (t) => {
    const sockets = new Set<Socket>()
    const silent = createServer((socket) => sockets.add(socket.on('error', () => {})))
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve))
    t.after(() => {
      for (const socket of sockets) socket.destroy()
      return new Promise((resolve) => silent.close(resolve))
    })
    const baseUrl = `http://127.0.0.1:${(silent.address() as AddressInfo).port}/v1`
    const client = createAnimalStoreClient({ baseUrl, apiKey: 'as_test_any' })
    const reading = (async () => {
      for await (const _ of streamEvents(client, { idleTimeoutMs: 300 })) assert.fail('an event')
    })()
    const outcome = await Promise.race([
      reading.then(
        () => null,
        (error: Error) => error,
      ),
      sleep(5000, 'waiting'),
    ])
    assert.notEqual(outcome, 'waiting', 'still waiting for an answer 5 s later')
    assert.equal((outcome as Error | null)?.name, 'TimeoutError')
    assert.match((outcome as Error).message, /nothing received for 0\.3 s/)
  })

  it('streamEvents throws AnimalStoreError last_event_id_unknown (410) for an event that is not kept', async (t) => {
    const test = await build(t, { EXPERIMENTAL_FEATURES: 'webhooks' })
    const api = await test.app.listen({ port: 0, host: '127.0.0.1' })
    const { secret } = await test.newKey()
    const client = createAnimalStoreClient({ baseUrl: `${api}/v1`, apiKey: secret })
    await assert.rejects(
      async () => {
        for await (const _ of streamEvents(client, { lastEventId: 'evt_neverExisted0000' })) assert.fail('an event')
      },
      (error) => error instanceof AnimalStoreError && error.code === 'last_event_id_unknown' && error.status === 410,
    )
  })
})

/** A client answered by the app in-process, noting each request's method, path and beta header. */
function recordingClient(
  app: Awaited<ReturnType<typeof build>>['app'],
  apiKey: string,
  sent: { method: string; path: string; beta: string | null }[],
) {
  const fetch = injectFetch(app)
  return createAnimalStoreClient({
    baseUrl: 'http://animal-store.test/v1',
    apiKey,
    fetch: async (input, init) => {
      const request = new Request(input, init)
      const url = new URL(request.url)
      sent.push({
        method: request.method,
        path: url.pathname + url.search,
        beta: request.headers.get('animal-store-beta'),
      })
      return fetch(request)
    },
  })
}

/** A fetch that answers from the app in-process (app.inject), for client tests without a port. */
function injectFetch(app: Awaited<ReturnType<typeof build>>['app']): typeof fetch {
  return async (input, init) => {
    const request = new Request(input, init)
    const response = await app.inject({
      method: request.method as 'GET',
      url: new URL(request.url).pathname + new URL(request.url).search,
      headers: Object.fromEntries(request.headers),
      ...(request.body && { payload: await request.text() }),
    })
    return new Response(response.body || null, {
      status: response.statusCode,
      headers: response.headers as Record<string, string>,
    })
  }
}
