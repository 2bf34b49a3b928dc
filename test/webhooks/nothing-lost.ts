/**
 * "Nothing lost" for the webhook outbox, shared by the crash tests (test/crash-webhooks.test.ts,
 * test/postgres/webhooks-scale-out.test.ts): an account subscribed to message.created at a
 * loopback receiver, POST /v1/messages load over live servers, and the check, read from the
 * database with SQL, that every committed event reached the receiver at least once.
 */
import assert from 'node:assert/strict'
import type { TestContext } from 'node:test'
import { setTimeout as pause } from 'node:timers/promises'
import { openStore } from '../../src/store/index.ts'
import { newWebhookSecret } from '../../src/webhooks/signing.ts'
import { testDatabaseUrl } from '../helper.ts'
import { cliKey, type ServerProcess } from '../processes.ts'
import { sqlRows } from '../sql.ts'
import { until } from '../wait.ts'
import { type Receiver, receiver } from './receiver.ts'

/**
 * Loopback http receivers; retries within a second or two; attempts bounded by 1 s, so that a
 * lease (WEBHOOK_TIMEOUT_SECONDS + 10 s) a killed server held runs out 11 s after its claim.
 */
export const WEBHOOK_ENV = {
  EXPERIMENTAL_FEATURES: 'webhooks',
  RATE_LIMIT: '0',
  WEBHOOK_ALLOW_PRIVATE_URLS: 'true',
  WEBHOOK_ALLOW_HTTP: 'true',
  WEBHOOK_RETRY_SCHEDULE: '0.2,0.5,1',
  WEBHOOK_TIMEOUT_SECONDS: '1',
}
/** Long enough for the leases of a server killed last to run out, and for their deliveries to be sent. */
export const DRAIN_MS = 30_000

export interface Subscribed {
  key: string
  secret: string
  hook: Receiver
}

/**
 * An account with a key (the CLI) and an endpoint subscribed to message.created at a receiver that
 * holds every fourth answer 50 ms, so that deliveries are in flight when a server is killed.
 */
export async function subscribed(t: TestContext, databaseUrl: string, email: string): Promise<Subscribed> {
  const key = await cliKey({ DATABASE_URL: databaseUrl }, email)
  const hook = await receiver(t)
  hook.delayMs = (n) => (n % 4 === 0 ? 50 : 0)
  const secret = newWebhookSecret()
  // Through the store, as the endpoints' API routes would; the store is closed before any server starts.
  const store = await openStore({ databaseUrl, poolSize: 1, timeoutMs: 5000 })
  try {
    const account = await store.findAccountByEmail(email)
    assert.ok(account, `no account ${email}`)
    await store.createWebhookEndpoint({
      accountId: account.id,
      url: hook.url,
      events: ['message.created'],
      description: 'nothing lost',
      secret,
    })
  } finally {
    await store.close()
  }
  return { key, secret, hook }
}

/** A server environment on this run's database, and an account of `email` subscribed to a receiver. */
export async function subscribedRun(t: TestContext, email: string) {
  const env = { ...WEBHOOK_ENV, DATABASE_URL: await testDatabaseUrl(t) }
  const subscription = await subscribed(t, env.DATABASE_URL, email)
  return { env, subscription, hook: subscription.hook }
}

/**
 * `clients` loops of POST /v1/messages, each request to the server `pick` gives; a request the
 * server died under is not acknowledged, and waits for `up()` before the next.
 */
export function messageLoad(
  t: TestContext,
  key: string,
  clients: number,
  pick: (n: number) => ServerProcess,
  up: () => Promise<void>,
) {
  const acknowledged: string[] = []
  let unacknowledged = 0
  let running = true
  // A test that fails midway must not leave its clients retrying dead servers in a loop for ever.
  t.after(() => {
    running = false
  })
  const client = async (n: number) => {
    for (let i = 0; running; i++) {
      try {
        const response = await fetch(`${pick(n + i).url}/v1/messages`, {
          method: 'POST',
          headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
          body: JSON.stringify({ message: `client ${n} says ${i}` }),
        })
        const body = (await response.json()) as { id: string }
        if (response.status === 202) acknowledged.push(body.id)
        else unacknowledged++
      } catch {
        unacknowledged++ // the process died under this request: it was never acknowledged
        await up()
        // Refused at once while no server listens: not a busy loop meanwhile.
        await pause(10)
      }
    }
  }
  const loops = Array.from({ length: clients }, (_, n) => client(n))
  return {
    acknowledged,
    unacknowledged: () => unacknowledged,
    /** Resolves once `n` more messages than now are acknowledged. */
    more: (n: number) => {
      const target = acknowledged.length + n
      return until(`${n} more messages acknowledged`, () => acknowledged.length >= target, { timeoutMs: 30_000 })
    },
    stop: async () => {
      running = false
      await Promise.all(loops)
    },
  }
}

/** The deliveries leased now (claimed, outcome not recorded): after a kill, those the dead server held among them. */
export async function leased(databaseUrl: string): Promise<string[]> {
  const rows = await sqlRows<{ id: string }>(
    databaseUrl,
    "SELECT id FROM deliveries WHERE status = 'pending' AND lease IS NOT NULL",
  )
  return rows.map((row) => row.id)
}

/** Waits until the outbox is empty as `server` reports it (GET /readyz: store.outboxStats()); returns the ms waited. */
export async function drained(server: ServerProcess): Promise<number> {
  const started = Date.now()
  await until(
    'the outbox drained',
    async () => {
      const response = await fetch(`${server.url}/readyz`)
      const ready = (await response.json()) as { outbox?: { depth: number } }
      return response.ok && ready.outbox?.depth === 0
    },
    { timeoutMs: DRAIN_MS, everyMs: 100 },
  )
  return Date.now() - started
}

export interface Outcome {
  events: number
  received: number
  distinct: number
  duplicates: number
}

/**
 * What must hold once the outbox drained, read with SQL: every event in the events table reached
 * the receiver (its id among the distinct webhook-ids), signed; nothing else did; every delivery is
 * delivered, and every acknowledged message too. Duplicates (requests beyond the distinct ids) are
 * allowed, counted and returned.
 */
export async function nothingLost(databaseUrl: string, { hook, secret }: Subscribed, acknowledged: string[]) {
  const events = await sqlRows<{ id: string; message: string }>(databaseUrl, 'SELECT id, body AS message FROM events')
  const ids = hook.ids()
  const missing = events.filter((event) => !ids.has(event.id)).map((event) => event.id)
  const known = new Set(events.map((event) => event.id))
  const strangers = [...ids].filter((id) => !known.has(id))
  const deliveries = await sqlRows<{ status: string; n: number | string }>(
    databaseUrl,
    'SELECT status, count(*) AS n FROM deliveries GROUP BY status ORDER BY status',
  )
  const messages = new Map(
    (await sqlRows<{ id: string; status: string }>(databaseUrl, 'SELECT id, status FROM messages')).map((m) => [
      m.id,
      m.status,
    ]),
  )
  const notDelivered = acknowledged.filter((id) => messages.get(id) !== 'delivered')
  const sentFor = new Set(hook.received.map((r) => r.event.data.id))
  const messageless = acknowledged.filter((id) => !sentFor.has(id))

  assert.deepEqual(missing, [], `${missing.length} of ${events.length} committed events never reached the receiver`)
  assert.deepEqual(strangers, [], 'the receiver got webhook-ids that are no committed event')
  assert.deepEqual(
    deliveries.map((d) => [d.status, Number(d.n)]),
    [['delivered', events.length]],
    'every delivery delivered',
  )
  assert.deepEqual(messageless, [], 'acknowledged messages whose event never reached the receiver')
  assert.deepEqual(notDelivered, [], 'acknowledged messages not delivered')
  assert.equal(hook.verifiesWith(secret), true, 'a request did not verify with the endpoint secret')
  return {
    events: events.length,
    received: hook.received.length,
    distinct: ids.size,
    duplicates: hook.received.length - ids.size,
  } satisfies Outcome
}
