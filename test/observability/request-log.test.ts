import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { build } from '../helper.ts'

const completed = (logs: Record<string, unknown>[]) => logs.filter((line) => line.msg === 'request completed')

describe('request log', () => {
  it('writes one line per request: its id, method, URL, address, status, and time to the microsecond', async (t) => {
    const test = await build(t, {}, { captureLogs: true })
    const response = await test.app.inject({ url: '/healthz', remoteAddress: '192.0.2.7' })
    const [line] = completed(test.logs)
    assert.equal(line?.requestId, response.headers['x-request-id'])
    assert.deepEqual(line?.req, { method: 'GET', url: '/healthz', remoteAddress: '192.0.2.7' })
    assert.equal(line?.status, 200)
    assert.equal(typeof line?.ms, 'number')
    assert.match(String(line?.ms), /^\d+(\.\d{1,3})?$/)
  })

  it('escapes an address taken from X-Forwarded-For behind a trusted proxy, which the client wrote', async (t) => {
    const test = await build(t, { TRUST_PROXY: 'true' }, { captureLogs: true })
    const forged = '203.0.113.9"}\\'
    await test.app.inject({ url: '/healthz', headers: { 'x-forwarded-for': forged } })
    // The capture parses every line: an unescaped quote would have thrown there.
    const [line] = completed(test.logs)
    assert.deepEqual(line?.req, { method: 'GET', url: '/healthz', remoteAddress: forged })
  })
})
