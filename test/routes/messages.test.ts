import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import Fastify from 'fastify'
import fp from 'fastify-plugin'
import animalStore, { serverOptions } from '../../src/app.ts'
import { bearer, build, errorBody, plain } from '../helper.ts'

describe('Messages: POST /v1/messages (point 7)', () => {
  it('returns 202 with a queued Message: string id, the text, createdAt ISO 8601 UTC with Z', async (t) => {
    const test = await build(t)
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
    assert.deepEqual(Object.keys(message).sort(), ['createdAt', 'id', 'message', 'status'])
    assert.match(message.id, /^msg_[0-9A-Za-z]{16}$/)
    assert.equal(message.message, 'Hello, Animal Store! 🐕')
    assert.equal(message.status, 'queued')
    assert.match(message.createdAt, /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/)
    const at = Date.parse(message.createdAt)
    assert.ok(at >= before - 1000 && at <= Date.now() + 1000)
  })

  it('takes the longest message however its JSON is escaped: 10,000 characters as \\u escapes, 120 KB', async (t) => {
    const test = await build(t)
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

  it("keeps each account's messages to itself", async (t) => {
    const test = await build(t)
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
    it(`refuses ${what} with 400 ${code}`, async (t) => {
      const test = await build(t)
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
