import assert from 'node:assert/strict'
import { connect } from 'node:net'
import { describe, it, type TestContext } from 'node:test'
import { DROPPED_LIMIT, PIPELINE_DEPTH } from '../../src/http/pipelining.ts'
import { build, DATABASE, rawExchange } from '../helper.ts'
import { readByServer } from '../processes.ts'
import { until } from '../wait.ts'

/** `count` requests for /healthz, numbered by their X-Request-Id (r1, r2…), as one write. */
const burst = (count: number, from = 1) =>
  Array.from(
    { length: count },
    (_, i) => `GET /healthz HTTP/1.1\r\nHost: x\r\nX-Request-Id: r${from + i}\r\n\r\n`,
  ).join('')

/** The answers in `received`, in order: status, request id, and whether it closes the connection. */
function answers(received: string) {
  return received
    .split(/(?=HTTP\/1\.1 \d{3} )/)
    .filter(Boolean)
    .map((answer) => ({
      status: Number(answer.slice(9, 12)),
      id: /\r\nx-request-id: (\S+)\r\n/i.exec(answer)?.[1],
      closes: /\r\nconnection: close\r\n/i.test(answer),
    }))
}

/**
 * The app on a real port. With `slow`, it also has GET /slow, answered once the test calls
 * `answerSlow()`, and counts the requests Node parses, served or not. `closed` resolves when the
 * first connection closes.
 */
async function listening(t: TestContext, { slow = false, env = {} as Record<string, string> } = {}) {
  const parsed = { count: 0 }
  let answerSlow = () => {}
  const slowAnswered = new Promise<void>((resolve) => (answerSlow = resolve))
  t.after(answerSlow)
  let firstClosed: () => void = () => {}
  const closed = new Promise<void>((resolve) => (firstClosed = resolve))
  const test = await build(t, env, {
    setup: (app) => {
      app.server.once('connection', (socket) => socket.once('close', firstClosed))
      if (!slow) return
      app.get('/slow', async () => {
        await slowAnswered
        return { ok: true }
      })
      app.server.on('request', () => parsed.count++)
    },
  })
  await test.app.listen({ port: 0, host: '127.0.0.1' })
  const { port } = test.app.server.address() as { port: number }
  const connections = () =>
    new Promise<number>((resolve) => test.app.server.getConnections((_, count) => resolve(count)))
  return { port, parsed, connections, answerSlow, closed }
}

describe(`Pipelining (${DATABASE})`, () => {
  it(`serves ${PIPELINE_DEPTH} requests waiting behind an answer, in order, and keeps the connection`, async (t) => {
    const { port } = await listening(t)
    // The first is answered at once, the other PIPELINE_DEPTH wait; then one more, sent later on the same connection.
    const received = await rawExchange(port, [burst(PIPELINE_DEPTH + 1), burst(1, PIPELINE_DEPTH + 2)], 'read', {
      halfClose: true,
    })
    const got = answers(received)
    assert.deepEqual(
      got.map(({ id }) => id),
      Array.from({ length: PIPELINE_DEPTH + 2 }, (_, i) => `r${i + 1}`),
    )
    assert.ok(got.every(({ status }) => status === 200))
    assert.ok(
      got.slice(0, -1).every(({ closes }) => !closes),
      'no answer before the last closes the connection',
    )
  })

  it('past that, serves none of the rest and closes the connection after the answers under way', async (t) => {
    const { port } = await listening(t)
    // Ends its side after writing, so that a server serving all 100 would close too, not hang the test.
    const received = await rawExchange(port, [burst(100)], 0, { halfClose: true })
    const got = answers(received)
    assert.deepEqual(
      got.map(({ id }) => id),
      Array.from({ length: PIPELINE_DEPTH + 1 }, (_, i) => `r${i + 1}`),
    )
    assert.ok(got.every(({ status }) => status === 200))
    assert.equal(got.at(-1)?.closes, true, 'the last answer says Connection: close')
    // The server is unharmed: a new connection is served.
    assert.equal((await fetch(`http://127.0.0.1:${port}/healthz`)).status, 200)
  })

  /** A client that keeps its side open, so that only the server can end the connection. */
  async function openClient(port: number) {
    const socket = connect({ port, host: '127.0.0.1', allowHalfOpen: true })
    let ended = () => {}
    const client = { socket, received: '', ended: '', done: new Promise<void>((resolve) => (ended = resolve)) }
    socket.on('data', (data) => {
      client.received += data
    })
    socket.on('end', () => {
      client.ended ||= 'end'
      ended()
    })
    socket.on('error', (error) => {
      client.ended ||= String(error)
      ended()
    })
    await new Promise((resolve) => socket.on('connect', resolve))
    return client
  }

  it('past that, when the answers under way are slow, closes after them without a reset, and lets the connection go', async (t) => {
    const { port, connections, answerSlow, closed } = await listening(t, {
      slow: true,
      env: { LINGERING_TIMEOUT_SECONDS: '1' },
    })
    const client = await openClient(port)
    // A slow request and PIPELINE_DEPTH behind it; the next ones, in a later read, pass the limit.
    client.socket.write(`GET /slow HTTP/1.1\r\nHost: x\r\n\r\n${burst(PIPELINE_DEPTH, 2)}`)
    await until('the first requests read', () => readByServer(port, client.socket))
    client.socket.write(burst(100, PIPELINE_DEPTH + 2))
    await until('the requests past the limit read', () => readByServer(port, client.socket))
    assert.equal(client.ended, '', 'the server ended the connection before answering the slow request')
    answerSlow()
    await client.done
    // Every answer under way arrived, then the server's end of the connection, not a reset.
    assert.equal(client.ended, 'end')
    assert.equal(answers(client.received).length, PIPELINE_DEPTH + 1)
    assert.equal(await connections(), 1, 'lingering: the client has not ended its side')
    // The client sends nothing more: the connection goes once LINGERING_TIMEOUT_SECONDS have passed without a byte.
    const since = Date.now()
    await closed
    assert.ok(Date.now() - since < 1500, `let go ${Date.now() - since} ms later`)
    assert.equal(await connections(), 0)
    client.socket.destroy()
  })

  it(`reads nothing more of a connection that sends over ${DROPPED_LIMIT} requests past the limit`, async (t) => {
    const { port, parsed } = await listening(t, { slow: true })
    const client = await openClient(port)
    client.socket.write(`GET /slow HTTP/1.1\r\nHost: x\r\n\r\n${burst(PIPELINE_DEPTH + 1, 2)}`)
    const read = () =>
      until('the last write read', () => readByServer(port, client.socket), { timeoutMs: 1000 }).then(
        () => true,
        () => false,
      )
    // Each write a read of its own while the server reads; once it stops reading, the rest stays unread.
    for (let i = 0; i < 10 && (await read()); i++) client.socket.write(burst(500, 1000 + i * 500))
    await read()
    // Node parses the rest of the read that passes DROPPED_LIMIT (up to 64 KiB), and then no more.
    assert.ok(parsed.count < 2500, `the server parsed ${parsed.count} of 5,066 requests: it went on reading`)
    client.socket.destroy()
  })

  it('answers a malformed request after the pipelined ones before it, in order', async (t) => {
    const { port } = await listening(t)
    const received = await rawExchange(port, [`${burst(3)}GARBAGE\r\n\r\n`], 0, { halfClose: true })
    const got = answers(received)
    assert.deepEqual(
      got.map(({ status, id }) => (status === 200 ? `${status} ${id}` : `${status}`)),
      ['200 r1', '200 r2', '200 r3', '400'],
    )
  })
})
