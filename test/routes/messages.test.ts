import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import Fastify, { type LightMyRequestResponse } from 'fastify'
import fp from 'fastify-plugin'
import animalStore, { serverOptions } from '../../src/app.ts'
import { newWebhookSecret } from '../../src/webhooks/signing.ts'
import { assertError, bearer, build, errorBody, MESSAGE_FIELDS, plain, suiteApp, type TestApp } from '../helper.ts'
import { until } from '../wait.ts'

describe('Messages: POST /v1/messages (point 7)', () => {
  // Messages belong to an account, and each test makes its own: one app serves them all.
  const shared = suiteApp()

  it('returns 202 with a queued Message: string id, the text, createdAt ISO 8601 UTC with Z', async () => {
    const test = await shared()
    const { secret } = await test.newKey()
    const before = Date.now()
    const response = await test.app.inject({
      method: 'POST',
      url: '/v1/messages',
      headers: { ...bearer(secret), 'content-type': 'application/json' },
      payload: JSON.stringify({ message: 'Hello, Animal Store! 🐕' }),
    })
    assert.equal(response.statusCode, 202)
    const message = response.json()
    assert.deepEqual(Object.keys(message).sort(), MESSAGE_FIELDS)
    assert.equal(message.statusReason, null)
    assert.equal(message.attempts, 0)
    assert.equal(message.deliveredAt, null)
    assert.match(message.id, /^msg_[0-9A-Za-z]{16}$/)
    assert.equal(message.message, 'Hello, Animal Store! 🐕')
    assert.equal(message.status, 'queued')
    assert.match(message.createdAt, /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/)
    const at = Date.parse(message.createdAt)
    assert.ok(at >= before - 1000 && at <= Date.now() + 1000)
  })

  it('takes the longest message however its JSON is escaped: 10,000 characters as \\u escapes, 120 KB', async () => {
    const test = await shared()
    const { secret } = await test.newKey()
    const response = await test.app.inject({
      method: 'POST',
      url: '/v1/messages',
      headers: { ...bearer(secret), 'content-type': 'application/json' },
      payload: `{"message":"${'\\ud83d\\udc36'.repeat(10_000)}"}`,
    })
    assert.equal(response.statusCode, 202, response.body.slice(0, 200))
    assert.equal(response.json().message, '🐶'.repeat(10_000))
  })

  it('stores the message durably for the calling account: it is there after a restart on the same file', async (t) => {
    // Closes its app: one of its own.
    const test = await build(t)
    const { secret, accountId } = await test.newKey()
    const sent = await test.app.inject({
      method: 'POST',
      url: '/v1/messages',
      headers: bearer(secret),
      payload: { message: 'keep me' },
    })
    await test.app.close()
    const restarted = Fastify(serverOptions(test.config))
    await restarted.register(fp(animalStore), { config: test.config })
    t.after(() => restarted.close())
    assert.deepEqual(plain(await restarted.store.listMessages({ accountId: accountId, limit: 10 })).messages, [
      sent.json(),
    ])
  })

  it("keeps each account's messages to itself", async () => {
    const test = await shared()
    const alice = await test.newKey({ email: 'alice@example.com' })
    const bob = await test.newKey({ email: 'bob@example.com' })
    await test.app.inject({
      method: 'POST',
      url: '/v1/messages',
      headers: bearer(alice.secret),
      payload: { message: 'from alice' },
    })
    await test.app.inject({
      method: 'POST',
      url: '/v1/messages',
      headers: bearer(bob.secret),
      payload: { message: 'from bob' },
    })
    const texts = async (accountId: number) =>
      (await test.app.store.listMessages({ accountId: accountId, limit: 10 })).messages.map((m) => m.message)
    assert.deepEqual(await texts(alice.accountId), ['from alice'])
    assert.deepEqual(await texts(bob.accountId), ['from bob'])
  })

  const invalid: [string, string, string, RegExp][] = [
    ['message missing', '{}', 'validation_failed', /body\.message is required/],
    ['message not a string', '{"message": 42}', 'validation_failed', /body\.message must be a string/],
    ['message empty', '{"message": ""}', 'validation_failed', /body\.message must be at least 1 character long/],
    ['message blank', '{"message": "  \\n "}', 'validation_failed', /body\.message is invalid/],
    ['message invisible', '{"message": "\\u200b\\u00ad"}', 'validation_failed', /body\.message is invalid/],
    ['message too long', JSON.stringify({ message: 'x'.repeat(10_001) }), 'validation_failed', /at most 10000/],
    ['an unknown field', '{"message": "hi", "to": "bob"}', 'validation_failed', /body\.to is not a known field/],
    ['invalid JSON', '{"message": ', 'invalid_json', /not valid JSON/],
  ]
  for (const [what, payload, code, message] of invalid) {
    it(`refuses ${what} with 400 ${code}`, async () => {
      const test = await shared()
      const { secret, accountId } = await test.newKey()
      const response = await test.app.inject({
        method: 'POST',
        url: '/v1/messages',
        headers: { ...bearer(secret), 'content-type': 'application/json' },
        payload,
      })
      assert.equal(response.statusCode, 400)
      const body = errorBody(response)
      assert.equal(body.code, code)
      assert.match(body.message, message)
      assert.deepEqual((await test.app.store.listMessages({ accountId: accountId, limit: 10 })).messages, [])
    })
  }
})

/** The path and query of a Link header's rel="next" target. */
function nextPath(link: string): string {
  const target = new URL(/<([^>]+)>; rel="next"/.exec(link)?.[1] as string)
  return target.pathname + target.search
}

/** A new account in `test` (a shared app) that sent `texts`, in order. */
async function withMessages(test: TestApp, texts: string[]) {
  const { secret, accountId } = await test.newKey()
  const sent = []
  for (const message of texts) {
    const response = await test.app.inject({
      method: 'POST',
      url: '/v1/messages',
      headers: bearer(secret),
      payload: { message },
    })
    sent.push(response.json())
  }
  return { test, secret, accountId, sent }
}

/** Every page from `url` on, following Link rel="next": the texts of each page. */
async function pages(test: TestApp, secret: string, url: string): Promise<string[][]> {
  const seen: string[][] = []
  let next: string | null = url
  while (next) {
    const response: LightMyRequestResponse = await test.app.inject({ url: next, headers: bearer(secret) })
    assert.equal(response.statusCode, 200, response.body)
    seen.push(response.json().map((m: { message: string }) => m.message))
    const link = response.headers.link as string | undefined
    next = link ? nextPath(link) : null
  }
  return seen
}

describe('Messages: GET /v1/messages and /v1/messages/{messageId}', () => {
  // Each test lists the messages of accounts of its own. (markUndeliveredMessages, below, marks
  // every account's unsubscribed messages, as the app's own sweep does every half second anyway.)
  const shared = suiteApp()

  it('lists the account\'s messages newest first, in pages linked by rel="next", never another account\'s', async () => {
    const { test, secret } = await withMessages(await shared(), ['m1', 'm2', 'm3', 'm4', 'm5'])
    const other = await test.newKey()
    await test.app.inject({
      method: 'POST',
      url: '/v1/messages',
      headers: bearer(other.secret),
      payload: { message: 'theirs' },
    })
    const first = await test.app.inject({ url: '/v1/messages', headers: bearer(secret) })
    assert.equal(first.statusCode, 200)
    assert.equal(first.headers.link, undefined)
    assert.deepEqual(
      first.json().map((m: { message: string }) => m.message),
      ['m5', 'm4', 'm3', 'm2', 'm1'],
    )
    assert.deepEqual(await pages(test, secret, '/v1/messages?limit=2'), [['m5', 'm4'], ['m3', 'm2'], ['m1']])
    const page = await test.app.inject({ url: '/v1/messages?limit=2', headers: bearer(secret) })
    assert.match(
      page.headers.link as string,
      /^<http:\/\/localhost:80\/v1\/messages\?limit=2&cursor=[\w.-]+>; rel="next"$/,
    )
  })

  it('filters by status, the cursor keeping the filter; a cursor of another filter or list is 400', async () => {
    const { test, secret, accountId } = await withMessages(await shared(), ['old1', 'old2', 'old3'])
    // No endpoint subscribes to message.created: the sweep marks them undelivered (the app's own may be first).
    await test.app.store.markUndeliveredMessages()
    // Then one does: with the webhooks feature off nothing is sent, so the next ones stay queued.
    await test.app.store.createWebhookEndpoint({
      accountId,
      url: 'https://receiver.example/hook',
      events: ['message.created'],
      description: '',
      secret: newWebhookSecret(),
    })
    for (const message of ['new1', 'new2']) {
      await test.app.inject({ method: 'POST', url: '/v1/messages', headers: bearer(secret), payload: { message } })
    }
    assert.deepEqual(await pages(test, secret, '/v1/messages?status=undelivered&limit=2'), [['old3', 'old2'], ['old1']])
    assert.deepEqual(await pages(test, secret, '/v1/messages?status=queued'), [['new2', 'new1']])
    assert.deepEqual(await pages(test, secret, '/v1/messages?status=delivered'), [[]])
    assert.deepEqual(await pages(test, secret, '/v1/messages?status=failed'), [[]])
    const undelivered = await test.app.inject({
      url: '/v1/messages?status=undelivered&limit=1',
      headers: bearer(secret),
    })
    const cursor = new URL(/<([^>]+)>/.exec(undelivered.headers.link as string)?.[1] as string).searchParams.get(
      'cursor',
    )
    const elsewhere = await test.app.inject({
      url: `/v1/messages?status=queued&cursor=${cursor}`,
      headers: bearer(secret),
    })
    assert.equal(elsewhere.statusCode, 400)
    assert.equal(errorBody(elsewhere).code, 'invalid_cursor')
    // A cursor of the pets list is not a position in the messages.
    for (let i = 0; i < 2; i++) {
      await test.app.inject({
        method: 'POST',
        url: '/v1/pets',
        headers: bearer(secret),
        payload: { name: 'Rex', categoryId: 1 },
      })
    }
    const pets = await test.app.inject({ url: '/v1/pets?limit=1', headers: bearer(secret) })
    const petsCursor = new URL(/<([^>]+)>/.exec(pets.headers.link as string)?.[1] as string).searchParams.get('cursor')
    const foreign = await test.app.inject({ url: `/v1/messages?cursor=${petsCursor}`, headers: bearer(secret) })
    assert.equal(errorBody(foreign).code, 'invalid_cursor')
  })

  it('refuses a bad limit, status, cursor or unknown parameter with 400, as listOrders does', async () => {
    const { test, secret } = await withMessages(await shared(), [])
    for (const query of ['limit=0', 'limit=101', 'limit=x', 'status=sent', 'cursor=', 'cursor=abc', 'petId=1']) {
      const response = await test.app.inject({ url: `/v1/messages?${query}`, headers: bearer(secret) })
      assert.equal(response.statusCode, 400, query)
      assert.ok(['validation_failed', 'invalid_cursor'].includes(errorBody(response).code), query)
    }
    assert.equal((await test.app.inject({ url: '/v1/messages' })).statusCode, 401)
  })

  it("gets a message by id with its status and attempts; another account's or an unknown one is 404", async () => {
    const { test, secret, sent } = await withMessages(await shared(), ['hello'])
    const [message] = sent
    const got = await test.app.inject({ url: `/v1/messages/${message.id}`, headers: bearer(secret) })
    assert.equal(got.statusCode, 200)
    // The app's sweep may have marked it undelivered since (no endpoint here): either, with its reason.
    const { status, statusReason, ...rest } = got.json()
    const { status: _status, statusReason: _reason, ...asSent } = message as typeof message & { statusReason: unknown }
    assert.deepEqual(rest, asSent)
    assert.ok(
      (status === 'queued' && statusReason === null) || (status === 'undelivered' && typeof statusReason === 'string'),
      `${status}: ${statusReason}`,
    )
    const other = await test.newKey()
    for (const [id, headers] of [
      [message.id, bearer(other.secret)],
      ['msg_unknown', bearer(secret)],
    ] as const) {
      const response = await test.app.inject({ url: `/v1/messages/${id}`, headers })
      assertError(response, 404, 'message_not_found', `No message ${id} for this account.`)
    }
  })

  it('a message no endpoint subscribed to ends undelivered, not failed, and statusReason says why', async () => {
    const { test, secret, sent } = await withMessages(await shared(), ['nobody listens'])
    const [message] = sent
    assert.deepEqual([message.status, message.statusReason], ['queued', null])
    // The delivery loop's own sweep, every half second, whether or not webhooks are on.
    const got = await until('undelivered', async () => {
      const response = await test.app.inject({ url: `/v1/messages/${message.id}`, headers: bearer(secret) })
      assert.equal(response.statusCode, 200)
      return response.json().status !== 'queued' && response.json()
    })
    const undelivered = {
      ...message,
      status: 'undelivered',
      statusReason: 'no enabled endpoint subscribed to message.created',
    }
    assert.deepEqual(got, undelivered)
    const listed = await test.app.inject({ url: '/v1/messages?status=undelivered', headers: bearer(secret) })
    assert.deepEqual(listed.json(), [undelivered])
  })

  it('needs messages:read, which messages:write implies', async () => {
    const { test } = await withMessages(await shared(), [])
    const keyWith = async (scopes: string) => bearer((await test.newKey({ scopes })).secret)
    const writer = await keyWith('messages:write')
    const reader = await keyWith('messages:read')
    const pets = await keyWith('pets:read')
    assert.equal((await test.app.inject({ url: '/v1/messages', headers: writer })).statusCode, 200)
    assert.equal((await test.app.inject({ url: '/v1/messages', headers: reader })).statusCode, 200)
    for (const url of ['/v1/messages', '/v1/messages/msg_x']) {
      const refused = await test.app.inject({ url, headers: pets })
      assert.equal(refused.statusCode, 403, url)
      assert.match(refused.headers['www-authenticate'] as string, /scope="messages:read"/)
    }
    const send = await test.app.inject({
      method: 'POST',
      url: '/v1/messages',
      headers: reader,
      payload: { message: 'x' },
    })
    assert.equal(send.statusCode, 403)
  })
})
