/**
 * The real process, src/server.ts, on a real port and a real SQLite file: its JSON logs, request
 * ids, probes, refusal of bad configuration and graceful shutdown on SIGTERM/SIGINT.
 * Keys are made with the real CLI (bin/animal-store.ts), as an operator would.
 */
import assert from 'node:assert/strict'
import { execFileSync, spawn } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import net from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { before, describe, it, type TestContext } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { startCommand } from '../scripts/start-command.ts'
import {
  type Cleanup,
  childEnv,
  cliKey,
  type Exit,
  freePort,
  noSignalPending,
  ROOT,
  readByServer,
  runNode,
  runServer,
  type ServerProcess,
  startServer,
  suiteCleanup,
} from './processes.ts'
import { until } from './wait.ts'

/** How many leading characters of a key are public (`as_test_AbCd`); the rest is the secret part. */
const SHOWN = 12
/** The server's default keep-alive timeout (KEEP_ALIVE_TIMEOUT_SECONDS). */
const KEEP_ALIVE_MS = 5000

/** A fresh SQLite file for one test, removed afterwards. */
function newDatabase(t: Cleanup): string {
  const dir = mkdtempSync(join(tmpdir(), 'animal-store-server-'))
  t.after(() => rmSync(dir, { recursive: true, force: true }))
  return `sqlite:${join(dir, 'db.sqlite')}`
}

/** An account and a staging key made through the CLI; returns the key. */
async function opsKey(databaseUrl: string): Promise<string> {
  const secret = await cliKey({ DATABASE_URL: databaseUrl }, 'ops@example.com')
  assert.match(secret, /^as_test_[0-9A-Za-z]{38}$/)
  return secret
}

/**
 * Starts `src/server.ts` at LOG_LEVEL=info and waits for its "Server listening" log line rather
 * than probing it, so that the logs hold only the test's own requests.
 */
async function startLogging(t: Cleanup, env: Record<string, string>): Promise<ServerProcess> {
  const server = await startServer(t, { LOG_LEVEL: 'info', ...env }, { ready: false })
  await server.waitForLog((line) => String(line.msg).startsWith('Server listening'), 20_000)
  return server
}

/** A server on a fresh database, and a key for it made through the CLI. */
async function serverWithKey(t: Cleanup) {
  const databaseUrl = newDatabase(t)
  const secret = await opsKey(databaseUrl)
  const server = await startLogging(t, { DATABASE_URL: databaseUrl })
  return { databaseUrl, secret, server }
}

/** Resolves with the exit, or with null if the process is still running after `ms` (a deadline, not a wait). */
async function exitWithin(server: ServerProcess, ms: number): Promise<Exit | null> {
  const deadline = new AbortController()
  const timeout = sleep(ms, null, { signal: deadline.signal }).catch(() => null)
  return Promise.race([server.exited, timeout]).finally(() => deadline.abort())
}

/** Whether new connections to `port` are refused within `ms` (the listener is closed). */
async function refusesConnections(port: number, ms: number): Promise<boolean> {
  const refused = async () => {
    try {
      const client = await RawClient.connect(port)
      client.socket.destroy()
      return false
    } catch (error) {
      // Refused, or reset when the connection raced the listener closing: either way not accepted.
      const { code } = error as NodeJS.ErrnoException
      if (code === 'ECONNREFUSED' || code === 'ECONNRESET') return true
      throw error
    }
  }
  return until('refusing connections', refused, { timeoutMs: ms }).then(
    () => true,
    (error) => {
      if (String(error.message).startsWith('not refusing')) return false
      throw error
    },
  )
}

/** One raw HTTP/1.1 exchange on a socket we control (for keep-alive and shutdown timing). */
class RawClient {
  socket: net.Socket
  received = ''
  closed: Promise<void>
  isClosed = false
  #waiters = new Set<() => void>()

  private constructor(socket: net.Socket) {
    this.socket = socket
    socket.setEncoding('utf8')
    socket.on('data', (chunk: string) => {
      this.received += chunk
      for (const waiter of this.#waiters) waiter()
    })
    socket.on('error', () => {})
    this.closed = new Promise((resolve) =>
      socket.on('close', () => {
        this.isClosed = true
        for (const waiter of this.#waiters) waiter()
        resolve()
      }),
    )
  }

  static connect(port: number): Promise<RawClient> {
    return new Promise((resolve, reject) => {
      const socket = net.connect(port, '127.0.0.1')
      socket.once('error', reject)
      socket.once('connect', () => resolve(new RawClient(socket)))
    })
  }

  write(text: string): Promise<void> {
    return new Promise((resolve, reject) => this.socket.write(text, (error) => (error ? reject(error) : resolve())))
  }

  /** Waits for the `n`-th complete response (1-based) on this connection and parses it. */
  response(n = 1, ms = 5000): Promise<{ status: number; headers: Record<string, string>; body: string }> {
    return new Promise((resolve, reject) => {
      const check = () => {
        const parsed = parseResponses(this.received)
        if (parsed.length >= n) {
          done()
          return resolve(parsed[n - 1] as { status: number; headers: Record<string, string>; body: string })
        }
        if (this.isClosed) {
          done()
          reject(new Error(`connection closed after ${JSON.stringify(this.received)}`))
        }
      }
      const timer = setTimeout(() => {
        done()
        reject(new Error(`no response ${n} within ${ms} ms: ${JSON.stringify(this.received)}`))
      }, ms)
      const done = () => {
        clearTimeout(timer)
        this.#waiters.delete(check)
      }
      this.#waiters.add(check)
      check()
    })
  }
}

/** Splits complete HTTP/1.1 responses with Content-Length bodies (all this service sends). */
function parseResponses(text: string) {
  const responses = []
  let rest = text
  for (;;) {
    const end = rest.indexOf('\r\n\r\n')
    if (end < 0) break
    const [statusLine, ...headerLines] = rest.slice(0, end).split('\r\n') as [string, ...string[]]
    const headers: Record<string, string> = {}
    for (const line of headerLines) {
      const colon = line.indexOf(':')
      headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim()
    }
    const length = Number(headers['content-length'] ?? 0)
    const bodyBytes = Buffer.from(rest.slice(end + 4))
    if (bodyBytes.length < length) break
    const body = bodyBytes.subarray(0, length).toString()
    responses.push({ status: Number(statusLine.split(' ')[1]), headers, body })
    rest = bodyBytes.subarray(length).toString()
  }
  return responses
}

function postPet(secret: string, body: string, sendBody = body): string {
  return (
    'POST /v1/pets HTTP/1.1\r\nHost: localhost\r\nConnection: keep-alive\r\n' +
    `Authorization: Bearer ${secret}\r\nContent-Type: application/json\r\n` +
    `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${sendBody}`
  )
}

/** Starts the server again on the same database and lists the pets. */
async function petsAfterRestart(t: TestContext, databaseUrl: string, secret: string) {
  const server = await startLogging(t, { DATABASE_URL: databaseUrl })
  const response = await fetch(`${server.url}/v1/pets?limit=100`, { headers: { authorization: `Bearer ${secret}` } })
  assert.equal(response.status, 200)
  const pets = (await response.json()) as { id: number; name: string }[]
  server.child.kill('SIGTERM')
  await server.exited
  return pets
}

/**
 * A POST /v1/pets answered while the server shuts down: it must be a 201; then the client hangs up
 * (so its keep-alive connection does not hold the process), the server exits 0 within 5 s, and
 * the pet is in the database after a restart. Returns the pet.
 */
async function answeredThenStored(
  t: TestContext,
  {
    databaseUrl,
    secret,
    server,
    client,
  }: { databaseUrl: string; secret: string; server: ServerProcess; client: RawClient },
  response: { status: number; body: string },
): Promise<{ id: number; name: string }> {
  assert.equal(response.status, 201, response.body)
  const pet = JSON.parse(response.body)
  client.socket.end()
  const exit = await exitWithin(server, 5000)
  assert.ok(exit, 'still running 5 s after SIGTERM')
  assert.equal(exit.code, 0, exit.stderr)
  assert.deepEqual(await petsAfterRestart(t, databaseUrl, secret), [pet])
  return pet
}

/**
 * A server with a key, and a POST /v1/pets of `pet` whose body has only partly arrived when the
 * server gets SIGTERM; returns once the server has logged that it is shutting down.
 */
async function sigtermWhileBodyArrives(t: TestContext, pet: { name: string; categoryId: number }) {
  const { databaseUrl, secret, server } = await serverWithKey(t)
  const client = await RawClient.connect(server.port)
  const body = JSON.stringify(pet)
  await client.write(postPet(secret, body, body.slice(0, 10)))
  await until('the request read by the server', () => readByServer(server.port, client.socket)) // in flight
  server.child.kill('SIGTERM')
  await server.waitForLog((l) => l.msg === 'shutting down' || l.signal === 'SIGTERM')
  return { databaseUrl, secret, server, client, rest: body.slice(10) }
}

describe('server: request ids and JSON logs', () => {
  // One server for the tests that read only their own requests' lines (found by request id).
  const suite = suiteCleanup()
  const databaseUrl = newDatabase(suite)
  let server: ServerProcess
  before(async () => {
    server = await startLogging(suite, { DATABASE_URL: databaseUrl, DEPLOYMENT: 'production' })
  })

  it('says what it serves once it listens: the deployment, the database, and the portal, reference and document', async () => {
    const serving = await server.waitForLog((l) => l.msg === 'serving')
    assert.deepEqual([serving.deployment, serving.database], ['production', databaseUrl])
    assert.deepEqual(
      [serving.portal, serving.reference, serving.openapi],
      [`${server.url}/portal`, `${server.url}/docs`, `${server.url}/v1/openapi.json`],
    )
    assert.equal(serving.metrics, undefined)
    // Each address opens what it names (the portal leads a signed-out visitor to sign in).
    const portal = await fetch(String(serving.portal), { redirect: 'manual' })
    assert.equal(portal.headers.get('location'), '/portal/sign-in')
    assert.match(await (await fetch(String(serving.reference))).text(), /<title>API reference/)
    const document = (await (await fetch(String(serving.openapi))).json()) as { openapi: string }
    assert.equal(document.openapi, '3.1.0')
  })

  it('names addresses a browser can open when it listens on every interface (HOST=0.0.0.0), and the metrics address when METRICS_PORT is set', async (t) => {
    const other = await startLogging(t, { DATABASE_URL: newDatabase(t), HOST: '0.0.0.0', METRICS_PORT: '0' })
    const serving = await other.waitForLog((l) => l.msg === 'serving')
    // Two ports listen (the API's and the metrics'): the portal's address must open the portal.
    assert.match(String(serving.portal), /^http:\/\/localhost:\d+\/portal$/)
    const portal = await fetch(String(serving.portal), { redirect: 'manual' })
    assert.equal(portal.headers.get('location'), '/portal/sign-in')
    assert.match(String(serving.metrics), /^http:\/\/127\.0\.0\.1:\d+\/metrics$/)
    assert.match(await (await fetch(String(serving.metrics))).text(), /http_requests_total/)
  })

  it('logs JSON lines, one per request with a requestId, and returns that id in X-Request-Id', async () => {
    const response = await fetch(`${server.url}/healthz`)
    assert.equal(response.status, 200)
    const id = response.headers.get('x-request-id')
    assert.ok(id && id.length >= 8, `X-Request-Id is ${id}`)
    const line = await server.waitForLog((l) => l.requestId === id)
    assert.equal((line.req as { url?: string } | undefined)?.url, '/healthz')
    const second = await fetch(`${server.url}/healthz`)
    assert.notEqual(second.headers.get('x-request-id'), id, 'two requests got the same id')
    await server.waitForLog((l) => l.requestId === second.headers.get('x-request-id'))
    for (const log of server.logs()) {
      assert.equal(typeof log.level, 'number')
      assert.equal(typeof log.msg, 'string')
    }
    assert.equal(server.logs().filter((l) => l.requestId === id).length, 1, 'not exactly one log line per request')
    assert.equal(server.stderr(), '')
  })

  it('echoes a client-supplied X-Request-Id (abc-123) and logs under it', async () => {
    const response = await fetch(`${server.url}/healthz`, { headers: { 'x-request-id': 'abc-123' } })
    assert.equal(response.headers.get('x-request-id'), 'abc-123')
    await server.waitForLog((l) => l.requestId === 'abc-123')
  })

  it('replaces an unusable client X-Request-Id (too long or odd characters) with its own', async () => {
    for (const given of ['x'.repeat(200), 'abc 123', 'a"b', '<script>']) {
      const response = await fetch(`${server.url}/healthz`, { headers: { 'x-request-id': given } })
      const id = response.headers.get('x-request-id')
      assert.ok(id && id !== given, `kept ${JSON.stringify(given)}`)
      await server.waitForLog((l) => l.requestId === id)
    }
  })

  it('returns X-Request-Id on errors too (401 without a key)', async () => {
    const response = await fetch(`${server.url}/v1/pets`, { headers: { 'x-request-id': 'err-1' } })
    assert.equal(response.status, 401)
    assert.equal(response.headers.get('x-request-id'), 'err-1')
    await server.waitForLog((l) => l.requestId === 'err-1' && l.status === 401)
  })

  // Last: it stops the suite's server.
  it('writes the log lines still buffered when it stops: the last request and "shutting down"', async () => {
    const id = (await fetch(`${server.url}/healthz`)).headers.get('x-request-id')
    // Stopped at once, well within the 1 s flush interval: only the flush at exit writes these.
    assert.equal(await server.stop('SIGTERM'), 0)
    const logs = server.logs()
    assert.equal(logs.filter((l) => l.requestId === id).length, 1, `no line for request ${id}`)
    assert.ok(
      logs.some((l) => l.msg === 'shutting down'),
      'no "shutting down" line',
    )
  })
})

describe('server: logs never hold API keys', () => {
  const suite = suiteCleanup()
  let secret: string
  let server: ServerProcess
  before(async () => {
    ;({ secret, server } = await serverWithKey(suite))
  })

  /** Sends each request and waits for its log line. */
  async function send(requests: [string, RequestInit][]) {
    const statuses: number[] = []
    for (const [path, init] of requests) {
      const response = await fetch(`${server.url}${path}`, init)
      await response.arrayBuffer()
      statuses.push(response.status)
      await server.waitForLog((l) => l.requestId === response.headers.get('x-request-id') && 'status' in l)
    }
    return statuses
  }

  it('never logs the Authorization header value or the key, even when the key is sent in the query', async () => {
    const auth = { authorization: `Bearer ${secret}` }
    await send([
      ['/v1/pets', { headers: auth }],
      [
        '/v1/pets',
        {
          method: 'POST',
          headers: { ...auth, 'content-type': 'application/json' },
          body: '{"name":"Rex","categoryId":1}',
        },
      ],
      [`/v1/pets?key=${secret}`, { headers: auth }],
      [`/v1/pets?key=${secret}`, {}],
      [`/v1/pets?api_key=${secret}&limit=5`, {}],
      [`/v1/pets?limit=5&access_token=Bearer%20${secret}`, {}],
      ['/v1/pets', { headers: { authorization: secret } }],
      ['/v1/pets', { headers: { authorization: `Bearer ${secret}x` } }],
      ['/v1/pets', { headers: { authorization: `Bearer ${secret.replace('as_test_', 'as_live_')}` } }],
    ])
    // Positive control: the query-string requests were logged, with their URL.
    assert.ok(
      server.logs().some((l) => String((l.req as { url?: string } | undefined)?.url).startsWith('/v1/pets?key=')),
      'the requests with ?key= were not logged',
    )
  })

  it('never logs the key when it is sent in the path or as a JSON field name by mistake', async () => {
    const auth = { authorization: `Bearer ${secret}` }
    const statuses = await send([
      [`/v1/${secret}`, { headers: auth }], // 404: no such route
      [`/${secret}/v1/pets`, {}], // 404
      [`/v1/pets/${secret}`, { headers: auth }], // 400: petId is not an integer
      [`/v1/pets?${secret}=1`, { headers: auth }], // 400: unknown query parameter
      [
        '/v1/pets', // 400: unknown body field
        {
          method: 'POST',
          headers: { ...auth, 'content-type': 'application/json' },
          body: `{"name":"Rex","categoryId":1,"${secret}":1}`,
        },
      ],
      [
        '/v1/pets',
        { method: 'POST', headers: { ...auth, 'content-type': 'application/json' }, body: `{"name":${secret}}` },
      ], // 400: bad JSON
    ])
    assert.deepEqual(statuses, [404, 404, 400, 400, 400, 400])
  })

  // Last: every line the tests above caused, and those written at exit, are in the output.
  it('after those requests, no line of the output holds the key, its secret part or a bearer value', async () => {
    server.child.kill('SIGTERM')
    const { stdout, stderr } = await server.exited
    for (const output of [stdout, stderr]) {
      assert.ok(!output.includes(secret), 'a log line holds the key')
      const leaks = output.split('\n').filter((line) => line.includes(secret.slice(SHOWN)))
      assert.deepEqual(leaks, [], 'log lines hold the secret part of the key')
      assert.ok(!/bearer\s+as_/i.test(output), 'a log line holds an Authorization header value')
    }
  })
})

/** Whether any process of the process group `id` is still running. */
function groupAlive(id: number): boolean {
  try {
    process.kill(-id, 0)
    return true
  } catch {
    return false
  }
}

describe('server: npm start', () => {
  it('`npm start` (the README command) serves, uses the compile cache its script names, and stops on SIGTERM to npm', {
    timeout: 60_000,
  }, async (t) => {
    const port = await freePort()
    const cache = startCommand().env.NODE_COMPILE_CACHE as string
    const env = childEnv({
      PORT: String(port),
      HOST: '127.0.0.1',
      DATABASE_URL: newDatabase(t),
      LOG_LEVEL: 'warn',
      // Node says on stderr where its compile cache is and what it read and wrote there.
      NODE_DEBUG_NATIVE: 'COMPILE_CACHE',
      npm_config_update_notifier: 'false',
    })
    // npm_execpath is npm itself when the tests run under npm. Its own process group, so that npm
    // and everything it started can be killed together if the test fails or is interrupted.
    const npm = process.env.npm_execpath
    const [command, args] = npm ? [process.execPath, [npm, 'start']] : ['npm', ['start']]
    const child = spawn(command, args, { cwd: ROOT, env, detached: true, stdio: ['ignore', 'ignore', 'pipe'] })
    const group = child.pid as number
    const killGroup = () => groupAlive(group) && process.kill(-group, 'SIGKILL')
    process.once('exit', killGroup)
    t.after(() => {
      killGroup()
      process.removeListener('exit', killGroup)
    })
    let stderr = ''
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => {
      stderr += chunk
    })
    const spawned = new Promise<void>((resolve, reject) => {
      child.once('spawn', resolve)
      child.once('error', reject)
    })
    await spawned
    const serves = () =>
      fetch(`http://127.0.0.1:${port}/healthz`).then(
        (response) => response.status === 200,
        () => false,
      )
    await until('`npm start` serving /healthz', serves, { timeoutMs: 20_000, everyMs: 100 }).catch((error) =>
      assert.fail(`${error.message}:\n${stderr}`),
    )
    // As a container runtime or a service manager does: the signal goes to npm alone. The start
    // script execs node, so npm's child is the server itself and the signal reaches it.
    process.kill(group, 'SIGTERM')
    const refused = await refusesConnections(port, 10_000)
    await until('the processes of `npm start` gone', () => !groupAlive(group)).catch(() => {})
    assert.ok(refused, 'the server still accepts connections 10 s after SIGTERM to npm')
    assert.ok(!groupAlive(group), 'a process of `npm start` is still running 10 s after SIGTERM to npm')
    assert.match(stderr, new RegExp(`\\[compile cache\\].*${cache.replaceAll('.', '\\.')}`), stderr.slice(0, 2000))
  })
})

describe('server: memory', () => {
  it("loading the app does not load Node's bundled undici (fetch and web streams), which it never uses", async () => {
    // An ES import of node:http reads its lazy WebSocket export, which loads undici: ~13 MB of RSS.
    const script = "await import('./src/app.ts'); console.log(process.moduleLoadList.filter((m) => /undici/.test(m)))"
    const { code, stdout, stderr } = await runNode(['--input-type=module', '-e', script], {})
    assert.equal(code, 0, stderr)
    assert.equal(stdout.trim(), '[]')
  })
})

describe('server: listening', () => {
  it("keeps up to 4096 connections waiting to be accepted, not Node's 511 (a burst of clients is not dropped)", async (t) => {
    const server = await startLogging(t, { DATABASE_URL: newDatabase(t) })
    const { port } = new URL(server.url)
    // `ss` shows a listening socket's backlog as its Send-Q; the kernel caps it at somaxconn.
    const [, , backlog] = execFileSync('ss', ['-Hltn', `sport = :${port}`], { encoding: 'utf8' })
      .trim()
      .split(/\s+/)
    const cap = Number(readFileSync('/proc/sys/net/core/somaxconn', 'utf8'))
    assert.equal(Number(backlog), Math.min(4096, cap))
  })
})

describe('server: probes', () => {
  it('GET /healthz → 200 and GET /readyz → 200, without a key', async (t) => {
    const server = await startLogging(t, { DATABASE_URL: newDatabase(t) })
    const health = await fetch(`${server.url}/healthz`)
    assert.equal(health.status, 200)
    assert.deepEqual(await health.json(), { status: 'ok' })
    const ready = await fetch(`${server.url}/readyz`)
    assert.equal(ready.status, 200)
    assert.deepEqual(await ready.json(), { status: 'ready', outbox: { depth: 0, oldestAgeSeconds: null } })
  })
})

describe('server: graceful shutdown', () => {
  it('SIGTERM with an idle keep-alive connection open: closes it and exits 0 promptly', async (t) => {
    const server = await startLogging(t, { DATABASE_URL: newDatabase(t) })
    const client = await RawClient.connect(server.port)
    await client.write('GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: keep-alive\r\n\r\n')
    const response = await client.response()
    assert.equal(response.status, 200)
    assert.notEqual(response.headers.connection, 'close')
    const started = Date.now()
    server.child.kill('SIGTERM')
    const exit = await exitWithin(server, 3000)
    assert.ok(exit, 'still running 3 s after SIGTERM')
    assert.equal(exit.code, 0, exit.stderr)
    assert.ok(Date.now() - started < KEEP_ALIVE_MS, 'waited for the keep-alive timeout')
    await client.closed
    assert.equal(exit.stderr, '')
  })

  it('SIGTERM with a connection that has sent nothing and one with half a request: closes both, exits 0 promptly', async (t) => {
    const server = await startLogging(t, { DATABASE_URL: newDatabase(t) })
    const silent = await RawClient.connect(server.port)
    const partial = await RawClient.connect(server.port)
    await partial.write('GET /v1/pets HTTP/1.1\r\nHost: localhost\r\n')
    await until('the partial request read by the server', () => readByServer(server.port, partial.socket))
    server.child.kill('SIGTERM')
    const exit = await exitWithin(server, 3000)
    assert.ok(exit, 'still running 3 s after SIGTERM: a connection without a request held it')
    assert.equal(exit.code, 0, exit.stderr)
    await silent.closed
    await partial.closed
  })

  it('a second SIGTERM or SIGINT during shutdown (a signal to the process group, passed on by npm) does not cut it short', async (t) => {
    const { databaseUrl, secret, server, client, rest } = await sigtermWhileBodyArrives(t, {
      name: 'Twice-Told',
      categoryId: 4,
    })
    server.child.kill('SIGTERM')
    server.child.kill('SIGINT')
    // Both delivered, hence handled no later than the rest of the body is read: before it is answered.
    await until('the signals delivered', () => noSignalPending(server.child.pid as number))
    await client.write(rest)
    const response = await client.response()
    await answeredThenStored(t, { databaseUrl, secret, server, client }, response)
  })

  it('a request on a connection accepted just before SIGTERM, sent after the listener closed, is answered', async (t) => {
    const { databaseUrl, secret, server } = await serverWithKey(t)
    // What nginx does: connect, then send. Here the request comes 500 ms late (a starved proxy or
    // server): the listener has closed by then (200 ms after the signal), and the shutdown once
    // reset such a connection 50 ms later. (Not waiting for the log line: it is written up to 1 s late.)
    const client = await RawClient.connect(server.port)
    server.child.kill('SIGTERM')
    await sleep(500)
    const body = JSON.stringify({ name: 'Late-Comer', categoryId: 2 })
    await client.write(postPet(secret, body))
    const response = await client.response()
    await answeredThenStored(t, { databaseUrl, secret, server, client }, response)
  })

  it('SIGINT also exits 0', async (t) => {
    const server = await startLogging(t, { DATABASE_URL: newDatabase(t) })
    assert.equal((await fetch(`${server.url}/healthz`)).status, 200)
    server.child.kill('SIGINT')
    const exit = await exitWithin(server, 3000)
    assert.ok(exit, 'still running 3 s after SIGINT')
    assert.equal(exit.code, 0, exit.stderr)
    assert.equal(exit.stderr, '')
  })

  it('POSTs /v1/pets sent on new connections just before SIGTERM all get their 201, and every pet is stored', async (t) => {
    // Sent, but maybe not yet accepted or read by the server when the signal comes: closing the
    // listener would reset the first, and the shutdown closes connections that look idle.
    const { databaseUrl, secret, server } = await serverWithKey(t)
    const names = Array.from({ length: 8 }, (_, i) => `Last-Orders-${i}`)
    const clients = await Promise.all(
      names.map(async (name) => {
        const client = await RawClient.connect(server.port)
        await client.write(postPet(secret, JSON.stringify({ name, categoryId: 7 })))
        return client
      }),
    )
    server.child.kill('SIGTERM')
    const settled = await Promise.allSettled(clients.map((client) => client.response()))
    const responses = settled.flatMap((result) => (result.status === 'fulfilled' ? [result.value] : []))
    if (responses.length < clients.length) {
      // Say what each connection got and what the server did, to tell a lost request from a crash.
      const exit = await exitWithin(server, 5000)
      const got = settled.map((result) => (result.status === 'fulfilled' ? result.value.status : result.reason.message))
      assert.fail(`connections got: ${got.join('; ')}\nserver exit: ${JSON.stringify(exit)}\n${server.output()}`)
    }
    for (const response of responses) assert.equal(response.status, 201, response.body)
    for (const client of clients) client.socket.end()
    const exit = await exitWithin(server, 5000)
    assert.ok(exit, 'still running 5 s after SIGTERM')
    assert.equal(exit.code, 0, exit.stderr)
    const stored = await petsAfterRestart(t, databaseUrl, secret)
    assert.deepEqual(stored.map((pet: { name: string }) => pet.name).sort(), names)
  })

  it('a request whose body is still arriving at SIGTERM completes with 201, while new connections are refused', async (t) => {
    const { databaseUrl, secret, server, client, rest } = await sigtermWhileBodyArrives(t, {
      name: 'Slowpoke',
      categoryId: 3,
    })
    assert.ok(await refusesConnections(server.port, 1000), 'still accepting new connections 1 s after SIGTERM')
    await client.write(rest)
    const response = await client.response()
    const pet = await answeredThenStored(t, { databaseUrl, secret, server, client }, response)
    assert.equal(pet.name, 'Slowpoke')
  })

  it('answers a request that was in flight at SIGTERM with Connection: close and exits without waiting for the keep-alive timeout', async (t) => {
    const { server, client, rest } = await sigtermWhileBodyArrives(t, { name: 'Straggler', categoryId: 2 })
    await client.write(rest)
    const response = await client.response()
    assert.equal(response.status, 201, response.body)
    const answered = Date.now()
    // The client keeps its end open, as an idle pooled connection would.
    const exit = await exitWithin(server, 2000)
    assert.ok(
      exit,
      `still running ${Date.now() - answered} ms after answering the last request during shutdown ` +
        `(the response said Connection: ${response.headers.connection}; the idle connection is only closed by the ` +
        `${KEEP_ALIVE_MS / 1000} s keep-alive timeout)`,
    )
    assert.equal(exit.code, 0, exit.stderr)
    assert.equal(response.headers.connection, 'close')
  })
})

describe('server: bad configuration', () => {
  const cases: [string, string, string][] = [
    ['PORT', 'abc', 'a port that is not a number'],
    ['PORT', '70000', 'a port out of range'],
    ['DATABASE_URL', 'mysql://x', 'an unsupported database URL'],
    ['DEPLOYMENT', 'prod', 'an unknown deployment'],
    ['LOG_LEVEL', 'loud', 'an unknown log level'],
    ['TRUST_PROXY', 'maybe', 'a non-boolean TRUST_PROXY'],
  ]
  for (const [name, value, what] of cases) {
    it(`exits non-zero with one line on stderr naming ${name} for ${what} (${name}=${value})`, async (t) => {
      const env: Record<string, string> = { PORT: '0', DATABASE_URL: newDatabase(t) }
      env[name] = value
      const exit = await runServer(env, 10_000)
      assert.notEqual(exit.code, 0)
      assert.equal(exit.signal, null, 'killed by the timeout: the process did not exit by itself')
      assert.equal(exit.stdout, '')
      assert.match(exit.stderr, /^[^\n]+\n$/, `stderr is not one line: ${JSON.stringify(exit.stderr)}`)
      assert.match(exit.stderr, new RegExp(`\\b${name}\\b`))
      assert.ok(exit.stderr.includes(value), `stderr does not show the bad value: ${exit.stderr}`)
    })
  }

  it('exits non-zero, without hanging, when the port is already taken', async (t) => {
    const blocker = net.createServer()
    await new Promise<void>((resolve) => blocker.listen(0, '127.0.0.1', resolve))
    t.after(() => blocker.close())
    const { port } = blocker.address() as net.AddressInfo
    const exit = await runServer({ PORT: String(port), HOST: '127.0.0.1', DATABASE_URL: newDatabase(t) }, 15_000)
    assert.notEqual(exit.code, 0)
    assert.equal(exit.signal, null, 'killed by the timeout: the process did not exit by itself')
    assert.match(`${exit.stdout}${exit.stderr}`, /EADDRINUSE/)
  })
})
