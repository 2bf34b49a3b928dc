/**
 * Crash safety: the server process is killed with SIGKILL at random moments under concurrent
 * createPet and POST /messages traffic, and restarted on the same database. Every request that got
 * a 2xx must be there afterwards, intact, and ids must stay unique. Then the same under order,
 * cancel, complete and expiry traffic: the order invariant holds in what each crash left, and every
 * acknowledged transition survives. Runs on SQLite and PostgreSQL.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { isDeepStrictEqual } from 'node:util'
import type { Message } from '../src/schemas/messages.ts'
import type { Pet } from '../src/schemas/pets.ts'
import { openStore } from '../src/store/index.ts'
import { asSent, DATABASE, plain, testDatabaseUrl } from './helper.ts'
import { cliKey, type ServerProcess, startServer } from './processes.ts'
import { BETA } from './race.ts'
import { orderInvariant, sqlRows } from './sql.ts'
import { until } from './wait.ts'

const KILLS = 3
const CLIENTS = 8

describe(`Crash safety: SIGKILL under load, ${KILLS} times (${DATABASE})`, () => {
  it('keeps every acknowledged pet and message, intact, with unique ids', { timeout: 120_000 }, async (t) => {
    const env = { DATABASE_URL: await testDatabaseUrl(t), RATE_LIMIT: '0' }
    const key = await cliKey(env, 'crash@example.com')
    const headers = { authorization: `Bearer ${key}`, 'content-type': 'application/json' }
    let server: ServerProcess = await startServer(t, env)

    const pets: Pet[] = []
    const messages: Message[] = []
    let refused = 0
    let running = true
    /** Resolves once the server killed last is serving again; a failed request waits for it. */
    let restarted = Promise.resolve()
    const acknowledged = () => pets.length + messages.length
    const client = async (n: number) => {
      for (let i = 0; running; i++) {
        const isPet = i % 2 === 0
        const body = isPet
          ? { name: `c${n}-${i}`, categoryId: n + 1, status: (['available', 'pending', 'sold'] as const)[i % 3] }
          : { message: `client ${n} says ${i} ✓` }
        try {
          const response = await fetch(`${server.url}/v1/${isPet ? 'pets' : 'messages'}`, {
            method: 'POST',
            headers,
            body: JSON.stringify(body),
          })
          const answer = await response.json()
          if (response.status === 201) {
            const sent = answer as Pet
            assert.deepEqual(sent, { id: sent.id, ...body })
            pets.push(sent)
          } else if (response.status === 202) messages.push(answer as Message)
          else refused++
        } catch {
          refused++ // the process died under this request: it was never acknowledged
          await restarted
        }
      }
    }
    const clients = Array.from({ length: CLIENTS }, (_, n) => client(n))

    const acknowledgedAtKill: number[] = []
    // Each kill comes at a random point of the traffic: after 30 to 120 more acknowledged writes.
    const moreWrites = (n: number) => {
      const target = acknowledged() + n
      return until(`${n} more writes acknowledged`, () => acknowledged() >= target, { timeoutMs: 30_000 })
    }
    for (let kill = 0; kill < KILLS; kill++) {
      await moreWrites(30 + Math.floor(Math.random() * 90))
      acknowledgedAtKill.push(acknowledged())
      let serving = () => {}
      restarted = new Promise((resolve) => (serving = resolve))
      await server.stop('SIGKILL')
      server = await startServer(t, env)
      serving()
    }
    await moreWrites(40) // the last server serves too
    running = false
    await Promise.all(clients)
    await server.stop('SIGTERM')

    const store = await openStore({ databaseUrl: env.DATABASE_URL, poolSize: 2, timeoutMs: 5000 })
    t.after(() => store.close())
    const stored = new Map<number, Pet>()
    for (let afterId = 0; ; ) {
      const page = await store.listPets({ limit: 100, afterId })
      for (const pet of page.pets) stored.set(pet.id, plain(pet))
      if (page.nextAfterId === null) break
      afterId = page.nextAfterId
    }
    const account = await store.findAccountByEmail('crash@example.com')
    const storedMessages = new Map(
      (await store.listMessages({ accountId: account?.id as number, limit: 1_000_000 })).messages.map((m) => [
        m.id,
        plain(m),
      ]),
    )

    const lostPets = pets.filter((pet) => !isDeepStrictEqual(stored.get(pet.id), pet))
    const lostMessages = messages.filter((m) => !isDeepStrictEqual(asSent(storedMessages.get(m.id)), asSent(m)))
    assert.equal(new Set(pets.map((p) => p.id)).size, pets.length, 'two acknowledged pets share an id')
    assert.deepEqual(lostPets, [], 'acknowledged pets were lost or changed')
    assert.deepEqual(lostMessages, [], 'acknowledged messages were lost or changed')
    assert.ok(pets.length > 50 && messages.length > 50, 'too little traffic to prove anything')
    assert.ok(acknowledgedAtKill.every((n, i) => i === 0 || n > (acknowledgedAtKill[i - 1] as number)))
    t.diagnostic(
      `${DATABASE}: kills=${KILLS} acknowledged pets=${pets.length} messages=${messages.length} ` +
        `found=${pets.length - lostPets.length + messages.length - lostMessages.length} lost=${lostPets.length + lostMessages.length} ` +
        `unacknowledged (killed or refused)=${refused} stored pets=${stored.size}`,
    )
  })
})

type OrderStatus = 'placed' | 'completed' | 'canceled' | 'expired'
interface Answer {
  status: number
  body: { id?: string | number; status?: string; code?: string }
}
/** What a client knows of an order: the last status it was told, and the last move it asked for. */
interface SeenOrder {
  petId: number
  acknowledged: OrderStatus
  asked: OrderStatus
}

describe(`Crash safety of orders: SIGKILL under order, cancel, complete and expiry load (${DATABASE})`, () => {
  it('after each crash one placed order per pending pet and none elsewhere; every acknowledged move survives', {
    timeout: 180_000,
  }, async (t) => {
    // Holds of one second: orders expire all through the run, across the crashes too.
    const env = { DATABASE_URL: await testDatabaseUrl(t), RATE_LIMIT: '0', ORDER_HOLD_SECONDS: '1' }
    const key = await cliKey(env, 'orders-crash@example.com')
    const headers = { authorization: `Bearer ${key}`, ...BETA }
    let server: ServerProcess = await startServer(t, env)
    // Resolved while a server is up; replaced by a pending one from the kill to the restart.
    let up: Promise<unknown> = Promise.resolve()

    const pets = new Set<number>()
    const orders = new Map<string, SeenOrder>()
    let acknowledged = 0
    let unacknowledged = 0
    let waiter: { at: number; resolve: () => void } | null = null
    const call = async (method: 'GET' | 'POST', path: string, body?: unknown): Promise<Answer | null> => {
      try {
        const response = await fetch(`${server.url}${path}`, {
          method,
          headers: body === undefined ? headers : { ...headers, 'content-type': 'application/json' },
          body: body === undefined ? undefined : JSON.stringify(body),
        })
        const answer = { status: response.status, body: (await response.json()) as Answer['body'] }
        if (answer.status < 300) acknowledged++
        if (waiter && acknowledged >= waiter.at) waiter.resolve()
        return answer
      } catch {
        unacknowledged++ // the process died under this request: whatever it did, nobody was told
        await up
        return null
      }
    }
    const newPet = async () => {
      const created = await call('POST', '/v1/pets', { name: 'Held', categoryId: 1 })
      if (created?.status === 201) pets.add(created.body.id as number)
    }
    for (let i = 0; i < 20; i++) await newPet()

    let running = true
    const client = async () => {
      while (running) {
        if (Math.random() < 0.2) await newPet()
        const known = [...pets]
        const petId = known[Math.floor(Math.random() * known.length)] as number
        const placed = await call('POST', '/v1/store/orders', { petId })
        if (placed?.status !== 201) {
          if (placed) assert.equal(placed.body.code, 'pet_not_available', JSON.stringify(placed))
          continue
        }
        const order: SeenOrder = { petId, acknowledged: 'placed', asked: 'placed' }
        orders.set(placed.body.id as string, order)
        // A third completed, a third canceled, a third left to expire.
        const move = (['complete', 'cancel', null] as const)[Math.floor(Math.random() * 3)]
        if (!move) continue
        order.asked = move === 'complete' ? 'completed' : 'canceled'
        const moved = await call('POST', `/v1/store/orders/${placed.body.id}/${move}`)
        if (moved?.status === 200) order.acknowledged = moved.body.status as OrderStatus
        else if (moved) assert.equal(moved.body.code, 'order_conflict', JSON.stringify(moved)) // it expired first
      }
    }
    const clients = Array.from({ length: CLIENTS }, client)

    const createdAvailable = () => [...pets]
    const crashPoints: string[] = []
    for (let kill = 0; kill < KILLS; kill++) {
      // After a random number of acknowledged answers, not after a time: the load decides when.
      const at = acknowledged + 50 + Math.floor(Math.random() * 200)
      await new Promise<void>((resolve) => {
        waiter = { at, resolve }
      })
      waiter = null
      let restarted = () => {}
      up = new Promise<void>((resolve) => {
        restarted = resolve
      })
      await server.stop('SIGKILL')
      // The state the crash left, read before any restart touches it.
      const found = await orderInvariant(env.DATABASE_URL)
      assert.deepEqual(found.placedNotPending, [], 'a placed order whose pet is not pending')
      assert.deepEqual(found.twicePlaced, [], 'a pet with two placed orders')
      const created = new Set(createdAvailable())
      assert.deepEqual(
        found.pendingUnheld.filter((id) => created.has(id)),
        [],
        'a pending pet (created available) without a placed order',
      )
      const [placedNow] = await sqlRows<{ n: number | string }>(
        env.DATABASE_URL,
        "SELECT count(*) AS n FROM orders WHERE status = 'placed'",
      )
      crashPoints.push(`${at} acknowledged, ${placedNow?.n} placed`)
      server = await startServer(t, env)
      restarted()
    }
    const target = acknowledged + 100
    await new Promise<void>((resolve) => {
      waiter = { at: target, resolve }
    })
    running = false
    await Promise.all(clients)

    // Every hold ends on the last instance, those placed before a crash included.
    await until(
      'every hold expired',
      async () => {
        const [left] = await sqlRows<{ n: number | string }>(
          env.DATABASE_URL,
          "SELECT count(*) AS n FROM orders WHERE status = 'placed'",
        )
        return Number(left?.n) === 0
      },
      { timeoutMs: 15_000, everyMs: 100 },
    )
    await server.stop('SIGTERM')

    const storedPets = new Map(
      (await sqlRows<{ id: number | string; status: string }>(env.DATABASE_URL, 'SELECT id, status FROM pets')).map(
        (p) => [Number(p.id), p.status],
      ),
    )
    const storedOrders = new Map(
      (
        await sqlRows<{ id: string; petId: number | string; status: OrderStatus }>(
          env.DATABASE_URL,
          'SELECT id, pet_id AS "petId", status FROM orders',
        )
      ).map((o) => [o.id, { petId: Number(o.petId), status: o.status }]),
    )
    const lostPets = [...pets].filter((id) => !storedPets.has(id))
    const broken: string[] = []
    for (const [id, seen] of orders) {
      const stored = storedOrders.get(id)
      // Told placed and nothing else: it may have moved as asked (unacknowledged) or expired.
      const possible = seen.acknowledged === 'placed' ? new Set(['expired', seen.asked]) : new Set([seen.acknowledged])
      if (!stored || stored.petId !== seen.petId || !possible.has(stored.status)) {
        broken.push(`${id}: told ${seen.acknowledged}, asked ${seen.asked}, stored ${JSON.stringify(stored)}`)
      }
      if (seen.acknowledged === 'completed' && storedPets.get(seen.petId) !== 'sold') {
        broken.push(`${id}: completed, but pet ${seen.petId} is ${storedPets.get(seen.petId)}`)
      }
    }
    const final = await orderInvariant(env.DATABASE_URL)
    assert.deepEqual(lostPets, [], 'acknowledged pets were lost')
    assert.deepEqual(broken, [], 'acknowledged order moves were lost')
    assert.deepEqual([final.placedNotPending, final.twicePlaced, final.pendingUnheld], [[], [], []])
    const ended = (status: OrderStatus) => [...storedOrders.values()].filter((o) => o.status === status).length
    const told = (status: OrderStatus) => [...orders.values()].filter((o) => o.acknowledged === status).length
    assert.ok(told('completed') > 20 && told('canceled') > 20 && ended('expired') > 20, 'too little traffic')
    t.diagnostic(
      `${DATABASE}: kills=${KILLS} at ${crashPoints.join('; ')}; invariant held after each. ` +
        `acknowledged=${acknowledged} unacknowledged=${unacknowledged} pets=${pets.size} orders placed (201)=${orders.size} ` +
        `told completed=${told('completed')} canceled=${told('canceled')}; stored completed=${ended('completed')} ` +
        `canceled=${ended('canceled')} expired=${ended('expired')} (${storedOrders.size} rows); lost=0`,
    )
  })
})
