import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { build, errorBody } from '../helper.ts'

describe('Health probes: /healthz and /readyz (point 10)', () => {
  it('GET /healthz answers 200 while the process is alive', async (t) => {
    const { app } = await build(t)
    const response = await app.inject({ url: '/healthz' })
    assert.equal(response.statusCode, 200)
    assert.deepEqual(response.json(), { status: 'ok' })
  })

  it('GET /readyz answers 200 when the database answers', async (t) => {
    const { app } = await build(t)
    const response = await app.inject({ url: '/readyz' })
    assert.equal(response.statusCode, 200)
    assert.deepEqual(response.json(), { status: 'ready' })
  })

  it('GET /readyz answers 503 with Retry-After when the database does not', async (t) => {
    const { app } = await build(t)
    await app.store.close() // the database is gone from under the app
    const response = await app.inject({ url: '/readyz' })
    assert.equal(response.statusCode, 503)
    assert.equal(errorBody(response).code, 'service_unavailable')
    assert.equal(response.headers['retry-after'], '5')
  })
})
