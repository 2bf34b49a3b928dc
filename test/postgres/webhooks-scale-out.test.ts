/**
 * Nothing lost from the webhook outbox when one of three instances on one PostgreSQL database is
 * killed with SIGKILL while it delivers, and not restarted: the two left take over its leases once
 * they run out (WEBHOOK_TIMEOUT_SECONDS + 10 s), and every committed event reaches the receiver at
 * least once. Duplicates are counted and reported.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { type ServerProcess, startServer } from '../processes.ts'
import { sqlRows } from '../sql.ts'
import { until } from '../wait.ts'
import { drained, leased, messageLoad, nothingLost, subscribedRun } from '../webhooks/nothing-lost.ts'

const INSTANCES = 3
const CLIENTS = 6

describe(`Webhooks scale-out: one of ${INSTANCES} instances killed while delivering`, () => {
  it('the others take over its leases: every committed event reaches the receiver at least once', {
    timeout: 120_000,
  }, async (t) => {
    const { env, subscription, hook } = await subscribedRun(t, 'scale-hooks@example.com')
    const servers: ServerProcess[] = []
    for (let i = 0; i < INSTANCES; i++) servers.push(await startServer(t, env))
    const [victim] = servers as [ServerProcess]
    let alive = servers
    // Spread over the instances alive; a request the victim died under goes on at once elsewhere.
    const load = messageLoad(
      t,
      subscription.key,
      CLIENTS,
      (n) => alive[n % alive.length] as ServerProcess,
      async () => {},
    )

    await load.more(150 + Math.floor(Math.random() * 150))
    await until('a delivery in flight', () => hook.holding > 0, { everyMs: 1 })
    const before = await leased(env.DATABASE_URL)
    await victim.stop('SIGKILL')
    alive = servers.slice(1)
    const atKill = await leased(env.DATABASE_URL)
    // The survivors record what they had claimed within a delivery's time (at most 50 ms here); the
    // victim's leases stay until they run out. 200 more deliveries received: the survivors' are done.
    const received = hook.received.length
    await until('200 more deliveries received', () => hook.received.length >= received + 200, { timeoutMs: 30_000 })
    const stillLeased = new Set(await leased(env.DATABASE_URL))
    // The delivery held at the kill may have been a survivor's: then the victim left no lease, and
    // only "nothing lost" is checked (the takeover is, on both databases, in crash-webhooks.test.ts).
    const orphaned = atKill.filter((id) => stillLeased.has(id))
    if (orphaned.length === 0) t.diagnostic(`the kill left no claimed delivery behind (${before.length} leased before)`)

    await load.more(100)
    await load.stop()
    const drainMs = await drained(alive[0] as ServerProcess)
    await Promise.all(alive.map((server) => server.stop('SIGTERM')))

    const outcome = await nothingLost(env.DATABASE_URL, subscription, load.acknowledged)
    // What the victim held was claimed again by a survivor, once its lease ran out, and delivered.
    const list = orphaned.map((id) => `'${id}'`).join(',') || "''"
    const takenOver = await sqlRows<{ id: string; attempts: number }>(
      env.DATABASE_URL,
      `SELECT id, attempts FROM deliveries WHERE id IN (${list}) AND status = 'delivered' AND attempts >= 2`,
    )
    assert.equal(takenOver.length, orphaned.length, 'a delivery the victim held was not taken over')
    t.diagnostic(
      `postgres: instances=${INSTANCES} killed=1 acknowledged messages=${load.acknowledged.length} ` +
        `unacknowledged (killed)=${load.unacknowledged()} events=${outcome.events} received=${outcome.received} ` +
        `distinct received=${outcome.distinct} duplicates=${outcome.duplicates} ` +
        `leases orphaned by the kill=${orphaned.length} (all taken over) drained ${drainMs} ms after the load`,
    )
  })
})
