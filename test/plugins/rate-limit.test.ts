import assert from 'node:assert/strict'
import { createConnection } from 'node:net'
import { describe, it } from 'node:test'
import { generateApiKey } from '../../src/domain/api-keys.ts'
import { bearer, build, errorBody } from '../helper.ts'

const explicitRedis = process.env.TEST_REDIS_URL
const REDIS_URL = explicitRedis || 'redis://127.0.0.1:6379'

/** Whether Redis answers; without TEST_REDIS_URL a missing Redis skips its tests (CI sets it). */
async function redisSkip(): Promise<string | false> {
  const { hostname, port } = new URL(REDIS_URL)
  const answers = await new Promise<boolean>((resolve) => {
    const socket = createConnection(Number(port || 6379), hostname, () => {
      socket.end()
      resolve(true)
    })
    socket.on('error', () => resolve(false))
  })
  if (answers) return false
  if (explicitRedis) throw new Error(`TEST_REDIS_URL=${REDIS_URL} does not answer`)
  return `Redis not reachable at ${REDIS_URL}: set TEST_REDIS_URL=redis://host:port to run`
}

describe('Rate limits per API key (RateLimit / RateLimit-Policy, IETF draft)', () => {
  it('every authenticated response carries RateLimit-Policy and RateLimit, counting down', async (t) => {
    const test = await build(t, { RATE_LIMIT: '100', RATE_LIMIT_WINDOW_SECONDS: '60' })
    const { secret } = await test.newKey()
    const first = await test.app.inject({ url: '/v1/pets', headers: bearer(secret) })
    const second = await test.app.inject({ url: '/v1/pets/1', headers: bearer(secret) })
    assert.equal(first.headers['ratelimit-policy'], '"default";q=100;w=60')
    assert.match(String(first.headers.ratelimit), /^"default";r=99;t=(60|59)$/)
    assert.match(String(second.headers.ratelimit), /^"default";r=98;t=\d+$/)
    assert.equal(second.statusCode, 404, 'errors after authentication count and carry the headers too')
  })

  it('past the limit: 429 rate_limited with Retry-After, for that key only; the window then resets', async (t) => {
    const test = await build(t, { RATE_LIMIT: '3', RATE_LIMIT_WINDOW_SECONDS: '1' })
    const limited = await test.newKey()
    const other = await test.newKey()
    for (let i = 0; i < 3; i++) {
      assert.equal((await test.app.inject({ url: '/v1/pets', headers: bearer(limited.secret) })).statusCode, 200)
    }
    const refused = await test.app.inject({ url: '/v1/pets', headers: bearer(limited.secret) })
    assert.equal(refused.statusCode, 429)
    assert.equal(errorBody(refused).code, 'rate_limited')
    assert.match(String(refused.headers['retry-after']), /^[01]$/)
    assert.match(String(refused.headers.ratelimit), /r=0;/)
    assert.equal((await test.app.inject({ url: '/v1/pets', headers: bearer(other.secret) })).statusCode, 200)
    // The window ends by Date.now() in this process: the clock moves past it, instead of waiting.
    t.mock.timers.enable({ apis: ['Date'], now: Date.now() })
    t.mock.timers.tick(1100)
    assert.equal((await test.app.inject({ url: '/v1/pets', headers: bearer(limited.secret) })).statusCode, 200)
  })

  it('logs a 429 in one line per request: the request line carries its code and detail', async (t) => {
    const test = await build(t, { RATE_LIMIT: '1' }, { captureLogs: true })
    const { secret } = await test.newKey()
    await test.app.inject({ url: '/v1/pets', headers: bearer(secret) })
    const refused = await test.app.inject({ url: '/v1/pets', headers: bearer(secret) })
    const lines = test.logs.filter((line) => line.requestId === refused.headers['x-request-id'])
    assert.deepEqual(
      lines.map((line) => [line.msg, line.status, line.code, line.detail]),
      [['request completed', 429, 'rate_limited', errorBody(refused).message]],
    )
  })

  it('RATE_LIMIT=0 turns the limit and its headers off', async (t) => {
    const test = await build(t, { RATE_LIMIT: '0' })
    const { secret } = await test.newKey()
    const response = await test.app.inject({ url: '/v1/pets', headers: bearer(secret) })
    assert.equal(response.statusCode, 200)
    assert.equal(response.headers.ratelimit, undefined)
  })

  it('an address that keeps sending bad keys gets 429 for its bad keys for the window; keys it used before are still served', async (t) => {
    const test = await build(t, {
      AUTH_FAILURE_LIMIT: '3',
      RATE_LIMIT_WINDOW_SECONDS: '60',
      API_KEY_CACHE_SECONDS: '1',
    })
    const { secret } = await test.newKey()
    // A key never used from here before the block: only a lookup could say it is good.
    const other = await test.newKey()
    const from = (remoteAddress: string, authorization: string) =>
      test.app.inject({ url: '/v1/pets', remoteAddress, headers: { authorization } })
    assert.equal((await from('10.0.0.1', `Bearer ${secret}`)).statusCode, 200)
    // Requests with no key at all are not guesses: they do not count.
    for (let i = 0; i < 5; i++) assert.equal((await from('10.0.0.1', 'Basic eDp5')).statusCode, 401)
    for (let i = 0; i < 3; i++) assert.equal((await from('10.0.0.1', 'Bearer wrong')).statusCode, 401)
    const slowed = await from('10.0.0.1', 'Bearer wrong')
    assert.equal(slowed.statusCode, 429)
    assert.equal(errorBody(slowed).code, 'rate_limited')
    assert.ok(Number(slowed.headers['retry-after']) > 0)
    // A blocked address gets no lookups: an unknown key, or one this process has not seen, is 429.
    assert.equal((await from('10.0.0.1', `Bearer ${generateApiKey('staging').secret}`)).statusCode, 429)
    assert.equal((await from('10.0.0.1', `Bearer ${other.secret}`)).statusCode, 429)
    // A key it has seen is still served (one address may be many clients behind a NAT or a proxy),
    // also once its cache entry is stale and it is checked against the store again.
    assert.equal((await from('10.0.0.1', `Bearer ${secret}`)).statusCode, 200)
    // The cache entry goes stale by Date.now() in this process: the clock moves past it.
    t.mock.timers.enable({ apis: ['Date'], now: Date.now() })
    t.mock.timers.tick(1100)
    assert.equal((await from('10.0.0.1', `Bearer ${secret}`)).statusCode, 200)
    assert.equal((await from('10.0.0.1', 'Bearer wrong')).statusCode, 429)
    assert.equal((await from('10.0.0.2', `Bearer ${other.secret}`)).statusCode, 200)
    assert.equal((await from('10.0.0.2', 'Bearer wrong')).statusCode, 401)
  })

  it('counts bad keys from IPv6 clients per /64, so that taking a new address for each guess changes nothing', async (t) => {
    const test = await build(t, { AUTH_FAILURE_LIMIT: '3' })
    const from = (remoteAddress: string) =>
      test.app.inject({ url: '/v1/pets', remoteAddress, headers: { authorization: 'Bearer wrong' } })
    for (let i = 1; i <= 3; i++) assert.equal((await from(`2001:db8:1:2::${i}`)).statusCode, 401)
    assert.equal((await from('2001:db8:1:2:abcd::9')).statusCode, 429)
    assert.equal((await from('2001:db8:1:3::1')).statusCode, 401)
  })

  it('behind a listed proxy, the client is the hop the proxy added: entries the client forged change nothing', async (t) => {
    const test = await build(t, { AUTH_FAILURE_LIMIT: '3', TRUST_PROXY: '10.0.0.0/8' })
    const { secret } = await test.newKey()
    // The proxy (10.0.0.9) appends the address it saw; whatever came before is the client's own text.
    const viaProxy = (forged: string, client: string, authorization: string) =>
      test.app.inject({
        url: '/v1/pets',
        remoteAddress: '10.0.0.9',
        headers: { authorization, 'x-forwarded-for': `${forged}, ${client}` },
      })
    for (let i = 1; i <= 3; i++)
      assert.equal((await viaProxy(`198.51.100.${i}`, '203.0.113.7', 'Bearer x')).statusCode, 401)
    assert.equal((await viaProxy('198.51.100.4', '203.0.113.7', 'Bearer x')).statusCode, 429)
    // Nor can a client get someone else blocked by naming them.
    assert.equal((await viaProxy('203.0.113.7', '192.0.2.50', `Bearer ${secret}`)).statusCode, 200)
  })

  it('with REDIS_URL, instances share one counter per key', async (t) => {
    const skip = await redisSkip()
    if (skip) return t.skip(skip)
    const env = { REDIS_URL, RATE_LIMIT: '4', RATE_LIMIT_WINDOW_SECONDS: '30' }
    const one = await build(t, env)
    const two = await build(t, { ...env, DATABASE_URL: one.config.databaseUrl })
    const { secret } = await one.newKey()
    const statuses = []
    for (const test of [one, two, one, two, one, two]) {
      statuses.push((await test.app.inject({ url: '/v1/pets', headers: bearer(secret) })).statusCode)
    }
    assert.deepEqual(statuses, [200, 200, 200, 200, 429, 429])
  })

  it('fails open when Redis does not answer: requests are served, and the failure is logged', async (t) => {
    const test = await build(t, { REDIS_URL: 'redis://127.0.0.1:1', RATE_LIMIT: '1' }, { captureLogs: true })
    const { secret } = await test.newKey()
    for (let i = 0; i < 3; i++) {
      const started = Date.now()
      assert.equal((await test.app.inject({ url: '/v1/pets', headers: bearer(secret) })).statusCode, 200)
      assert.ok(Date.now() - started < 2000)
    }
    assert.ok(test.logs.some((line) => String(line.msg).includes('rate-limit counters unavailable')))
  })
})
