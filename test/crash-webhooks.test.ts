/**
 * Nothing lost from the webhook outbox: the server is killed with SIGKILL while it delivers, under
 * concurrent POST /v1/messages, and restarted on the same database, several times. Once the leases
 * the killed servers held ran out and the outbox drained, every committed event reached the
 * receiver at least once and every acknowledged message is delivered; duplicates are counted and
 * reported. Runs on SQLite and PostgreSQL.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { DATABASE } from './helper.ts'
import { type ServerProcess, startServer } from './processes.ts'
import { until } from './wait.ts'
import { drained, leased, messageLoad, nothingLost, subscribedRun } from './webhooks/nothing-lost.ts'

const KILLS = 3
const CLIENTS = 6

describe(`Crash safety of webhooks: SIGKILL while delivering, ${KILLS} times (${DATABASE})`, () => {
  it('every committed event reaches the receiver at least once; acknowledged messages end delivered', {
    timeout: 120_000,
  }, async (t) => {
    const { env, subscription, hook } = await subscribedRun(t, 'crash-hooks@example.com')
    let server: ServerProcess = await startServer(t, env)
    /** Resolves once the server killed last is serving again; a failed request waits for it. */
    let restarted = Promise.resolve()
    const load = messageLoad(
      t,
      subscription.key,
      CLIENTS,
      () => server,
      () => restarted,
    )

    /** Per kill: the deliveries the dead server had claimed and not recorded (sent, or being sent). */
    const orphaned: number[] = []
    for (let kill = 0; kill < KILLS; kill++) {
      // After 60 to 160 more acknowledged messages, while the receiver holds an answer: mid-delivery.
      await load.more(60 + Math.floor(Math.random() * 100))
      await until('a delivery in flight', () => hook.holding > 0, { everyMs: 1 })
      let serving = () => {}
      restarted = new Promise((resolve) => (serving = resolve))
      await server.stop('SIGKILL')
      orphaned.push((await leased(env.DATABASE_URL)).length)
      server = await startServer(t, env)
      serving()
    }
    await load.more(40) // the last server serves too
    await load.stop()
    const drainMs = await drained(server)
    await server.stop('SIGTERM')

    const outcome = await nothingLost(env.DATABASE_URL, subscription, load.acknowledged)
    assert.ok(load.acknowledged.length > 200, 'too little traffic to prove anything')
    assert.ok(
      orphaned.some((n) => n > 0),
      'no kill left a claimed delivery behind',
    )
    t.diagnostic(
      `${DATABASE}: kills=${KILLS} acknowledged messages=${load.acknowledged.length} ` +
        `unacknowledged (killed or refused)=${load.unacknowledged()} events=${outcome.events} ` +
        `received=${outcome.received} distinct received=${outcome.distinct} duplicates=${outcome.duplicates} ` +
        `leases orphaned per kill=${orphaned.join(',')} drained ${drainMs} ms after the load`,
    )
  })
})
