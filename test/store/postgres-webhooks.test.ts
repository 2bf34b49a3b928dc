/**
 * The PostgreSQL store's webhook outbox, beyond the shared contract: what it writes in which
 * transaction, and what several instances on one database do with the same deliveries.
 */
import assert from 'node:assert/strict'
import { describe, it, type TestContext } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { eventBody } from '../../src/domain/events.ts'
import { PostgresStore } from '../../src/store/postgres.ts'
import type { ClaimedDelivery, DeliveryOutcome } from '../../src/store/types.ts'
import { DATABASE, postgres, testDatabaseUrl } from '../helper.ts'
import { attempt } from './contract-webhooks.ts'

const ISO = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/
const schemaOf = (url: string) => /search_path%3D(\w+)/.exec(url)?.[1] as string
const future = () => new Date(Date.now() + 3_600_000).toISOString()
const past = () => new Date(Date.now() - 1000).toISOString()

async function setUp(t: TestContext) {
  const url = await testDatabaseUrl(t)
  const open = async () => {
    const store = await PostgresStore.open({ databaseUrl: url, poolSize: 4, timeoutMs: 5000 })
    t.after(() => store.close())
    return store
  }
  const store = await open()
  const schema = schemaOf(url)
  const sql = (text: string) => postgres(text.replaceAll('$schema', schema))
  const account = async (email: string) => (await store.createAccount(email))?.id as number
  const endpoint = async (accountId: number, events: Parameters<typeof store.createWebhookEndpoint>[0]['events']) => {
    const created = await store.createWebhookEndpoint({
      accountId,
      url: 'https://example.com/hook',
      events,
      description: '',
      secret: 'whsec_a',
    })
    assert.ok(created)
    return created
  }
  const outcome = (claimed: ClaimedDelivery, changes: Partial<DeliveryOutcome> = {}): DeliveryOutcome => ({
    id: claimed.id,
    lease: claimed.lease,
    ...attempt(changes.at),
    delivered: true,
    status: 200,
    error: null,
    retryAt: null,
    disableEndpoint: false,
    ...changes,
  })
  return { url, store, open, sql, account, endpoint, outcome }
}

describe('PostgreSQL store: webhooks and the outbox', { skip: DATABASE !== 'postgres' && 'PostgreSQL only' }, () => {
  it('a message with no subscribed endpoint writes no event, and the sweep fails it', async (t) => {
    const { store, sql, account, endpoint } = await setUp(t)
    const alice = await account('alice@example.com')
    await endpoint(alice, ['order.placed'])
    const disabled = await endpoint(alice, ['message.created'])
    await store.updateWebhookEndpoint(alice, disabled.id, { enabled: false })
    const message = await store.createMessage(alice, 'hi')
    assert.match(message.id, /^msg_[0-9A-Za-z]{16}$/)
    assert.match(message.createdAt, ISO)
    assert.deepEqual(
      { ...message },
      {
        id: message.id,
        message: 'hi',
        status: 'queued',
        statusReason: null,
        createdAt: message.createdAt,
        attempts: 0,
        deliveredAt: null,
      },
    )
    assert.deepEqual(await sql('SELECT count(*)::int AS n FROM $schema.events'), [{ n: 0 }])
    assert.deepEqual(await sql('SELECT count(*)::int AS n FROM $schema.deliveries'), [{ n: 0 }])
    assert.deepEqual(await sql('SELECT fanout FROM $schema.messages'), [{ fanout: 0 }])
    assert.equal(await store.markUndeliveredMessages(), 1)
    assert.equal(await store.markUndeliveredMessages(), 0)
    assert.equal((await store.getMessage(alice, message.id))?.status, 'undelivered')
  })

  it('a message: its event and one delivery per subscribed endpoint, committed with it', async (t) => {
    const { store, sql, account, endpoint } = await setUp(t)
    const alice = await account('alice@example.com')
    const bob = await account('bob@example.com')
    const one = await endpoint(alice, ['message.created'])
    const two = await endpoint(alice, ['order.placed', 'message.created'])
    await endpoint(alice, ['order.placed'])
    await endpoint(bob, ['message.created'])
    const claim = { scope: 'key_a', key: 'm1', fingerprint: 'f', expiresAt: future(), staleBefore: past() }
    assert.deepEqual(await store.claimIdempotencyKey(claim), { state: 'claimed' })
    const message = await store.createMessage(alice, 'hello', claim)
    const replay = await store.claimIdempotencyKey(claim)
    assert.deepEqual(replay.state === 'done' && [replay.status, JSON.parse(replay.body)], [202, { ...message }])
    const events = (await sql('SELECT seq, id, account_id, type, body, created_at FROM $schema.events')) as {
      seq: number
      id: string
      account_id: string
      type: string
      body: string
    }[]
    assert.equal(events.length, 1)
    const [event] = events as [(typeof events)[0]]
    assert.match(event.id, /^evt_[0-9A-Za-z]{16}$/)
    assert.equal(Number(event.account_id), alice)
    assert.equal(event.type, 'message.created')
    assert.equal(event.body, eventBody('message.created', message.createdAt, message))
    const deliveries = (await sql(`SELECT d.id, w.id AS endpoint, d.status, d.message_seq IS NOT NULL AS "forMessage"
      FROM $schema.deliveries d JOIN $schema.webhook_endpoints w ON w.seq = d.endpoint_seq ORDER BY w.seq`)) as {
      id: string
      endpoint: string
    }[]
    assert.deepEqual(
      deliveries.map(({ id, ...rest }) => rest),
      [
        { endpoint: one.id, status: 'pending', forMessage: true },
        { endpoint: two.id, status: 'pending', forMessage: true },
      ],
    )
    assert.ok(deliveries.every((d) => /^dlv_[0-9A-Za-z]{16}$/.test(d.id)))
    assert.deepEqual(await sql('SELECT fanout FROM $schema.messages'), [{ fanout: 2 }])
    assert.equal(await store.markUndeliveredMessages(), 0)
    assert.deepEqual(await store.outboxStats(), { depth: 2, oldestAt: message.createdAt })
    assert.equal(await store.deliveriesDue(), true)
    // A message that fails in its transaction leaves neither event nor delivery.
    await assert.rejects(store.createMessage(alice, 'nul \u0000'))
    assert.deepEqual(await sql('SELECT count(*)::int AS n FROM $schema.deliveries'), [{ n: 2 }])
  })

  it('messages: getMessage and listMessages per account, newest first, by status, in pages', async (t) => {
    const { store, account, endpoint } = await setUp(t)
    const alice = await account('alice@example.com')
    const bob = await account('bob@example.com')
    await endpoint(alice, ['message.created'])
    const sent = []
    for (let i = 0; i < 5; i++) sent.push(await store.createMessage(alice, `m${i}`))
    const other = await store.createMessage(bob, 'bob')
    await store.markUndeliveredMessages()
    assert.deepEqual(await store.getMessage(alice, sent[0]?.id as string), sent[0])
    assert.equal(await store.getMessage(alice, other.id), null)
    assert.equal((await store.getMessage(bob, other.id))?.status, 'undelivered')
    const first = await store.listMessages({ accountId: alice, limit: 2 })
    assert.deepEqual(
      first.messages.map((m) => m.message),
      ['m4', 'm3'],
    )
    assert.ok(first.next)
    const second = await store.listMessages({ accountId: alice, limit: 2, before: first.next })
    assert.deepEqual(
      second.messages.map((m) => m.message),
      ['m2', 'm1'],
    )
    const last = await store.listMessages({ accountId: alice, limit: 2, before: second.next as number })
    assert.deepEqual(last, { messages: [sent[0]], next: null })
    assert.deepEqual(await store.listMessages({ accountId: alice, limit: 10, status: 'failed' }), {
      messages: [],
      next: null,
    })
    assert.deepEqual(
      (await store.listMessages({ accountId: bob, limit: 10, status: 'undelivered' })).messages.length,
      1,
    )
  })

  it('endpoints: create, list, get, update, disable, enable, rotate, delete, per account', async (t) => {
    const { store, sql, account, endpoint } = await setUp(t)
    const alice = await account('alice@example.com')
    const bob = await account('bob@example.com')
    const first = await store.createWebhookEndpoint({
      accountId: alice,
      url: 'https://a.example/hook',
      events: ['order.expired', 'message.created', 'order.expired'],
      description: 'first',
      secret: 'whsec_one',
    })
    assert.ok(first)
    assert.match(first.id, /^we_[0-9A-Za-z]{16}$/)
    assert.match(first.createdAt, ISO)
    assert.deepEqual(first, {
      id: first.id,
      url: 'https://a.example/hook',
      events: ['message.created', 'order.expired'],
      description: 'first',
      status: 'enabled',
      disabledReason: null,
      createdAt: first.createdAt,
      secretRotatedAt: null,
      secret: 'whsec_one',
    })
    assert.deepEqual(await sql('SELECT events FROM $schema.webhook_endpoints'), [
      { events: 'message.created order.expired' },
    ])
    const second = await endpoint(alice, ['order.placed'])
    assert.deepEqual(
      (await store.listWebhookEndpoints(alice)).map((e) => e.id),
      [second.id, first.id],
    )
    assert.deepEqual(await store.listWebhookEndpoints(bob), [])
    assert.deepEqual(await store.getWebhookEndpoint(alice, first.id), first)
    assert.equal(await store.getWebhookEndpoint(bob, first.id), null)
    assert.equal(await store.updateWebhookEndpoint(bob, first.id, { description: 'x' }), null)

    const changed = await store.updateWebhookEndpoint(alice, first.id, {
      url: 'https://b.example/hook',
      events: ['order.placed', 'message.created'],
      description: 'changed',
    })
    assert.deepEqual(changed, {
      ...first,
      url: 'https://b.example/hook',
      events: ['message.created', 'order.placed'],
      description: 'changed',
    })
    assert.deepEqual(await store.updateWebhookEndpoint(alice, first.id, {}), changed)
    const disabled = await store.updateWebhookEndpoint(alice, first.id, { enabled: false })
    assert.deepEqual([disabled?.status, disabled?.disabledReason], ['disabled', 'disabled by the account'])
    const enabled = await store.updateWebhookEndpoint(alice, first.id, { enabled: true })
    assert.deepEqual(enabled, changed)

    assert.equal(await store.rotateWebhookSecret(bob, first.id, 'whsec_two', future()), null)
    const rotated = await store.rotateWebhookSecret(alice, first.id, 'whsec_two', future())
    assert.equal(rotated?.secret, 'whsec_two')
    assert.match(rotated?.secretRotatedAt ?? '', ISO)
    // The previous secret signs beside the new one until previousUntil.
    await store.createMessage(alice, 'signed twice')
    const [claimed] = await store.claimDeliveries(10, 60_000)
    assert.deepEqual(claimed?.secrets, ['whsec_two', 'whsec_one'])
    await store.rotateWebhookSecret(alice, first.id, 'whsec_three', past())
    await store.createMessage(alice, 'signed once')
    const [again] = await store.claimDeliveries(10, 60_000)
    assert.deepEqual(again?.secrets, ['whsec_three'])

    assert.equal(await store.deleteWebhookEndpoint(bob, first.id), false)
    assert.equal(await store.deleteWebhookEndpoint(alice, first.id), true)
    assert.equal(await store.deleteWebhookEndpoint(alice, first.id), false)
    assert.equal(await store.getWebhookEndpoint(alice, first.id), null)
    assert.equal(await store.updateWebhookEndpoint(alice, first.id, { enabled: true }), null)
    assert.equal(await store.rotateWebhookSecret(alice, first.id, 'whsec_four', future()), null)
    assert.equal(await store.listDeliveries(alice, first.id, 10), null)
    assert.deepEqual(
      (await store.listWebhookEndpoints(alice)).map((e) => e.id),
      [second.id],
    )
  })

  it('orders: placed, completed, canceled and expired events, for the order’s account only', async (t) => {
    const { store, sql, account, endpoint } = await setUp(t)
    const alice = await account('alice@example.com')
    const bob = await account('bob@example.com')
    const carol = await account('carol@example.com')
    await endpoint(alice, ['order.placed', 'order.completed', 'order.canceled', 'order.expired'])
    await endpoint(bob, ['order.expired'])
    const pets = await Promise.all([1, 2, 3, 4, 5].map((i) => store.createPet({ name: `p${i}`, categoryId: 1 })))
    const [p1, p2, p3, p4, p5] = pets.map((p) => p.id) as [number, number, number, number, number]
    const events = async () =>
      (await sql('SELECT e.account_id AS account, e.body FROM $schema.events e ORDER BY e.seq')) as {
        account: string
        body: string
      }[]
    const place = async (accountId: number, petId: number, holdMs = 3_600_000) => {
      const result = await store.placeOrder({ accountId, petId, holdMs })
      assert.ok('placed' in result)
      return result.placed
    }

    const placed = await place(alice, p1)
    const completed = await store.transitionOrder(alice, placed.id, 'completed')
    assert.ok('changed' in completed && completed.changed)
    const repeated = await store.transitionOrder(alice, placed.id, 'completed')
    assert.ok('changed' in repeated && !repeated.changed)
    const toCancel = await place(alice, p2)
    const canceled = await store.transitionOrder(alice, toCancel.id, 'canceled')
    assert.ok('order' in canceled)
    // Carol has no endpoint: her orders make no events.
    await place(carol, p3)
    assert.deepEqual(
      (await events()).map((e) => [Number(e.account), e.body]),
      [
        [alice, eventBody('order.placed', placed.updatedAt, placed)],
        [alice, eventBody('order.completed', completed.order.updatedAt, completed.order)],
        [alice, eventBody('order.placed', toCancel.updatedAt, toCancel)],
        [alice, eventBody('order.canceled', canceled.order.updatedAt, canceled.order)],
      ],
    )
    assert.equal(JSON.parse((await events())[1]?.body as string).data.status, 'completed')

    // Bob's expired hold on p4 expires when Alice orders p4: Bob's event, then Alice's.
    const bobs = await place(bob, p4, 50)
    await sleep(100)
    const alices = await place(alice, p4)
    const [expiredInPlace, placedAfter] = (await events()).slice(4)
    assert.equal(Number(expiredInPlace?.account), bob)
    const expiredBody = JSON.parse(expiredInPlace?.body as string)
    assert.deepEqual(
      [expiredBody.type, expiredBody.data.id, expiredBody.data.status, expiredBody.timestamp],
      ['order.expired', bobs.id, 'expired', expiredBody.data.updatedAt],
    )
    assert.deepEqual(Object.keys(expiredBody.data), Object.keys(bobs))
    assert.equal(placedAfter?.body, eventBody('order.placed', alices.updatedAt, alices))

    // An expired hold met by transitionOrder.
    const short = await place(alice, p5, 50)
    await sleep(100)
    const refused = await store.transitionOrder(alice, short.id, 'completed')
    assert.ok('refused' in refused && refused.refused === 'conflict')
    const last = (await events()).at(-1)
    assert.equal(last?.body, eventBody('order.expired', refused.order.updatedAt, refused.order))

    // The sweep: one event per expired order, for its own account (none for Carol's).
    await store.transitionOrder(alice, alices.id, 'canceled')
    const before = (await events()).length
    const a = await place(alice, p4, 50)
    const b = await place(bob, p5, 50)
    await sleep(100)
    const swept = await store.expireOrders(new Date().toISOString())
    assert.deepEqual(swept.map((o) => o.id).sort(), [a.id, b.id].sort())
    assert.ok(swept.every((o) => !('accountId' in o)))
    const sweptEvents = (await events()).slice(before + 1)
    assert.deepEqual(
      sweptEvents.map((e) => [Number(e.account), e.body]).sort(),
      swept.map((o) => [o.id === a.id ? alice : bob, eventBody('order.expired', o.updatedAt, o)]).sort() as [
        number,
        string,
      ][],
    )
    assert.deepEqual(await sql('SELECT count(*)::int AS n FROM $schema.deliveries WHERE message_seq IS NOT NULL'), [
      { n: 0 },
    ])
  })

  it('claim, deliver, retry, fail: the delivery and its message move together', async (t) => {
    const { store, account, endpoint, outcome } = await setUp(t)
    const alice = await account('alice@example.com')
    const hook = await endpoint(alice, ['message.created'])
    assert.equal(await store.deliveriesDue(), false)
    assert.deepEqual(await store.outboxStats(), { depth: 0, oldestAt: null })
    const message = await store.createMessage(alice, 'hi')
    const [claimed, ...rest] = await store.claimDeliveries(10, 60_000)
    assert.deepEqual(rest, [])
    assert.ok(claimed)
    const [event] = (await store.listDeliveries(alice, hook.id, 10)) ?? []
    assert.deepEqual(claimed, {
      id: claimed.id,
      lease: claimed.lease,
      eventId: event?.eventId,
      body: eventBody('message.created', message.createdAt, message),
      url: 'https://example.com/hook',
      secrets: ['whsec_a'],
      attempts: 1,
      // Without tracing, no trace is kept with the event.
      traceparent: null,
    })
    assert.deepEqual(await store.claimDeliveries(10, 60_000), [], 'leased: not due')
    assert.equal(await store.deliveriesDue(), false)

    // Not delivered, retried later: pending, not due until then.
    const retryAt = new Date(Date.now() + 200).toISOString()
    const failedAt = new Date().toISOString()
    assert.equal(
      await store.recordDelivery(
        outcome(claimed, { delivered: false, status: 500, error: 'HTTP 500', retryAt, at: failedAt }),
      ),
      'pending',
    )
    assert.equal(await store.recordDelivery(outcome(claimed)), null, 'the lease ended with the record')
    let [listed] = (await store.listDeliveries(alice, hook.id, 10)) ?? []
    assert.deepEqual(listed, {
      id: claimed.id,
      eventId: claimed.eventId,
      eventType: 'message.created',
      status: 'pending',
      attempts: 1,
      nextAttemptAt: retryAt,
      lastAttemptAt: failedAt,
      lastStatus: 500,
      lastError: 'HTTP 500',
      deliveredAt: null,
      createdAt: message.createdAt,
    })
    assert.deepEqual(
      { ...(await store.getMessage(alice, message.id)) },
      { ...message, attempts: 1 },
      'still queued, one attempt',
    )
    assert.deepEqual(await store.claimDeliveries(10, 60_000), [])
    await sleep(250)
    assert.equal(await store.deliveriesDue(), true)
    const [second] = await store.claimDeliveries(10, 60_000)
    assert.ok(second)
    assert.equal(second.attempts, 2)
    assert.equal(second.body, claimed.body)
    assert.equal(second.eventId, claimed.eventId)
    const deliveredAt = new Date().toISOString()
    assert.equal(await store.recordDelivery(outcome(second, { at: deliveredAt })), 'delivered')
    ;[listed] = (await store.listDeliveries(alice, hook.id, 10)) ?? []
    assert.deepEqual(
      [listed?.status, listed?.attempts, listed?.nextAttemptAt, listed?.deliveredAt, listed?.lastStatus],
      ['delivered', 2, null, deliveredAt, 200],
    )
    assert.deepEqual(await store.getMessage(alice, message.id), {
      ...message,
      status: 'delivered',
      attempts: 2,
      deliveredAt,
    })
    assert.deepEqual(await store.outboxStats(), { depth: 0, oldestAt: null })

    // A final failure fails the message when it was its last pending delivery.
    const doomed = await store.createMessage(alice, 'doomed')
    const [third] = await store.claimDeliveries(10, 60_000)
    assert.ok(third)
    assert.equal(
      await store.recordDelivery(outcome(third, { delivered: false, status: null, error: 'refused' })),
      'failed',
    )
    assert.deepEqual(await store.getMessage(alice, doomed.id), { ...doomed, status: 'failed', attempts: 1 })
    const [failed] = (await store.listDeliveries(alice, hook.id, 10)) ?? []
    assert.deepEqual(
      [failed?.id, failed?.status, failed?.nextAttemptAt, failed?.lastError],
      [third.id, 'failed', null, 'refused'],
    )

    // Redelivered: pending and due now, the message queued again; delivered_at kept.
    const bob = await account('bob@example.com')
    assert.equal(await store.redeliver(bob, third.id), null)
    assert.equal(await store.redeliver(alice, 'dlv_nope'), null)
    const redelivered = (await store.redeliver(alice, third.id))?.delivery
    assert.deepEqual([redelivered?.id, redelivered?.status, redelivered?.attempts], [third.id, 'pending', 1])
    assert.match(redelivered?.nextAttemptAt ?? '', ISO)
    assert.equal((await store.getMessage(alice, doomed.id))?.status, 'queued')
    const resent = (await store.redeliver(alice, second.id))?.delivery
    assert.equal(resent?.deliveredAt, deliveredAt)
    assert.equal((await store.getMessage(alice, message.id))?.status, 'delivered')
    assert.equal((await store.claimDeliveries(10, 60_000)).length, 2)
  })

  it('a message with two endpoints: failed only once neither delivery is pending; delivered by either', async (t) => {
    const { store, account, endpoint, outcome } = await setUp(t)
    const alice = await account('alice@example.com')
    await endpoint(alice, ['message.created'])
    await endpoint(alice, ['message.created'])
    const message = await store.createMessage(alice, 'hi')
    const [a, b] = await store.claimDeliveries(10, 60_000)
    assert.ok(a && b)
    await store.recordDelivery(outcome(a, { delivered: false, error: 'x' }))
    assert.equal((await store.getMessage(alice, message.id))?.status, 'queued')
    await store.recordDelivery(outcome(b, { delivered: false, error: 'x' }))
    assert.deepEqual(await store.getMessage(alice, message.id), { ...message, status: 'failed', attempts: 2 })

    const other = await store.createMessage(alice, 'other')
    const [c, d] = await store.claimDeliveries(10, 60_000)
    assert.ok(c && d)
    await store.recordDelivery(outcome(c, { delivered: false, error: 'x' }))
    await store.recordDelivery(outcome(d))
    assert.equal((await store.getMessage(alice, other.id))?.status, 'delivered')

    // Both final failures at once, on two connections: the message still ends failed.
    for (let round = 0; round < 10; round++) {
      const racing = await store.createMessage(alice, `race ${round}`)
      const [e, f] = await store.claimDeliveries(10, 60_000)
      assert.ok(e && f)
      await Promise.all([e, f].map((x) => store.recordDelivery(outcome(x, { delivered: false, error: 'x' }))))
      assert.equal((await store.getMessage(alice, racing.id))?.status, 'failed', `round ${round}`)
    }
  })

  it('a 410 disables the endpoint and fails its pending deliveries; so do disabling and deleting', async (t) => {
    const { store, sql, account, endpoint, outcome } = await setUp(t)
    const alice = await account('alice@example.com')
    const gone = await endpoint(alice, ['message.created'])
    const first = await store.createMessage(alice, 'one')
    const second = await store.createMessage(alice, 'two')
    const [claimed] = await store.claimDeliveries(1, 60_000)
    assert.ok(claimed)
    const at = new Date().toISOString()
    const answer = { delivered: false, status: 410, error: 'HTTP 410', disableEndpoint: true, at }
    assert.equal(await store.recordDelivery(outcome(claimed, { ...answer, lease: 'lease_wrong' })), null)
    assert.equal((await store.getWebhookEndpoint(alice, gone.id))?.status, 'enabled', 'a lost lease disables nothing')
    assert.equal(await store.recordDelivery(outcome(claimed, answer)), 'failed')
    const disabled = await store.getWebhookEndpoint(alice, gone.id)
    assert.deepEqual([disabled?.status, disabled?.disabledReason], ['disabled', 'answered 410 Gone'])
    assert.deepEqual(
      await sql(
        'SELECT disabled_at = last_attempt_at AS same FROM $schema.webhook_endpoints, $schema.deliveries WHERE deliveries.id = ' +
          `'${claimed.id}'`,
      ),
      [{ same: true }],
    )
    const deliveries = (await store.listDeliveries(alice, gone.id, 10)) ?? []
    assert.deepEqual(
      deliveries.map((d) => [d.status, d.lastError, d.attempts]),
      [
        ['failed', 'endpoint disabled', 0],
        ['failed', 'HTTP 410', 1],
      ],
    )
    assert.equal((await store.getMessage(alice, first.id))?.status, 'failed')
    assert.equal((await store.getMessage(alice, second.id))?.status, 'failed')
    // Nothing is resent to a disabled endpoint (it would stay pending); once enabled again, it is.
    assert.equal(await store.redeliver(alice, claimed.id), null)
    assert.deepEqual(await store.claimDeliveries(10, 60_000), [])
    await store.updateWebhookEndpoint(alice, gone.id, { enabled: true })
    assert.equal((await store.redeliver(alice, claimed.id))?.delivery.status, 'pending')
    assert.deepEqual(
      (await store.claimDeliveries(10, 60_000)).map((c) => c.id),
      [claimed.id],
    )

    // Disabled by the account, deleted: pending deliveries fail with the reason.
    const byHand = await endpoint(alice, ['message.created'])
    const third = await store.createMessage(alice, 'three')
    await store.updateWebhookEndpoint(alice, byHand.id, { enabled: false })
    assert.deepEqual(
      ((await store.listDeliveries(alice, byHand.id, 10)) ?? []).map((d) => [d.status, d.lastError, d.nextAttemptAt]),
      [['failed', 'endpoint disabled', null]],
    )
    // `gone` still has a pending delivery of this message: it stays queued until that one ends.
    assert.equal((await store.getMessage(alice, third.id))?.status, 'queued')
    assert.equal(await store.deleteWebhookEndpoint(alice, gone.id), true)
    assert.equal((await store.getMessage(alice, third.id))?.status, 'failed')
    // The two pending then: the one claimed after enabling (leased) and the third message's.
    const ended = (await sql(`SELECT d.id, d.status, d.lease, d.next_attempt_at AS next FROM $schema.deliveries d
      JOIN $schema.webhook_endpoints w ON w.seq = d.endpoint_seq
      WHERE w.id = '${gone.id}' AND d.last_error = 'endpoint deleted' ORDER BY d.seq`)) as {
      id: string
      status: string
      lease: string | null
      next: string | null
    }[]
    assert.equal(ended.length, 2)
    assert.equal(ended[0]?.id, claimed.id)
    assert.ok(ended.every(({ status }) => status === 'failed'))
    // The one under way keeps its lease and its end, so that its attempt still records its answer,
    // and nothing sends it again meanwhile (decision 123); the other has neither.
    assert.deepEqual(
      ended.map(({ lease, next }) => [lease !== null, next !== null]),
      [
        [true, true],
        [false, false],
      ],
    )
    assert.equal(await store.redeliver(alice, claimed.id), null, 'a deleted endpoint’s delivery is not resent')
    assert.deepEqual(await store.outboxStats(), { depth: 0, oldestAt: null })
  })

  it('a lease that ran out is claimed again; the old holder’s outcome is ignored', async (t) => {
    const { store, account, endpoint, outcome } = await setUp(t)
    const alice = await account('alice@example.com')
    const hook = await endpoint(alice, ['message.created'])
    const message = await store.createMessage(alice, 'hi')
    const [old] = await store.claimDeliveries(10, 100)
    assert.ok(old)
    assert.deepEqual(await store.claimDeliveries(10, 100), [])
    await sleep(200)
    const [taken] = await store.claimDeliveries(10, 60_000)
    assert.ok(taken)
    assert.equal(taken.id, old.id)
    assert.notEqual(taken.lease, old.lease)
    assert.equal(taken.attempts, 2)
    assert.equal(await store.recordDelivery(outcome(old)), null)
    assert.equal(await store.recordDelivery(outcome(old, { delivered: false, disableEndpoint: true })), null)
    const [listed] = (await store.listDeliveries(alice, hook.id, 10)) ?? []
    assert.deepEqual([listed?.status, listed?.lastAttemptAt], ['pending', null], 'nothing recorded')
    assert.deepEqual(await store.getMessage(alice, message.id), message)
    assert.equal((await store.getWebhookEndpoint(alice, hook.id))?.status, 'enabled')
    assert.equal(await store.recordDelivery(outcome(taken)), 'delivered')
    assert.equal((await store.getMessage(alice, message.id))?.status, 'delivered')
  })

  it('instances claiming at once never lease an endpoint more than its share', async (t) => {
    const { store, open, account, endpoint } = await setUp(t)
    const other = await open()
    const alice = await account('alice@example.com')
    await endpoint(alice, ['message.created'])
    for (let i = 0; i < 20; i++) await store.createMessage(alice, `m${i}`)
    const leased = new Set<string>()
    for (let round = 0; round < 10; round++) {
      const claims = [store, other, store, other].map((instance) => instance.claimDeliveries(8, 60_000, 4))
      for (const claimed of await Promise.all(claims)) for (const c of claimed) leased.add(c.id)
    }
    // Each claim counts the leases of the others, committed before it holds the endpoint.
    assert.equal(leased.size, 4)
  })

  it('two instances claiming at once never lease the same delivery', async (t) => {
    const { store, open, account, endpoint, outcome } = await setUp(t)
    const other = await open()
    const alice = await account('alice@example.com')
    await endpoint(alice, ['message.created'])
    await endpoint(alice, ['message.created'])
    const COUNT = 60
    for (let i = 0; i < COUNT; i++) await store.createMessage(alice, `m${i}`)
    const seen = new Map<string, ClaimedDelivery>()
    const work = async (instance: PostgresStore) => {
      const mine: ClaimedDelivery[] = []
      for (;;) {
        const claimed = await instance.claimDeliveries(3, 60_000)
        // None: nothing due, or every endpoint due was being served by another claim at that moment.
        if (claimed.length === 0 && !(await instance.deliveriesDue())) return mine
        mine.push(...claimed)
        await Promise.all(claimed.map((c) => instance.recordDelivery(outcome(c))))
      }
    }
    const results = await Promise.all([work(store), work(other), work(store), work(other)])
    for (const claimed of results.flat()) {
      assert.ok(!seen.has(claimed.id), `${claimed.id} leased twice`)
      seen.set(claimed.id, claimed)
    }
    assert.equal(seen.size, COUNT * 2)
    const [a, b, c, d] = results.map((r) => r.length) as [number, number, number, number]
    assert.ok(a + c > 0 && b + d > 0, `each instance got work: ${[a + c, b + d]}`)
    assert.deepEqual(await store.outboxStats(), { depth: 0, oldestAt: null })
    const page = await store.listMessages({ accountId: alice, limit: 100 })
    assert.ok(page.messages.every((m) => m.status === 'delivered' && m.attempts === 2))
  })
})
