import assert from 'node:assert/strict'
import { connect } from 'node:net'
import { describe, it } from 'node:test'
import { bearer, build, errorBody, rawExchange, serverConnections, suiteApp, type TestApp } from '../helper.ts'
import { until } from '../wait.ts'

// One database: the wire's guards answer before any route reaches the store.

/** The port the app of `test` listens on, at 127.0.0.1; it starts listening at the first call. */
async function portOf(test: TestApp): Promise<number> {
  if (!test.app.server.listening) await test.app.listen({ port: 0, host: '127.0.0.1' })
  return (test.app.server.address() as { port: number }).port
}

/** Host headers that must not reach a Location or Link: a 400, whatever else the request says. */
const MALFORMED_HOSTS = [
  'evil.example/x>; rel="next", <http://evil.example',
  'e>;rel=x',
  'a b',
  'x:1:2',
  'x"y',
  '[:]',
  '[::1',
  'api.example:99999',
  '.',
  'a..b',
  '999.1.1.1',
  '1.2.3.4.5',
  'x.1',
  // Numbers to URL parsers too (WHATWG "ends in a number"): links built from them would not parse.
  'x.0x1',
  'a.0x',
  '0x7f.0.0.1',
]
/** Host headers that are well formed, however odd: answered as usual. */
const WELL_FORMED_HOSTS = [
  'api.example.com',
  'localhost:8080',
  '[::1]:8080',
  '10.0.0.1',
  'my_service:80',
  'example.com:',
  '0xcafe.example',
  'x.0xg',
]

describe('The wire: framing, Host, versions, targets, and what Node answers itself', () => {
  // Tests that store no pet, each with keys of its own, share one app (one of them finds no pet);
  // tests that log share another, each reading the lines of its own requests, or looking for its
  // own key. Tests of another configuration, that expect pet ids from 1, or read every log line
  // have apps of their own.
  const shared = suiteApp()
  const logging = suiteApp({}, { captureLogs: true })

  it('an absolute-form target names the host, whatever Host says (RFC 9112 §3.2.2); a fragment or user information is 400', async (t) => {
    // Expects its pets to be the first ones (the third is /v1/pets/3).
    const test = await build(t)
    const { secret } = await test.newKey()
    for (const name of ['Rex', 'Tom']) {
      const headers = { ...bearer(secret), 'content-type': 'application/json' }
      await test.app.inject({ method: 'POST', url: '/v1/pets', headers, payload: { name, categoryId: 1 } })
    }
    await test.app.listen({ port: 0, host: '127.0.0.1' })
    const { port } = test.app.server.address() as { port: number }
    const [absolute, fragment, notHttp] = await Promise.all(
      ['http://x.example/v1/pets?limit=1', '/v1/pets#limit=1', 'ftp://x.example/v1/pets'].map((target) =>
        rawExchange(port, [
          `GET ${target} HTTP/1.1\r\nHost: h.example\r\nAuthorization: Bearer ${secret}\r\nConnection: close\r\n\r\n`,
        ]),
      ),
    )
    assert.match(absolute, /^HTTP\/1.1 200 /)
    assert.match(absolute, /link: <http:\/\/x\.example\/v1\/pets\?limit=1&cursor=/i)
    // The absolute target is the target URI, scheme included (RFC 9112 §3.3), even over plain HTTP.
    const body = JSON.stringify({ name: 'Secure', categoryId: 1 })
    const [secureList, secureCreate] = await Promise.all(
      [
        'GET https://x.example/v1/pets?limit=1 HTTP/1.1\r\n',
        `POST https://x.example/v1/pets HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n`,
      ].map((head) =>
        rawExchange(port, [
          `${head}Host: h.example\r\nAuthorization: Bearer ${secret}\r\nConnection: close\r\n\r\n${head.startsWith('POST') ? body : ''}`,
        ]),
      ),
    )
    assert.match(secureList, /link: <https:\/\/x\.example\/v1\/pets\?limit=1&cursor=/i)
    assert.match(secureCreate, /^HTTP\/1.1 201 /)
    assert.match(secureCreate, /location: https:\/\/x\.example\/v1\/pets\/3\r\n/i)
    // In absolute form too, the key comes first, and a wrong method is 405 with Allow.
    const ask = (line: string, key = '') =>
      rawExchange(port, [`${line} HTTP/1.1\r\nHost: h.example\r\n${key}Connection: close\r\n\r\n`])
    assert.match(await ask('GET http://x.example/v1/nope'), /^HTTP\/1.1 401 /)
    assert.match(await ask('GET http://x.example/v1/%zz'), /^HTTP\/1.1 401 /)
    const options = await ask('OPTIONS http://x.example/v1/pets', `Authorization: Bearer ${secret}\r\n`)
    assert.match(options, /^HTTP\/1.1 405 /)
    assert.match(options, /allow: GET, HEAD, POST\r\n/i)
    // Dot segments are not resolved, by the router nor by us: the 404 names the path as sent.
    const dots = await ask('GET http://x.example/v1/../v1/pets', `Authorization: Bearer ${secret}\r\n`)
    assert.match(dots, /No route for GET \/v1\/\.\.\/v1\/pets\./)
    // User information in the target is an error (RFC 9110 §4.2.4), not a host to link to.
    for (const target of ['http://u:p@x.example/v1/pets', 'http://u@x.example/v1/pets']) {
      const answer = await ask(`GET ${target}`, `Authorization: Bearer ${secret}\r\n`)
      assert.match(answer, /^HTTP\/1.1 400 /, target)
      assert.match(answer, /must not hold user information/, target)
    }
    // Its host is held to Host's rule as written, before the URL parser rewrites it (010.0.0.1 is 8.0.0.1 to it).
    for (const host of ['010.0.0.1', '0x7f.0.0.1', '127.1', '4294967295', '1.2.3']) {
      const answer = await ask(`GET http://${host}/v1/pets`, `Authorization: Bearer ${secret}\r\n`)
      assert.match(answer, /^HTTP\/1.1 400 /, host)
      assert.match(answer, /The request target's host is malformed\./, host)
    }
    for (const host of ['127.0.0.1:80', '[::1]:8080', 'X.Example.']) {
      const answer = await ask(`GET http://${host}/v1/pets?limit=1`, `Authorization: Bearer ${secret}\r\n`)
      assert.match(answer, /^HTTP\/1.1 200 /, host)
    }
    assert.match(fragment, /^HTTP\/1.1 400 /)
    assert.match(fragment, /must not hold a fragment/)
    assert.match(notHttp, /^HTTP\/1.1 400 /)
  })

  it('Host is checked before it is copied into Location and Link: malformed or missing is 400', async () => {
    const test = await shared()
    const { secret } = await test.newKey()
    for (const host of MALFORMED_HOSTS) {
      const response = await test.app.inject({ url: '/v1/pets?limit=1', headers: { ...bearer(secret), host } })
      assert.equal(response.statusCode, 400, host)
      assert.equal(errorBody(response).message, 'The Host header is malformed.')
      assert.equal(response.headers.link, undefined)
    }
    for (const host of WELL_FORMED_HOSTS) {
      const response = await test.app.inject({ url: '/v1/pets', headers: { ...bearer(secret), host } })
      assert.equal(response.statusCode, 200, host)
    }
    const port = await portOf(test)
    const noHost = await rawExchange(port, [
      `GET /v1/pets HTTP/1.1\r\nAuthorization: Bearer ${secret}\r\nConnection: close\r\n\r\n`,
    ])
    assert.match(noHost, /^HTTP\/1.1 400 /)
    assert.match(noHost, /content-type: application\/json/i)
    assert.match(noHost, /"message":"The Host header is required \(HTTP\/1.1\)."/)
  })

  it('a request line of another major HTTP version (HTTP/2.0, HTTP/3.0): 505; one with no version: 400; neither served as HTTP/1.1', async () => {
    const test = await shared()
    const { secret } = await test.newKey()
    const port = await portOf(test)
    // Node's parser takes HTTP/2.0 (the app refuses it) and refuses HTTP/3.0 itself (the client error handler answers).
    for (const line of ['GET /v1/pets HTTP/2.0', 'GET /v1/pets HTTP/3.0']) {
      const answer = await rawExchange(port, [`${line}\r\nHost: x\r\nAuthorization: Bearer ${secret}\r\n\r\n`])
      assert.match(answer, /^HTTP\/1.1 505 /, line)
      assert.match(answer, /"code":"http_version_not_supported"/, line)
      assert.match(answer, /\r\ndate: /i, line)
      assert.match(answer, /\r\nconnection: close\r\n/i, line)
    }
    const noVersion = await rawExchange(port, [`GET /v1/pets\r\nHost: x\r\nAuthorization: Bearer ${secret}\r\n\r\n`])
    assert.match(noVersion, /^HTTP\/1.1 400 /)
    assert.match(noVersion, /"message":"The HTTP version must be HTTP\/1.1 or HTTP\/1.0."/)
  })

  it('OPTIONS * (about the server itself): 204 with the methods some route takes; "*" with another method: 400', async () => {
    const port = await portOf(await shared())
    const options = await rawExchange(port, ['OPTIONS * HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n'])
    assert.match(options, /^HTTP\/1.1 204 /)
    const allow = /\r\nallow: ([^\r]*)\r\n/i.exec(options)?.[1]?.split(', ')
    for (const method of ['GET', 'HEAD', 'POST']) assert.ok(allow?.includes(method), `${method} in ${allow}`)
    const get = await rawExchange(port, ['GET * HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n'])
    assert.match(get, /^HTTP\/1.1 400 /)
    assert.match(get, /"message":"The request target \\"\*\\" is only for OPTIONS \(RFC 9112 §3.2.4\)."/)
  })

  it('Content-Type sent twice: 400, even when one of them is JSON (which one a parser keeps varies)', async () => {
    const test = await shared()
    const { secret } = await test.newKey()
    const port = await portOf(test)
    const body = '{"name":"Rex","categoryId":1}'
    const response = await rawExchange(port, [
      `POST /v1/pets HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${secret}\r\nContent-Type: application/json\r\n` +
        `Content-Type: text/plain\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n${body}`,
    ])
    assert.match(response, /^HTTP\/1.1 400 /)
    assert.match(response, /"message":"The Content-Type header must be sent once."/)
    assert.equal((await test.app.store.listPets({ limit: 10 })).pets.length, 0)
  })

  it('Host, Authorization or Idempotency-Key sent twice: 400, whichever of them is valid', async () => {
    const test = await shared()
    const { secret } = await test.newKey()
    const port = await portOf(test)
    for (const headers of [
      `Host: x\r\nAuthorization: Bearer ${secret}\r\nAuthorization: Bearer junk`,
      `Host: x\r\nAuthorization: Bearer junk\r\nauthorization: Bearer ${secret}`,
      `Host: x\r\nHost: y\r\nAuthorization: Bearer ${secret}`,
      `Host: x\r\nAuthorization: Bearer ${secret}\r\nIdempotency-Key: k1\r\nidempotency-key: k1`,
    ]) {
      const response = await rawExchange(port, [`GET /v1/pets HTTP/1.1\r\n${headers}\r\nConnection: close\r\n\r\n`])
      assert.match(response, /^HTTP\/1.1 400 /, headers)
      assert.match(
        response,
        /"code":"bad_request","message":"The (Host|Authorization|Idempotency-Key) header must be sent once."/,
      )
    }
  })

  it('Expect other than 100-continue (417) and CONNECT (400) get the Error body and a request id, logged', async () => {
    const test = await logging()
    const { secret } = await test.newKey()
    const port = await portOf(test)
    const expect = await rawExchange(port, [
      `POST /v1/pets HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${secret}\r\nContent-Type: application/json\r\n` +
        'Content-Length: 2\r\nExpect: foo\r\n\r\n{}',
    ])
    const connectResponse = await rawExchange(port, [
      'CONNECT evil.example:443 HTTP/1.1\r\nHost: evil.example:443\r\n\r\n',
    ])
    for (const [response, status, code] of [
      [expect, 417, 'expectation_failed'],
      [connectResponse, 400, 'bad_request'],
    ] as const) {
      const [head, body] = response.split('\r\n\r\n') as [string, string]
      assert.match(head, new RegExp(`^HTTP/1.1 ${status} `))
      assert.match(head, /content-type: application\/json/i)
      assert.match(head, /x-request-id: [0-9a-f-]{36}/i)
      assert.equal(JSON.parse(body).code, code)
      assert.equal(JSON.parse(body).status, status)
      const id = /x-request-id: (\S+)/i.exec(head)?.[1]
      const logged = test.logs.find((line) => line.requestId === id && line.msg === 'request refused')
      assert.equal(logged?.code, code, `${code} is logged under ${id}`)
    }
  })

  it('Expect: 100-continue gets 100 only when the body is wanted: a refusal the headers decide comes instead', async (t) => {
    const test = await build(t, { BODY_LIMIT: '2048' })
    const { secret } = await test.newKey()
    await test.app.listen({ port: 0, host: '127.0.0.1' })
    const { port } = test.app.server.address() as { port: number }
    /** Sends the head, takes the first answer, then sends the body and takes the rest. */
    const exchange = (head: string, body: string) =>
      new Promise<{ first: string; all: string }>((resolve) => {
        const socket = connect(port, '127.0.0.1', () => socket.write(head))
        let all = ''
        let first = ''
        socket.on('data', (data) => {
          all += data
          if (!first) {
            first = all
            socket.write(body)
          }
        })
        // The server closes the connection after its final answer (Connection: close).
        socket.on('error', () => {})
        socket.on('close', () => resolve({ first, all }))
        // An answer that never comes is a failure, not a test that waits forever.
        socket.setTimeout(5000, () => socket.destroy())
      })
    const head = (authorization: string, length: number, path = '/v1/pets', type = 'application/json') =>
      `POST ${path} HTTP/1.1\r\nHost: x\r\nAuthorization: ${authorization}\r\nContent-Type: ${type}\r\n` +
      `Content-Length: ${length}\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n`
    const body = '{"name":"Rex","categoryId":1}'
    const refusals = [
      [head('Bearer wrong', body.length), 401],
      [head(`Bearer ${secret}`, 5000), 413],
      [head(`Bearer ${secret}`, body.length, '/v1/nowhere'), 404],
      [head(`Bearer ${secret}`, body.length, '/v1/pets', 'text/plain'), 415],
      [head(`Bearer ${secret}`, body.length, '/v1/pets', 'application/json; charset=latin1'), 415],
    ] as const
    for (const [request, status] of refusals) {
      const { first } = await exchange(request, body)
      assert.match(first, new RegExp(`^HTTP/1.1 ${status} `), request.split('\r\n')[0])
    }
    // Whatever reads the body gets its 100 first: the API's routes, and the portal's pages too.
    for (const [path, type, status] of [
      ['/v1/pets', 'application/json', 201],
      ['/portal/nowhere', 'application/x-www-form-urlencoded', 404],
    ] as const) {
      const accepted = await exchange(head(`Bearer ${secret}`, body.length, path, type), body)
      assert.match(accepted.first, /^HTTP\/1.1 100 Continue\r\n\r\n$/, path)
      assert.match(accepted.all, new RegExp(`\r\n\r\nHTTP/1.1 ${status} `), path)
    }
  })

  it('a CONNECT socket is answered and closed by the server, and a client that resets it cannot crash the process', async (t) => {
    const test = await build(t, { MAX_CONNECTIONS: '3' })
    await test.app.listen({ port: 0, host: '127.0.0.1' })
    const { port } = test.app.server.address() as { port: number }
    // Clients that keep their side open: the server still closes each (else they would fill MAX_CONNECTIONS).
    const held = await Promise.all(
      [1, 2, 3].map(
        () =>
          new Promise<string>((resolve) => {
            const socket = connect(port, '127.0.0.1', () =>
              socket.write('CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n'),
            )
            let data = ''
            socket.on('data', (chunk) => {
              data += chunk
            })
            socket.on('close', () => resolve(data))
            socket.on('error', () => resolve(data))
          }),
      ),
    )
    for (const answer of held) assert.match(answer, /^HTTP\/1.1 400 /)
    // Reset mid-request, with more bytes in flight: the server must shrug it off.
    const server = serverConnections(test)
    for (let i = 0; i < 5; i++) {
      await new Promise<void>((resolve) => {
        const socket = connect(port, '127.0.0.1', () => {
          socket.write(`CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n${'x'.repeat(100_000)}`)
          socket.resetAndDestroy()
          resolve()
        })
        socket.on('error', () => resolve())
      })
    }
    // Each reset connection taken from the backlog (or dropped past MAX_CONNECTIONS) and closed by the server.
    await until('the server done with the 5 reset connections', () => server.seen() === 5 && server.open() === 0)
    const health = await fetch(`http://127.0.0.1:${port}/healthz`)
    assert.equal(health.status, 200)
  })

  it('behind a trusted proxy, a malformed X-Forwarded-Proto or X-Forwarded-Host is 400 (it would go into Location and Link)', async (t) => {
    const test = await build(t, { TRUST_PROXY: 'true' })
    const { secret } = await test.newKey()
    for (const proto of ['https://evil.example/x>; rel="next"; a="', 'javascript', 'ftp']) {
      const response = await test.app.inject({
        url: '/v1/pets?limit=1',
        headers: { ...bearer(secret), 'x-forwarded-proto': proto },
      })
      assert.equal(response.statusCode, 400, proto)
      assert.equal(errorBody(response).message, 'The X-Forwarded-Proto header is malformed.')
    }
    // A bad X-Forwarded-Host is named as such: the client's Host was fine.
    const badHost = await test.app.inject({
      url: '/v1/pets?limit=1',
      headers: { ...bearer(secret), 'x-forwarded-host': 'bad host' },
    })
    assert.equal(badHost.statusCode, 400)
    assert.equal(errorBody(badHost).message, 'The X-Forwarded-Host header is malformed.')
    const created = await test.app.inject({
      method: 'POST',
      url: '/v1/pets',
      headers: {
        ...bearer(secret),
        'content-type': 'application/json',
        'x-forwarded-proto': 'https',
        'x-forwarded-host': 'api.example.com',
      },
      payload: '{"name":"Rex","categoryId":1}',
    })
    assert.equal(created.statusCode, 201)
    assert.match(String(created.headers.location), /^https:\/\/api\.example\.com\/v1\/pets\/\d+$/)
  })

  it('an X-Request-Id that carries an API key is replaced, so the key never reaches the log', async () => {
    const test = await logging()
    const { secret } = await test.newKey()
    const response = await test.app.inject({ url: '/nowhere', headers: { 'x-request-id': secret } })
    assert.match(String(response.headers['x-request-id']), /^[0-9a-f-]{36}$/)
    assert.doesNotMatch(JSON.stringify(test.logs), new RegExp(secret))
  })

  it('malformed HTTP and oversized headers get a JSON Error too (400, 431), logged under their X-Request-Id', async (t) => {
    // Finds no line at error in all the log: an app of its own.
    const { app, logs } = await build(t, {}, { captureLogs: true })
    await app.listen({ port: 0, host: '127.0.0.1' })
    const { port } = app.server.address() as { port: number }
    const raw = (request: string) =>
      new Promise<string>((resolve, reject) => {
        const socket = connect(port, '127.0.0.1', () => socket.end(request))
        let data = ''
        socket.on('data', (chunk) => {
          data += chunk
        })
        socket.on('close', () => resolve(data))
        socket.on('error', reject)
      })
    const cases: [string, number, string][] = [
      ['NOT HTTP AT ALL\r\n\r\n', 400, 'bad_request'],
      [`GET /v1/pets HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`, 431, 'headers_too_large'],
      // A well-formed request with a method HTTP does not define (RFC 9110 §9.1), or a coding we cannot undo.
      ['FOO /v1/pets HTTP/1.1\r\nHost: x\r\n\r\n', 501, 'not_implemented'],
      [
        'POST /v1/pets HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: gzip, chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n',
        501,
        'not_implemented',
      ],
      // Raw (not percent-encoded) non-ASCII text in the target, UTF-8 on the wire.
      ['GET /v1/pets?limit=\u0661 HTTP/1.1\r\nHost: x\r\n\r\n', 400, 'bad_request'],
      ['GET /v1/p\u00e9ts HTTP/1.1\r\nHost: x\r\n\r\n', 400, 'bad_request'],
    ]
    const messages = []
    for (const [request, status, code] of cases) {
      const response = await raw(request)
      const [head, body] = response.split('\r\n\r\n') as [string, string]
      assert.match(head, new RegExp(`^HTTP/1.1 ${status} `))
      assert.match(head, /content-type: application\/json/i)
      // RFC 9110 §6.6.1: a Date on every 4xx, these written by hand included.
      assert.match(head, /\r\ndate: \w{3}, \d{2} \w{3} \d{4} \d{2}:\d{2}:\d{2} GMT(\r\n|$)/i, code)
      assert.deepEqual(JSON.parse(body), { code, message: JSON.parse(body).message, status })
      messages.push(JSON.parse(body).message)
      // Logged as refused (a 501 is the client's doing, not our failure), under the id it was given:
      // in a line of its own when written by hand, in its request line when Fastify answered.
      const id = /x-request-id: (\S+)/i.exec(head)?.[1]
      const lines = logs.filter((line) => line.requestId === id)
      assert.ok(
        lines.some((line) => ['request refused', 'request completed'].includes(String(line.msg)) && line.code === code),
        `${code} ${id}`,
      )
    }
    assert.deepEqual(
      logs.filter((line) => Number(line.level) >= 50),
      [],
    )
    assert.match(messages[1], /larger than the limit of 16384 bytes/)
    assert.match(messages[4], /^The request target's query holds a character that must be percent-encoded/)
    assert.match(messages[5], /^The request target's path holds a character that must be percent-encoded/)
    // A final coding other than chunked leaves the body unframed: one 400, and the connection closes.
    const unframed = await raw(
      'GET /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n',
    )
    assert.equal(unframed.match(/HTTP\/1\.1 \d{3} /g)?.length, 1, unframed)
    assert.match(unframed, /^HTTP\/1.1 400 /)
    // An unknown method after a request is still 501: the request is answered first.
    const pipelined = await raw('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nFOO /v1/pets HTTP/1.1\r\nHost: x\r\n\r\n')
    assert.match(pipelined, /^HTTP\/1.1 200 /)
    assert.match(pipelined, /HTTP\/1.1 501 [\s\S]*"code":"not_implemented"/)
    // Garbage after a request is malformed, not an unknown method: the request is answered, then 400.
    const garbage = await raw('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n\x01\x02garbage\r\n\r\n')
    assert.match(garbage, /^HTTP\/1.1 200 /)
    assert.match(garbage, /HTTP\/1.1 400 [\s\S]*"code":"bad_request"/)
  })
})
