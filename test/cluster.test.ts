import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import type { AddressInfo } from 'node:net'
import { createServer } from 'node:net'
import { hostname } from 'node:os'
import { describe, it } from 'node:test'
import { testDatabaseUrl } from './helper.ts'
import { cliKey, freePort, runServer, startServer } from './processes.ts'
import { until } from './wait.ts'

describe('WORKERS: several processes on one machine (scale-out point 4)', () => {
  it('serves one port from WORKERS processes that all write safely to the database, and stops them all on SIGTERM; the primary logs as the workers do', async (t) => {
    const env = { DATABASE_URL: await testDatabaseUrl(t), WORKERS: '2', LOG_LEVEL: 'info' }
    const key = await cliKey(env)
    const server = await startServer(t, env)
    // /healthz answered once one worker listens: wait for the other's "Server listening" line too.
    const listening = new Set<unknown>()
    await server.waitForLog(
      (line) => String(line.msg).startsWith('Server listening') && listening.add(line.pid).size === 2,
      10_000,
    )
    const REQUESTS = 200
    const responses = await Promise.all(
      Array.from({ length: REQUESTS }, (_, i) =>
        fetch(`${server.url}/v1/pets`, {
          method: 'POST',
          headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', connection: 'close' },
          body: JSON.stringify({ name: `p${i}`, categoryId: 1 }),
        }).then(async (r) => ({ status: r.status, id: ((await r.json()) as { id: number }).id })),
      ),
    )
    assert.deepEqual(
      responses.filter((r) => r.status !== 201),
      [],
    )
    assert.equal(new Set(responses.map((r) => r.id)).size, REQUESTS)
    const listed = await fetch(`${server.url}/v1/pets?limit=100&status=available`, {
      headers: { authorization: `Bearer ${key}` },
    })
    assert.equal(((await listed.json()) as unknown[]).length, 100)
    // Log lines are buffered: read them once the workers have stopped (and flushed).
    assert.equal(await server.stop('SIGTERM'), 0)
    const servedBy = new Set(
      server
        .output()
        .split('\n')
        .filter((line) => line.includes('"request completed"'))
        .map((line) => JSON.parse(line).pid),
    )
    assert.equal(servedBy.size, 2, 'both workers served requests')
    // The primary's lines honour LOG_LEVEL (info here) and carry the hostname, as the workers' do.
    const started = server.logs().find((line) => String(line.msg).startsWith('primary '))
    assert.ok(started, server.output())
    assert.equal(started.hostname, hostname())
    t.diagnostic(`workers=2 creates=${REQUESTS} distinct ids=${REQUESTS} served by pids ${[...servedBy].join(', ')}`)
  })

  it('exits 1 when its workers cannot start (the port is taken), instead of restarting them forever', async (t) => {
    const blocker = createServer()
    await new Promise<void>((resolve) => blocker.listen(0, '127.0.0.1', resolve))
    t.after(() => blocker.close())
    const port = (blocker.address() as AddressInfo).port
    const env = { DATABASE_URL: await testDatabaseUrl(t), WORKERS: '2', PORT: String(port), HOST: '127.0.0.1' }
    const exit = await runServer(env, 20_000)
    assert.equal(exit.code, 1, exit.stdout + exit.stderr)
    assert.match(exit.stdout, /could not start/)
    // Nothing sent a signal: the log must not say one came.
    assert.doesNotMatch(exit.stdout, /received SIG/)
  })

  it('a worker killed while it starts is replaced, as one killed later is: the service stays up', async (t) => {
    // A port of its own: with port 0, workers that listen after all others died get a new one.
    const env = {
      DATABASE_URL: await testDatabaseUrl(t),
      WORKERS: '2',
      LOG_LEVEL: 'info',
      PORT: String(await freePort()),
    }
    const server = await startServer(t, env)
    const workers = () =>
      execFileSync('pgrep', ['-P', String(server.child.pid)], { encoding: 'utf8' })
        .trim()
        .split('\n')
        .map(Number)
    const before = new Set(workers())
    const [first] = before
    process.kill(first as number, 'SIGKILL')
    // Its replacement is forked at once (or after CRASH_LOOP_MS): kill it before it listens.
    const replacement = await until('a replacement forked', () =>
      workers().find((pid) => pid !== first && !before.has(pid)),
    )
    process.kill(replacement, 'SIGKILL')
    await server.waitForLog((line) => String(line.msg).includes(`worker ${replacement} exited (SIGKILL)`), 15_000)
    // Killed before it listened: else this is the case of a worker that dies later.
    assert.ok(!server.logs().some((line) => line.pid === replacement && line.msg === 'serving'), server.output())
    const answered = await until(
      'served by a third worker too',
      async () => {
        const now = workers()
        return now.length === 2 && now.every((pid) => pid !== first && pid !== replacement) ? now : null
      },
      { timeoutMs: 20_000 },
    )
    const health = await fetch(`${server.url}/healthz`).then(
      (r) => r.status,
      (e: Error) => String(e.cause ?? e),
    )
    assert.equal(health, 200, server.output())
    assert.equal(await server.stop('SIGTERM'), 0, server.output())
    t.diagnostic(`killed ${first}, then its replacement ${replacement} while starting; now ${answered.join(', ')}`)
  })

  it('a SIGTERM while the workers are still starting stops them all and exits 0; LOG_LEVEL=warn quiets the primary too', async (t) => {
    const env = { DATABASE_URL: await testDatabaseUrl(t), WORKERS: '2', LOG_LEVEL: 'info' }
    const server = await startServer(t, env, { ready: false })
    await server.waitForLog((line) => String(line.msg).startsWith('primary '), 15_000)
    assert.equal(await server.stop('SIGTERM'), 0, server.output())
    const quiet = await startServer(t, { ...env, LOG_LEVEL: 'warn' })
    assert.equal(await quiet.stop('SIGTERM'), 0)
    assert.equal(quiet.stdout(), '')
  })
})
