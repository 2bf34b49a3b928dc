import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { PIPELINE_DEPTH } from '../src/pipelining.ts'
import { build, DATABASE, rawExchange } from './helper.ts'

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

describe(`Pipelining (${DATABASE})`, () => {
  it(`serves ${PIPELINE_DEPTH} requests waiting behind an answer, in order, and keeps the connection`, async (t) => {
    const test = await build(t)
    await test.app.listen({ port: 0, host: '127.0.0.1' })
    const port = (test.app.server.address() as { port: number }).port
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
    const test = await build(t)
    await test.app.listen({ port: 0, host: '127.0.0.1' })
    const port = (test.app.server.address() as { port: number }).port
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
})
