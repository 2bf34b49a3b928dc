import assert from 'node:assert/strict'
import { connect } from 'node:net'
import { describe, it, type TestContext } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { DROPPED_LIMIT, LINGER_MS, PIPELINE_DEPTH } from '../../src/http/pipelining.ts'
import { build, DATABASE, rawExchange } from '../helper.ts'

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
 * The app on a real port. With `slow`, it also has GET /slow, answered after 400 ms, and counts
 * the requests Node parses, served or not.
 */
async function listening(t: TestContext, { slow = false } = {}) {
  const parsed = { count: 0 }
  const test = await build(
    t,
    {},
    {
      setup: (app) => {
        if (!slow) return
        app.get('/slow', async () => {
          await sleep(400)
          return { ok: true }
        })
        app.server.on('request', () => parsed.count++)
      },
    },
  )
  await test.app.listen({ port: 0, host: '127.0.0.1' })
  const { port } = test.app.server.address() as { port: number }
  const connections = () =>
    new Promise<number>((resolve) => test.app.server.getConnections((_, count) => resolve(count)))
  return { port, parsed, connections }
}

describe(`Pipelining (${DATABASE})`, () => {
  it(`serves ${PIPELINE_DEPTH} requests waiting behind an answer, in order, and keeps the connection`, async (t) => {
    const { port } = await listening(t)
    // The first is answered at once, the other PIPELINE_DEPTH wait; then one more, sent later on the same connection.
    const received = await rawExchange(port, [burst(PIPELINE_DEPTH + 1), burst(1, PIPELINE_DEPTH + 2)], 300, {
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
    const client = { socket, received: '', ended: '' }
    socket.on('data', (data) => {
      client.received += data
    })
    socket.on('end', () => {
      client.ended ||= 'end'
    })
    socket.on('error', (error) => {
      client.ended ||= String(error)
    })
    await new Promise((resolve) => socket.on('connect', resolve))
    return client
  }

  it('past that, when the answers under way are slow, closes after them without a reset, and lets the connection go', async (t) => {
    const { port, connections } = await listening(t, { slow: true })
    const client = await openClient(port)
    // A slow request and PIPELINE_DEPTH behind it; the next ones, in later reads, pass the limit.
    client.socket.write(`GET /slow HTTP/1.1\r\nHost: x\r\n\r\n${burst(PIPELINE_DEPTH, 2)}`)
    await sleep(50)
    client.socket.write(burst(100, PIPELINE_DEPTH + 2))
    await sleep(800)
    // Every answer under way arrived, then the server's end of the connection, not a reset.
    assert.equal(client.ended, 'end')
    assert.equal(answers(client.received).length, PIPELINE_DEPTH + 1)
    assert.equal(await connections(), 1, 'lingering: the client has not ended its side')
    await sleep(LINGER_MS)
    assert.equal(await connections(), 0, 'the connection is let go after LINGER_MS')
    client.socket.destroy()
  })

  it(`reads nothing more of a connection that sends over ${DROPPED_LIMIT} requests past the limit`, async (t) => {
    const { port, parsed } = await listening(t, { slow: true })
    const client = await openClient(port)
    client.socket.write(`GET /slow HTTP/1.1\r\nHost: x\r\n\r\n${burst(PIPELINE_DEPTH + 1, 2)}`)
    for (let i = 0; i < 10; i++) {
      await sleep(20)
      client.socket.write(burst(500, 1000 + i * 500))
    }
    await sleep(600)
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
