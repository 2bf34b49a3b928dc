import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { bearer, build, errorBody, suiteApp } from '../helper.ts'

describe('Requests no route takes: 404, 405 with Allow, the key first', () => {
  // Each test uses keys of its own, and no test here stores anything: one app per configuration.
  const shared = suiteApp()
  const smallBodies = suiteApp({ BODY_LIMIT: '2048' })

  it('unknown route: 404 not_found, with or without /v1 (with a key)', async () => {
    const test = await shared()
    const { secret } = await test.newKey()
    for (const url of ['/v1', '/v1/pet', '/v2/pets', '/v1/pets/1/owner', '/v1/orders', '/v1/pets/', '/v1/pets/?x=1']) {
      const response = await test.app.inject({ url, headers: bearer(secret) })
      assert.equal(response.statusCode, 404, url)
      assert.equal(errorBody(response).code, 'not_found')
      // No route was matched: none of getPet's deprecation headers (`/v1/pets/` is not getPet).
      assert.equal(response.headers.deprecation, undefined, url)
      assert.equal(response.headers.link, undefined, url)
    }
  })

  it('a wrong path or method with a valid key is counted like any request, with the RateLimit headers', async (t) => {
    const test = await build(t, { RATE_LIMIT: '3' })
    const { secret } = await test.newKey()
    const statuses = []
    for (const [method, url] of [
      ['GET', '/v1/orders'],
      ['DELETE', '/v1/pets/1'],
      ['GET', '/v1/pets/%zz'],
      ['GET', '/v1/pets'],
    ] as const) {
      const response = await test.app.inject({ method, url, headers: bearer(secret) })
      statuses.push(response.statusCode)
      assert.match(String(response.headers.ratelimit), /^"default";r=\d+;t=\d+$/, `${method} ${url}`)
      assert.equal(response.headers['ratelimit-policy'], '"default";q=3;w=60')
    }
    assert.deepEqual(statuses, [404, 405, 400, 429])
  })

  it('says what to fix: a malformed URL, a body over the limit', async () => {
    const test = await smallBodies()
    const { secret } = await test.newKey()
    const badUrl = await test.app.inject({ url: '/v1/pets/%zz', headers: bearer(secret) })
    assert.equal(badUrl.statusCode, 400)
    assert.match(errorBody(badUrl).message, /request target is malformed: .*whose "%" escapes encode UTF-8/)
    // In the query as in the path: bad URL encoding is bad_request, whichever parameter holds it.
    for (const query of ['limit=%zz', '%zz=1', 'cursor=%ff', 'status=%E2%82']) {
      const response = await test.app.inject({ url: `/v1/pets?${query}`, headers: bearer(secret) })
      assert.equal(response.statusCode, 400, query)
      assert.equal(errorBody(response).code, 'bad_request', query)
    }
    const encoded = await test.app.inject({ url: '/v1/pets?status=%61vailable&limit=%32', headers: bearer(secret) })
    assert.equal(encoded.statusCode, 200)
    const big = await test.app.inject({
      method: 'POST',
      url: '/v1/pets',
      headers: { ...bearer(secret), 'content-type': 'application/json' },
      payload: JSON.stringify({ name: 'x'.repeat(3000), categoryId: 1 }),
    })
    assert.equal(big.statusCode, 413)
    assert.match(errorBody(big).message, /limit of 2048 bytes/)
  })

  it('under /v1 the key comes first: an unknown path, a wrong method or an undecodable URL without a key is 401', async () => {
    const { app } = await shared()
    for (const [method, url] of [
      ['GET', '/v1'],
      ['POST', '/v1'],
      ['GET', '/v1?x=1'],
      ['GET', '/v1/orders'],
      ['PATCH', '/v1/pets'],
      ['DELETE', '/v1/pets/1'],
      ['GET', '/v1/pets/%zz'],
      ['GET', `/v1/pets/${'9'.repeat(600)}`],
    ] as const) {
      const response = await app.inject({ method, url })
      assert.equal(response.statusCode, 401, `${method} ${url}`)
      assert.equal(errorBody(response).code, 'missing_api_key')
      assert.match(String(response.headers['www-authenticate']), /^Bearer /)
    }
    // With a body too: the key is checked before the body is read, whatever is wrong with it.
    for (const [method, url, headers, payload] of [
      ['PUT', '/v1/pets/1', { 'content-type': 'application/json' }, '{bad'],
      ['POST', '/v1/pets/1', { 'content-type': 'application/json', 'content-encoding': 'gzip' }, '{}'],
      ['POST', '/v1/nowhere', { 'content-type': 'application/json' }, `"${'x'.repeat(100_000)}"`],
    ] as const) {
      const response = await app.inject({ method, url, headers, payload })
      assert.equal(response.statusCode, 401, `${method} ${url} with a body`)
      assert.equal(errorBody(response).code, 'missing_api_key')
    }
    // The public document stays public, wrong method included.
    assert.equal((await app.inject({ method: 'POST', url: '/v1/openapi.json' })).statusCode, 405)
    assert.equal((await app.inject({ url: '/nowhere' })).statusCode, 404)
  })

  it('wrong method on a known path: 405 method_not_allowed with Allow', async () => {
    const test = await shared()
    const { secret } = await test.newKey()
    const cases: [string, string, string][] = [
      ['DELETE', '/v1/pets', 'GET, HEAD, POST'],
      ['PUT', '/v1/pets/1', 'GET, HEAD, PATCH'],
      ['DELETE', '/v1/pets/abc', 'GET, HEAD, PATCH'],
      ['DELETE', '/v1/messages', 'GET, HEAD, POST'],
      ['OPTIONS', '/v1/pets', 'GET, HEAD, POST'],
    ]
    for (const [method, url, allow] of cases) {
      const response = await test.app.inject({ method: method as 'GET', url, headers: bearer(secret) })
      assert.equal(response.statusCode, 405, `${method} ${url}`)
      assert.equal(errorBody(response).code, 'method_not_allowed')
      assert.equal(response.headers.allow, allow)
    }
  })

  it('an unknown route or a wrong method is 404 or 405 whatever the body: it is never read', async () => {
    const test = await smallBodies()
    const { secret } = await test.newKey()
    const json = { 'content-type': 'application/json' }
    const cases = [
      ['DELETE', '/v1/pets/1', bearer(secret), '{bad', 405],
      ['PUT', '/v1/pets', bearer(secret), `"${'x'.repeat(5000)}"`, 405],
      ['POST', '/v1/nope', bearer(secret), '{bad', 404],
      ['POST', '/healthz', {}, '{bad', 405],
      ['POST', '/nowhere', {}, `"${'x'.repeat(5000)}"`, 404],
      ['POST', '/v1/openapi.json', {}, '{bad', 405],
    ] as const
    for (const [method, url, headers, payload, status] of cases) {
      const response = await test.app.inject({ method, url, headers: { ...headers, ...json }, payload })
      assert.equal(response.statusCode, status, `${method} ${url}`)
    }
    // The router decodes the path; so does the 405's check.
    const escaped = await test.app.inject({ method: 'OPTIONS', url: '/v1/%70ets', headers: bearer(secret) })
    assert.equal(escaped.statusCode, 405)
    assert.equal(escaped.headers.allow, 'GET, HEAD, POST')
  })

  it('the key check and the 404/405 read the path as the router does: decoded, and as sent', async () => {
    const test = await shared()
    const { secret } = await test.newKey()
    // Without a key, nothing about /v1 shows, however its path is spelled.
    for (const [method, url] of [
      ['DELETE', '/%761/pets'],
      ['GET', '/%761/nope'],
    ] as const) {
      assert.equal((await test.app.inject({ method, url })).statusCode, 401, `${method} ${url}`)
    }
    const allowed = await test.app.inject({ method: 'DELETE', url: '/%761/pets', headers: bearer(secret) })
    assert.equal(allowed.statusCode, 405)
    // A plugin's root page answers with and without the slash: Allow says so for both.
    for (const url of ['/docs', '/docs/', '/portal', '/portal/']) {
      const response = await test.app.inject({ method: 'OPTIONS', url })
      assert.equal(response.statusCode, 405, url)
      assert.equal(response.headers.allow, 'GET, HEAD', url)
    }
    // RFC 10008 §2: QUERY needs a Content-Type, with the key checked first.
    const query = await test.app.inject({ method: 'QUERY' as 'GET', url: '/v1/pets', headers: bearer(secret) })
    assert.equal(query.statusCode, 400)
  })
})
