/**
 * The database going away (scale-out point 5): a TCP proxy between the service and PostgreSQL is
 * stopped (connections refused), black-holed (connections hang) and started again, while clients
 * keep writing. Every request must end within the stated timeout, failures must be 503 with
 * Retry-After, the service must recover by itself, and no acknowledged write may be lost.
 */
import assert from 'node:assert/strict'
import { type AddressInfo, connect, createServer, type Server, type Socket } from 'node:net'
import { describe, it } from 'node:test'
import { setTimeout as pause } from 'node:timers/promises'
import { postgres, testDatabaseUrl } from '../helper.ts'
import { cliKey, freePort, startServer } from '../processes.ts'
import { until } from '../wait.ts'

const TIMEOUT_SECONDS = 1
/** Stated bound: a request ends within the database timeout plus one retry and some slack. */
const MAX_REQUEST_MS = TIMEOUT_SECONDS * 2000 + 1500

type Mode = 'forward' | 'refuse' | 'blackhole'

/** A TCP proxy to PostgreSQL that can refuse or swallow connections on command. */
async function proxy(target: URL) {
  let port = 0 // the kernel's choice at the first listen; the same port after a 'refuse', as the server knows it
  const sockets = new Set<Socket>()
  let mode: Mode = 'forward'
  let server: Server | null = null
  const listen = async () => {
    server = createServer((client) => {
      sockets.add(client)
      client.on('close', () => sockets.delete(client))
      client.on('error', () => {})
      if (mode === 'blackhole') return // accept, then never answer
      const upstream = connect(Number(target.port || 5432), target.hostname)
      sockets.add(upstream)
      upstream.on('close', () => sockets.delete(upstream))
      upstream.on('error', () => client.destroy())
      client.on('error', () => upstream.destroy())
      client.pipe(upstream).pipe(client)
    })
    await new Promise<void>((resolve) => server?.listen(port, '127.0.0.1', resolve))
    port = ((server as Server).address() as AddressInfo).port
  }
  await listen()
  return {
    port,
    async set(next: Mode) {
      mode = next
      for (const socket of sockets) socket.destroy()
      if (next === 'refuse' && server) {
        await new Promise((resolve) => server?.close(resolve))
        server = null
      } else if (next !== 'refuse' && !server) {
        await listen()
      }
    },
    close: () => {
      for (const socket of sockets) socket.destroy()
      server?.close()
    },
  }
}

describe('Scale-out: the database going away and coming back', () => {
  it('answers 503 + Retry-After within the timeout while PostgreSQL is unreachable, recovers by itself, loses no acknowledged write', async (t) => {
    const direct = new URL(await testDatabaseUrl(t))
    const db = await proxy(direct)
    t.after(() => db.close())
    const viaProxy = new URL(direct)
    viaProxy.port = String(db.port)
    const env = {
      DATABASE_URL: viaProxy.toString(),
      DATABASE_TIMEOUT_SECONDS: String(TIMEOUT_SECONDS),
      API_KEY_CACHE_SECONDS: '0', // every request needs the database, the worst case
      PORT: String(await freePort()),
      METRICS_PORT: String(await freePort()),
    }
    const key = await cliKey(env)
    const server = await startServer(t, env)
    const headers = { authorization: `Bearer ${key}`, 'content-type': 'application/json' }

    const acknowledged: number[] = []
    const outcomes: Record<string, number> = {}
    let slowest = 0
    let writing = true
    let answered = 0
    /** The writes sent and not yet answered, by when they were sent. */
    const pending = new Set<{ started: number }>()
    const writer = async (n: number) => {
      for (let i = 0; writing; i++) {
        const started = Date.now()
        const write = { started }
        pending.add(write)
        const response = await fetch(`${server.url}/v1/pets`, {
          method: 'POST',
          headers,
          body: JSON.stringify({ name: `w${n}-${i}`, categoryId: 1 }),
        })
        slowest = Math.max(slowest, Date.now() - started)
        pending.delete(write)
        answered++
        outcomes[response.status] = (outcomes[response.status] ?? 0) + 1
        const body = (await response.json()) as { id: number; code: string; message: string; status: number }
        if (response.status === 201) acknowledged.push(body.id)
        else {
          assert.equal(response.status, 503, JSON.stringify(body))
          assert.deepEqual(body, { code: 'service_unavailable', message: body.message, status: 503 })
          assert.equal(response.headers.get('retry-after'), '5')
          await pause(20) // a pace, not a wait: refusals come back at once, and the loop would spin
        }
      }
    }
    const writers = [writer(1), writer(2), writer(3)]

    const ready = async () => {
      const started = Date.now()
      const response = await fetch(`${server.url}/readyz`)
      slowest = Math.max(slowest, Date.now() - started)
      return response.status
    }
    const waitFor = (status: number) =>
      until(`/readyz answering ${status}`, async () => (await ready()) === status, { timeoutMs: 15_000, everyMs: 100 })

    await until('writes acknowledged before the outage', () => acknowledged.length >= 10)
    assert.equal(await ready(), 200)
    for (const mode of ['refuse', 'blackhole'] as const) {
      const cut = Date.now()
      await db.set(mode)
      await waitFor(503)
      // A write sent before the cut may still be acknowledged: let those end (each within the bound).
      await until('the writes sent before the outage answered', () => ![...pending].some((w) => w.started <= cut), {
        timeoutMs: MAX_REQUEST_MS + 1000,
      })
      const before = acknowledged.length
      const answeredBefore = answered
      // What the database holds is unknown meanwhile: missing, or NaN where a gauge cannot go missing.
      const scrape = await (await fetch(`http://127.0.0.1:${env.METRICS_PORT}/metrics`)).text()
      assert.doesNotMatch(scrape, /^animal_store_pets\{/m)
      assert.match(scrape, /^animal_store_webhook_outbox_depth nan$/im)
      // Every writer tries again during the outage (each try ends within the bound): none may succeed.
      await until(`writes answered while the database is ${mode}d`, () => answered >= answeredBefore + 6, {
        timeoutMs: 4 * MAX_REQUEST_MS,
      })
      assert.equal(acknowledged.length, before, `writes were acknowledged while the database was ${mode}d`)
      await db.set('forward')
      await waitFor(200)
      await until(`a write acknowledged after the ${mode} outage`, () => acknowledged.length > before, {
        timeoutMs: 10_000,
      })
    }
    writing = false
    await Promise.all(writers)
    // Each background job said it failed once per outage, not at every turn (order expiry: once a second).
    const sweeps = server.logs().filter((line) => String(line.msg).startsWith('order expiry sweep failed'))
    assert.ok(sweeps.length >= 1 && sweeps.length <= 2, `${sweeps.length} order expiry failure lines`)
    assert.ok(sweeps.every((line) => line.err === undefined && typeof line.detail === 'string'))

    const schema = direct.searchParams.get('options')?.split('=')[1]
    const stored = new Set(
      ((await postgres(`SELECT id FROM ${schema}.pets`)) as { id: string }[]).map((r) => Number(r.id)),
    )
    const lost = acknowledged.filter((id) => !stored.has(id))
    assert.deepEqual(lost, [], 'acknowledged writes were lost')
    assert.ok((outcomes[503] ?? 0) > 0, 'the outage was never seen')
    assert.ok(slowest <= MAX_REQUEST_MS, `a request took ${slowest} ms (bound ${MAX_REQUEST_MS} ms)`)
    t.diagnostic(
      `responses=${JSON.stringify(outcomes)} acknowledged=${acknowledged.length} stored=${stored.size} ` +
        `lost=${lost.length} slowest request=${slowest} ms (bound ${MAX_REQUEST_MS} ms)`,
    )
  })
})
