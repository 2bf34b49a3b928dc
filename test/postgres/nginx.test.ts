/**
 * Behind a real reverse proxy: Debian's nginx, with the configuration docs/operations.md gives
 * (deploy/nginx/animal-store.conf), in front of two instances on one PostgreSQL database started
 * with TRUST_PROXY=127.0.0.1. Links carry nginx's address, the client's address reaches the log and
 * the limiter for bad keys, and restarting each instance in turn under load fails no request.
 *
 * The file is used as it is, but for its ports: `listen 80` and the two upstream servers'. A main
 * config of the test's own includes it, with nginx's pid, logs and temporary files in a scratch
 * folder. nginx listens on 127.0.0.1 and the clients send from 127.0.0.2 and 127.0.0.3 (their
 * sockets bound there), so the address an instance logs is the client's, not nginx's.
 */
import assert from 'node:assert/strict'
import { type ChildProcess, execFileSync, spawn } from 'node:child_process'
import { randomUUID } from 'node:crypto'
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { Agent, request } from 'node:http'
import { connect } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, it, type TestContext } from 'node:test'
import { setTimeout as pause } from 'node:timers/promises'
import { postgres, testDatabaseUrl } from '../helper.ts'
import { cliKey, freePort, ROOT, type ServerProcess, startServer } from '../processes.ts'
import { nextEvent, openStream } from '../sse.ts'
import { until } from '../wait.ts'

const CONF = join(ROOT, 'deploy/nginx/animal-store.conf')
/** The proxy's address as the instances see it: what docs/operations.md tells operators to set. */
const TRUST_PROXY = '127.0.0.1'
const AUTH_FAILURE_LIMIT = 2

function nginxPath(): string | null {
  if (existsSync('/usr/sbin/nginx')) return '/usr/sbin/nginx'
  try {
    return execFileSync('sh', ['-c', 'command -v nginx'], { encoding: 'utf8' }).trim() || null
  } catch {
    return null
  }
}
const NGINX = nginxPath()
// CI installs nginx (.ci/run): there a missing nginx fails the test instead of skipping it.
const skip =
  NGINX === null && !process.env.CI
    ? 'nginx is not installed: install it with "apt-get update && apt-get install -y nginx" to run this test'
    : false

/**
 * deploy/nginx/animal-store.conf with its ports replaced, and nothing else: each replaced line must
 * be there once, so that the test cannot drift from the file.
 */
function configuredFile(listenPort: number, upstreamPorts: [number, number]): string {
  let text = readFileSync(CONF, 'utf8')
  const replace = (from: string, to: string) => {
    assert.equal(text.split(from).length, 2, `${CONF} has no single "${from}"`)
    text = text.replace(from, to)
  }
  replace('listen 80;', `listen 127.0.0.1:${listenPort};`)
  replace('server 127.0.0.1:8081 ', `server 127.0.0.1:${upstreamPorts[0]} `)
  replace('server 127.0.0.1:8082 ', `server 127.0.0.1:${upstreamPorts[1]} `)
  return text
}

/** Starts nginx in the foreground with the repo's file; stopped when the test ends. */
async function startNginx(t: TestContext, upstreamPorts: [number, number]) {
  const dir = mkdtempSync(join(tmpdir(), 'animal-store-nginx-'))
  // Run as root (CI), nginx's workers are `nobody`: they must reach their temporary folders.
  chmodSync(dir, 0o755)
  const port = await freePort()
  writeFileSync(join(dir, 'animal-store.conf'), configuredFile(port, upstreamPorts))
  writeFileSync(
    join(dir, 'nginx.conf'),
    [
      'worker_processes 1;',
      `pid ${dir}/nginx.pid;`,
      `error_log ${dir}/error.log warn;`,
      'events { worker_connections 1024; }',
      'http {',
      '  log_format upstream \'$remote_addr "$request" $status upstream=$upstream_addr:$upstream_status\';',
      `  access_log ${dir}/access.log upstream;`,
      ...['client_body', 'proxy', 'fastcgi', 'uwsgi', 'scgi'].map((kind) => `  ${kind}_temp_path ${dir}/${kind};`),
      `  include ${dir}/animal-store.conf;`,
      '}',
      '',
    ].join('\n'),
  )
  const errorLog = () => readFileSync(join(dir, 'error.log'), 'utf8')
  const child: ChildProcess = spawn(
    NGINX ?? 'nginx',
    ['-p', dir, '-e', join(dir, 'error.log'), '-c', join(dir, 'nginx.conf'), '-g', 'daemon off;'],
    { stdio: ['ignore', 'inherit', 'inherit'] },
  )
  const exited = new Promise((resolve) => child.once('exit', resolve))
  t.after(async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGQUIT') // nginx's graceful stop
      await exited
    }
    rmSync(dir, { recursive: true, force: true })
  })
  await until(
    `nginx listening on ${port}`,
    () => {
      if (child.exitCode !== null) throw new Error(`nginx exited with ${child.exitCode}: ${errorLog()}`)
      return new Promise<boolean>((resolve) => {
        const socket = connect(port, '127.0.0.1')
        socket.once('connect', () => resolve(socket.destroy() && true))
        socket.once('error', () => resolve(false))
      })
    },
    { timeoutMs: 10_000 },
  )
  return {
    port,
    origin: `http://127.0.0.1:${port}`,
    errorLog,
    accessLog: () => readFileSync(join(dir, 'access.log'), 'utf8'),
  }
}

interface Answer {
  status: number
  headers: Record<string, string | string[] | undefined>
  body: string
}

/** A client with its own address: its keep-alive connections to nginx are bound to `localAddress`. */
function client(origin: string, localAddress: string) {
  const agent = new Agent({ keepAlive: true, maxSockets: 1, localAddress })
  return (method: string, path: string, headers: Record<string, string> = {}, body?: string) =>
    new Promise<Answer>((resolve, reject) => {
      const req = request(`${origin}${path}`, { method, agent, headers }, (res) => {
        let text = ''
        res.setEncoding('utf8').on('data', (chunk: string) => {
          text += chunk
        })
        res.on('end', () => resolve({ status: res.statusCode as number, headers: res.headers, body: text }))
        res.on('error', reject)
      })
      req.on('error', reject)
      req.end(body)
    })
}

async function deployment(t: TestContext) {
  const ports: [number, number] = [await freePort(), await freePort()]
  const env = {
    DATABASE_URL: await testDatabaseUrl(t),
    TRUST_PROXY,
    LOG_LEVEL: 'info',
    AUTH_FAILURE_LIMIT: String(AUTH_FAILURE_LIMIT),
    RATE_LIMIT: '0',
    EXPERIMENTAL_FEATURES: 'webhooks',
  }
  const key = await cliKey(env)
  const start = (port: number) => startServer(t, { ...env, PORT: String(port) })
  const instances: ServerProcess[] = await Promise.all(ports.map(start))
  const nginx = await startNginx(t, ports)
  return { env, key, ports, start, instances, nginx }
}

const json = (key: string) => ({ authorization: `Bearer ${key}`, 'content-type': 'application/json' })

describe('Behind nginx (deploy/nginx/animal-store.conf), two instances on one PostgreSQL database', {
  skip,
}, () => {
  it('Location and Link carry the public address; the client address reaches the log and the limiter', async (t) => {
    const { key, instances, nginx } = await deployment(t)
    const fromA = client(nginx.origin, '127.0.0.2')
    const fromB = client(nginx.origin, '127.0.0.3')

    // A forwarded scheme or address the client wrote itself is not believed: nginx replaces the
    // one, and the instance takes the hop nginx added to the other.
    const created = await fromA(
      'POST',
      '/v1/pets',
      { ...json(key), 'x-request-id': 'nginx-create', 'x-forwarded-proto': 'https', 'x-forwarded-for': '10.9.9.9' },
      JSON.stringify({ name: 'Rex', categoryId: 1 }),
    )
    assert.equal(created.status, 201, created.body)
    const { id } = JSON.parse(created.body) as { id: number }
    assert.equal(created.headers.location, `${nginx.origin}/v1/pets/${id}`)
    assert.equal(
      (await fromA('POST', '/v1/pets', json(key), JSON.stringify({ name: 'Fido', categoryId: 1 }))).status,
      201,
    )
    // With an Idempotency-Key (nginx's @idempotent location): created once, replayed the second time.
    const keyed = { ...json(key), 'idempotency-key': 'nginx-once' }
    const once = await fromA('POST', '/v1/pets', keyed, JSON.stringify({ name: 'Once', categoryId: 1 }))
    const again = await fromA('POST', '/v1/pets', keyed, JSON.stringify({ name: 'Once', categoryId: 1 }))
    assert.deepEqual([once.status, again.status, again.headers['idempotent-replayed']], [201, 201, 'true'])
    assert.equal(again.body, once.body)
    // A body over the limit is refused by nginx itself, as the API would (413, the Error body).
    const big = await fromA('POST', '/v1/pets', json(key), JSON.stringify({ name: 'x'.repeat(200_000), categoryId: 1 }))
    assert.equal(big.status, 413)
    assert.equal(JSON.parse(big.body).code, 'payload_too_large')
    // Headers up to the API's 16 KiB pass through; past them nginx answers with the Error body too.
    const padded = (bytes: number) => ({ ...json(key), 'x-padding': 'p'.repeat(bytes) })
    assert.equal((await fromA('GET', '/v1/pets?limit=1', padded(12_000))).status, 200)
    const huge = await fromA('GET', '/v1/pets?limit=1', padded(20_000))
    assert.deepEqual([huge.status, JSON.parse(huge.body).code], [431, 'headers_too_large'])
    const longTarget = await fromA('GET', `/v1/pets?limit=1&q=${'q'.repeat(20_000)}`, json(key))
    assert.deepEqual([longTarget.status, JSON.parse(longTarget.body).code], [431, 'headers_too_large'])
    // A request nginx cannot parse (a header line without a colon): 400, with the Error body.
    const raw = await new Promise<string>((resolve, reject) => {
      const socket = connect(nginx.port, '127.0.0.1', () =>
        socket.end('GET /v1/pets HTTP/1.1\r\nHost: x\r\nno colon\r\n\r\n'),
      )
      let text = ''
      socket.setEncoding('utf8').on('data', (chunk: string) => {
        text += chunk
      })
      socket.on('end', () => resolve(text)).on('error', reject)
    })
    assert.match(raw, /^HTTP\/1\.1 400 /)
    assert.equal(JSON.parse(raw.slice(raw.indexOf('\r\n\r\n') + 4)).code, 'bad_request')

    const page = await fromA('GET', '/v1/pets?limit=1', json(key))
    assert.equal(page.status, 200)
    const next = /^<([^>]+)>; rel="next"/.exec(String(page.headers.link))?.[1]
    assert.ok(next?.startsWith(`${nginx.origin}/v1/pets?`), `Link: ${page.headers.link}`)
    const second = await fromA('GET', (next as string).slice(nginx.origin.length), json(key))
    assert.equal(second.status, 200)
    assert.equal((JSON.parse(second.body) as unknown[]).length, 1)

    // The live event stream passes through as it is written: each event at once, not once a buffer fills.
    const beta = { ...json(key), 'animal-store-beta': 'webhooks' }
    const stream = await openStream(`${nginx.origin}/v1/events`, beta)
    try {
      assert.equal(stream.status, 200)
      assert.deepEqual(await stream.next(), { retry: '2000' })
      const sent = await fromB('POST', '/v1/messages', beta, JSON.stringify({ message: 'through nginx' }))
      assert.equal(sent.status, 202, sent.body)
      const event = await nextEvent(stream, 2000)
      assert.equal(event.data.data.id, JSON.parse(sent.body).id)
    } finally {
      stream.close()
    }

    // The request line of whichever instance served the POST names the client, not nginx.
    const line = await Promise.any(
      instances.map((instance) => instance.waitForLog((l) => l.requestId === 'nginx-create')),
    )
    assert.deepEqual(line.req, { method: 'POST', url: '/v1/pets', remoteAddress: '127.0.0.2' })

    // Bad keys count per client address, on each instance (their counters are in memory): nginx
    // alternates, so 127.0.0.2 is refused with 429 on both once it passed the limit on both ...
    const bad = { authorization: `Bearer ${key.slice(0, -4)}${key.endsWith('AAAA') ? 'BBBB' : 'AAAA'}` }
    const statuses: number[] = []
    for (let i = 0; i < 2 * (AUTH_FAILURE_LIMIT + 1); i++) statuses.push((await fromA('GET', '/v1/pets', bad)).status)
    for (let i = 0; i < 2; i++) statuses.push((await fromA('GET', '/v1/pets', bad)).status)
    assert.deepEqual(statuses.slice(-2), [429, 429], `statuses from 127.0.0.2: ${statuses}`)
    assert.ok(statuses.every((s) => s === 401 || s === 429))
    // ... while 127.0.0.3, behind the same nginx, still gets 401 from both.
    const other = [(await fromB('GET', '/v1/pets', bad)).status, (await fromB('GET', '/v1/pets', bad)).status]
    assert.deepEqual(other, [401, 401])
    // And a good key from the blocked address is still served.
    assert.equal((await fromA('GET', '/v1/pets', json(key))).status, 200)
    t.diagnostic(`bad keys from 127.0.0.2: ${statuses.join(' ')}; from 127.0.0.3: ${other.join(' ')}`)

    // With no instance up, nginx's 502 becomes the API's 503, in its Error body.
    await Promise.all(instances.map((instance) => instance.stop()))
    const down = await fromB('GET', '/v1/pets', json(key))
    assert.deepEqual(
      [down.status, JSON.parse(down.body).code, down.headers['retry-after']],
      [503, 'service_unavailable', '5'],
    )
    // A keyed POST goes through @idempotent (one error_page already): the same answer.
    const keyedDown = await fromB('POST', '/v1/pets', { ...json(key), 'idempotency-key': 'down' }, '{}')
    assert.deepEqual([keyedDown.status, JSON.parse(keyedDown.body).code], [503, 'service_unavailable'])
  })

  it('restarting each instance in turn (SIGTERM, start on the same port) under load fails no request (POSTs with an Idempotency-Key)', async (t) => {
    const { env, key, ports, start, instances, nginx } = await deployment(t)
    // Steady load, not saturation: the restarted instance must get a share of two shared cores to start.
    const CLIENTS = 4
    const PAUSE_MS = 10
    let running = true
    let phase = 'before'
    const counts = { get: 0, post: 0, duringRestart: 0 }
    const failures: string[] = []
    const createdIds: number[] = []
    const loops = Array.from({ length: CLIENTS }, async (_, c) => {
      const send = client(nginx.origin, '127.0.0.2')
      for (let i = 0; running; i++) {
        const post = i % 2 === 0
        const what = post ? 'POST /v1/pets' : 'GET /v1/pets?limit=5'
        try {
          // With an Idempotency-Key, as docs/operations.md asks of clients that retry: nginx may then resend
          // a POST reset by a stopping instance (decision 94).
          const idempotent = { ...json(key), 'idempotency-key': randomUUID() }
          const answer = post
            ? await send('POST', '/v1/pets', idempotent, JSON.stringify({ name: `load-${c}-${i}`, categoryId: 1 }))
            : await send('GET', '/v1/pets?limit=5', json(key))
          if (answer.status < 200 || answer.status > 299) {
            failures.push(`${what} (${phase}): ${answer.status} ${answer.body.slice(0, 200)}`)
          } else if (post) {
            createdIds.push((JSON.parse(answer.body) as { id: number }).id)
          }
        } catch (error) {
          failures.push(`${what} (${phase}): ${error}`)
        }
        counts[post ? 'post' : 'get']++
        if (phase !== 'before' && phase !== 'after') counts.duringRestart++
        await pause(PAUSE_MS)
      }
    })

    const served = (instance: ServerProcess) => instance.logs().filter((l) => l.msg === 'request completed').length
    // Both instances serve before anything is restarted.
    for (const instance of instances) {
      await until('serving through nginx', () => served(instance) >= 20).catch((error) => {
        running = false
        throw error
      })
    }
    const restarts: string[] = []
    // However the restarts end, the clients stop (else they would keep the test process alive).
    t.after(() => {
      running = false
    })
    for (const index of [0, 1]) {
      phase = `restarting instance ${index + 1}`
      const began = Date.now()
      assert.equal(await (instances[index] as ServerProcess).stop('SIGTERM'), 0)
      const stoppedMs = Date.now() - began
      const instance = await start(ports[index] as number)
      instances[index] = instance
      // nginx sends it requests again (after its fail_timeout for the instance, 2 s).
      await until(`restarted instance ${index + 1} serving through nginx`, () => served(instance) >= 20, {
        timeoutMs: 15_000,
      })
      restarts.push(`instance ${index + 1}: stopped in ${stoppedMs} ms, serving again after ${Date.now() - began} ms`)
    }
    phase = 'after'
    running = false
    await Promise.all(loops)

    const [row] = (await postgres('SELECT count(*)::int AS n FROM pets', env.DATABASE_URL)) as { n: number }[]
    t.diagnostic(
      `requests=${counts.get + counts.post} (GET ${counts.get}, POST ${counts.post}) ` +
        `during the restarts=${counts.duringRestart} failed=${failures.length} pets=${row?.n}; ${restarts.join('; ')}`,
    )
    const retried = nginx
      .accessLog()
      .split('\n')
      .filter((l) => /upstream=\S*, /.test(l))
    const problems = nginx
      .errorLog()
      .split('\n')
      .filter((l) => /\[(error|warn)\]/.test(l))
    t.diagnostic(`nginx: passed to the other instance=${retried.length}; error log lines=${problems.length}`)
    for (const line of [...retried, ...problems].slice(0, 20)) t.diagnostic(line)
    assert.deepEqual(failures, [])
    // Each acknowledged POST made exactly one pet: none was lost, none was sent twice.
    assert.equal(new Set(createdIds).size, createdIds.length)
    assert.equal(row?.n, createdIds.length)
  })
})
