import assert from 'node:assert/strict'
import { connect } from 'node:net'
import { describe, it } from 'node:test'
import { DatabaseUnavailableError } from '../../src/store/types.ts'
import { bearer, build, errorBody, loggedAsOutage, suiteApp } from '../helper.ts'

describe('Errors: every error is application/json {code, message, status}', () => {
  // Tests that store no pet share one app (one of them finds its list of pets empty).
  const shared = suiteApp()
  // Routes that fail each in their own way; each test reads only the log lines of its own request.
  const failing = suiteApp(
    {},
    {
      captureLogs: true,
      setup: (app) => {
        app.get('/boom', async () => {
          throw new Error('SQLITE_CORRUPT at /srv/secret/path.db: SELECT * FROM api_keys')
        })
        app.get('/down', async () => {
          throw new DatabaseUnavailableError('connect ECONNREFUSED 127.0.0.1:5432')
        })
        app.get('/odd', async () => Promise.reject('just a string'))
      },
    },
  )

  it('malformed JSON: 400 invalid_json', async () => {
    const test = await shared()
    const { secret } = await test.newKey()
    for (const payload of ['{"name": "Rex",', '{"name": "Rex"}}', "{'name': 'Rex'}", '', 'nul', '{"a":1}\u0000']) {
      const response = await test.app.inject({
        method: 'POST',
        url: '/v1/pets',
        headers: { ...bearer(secret), 'content-type': 'application/json' },
        payload,
      })
      assert.equal(response.statusCode, 400, JSON.stringify(payload))
      assert.equal(errorBody(response).code, 'invalid_json')
      // An empty body says so: a client that sent a Content-Type with no body sees why at once.
      if (payload === '') assert.match(errorBody(response).message, /^The request body is empty/)
    }
  })

  it('a body with __proto__ or constructor.prototype keys: 400, nothing stored', async () => {
    const test = await shared()
    const { secret } = await test.newKey()
    for (const payload of [
      '{"name":"Rex","categoryId":1,"__proto__":{"admin":true}}',
      '{"name":"Rex","categoryId":1,"constructor":{"prototype":{"admin":true}}}',
    ]) {
      const response = await test.app.inject({
        method: 'POST',
        url: '/v1/pets',
        headers: { ...bearer(secret), 'content-type': 'application/json' },
        payload,
      })
      assert.equal(response.statusCode, 400, payload)
      assert.deepEqual(errorBody(response), {
        code: 'invalid_json',
        message: 'The request body holds a "__proto__" or "constructor.prototype" key: not accepted.',
        status: 400,
      })
    }
    assert.deepEqual((await test.app.inject({ url: '/v1/pets', headers: bearer(secret) })).json(), [])
  })

  it('unsupported media type: 415 unsupported_media_type', async () => {
    const test = await shared()
    const { secret } = await test.newKey()
    for (const type of ['text/plain', 'application/x-www-form-urlencoded', 'application/xml', 'multipart/form-data']) {
      const response = await test.app.inject({
        method: 'POST',
        url: '/v1/pets',
        headers: { ...bearer(secret), 'content-type': type },
        payload: 'name=Rex',
      })
      assert.equal(response.statusCode, 415, type)
      assert.equal(errorBody(response).code, 'unsupported_media_type')
    }
  })

  it('accepts application/json with a charset parameter', async (t) => {
    // Stores a pet: not in the shared app, whose store stays empty.
    const test = await build(t)
    const { secret } = await test.newKey()
    const response = await test.app.inject({
      method: 'POST',
      url: '/v1/pets',
      headers: { ...bearer(secret), 'content-type': 'application/json; charset=utf-8' },
      payload: '{"name":"Rex","categoryId":1}',
    })
    assert.equal(response.statusCode, 201)
  })

  it('body too large: 413 payload_too_large (BODY_LIMIT)', async (t) => {
    const test = await build(t, { BODY_LIMIT: '2048' })
    const { secret } = await test.newKey()
    const response = await test.app.inject({
      method: 'POST',
      url: '/v1/messages',
      headers: { ...bearer(secret), 'content-type': 'application/json' },
      payload: JSON.stringify({ message: 'x'.repeat(3000) }),
    })
    assert.equal(response.statusCode, 413)
    assert.equal(errorBody(response).code, 'payload_too_large')
  })

  it('unexpected failure: 500 internal_error, no stack or internals, logged at error with the request id', async () => {
    const test = await failing()
    const response = await test.app.inject({ url: '/boom' })
    assert.equal(response.statusCode, 500)
    const body = errorBody(response)
    assert.equal(body.code, 'internal_error')
    assert.doesNotMatch(response.body, /SQLITE|secret|api_keys|at |\.ts|\.js/)
    const requestId = response.headers['x-request-id']
    const logged = test.logs.find((line) => line.level === 50 && line.requestId === requestId)
    assert.ok(logged, 'the failure was not logged at error level with the request id')
    assert.match(JSON.stringify(logged.err), /SQLITE_CORRUPT/)
  })

  it('a database outage is a 503 logged at warn in one line without a stack: an outage fails every request alike', async () => {
    const test = await failing()
    const response = await test.app.inject({ url: '/down' })
    assert.equal(response.statusCode, 503)
    assert.equal(errorBody(response).code, 'service_unavailable')
    assert.equal(response.headers['retry-after'], '5')
    assert.doesNotMatch(response.body, /ECONNREFUSED|5432/)
    assert.match(String(loggedAsOutage(test.logs, response).detail), /ECONNREFUSED/)
  })

  it('a refusal (400, 404) is logged in its request line, with its code and detail: one line a request', async () => {
    const test = await failing()
    const { secret } = await test.newKey()
    const json = { ...bearer(secret), 'content-type': 'application/json' }
    const refusals = [
      await test.app.inject({
        method: 'POST',
        url: '/v1/pets',
        headers: json,
        payload: { name: 'Rex', categoryId: 'x' },
      }),
      await test.app.inject({ url: '/v1/pets/999999', headers: bearer(secret) }),
      await test.app.inject({ url: '/v1/nowhere', headers: bearer(secret) }),
    ]
    for (const response of refusals) {
      const lines = test.logs.filter((line) => line.requestId === response.headers['x-request-id'])
      const { code, message, status } = errorBody(response)
      assert.deepEqual(
        lines.map((line) => [line.msg, line.status, line.code, line.detail]),
        [['request completed', status, code, message]],
      )
    }
  })

  it('a thrown non-Error value is still a masked 500', async () => {
    const test = await failing()
    const response = await test.app.inject({ url: '/odd' })
    assert.equal(response.statusCode, 500)
    assert.equal(errorBody(response).code, 'internal_error')
  })

  it('every response, errors included, carries X-Request-Id; a sane client id is kept', async () => {
    const { app } = await shared()
    const generated = await app.inject({ url: '/v1/pets' })
    assert.match(String(generated.headers['x-request-id']), /^[0-9a-f-]{36}$/)
    const kept = await app.inject({ url: '/nowhere', headers: { 'x-request-id': 'trace-42.a_b:c' } })
    assert.equal(kept.headers['x-request-id'], 'trace-42.a_b:c')
    const replaced = await app.inject({ url: '/nowhere', headers: { 'x-request-id': 'bad id\twith spaces' } })
    assert.match(String(replaced.headers['x-request-id']), /^[0-9a-f-]{36}$/)
  })

  for (const [listen, linkHost] of [
    ['127.0.0.1', '127\\.0\\.0\\.1'],
    ['::1', '\\[::1\\]'],
  ]) {
    it(`an HTTP/1.0 request without Host still gets absolute links built from the address it reached (${listen})`, async (t) => {
      // Listens, and expects the first pet (/v1/pets/1): an app of its own.
      const test = await build(t)
      const { secret } = await test.newKey()
      await test.app.listen({ port: 0, host: listen })
      const { port } = test.app.server.address() as { port: number }
      const body = '{"name":"Rex","categoryId":1}'
      const response = await new Promise<string>((resolve, reject) => {
        // Written, not ended: HTTP/1.0 means the server closes the connection once it has answered.
        const socket = connect(port, listen, () =>
          socket.write(
            `POST /v1/pets HTTP/1.0\r\nAuthorization: Bearer ${secret}\r\nContent-Type: application/json\r\n` +
              `Content-Length: ${body.length}\r\n\r\n${body}`,
          ),
        )
        let data = ''
        socket.on('data', (chunk) => {
          data += chunk
        })
        socket.on('close', () => resolve(data))
        socket.on('error', reject)
      })
      assert.match(response, /^HTTP\/1.1 201 /)
      // An IPv6 address is bracketed in a URL (RFC 3986 §3.2.2).
      assert.match(response, new RegExp(`location: http://${linkHost}:${port}/v1/pets/1\r\n`, 'i'))
    })
  }
})
