/**
 * The storage contract of src/store/types.ts, as one suite that every backend runs
 * (test/store/sqlite.test.ts, test/store/postgres.test.ts).
 */
import assert from 'node:assert/strict'
import type { TestContext } from 'node:test'
import { describe, it } from 'node:test'
import { generateApiKey } from '../../src/domain/api-keys.ts'
import type { Store } from '../../src/store/types.ts'
import { plain } from '../helper.ts'
import { eventsContract } from './contract-events.ts'
import { webhooksContract } from './contract-webhooks.ts'

export type OpenStore = (t: TestContext) => Promise<Store>

/** The ids of the messages checkUndeliveredUpgrade makes, for `leaveAsBefore` to set back. */
export interface UpgradedMessages {
  /** Failed by the sweep of the version before, no endpoint being subscribed: now undelivered. */
  lonely: string
  /** Failed at its one endpoint: stays failed. */
  tried: string
  /** Still queued (for an endpoint): stays queued. */
  waiting: string
}

/**
 * The upgrade to `undelivered` on either backend: three messages made in `store`, which is then
 * closed; `leaveAsBefore` puts them and the schema as the version before left them; `reopen`
 * migrates. Only the message failed for want of an endpoint becomes undelivered, with its reason.
 */
export async function checkUndeliveredUpgrade(
  store: Store,
  leaveAsBefore: (messages: UpgradedMessages) => unknown,
  reopen: () => Promise<Store>,
): Promise<void> {
  const account = await store.createAccount('a@example.com')
  assert.ok(account)
  const lonely = await store.createMessage(account.id, 'nobody listened')
  const tried = await store.createMessage(account.id, 'its endpoint failed')
  const waiting = await store.createMessage(account.id, 'still queued')
  await store.close()
  await leaveAsBefore({ lonely: lonely.id, tried: tried.id, waiting: waiting.id })
  const upgraded = await reopen()
  const statuses = (await upgraded.listMessages({ accountId: account.id, limit: 10 })).messages.map((m) => [
    m.message,
    m.status,
    m.statusReason,
  ])
  assert.deepEqual(statuses, [
    ['still queued', 'queued', null],
    ['its endpoint failed', 'failed', null],
    ['nobody listened', 'undelivered', 'no enabled endpoint subscribed to message.created'],
  ])
}

const ISO = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/

async function newKey(store: Store, accountId: number, expiresAt: string | null = null) {
  const generated = generateApiKey('staging')
  const key = await store.createApiKey({
    accountId,
    name: 'k',
    prefix: generated.prefix,
    hash: generated.hash,
    expiresAt,
  })
  return { key, generated }
}

export function storeContract(name: string, open: OpenStore): void {
  describe(`Store contract: ${name}`, () => {
    it('pets: createPet returns the stored pet with increasing ids; status defaults to available', async (t) => {
      const store = await open(t)
      const a = await store.createPet({ name: 'a', categoryId: 1 })
      const b = await store.createPet({ name: 'b', categoryId: 9007199254740991, status: 'sold' })
      assert.deepEqual(plain(a), { id: a.id, name: 'a', categoryId: 1, status: 'available' })
      assert.deepEqual(plain(b), { id: b.id, name: 'b', categoryId: 9007199254740991, status: 'sold' })
      assert.equal(typeof a.id, 'number')
      assert.ok(a.id >= 1 && b.id > a.id)
      assert.deepEqual(plain(await store.getPet(b.id)), plain(b))
      assert.equal(await store.getPet(b.id + 1000), null)
    })

    it('pets: concurrent creates get distinct ids, all stored', async (t) => {
      const store = await open(t)
      const pets = await Promise.all(
        Array.from({ length: 100 }, (_, i) => store.createPet({ name: `p${i}`, categoryId: 1 })),
      )
      assert.equal(new Set(pets.map((p) => p.id)).size, 100)
      const page = await store.listPets({ limit: 100 })
      assert.equal(page.pets.length, 100)
      assert.equal(page.nextAfterId, null)
    })

    it('pets: listPets pages in id order by afterId, filters by status, says when more follow', async (t) => {
      const store = await open(t)
      const statuses = ['available', 'pending', 'sold'] as const
      const pets = []
      for (let i = 0; i < 10; i++)
        pets.push(await store.createPet({ name: `p${i}`, categoryId: 1, status: statuses[i % 3] }))
      const first = await store.listPets({ limit: 4 })
      assert.deepEqual(plain(first.pets), plain(pets.slice(0, 4)))
      assert.equal(first.nextAfterId, pets[3]?.id)
      const second = await store.listPets({ limit: 4, afterId: first.nextAfterId as number })
      assert.deepEqual(plain(second.pets), plain(pets.slice(4, 8)))
      const last = await store.listPets({ limit: 4, afterId: second.nextAfterId as number })
      assert.deepEqual(plain(last.pets), plain(pets.slice(8)))
      assert.equal(last.nextAfterId, null)
      const sold = await store.listPets({ limit: 2, status: 'sold' })
      assert.deepEqual(plain(sold.pets), plain(pets.filter((p) => p.status === 'sold').slice(0, 2)))
      assert.equal(sold.nextAfterId, sold.pets[1]?.id)
      const exact = await store.listPets({ limit: 10 })
      assert.equal(exact.nextAfterId, null)
    })

    it('the pet change feed: every pet write after the cursor, in order; other writes add none', async (t) => {
      const store = await open(t)
      // SQLite looks at most once per turn of the event loop; a later read comes in a later turn.
      // PostgreSQL may list again a change of a transaction that was running at the last read
      // (anywhere on the server): the feed promises every change, not each once.
      const read = async (cursor: string) => {
        await new Promise((resolve) => setImmediate(resolve))
        const feed = await store.petChanges(cursor)
        assert.equal(feed.reset, false)
        return { cursor: feed.cursor, changes: plain(feed.changes).map((c) => JSON.stringify(c)) }
      }
      const start = await store.petChanges(null)
      assert.deepEqual(start.changes, [])
      const a = await store.createPet({ name: 'a', categoryId: 1 })
      const changed = await store.updatePet(a.id, { status: 'sold' })
      assert.ok('updated' in changed)
      const created = JSON.stringify({ petId: a.id, from: null, to: 'available' })
      const sold = JSON.stringify({ petId: a.id, from: 'available', to: 'sold' })
      const feed = await read(start.cursor)
      assert.deepEqual(
        feed.changes.filter((c) => c === created || c === sold),
        [created, sold],
      )
      // Writes of other kinds are not pet changes.
      const account = await store.createAccount('feed@example.com')
      await store.createMessage(account?.id as number, 'hello')
      await newKey(store, account?.id as number)
      const quiet = await read(feed.cursor)
      assert.deepEqual(
        quiet.changes.filter((c) => !feed.changes.includes(c)),
        [],
      )
      const b = await store.createPet({ name: 'b', categoryId: 1, status: 'pending' })
      const later = await read(quiet.cursor)
      assert.deepEqual(
        later.changes.filter((c) => !feed.changes.includes(c)),
        [JSON.stringify({ petId: b.id, from: null, to: 'pending' })],
      )
    })

    it('accounts: emails are unique, compared and stored lower-case', async (t) => {
      const store = await open(t)
      const alice = await store.createAccount('Alice@Example.com')
      assert.ok(alice)
      assert.equal(alice.email, 'alice@example.com')
      assert.match(alice.createdAt, ISO)
      assert.equal(await store.createAccount('ALICE@example.com'), null)
      assert.deepEqual(plain(await store.findAccountByEmail('alice@EXAMPLE.com')), plain(alice))
      assert.equal(await store.findAccountByEmail('bob@example.com'), null)
    })

    it('accounts: concurrent creates of one email make one account', async (t) => {
      const store = await open(t)
      const results = await Promise.all(Array.from({ length: 10 }, () => store.createAccount('same@example.com')))
      assert.equal(results.filter(Boolean).length, 1)
    })

    it('api keys: stored by hash only, found by hash, listed newest first, revoked once', async (t) => {
      const store = await open(t)
      const account = await store.createAccount('keys@example.com')
      assert.ok(account)
      const { key, generated } = await newKey(store, account.id)
      assert.match(key.id, /^key_[0-9A-Za-z]{16}$/)
      assert.deepEqual(
        { accountId: key.accountId, prefix: key.prefix, expiresAt: key.expiresAt, revokedAt: key.revokedAt },
        { accountId: account.id, prefix: generated.prefix, expiresAt: null, revokedAt: null },
      )
      assert.ok(!JSON.stringify(key).includes(generated.hash), 'a key record exposes its hash')
      assert.deepEqual(plain(await store.findApiKeyByHash(generated.hash)), plain(key))
      assert.equal(await store.findApiKeyByHash('nope'), null)
      const expiring = await newKey(store, account.id, '2030-01-01T00:00:00.000Z')
      assert.equal(expiring.key.expiresAt, '2030-01-01T00:00:00.000Z')
      const listed = await store.listApiKeys(account.id)
      assert.deepEqual(listed.map((k) => k.id).sort(), [key.id, expiring.key.id].sort())
      const revoked = await store.revokeApiKey(key.id)
      assert.match(revoked?.revokedAt ?? '', ISO)
      const again = await store.revokeApiKey(key.id)
      assert.equal(again?.revokedAt, revoked?.revokedAt)
      assert.equal((await store.findApiKeyByHash(generated.hash))?.revokedAt, revoked?.revokedAt)
      assert.equal(await store.revokeApiKey('key_doesnotexist0000'), null)
    })

    it('messages: stored queued per account, newest first, never shown to another account', async (t) => {
      const store = await open(t)
      const alice = await store.createAccount('alice@example.com')
      const bob = await store.createAccount('bob@example.com')
      assert.ok(alice && bob)
      const one = await store.createMessage(alice.id, 'one')
      const two = await store.createMessage(alice.id, 'two')
      await store.createMessage(bob.id, 'bob')
      assert.match(one.id, /^msg_[0-9A-Za-z]{16}$/)
      assert.deepEqual(plain(one), {
        id: one.id,
        message: 'one',
        status: 'queued',
        statusReason: null,
        createdAt: one.createdAt,
        attempts: 0,
        deliveredAt: null,
      })
      assert.match(one.createdAt, ISO)
      assert.deepEqual(
        (await store.listMessages({ accountId: alice.id, limit: 10 })).messages.map((m) => m.message),
        ['two', 'one'],
      )
      assert.deepEqual(plain(await store.listMessages({ accountId: alice.id, limit: 1 })).messages, [plain(two)])
      assert.deepEqual(
        (await store.listMessages({ accountId: bob.id, limit: 10 })).messages.map((m) => m.message),
        ['bob'],
      )
    })

    it('settings: a secret is generated once and then shared', async (t) => {
      const store = await open(t)
      const first = await store.secret('cursor', () => 'one')
      const second = await store.secret('cursor', () => 'two')
      assert.equal(first, 'one')
      assert.equal(second, 'one')
    })

    it('accounts: an optional password hash, readable only through findAccountLogin, replaceable', async (t) => {
      const store = await open(t)
      const withPassword = await store.createAccount('web@example.com', 'scrypt$hash')
      const cliMade = await store.createAccount('cli@example.com')
      assert.ok(withPassword && cliMade)
      assert.ok(!('passwordHash' in withPassword))
      assert.deepEqual(plain(await store.findAccountLogin('WEB@example.com')), {
        account: plain(withPassword),
        passwordHash: 'scrypt$hash',
      })
      assert.deepEqual(plain(await store.findAccountLogin('cli@example.com')), {
        account: plain(cliMade),
        passwordHash: null,
      })
      assert.equal(await store.findAccountLogin('nobody@example.com'), null)
      const later = new Date(Date.now() + 3_600_000).toISOString()
      const session = (hash: string, accountId: number, passwordHash: string | null) =>
        store.createSession({ hash, accountId, expiresAt: later, passwordHash })
      assert.equal(await session('cli-session', cliMade.id, null), true)
      assert.equal(await session('web-session', withPassword.id, 'scrypt$hash'), true)
      assert.equal(await store.setAccountPassword(cliMade.id, 'scrypt$new'), true)
      assert.equal((await store.findAccountLogin('cli@example.com'))?.passwordHash, 'scrypt$new')
      assert.equal(await store.findSession('cli-session'), null, "a new password leaves the account's sessions")
      assert.ok(await store.findSession('web-session'), "another account's session ended")
      // A sign-in that checked the old password (or none) before it was set starts no session.
      assert.equal(await session('late-session', cliMade.id, null), false)
      assert.equal(await session('late-web-session', withPassword.id, 'scrypt$old'), false)
      assert.equal(await store.findSession('late-session'), null)
      assert.equal(await store.findSession('late-web-session'), null)
      assert.equal(await session('new-session', cliMade.id, 'scrypt$new'), true)
      assert.equal(await store.setAccountPassword(cliMade.id + 1000, 'x'), false)
    })

    it('sessions: found by hash until they expire or are deleted', async (t) => {
      const store = await open(t)
      const account = await store.createAccount('session@example.com')
      assert.ok(account)
      const expiresAt = new Date(Date.now() + 3_600_000).toISOString()
      await store.createSession({ hash: 'h1', accountId: account.id, expiresAt, passwordHash: null })
      await store.createSession({
        hash: 'h2',
        accountId: account.id,
        expiresAt: new Date(Date.now() - 1000).toISOString(),
        passwordHash: null,
      })
      assert.deepEqual(plain(await store.findSession('h1')), {
        accountId: account.id,
        email: 'session@example.com',
        expiresAt,
      })
      assert.equal(await store.findSession('h2'), null, 'an expired session is not found')
      await store.deleteSession('h1')
      assert.equal(await store.findSession('h1'), null)
      assert.equal(await store.purgeExpired(new Date().toISOString(), new Date(0).toISOString()), 1)
    })

    it('api keys: revocation scoped to an account, and last use recorded', async (t) => {
      const store = await open(t)
      const alice = await store.createAccount('alice@example.com')
      const bob = await store.createAccount('bob@example.com')
      assert.ok(alice && bob)
      const { key, generated } = await newKey(store, alice.id)
      assert.equal(await store.revokeApiKey(key.id, bob.id), null, "bob cannot revoke alice's key")
      assert.equal((await store.findApiKeyByHash(generated.hash))?.revokedAt, null)
      const at = '2026-11-22T10:00:00.000Z'
      await store.touchApiKeys([{ id: key.id, at }])
      await store.touchApiKeys([{ id: key.id, at: '2026-11-22T09:00:00.000Z' }]) // older: ignored
      assert.equal((await store.findApiKeyByHash(generated.hash))?.lastUsedAt, at)
      assert.match((await store.revokeApiKey(key.id, alice.id))?.revokedAt ?? '', ISO)
    })

    it('idempotency: claim, complete with the write, replay; mismatch; in progress; release; expiry', async (t) => {
      const store = await open(t)
      const future = new Date(Date.now() + 86_400_000).toISOString()
      const past = new Date(Date.now() - 60_000).toISOString()
      const claim = { scope: 'key_a', key: 'k1', fingerprint: 'f1', expiresAt: future, staleBefore: past }
      assert.deepEqual(await store.claimIdempotencyKey(claim), { state: 'claimed' })
      assert.deepEqual(await store.claimIdempotencyKey(claim), { state: 'in_progress' })
      assert.deepEqual(await store.claimIdempotencyKey({ ...claim, fingerprint: 'f2' }), { state: 'mismatch' })
      assert.deepEqual(
        await store.claimIdempotencyKey({ ...claim, scope: 'key_b' }),
        { state: 'claimed' },
        'keys are per scope',
      )
      const pet = await store.createPet({ name: 'once', categoryId: 1 }, claim)
      const replay = await store.claimIdempotencyKey(claim)
      assert.equal(replay.state, 'done')
      assert.deepEqual(replay.state === 'done' && { status: replay.status, body: JSON.parse(replay.body) }, {
        status: 201,
        body: plain(pet),
      })
      const message = { ...claim, key: 'm1' }
      await store.claimIdempotencyKey(message)
      const account = await store.createAccount('idem@example.com')
      const sent = await store.createMessage(account?.id as number, 'hi', message)
      const replayed = await store.claimIdempotencyKey(message)
      assert.deepEqual(replayed.state === 'done' && JSON.parse(replayed.body), plain(sent))
      await store.releaseIdempotencyKey({ scope: 'key_b', key: 'k1' })
      assert.deepEqual(await store.claimIdempotencyKey({ ...claim, scope: 'key_b' }), { state: 'claimed' })
      const expired = { ...claim, key: 'old', expiresAt: past }
      assert.deepEqual(await store.claimIdempotencyKey(expired), { state: 'claimed' })
      await store.createPet({ name: 'old', categoryId: 1 }, expired)
      assert.deepEqual(
        await store.claimIdempotencyKey({ ...expired, fingerprint: 'other', expiresAt: future }),
        { state: 'claimed' },
        'an expired key can be reused',
      )
      const stale = { ...claim, key: 'stale' }
      assert.deepEqual(await store.claimIdempotencyKey(stale), { state: 'claimed' })
      assert.deepEqual(
        await store.claimIdempotencyKey({ ...stale, staleBefore: future }),
        { state: 'claimed' },
        'a stale claim is taken over',
      )
    })

    it('idempotency: concurrent claims of one key, exactly one wins', async (t) => {
      const store = await open(t)
      const claim = {
        scope: 'key_c',
        key: 'race',
        fingerprint: 'f',
        expiresAt: new Date(Date.now() + 60_000).toISOString(),
        staleBefore: new Date(Date.now() - 60_000).toISOString(),
      }
      const states = await Promise.all(Array.from({ length: 10 }, () => store.claimIdempotencyKey(claim)))
      assert.equal(states.filter((s) => s.state === 'claimed').length, 1)
      assert.equal(states.filter((s) => s.state === 'in_progress').length, 9)
    })

    it('orders: placing holds an available pet; another order, a sold or an unknown pet is refused', async (t) => {
      const store = await open(t)
      const account = (await store.createAccount('buyer@example.com')) as { id: number }
      const pet = await store.createPet({ name: 'Rex', categoryId: 1 })
      const sold = await store.createPet({ name: 'Old', categoryId: 1, status: 'sold' })
      const holdMs = 60_000
      const result = await store.placeOrder({ accountId: account.id, petId: pet.id, holdMs })
      assert.ok('placed' in result)
      const order = result.placed
      assert.match(order.id, /^ord_[0-9A-Za-z]{16,}$/)
      assert.equal(order.petId, pet.id)
      assert.equal(order.status, 'placed')
      assert.match(order.createdAt, ISO)
      // The hold is measured from the order's own creation time, to the millisecond.
      assert.equal(Date.parse(order.expiresAt) - Date.parse(order.createdAt), holdMs)
      assert.equal(order.updatedAt, order.createdAt)
      assert.equal((await store.getPet(pet.id))?.status, 'pending')
      const again = { accountId: account.id, petId: pet.id, holdMs }
      assert.deepEqual(await store.placeOrder(again), { refused: 'pet_not_available' })
      assert.deepEqual(await store.placeOrder({ ...again, petId: sold.id }), { refused: 'pet_not_available' })
      assert.deepEqual(await store.placeOrder({ ...again, petId: sold.id + 1000 }), { refused: 'pet_not_found' })
      assert.deepEqual(plain(await store.getOrder(account.id, order.id)), plain(order))
      const other = (await store.createAccount('other@example.com')) as { id: number }
      assert.equal(await store.getOrder(other.id, order.id), null)
    })

    it('orders: of concurrent orders for one pet exactly one is placed', async (t) => {
      const store = await open(t)
      const account = (await store.createAccount('race@example.com')) as { id: number }
      const pet = await store.createPet({ name: 'Rex', categoryId: 1 })
      const results = await Promise.all(
        Array.from({ length: 20 }, () => store.placeOrder({ accountId: account.id, petId: pet.id, holdMs: 60_000 })),
      )
      assert.equal(results.filter((r) => 'placed' in r).length, 1)
      assert.equal(results.filter((r) => 'refused' in r && r.refused === 'pet_not_available').length, 19)
      const page = await store.listOrders({ accountId: account.id, limit: 100 })
      assert.equal(page.orders.length, 1)
    })

    it('orders: complete sells the pet, cancel frees it; repeats are no change; other moves conflict', async (t) => {
      const store = await open(t)
      const account = (await store.createAccount('t@example.com')) as { id: number }
      const holdMs = 60_000
      const place = async () => {
        const pet = await store.createPet({ name: 'Rex', categoryId: 1 })
        const result = await store.placeOrder({ accountId: account.id, petId: pet.id, holdMs })
        assert.ok('placed' in result)
        return result.placed
      }
      const first = await place()
      const completed = await store.transitionOrder(account.id, first.id, 'completed')
      assert.ok('changed' in completed && completed.changed)
      assert.equal(completed.order.status, 'completed')
      assert.ok(completed.order.updatedAt >= first.updatedAt)
      assert.equal((await store.getPet(first.petId))?.status, 'sold')
      const repeated = await store.transitionOrder(account.id, first.id, 'completed')
      assert.ok('changed' in repeated && !repeated.changed)
      const conflict = await store.transitionOrder(account.id, first.id, 'canceled')
      assert.ok('refused' in conflict && conflict.refused === 'conflict' && conflict.order.status === 'completed')

      const second = await place()
      const canceled = await store.transitionOrder(account.id, second.id, 'canceled')
      assert.ok('changed' in canceled && canceled.order.status === 'canceled')
      assert.equal((await store.getPet(second.petId))?.status, 'available')
      const other = (await store.createAccount('u@example.com')) as { id: number }
      assert.deepEqual(await store.transitionOrder(other.id, second.id, 'canceled'), { refused: 'not_found' })
      assert.deepEqual(await store.transitionOrder(account.id, 'ord_nope', 'canceled'), { refused: 'not_found' })
    })

    it('orders: an ended hold expires by the sweep or at the next move, and frees the pet', async (t) => {
      const store = await open(t)
      const account = (await store.createAccount('e@example.com')) as { id: number }
      const ended = -1000
      const a = await store.createPet({ name: 'A', categoryId: 1 })
      const b = await store.createPet({ name: 'B', categoryId: 1 })
      const c = await store.createPet({ name: 'C', categoryId: 1 })
      const placed = []
      for (const pet of [a, b, c]) {
        const result = await store.placeOrder({ accountId: account.id, petId: pet.id, holdMs: ended })
        assert.ok('placed' in result)
        placed.push(result.placed)
      }
      // b: a move of an order whose hold ended finds it expired; c: a new order for its pet wins.
      const moved = await store.transitionOrder(account.id, (placed[1] as { id: string }).id, 'completed')
      assert.ok('refused' in moved && moved.refused === 'conflict' && moved.order.status === 'expired')
      const reordered = await store.placeOrder({ accountId: account.id, petId: c.id, holdMs: ended })
      assert.ok('placed' in reordered)
      const swept = await store.expireOrders(new Date().toISOString())
      assert.deepEqual(swept.map((o) => o.petId).sort(), [a.id, c.id].sort())
      assert.ok(swept.every((o) => o.status === 'expired'))
      for (const pet of [a, b, c]) assert.equal((await store.getPet(pet.id))?.status, 'available')
      assert.deepEqual(await store.expireOrders(new Date().toISOString()), [])

      // A status change of a pet whose hold has ended expires its order first, as a move would.
      const d = await store.createPet({ name: 'D', categoryId: 1 })
      const held = await store.placeOrder({ accountId: account.id, petId: d.id, holdMs: ended })
      assert.ok('placed' in held)
      const sold = await store.updatePet(d.id, { status: 'sold' })
      assert.ok('updated' in sold && sold.updated.pet.status === 'sold', JSON.stringify(sold))
      assert.equal((await store.getOrder(account.id, held.placed.id))?.status, 'expired')
      assert.deepEqual(await store.expireOrders(new Date().toISOString()), [])
      assert.equal((await store.getPet(d.id))?.status, 'sold')
      const events = await store.listEvents({ accountId: account.id, limit: 100, types: ['order.expired'] })
      assert.ok(events.events.some((event) => (event.data as { id: string }).id === held.placed.id))
    })

    it("orders: listed newest first, by status and pet, in pages; never another account's", async (t) => {
      const store = await open(t)
      const account = (await store.createAccount('l@example.com')) as { id: number }
      const other = (await store.createAccount('m@example.com')) as { id: number }
      const holdMs = 60_000
      const ids: string[] = []
      for (let i = 0; i < 5; i++) {
        const pet = await store.createPet({ name: `p${i}`, categoryId: 1 })
        const result = await store.placeOrder({ accountId: account.id, petId: pet.id, holdMs })
        assert.ok('placed' in result)
        ids.push(result.placed.id)
      }
      const otherPet = await store.createPet({ name: 'o', categoryId: 1 })
      await store.placeOrder({ accountId: other.id, petId: otherPet.id, holdMs })
      await store.transitionOrder(account.id, ids[0] as string, 'canceled')
      const first = await store.listOrders({ accountId: account.id, limit: 3 })
      assert.deepEqual(
        first.orders.map((o) => o.id),
        ids.slice(2).reverse(),
      )
      assert.notEqual(first.next, null)
      const rest = await store.listOrders({ accountId: account.id, limit: 3, before: first.next as number })
      assert.deepEqual(
        rest.orders.map((o) => o.id),
        ids.slice(0, 2).reverse(),
      )
      assert.equal(rest.next, null)
      const canceled = await store.listOrders({ accountId: account.id, limit: 10, status: 'canceled' })
      assert.deepEqual(
        canceled.orders.map((o) => o.id),
        [ids[0]],
      )
      const byPet = await store.listOrders({ accountId: account.id, limit: 10, petId: first.orders[0]?.petId })
      assert.deepEqual(
        byPet.orders.map((o) => o.id),
        [ids[4]],
      )
    })

    it('pets: updatePet moves the version; a stale version, a held pet or pending is refused', async (t) => {
      const store = await open(t)
      const pet = await store.createPet({ name: 'Rex', categoryId: 1 })
      const start = (await store.getVersionedPet(pet.id)) as { version: number }
      const renamed = await store.updatePet(pet.id, { name: 'Max' }, start.version)
      assert.ok('updated' in renamed)
      assert.deepEqual(plain(renamed.updated.pet), { ...pet, name: 'Max' })
      assert.ok(renamed.updated.version > start.version)
      assert.deepEqual(await store.updatePet(pet.id, { name: 'Old' }, start.version), { refused: 'version_mismatch' })
      const same = await store.updatePet(pet.id, { name: 'Max' })
      assert.ok('updated' in same && same.updated.version === renamed.updated.version)
      assert.deepEqual(await store.updatePet(pet.id, { status: 'pending' }), { refused: 'held' })
      assert.deepEqual(await store.updatePet(pet.id + 1000, { name: 'x' }), { refused: 'not_found' })
      const account = (await store.createAccount('p@example.com')) as { id: number }
      const holdMs = 60_000
      assert.ok('placed' in (await store.placeOrder({ accountId: account.id, petId: pet.id, holdMs })))
      assert.deepEqual(await store.updatePet(pet.id, { status: 'sold' }), { refused: 'held' })
      const held = await store.updatePet(pet.id, { categoryId: 2 })
      assert.ok('updated' in held && held.updated.pet.status === 'pending' && held.updated.pet.categoryId === 2)
    })

    it('pets: inventory counts every status, zero included', async (t) => {
      const store = await open(t)
      assert.deepEqual(plain(await store.inventory()), { available: 0, pending: 0, sold: 0 })
      await store.createPet({ name: 'a', categoryId: 1 })
      await store.createPet({ name: 'b', categoryId: 1 })
      await store.createPet({ name: 'c', categoryId: 1, status: 'sold' })
      assert.deepEqual(plain(await store.inventory()), { available: 2, pending: 0, sold: 1 })
    })

    it('lifecycle: ping answers; close is idempotent and finishes pending writes', async (t) => {
      const store = await open(t)
      await store.ping()
      const pending = store.createPet({ name: 'last', categoryId: 1 })
      await Promise.all([store.close(), store.close()])
      assert.equal((await pending).name, 'last')
      await assert.rejects(store.ping())
    })

    webhooksContract(open)
    eventsContract(open)
  })
}
