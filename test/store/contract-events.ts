/** The event log, the test event and recovery: part of the storage contract (run inside storeContract, on every backend). */
import assert from 'node:assert/strict'
import { it } from 'node:test'
import type { EventType } from '../../src/schemas/webhooks.ts'
import type { Store } from '../../src/store/types.ts'
import { plain } from '../helper.ts'
import { until } from '../wait.ts'
import type { OpenStore } from './contract.ts'
import { givenUp } from './contract-webhooks.ts'

const SECRET = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw'
const LEASE_MS = 60_000
const NEVER = new Date(0).toISOString()

async function account(store: Store, email: string): Promise<number> {
  const created = await store.createAccount(email)
  assert.ok(created)
  return created.id
}

async function subscribe(store: Store, accountId: number, url: string, events: EventType[]) {
  const created = await store.createWebhookEndpoint({ accountId, url, events, description: '', secret: SECRET })
  assert.ok(created)
  return created
}

/** The types and ids of a page of events, newest first. */
const shown = (events: { type: string; id: string }[]) => events.map(({ type, id }) => `${type} ${id}`)

/** Resolves once the clock has passed `iso`: what happens next is strictly later. */
const after = (iso: string) => until(`the clock past ${iso}`, () => Date.now() > Date.parse(iso) + 1)

/** Claims every due delivery and records each as given up: they fail. */
async function failAll(store: Store): Promise<string[]> {
  const claimed = await store.claimDeliveries(100, LEASE_MS)
  const at = new Date().toISOString()
  for (const delivery of claimed) assert.equal(await store.recordDelivery(givenUp(delivery, at)), 'failed')
  return claimed.map(({ id }) => id)
}

export function eventsContract(open: OpenStore): void {
  it('events: every event is in its account’s log, subscribed or not, with the id its deliveries send', async (t) => {
    const store = await open(t)
    const alice = await account(store, 'alice@example.com')
    const bob = await account(store, 'bob@example.com')
    // No endpoint at all: recorded all the same.
    const message = await store.createMessage(alice, 'nobody listens')
    const pet = await store.createPet({ name: 'rex', categoryId: 1 })
    const placed = await store.placeOrder({ accountId: alice, petId: pet.id, holdMs: 60_000 })
    assert.ok('placed' in placed)
    const completed = await store.transitionOrder(alice, placed.placed.id, 'completed')
    assert.ok('order' in completed)
    const { events, next } = await store.listEvents({ accountId: alice, limit: 10 })
    assert.equal(next, null)
    assert.deepEqual(
      events.map(({ type, data }) => [type, (data as { id: string }).id]),
      [
        ['order.completed', placed.placed.id],
        ['order.placed', placed.placed.id],
        ['message.created', message.id],
      ],
    )
    // Each with the resource as the API returned it, at the time it happened.
    const [done, , sent] = events
    assert.deepEqual(plain(sent), {
      id: sent?.id,
      type: 'message.created',
      createdAt: message.createdAt,
      data: plain(message),
    })
    assert.deepEqual(plain(done?.data), plain(completed.order))
    assert.equal(done?.createdAt, completed.order.updatedAt)
    assert.match(sent?.id ?? '', /^evt_/)
    assert.deepEqual(plain(await store.getEvent(alice, sent?.id ?? '')), plain(sent))
    // Only the account's own.
    assert.deepEqual((await store.listEvents({ accountId: bob, limit: 10 })).events, [])
    assert.equal(await store.getEvent(bob, sent?.id ?? ''), null)
    assert.equal(await store.getEvent(alice, 'evt_unknown'), null)

    // Subscribed: the delivery sends the event of the log, under its id.
    await subscribe(store, alice, 'https://a.example/hook', ['message.created'])
    const second = await store.createMessage(alice, 'someone listens')
    const [claimed] = await store.claimDeliveries(10, LEASE_MS)
    const [logged] = (await store.listEvents({ accountId: alice, limit: 1 })).events
    assert.equal(claimed?.eventId, logged?.id)
    assert.deepEqual(JSON.parse(claimed?.body ?? '{}'), {
      type: 'message.created',
      timestamp: logged?.createdAt,
      data: plain(second),
    })
  })

  it('events: pages newest first by position; filtered by types and by createdAfter', async (t) => {
    const store = await open(t)
    const alice = await account(store, 'alice@example.com')
    const pet = await store.createPet({ name: 'rex', categoryId: 1 })
    const sent = [await store.createMessage(alice, 'm0')]
    await after(sent[0]?.createdAt ?? '')
    const cut = new Date().toISOString()
    await after(cut)
    const placed = await store.placeOrder({ accountId: alice, petId: pet.id, holdMs: 60_000 })
    assert.ok('placed' in placed)
    await store.transitionOrder(alice, placed.placed.id, 'canceled')
    sent.push(await store.createMessage(alice, 'm1'))
    const all = (await store.listEvents({ accountId: alice, limit: 10 })).events
    assert.deepEqual(
      all.map((e) => e.type),
      ['message.created', 'order.canceled', 'order.placed', 'message.created'],
    )
    const first = await store.listEvents({ accountId: alice, limit: 3 })
    assert.deepEqual(shown(first.events), shown(all.slice(0, 3)))
    assert.ok(first.next !== null)
    const rest = await store.listEvents({ accountId: alice, limit: 3, before: first.next })
    assert.deepEqual(shown(rest.events), shown(all.slice(3)))
    assert.equal(rest.next, null)

    const orders = await store.listEvents({ accountId: alice, limit: 1, types: ['order.placed', 'order.canceled'] })
    assert.deepEqual(shown(orders.events), shown(all.slice(1, 2)))
    const older = await store.listEvents({
      accountId: alice,
      limit: 1,
      types: ['order.placed', 'order.canceled'],
      before: orders.next ?? 0,
    })
    assert.deepEqual(shown(older.events), shown(all.slice(2, 3)))
    assert.equal(older.next, null)
    assert.deepEqual((await store.listEvents({ accountId: alice, limit: 10, types: ['order.expired'] })).events, [])

    const since = await store.listEvents({ accountId: alice, limit: 10, createdAfter: cut })
    assert.deepEqual(shown(since.events), shown(all.slice(0, 3)))
    const both = await store.listEvents({ accountId: alice, limit: 10, createdAfter: cut, types: ['message.created'] })
    assert.deepEqual(shown(both.events), shown(all.slice(0, 1)))
    const later = new Date(Date.now() + 60_000).toISOString()
    assert.deepEqual((await store.listEvents({ accountId: alice, limit: 10, createdAfter: later })).events, [])
  })

  it('events: the housekeeping sweep deletes the events that happened before `eventsBefore`, and only those; the head stays', async (t) => {
    const store = await open(t)
    const alice = await account(store, 'alice@example.com')
    const old = await store.createMessage(alice, 'old')
    await after(old.createdAt)
    const cut = new Date().toISOString()
    await store.createMessage(alice, 'new')
    await store.purgeExpired(new Date().toISOString(), NEVER)
    assert.equal((await store.listEvents({ accountId: alice, limit: 10 })).events.length, 2)
    await store.purgeExpired(new Date().toISOString(), cut)
    const kept = (await store.listEvents({ accountId: alice, limit: 10 })).events
    assert.deepEqual(
      kept.map((e) => (e.data as { message: string }).message),
      ['new'],
    )
    // The head never moves back, the newest event pruned too: a stream's position stays behind it.
    const head = await store.eventFeedHead()
    await store.purgeExpired(new Date().toISOString(), new Date(Date.now() + 60_000).toISOString())
    assert.equal((await store.listEvents({ accountId: alice, limit: 10 })).events.length, 0)
    const later = await store.eventFeedHead()
    // On PostgreSQL it moves on with every transaction (its xid), whoever made it: not back.
    assert.ok(later.tx > head.tx || (later.tx === head.tx && later.seq >= head.seq), `${head.seq} then ${later.seq}`)
  })

  it('events: the feed reads every account’s events after a position, in commit order, from the head on', async (t) => {
    const store = await open(t)
    const alice = await account(store, 'alice@example.com')
    const bob = await account(store, 'bob@example.com')
    await store.createMessage(alice, 'before the head')
    const head = await store.eventFeedHead()
    assert.deepEqual((await store.eventFeed(head, 10)).events, [])
    const sent = [
      await store.createMessage(alice, 'one'),
      await store.createMessage(bob, 'two'),
      await store.createMessage(alice, 'three'),
    ]
    const first = await store.eventFeed(head, 2)
    const rest = await store.eventFeed(first.position, 10)
    const read = [...first.events, ...rest.events]
    assert.deepEqual(
      read.map(({ accountId, event }) => [accountId, event.type, (event.data as { id: string }).id]),
      sent.map((message, i) => [i === 1 ? bob : alice, 'message.created', message.id]),
    )
    assert.deepEqual(plain(read[0]?.event), plain(await store.getEvent(alice, read[0]?.event.id ?? '')))
    // Nothing after the last one, and the position stays where it was.
    const none = await store.eventFeed(rest.position, 10)
    assert.deepEqual([none.events, none.position], [[], rest.position])

    // One account's, between two positions: what a resuming stream replays.
    const [one, , three] = read
    assert.ok(one && three)
    const position = await store.eventPosition(alice, one.event.id)
    assert.deepEqual(position, one.position)
    assert.equal(await store.eventPosition(bob, one.event.id), null)
    assert.equal(await store.eventPosition(alice, 'evt_never'), null)
    const between = await store.accountEvents({ accountId: alice, after: one.position, upto: rest.position, limit: 10 })
    assert.deepEqual(
      between.map(({ event }) => event.id),
      [three.event.id],
    )
    const upToOne = await store.accountEvents({ accountId: alice, after: head, upto: one.position, limit: 10 })
    assert.deepEqual(
      upToOne.map(({ event }) => event.id),
      [one.event.id],
    )
    const filtered = await store.accountEvents({
      accountId: alice,
      after: head,
      upto: rest.position,
      types: ['order.placed'],
      limit: 10,
    })
    assert.deepEqual(filtered, [])
  })

  it('webhooks: a test event goes to its endpoint alone, recorded and delivered like any other', async (t) => {
    const store = await open(t)
    const alice = await account(store, 'alice@example.com')
    const bob = await account(store, 'bob@example.com')
    const endpoint = await subscribe(store, alice, 'https://a.example/hook', ['order.placed'])
    const other = await subscribe(store, alice, 'https://b.example/hook', ['order.placed'])
    const event = await store.sendTestEvent(alice, endpoint.id)
    assert.ok(event)
    const { secret: _, ...shownEndpoint } = endpoint
    assert.equal(event.type, 'webhook.test')
    assert.match(event.id, /^evt_/)
    assert.deepEqual(plain(event.data), plain(shownEndpoint))
    assert.deepEqual(plain(await store.getEvent(alice, event.id)), plain(event))
    const claimed = await store.claimDeliveries(10, LEASE_MS)
    assert.deepEqual(
      claimed.map((c) => [c.url, c.eventId]),
      [[endpoint.url, event.id]],
    )
    assert.deepEqual(JSON.parse(claimed[0]?.body ?? '{}'), {
      type: 'webhook.test',
      timestamp: event.createdAt,
      data: plain(shownEndpoint),
    })
    const [delivery] = (await store.listDeliveries(alice, endpoint.id, 10)) ?? []
    assert.deepEqual([delivery?.eventId, delivery?.eventType], [event.id, 'webhook.test'])
    assert.deepEqual(await store.listDeliveries(alice, other.id, 10), [])
    // Not another account's endpoint, nor a disabled one (it would never be sent).
    assert.equal(await store.sendTestEvent(bob, endpoint.id), null)
    await store.updateWebhookEndpoint(alice, other.id, { enabled: false })
    assert.equal(await store.sendTestEvent(alice, other.id), null)
    assert.equal(await store.sendTestEvent(alice, 'we_unknown'), null)
    assert.equal((await store.listEvents({ accountId: alice, limit: 10 })).events.length, 1)
  })

  it('webhooks: a recovery sends the failed deliveries since an instant again, oldest first, at most `limit`', async (t) => {
    const store = await open(t)
    const alice = await account(store, 'alice@example.com')
    const bob = await account(store, 'bob@example.com')
    const endpoint = await subscribe(store, alice, 'https://a.example/hook', ['message.created'])
    const before = await store.createMessage(alice, 'before')
    await failAll(store)
    await after(before.createdAt)
    const since = new Date().toISOString()
    const messages = []
    for (const text of ['m0', 'm1', 'm2']) messages.push(await store.createMessage(alice, text))
    const failed = await failAll(store)
    assert.equal(failed.length, 3)
    // One delivered since then: not sent again.
    const delivered = await store.createMessage(alice, 'delivered')
    const [ok] = await store.claimDeliveries(10, LEASE_MS)
    assert.ok(ok)
    const at = new Date().toISOString()
    const outcome = {
      at,
      answeredAt: at,
      delivered: true,
      status: 204,
      error: null,
      retryAt: null,
      disableEndpoint: false,
    }
    assert.equal(await store.recordDelivery({ id: ok.id, lease: ok.lease, ...outcome }), 'delivered')
    assert.equal((await store.getMessage(alice, messages[0]?.id ?? ''))?.status, 'failed')

    assert.deepEqual(await store.recoverDeliveries(alice, endpoint.id, since, 2), { queued: 2, more: true })
    // The oldest two, pending again with their retries started over; their messages queued again.
    const first = await store.claimDeliveries(10, LEASE_MS)
    assert.deepEqual(
      first.map((c) => [c.id, c.attempts]).sort(),
      failed
        .slice(0, 2)
        .map((id) => [id, 1])
        .sort(),
    )
    assert.equal((await store.getMessage(alice, messages[0]?.id ?? ''))?.status, 'queued')
    assert.equal((await store.getMessage(alice, messages[2]?.id ?? ''))?.status, 'failed')
    assert.deepEqual(await store.recoverDeliveries(alice, endpoint.id, since, 2), { queued: 1, more: false })
    assert.deepEqual(
      (await store.claimDeliveries(10, LEASE_MS)).map((c) => c.id),
      failed.slice(2),
    )
    assert.equal((await store.getMessage(alice, delivered.id))?.status, 'delivered')
    // Nothing failed since then any more: the one before `since` stays failed.
    assert.deepEqual(await store.recoverDeliveries(alice, endpoint.id, since, 2), { queued: 0, more: false })
    assert.equal((await store.getMessage(alice, before.id))?.status, 'failed')
    const future = new Date(Date.now() + 60_000).toISOString()
    assert.deepEqual(await store.recoverDeliveries(alice, endpoint.id, future, 2), { queued: 0, more: false })
    assert.deepEqual(await store.recoverDeliveries(alice, endpoint.id, NEVER, 10), { queued: 1, more: false })
    // Not another account's endpoint, nor a disabled one.
    assert.equal(await store.recoverDeliveries(bob, endpoint.id, NEVER, 10), null)
    await store.updateWebhookEndpoint(alice, endpoint.id, { enabled: false })
    assert.equal(await store.recoverDeliveries(alice, endpoint.id, NEVER, 10), null)
  })
}
