import assert from 'node:assert/strict'
import { describe, it, type TestContext } from 'node:test'
import { ENDPOINT_CONCURRENCY } from '../../src/plugins/webhook-delivery.ts'
import type { EventType } from '../../src/schemas/webhooks.ts'
import { newWebhookSecret } from '../../src/webhooks/signing.ts'
import { bearer, build, suiteApp, type TestApp, testDatabaseUrl } from '../helper.ts'
import { until } from '../wait.ts'
import { receiver } from '../webhooks/receiver.ts'

/** Loopback receivers, and retries in tenths of a second. */
const ENV = {
  EXPERIMENTAL_FEATURES: 'webhooks',
  WEBHOOK_ALLOW_PRIVATE_URLS: 'true',
  WEBHOOK_ALLOW_HTTP: 'true',
  WEBHOOK_RETRY_SCHEDULE: '0.1,0.1,0.1,0.1',
  WEBHOOK_TIMEOUT_SECONDS: '2',
}

/** A new account of `test` (an app of ENV, or of ENV changed), its endpoint a new receiver, subscribed to `events`. */
async function subscribed(t: TestContext, test: TestApp, events: EventType[] = ['message.created']) {
  const key = await test.newKey()
  const hook = await receiver(t)
  const secret = newWebhookSecret()
  const endpoint = await test.app.store.createWebhookEndpoint({
    accountId: key.accountId,
    url: hook.url,
    events,
    description: '',
    secret,
  })
  assert.ok(endpoint)
  return { test, key, hook, secret, endpoint }
}

async function send(test: TestApp, secret: string, message: string) {
  const response = await test.app.inject({
    method: 'POST',
    url: '/v1/messages',
    headers: { ...bearer(secret), 'content-type': 'application/json' },
    payload: { message },
  })
  assert.equal(response.statusCode, 202, response.body)
  return response.json() as { id: string; status: string }
}

const messageOf = (test: TestApp, accountId: number, id: string) => test.app.store.getMessage(accountId, id)

/** The message once it is delivered. */
const deliveredMessage = (test: TestApp, accountId: number, id: string) =>
  until('delivered', async () => {
    const message = await messageOf(test, accountId, id)
    return message?.status === 'delivered' ? message : null
  })

describe('Webhook delivery: signed, at least once', () => {
  // Each test has an account, an endpoint and a receiver of its own, and waits for its own deliveries
  // to end: one app of ENV serves those tests. Tests of another configuration, or that close their
  // app, have their own.
  const shared = suiteApp(ENV)

  it('a message reaches the endpoint signed (Standard Webhooks), and becomes delivered', async (t) => {
    const { test, key, hook, secret } = await subscribed(t, await shared())
    const sent = await send(test, key.secret, 'hello hook')
    assert.equal(sent.status, 'queued')
    await until('received', () => hook.received.length === 1)
    const [got] = hook.received
    assert.ok(got)
    assert.equal(hook.verifiesWith(secret), true)
    assert.equal(hook.verifiesWith(newWebhookSecret()), false)
    assert.match(got.id, /^evt_/)
    assert.equal(got.headers['content-type'], 'application/json')
    assert.equal(got.event.type, 'message.created')
    assert.equal(got.event.data.id, sent.id)
    assert.equal(got.event.data.message, 'hello hook')
    const delivered = await deliveredMessage(test, key.accountId, sent.id)
    assert.equal(delivered.attempts, 1)
    assert.ok(delivered.deliveredAt)
  })

  it('deliveredAt is when the 2xx arrived, not when the attempt began', async (t) => {
    const { test, key, hook, endpoint } = await subscribed(t, await shared())
    hook.delayMs = () => 400
    const sent = await send(test, key.secret, 'slow receiver')
    const message = await deliveredMessage(test, key.accountId, sent.id)
    const [delivery] = (await test.app.store.listDeliveries(key.accountId, endpoint.id, 1)) ?? []
    assert.ok(delivery?.lastAttemptAt && delivery.deliveredAt && message.deliveredAt)
    assert.ok(Date.parse(delivery.deliveredAt) - Date.parse(delivery.lastAttemptAt) >= 400)
    assert.equal(message.deliveredAt, delivery.deliveredAt)
  })

  it('a receiver that fails twice gets the event on the third attempt, with the same webhook-id', async (t) => {
    const { test, key, hook, endpoint } = await subscribed(t, await shared())
    hook.answer = (n) => (n <= 2 ? 500 : 200)
    const sent = await send(test, key.secret, 'third time lucky')
    const message = await deliveredMessage(test, key.accountId, sent.id)
    assert.equal(hook.received.length, 3)
    assert.equal(hook.ids().size, 1)
    assert.equal(message.attempts, 3)
    const [delivery] = (await test.app.store.listDeliveries(key.accountId, endpoint.id, 10)) ?? []
    assert.equal(delivery?.status, 'delivered')
    assert.equal(delivery?.attempts, 3)
    assert.equal(delivery?.lastStatus, 200)
  })

  it('a receiver down for a while gets every event once it is back', async (t) => {
    const { test, key, hook } = await subscribed(
      t,
      await build(t, { ...ENV, WEBHOOK_RETRY_SCHEDULE: '0.2,0.2,0.2,0.2,0.2,0.2,0.2,0.2,0.2,0.2' }),
    )
    await hook.stop()
    const sent: { id: string }[] = []
    for (let i = 0; i < 5; i++) sent.push(await send(test, key.secret, `while down ${i}`))
    // The backlog shows on /readyz.
    const ready = (await test.app.inject({ url: '/readyz' })).json()
    assert.equal(ready.outbox.depth, 5)
    assert.ok(ready.outbox.oldestAgeSeconds >= 0)
    // Every message has had a failed attempt (connection refused) before the receiver comes back.
    await until('tried', async () => {
      const all = await Promise.all(sent.map((m) => messageOf(test, key.accountId, m.id)))
      return all.every((m) => (m?.attempts ?? 0) >= 1)
    })
    await hook.start()
    await until('all delivered', async () => {
      const all = await Promise.all(sent.map((m) => messageOf(test, key.accountId, m.id)))
      return all.every((m) => m?.status === 'delivered')
    })
    assert.deepEqual(new Set(hook.received.map((r) => r.event.data.id)), new Set(sent.map((m) => m.id)))
  })

  it('every attempt failing fails the message; a 410 disables the endpoint', async (t) => {
    const { test, key, hook, endpoint } = await subscribed(t, await shared())
    hook.answer = () => 503
    const failing = await send(test, key.secret, 'never')
    const failed = await until('failed', async () => {
      const m = await messageOf(test, key.accountId, failing.id)
      return m?.status === 'failed' ? m : null
    })
    // The first attempt and four retries.
    assert.equal(failed.attempts, 5)
    hook.answer = () => 410
    const gone = await send(test, key.secret, 'gone')
    await until('failed', async () => (await messageOf(test, key.accountId, gone.id))?.status === 'failed')
    const disabled = await test.app.store.getWebhookEndpoint(key.accountId, endpoint.id)
    assert.equal(disabled?.status, 'disabled')
    assert.equal(disabled?.disabledReason, 'answered 410 Gone')
    const received = hook.received.length
    // Disabled, it gets no event: nothing is tried, so the message is undelivered rather than failed.
    const after = await send(test, key.secret, 'after')
    await until('undelivered', async () => (await messageOf(test, key.accountId, after.id))?.status === 'undelivered')
    assert.equal(hook.received.length, received)
  })

  it('a private address is refused without the operator’s switch, and nothing reaches it', async (t) => {
    const { test, key, hook, endpoint } = await subscribed(
      t,
      await build(t, { ...ENV, WEBHOOK_ALLOW_PRIVATE_URLS: 'false' }),
    )
    const sent = await send(test, key.secret, 'to loopback')
    const delivery = await until('attempted', async () => {
      const [d] = (await test.app.store.listDeliveries(key.accountId, endpoint.id, 1)) ?? []
      return d && d.attempts > 0 && d.lastError ? d : null
    })
    assert.match(delivery.lastError ?? '', /^address not allowed: 127\.0\.0\.1/)
    assert.equal(delivery.lastStatus, null)
    assert.equal(hook.received.length, 0)
    assert.notEqual((await messageOf(test, key.accountId, sent.id))?.status, 'delivered')
  })

  it('during a rotation both secrets sign, and each verifies', async (t) => {
    const { test, key, hook, secret, endpoint } = await subscribed(t, await shared())
    const rotated = newWebhookSecret()
    const until24h = new Date(Date.now() + 86_400_000).toISOString()
    await test.app.store.rotateWebhookSecret(key.accountId, endpoint.id, rotated, until24h)
    await send(test, key.secret, 'two signatures')
    await until('received', () => hook.received.length === 1)
    assert.equal(String(hook.received[0]?.headers['webhook-signature']).split(' ').length, 2)
    assert.equal(hook.verifiesWith(secret), true)
    assert.equal(hook.verifiesWith(rotated), true)
  })

  it('a message no endpoint subscribes to is undelivered; order transitions are delivered as events', async (t) => {
    const { test, key, hook } = await subscribed(t, await shared(), ['order.placed', 'order.canceled'])
    const lonely = await send(test, key.secret, 'nobody')
    const undelivered = await until('undelivered', async () => {
      const m = await messageOf(test, key.accountId, lonely.id)
      return m?.status === 'undelivered' ? m : null
    })
    assert.equal(undelivered.attempts, 0)
    const pet = await test.app.store.createPet({ name: 'Rex', categoryId: 1 })
    const headers = { ...bearer(key.secret), 'animal-store-beta': 'orders' }
    const placed = await test.app.inject({
      method: 'POST',
      url: '/v1/store/orders',
      headers,
      payload: { petId: pet.id },
    })
    assert.equal(placed.statusCode, 201, placed.body)
    const order = placed.json()
    const canceled = await test.app.inject({ method: 'POST', url: `/v1/store/orders/${order.id}/cancel`, headers })
    assert.equal(canceled.statusCode, 200)
    await until('both events', () => hook.received.length === 2)
    const events = hook.received.map((r) => r.event).sort((a, b) => (a.timestamp < b.timestamp ? -1 : 1))
    assert.deepEqual(
      events.map((e) => [e.type, e.data.id, e.data.status]),
      [
        ['order.placed', order.id, 'placed'],
        ['order.canceled', order.id, 'canceled'],
      ],
    )
    assert.deepEqual(events[0]?.data, order)
  })

  it('a resend starts the retry schedule over and keeps deliveredAt; none is sent twice at once', async (t) => {
    const { test, key, hook, endpoint } = await subscribed(t, await build(t, { ...ENV, WEBHOOK_RETRY_SCHEDULE: '0.1' }))
    const redeliver = (id: string) =>
      test.app.inject({
        method: 'POST',
        url: `/v1/webhook-endpoints/${endpoint.id}/deliveries/${id}/redeliver`,
        headers: { ...bearer(key.secret), 'animal-store-beta': 'webhooks' },
      })
    const resend = async (id: string) => {
      const response = await redeliver(id)
      assert.equal(response.statusCode, 202, response.body)
      return response.json() as { status: string; attempts: number; deliveredAt: string | null }
    }
    const delivery = async () => ((await test.app.store.listDeliveries(key.accountId, endpoint.id, 1)) ?? [])[0]
    await send(test, key.secret, 'again and again')
    const delivered = await until('delivered', async () => {
      const d = await delivery()
      return d?.status === 'delivered' ? d : null
    })
    // Sent again to a receiver now failing: the first attempt and the schedule's one retry, again.
    hook.answer = () => 503
    assert.equal((await resend(delivered.id)).status, 'pending')
    const failed = await until('failed', async () => {
      const d = await delivery()
      return d?.status === 'failed' ? d : null
    })
    assert.equal(hook.received.length, 3)
    assert.equal(failed.attempts, 3)
    assert.equal(failed.deliveredAt, delivered.deliveredAt)
    // While an attempt is under way (held by the receiver), a resend changes nothing and sends nothing.
    hook.answer = () => 200
    hook.delayMs = () => 1000
    await resend(delivered.id)
    await until('attempt under way', () => hook.holding === 1)
    const during = await redeliver(delivered.id)
    assert.equal(during.statusCode, 409, during.body)
    assert.equal(during.json().code, 'delivery_in_progress')
    await until('delivered again', async () => (await delivery())?.status === 'delivered')
    // The refused resend sent nothing: four attempts in all, one at a time.
    assert.equal(hook.received.length, 4)
    assert.equal(hook.ids().size, 1)
  })

  it('a shutdown cuts an unanswered attempt short in time, records it, and another instance sends it again', async (t) => {
    const DATABASE_URL = await testDatabaseUrl(t)
    // An attempt may take 30 s; the shutdown, 2 s in all. One retry: the cut attempt is the last one.
    const env = {
      DATABASE_URL,
      WEBHOOK_TIMEOUT_SECONDS: '30',
      SHUTDOWN_TIMEOUT_SECONDS: '2',
      WEBHOOK_RETRY_SCHEDULE: '0.1',
    }
    const { test, key, hook, endpoint } = await subscribed(t, await build(t, { ...ENV, ...env }))
    hook.answer = (n) => (n === 1 ? 500 : 200)
    // Held far past the shutdown's 2 s, so that only the cut ends it; not for a minute, though: the
    // receiver's timer would keep this test process alive until then.
    hook.delayMs = (n) => (n === 2 ? 5_000 : 0)
    const sent = await send(test, key.secret, 'in flight at shutdown')
    await until('the last attempt under way', () => hook.received.length === 2)
    const started = performance.now()
    await test.app.close()
    const closedMs = performance.now() - started
    assert.ok(closedMs < 2000, `closed in ${Math.round(closedMs)} ms, past SHUTDOWN_TIMEOUT_SECONDS`)
    const next = await build(t, { ...ENV, ...env })
    const [cut] = (await next.app.store.listDeliveries(key.accountId, endpoint.id, 10)) ?? []
    assert.equal(cut?.attempts, 2)
    assert.match(String(cut?.lastError), /canceled/)
    // Cut short is not the endpoint failing: though it was the last attempt, it is sent again.
    await until('delivered by the next instance', async () => {
      return (await messageOf(next, key.accountId, sent.id))?.status === 'delivered'
    })
    assert.equal(hook.ids().size, 1)
    assert.equal(hook.received.length, 3)
  })

  it('a slow endpoint’s backlog holds up no other endpoint: each has a few deliveries in flight', async (t) => {
    const slow = await subscribed(t, await build(t, ENV))
    // Each answer takes 300 ms: a backlog of 20 takes several rounds of ENDPOINT_CONCURRENCY.
    let mostHeld = 0
    slow.hook.delayMs = () => {
      mostHeld = Math.max(mostHeld, slow.hook.holding + 1)
      return 300
    }
    const backlog = 20
    for (let i = 0; i < backlog; i++) await send(slow.test, slow.key.secret, `slow ${i}`)
    await until('the slow endpoint busy', () => slow.hook.holding > 0)
    const fast = await subscribed(t, slow.test)
    // How many of the backlog had arrived when the other endpoint's delivery did (counted as it arrives).
    let before = Number.POSITIVE_INFINITY
    fast.hook.delayMs = () => {
      before = slow.hook.received.length
      return 0
    }
    await send(fast.test, fast.key.secret, 'queued after the backlog')
    await until('the other endpoint served', () => fast.hook.received.length === 1)
    // Sent alongside the first round, or the second on a machine too busy to claim again within an
    // answer's 300 ms, never after the whole backlog (which 32 slots without a cap would send first).
    assert.ok(before <= 2 * ENDPOINT_CONCURRENCY && before < backlog, `${before} sent before it`)
    await until('the backlog delivered', () => slow.hook.received.length === backlog)
    assert.equal(mostHeld, ENDPOINT_CONCURRENCY)
  })

  it('where the operator has the feature off, nothing is sent: the deliveries wait for it', async (t) => {
    const off = await subscribed(t, await build(t, { ...ENV, EXPERIMENTAL_FEATURES: '' }))
    // Counts the delivery loop's polls: each begins by marking the messages no endpoint subscribes to.
    const { store } = off.test.app
    const markUndelivered = store.markUndeliveredMessages.bind(store)
    let polls = 0
    store.markUndeliveredMessages = () => {
      polls++
      return markUndelivered()
    }
    const sent = await send(off.test, off.key.secret, 'paused')
    // The nudge and two polls (0.5 s apart) come and go: the message stays queued, the delivery waits.
    const before = polls
    await until('two polls', () => polls >= before + 2)
    assert.equal(off.hook.received.length, 0)
    assert.equal((await off.test.app.inject({ url: '/readyz' })).json().outbox.depth, 1)
    assert.equal((await messageOf(off.test, off.key.accountId, sent.id))?.status, 'queued')
    // The same database with the feature on sends it.
    const on = await build(t, { ...ENV, DATABASE_URL: off.test.config.databaseUrl })
    await until('received', () => off.hook.received.length === 1)
    await until('delivered', async () => (await messageOf(on, off.key.accountId, sent.id))?.status === 'delivered')
  })
})
