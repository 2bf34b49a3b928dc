import assert from 'node:assert/strict'
import { rmSync } from 'node:fs'
import { join } from 'node:path'
import { describe, it } from 'node:test'
import { generateApiKey } from '../../src/domain/api-keys.ts'
import { bearer, build, errorBody, suiteApp, tempDir } from '../helper.ts'

const OPERATIONS = [
  { method: 'GET', url: '/v1/pets' },
  { method: 'POST', url: '/v1/pets', payload: { name: 'Rex', categoryId: 1 } },
  { method: 'GET', url: '/v1/pets/1' },
  { method: 'POST', url: '/v1/messages', payload: { message: 'hi' } },
] as const

function withWrongChecksum(secret: string): string {
  return secret.slice(0, -1) + (secret.endsWith('0') ? '1' : '0')
}

function assertRefused(response: { statusCode: number; headers: Record<string, unknown> }, code: string) {
  assert.equal(response.statusCode, 401)
  assert.equal(errorBody(response as never).code, code)
  const challenge = String(response.headers['www-authenticate'])
  assert.match(challenge, /^Bearer realm="animal-store"/)
  return challenge
}

describe('Authentication: HTTP bearer API keys (point 3)', () => {
  // Each test makes its own keys: one app serves them all.
  const shared = suiteApp()
  const logging = suiteApp({}, { captureLogs: true })
  for (const operation of OPERATIONS) {
    it(`${operation.method} ${operation.url} without a key: 401 missing_api_key, WWW-Authenticate: Bearer without error (RFC 6750 §3.1)`, async () => {
      const { app } = await shared()
      const response = await app.inject({ ...operation })
      const challenge = assertRefused(response, 'missing_api_key')
      assert.equal(challenge, 'Bearer realm="animal-store"')
    })

    it(`${operation.method} ${operation.url} with a valid key is served`, async () => {
      const test = await shared()
      const { secret } = await test.newKey()
      const response = await test.app.inject({ ...operation, headers: bearer(secret) })
      assert.ok([200, 201, 202, 404].includes(response.statusCode), response.body)
    })
  }

  // RFC 6750 §3.1: no bearer token at all (another scheme, or none after "Bearer") is answered as a
  // request without credentials: a challenge with no error code.
  const noToken: [string, string][] = [
    ['another scheme (Basic)', 'Basic dXNlcjpwYXNz'],
    ['another scheme (Digest)', 'Digest username="x"'],
    ['a scheme that only starts like Bearer', 'Bearerx abc'],
    ['a scheme that only starts like Bearer (punctuation)', 'Bearer-Token abc'],
    ['a scheme that only starts like Bearer (a dot)', 'Bearer.v2 abc'],
    ['no token', 'Bearer'],
    ['no token, spaces', 'Bearer   '],
  ]
  for (const [what, header] of noToken) {
    it(`refuses ${what} as a missing key: 401 missing_api_key, a challenge with no error code`, async () => {
      const { app } = await shared()
      const response = await app.inject({ url: '/v1/pets', headers: { authorization: header } })
      assert.equal(assertRefused(response, 'missing_api_key'), 'Bearer realm="animal-store"')
    })
  }

  // A token after another separator than spaces (a tab, a no-break space) was meant as a key.
  // So was one of our keys with no scheme before it.
  for (const header of [
    'Bearer a b',
    'Bearer\tas_test_abc',
    'Bearer\u00a0as_test_abc',
    'Bearer \tas_test_abc',
    generateApiKey('staging').secret,
  ]) {
    it(`refuses a malformed Bearer header (${JSON.stringify(header)}) with 401 invalid_api_key and error="invalid_request"`, async () => {
      const { app } = await shared()
      const response = await app.inject({ url: '/v1/pets', headers: { authorization: header } })
      assert.match(assertRefused(response, 'invalid_api_key'), /error="invalid_request", error_description="[^"]+"$/)
    })
  }

  const badTokens: [string, string][] = [
    ['a token that is not one of our keys', 'Bearer hello'],
    ['a key with a wrong checksum', `Bearer ${withWrongChecksum(generateApiKey('staging').secret)}`],
  ]
  for (const [what, header] of badTokens) {
    it(`refuses ${what} with 401 invalid_api_key and error="invalid_token"`, async () => {
      const { app } = await shared()
      const response = await app.inject({ url: '/v1/pets', headers: { authorization: header } })
      assert.match(assertRefused(response, 'invalid_api_key'), /error="invalid_token", error_description="[^"]+"$/)
    })
  }

  it('refuses a well-formed key that was never issued (401 invalid_api_key)', async () => {
    const { app } = await shared()
    const response = await app.inject({ url: '/v1/pets', headers: bearer(generateApiKey('staging').secret) })
    assertRefused(response, 'invalid_api_key')
  })

  it('asks the store about a key once per API_KEY_CACHE_SECONDS, whether it knows the key or not', async (t) => {
    const test = await build(t, { API_KEY_CACHE_SECONDS: '300' })
    const { secret } = await test.newKey()
    const unknown = generateApiKey('staging').secret
    const store = test.app.store
    const find = store.findApiKeyByHash.bind(store)
    const asked: string[] = []
    store.findApiKeyByHash = (hash) => {
      asked.push(hash)
      return find(hash)
    }
    for (let i = 0; i < 3; i++) {
      assertRefused(await test.app.inject({ url: '/v1/pets', headers: bearer(unknown) }), 'invalid_api_key')
      assert.equal((await test.app.inject({ url: '/v1/pets', headers: bearer(secret) })).statusCode, 200)
    }
    assert.equal(asked.length, 2)
    // With no cache, every request asks.
    const uncached = await build(t, { API_KEY_CACHE_SECONDS: '0' })
    let lookups = 0
    const findUncached = uncached.app.store.findApiKeyByHash.bind(uncached.app.store)
    uncached.app.store.findApiKeyByHash = (hash) => {
      lookups++
      return findUncached(hash)
    }
    for (let i = 0; i < 3; i++) await uncached.app.inject({ url: '/v1/pets', headers: bearer(unknown) })
    assert.equal(lookups, 3)
  })

  it('refuses a key of the other deployment: production keys on staging and back', async (t) => {
    const staging = await build(t, { DEPLOYMENT: 'staging' })
    const production = await build(t, { DEPLOYMENT: 'production' })
    const stagingKey = await staging.newKey()
    const productionKey = await production.newKey()
    assert.match(stagingKey.secret, /^as_test_/)
    assert.match(productionKey.secret, /^as_live_/)
    const onStaging = await staging.app.inject({ url: '/v1/pets', headers: bearer(productionKey.secret) })
    assert.match(errorBody(onStaging).message, /production key; this is the staging deployment/)
    const onProduction = await production.app.inject({ url: '/v1/pets', headers: bearer(stagingKey.secret) })
    assertRefused(onProduction, 'invalid_api_key')
    assert.equal(
      (await production.app.inject({ url: '/v1/pets', headers: bearer(productionKey.secret) })).statusCode,
      200,
    )
  })

  it('accepts the scheme name in any case (RFC 9110 §11.1)', async () => {
    const test = await shared()
    const { secret } = await test.newKey()
    const response = await test.app.inject({ url: '/v1/pets', headers: { authorization: `bearer ${secret}` } })
    assert.equal(response.statusCode, 200)
  })

  it('refuses a revoked key with 401 revoked_api_key at once on the instance that revoked it', async (t) => {
    const test = await build(t, { API_KEY_CACHE_SECONDS: '300' })
    const { secret, keyId } = await test.newKey()
    assert.equal((await test.app.inject({ url: '/v1/pets', headers: bearer(secret) })).statusCode, 200)
    await test.app.store.revokeApiKey(keyId)
    test.app.forgetApiKey(keyId)
    assertRefused(await test.app.inject({ url: '/v1/pets', headers: bearer(secret) }), 'revoked_api_key')
  })

  it('sees a revocation made elsewhere (e.g. the CLI) within API_KEY_CACHE_SECONDS', async (t) => {
    const test = await build(t, { API_KEY_CACHE_SECONDS: '1' })
    const { secret, keyId } = await test.newKey()
    assert.equal((await test.app.inject({ url: '/v1/pets', headers: bearer(secret) })).statusCode, 200)
    await test.app.store.revokeApiKey(keyId) // not through this app: its cache still trusts the key
    assert.equal((await test.app.inject({ url: '/v1/pets', headers: bearer(secret) })).statusCode, 200)
    // The cache entry goes stale by Date.now() in this process: the clock moves past it.
    t.mock.timers.enable({ apis: ['Date'], now: Date.now() })
    t.mock.timers.tick(1100)
    assertRefused(await test.app.inject({ url: '/v1/pets', headers: bearer(secret) }), 'revoked_api_key')
  })

  it('refuses an expired key with 401 expired_api_key, also when it expires while cached', async (t) => {
    const test = await build(t, { API_KEY_CACHE_SECONDS: '300' })
    const expired = await test.newKey({ expiresAt: new Date(Date.now() - 1000).toISOString() })
    assertRefused(await test.app.inject({ url: '/v1/pets', headers: bearer(expired.secret) }), 'expired_api_key')
    const soon = await test.newKey({ expiresAt: new Date(Date.now() + 300).toISOString() })
    assert.equal((await test.app.inject({ url: '/v1/pets', headers: bearer(soon.secret) })).statusCode, 200)
    // The cached key expires by Date.now() in this process: the clock moves past it.
    t.mock.timers.enable({ apis: ['Date'], now: Date.now() })
    t.mock.timers.tick(350)
    assertRefused(await test.app.inject({ url: '/v1/pets', headers: bearer(soon.secret) }), 'expired_api_key')
  })

  it('is checked before anything else: a bad key gets 401 even when the body is also bad', async () => {
    const test = await shared()
    const cases = [
      { headers: { 'content-type': 'application/json' }, payload: '{not json' },
      { headers: { 'content-type': 'application/json' }, payload: '{"name": 5}' },
      { headers: { 'content-type': 'text/plain' }, payload: 'hello' },
      { headers: { 'content-type': 'application/json' }, payload: `{"name":"${'x'.repeat(100_000)}"}` },
    ]
    for (const { headers, payload } of cases) {
      for (const authorization of [undefined, 'Bearer nope']) {
        const response = await test.app.inject({
          method: 'POST',
          url: '/v1/pets',
          headers: { ...headers, ...(authorization && { authorization }) },
          payload,
        })
        assert.equal(response.statusCode, 401, `${authorization} ${payload.slice(0, 20)}`)
      }
    }
    const badQuery = await test.app.inject({ url: '/v1/pets?limit=0', headers: { authorization: 'Bearer nope' } })
    assert.equal(badQuery.statusCode, 401)
  })

  it('needs no key for the OpenAPI document and the health probes', async () => {
    const { app } = await shared()
    for (const url of ['/v1/openapi.json', '/healthz', '/readyz']) {
      assert.equal((await app.inject({ url })).statusCode, 200, url)
    }
  })

  it('never logs a key a client put in X-Forwarded-For behind a trusted proxy (it becomes the address)', async (t) => {
    const test = await build(t, { TRUST_PROXY: 'true' }, { captureLogs: true })
    const { secret } = await test.newKey()
    await test.app.inject({ url: '/v1/pets', headers: { ...bearer(secret), 'x-forwarded-for': secret } })
    await test.app.inject({ url: '/v1/nowhere', headers: { ...bearer(`${secret}x`), 'x-forwarded-for': secret } })
    assert.ok(test.logs.some((line) => JSON.stringify(line).includes('as_test_[REDACTED]')))
    assert.ok(!JSON.stringify(test.logs).includes(secret.slice(8)), 'a key reached the logs')
  })

  it('logs a database outage that stops it recording key usage as the requests do: one warn line, no stack', async (t) => {
    const file = join(tempDir(t), 'gone.db')
    const test = await build(t, { DATABASE_URL: `sqlite:${file}` }, { captureLogs: true })
    const { secret } = await test.newKey()
    assert.equal((await test.app.inject({ url: '/v1/pets', headers: bearer(secret) })).statusCode, 200)
    // The file goes: the store refuses the write that records the use, which closing the app flushes.
    for (const suffix of ['', '-wal', '-shm']) rmSync(`${file}${suffix}`, { force: true })
    await test.app.close()
    const line = test.logs.find((entry) => entry.msg === 'could not record key usage')
    assert.equal(line?.level, 40, JSON.stringify(test.logs))
    assert.equal(line.err, undefined, 'logged with a stack')
    assert.match(String(line.detail), /gone\.db/)
  })

  it('logs a refused key in one line per request: the request line carries its code and detail', async () => {
    const test = await logging()
    const unknown = generateApiKey('staging').secret
    const responses = [
      await test.app.inject({ url: '/v1/pets', headers: bearer(unknown) }),
      await test.app.inject({ url: '/v1/pets' }),
      await test.app.inject({ url: '/v1/nowhere', headers: bearer(unknown) }),
    ]
    for (const response of responses) {
      const lines = test.logs.filter((line) => line.requestId === response.headers['x-request-id'])
      assert.equal(lines.length, 1, JSON.stringify(lines))
      const [line] = lines as [Record<string, unknown>]
      assert.deepEqual(
        [line.msg, line.level, line.status, line.code, line.detail],
        ['request completed', 30, 401, errorBody(response).code, errorBody(response).message],
      )
    }
    assert.ok(!JSON.stringify(test.logs).includes(unknown.slice(8)), 'a key reached the logs')
  })

  it('never logs the Authorization header or a key, even one put in the URL', async (t) => {
    // Reads every line it logged: an app of its own.
    const test = await build(t, {}, { captureLogs: true })
    const { secret } = await test.newKey()
    await test.app.inject({ url: `/v1/pets?api_key=${secret}`, headers: bearer(secret) })
    await test.app.inject({ url: '/v1/pets', headers: bearer(secret) })
    await test.app.inject({ url: '/v1/pets', headers: bearer(`${secret}x`) })
    // Percent-escaped, in the path (a 400 or 404, logged with its message) and in the query.
    await test.app.inject({ url: `/v1/pets/%61s_test_${secret.slice(8)}`, headers: bearer(secret) })
    await test.app.inject({ url: `/v1/pets?cursor=as%5Ftest%5F${secret.slice(8)}`, headers: bearer(secret) })
    const text = JSON.stringify(test.logs)
    assert.ok(test.logs.length >= 5)
    assert.ok(!text.includes(secret.slice(8)), 'a key reached the logs')
    assert.ok(!/authorization/i.test(text), 'the Authorization header reached the logs')
  })
})
