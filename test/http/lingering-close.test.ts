/**
 * Closing in stages (RFC 9112 §9.6): an answer that ends a connection while the client's body is
 * still arriving reaches the client, and the lingering that makes it so is bounded.
 */
import assert from 'node:assert/strict'
import type { ChildProcess } from 'node:child_process'
import { EventEmitter, once } from 'node:events'
import { request } from 'node:http'
import { connect, type Socket } from 'node:net'
import { describe, it, type TestContext } from 'node:test'
import { bearer, build, DATABASE, testDatabaseUrl } from '../helper.ts'
import { cliKey, spawnNode, startServer } from '../processes.ts'

// One database: the wire's guards answer before any route reaches the store.

const MiB = 1024 * 1024

/** A process that keeps one core busy until killed; resolves once it spins. */
async function spinner(t: TestContext): Promise<ChildProcess> {
  const { child, output } = spawnNode(['-e', "process.stdout.write('spinning\\n'); for (;;);"], {})
  t.after(() => child.kill('SIGKILL'))
  await new Promise<void>((resolve, reject) => {
    child.once('error', reject)
    child.stdout.on('data', () => {
      if (output.stdout.includes('spinning')) resolve()
    })
  })
  return child
}

/**
 * The app on a real port (0: the kernel picks one), the bytes each connection read, once closed,
 * and `closes`, which emits 'close' as the server closes each.
 */
async function listening(t: TestContext, env: Record<string, string> = {}) {
  const test = await build(t, env)
  const bytesRead: number[] = []
  const closes = new EventEmitter()
  test.app.server.on('connection', (socket: Socket) =>
    socket.once('close', () => {
      bytesRead.push(socket.bytesRead)
      closes.emit('close')
    }),
  )
  await test.app.listen({ port: 0, host: '127.0.0.1' })
  const { port } = test.app.server.address() as { port: number }
  return { ...test, port, bytesRead, closes }
}

interface Uploader {
  socket: Socket
  received: string
  /** When the server ended its side (its answer is all in `received` by then). */
  ended: Promise<number>
  /** When the connection was cut off (the client's next write failed), or closed. */
  cut: Promise<number>
}

/**
 * A client that sends `head` and then never stops sending, `chunk` every `everyMs` (0: as fast as the
 * connection takes it), whatever it is answered: only the server can end the connection.
 */
function endlessUploader(port: number, head: string, chunk: Buffer, everyMs = 0): Uploader {
  const socket = connect({ port, host: '127.0.0.1', allowHalfOpen: true })
  const uploader = { socket, received: '' } as Uploader
  socket.on('data', (data) => {
    uploader.received += data
  })
  uploader.ended = new Promise((resolve) => socket.once('end', () => resolve(Date.now())))
  uploader.cut = new Promise((resolve) => socket.once('close', () => resolve(Date.now())))
  socket.on('error', () => {})
  socket.once('connect', () => {
    socket.write(head)
    if (everyMs > 0) {
      const timer = setInterval(() => socket.write(chunk), everyMs)
      socket.once('close', () => clearInterval(timer))
      return
    }
    const send = () => {
      while (!socket.destroyed && socket.write(chunk));
    }
    socket.on('drain', send)
    send()
  })
  return uploader
}

const postHead = (path: string, headers: Record<string, string>) =>
  `POST ${path} HTTP/1.1\r\nHost: x\r\n${Object.entries(headers)
    .map(([name, value]) => `${name}: ${value}\r\n`)
    .join('')}\r\n`

/** A 1 GiB JSON upload to /v1/pets with the key: refused 413 from its Content-Length. */
const tooLarge = (secret: string) =>
  postHead('/v1/pets', { ...bearer(secret), 'content-type': 'application/json', 'content-length': String(1024 * MiB) })

/** Resolves when the server refuses a connection over MAX_CONNECTIONS ('drop'), and the client sees it closed. */
async function dropped(server: import('node:http').Server, port: number): Promise<string> {
  const drop = new Promise((resolve) => server.once('drop', resolve))
  const socket = connect(port, '127.0.0.1', () => socket.write('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n'))
  let received = ''
  socket.on('data', (data) => {
    received += data
  })
  socket.on('error', () => {})
  await Promise.all([drop, new Promise((resolve) => socket.once('close', resolve))])
  return received
}

interface Outcome {
  status?: number
  body?: string
  /** What the client got instead of a whole answer (a reset, a broken pipe). */
  error?: string
}

/**
 * POSTs `body` with Node's own HTTP client, which goes on uploading after the answer has come:
 * with Content-Length (413 from the header), or chunked (413 once the limit is passed).
 */
function upload(port: number, path: string, secret: string, body: Buffer, chunked: boolean): Promise<Outcome> {
  return new Promise((resolve) => {
    const headers: Record<string, string> = { ...bearer(secret), 'content-type': 'application/json' }
    if (!chunked) headers['content-length'] = String(body.length)
    const req = request({ host: '127.0.0.1', port, method: 'POST', path, headers, agent: false })
    let settled = false
    const settle = (outcome: Outcome) => {
      if (settled) return
      settled = true
      resolve(outcome)
    }
    req.on('response', (res) => {
      let text = ''
      res.setEncoding('utf8')
      res.on('data', (chunk: string) => {
        text += chunk
      })
      res.on('end', () => settle({ status: res.statusCode, body: text }))
      res.on('error', (error) => settle({ status: res.statusCode, error: String(error) }))
    })
    req.on('error', (error) => settle({ error: (error as NodeJS.ErrnoException).code ?? String(error) }))
    if (chunked) {
      for (let at = 0; at < body.length; at += MiB) req.write(body.subarray(at, at + MiB))
      req.end()
    } else req.end(body)
  })
}

describe(`Closing in stages (${DATABASE})`, () => {
  /** Per path, alternately with Content-Length and chunked. */
  const UPLOADS = 20
  it('a 20 MiB body to POST /v1/pets and /v1/messages, 20 times each, beside two busy cores: a 413 Error every time', {
    timeout: 240_000,
  }, async (t) => {
    // The service in a process of its own, as deployed: a client in the same event loop would
    // read each answer before the server's close could reset it.
    const env = { DATABASE_URL: await testDatabaseUrl(t) }
    const secret = await cliKey(env)
    const { port } = await startServer(t, env)
    await Promise.all([spinner(t), spinner(t)])
    const body = Buffer.alloc(20 * MiB, 'a')
    const failures: string[] = []
    let answered = 0
    for (const path of ['/v1/pets', '/v1/messages']) {
      for (let i = 0; i < UPLOADS; i++) {
        const outcome = await upload(port, path, secret, body, i % 2 === 1)
        const error = outcome.body ? JSON.parse(outcome.body) : undefined
        if (outcome.status === 413 && error?.code === 'payload_too_large' && error.status === 413) answered++
        else failures.push(`${path} #${i} (${i % 2 ? 'chunked' : 'Content-Length'}): ${JSON.stringify(outcome)}`)
      }
    }
    t.diagnostic(`${answered} of ${2 * UPLOADS} uploads read their 413`)
    assert.deepEqual(
      failures,
      [],
      `${answered} of ${2 * UPLOADS} uploads read their 413; the others:\n${failures.join('\n')}`,
    )
  })
})

describe(`Closing in stages: the bounds (${DATABASE})`, () => {
  it('an uploader that never stops is cut off after LINGERING_TIME_SECONDS, holding its place under MAX_CONNECTIONS meanwhile', async (t) => {
    const { app, port, newKey } = await listening(t, { LINGERING_TIME_SECONDS: '1', MAX_CONNECTIONS: '1' })
    const { secret } = await newKey()
    // 64 KiB every 10 ms: about 6 MB a second, well under LINGERING_BYTES.
    const uploader = endlessUploader(port, tooLarge(secret), Buffer.alloc(64 * 1024, 'a'), 10)
    const ended = await uploader.ended
    assert.match(uploader.received, /^HTTP\/1.1 413 [\s\S]*"code":"payload_too_large"/)
    // Lingering, it still counts: a second connection is over the cap, and closed unanswered.
    assert.equal(await dropped(app.server, port), '')
    const cut = await uploader.cut
    assert.ok(cut - ended >= 900 && cut - ended < 2500, `cut off ${cut - ended} ms after the answer`)
    // Its place is free again.
    assert.equal((await fetch(`http://127.0.0.1:${port}/healthz`)).status, 200)
  })

  it('an uploader faster than the time bound is cut off after LINGERING_BYTES', async (t) => {
    const { port, newKey, bytesRead } = await listening(t, { LINGERING_BYTES: String(MiB) })
    const { secret } = await newKey()
    const uploader = endlessUploader(port, tooLarge(secret), Buffer.alloc(64 * 1024, 'a'))
    const ended = await uploader.ended
    assert.match(uploader.received, /^HTTP\/1.1 413 /)
    const cut = await uploader.cut
    assert.ok(cut - ended < 5000, `cut off ${cut - ended} ms after the answer, not by LINGERING_BYTES`)
    // What it read before the answer was written, the bound, and one read past it.
    assert.equal(bytesRead.length, 1)
    assert.ok((bytesRead[0] as number) < 3 * MiB, `read ${bytesRead[0]} bytes`)
  })

  it('a client that stops sending without ending its side is let go after LINGERING_TIMEOUT_SECONDS', async (t) => {
    const { port, newKey, closes } = await listening(t, { LINGERING_TIMEOUT_SECONDS: '1' })
    const { secret } = await newKey()
    const socket = connect({ port, host: '127.0.0.1', allowHalfOpen: true })
    t.after(() => socket.destroy())
    socket.on('error', () => {})
    socket.write(`${tooLarge(secret)}${'a'.repeat(1000)}`)
    socket.resume()
    await once(socket, 'end')
    const ended = Date.now()
    // Our side stays open, and silent: only the server's side shows when it lets go.
    await once(closes, 'close')
    const closed = Date.now()
    assert.ok(closed - ended >= 900 && closed - ended < 2500, `let go ${closed - ended} ms after the answer`)
  })

  it('401 before the body, 415, and 400 on a malformed chunked body are answered in full, and the connection lingers', async (t) => {
    const { port, newKey } = await listening(t, { LINGERING_TIME_SECONDS: '1' })
    const { secret } = await newKey()
    const json = { 'content-type': 'application/json', 'transfer-encoding': 'chunked' }
    const cases = [
      [401, postHead('/v1/pets', { ...json, authorization: 'Bearer nope' }), '10000\r\n'],
      [415, postHead('/v1/pets', { ...bearer(secret), ...json, 'content-encoding': 'gzip' }), '10000\r\n'],
      // A chunk size that is not hexadecimal: the framing breaks while the body arrives.
      [400, postHead('/v1/pets', { ...bearer(secret), ...json }), '1\r\n{\r\nzz\r\n'],
    ] as const
    for (const [status, head, start] of cases) {
      const uploader = endlessUploader(port, `${head}${start}`, Buffer.alloc(16 * 1024, 'a'), 10)
      const ended = await uploader.ended
      assert.match(uploader.received, new RegExp(`^HTTP/1.1 ${status} [\\s\\S]*"status":${status}}$`))
      const cut = await uploader.cut
      assert.ok(cut - ended >= 900, `${status}: cut off ${cut - ended} ms after the answer, without lingering`)
    }
  })

  it('a shutdown waits for a lingering connection, but at most half its SHUTDOWN_TIMEOUT_SECONDS', async (t) => {
    const { app, port, newKey } = await listening(t, { SHUTDOWN_TIMEOUT_SECONDS: '2' })
    const { secret } = await newKey()
    const uploader = endlessUploader(port, tooLarge(secret), Buffer.alloc(64 * 1024, 'a'), 10)
    await uploader.ended
    const started = Date.now()
    await app.close()
    const closedIn = Date.now() - started
    assert.ok(closedIn >= 900 && closedIn < 2000, `app.close() took ${closedIn} ms`)
    assert.ok((await uploader.cut) - started < 2000)
  })
})
