/** The webhook part of the storage contract (run inside storeContract, on every backend). */
import assert from 'node:assert/strict'
import { it } from 'node:test'
import type { EventType } from '../../src/schemas/webhooks.ts'
import type { ClaimedDelivery, DeliveryOutcome, Store } from '../../src/store/types.ts'
import { plain } from '../helper.ts'
import type { OpenStore } from './contract.ts'

const SECRET = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw'
const LEASE_MS = 60_000
/** When an attempt was made and when it ended: at once, unless a test looks at the difference. */
export const attempt = (at = new Date().toISOString()) => ({ at, answeredAt: at })
/** A claimed delivery answered 500 with no retry left: it fails. */
export const givenUp = ({ id, lease }: ClaimedDelivery, at?: string): DeliveryOutcome => ({
  id,
  lease,
  ...attempt(at),
  delivered: false,
  status: 500,
  error: null,
  retryAt: null,
  disableEndpoint: false,
})

/** An endpoint stored with no cap: always stored. */
async function createEndpoint(store: Store, ...args: Parameters<Store['createWebhookEndpoint']>) {
  const created = await store.createWebhookEndpoint(...args)
  assert.ok(created)
  return created
}

/** An endpoint of `accountId` at `url` for `events`, without a description, signed with SECRET. */
const subscribe = (store: Store, accountId: number, url: string, events: EventType[]) =>
  createEndpoint(store, { accountId, url, events, description: '', secret: SECRET })

async function account(store: Store, email: string): Promise<number> {
  const created = await store.createAccount(email)
  assert.ok(created)
  return created.id
}

export function webhooksContract(open: OpenStore): void {
  it('webhooks: an account has at most `max` endpoints, however many creates come at once', async (t) => {
    const store = await open(t)
    const alice = await account(store, 'alice@example.com')
    const bob = await account(store, 'bob@example.com')
    const create = (accountId: number, i: number) =>
      store.createWebhookEndpoint({
        accountId,
        url: `https://a.example/${i}`,
        events: ['order.placed'],
        description: '',
        secret: SECRET,
        max: 16,
      })
    const results = await Promise.all(Array.from({ length: 40 }, (_, i) => create(alice, i)))
    assert.equal(results.filter((r) => r !== null).length, 16)
    assert.equal((await store.listWebhookEndpoints(alice)).length, 16)
    // Another account's cap is its own; a deleted endpoint no longer counts.
    assert.ok(await create(bob, 0))
    const [oldest] = (await store.listWebhookEndpoints(alice)).slice(-1)
    assert.ok(oldest && (await store.deleteWebhookEndpoint(alice, oldest.id)))
    assert.ok(await create(alice, 40))
    assert.equal(await create(alice, 41), null)
  })

  it('webhooks: endpoints are the account’s own, newest first; update, rotate, delete', async (t) => {
    const store = await open(t)
    const alice = await account(store, 'alice@example.com')
    const bob = await account(store, 'bob@example.com')
    const first = await createEndpoint(store, {
      accountId: alice,
      url: 'https://a.example/hook',
      events: ['order.placed', 'message.created', 'order.placed'],
      description: 'first',
      secret: SECRET,
    })
    assert.ok(first)
    assert.match(first.id, /^we_/)
    assert.deepEqual(first.events, ['message.created', 'order.placed'])
    assert.equal(first.status, 'enabled')
    assert.equal(first.secret, SECRET)
    assert.equal(first.secretRotatedAt, null)
    const second = await subscribe(store, alice, 'https://b.example/hook', ['order.expired'])
    assert.ok(second)
    assert.deepEqual(
      (await store.listWebhookEndpoints(alice)).map((e) => e.id),
      [second.id, first.id],
    )
    assert.deepEqual(await store.listWebhookEndpoints(bob), [])
    assert.equal(await store.getWebhookEndpoint(bob, first.id), null)
    assert.deepEqual(plain(await store.getWebhookEndpoint(alice, first.id)), plain(first))

    const disabled = await store.updateWebhookEndpoint(alice, first.id, { enabled: false, description: 'off' })
    assert.equal(disabled?.status, 'disabled')
    assert.equal(disabled?.description, 'off')
    assert.equal(disabled?.url, first.url)
    const enabled = await store.updateWebhookEndpoint(alice, first.id, { enabled: true, events: ['order.canceled'] })
    assert.equal(enabled?.status, 'enabled')
    assert.equal(enabled?.disabledReason, null)
    assert.deepEqual(enabled?.events, ['order.canceled'])
    assert.equal(await store.updateWebhookEndpoint(bob, first.id, { enabled: false }), null)

    const rotated = await store.rotateWebhookSecret(
      alice,
      first.id,
      'whsec_new',
      new Date(Date.now() + 1000).toISOString(),
    )
    assert.equal(rotated?.secret, 'whsec_new')
    assert.ok(rotated?.secretRotatedAt)
    assert.equal(await store.rotateWebhookSecret(bob, first.id, 'x', new Date().toISOString()), null)

    assert.equal(await store.deleteWebhookEndpoint(bob, first.id), false)
    assert.equal(await store.deleteWebhookEndpoint(alice, first.id), true)
    assert.equal(await store.deleteWebhookEndpoint(alice, first.id), false)
    assert.equal(await store.getWebhookEndpoint(alice, first.id), null)
    assert.deepEqual(
      (await store.listWebhookEndpoints(alice)).map((e) => e.id),
      [second.id],
    )
  })

  it('webhooks: an endpoint created with an Idempotency-Key completes its claim with the endpoint, secret included', async (t) => {
    const store = await open(t)
    const alice = await account(store, 'alice@example.com')
    const future = new Date(Date.now() + 86_400_000).toISOString()
    const past = new Date(Date.now() - 60_000).toISOString()
    const claim = { scope: 'key_a', key: 'we1', fingerprint: 'f1', expiresAt: future, staleBefore: past }
    assert.deepEqual(await store.claimIdempotencyKey(claim), { state: 'claimed' })
    const created = await createEndpoint(
      store,
      { accountId: alice, url: 'https://a.example/hook', events: ['order.placed'], description: '', secret: SECRET },
      claim,
    )
    const replay = await store.claimIdempotencyKey(claim)
    assert.deepEqual(replay.state === 'done' && { status: replay.status, body: JSON.parse(replay.body) }, {
      status: 201,
      body: plain(created),
    })
    assert.equal(created.secret, SECRET)
  })

  it('webhooks: a message makes one event and one delivery per subscribed endpoint, in its transaction', async (t) => {
    const store = await open(t)
    const alice = await account(store, 'alice@example.com')
    const bob = await account(store, 'bob@example.com')
    // Without an endpoint nothing is queued, and the sweep marks the message undelivered, saying why.
    const lonely = await store.createMessage(bob, 'nobody listens')
    assert.deepEqual([lonely.status, lonely.statusReason], ['queued', null])
    assert.deepEqual(await store.claimDeliveries(10, LEASE_MS), [])
    assert.equal(await store.markUndeliveredMessages(), 1)
    const undelivered = await store.getMessage(bob, lonely.id)
    assert.deepEqual(plain(undelivered), {
      ...plain(lonely),
      status: 'undelivered',
      statusReason: 'no enabled endpoint subscribed to message.created',
    })
    assert.deepEqual(plain((await store.listMessages({ accountId: bob, limit: 10, status: 'undelivered' })).messages), [
      plain(undelivered),
    ])
    assert.equal(await store.markUndeliveredMessages(), 0)

    const a = await subscribe(store, alice, 'https://a.example/hook', ['message.created'])
    const b = await subscribe(store, alice, 'https://b.example/hook', ['message.created', 'order.placed'])
    // Subscribed to something else: gets nothing.
    await subscribe(store, alice, 'https://c.example/hook', ['order.placed'])
    const message = await store.createMessage(alice, 'hello')
    assert.equal(await store.markUndeliveredMessages(), 0)
    assert.equal(await store.deliveriesDue(), true)
    assert.deepEqual(plain(await store.outboxStats()), { depth: 2, oldestAt: message.createdAt })

    const claimed = await store.claimDeliveries(10, LEASE_MS)
    assert.equal(claimed.length, 2)
    assert.deepEqual(claimed.map((c) => c.url).sort(), [a.url, b.url])
    assert.equal(claimed[0]?.eventId, claimed[1]?.eventId)
    assert.match(claimed[0]?.eventId ?? '', /^evt_/)
    assert.deepEqual(claimed[0]?.secrets, [SECRET])
    assert.equal(claimed[0]?.attempts, 1)
    const body = JSON.parse(claimed[0]?.body ?? '{}')
    assert.deepEqual(body, { type: 'message.created', timestamp: message.createdAt, data: plain(message) })
    // Leased: not due, not claimable again.
    assert.equal(await store.deliveriesDue(), false)
    assert.deepEqual(await store.claimDeliveries(10, LEASE_MS), [])
    assert.equal(await store.listDeliveries(bob, a.id, 10), null)
    const listed = await store.listDeliveries(alice, a.id, 10)
    assert.equal(listed?.length, 1)
    assert.equal(listed?.[0]?.eventType, 'message.created')
    assert.equal(listed?.[0]?.status, 'pending')
  })

  it('webhooks: outcomes under the lease only; delivered, retried, failed; the message follows', async (t) => {
    const store = await open(t)
    const alice = await account(store, 'alice@example.com')
    const endpoints = []
    for (const url of ['https://a.example/hook', 'https://b.example/hook']) {
      endpoints.push(await subscribe(store, alice, url, ['message.created']))
    }
    const message = await store.createMessage(alice, 'hello')
    const [one, two] = await store.claimDeliveries(10, LEASE_MS)
    assert.ok(one && two)
    const at = new Date().toISOString()
    const outcome = { at, answeredAt: at, status: 500, error: null, disableEndpoint: false }
    // A stale lease records nothing.
    assert.equal(
      await store.recordDelivery({ ...outcome, id: one.id, lease: 'lease_stale', delivered: false, retryAt: at }),
      null,
    )
    // Retried: due again at once (retryAt is now).
    assert.equal(
      await store.recordDelivery({ ...outcome, id: one.id, lease: one.lease, delivered: false, retryAt: at }),
      'pending',
    )
    assert.equal(
      await store.recordDelivery({ ...outcome, id: one.id, lease: one.lease, delivered: false, retryAt: at }),
      null,
    )
    assert.equal((await store.getMessage(alice, message.id))?.attempts, 1)
    const [again] = await store.claimDeliveries(10, LEASE_MS)
    assert.equal(again?.id, one.id)
    assert.equal(again?.attempts, 2)
    assert.equal(again?.body, one.body)
    // Given up on one endpoint: the message is still queued while the other is pending.
    assert.equal(
      await store.recordDelivery({
        ...outcome,
        id: one.id,
        lease: again?.lease ?? '',
        delivered: false,
        retryAt: null,
      }),
      'failed',
    )
    assert.equal((await store.getMessage(alice, message.id))?.status, 'queued')
    // Delivered when its answer arrived, not when the attempt began.
    const answeredAt = new Date(Date.parse(at) + 2500).toISOString()
    assert.equal(
      await store.recordDelivery({
        ...outcome,
        id: two.id,
        lease: two.lease,
        answeredAt,
        status: 204,
        delivered: true,
        retryAt: null,
      }),
      'delivered',
    )
    const delivered = await store.getMessage(alice, message.id)
    assert.equal(delivered?.status, 'delivered')
    assert.equal(delivered?.attempts, 3)
    assert.equal(delivered?.deliveredAt, answeredAt)
    const deliveries = []
    for (const endpoint of endpoints) deliveries.push(...((await store.listDeliveries(alice, endpoint.id, 10)) ?? []))
    assert.deepEqual(
      deliveries.filter((d) => d.id === two.id).map((d) => [d.lastAttemptAt, d.deliveredAt]),
      [[at, answeredAt]],
    )
    assert.deepEqual(plain(await store.outboxStats()), { depth: 0, oldestAt: null })

    // A resend makes a failed delivery pending again.
    const resent = await store.redeliver(alice, one.id)
    assert.deepEqual([resent?.resent, resent?.delivery.status], [true, 'pending'])
    assert.equal(await store.redeliver(alice + 1000, one.id), null)
    const [third] = await store.claimDeliveries(10, LEASE_MS)
    assert.equal(third?.id, one.id)
    // The schedule started over: this is its first step again, though the delivery has had more.
    assert.equal(third?.attempts, 1)
    // While that attempt holds its lease, a resend changes nothing: no second attempt at once.
    const during = await store.redeliver(alice, one.id)
    assert.deepEqual([during?.resent, during?.delivery.status], [false, 'pending'])
    assert.deepEqual(await store.claimDeliveries(10, LEASE_MS), [])
  })

  it('webhooks: every attempt failing fails the message; 410 disables the endpoint and fails what it had', async (t) => {
    const store = await open(t)
    const alice = await account(store, 'alice@example.com')
    const endpoint = await subscribe(store, alice, 'https://a.example/hook', ['message.created'])
    const first = await store.createMessage(alice, 'one')
    const second = await store.createMessage(alice, 'two')
    const [claimed] = await store.claimDeliveries(1, LEASE_MS)
    assert.ok(claimed)
    const recorded = await store.recordDelivery({
      id: claimed.id,
      lease: claimed.lease,
      ...attempt(),
      delivered: false,
      status: 410,
      error: null,
      retryAt: null,
      disableEndpoint: true,
    })
    assert.equal(recorded, 'failed')
    assert.equal((await store.getWebhookEndpoint(alice, endpoint.id))?.status, 'disabled')
    // Failed, not undelivered: an endpoint was subscribed. The deliveries say why, not the message.
    for (const { id } of [first, second]) {
      const failed = await store.getMessage(alice, id)
      assert.deepEqual([failed?.status, failed?.statusReason], ['failed', null])
    }
    assert.equal(await store.markUndeliveredMessages(), 0)
    assert.deepEqual(await store.claimDeliveries(10, LEASE_MS), [])
    // Nor is anything resent to it: it would stay pending for good.
    assert.equal(await store.redeliver(alice, claimed.id), null)
    // A disabled endpoint gets no new event.
    await store.createMessage(alice, 'three')
    assert.equal(await store.deliveriesDue(), false)
  })

  it('webhooks: claims smaller than the endpoints with deliveries due serve them in turn', async (t) => {
    const store = await open(t)
    for (const name of ['a', 'b', 'c']) {
      const owner = await account(store, `${name}@example.com`)
      await subscribe(store, owner, `https://${name}.example/hook`, ['message.created'])
      for (let i = 0; i < 3; i++) await store.createMessage(owner, `${name}${i}`)
    }
    const served: string[] = []
    for (let i = 0; i < 6; i++) {
      const claimed = await store.claimDeliveries(1, LEASE_MS, 8)
      served.push(...claimed.map((c) => new URL(c.url).hostname[0] as string))
    }
    // Each endpoint's turn comes before any has a second: a, b, c, then again.
    assert.deepEqual(served, ['a', 'b', 'c', 'a', 'b', 'c'])
  })

  it('webhooks: attempts under way when their endpoint is disabled still record their outcome', async (t) => {
    const store = await open(t)
    const alice = await account(store, 'alice@example.com')
    const endpoint = await subscribe(store, alice, 'https://a.example/hook', ['message.created'])
    for (const text of ['gone', 'arrived', 'refused']) await store.createMessage(alice, text)
    const claimed = await store.claimDeliveries(10, LEASE_MS)
    const sent = (text: string) => {
      const delivery = claimed.find((c) => JSON.parse(c.body).data.message === text)
      assert.ok(delivery)
      return { id: delivery.id, lease: delivery.lease, ...attempt() }
    }
    const messageId = (text: string) => JSON.parse(claimed.find((c) => c.body.includes(text))?.body ?? '{}').data.id
    // One attempt answers 410: the endpoint is disabled, and the two others fail with it, under way.
    const gone = { ...sent('gone'), status: 410, error: null, delivered: false, retryAt: null, disableEndpoint: true }
    assert.equal(await store.recordDelivery(gone), 'failed')
    // One of them had arrived (200): it is delivered, and so is its message.
    const arrived = { ...sent('arrived'), status: 200, error: null, delivered: true, retryAt: null }
    assert.equal(await store.recordDelivery({ ...arrived, disableEndpoint: false }), 'delivered')
    // The other was refused (500, a retry due): it stays failed for its endpoint, its attempt recorded.
    const retryAt = new Date(Date.now() + 60_000).toISOString()
    const refused = { ...sent('refused'), status: 500, error: 'status 500', delivered: false, retryAt }
    // Failed, though its answer asked for a retry: the metrics count it so (not a retry).
    assert.equal(await store.recordDelivery({ ...refused, disableEndpoint: false }), 'failed')
    const deliveries = (await store.listDeliveries(alice, endpoint.id, 10)) ?? []
    const byId = new Map(deliveries.map((d) => [d.id, d]))
    const seen = (id: string) => {
      const d = byId.get(id)
      return [d?.status, d?.attempts, d?.lastStatus, d?.lastError, d?.lastAttemptAt !== null, d?.nextAttemptAt]
    }
    assert.deepEqual(seen(arrived.id), ['delivered', 1, 200, null, true, null])
    assert.deepEqual(seen(refused.id), ['failed', 1, 500, 'endpoint disabled', true, null])
    assert.equal((await store.getMessage(alice, messageId('arrived')))?.status, 'delivered')
    assert.equal((await store.getMessage(alice, messageId('refused')))?.status, 'failed')
    // Recorded once: the lease is spent.
    assert.equal(await store.recordDelivery({ ...arrived, disableEndpoint: false }), null)
    assert.deepEqual(await store.claimDeliveries(10, LEASE_MS), [])
  })

  it('webhooks: a delivery failed under a live lease is not sent again until that attempt ends, nor disables again', async (t) => {
    const store = await open(t)
    const alice = await account(store, 'alice@example.com')
    const endpoint = await subscribe(store, alice, 'https://a.example/hook', ['message.created'])
    await store.createMessage(alice, 'in flight')
    const [claimed] = await store.claimDeliveries(10, LEASE_MS)
    assert.ok(claimed)
    // Disabled by hand while the attempt is under way, then enabled again.
    await store.updateWebhookEndpoint(alice, endpoint.id, { enabled: false })
    await store.updateWebhookEndpoint(alice, endpoint.id, { enabled: true })
    // Neither a resend nor a recovery sends it a second time at once.
    const resend = await store.redeliver(alice, claimed.id)
    assert.deepEqual([resend?.resent, resend?.delivery.status], [false, 'failed'])
    const since = new Date(Date.now() - 60_000).toISOString()
    // Nor is there more to recover meanwhile: a client calling again while `more` would spin.
    assert.deepEqual(await store.recoverDeliveries(alice, endpoint.id, since, 10), { queued: 0, more: false })
    assert.deepEqual(await store.claimDeliveries(10, LEASE_MS), [])
    // Its answer, a 410, is recorded; it does not disable the endpoint enabled since.
    const at = new Date().toISOString()
    const gone = { id: claimed.id, lease: claimed.lease, ...attempt(at), status: 410, error: null, delivered: false }
    assert.equal(await store.recordDelivery({ ...gone, retryAt: null, disableEndpoint: true }), 'failed')
    assert.equal((await store.getWebhookEndpoint(alice, endpoint.id))?.status, 'enabled')
    // Now it may be sent again.
    assert.equal((await store.redeliver(alice, claimed.id))?.resent, true)
  })

  it('webhooks: a lease that ran out is taken over; concurrent claims never share a delivery', async (t) => {
    const store = await open(t)
    const alice = await account(store, 'alice@example.com')
    await subscribe(store, alice, 'https://a.example/hook', ['message.created'])
    for (let i = 0; i < 20; i++) await store.createMessage(alice, `m${i}`)
    // Claims at once share nothing; one may pass over an endpoint another is serving, and take less.
    const ids: string[] = []
    for (let round = 0; round < 20 && ids.length < 20; round++) {
      const batches = await Promise.all(Array.from({ length: 4 }, () => store.claimDeliveries(8, LEASE_MS)))
      ids.push(...batches.flat().map((c) => c.id))
    }
    assert.equal(ids.length, 20)
    assert.equal(new Set(ids).size, 20)

    await store.createMessage(alice, 'short')
    const [short] = await store.claimDeliveries(1, 1)
    assert.ok(short)
    // Its lease of 1 ms ends: the next claim takes it, and the first holder's outcome is ignored.
    let taken = await store.claimDeliveries(1, LEASE_MS)
    for (let i = 0; taken.length === 0 && i < 100; i++) taken = await store.claimDeliveries(1, LEASE_MS)
    assert.equal(taken[0]?.id, short.id)
    assert.equal(taken[0]?.attempts, 2)
    const stale = { id: short.id, lease: short.lease, ...attempt(), status: 200, error: null }
    assert.equal(await store.recordDelivery({ ...stale, delivered: true, retryAt: null, disableEndpoint: false }), null)
  })

  it('webhooks: endpoints take turns, each up to its share of leases, whatever its backlog', async (t) => {
    const store = await open(t)
    const alice = await account(store, 'alice@example.com')
    const bob = await account(store, 'bob@example.com')
    const busy = await subscribe(store, alice, 'https://a.example/slow', ['message.created'])
    for (let i = 0; i < 12; i++) await store.createMessage(alice, `a${i}`)
    await subscribe(store, bob, 'https://b.example/hook', ['message.created'])
    await store.createMessage(bob, 'b0')
    const urls = (claimed: { url: string }[]) => claimed.map((c) => new URL(c.url).hostname)
    // Bob's one delivery, queued after all of Alice's, is taken with her first four, not after all twelve.
    const first = await store.claimDeliveries(10, LEASE_MS, 4)
    assert.deepEqual(urls(first).sort(), ['a.example', 'a.example', 'a.example', 'a.example', 'b.example'])
    // Alice's endpoint has its 4 leases in flight: nothing more of it until one is recorded.
    assert.deepEqual(await store.claimDeliveries(10, LEASE_MS, 4), [])
    const [done] = first
    assert.ok(done)
    const outcome = { id: done.id, lease: done.lease, ...attempt(), status: 200, error: null }
    assert.ok(await store.recordDelivery({ ...outcome, delivered: true, retryAt: null, disableEndpoint: false }))
    assert.deepEqual(urls(await store.claimDeliveries(10, LEASE_MS, 4)), ['a.example'])
    assert.equal((await store.listDeliveries(alice, busy.id, 100))?.filter((d) => d.attempts === 0).length, 7)
  })

  it('webhooks: order transitions are events of the order’s account', async (t) => {
    const store = await open(t)
    const alice = await account(store, 'alice@example.com')
    await subscribe(store, alice, 'https://a.example/hook', [
      'order.placed',
      'order.completed',
      'order.canceled',
      'order.expired',
    ])
    const pet = await store.createPet({ name: 'rex', categoryId: 1 })
    const other = await store.createPet({ name: 'fido', categoryId: 1 })
    const holdMs = 60_000
    const placed = await store.placeOrder({ accountId: alice, petId: pet.id, holdMs })
    assert.ok('placed' in placed)
    await store.transitionOrder(alice, placed.placed.id, 'completed')
    const second = await store.placeOrder({ accountId: alice, petId: other.id, holdMs })
    assert.ok('placed' in second)
    await store.transitionOrder(alice, second.placed.id, 'canceled')
    const third = await store.placeOrder({ accountId: alice, petId: other.id, holdMs: 0 })
    assert.ok('placed' in third)
    await store.expireOrders(new Date(Date.now() + 1000).toISOString())
    const claimed = await store.claimDeliveries(100, LEASE_MS)
    const events = claimed.map((c) => JSON.parse(c.body)).sort((x, y) => (x.timestamp < y.timestamp ? -1 : 1))
    assert.deepEqual(
      events.map((e) => [e.type, e.data.id]),
      [
        ['order.placed', placed.placed.id],
        ['order.completed', placed.placed.id],
        ['order.placed', second.placed.id],
        ['order.canceled', second.placed.id],
        ['order.placed', third.placed.id],
        ['order.expired', third.placed.id],
      ],
    )
    const expired = events.at(-1)
    assert.equal(expired.data.status, 'expired')
    assert.equal(expired.data.accountId, undefined)
  })

  it('messages: read back by id and listed in pages, by status', async (t) => {
    const store = await open(t)
    const alice = await account(store, 'alice@example.com')
    const bob = await account(store, 'bob@example.com')
    const sent = []
    for (let i = 0; i < 5; i++) sent.push(await store.createMessage(alice, `m${i}`))
    assert.deepEqual(plain(await store.getMessage(alice, sent[0]?.id ?? '')), plain(sent[0]))
    assert.equal(await store.getMessage(bob, sent[0]?.id ?? ''), null)
    const first = await store.listMessages({ accountId: alice, limit: 2 })
    assert.deepEqual(
      first.messages.map((m) => m.message),
      ['m4', 'm3'],
    )
    assert.ok(first.next !== null)
    const second = await store.listMessages({ accountId: alice, limit: 10, before: first.next ?? 0 })
    assert.deepEqual(
      second.messages.map((m) => m.message),
      ['m2', 'm1', 'm0'],
    )
    assert.equal(second.next, null)
    await store.markUndeliveredMessages()
    assert.equal((await store.listMessages({ accountId: alice, limit: 10, status: 'queued' })).messages.length, 0)
    assert.equal((await store.listMessages({ accountId: alice, limit: 10, status: 'undelivered' })).messages.length, 5)
    assert.equal((await store.listMessages({ accountId: alice, limit: 10, status: 'failed' })).messages.length, 0)
  })
}
