import assert from 'node:assert/strict'
import { connect } from 'node:net'
import { describe, it } from 'node:test'
import { bearer, build, errorBody, rawExchange, suiteApp, type TestApp } from '../helper.ts'

// One database: the wire's guards answer before any route reaches the store.

/** Posts raw bytes to an operation with a valid key. */
async function post(test: TestApp, secret: string, url: string, payload: string | Buffer, headers = {}) {
  return test.app.inject({
    method: 'POST',
    url,
    headers: { ...bearer(secret), 'content-type': 'application/json', ...headers },
    payload,
  })
}

/**
 * What the server answered, and whether it closed the connection within 3 s; with `halfClose`
 * the client ends its side after the request (then the server closes after its answer).
 */
async function exchange(port: number, head: string, { halfClose = false } = {}) {
  let timer: NodeJS.Timeout | undefined
  const late = new Promise<{ answer: string; closed: boolean }>((resolve) => {
    timer = setTimeout(() => resolve({ answer: '', closed: false }), 3000)
  })
  try {
    return await Promise.race([
      rawExchange(port, [head], 0, { halfClose }).then((answer) => ({ answer, closed: true })),
      late,
    ])
  } finally {
    // Else the deadline of an exchange long over keeps the test process alive until it passes.
    clearTimeout(timer)
  }
}

describe('Request bodies: JSON in UTF-8, taken as sent (point 2)', () => {
  // Pets are global to the store: the tests that store nothing share an app, whose store stays empty
  // (one of them finds no pet); those that store pets have their own.
  const empty = suiteApp()

  it('bytes that are not UTF-8 are 400 invalid_json, never stored as U+FFFD', async () => {
    const test = await empty()
    const { secret, accountId } = await test.newKey()
    for (const bytes of [[0xc3], [0xff, 0xfe], [0xed, 0xa0, 0x80], [0xc0, 0xaf]]) {
      for (const [url, before, after] of [
        ['/v1/pets', '{"name":"', '","categoryId":1}'],
        ['/v1/messages', '{"message":"', '"}'],
      ] as const) {
        const payload = Buffer.concat([Buffer.from(before), Buffer.from(bytes), Buffer.from(after)])
        const response = await post(test, secret, url, payload)
        assert.equal(response.statusCode, 400, `${url} ${bytes}`)
        assert.deepEqual(errorBody(response), {
          code: 'invalid_json',
          message: 'The request body is not valid UTF-8.',
          status: 400,
        })
      }
    }
    assert.deepEqual((await test.app.inject({ url: '/v1/pets', headers: bearer(secret) })).json(), [])
    assert.equal((await test.app.store.listMessages({ accountId: accountId, limit: 10 })).messages.length, 0)
  })

  it('escapes of lone surrogates are 400 invalid_json; a surrogate pair (an emoji) is kept exactly', async (t) => {
    const test = await build(t)
    const { secret } = await test.newKey()
    for (const name of ['\\ud800', 'a\\udfffb', '\\ude00\\ud83d']) {
      const response = await post(test, secret, '/v1/pets', `{"name":"${name}","categoryId":1}`)
      assert.equal(response.statusCode, 400, name)
      assert.equal(errorBody(response).code, 'invalid_json')
    }
    const keyed = await post(test, secret, '/v1/messages', '{"message":"hi","\\udc00":1}')
    assert.equal(keyed.statusCode, 400)
    const emoji = await post(test, secret, '/v1/pets', '{"name":"Rex \\ud83d\\ude00","categoryId":1}')
    assert.equal(emoji.statusCode, 201)
    assert.equal(emoji.json().name, 'Rex 😀')
  })

  it('a charset other than UTF-8, or any Content-Encoding, is 415: the body would be misread', async (t) => {
    const test = await build(t)
    const { secret } = await test.newKey()
    const body = '{"name":"Rex","categoryId":1}'
    for (const type of [
      'application/json; charset=latin1',
      'application/json; charset=utf-16',
      'application/json;charset="iso-8859-1"',
      'application/json; Charset=LATIN1',
      // Two charsets, of which a parser might keep either; a quote left open.
      'application/json; charset=utf-8; charset=latin1',
      'application/json; charset=latin1; charset=utf-8',
      'application/json; charset="utf-8',
    ]) {
      const response = await post(test, secret, '/v1/pets', body, { 'content-type': type })
      assert.equal(response.statusCode, 415, type)
      assert.equal(errorBody(response).code, 'unsupported_media_type')
    }
    for (const encoding of ['gzip', 'br', 'deflate', 'identity, gzip']) {
      const response = await post(test, secret, '/v1/pets', body, { 'content-encoding': encoding })
      assert.equal(response.statusCode, 415, encoding)
      assert.equal(errorBody(response).code, 'unsupported_media_type')
      assert.equal(response.headers['accept-encoding'], 'identity')
    }
    assert.deepEqual((await test.app.inject({ url: '/v1/pets', headers: bearer(secret) })).json(), [])
    for (const headers of [
      { 'content-type': 'application/json; charset=UTF-8' },
      { 'content-type': 'application/json; charset="utf-8"' },
      { 'content-encoding': 'identity' },
      // Sent twice, Node joins the two: still no coding.
      { 'content-encoding': 'identity, Identity' },
    ]) {
      assert.equal((await post(test, secret, '/v1/pets', body, headers)).statusCode, 201, JSON.stringify(headers))
    }
  })

  it('a deeply nested body is judged by the schema, not refused as "not JSON" (the Unicode check does not recurse)', async () => {
    const test = await empty()
    const { secret } = await test.newKey()
    const deep = `${'['.repeat(20_000)}${']'.repeat(20_000)}`
    const response = await post(test, secret, '/v1/pets', `{"name":"Rex \\ud83d\\ude00","categoryId":1,"x":${deep}}`)
    assert.equal(response.statusCode, 400)
    assert.equal(errorBody(response).code, 'validation_failed')
  })

  it('REQUEST_TIMEOUT_SECONDS=0 means no body deadline: a body that arrives in pieces is taken', async (t) => {
    const test = await build(t, { REQUEST_TIMEOUT_SECONDS: '0' })
    const { secret } = await test.newKey()
    await test.app.listen({ port: 0, host: '127.0.0.1' })
    const { port } = test.app.server.address() as { port: number }
    const body = '{"name":"Rex","categoryId":1}'
    const head = `POST /v1/pets HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${secret}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n`
    const answer = await rawExchange(port, [head, body.slice(0, 5), body.slice(5)], 'read')
    assert.match(answer, /^HTTP\/1.1 201 /)
  })
})

describe('Requests without a body (point 2)', () => {
  it('are answered when they name a Content-Type, though Node ends their stream without an event', async (t) => {
    const test = await build(t)
    const { secret } = await test.newKey()
    await test.app.listen({ port: 0, host: '127.0.0.1' })
    const { port } = test.app.server.address() as { port: number }
    // What `curl -X POST -H 'Content-Type: …' URL` sends: no Content-Length, no Transfer-Encoding.
    for (const [head, status] of [
      [
        `POST /v1/pets HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer ${secret}\r\nContent-Type: application/json\r\n\r\n`,
        400,
      ],
      ['POST /portal/sign-up HTTP/1.1\r\nHost: a\r\nContent-Type: application/x-www-form-urlencoded\r\n\r\n', 403],
    ] as const) {
      const { answer, closed } = await exchange(port, head, { halfClose: true })
      const line = head.slice(0, head.indexOf('\r\n'))
      assert.ok(closed, `${line}: no answer within 3 s`)
      assert.match(answer, new RegExp(`^HTTP/1.1 ${status} `), line)
    }
  })
})

describe('Operations that read no body', () => {
  it('refuse one that holds anything (400 validation_failed); none, or {}, is taken', async (t) => {
    const test = await build(t)
    const { secret, accountId } = await test.newKey()
    const pet = await test.app.store.createPet({ name: 'Rex', categoryId: 1 })
    const headers = { 'animal-store-beta': 'orders' }
    const placed = await post(test, secret, '/v1/store/orders', JSON.stringify({ petId: pet.id }), headers)
    assert.equal(placed.statusCode, 201, placed.body)
    const cancel = `/v1/store/orders/${placed.json().id}/cancel`
    for (const payload of ['{"reason":"changed my mind"}', '[]', 'null', '1']) {
      const refused = await post(test, secret, cancel, payload, headers)
      assert.equal(refused.statusCode, 400, payload)
      assert.equal(errorBody(refused).code, 'validation_failed')
      assert.match(errorBody(refused).message, /takes no body/)
    }
    // Nothing was canceled by the refused requests.
    assert.equal((await test.app.store.getOrder(accountId, placed.json().id))?.status, 'placed')
    assert.equal((await post(test, secret, cancel, '{}', headers)).statusCode, 200)
    const again = await test.app.inject({ method: 'POST', url: cancel, headers: { ...bearer(secret), ...headers } })
    assert.equal(again.statusCode, 200)
    assert.equal(again.json().status, 'canceled')
  })
})

describe('Bodies nobody reads are not drained (point 2)', () => {
  it('a GET with a body, or a request refused before its body arrived, ends its connection with the answer', async (t) => {
    const test = await build(t)
    await test.app.listen({ port: 0, host: '127.0.0.1' })
    const { port } = test.app.server.address() as { port: number }
    // A chunked body that never ends, and a body far longer than what follows it.
    const chunk = `10\r\n${'x'.repeat(16)}\r\n`
    for (const [head, status] of [
      [`GET /healthz HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n${chunk}`, 200],
      [`GET /v1/openapi.json HTTP/1.1\r\nHost: a\r\nContent-Length: 200000000\r\n\r\nxxxx`, 200],
      [
        `POST /v1/pets HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\nContent-Length: 200000000\r\n\r\n{"na`,
        401,
      ],
      [`POST /v1/nowhere HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n${chunk}`, 401],
    ] as const) {
      const { answer, closed } = await exchange(port, head)
      const line = head.slice(0, head.indexOf('\r\n'))
      assert.ok(closed, `${line}: the connection stayed open, draining the body`)
      assert.match(answer, new RegExp(`^HTTP/1.1 ${status} `), line)
      assert.match(answer, /\r\nconnection: close\r\n/i, line)
    }
    // A GET without a body keeps its connection: once it is answered, a second request on it is too.
    const kept = await new Promise<string>((resolve) => {
      const socket = connect(port, '127.0.0.1', () => socket.write('GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n'))
      let received = ''
      socket.on('data', (data) => {
        if (!received) socket.write('GET /healthz HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n')
        received += data
      })
      socket.on('close', () => resolve(received))
      socket.on('error', () => resolve(received))
    })
    assert.equal(kept.match(/HTTP\/1\.1 200 /g)?.length, 2, kept)
    assert.doesNotMatch(kept.slice(0, kept.lastIndexOf('HTTP/1.1')), /\r\nconnection: close\r\n/i)
  })
})
