/**
 * Crash safety: the server process is killed with SIGKILL at random moments under concurrent
 * createPet and POST /messages traffic, and restarted on the same database. Every request that got
 * a 2xx must be there afterwards, intact, and ids must stay unique. Runs on SQLite and PostgreSQL.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { isDeepStrictEqual } from 'node:util'
import type { Message } from '../src/schemas/messages.ts'
import type { Pet } from '../src/schemas/pets.ts'
import { openStore } from '../src/store/index.ts'
import { DATABASE, plain, testDatabaseUrl } from './helper.ts'
import { cliKey, type ServerProcess, startServer } from './processes.ts'
import { until } from './wait.ts'

const KILLS = 4
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
          const sent = (await response.json()) as Pet & Message
          if (response.status === 201) {
            assert.deepEqual(sent, { id: sent.id, ...body })
            pets.push(sent)
          } else if (response.status === 202) messages.push(sent)
          else refused++
        } catch {
          refused++ // the process died under this request: it was never acknowledged
          await restarted
        }
      }
    }
    const clients = Array.from({ length: CLIENTS }, (_, n) => client(n))

    const acknowledgedAtKill: number[] = []
    // Each kill comes at a random point of the traffic: after 40 to 160 more acknowledged writes.
    const moreWrites = (n: number) => {
      const target = acknowledged() + n
      return until(`${n} more writes acknowledged`, () => acknowledged() >= target, { timeoutMs: 30_000 })
    }
    for (let kill = 0; kill < KILLS; kill++) {
      await moreWrites(40 + Math.floor(Math.random() * 120))
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
      (await store.listMessages(account?.id as number, 1_000_000)).map((m) => [m.id, plain(m)]),
    )

    const lostPets = pets.filter((pet) => !isDeepStrictEqual(stored.get(pet.id), pet))
    const lostMessages = messages.filter((m) => !isDeepStrictEqual(storedMessages.get(m.id), m))
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
