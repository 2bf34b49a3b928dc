import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { bearer, build, errorBody, loggedAsOutage, suiteApp } from '../helper.ts'

describe('Health probes: /healthz and /readyz (point 10)', () => {
  // The probes of a working app share one; the tests that close its store or drain it have their own.
  const shared = suiteApp()

  it('GET /healthz answers 200 while the process is alive', async () => {
    const { app } = await shared()
    const response = await app.inject({ url: '/healthz' })
    assert.equal(response.statusCode, 200)
    assert.deepEqual(response.json(), { status: 'ok' })
  })

  it('GET /readyz answers 200 when the database answers', async () => {
    const { app } = await shared()
    const response = await app.inject({ url: '/readyz' })
    assert.equal(response.statusCode, 200)
    assert.deepEqual(response.json(), { status: 'ready', outbox: { depth: 0, oldestAgeSeconds: null } })
  })

  it('GET /readyz answers 503 with Retry-After when the database does not, logged in one warn line', async (t) => {
    const { app, logs } = await build(t, {}, { captureLogs: true })
    await app.store.close() // the database is gone from under the app
    const response = await app.inject({ url: '/readyz' })
    assert.equal(response.statusCode, 503)
    assert.equal(errorBody(response).code, 'service_unavailable')
    assert.equal(response.headers['retry-after'], '5')
    // A balancer probes every few seconds through an outage: no stack at error each time.
    assert.match(String(loggedAsOutage(logs, response).detail), /^not ready: /)
  })

  it('once the shutdown begins, GET /readyz answers 503 and every answer closes its connection', async (t) => {
    const test = await build(t, {}, { captureLogs: true })
    const { secret } = await test.newKey()
    const before = await test.app.inject({ url: '/v1/pets', headers: bearer(secret) })
    assert.notEqual(before.headers.connection, 'close')
    test.app.startDraining()
    const ready = await test.app.inject({ url: '/readyz' })
    assert.equal(ready.statusCode, 503)
    assert.equal(errorBody(ready).message, 'The service is shutting down.')
    assert.equal(ready.headers['retry-after'], '5')
    // An answer we chose, not a failure: at info, in its request line.
    const refused = test.logs.find((line) => line.requestId === ready.headers['x-request-id'] && line.code)
    assert.deepEqual([refused?.level, refused?.msg, refused?.status], [30, 'request completed', 503])
    const pets = await test.app.inject({ url: '/v1/pets', headers: bearer(secret) })
    assert.equal(pets.statusCode, 200)
    assert.equal(pets.headers.connection, 'close')
    assert.equal((await test.app.inject({ url: '/healthz' })).statusCode, 200)
  })
})
