/**
 * Several stateless instances of the service on one PostgreSQL database (scale-out point 3).
 * Each test starts real server processes; the counts it checks are reported as test diagnostics.
 */
import assert from 'node:assert/strict'
import { before, describe, it } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { FRESH_MS } from '../../src/store/pet-cache.ts'
import { PostgresStore } from '../../src/store/postgres.ts'
import { postgres, testDatabaseUrl } from '../helper.ts'
import { type Cleanup, cli, cliKey, type ServerProcess, startServer, suiteCleanup } from '../processes.ts'
import { nextEvent, openStream } from '../sse.ts'
import { until } from '../wait.ts'

const INSTANCES = 3
const CACHE_SECONDS = 1

/** The instances and a key, started once for the suite: its tests run one after another, the first on an empty catalogue. */
async function cluster(t: Cleanup) {
  const env = {
    DATABASE_URL: await testDatabaseUrl(t),
    API_KEY_CACHE_SECONDS: String(CACHE_SECONDS),
    EXPERIMENTAL_FEATURES: 'webhooks',
  }
  const key = await cliKey(env)
  const servers = await Promise.all(Array.from({ length: INSTANCES }, () => startServer(t, env)))
  return { env, key, servers }
}

const headers = (key: string) => ({ authorization: `Bearer ${key}`, 'content-type': 'application/json' })

async function createPet(server: ServerProcess, key: string, name: string) {
  const response = await fetch(`${server.url}/v1/pets`, {
    method: 'POST',
    headers: headers(key),
    body: JSON.stringify({ name, categoryId: 1 }),
  })
  return { status: response.status, body: (await response.json()) as { id: number; name: string } }
}

/** Follows the Link headers from `first`, sending each page request to the next instance in turn. */
async function walk(servers: ServerProcess[], key: string, first: string) {
  const ids: number[] = []
  let path: string | undefined = first
  for (let page = 0; path; page++) {
    const server = servers[page % servers.length] as ServerProcess
    const response: Response = await fetch(`${server.url}${path}`, { headers: headers(key) })
    assert.equal(response.status, 200)
    ids.push(...((await response.json()) as { id: number }[]).map((p) => p.id))
    const next = /<([^>]+)>; rel="next"/.exec(response.headers.get('link') ?? '')?.[1]
    path = next ? new URL(next).pathname + new URL(next).search : undefined
  }
  return ids
}

describe(`Scale-out: ${INSTANCES} instances on one PostgreSQL database`, () => {
  const suite = suiteCleanup()
  let shared: Promise<Awaited<ReturnType<typeof cluster>>>
  before(() => {
    shared = cluster(suite)
  })

  it('concurrent createPet calls spread over all instances get distinct ids, and every instance lists them all', async (t) => {
    const { key, servers } = await shared
    const REQUESTS = 300
    const results = await Promise.all(
      Array.from({ length: REQUESTS }, (_, i) => createPet(servers[i % INSTANCES] as ServerProcess, key, `pet-${i}`)),
    )
    assert.deepEqual(
      results.filter((r) => r.status !== 201),
      [],
    )
    const ids = results.map((r) => r.body.id)
    assert.equal(new Set(ids).size, REQUESTS)
    for (const server of servers) {
      const listed = await walk([server], key, '/v1/pets?limit=100')
      assert.deepEqual(
        listed,
        [...ids].sort((a, b) => a - b),
      )
    }
    t.diagnostic(
      `instances=${INSTANCES} creates=${REQUESTS} distinct ids=${new Set(ids).size} listed by each instance=${REQUESTS}`,
    )
  })

  it('a cursor walk across instances sees every existing pet exactly once while writes go on', async (t) => {
    const { key, servers } = await shared
    const existing = await Promise.all(
      Array.from({ length: 120 }, (_, i) => createPet(servers[i % INSTANCES] as ServerProcess, key, `old-${i}`)),
    )
    let writing = true
    let written = 0
    const writers = servers.map(async (server) => {
      while (writing) {
        assert.equal((await createPet(server, key, `new-${written++}`)).status, 201)
      }
    })
    const seen = await walk(servers, key, '/v1/pets?limit=7')
    writing = false
    await Promise.all(writers)
    const seenSet = new Set(seen)
    assert.equal(seenSet.size, seen.length, 'a pet was listed twice')
    assert.deepEqual(
      seen,
      [...seen].sort((a, b) => a - b),
    )
    for (const { body } of existing) assert.ok(seenSet.has(body.id), `pet ${body.id} was skipped`)
    t.diagnostic(
      `existing=${existing.length} written during the walk=${written} listed=${seen.length} duplicates=0 skipped=0`,
    )
  })

  it(`a key revoked through the CLI is refused by every instance within API_KEY_CACHE_SECONDS (${CACHE_SECONDS} s)`, async (t) => {
    const { env, servers } = await shared
    // A key of its own: the other tests go on with the suite's.
    const key = await cliKey(env, 'revoked@example.com')
    for (const server of servers) {
      assert.equal((await fetch(`${server.url}/v1/pets`, { headers: headers(key) })).status, 200)
    }
    const listed = await cli(['keys', 'list', 'revoked@example.com'], env)
    const keyId = /key_[0-9A-Za-z]{16}/.exec(listed.stdout)?.[0] as string
    assert.equal((await cli(['keys', 'revoke', keyId], env)).code, 0)
    // The bound runs from the revocation, not from starting the CLI (a node process, slow under load):
    // the database stamped revoked_at when it made it, on this machine's clock.
    const [row] = (await postgres(
      `SELECT extract(epoch FROM revoked_at) * 1000 AS ms FROM api_keys WHERE id = '${keyId}'`,
      env.DATABASE_URL,
    )) as { ms: string }[]
    const revokedAt = Number(row?.ms)
    assert.ok(revokedAt > 0, `no revoked_at for ${keyId}`)
    // An instance trusts a key it verified for the TTL; one more TTL is the margin for a loaded machine
    // (each instance is asked without pause, so its refusal is seen within one request's time).
    const BOUND_MS = 2 * CACHE_SECONDS * 1000
    const refusedAfter = await Promise.all(
      servers.map((server) =>
        until(
          `${server.url} refusing the revoked key`,
          async () => {
            const response = await fetch(`${server.url}/v1/pets`, { headers: headers(key) })
            if (response.status !== 401) return null
            assert.equal(((await response.json()) as { code: string }).code, 'revoked_api_key')
            return { ms: Date.now() - revokedAt }
          },
          { timeoutMs: BOUND_MS + 5000, everyMs: 0 },
        ).then(({ ms }) => ms),
      ),
    )
    for (const ms of refusedAfter)
      assert.ok(ms <= BOUND_MS, `refused ${ms} ms after the revocation (bound ${BOUND_MS} ms)`)
    t.diagnostic(
      `refused by all ${INSTANCES} instances ${refusedAfter.join(', ')} ms after the revocation ` +
        `(API_KEY_CACHE_SECONDS=${CACHE_SECONDS}, asserted bound ${BOUND_MS} ms)`,
    )
  })

  it('an Idempotency-Key sent to every instance at once creates one pet; retries replay it', async (t) => {
    const { key, servers } = await shared
    const send = (server: ServerProcess) =>
      fetch(`${server.url}/v1/pets`, {
        method: 'POST',
        headers: { ...headers(key), 'idempotency-key': 'same-order' },
        body: JSON.stringify({ name: 'Once', categoryId: 1 }),
      }).then(async (r) => ({
        status: r.status,
        replayed: r.headers.get('idempotent-replayed'),
        body: (await r.json()) as { id: number },
      }))
    const earlier = await walk(servers, key, '/v1/pets?limit=100')
    const first = await Promise.all([...servers, ...servers].map(send))
    const created = first.filter((r) => r.status === 201)
    assert.ok(created.length >= 1)
    assert.ok(
      first.every((r) => r.status === 201 || r.status === 409),
      JSON.stringify(first.map((r) => r.status)),
    )
    assert.equal(created.filter((r) => r.replayed !== 'true').length, 1, 'exactly one request did the work')
    const retries = await Promise.all(servers.map(send))
    assert.ok(retries.every((r) => r.status === 201 && r.replayed === 'true' && r.body.id === created[0]?.body.id))
    // A page another instance cached before the create may be served for up to the freshness bound.
    const added = async () => (await walk(servers, key, '/v1/pets?limit=100')).filter((id) => !earlier.includes(id))
    await until('the new pet listed by every instance', async () => (await added()).length > 0, { timeoutMs: FRESH_MS })
    assert.deepEqual(await added(), [created[0]?.body.id])
    t.diagnostic(
      `concurrent same-key requests=${first.length}: created=1 replayed=${created.length - 1} ` +
        `conflict(409)=${first.length - created.length}; retries replayed on all ${INSTANCES} instances`,
    )
  })

  it('messages sent through different instances stay with their own account', async (t) => {
    const { env, servers } = await shared
    const alice = await cliKey(env, 'alice@example.com')
    const bob = await cliKey(env, 'bob@example.com')
    const send = (server: ServerProcess, key: string, message: string) =>
      fetch(`${server.url}/v1/messages`, { method: 'POST', headers: headers(key), body: JSON.stringify({ message }) })
    const sent = await Promise.all(
      Array.from({ length: 30 }, (_, i) =>
        send(servers[i % INSTANCES] as ServerProcess, i % 2 ? bob : alice, `${i % 2 ? 'bob' : 'alice'} ${i}`),
      ),
    )
    assert.ok(sent.every((r) => r.status === 202))
    const store = await PostgresStore.open({ databaseUrl: env.DATABASE_URL, poolSize: 1, timeoutMs: 2000 })
    t.after(() => store.close())
    for (const [email, name] of [
      ['alice@example.com', 'alice'],
      ['bob@example.com', 'bob'],
    ] as const) {
      const account = await store.findAccountByEmail(email)
      const messages = (await store.listMessages({ accountId: account?.id as number, limit: 100 })).messages
      assert.equal(messages.length, 15)
      assert.ok(messages.every((m) => m.message.startsWith(`${name} `)))
    }
  })

  it('an event committed on one instance reaches a stream held on another within 1 s; a resume elsewhere skips none', async (t) => {
    const { env, servers } = await shared
    const key = await cliKey(env, 'streams@example.com')
    const beta = { ...headers(key), 'animal-store-beta': 'webhooks' }
    const [a, b, c] = servers as [ServerProcess, ServerProcess, ServerProcess]
    const send = async (server: ServerProcess, message: string) => {
      const response = await fetch(`${server.url}/v1/messages`, {
        method: 'POST',
        headers: beta,
        body: JSON.stringify({ message }),
      })
      assert.equal(response.status, 202)
      return { id: ((await response.json()) as { id: string }).id, ackedAt: Date.now() }
    }
    const stream = await openStream(`${a.url}/v1/events`, beta)
    await stream.next()
    const delays: number[] = []
    const seen: string[] = []
    for (let i = 0; i < 5; i++) {
      const sent = await send(b, `from b ${i}`)
      const event = await nextEvent(stream, 3000)
      delays.push(Date.now() - sent.ackedAt)
      assert.equal(event.data.data.id, sent.id)
      seen.push(event.id as string)
    }
    stream.close()
    assert.ok(Math.max(...delays) <= 1000, `commit on B → stream on A, ms: ${delays}`)
    // Events made while no stream was open, then a resume on a third instance from the last one seen.
    const missed = [await send(b, 'missed 1'), await send(a, 'missed 2')]
    const resumed = await openStream(`${c.url}/v1/events`, { ...beta, 'last-event-id': seen.at(-1) as string })
    try {
      await resumed.next()
      const replayed = [await nextEvent(resumed), await nextEvent(resumed)]
      assert.deepEqual(
        replayed.map((event) => event.data.data.id),
        missed.map(({ id }) => id),
      )
      const live = await send(a, 'live again')
      assert.equal((await nextEvent(resumed)).data.data.id, live.id)
    } finally {
      resumed.close()
    }
    t.diagnostic(`commit on one instance → event on another's stream, ms: ${delays.join(' ')}`)
  })

  it(`a PATCH on one instance is seen by GET on the others within the freshness bound (${FRESH_MS} ms)`, async (t) => {
    const { key, servers } = await shared
    const created = await createPet(servers[0] as ServerProcess, key, 'Rex')
    const url = (server: ServerProcess) => `${server.url}/v1/pets/${created.body.id}`
    const read = async (server: ServerProcess) => {
      const sentAt = Date.now()
      const response = await fetch(url(server), { headers: headers(key) })
      return {
        sentAt,
        status: ((await response.json()) as { status: string }).status,
        etag: response.headers.get('etag'),
      }
    }
    const delays: number[] = []
    const ROUNDS = 4
    for (let round = 0; round < ROUNDS; round++) {
      const status = round % 2 === 0 ? 'sold' : 'available'
      const writer = servers[round % INSTANCES] as ServerProcess
      const readers = servers.filter((server) => server !== writer)
      // Every instance has the pet as it was in its cache.
      for (const server of servers) assert.notEqual((await read(server)).status, status)
      const patched = await fetch(url(writer), {
        method: 'PATCH',
        headers: { ...headers(key), 'content-type': 'application/merge-patch+json' },
        body: JSON.stringify({ status }),
      })
      assert.equal(patched.status, 200)
      const ackedAt = Date.now()
      // The instance that made the change shows it at once.
      assert.equal((await read(writer)).status, status)
      // The others: polled every 5 ms until they show it. A request sent after the bound has
      // passed since the PATCH was acknowledged never gets the old status.
      await Promise.all(
        readers.map(async (server) => {
          for (;;) {
            const seen = await read(server)
            if (seen.status === status) {
              assert.equal(seen.etag, patched.headers.get('etag'))
              delays.push(seen.sentAt - ackedAt)
              return
            }
            assert.ok(seen.sentAt - ackedAt <= FRESH_MS, `stale ${seen.sentAt - ackedAt} ms after the PATCH`)
            await sleep(5)
          }
        }),
      )
    }
    delays.sort((a, b) => a - b)
    t.diagnostic(
      `instances=${INSTANCES} rounds=${ROUNDS} PATCH→GET on another instance, ms after the acknowledgment: ` +
        `min=${delays[0]} median=${delays[Math.floor(delays.length / 2)]} max=${delays.at(-1)} (bound ${FRESH_MS})`,
    )
  })
})
