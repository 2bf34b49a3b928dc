/**
 * Hostile input: generated bodies, query strings, path ids and headers for every operation
 * (fast-check), plus raw-socket abuse (invalid UTF-8, slow clients, connection floods).
 * Never a 5xx, always the Error shape, and the state afterwards is exactly what the accepted
 * requests made it.
 */
import assert from 'node:assert/strict'
import { connect, type Socket } from 'node:net'
import { describe, it } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import fc from 'fast-check'
import type { InjectOptions, LightMyRequestResponse } from 'fastify'
import type { Message } from '../src/schemas/messages.ts'
import type { Order } from '../src/schemas/orders.ts'
import type { Pet } from '../src/schemas/pets.ts'
import { EVENT_TYPES, type WebhookEndpoint } from '../src/schemas/webhooks.ts'
import {
  asSent,
  bearer,
  build,
  DATABASE,
  errorBody,
  plain,
  rawExchange,
  serverConnections,
  suiteApp,
  type TestApp,
} from './helper.ts'
import { until } from './wait.ts'

const RUNS = Number(process.env.HOSTILE_RUNS ?? 250)

/** Every answer is below 500; an error is exactly {code, message, status} and shows no internals. */
function checkAnswer(response: LightMyRequestResponse, allowed: number[], method = 'GET'): void {
  assert.ok(allowed.includes(response.statusCode), `unexpected ${response.statusCode}: ${response.body.slice(0, 300)}`)
  if (response.statusCode >= 400 && method !== 'HEAD') {
    const body = errorBody(response)
    assert.doesNotMatch(body.message, /\bat \S+:\d+|node_modules|\/src\/|SQLITE|syntax error at|relation "/i)
  }
}

const text = fc.oneof(
  fc.string({ unit: 'binary', maxLength: 300 }),
  fc.string({ unit: 'grapheme', maxLength: 40 }),
  fc.constantFrom('', ' ', '\u0000', '__proto__', 'constructor', '💥'.repeat(150), 'a'.repeat(10_001), '\uD800'),
)
/** Percent-encodes any string, lone surrogates included (they become U+FFFD). */
const encode = (s: string) => encodeURIComponent(s.toWellFormed())
const int64Edges = fc.constantFrom(
  '0',
  '-1',
  '9007199254740991',
  '9007199254740992',
  '9223372036854775807',
  '9223372036854775808',
  '-9223372036854775808',
  '-9223372036854775809',
  '1e308',
  '1.0',
  '-0',
)
/** Query strings of up to four of `names` (repeated ones among them), each with one of `values`. */
const namedParameters = (names: string[], values: fc.Arbitrary<string>) =>
  fc
    .array(fc.tuple(fc.constantFrom(...names), values), { maxLength: 4 })
    .map((pairs) => pairs.map(([k, v]) => `${encode(k)}=${encode(v)}`).join('&'))
// JSON.rawJSON (Node 21+) is not in TypeScript's lib yet.
const { rawJSON } = JSON as unknown as { rawJSON: (text: string) => unknown }
/** A JSON number written out verbatim (JSON.rawJSON), so that it can be any size. */
const rawNumber = fc
  .oneof(
    int64Edges,
    fc.bigInt({ min: -(2n ** 70n), max: 2n ** 70n }).map(String),
    fc.double().filter(Number.isFinite).map(String),
  )
  .map((n) => rawJSON(n))
const anyValue = fc.oneof(text, rawNumber, fc.boolean(), fc.constant(null), fc.jsonValue({ maxDepth: 3 }))
const hostileKey = fc.oneof(fc.constantFrom('__proto__', 'constructor', 'prototype', 'id', 'toString'), text)

/** An object shaped roughly like the operation's body, with hostile values and extra keys. */
const bodyLike = (fields: Record<string, fc.Arbitrary<unknown>>) =>
  fc
    .tuple(fc.record(fields, { requiredKeys: [] }), fc.dictionary(hostileKey, anyValue, { maxKeys: 3 }))
    .map(([known, extra]) => JSON.stringify({ ...extra, ...known }))

/** A pet's fields with hostile values, among extra keys: POSTed as a new pet, or as a patch. */
const hostilePetFields = {
  weight: 4,
  arbitrary: bodyLike({
    name: fc.oneof(text, anyValue),
    categoryId: fc.oneof(rawNumber, anyValue),
    status: fc.oneof(fc.constantFrom('available', 'pending', 'sold'), anyValue),
  }),
}
/** Bodies that are no such object: any JSON (`maxDepth` deep), or bytes that are no JSON at all. */
const notAnObject = (maxDepth: number) => [
  { weight: 1, arbitrary: fc.json({ maxDepth }) },
  { weight: 1, arbitrary: fc.string({ unit: 'binary', maxLength: 200 }) },
]
const petBody = fc.oneof(
  hostilePetFields,
  {
    weight: 2,
    arbitrary: fc
      .record({ name: fc.string({ minLength: 1, maxLength: 30 }), categoryId: fc.integer({ min: 1 }) })
      .map((b) => JSON.stringify(b)),
  },
  ...notAnObject(4),
  {
    weight: 1,
    arbitrary: fc
      .nat({ max: 50_000 })
      .map((depth) => `{"name":${'['.repeat(depth)}${']'.repeat(depth)},"categoryId":1}`),
  },
  { weight: 1, arbitrary: fc.nat({ max: 50_000 }).map((depth) => `${'{"a":'.repeat(depth)}1${'}'.repeat(depth)}`) },
)
/** A merge patch of a pet: hostile fields and values, valid patches, nulls, and bodies that are not objects. */
const petPatchBody = fc.oneof(
  hostilePetFields,
  {
    weight: 2,
    arbitrary: fc
      .record(
        {
          name: fc.string({ minLength: 1, maxLength: 30 }),
          categoryId: fc.integer({ min: 1 }),
          status: fc.constantFrom('available', 'sold'),
        },
        { requiredKeys: [] },
      )
      .map((b) => JSON.stringify(b)),
  },
  ...notAnObject(4),
)
const patchContentType = fc.oneof(
  { weight: 3, arbitrary: fc.constant('application/merge-patch+json') },
  { weight: 3, arbitrary: fc.constantFrom('application/json', 'APPLICATION/JSON', 'text/plain', '') },
  { weight: 1, arbitrary: fc.constantFrom('application/merge-patch+json; charset=latin1', 'application/merge-patch') },
)
const messageBody = fc.oneof(
  { weight: 4, arbitrary: bodyLike({ message: fc.oneof(text, anyValue) }) },
  { weight: 2, arbitrary: fc.string({ minLength: 1, maxLength: 50 }).map((message) => JSON.stringify({ message })) },
  { weight: 1, arbitrary: fc.json({ maxDepth: 4 }) },
)
const contentType = fc.oneof(
  { weight: 6, arbitrary: fc.constant('application/json') },
  {
    weight: 1,
    arbitrary: fc.constantFrom(
      'application/json; charset=utf-8',
      'APPLICATION/JSON',
      'text/plain',
      'application/x-www-form-urlencoded',
      'application/json; charset=latin1',
      '',
      'application/jsonx',
    ),
  },
)
/** Header values a client can actually send: visible ASCII and spaces. */
const headerValue = fc.string({
  unit: fc.constantFrom(
    ...' !"#$%&\'()*+,-./0123456789:;<=>?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrstuvwxyz{|}~',
  ),
  maxLength: 300,
})
const extraHeaders = fc.dictionary(
  fc.oneof(
    fc.constantFrom(
      'idempotency-key',
      'x-request-id',
      'accept',
      'accept-encoding',
      'x-forwarded-for',
      'x-forwarded-host',
      'cookie',
      'range',
      'if-none-match',
      'transfer-encoding-x',
    ),
    fc.stringMatching(/^x-[a-z0-9-]{1,30}$/),
  ),
  headerValue,
  { maxKeys: 4 },
)
const authorization = (secret: string) =>
  fc.oneof(
    { weight: 8, arbitrary: fc.constant(`Bearer ${secret}`) },
    { weight: 1, arbitrary: headerValue },
    {
      weight: 1,
      arbitrary: fc.constantFrom(
        'Bearer',
        'Bearer  ',
        `bearer ${secret}`,
        `Bearer ${secret}x`,
        `Basic ${secret}`,
        `Bearer ${secret.replace('test', 'live')}`,
      ),
    },
  )

async function allOrders(app: TestApp, accountId: number): Promise<Order[]> {
  const orders: Order[] = []
  for (let before: number | undefined; ; ) {
    const page = await app.app.store.listOrders({ accountId, limit: 100, before })
    orders.push(...plain(page.orders))
    if (page.next === null) return orders
    before = page.next
  }
}

async function allPets(app: TestApp): Promise<Pet[]> {
  const pets: Pet[] = []
  for (let afterId = 0; ; ) {
    const page = await app.app.store.listPets({ limit: 100, afterId })
    pets.push(...plain(page.pets))
    if (page.nextAfterId === null) return pets
    afterId = page.nextAfterId
  }
}

/** The request log on, as in production (LOG_LEVEL=info): hostile input goes through it too, and every line must be JSON. */
const LOGS = { captureLogs: true }

/** The port of `test`'s app on 127.0.0.1; the first call starts it listening (a shared app listens once). */
async function portOf(test: TestApp): Promise<number> {
  if (!test.app.server.listening) await test.app.listen({ port: 0, host: '127.0.0.1' })
  return (test.app.server.address() as { port: number }).port
}

/**
 * The animals made after `mark` (the newest id of the store then: see newestPetId), in id order:
 * what a test made, on an app whose earlier tests made theirs.
 */
async function petsSince(test: TestApp, mark: number): Promise<Pet[]> {
  return (await test.app.store.listPets({ limit: 10, afterId: mark })).pets
}
const newestPetId = async (test: TestApp) => (await allPets(test)).at(-1)?.id ?? 0

/** A whole `POST /v1/pets` as bytes on the wire, to send raw (pipelined, half-closed…). */
function rawPostPet(secret: string, name: string): string {
  const body = JSON.stringify({ name, categoryId: 1 })
  return (
    `POST /v1/pets HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${secret}\r\n` +
    `Content-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`
  )
}

/** An opt-in header for a beta or experimental `feature`: usually right, sometimes missing or hostile. */
const optIn = (feature: string) =>
  fc.oneof(
    { weight: 8, arbitrary: fc.constant<string | undefined>(feature) },
    { weight: 1, arbitrary: fc.constant(undefined) },
    { weight: 1, arbitrary: headerValue },
  )
const withOptIn = (headers: Record<string, string>, value: string | undefined, auth: string) => ({
  ...headers,
  authorization: auth,
  ...(value !== undefined && { 'animal-store-beta': value }),
})

/**
 * Generated requests to `app` with `secret`'s key: `send` checks each answer (checkAnswer) and
 * counts it by status; `posts` sends generated bodies to a create operation and hands each new
 * resource (not a replay) to `keep`.
 */
function generatedClient(app: TestApp, secret: string) {
  const counts = { requests: 0, byStatus: {} as Record<number, number> }
  const send = async (options: InjectOptions, allowed: number[]) => {
    const response = await app.app.inject(options)
    counts.requests++
    counts.byStatus[response.statusCode] = (counts.byStatus[response.statusCode] ?? 0) + 1
    checkAnswer(response, allowed, options.method)
    return response
  }
  const posts = (
    url: string,
    body: fc.Arbitrary<string>,
    { created, also = [], feature, numRuns }: { created: number; also?: number[]; feature?: string; numRuns: number },
    // biome-ignore lint/suspicious/noExplicitAny: each caller reads its own resource from the JSON
    keep: (resource: any) => void,
  ) =>
    fc.assert(
      fc.asyncProperty(
        body,
        contentType,
        authorization(secret),
        feature ? optIn(feature) : fc.constant(undefined),
        extraHeaders,
        async (payload, type, auth, opted, headers) => {
          const response = await send(
            { method: 'POST', url, headers: { ...withOptIn(headers, opted, auth), 'content-type': type }, payload },
            // 412: a generated `If-None-Match: *` (the collection exists, RFC 9110 §13.1.2).
            [created, 400, 401, 409, 412, 413, 415, 422, ...also],
          )
          if (response.statusCode === created && response.headers['idempotent-replayed'] !== 'true')
            keep(response.json())
        },
      ),
      { numRuns },
    )
  return { counts, send, posts }
}

describe(`Hostile input, generated by fast-check (${DATABASE})`, () => {
  it('never answers 5xx to generated requests on every operation, and stores exactly what it accepted', {
    timeout: 300_000,
  }, async (t) => {
    const app = await build(t, { RATE_LIMIT: '0', AUTH_FAILURE_LIMIT: '0' }, LOGS)
    const { secret, accountId } = await app.newKey()
    const accepted = { pets: [] as Pet[], messages: [] as Message[] }
    const { counts, send, posts } = generatedClient(app, secret)
    await posts('/v1/pets', petBody, { created: 201, numRuns: RUNS * 2 }, (pet) => accepted.pets.push(pet))
    await posts('/v1/messages', messageBody, { created: 202, numRuns: RUNS }, (m) => accepted.messages.push(m))
    const queryPart = fc.oneof(
      fc.webQueryParameters(),
      namedParameters(['limit', 'status', 'cursor', 'offset', 'limit[]', '__proto__'], fc.oneof(text, int64Edges)),
      fc.string({ unit: 'binary-ascii', maxLength: 100 }).map((s) => encodeURI(s)),
    )
    await fc.assert(
      fc.asyncProperty(queryPart, authorization(secret), extraHeaders, async (query, auth, headers) => {
        await send(
          { method: 'GET', url: `/v1/pets?${query}`, headers: { ...headers, authorization: auth } },
          // 304: a generated `If-None-Match: *` matches the page.
          [200, 304, 400, 401],
        )
      }),
      { numRuns: RUNS },
    )
    const petId = fc.oneof(
      int64Edges,
      fc.bigInt().map(String),
      fc.integer({ min: 1, max: 5 }).map(String),
      text.map(encode),
      fc.webSegment(),
    )
    await fc.assert(
      fc.asyncProperty(petId, authorization(secret), extraHeaders, async (id, auth, headers) => {
        await send(
          { method: 'GET', url: `/v1/pets/${id}`, headers: { ...headers, authorization: auth } },
          [200, 304, 400, 401, 404],
        )
      }),
      { numRuns: RUNS },
    )
    // updatePet: generated patches, ids and conditions (a stale or generated If-Match among them).
    const current = new Map(accepted.pets.map((pet) => [pet.id, pet]))
    const etags = fc.oneof(
      headerValue,
      fc.constantFrom('*', '"1-1"', '"1-2"', 'W/"1-1"', '"2-1", "1-1"'),
      fc.integer({ min: 1, max: 5 }).map((id) => `"${id}-${1 + (id % 3)}"`),
    )
    const patchHeaders = fc.record({ 'if-match': etags, 'if-none-match': etags }, { requiredKeys: [] })
    await fc.assert(
      fc.asyncProperty(
        petPatchBody,
        patchContentType,
        fc.oneof({ weight: 4, arbitrary: fc.integer({ min: 1, max: 5 }).map(String) }, { weight: 1, arbitrary: petId }),
        authorization(secret),
        fc.tuple(extraHeaders, patchHeaders),
        async (payload, type, id, auth, [headers, conditions]) => {
          const response = await send(
            {
              method: 'PATCH',
              url: `/v1/pets/${id}`,
              headers: { ...headers, ...conditions, authorization: auth, 'content-type': type },
              payload,
            },
            // 409: pending_by_order_only (no order holds a pet here).
            [200, 400, 401, 404, 409, 412, 413, 415],
          )
          if (response.statusCode === 200) {
            const pet = response.json() as Pet
            current.set(pet.id, pet)
          }
        },
      ),
      { numRuns: RUNS },
    )
    accepted.pets = [...current.values()]
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom('GET', 'POST', 'PUT', 'DELETE', 'PATCH', 'OPTIONS', 'HEAD'),
        fc.webPath(),
        extraHeaders,
        async (method, path, headers) => {
          await send(
            { method: method as 'GET', url: path || '/', headers },
            // 302: GET / leads to the portal.
            [200, 201, 202, 302, 304, 400, 401, 404, 405, 412, 413, 415],
          )
        },
      ),
      { numRuns: RUNS },
    )

    // The store operations (beta): the header usually right, sometimes missing or hostile.
    const beta = optIn('orders')
    // What the accepted requests made: the orders as last answered, and each pet's status.
    const orders = new Map<string, Order>()
    const petStatus = new Map(accepted.pets.map((pet) => [pet.id, pet.status]))
    const maxPetId = Math.max(1, ...accepted.pets.map((pet) => pet.id))
    const orderBody = fc.oneof(
      { weight: 4, arbitrary: fc.integer({ min: 1, max: maxPetId + 2 }).map((petId) => JSON.stringify({ petId })) },
      {
        weight: 3,
        arbitrary: bodyLike({ petId: fc.oneof(rawNumber, anyValue, fc.integer({ min: 1, max: maxPetId })) }),
      },
      ...notAnObject(4),
    )
    const placing = { created: 201, also: [404], feature: 'orders', numRuns: RUNS * 2 }
    await posts('/v1/store/orders', orderBody, placing, (order: Order) => {
      assert.equal(petStatus.get(order.petId), 'available', `pet ${order.petId} was not available`)
      petStatus.set(order.petId, 'pending')
      orders.set(order.id, order)
    })
    // An order id: mostly one of the orders placed so far, else anything.
    const orderId = fc.oneof(
      { weight: 3, arbitrary: fc.nat().map((n) => ({ known: n })) },
      {
        weight: 1,
        // Not "." or "..": URL parsing resolves them, so the request names another path (405 is right).
        arbitrary: fc
          .oneof(text.map(encode), fc.webSegment(), fc.constantFrom('ord_', 'ord_x', '%00'))
          .filter((segment) => segment !== '.' && segment !== '..'),
      },
    )
    const pick = (id: string | { known: number }) => {
      if (typeof id === 'string') return id
      const known = [...orders.keys()]
      return known.length ? (known[id.known % known.length] as string) : 'ord_none'
    }
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom('cancel', 'complete', ''),
        orderId,
        fc.option(fc.oneof(fc.json({ maxDepth: 2 }), text), { nil: undefined }),
        authorization(secret),
        beta,
        extraHeaders,
        async (action, id, payload, auth, opted, headers) => {
          const url = `/v1/store/orders/${pick(id)}${action && `/${action}`}`
          const response = await send(
            action
              ? { method: 'POST', url, headers: withOptIn(headers, opted, auth), payload }
              : { method: 'GET', url, headers: withOptIn(headers, opted, auth) },
            action ? [200, 400, 401, 404, 409, 412, 413, 415] : [200, 304, 400, 401, 404],
          )
          if (response.statusCode !== 200) return
          const order = response.json() as Order
          const before = orders.get(order.id)
          assert.ok(before, `an order nobody placed: ${order.id}`)
          if (!action) return assert.deepEqual(order, before)
          if (before.status === 'placed') {
            assert.equal(order.status, action === 'complete' ? 'completed' : 'canceled')
            petStatus.set(order.petId, action === 'complete' ? 'sold' : 'available')
          } else assert.deepEqual(order, before) // the repeat of a move: nothing changes
          orders.set(order.id, order)
        },
      ),
      { numRuns: RUNS * 2 },
    )
    const storeQuery = fc.oneof(
      fc.webQueryParameters(),
      namedParameters(
        ['limit', 'status', 'petId', 'cursor', 'offset', '__proto__'],
        fc.oneof(text, int64Edges, fc.constantFrom('placed', 'completed', 'canceled', 'expired')),
      ),
    )
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom('/v1/store/orders', '/v1/store/inventory'),
        storeQuery,
        authorization(secret),
        beta,
        extraHeaders,
        async (path, query, auth, opted, headers) => {
          const response = await send(
            { method: 'GET', url: `${path}?${query}`, headers: withOptIn(headers, opted, auth) },
            [200, 304, 400, 401],
          )
          if (response.statusCode === 200 && path.endsWith('orders')) {
            for (const order of response.json() as Order[]) assert.deepEqual(order, orders.get(order.id))
          }
        },
      ),
      { numRuns: RUNS },
    )

    // The state is exactly what the accepted requests made it.
    assert.deepEqual(
      await allPets(app),
      accepted.pets.map((pet) => ({ ...pet, status: petStatus.get(pet.id) ?? pet.status })).sort((a, b) => a.id - b.id),
    )
    assert.deepEqual(
      (await allOrders(app, accountId)).sort((a, b) => a.id.localeCompare(b.id)),
      [...orders.values()].sort((a, b) => a.id.localeCompare(b.id)),
    )
    const stored = plain(await app.app.store.listMessages({ accountId: accountId, limit: 1_000_000 })).messages
    assert.deepEqual(
      stored.sort((a, b) => a.id.localeCompare(b.id)).map(asSent),
      accepted.messages.sort((a, b) => a.id.localeCompare(b.id)).map(asSent),
    )
    assert.equal(counts.byStatus[500] ?? 0, 0)
    t.diagnostic(
      `${DATABASE}: generated requests=${counts.requests} by status=${JSON.stringify(counts.byStatus)} 5xx=0 ` +
        `accepted pets=${accepted.pets.length} messages=${accepted.messages.length} orders=${orders.size} ` +
        `(${[...orders.values()].filter((o) => o.status !== 'placed').length} moved), all stored, nothing else`,
    )
  })

  it('never answers 5xx to generated requests on the webhook, event and message operations, and keeps exactly the endpoints it accepted', {
    timeout: 300_000,
  }, async (t) => {
    const app = await build(t, { RATE_LIMIT: '0', AUTH_FAILURE_LIMIT: '0', EXPERIMENTAL_FEATURES: 'webhooks' }, LOGS)
    const { secret, accountId } = await app.newKey()
    const { counts, send, posts } = generatedClient(app, secret)
    const beta = optIn('webhooks')
    /** The endpoints as last answered (without their secrets): what the store must hold at the end. */
    const endpoints = new Map<string, WebhookEndpoint>()
    const shown = ({
      secret: _,
      previousSecretExpiresAt: __,
      ...endpoint
    }: WebhookEndpoint & Record<string, unknown>) => endpoint as WebhookEndpoint
    const eventList = fc.oneof(
      fc.uniqueArray(fc.constantFrom(...EVENT_TYPES), { minLength: 1, maxLength: 5 }),
      fc.array(fc.oneof(text, anyValue), { maxLength: 6 }),
      anyValue,
    )
    const url = fc.oneof(
      { weight: 3, arbitrary: fc.webUrl({ validSchemes: ['https'] }) },
      {
        weight: 2,
        arbitrary: fc.constantFrom(
          'https://127.0.0.1/',
          'https://[::1]/',
          'http://example.com/',
          'https://user:pw@example.com/',
          'https://example.com/ok\r\nX: y',
          'https://localhost./',
          'https://0x7f.1/',
          'javascript:alert(1)',
          '//example.com',
        ),
      },
      { weight: 1, arbitrary: fc.oneof(text, anyValue) },
    )
    const endpointBody = fc.oneof(
      { weight: 4, arbitrary: bodyLike({ url, events: eventList, description: fc.oneof(text, anyValue) }) },
      {
        weight: 3,
        arbitrary: fc
          .record(
            {
              url: fc.webUrl({ validSchemes: ['https'] }),
              events: fc.uniqueArray(fc.constantFrom(...EVENT_TYPES), { minLength: 1, maxLength: 5 }),
              description: fc.string({ maxLength: 50 }),
            },
            { requiredKeys: ['url', 'events'] },
          )
          .map((body) => JSON.stringify(body)),
      },
      ...notAnObject(3),
    )
    await posts(
      '/v1/webhook-endpoints',
      endpointBody,
      { created: 201, feature: 'webhooks', numRuns: RUNS },
      (endpoint) => {
        assert.match(endpoint.secret, /^whsec_/)
        endpoints.set(endpoint.id, shown(endpoint))
      },
    )
    // An endpoint id: mostly one accepted so far (deleted ones too), else anything.
    const seen = [...endpoints.keys()]
    const endpointId = fc.oneof(
      { weight: 3, arbitrary: fc.nat().map((n) => seen[n % Math.max(1, seen.length)] ?? 'we_none') },
      {
        weight: 1,
        arbitrary: fc
          .oneof(text.map(encode), fc.webSegment(), fc.constantFrom('we_', 'we_x', '%00'))
          .filter((segment) => segment !== '.' && segment !== '..'),
      },
    )
    const patchBody = fc.oneof(
      {
        weight: 4,
        arbitrary: bodyLike({
          url,
          events: eventList,
          description: fc.oneof(text, anyValue),
          status: fc.oneof(fc.constantFrom('enabled', 'disabled'), anyValue),
        }),
      },
      { weight: 1, arbitrary: fc.json({ maxDepth: 3 }) },
    )
    // An instant: mostly well formed, else the edges and any text (or, in a body, any value).
    const instantText = fc.oneof(
      { weight: 2, arbitrary: fc.date({ noInvalidDate: true }).map((d) => d.toISOString()) },
      {
        weight: 2,
        arbitrary: fc.constantFrom(
          '2026-02-30T00:00:00Z',
          '0000-01-01T00:00:00Z',
          '0001-01-01T00:00:00+01:00',
          '9999-12-31T23:59:59-01:00',
          '+275760-09-13T00:00:00.000Z',
          '2026-11-22T12:00:00 01:00',
          '2026-11-22',
          '1e308',
        ),
      },
      { weight: 1, arbitrary: text },
    )
    const instant = fc.oneof({ weight: 4, arbitrary: instantText }, { weight: 1, arbitrary: anyValue })
    const recoverBody = fc.oneof(
      { weight: 3, arbitrary: bodyLike({ since: instant }) },
      { weight: 1, arbitrary: fc.json({ maxDepth: 3 }) },
    )
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom('GET', 'PATCH', 'DELETE', 'rotate-secret', 'deliveries', 'redeliver', 'test', 'recover'),
        endpointId,
        fc.tuple(patchBody, recoverBody),
        fc.oneof(patchContentType, contentType),
        authorization(secret),
        beta,
        extraHeaders,
        async (action, id, [payload, recovery], type, auth, opted, headers) => {
          const base = `/v1/webhook-endpoints/${id}`
          const withType = { ...withOptIn(headers, opted, auth), 'content-type': type }
          const request: InjectOptions =
            action === 'GET' || action === 'DELETE'
              ? { method: action, url: base, headers: withOptIn(headers, opted, auth) }
              : action === 'PATCH'
                ? { method: 'PATCH', url: base, headers: withType, payload }
                : action === 'deliveries'
                  ? { method: 'GET', url: `${base}/deliveries`, headers: withOptIn(headers, opted, auth) }
                  : action === 'redeliver'
                    ? {
                        method: 'POST',
                        url: `${base}/deliveries/dlv_x/redeliver`,
                        headers: withOptIn(headers, opted, auth),
                      }
                    : action === 'test'
                      ? { method: 'POST', url: `${base}/test`, headers: withOptIn(headers, opted, auth) }
                      : action === 'recover'
                        ? { method: 'POST', url: `${base}/recover`, headers: withType, payload: recovery }
                        : { method: 'POST', url: `${base}/rotate-secret`, headers: withOptIn(headers, opted, auth) }
          const response = await send(request, [200, 202, 204, 304, 400, 401, 404, 409, 412, 413, 415])
          if (response.statusCode === 204) endpoints.delete(String(id))
          if (response.statusCode !== 200 || action === 'deliveries') return
          const endpoint = shown(response.json())
          const before = endpoints.get(endpoint.id)
          assert.ok(before, `an endpoint nobody made, or one deleted: ${endpoint.id}`)
          if (action === 'GET') return assert.deepEqual(endpoint, before)
          endpoints.set(endpoint.id, endpoint)
        },
      ),
      { numRuns: RUNS * 2 },
    )
    const messagesQuery = fc.oneof(
      fc.webQueryParameters(),
      namedParameters(
        ['limit', 'status', 'cursor', '__proto__'],
        fc.oneof(text, int64Edges, fc.constantFrom('queued', 'delivered', 'failed', 'undelivered')),
      ),
    )
    // The account's events: generated filters, cursors and ids (test events among them, made above).
    const eventsQuery = fc.oneof(
      fc.webQueryParameters(),
      namedParameters(
        ['limit', 'type', 'createdAfter', 'cursor', '__proto__'],
        fc.oneof(
          text,
          int64Edges,
          instantText,
          fc.constantFrom('order.*', 'message.created,order.*', 'webhook.test', 'pet.*', 'order.placed,,', '*'),
        ),
      ),
    )
    const events = (await app.app.store.listEvents({ accountId, limit: 100 })).events.map((e) => e.id)
    const eventId = fc.oneof(
      { weight: 2, arbitrary: fc.nat().map((n) => events[n % Math.max(1, events.length)] ?? 'evt_none') },
      { weight: 1, arbitrary: endpointId },
    )
    // The lists and the reads by id: the events' (the opt-in usually right) and the messages' (none needed).
    for (const [urls, opting] of [
      [
        fc.oneof(
          eventsQuery.map((q) => `/v1/events?${q}`),
          eventId.map((id) => `/v1/events/${id}`),
        ),
        beta,
      ],
      [
        fc.oneof(
          messagesQuery.map((q) => `/v1/messages?${q}`),
          endpointId.map((id) => `/v1/messages/${id}`),
        ),
        fc.constant(undefined),
      ],
    ] as const) {
      await fc.assert(
        fc.asyncProperty(urls, authorization(secret), opting, extraHeaders, async (url, auth, opted, headers) => {
          await send({ method: 'GET', url, headers: withOptIn(headers, opted, auth) }, [200, 304, 400, 401, 404])
        }),
        { numRuns: RUNS },
      )
    }

    // The store holds exactly the endpoints the accepted requests left, as last answered.
    const stored = (await app.app.store.listWebhookEndpoints(accountId)).map((e) => shown(plain(e) as never))
    assert.deepEqual(
      stored.sort((a, b) => a.id.localeCompare(b.id)),
      [...endpoints.values()].sort((a, b) => a.id.localeCompare(b.id)),
    )
    assert.equal(counts.byStatus[500] ?? 0, 0)
    t.diagnostic(
      `${DATABASE}: generated webhook, event and message requests=${counts.requests} by status=${JSON.stringify(counts.byStatus)} ` +
        `5xx=0 endpoints kept=${endpoints.size}, all stored, nothing else`,
    )
  })
})

/** Opens a raw TCP connection to the app and returns what the server sends back until it closes. */
describe(`Hostile clients on a real socket (${DATABASE})`, () => {
  // The tests of one configuration that look only at their own answers, and at the animals made
  // since they began (petsSince), share an app. Apart: the other configurations, and the tests
  // that read every log line or count every connection, whose requests may still be stored once
  // they end (a reset in the middle of a POST), or that need a fresh database pool.
  const plainServer = suiteApp({}, LOGS)
  const patientServer = suiteApp({ REQUEST_TIMEOUT_SECONDS: '30' }, LOGS)

  /** `server`'s app listening, a new key, and the newest pet before the test (for petsSince). */
  async function onSocket(server: () => Promise<TestApp>) {
    const test = await server()
    const mark = await newestPetId(test)
    const { secret } = await test.newKey()
    return { test, mark, secret, port: await portOf(test) }
  }

  it('invalid UTF-8 in a body or a path is a 400, not a crash', async (t) => {
    const test = await build(t, { RATE_LIMIT: '0' }, LOGS)
    const { secret } = await test.newKey()
    await test.app.listen({ port: 0, host: '127.0.0.1' })
    const { port } = test.app.server.address() as { port: number }
    const body = Buffer.concat([
      Buffer.from('{"name":"'),
      Buffer.from([0xff, 0xfe, 0xc3]),
      Buffer.from('","categoryId":1}'),
    ])
    const head = `POST /v1/pets HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${secret}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n`
    const posted = await rawExchange(port, [head, body])
    assert.match(posted, /^HTTP\/1.1 400 /)
    assert.match(posted, /"code":"invalid_json"/)
    const path = await rawExchange(port, [
      `GET /v1/pets/%FF%FE HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${secret}\r\nConnection: close\r\n\r\n`,
    ])
    assert.match(path, /^HTTP\/1.1 400 /)
    assert.match(path, /"code":"(validation_failed|bad_request)"/)
  })

  it('a client too slow with its headers or its body is cut off with 408 (HEADERS_TIMEOUT, REQUEST_TIMEOUT)', {
    timeout: 30_000,
  }, async (t) => {
    const test = await build(t, { HEADERS_TIMEOUT_SECONDS: '1', REQUEST_TIMEOUT_SECONDS: '2' }, LOGS)
    const { secret, accountId } = await test.newKey()
    await test.app.listen({ port: 0, host: '127.0.0.1' })
    const { port } = test.app.server.address() as { port: number }
    const started = Date.now()
    const slowHeaders = await rawExchange(
      port,
      ['GET /v1/pets HTTP/1.1\r\n', 'Host: x\r\n', 'X-A: 1\r\n', 'X-B: 2\r\n', 'X-C: 3\r\n'],
      700,
    )
    assert.match(slowHeaders, /^HTTP\/1.1 408 /)
    assert.match(slowHeaders, /"code":"request_timeout"/)
    // A body that trickles in, and one that stops halfway: both are answered 408 once REQUEST_TIMEOUT is up.
    const head = `POST /v1/messages HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${secret}\r\nContent-Type: application/json\r\n`
    const slowBody = await rawExchange(
      port,
      [`${head}Content-Length: 100\r\n\r\n`, '{"mes', 'sage"', ':"hi', 'ho"'],
      900,
    )
    assert.match(slowBody, /^HTTP\/1.1 408 /)
    assert.match(slowBody, /"code":"request_timeout"/)
    const stalled = await rawExchange(port, [`${head}Transfer-Encoding: chunked\r\n\r\n5\r\n{"mes\r\n`])
    assert.match(stalled, /^HTTP\/1.1 408 /)
    assert.match(stalled, /"code":"request_timeout"/)
    assert.equal((await test.app.store.listMessages({ accountId: accountId, limit: 10 })).messages.length, 0)
    assert.ok(Date.now() - started < 15_000)
  })

  it('a client that closes its side in the middle of a body gets 400 at once, not 408 at the body deadline', async () => {
    const { test, mark, secret, port } = await onSocket(patientServer)
    const started = Date.now()
    const head =
      `POST /v1/pets HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${secret}\r\n` +
      'Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"name":"Ha'
    // FIN after part of the body, once the server has read that part: no more bytes will come.
    const answer = await rawExchange(port, [head], 'read', { halfClose: true })
    assert.ok(Date.now() - started < 5000, `answered after ${Date.now() - started} ms`)
    assert.match(answer, /^HTTP\/1.1 400 /)
    assert.match(answer, /"code":"bad_request"/)
    assert.match(answer, /closed before the whole body arrived/)
    assert.equal((answer.match(/HTTP\/1.1 /g) ?? []).length, 1, answer)
    assert.equal((await petsSince(test, mark)).length, 0)
  })

  it('a client that sends whole requests and then closes its side gets every answer, in order, before the close', async () => {
    const { test, mark, secret, port } = await onSocket(plainServer)
    // FIN right after the requests (shutdown(SHUT_WR), `nc -N`): the writes are committed, so their
    // 201s must reach the client, or a retry without an Idempotency-Key would store them twice.
    const one = await rawExchange(port, [rawPostPet(secret, 'Half')], 0, { halfClose: true })
    assert.match(one, /^HTTP\/1.1 201 /, JSON.stringify(one))
    const two = await rawExchange(port, [rawPostPet(secret, 'First') + rawPostPet(secret, 'Second')], 0, {
      halfClose: true,
    })
    assert.deepEqual(
      [...two.matchAll(/HTTP\/1.1 (\d+) [\s\S]*?"name":"(\w+)"/g)].map(([, status, name]) => `${status} ${name}`),
      ['201 First', '201 Second'],
      JSON.stringify(two),
    )
    const stored = (await petsSince(test, mark)).map(({ name }) => name)
    // Pipelined requests are served at once: on PostgreSQL's pool the two inserts may take their ids
    // in either order. Both are stored, once each, after the first exchange's.
    assert.equal(stored[0], 'Half')
    assert.deepEqual(stored.slice(1).sort(), ['First', 'Second'])
  })

  it('a CONNECT pipelined after a request is refused after that request is answered, not instead of it', async (t) => {
    // It lists every pet: an app of its own.
    const test = await build(t, {}, LOGS)
    const { secret } = await test.newKey()
    await test.app.listen({ port: 0, host: '127.0.0.1' })
    const { port } = test.app.server.address() as { port: number }
    const connect = 'CONNECT a:1 HTTP/1.1\r\nHost: a:1\r\n\r\n'
    const one = await rawExchange(port, [rawPostPet(secret, 'Piped') + connect])
    const two = await rawExchange(port, [rawPostPet(secret, 'First') + rawPostPet(secret, 'Second') + connect])
    for (const [answer, statuses] of [
      [one, ['201', '400']],
      [two, ['201', '201', '400']],
    ] as const) {
      assert.deepEqual(
        [...answer.matchAll(/HTTP\/1.1 (\d+) /g)].map(([, status]) => status),
        statuses,
        JSON.stringify(answer),
      )
      assert.match(answer, /CONNECT is not supported/)
    }
    // Each stored once. Pipelined requests may be served at once (PostgreSQL's pool takes both), so
    // the two of one connection may take their ids in either order.
    assert.deepEqual((await test.app.store.listPets({ limit: 10 })).pets.map(({ name }) => name).sort(), [
      'First',
      'Piped',
      'Second',
    ])
  })

  it('a client that resets its connection after a POST and a CONNECT leaves the server serving', async (t) => {
    // Its POSTs may be stored after it ends: an app of its own.
    const test = await build(t, {}, LOGS)
    const { secret } = await test.newKey()
    await test.app.listen({ port: 0, host: '127.0.0.1' })
    const { port } = test.app.server.address() as { port: number }
    for (let i = 0; i < 5; i++) {
      const socket = connect(port, '127.0.0.1')
      await new Promise((resolve) => socket.once('connect', resolve))
      socket.write(`${rawPostPet(secret, 'Gone')}CONNECT a:1 HTTP/1.1\r\nHost: a:1\r\n\r\n`)
      await sleep(i) // pacing, not a wait: the reset lands at a different point of the exchange each time
      socket.resetAndDestroy()
    }
    // The CONNECT's wait for the answer ahead of it must not spin on an answer that will never finish.
    const health = await fetch(`http://127.0.0.1:${port}/healthz`, { signal: AbortSignal.timeout(5000) })
    assert.equal(health.status, 200)
  })

  it('clients that close their connection before their answer is written leave the server serving, and are logged', async (t) => {
    // The request log is on (LOG_LEVEL=info, as in production): it reads the client's address once
    // the answer is written, when the socket may be gone. It reads every line, and counts every
    // connection: an app of its own.
    const test = await build(t, {}, LOGS)
    const { secret } = await test.newKey()
    await test.app.listen({ port: 0, host: '127.0.0.1' })
    const { port } = test.app.server.address() as { port: number }
    const server = serverConnections(test)
    const requests = [
      'GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n',
      'GET /nope HTTP/1.0\r\n\r\n',
      `GET /v1/pets/1 HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer ${secret}\r\n\r\n`,
      `POST /v1/pets HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer ${secret}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"name"`,
    ]
    for (let i = 0; i < 200; i++) {
      const socket = connect(port, '127.0.0.1')
      socket.on('error', () => {})
      await new Promise((resolve) => socket.once('connect', resolve))
      socket.end(requests[i % requests.length])
      socket.destroy()
    }
    // Each connection taken from the backlog and closed by the server: its request answered or dropped.
    await until('the server done with the 200 connections', () => server.seen() === 200 && server.open() === 0)
    const health = await fetch(`http://127.0.0.1:${port}/healthz`)
    assert.equal(health.status, 200)
    const completed = test.logs.filter((line) => line.msg === 'request completed')
    assert.ok(completed.length > 0)
    for (const line of completed) assert.equal((line.req as { remoteAddress: unknown }).remoteAddress, '127.0.0.1')
  })

  it('a request with Upgrade (which Node ends the reading of a connection at) is answered with Connection: close', async () => {
    const { test, mark, secret, port } = await onSocket(plainServer)
    const body = '{"name":"Rex","categoryId":1}'
    const started = Date.now()
    // The client keeps its side open: only the server can end the exchange.
    const answer = await rawExchange(port, [
      `GET /v1/pets?limit=1 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${secret}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n` +
        `POST /v1/pets HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${secret}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`,
    ])
    assert.ok(Date.now() - started < 3000, `closed after ${Date.now() - started} ms`)
    assert.match(answer, /^HTTP\/1.1 200 /)
    assert.match(answer, /connection: close/i)
    // The POST was not read: no answer, nothing stored; the client sends it again on a new connection.
    assert.equal((answer.match(/HTTP\/1.1 \d/g) ?? []).length, 1, answer)
    assert.equal((await petsSince(test, mark)).length, 0)
  })

  it('a body with malformed chunked framing gets 400 at once, not 408 at the body deadline', async () => {
    const test = await patientServer()
    const mark = await newestPetId(test)
    const port = await portOf(test)
    const head = (secret: string) =>
      `POST /v1/pets HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${secret}\r\n` +
      'Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n'
    const body = '{"name":"Ha","categoryId":1}'
    const framings = [
      `zz\r\n${body}\r\n0\r\n\r\n`, // not a chunk size
      `${body.length.toString(16)}\r\n${body}XX0\r\n\r\n`, // no CRLF after the chunk
    ]
    for (const framing of framings) {
      const { secret } = await test.newKey()
      // In one write with a key not seen yet: the bad chunk is found while the key is being looked
      // up, before the route begins on the body. Then in two, with the key known: while it reads it.
      for (const chunks of [[head(secret) + framing], [head(secret), framing]]) {
        const started = Date.now()
        // The client keeps its side open: only the server can end this exchange.
        const answer = await rawExchange(port, chunks, 'read')
        assert.ok(Date.now() - started < 5000, `answered after ${Date.now() - started} ms`)
        assert.match(answer, /^HTTP\/1.1 400 /)
        assert.match(answer, /connection: close/i)
        assert.match(answer, /"code":"bad_request"/)
        assert.match(answer, /chunked encoding is malformed/)
        assert.equal((answer.match(/HTTP\/1.1 \d/g) ?? []).length, 1, answer)
      }
    }
    assert.equal((await petsSince(test, mark)).length, 0)
  })

  it('trailer fields over the header size limit get 431, like headers, not "malformed"', async () => {
    const { test, mark, secret, port } = await onSocket(plainServer)
    const body = '{"name":"Ha","categoryId":1}'
    const answer = await rawExchange(port, [
      `POST /v1/pets HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${secret}\r\n` +
        'Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n' +
        `${body.length.toString(16)}\r\n${body}\r\n0\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`,
    ])
    assert.match(answer, /^HTTP\/1.1 431 /)
    assert.match(answer, /"code":"headers_too_large"/)
    assert.equal((answer.match(/HTTP\/1.1 \d/g) ?? []).length, 1, answer)
    assert.equal((await petsSince(test, mark)).length, 0)
  })

  it('accepts connections up to MAX_CONNECTIONS, closes the rest at once, and keeps serving', {
    timeout: 60_000,
  }, async (t) => {
    const CAP = 1000
    const OPENED = 2000
    const test = await build(t, { MAX_CONNECTIONS: String(CAP), HEADERS_TIMEOUT_SECONDS: '10' }, LOGS)
    const { secret } = await test.newKey()
    await test.app.listen({ port: 0, host: '127.0.0.1' })
    const { port } = test.app.server.address() as { port: number }
    const server = serverConnections(test)
    const sockets: Socket[] = []
    t.after(() => {
      for (const socket of sockets) socket.destroy()
    })
    let closed = 0
    const open = () =>
      new Promise<void>((resolve) => {
        const socket = connect(port, '127.0.0.1')
        sockets.push(socket)
        socket.on('connect', () => resolve())
        socket.on('error', () => {})
        socket.on('close', () => {
          closed++
          resolve()
        })
      })
    // In batches, so that the listen backlog never overflows (that would delay, not refuse).
    for (let i = 0; i < OPENED; i += 100) await Promise.all(Array.from({ length: 100 }, open))
    // The server has taken every connection from the backlog, kept it or dropped it, and each client
    // it dropped has seen its close.
    await until('every connection kept or dropped by the server', () => server.seen() === OPENED)
    await until('the dropped clients to see their close', () => closed >= server.dropped())
    const closedAtOnce = closed
    assert.ok(Math.abs(closedAtOnce - (OPENED - CAP)) <= 5, `${closedAtOnce} closed; expected about ${OPENED - CAP}`)
    assert.ok(Math.abs(server.open() - CAP) <= 5, `the server holds ${server.open()}; expected about ${CAP}`)
    assert.ok(test.app.server.listening)
    for (const socket of sockets) socket.destroy()
    // Places free under MAX_CONNECTIONS again: else the request below would be dropped.
    await until('the server to close the connections its clients closed', () => server.open() === 0)
    const response = await fetch(`http://127.0.0.1:${port}/v1/pets`, { headers: bearer(secret) })
    assert.equal(response.status, 200)
    t.diagnostic(
      `opened=${OPENED} cap=${CAP} closed at once=${closedAtOnce}, the rest held; then served a request normally`,
    )
  })
})
