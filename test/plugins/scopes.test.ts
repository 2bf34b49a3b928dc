import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { grantedScopes, parseScopes } from '../../src/domain/scopes.ts'
import { bearer, errorBody, suiteApp, type TestApp } from '../helper.ts'

/** A key of a new account with these scopes (stored text; null: every scope), opted in to orders. */
async function keyWith(test: TestApp, scopes: string | null) {
  const { secret } = await test.newKey({ scopes })
  return { ...bearer(secret), 'animal-store-beta': 'orders' }
}

describe('Scopes: each operation needs its scope; write implies read', () => {
  // Keys of their own, and no pet stored (the first test finds none): one app for both.
  const shared = suiteApp()

  it('a key without the scope gets 403 insufficient_scope with the RFC 6750 challenge naming it', async () => {
    const test = await shared()
    const reader = await keyWith(test, 'pets:read')
    assert.equal((await test.app.inject({ url: '/v1/pets', headers: reader })).statusCode, 200)
    const refused = await test.app.inject({
      method: 'POST',
      url: '/v1/pets',
      headers: reader,
      payload: { name: 'Rex', categoryId: 1 },
    })
    assert.equal(refused.statusCode, 403)
    assert.deepEqual(errorBody(refused), {
      code: 'insufficient_scope',
      message: 'This API key lacks the scope pets:write.',
      status: 403,
    })
    assert.equal(
      refused.headers['www-authenticate'],
      'Bearer realm="animal-store", error="insufficient_scope", scope="pets:write"',
    )
    assert.equal((await test.app.inject({ url: '/v1/pets?limit=100', headers: reader })).json().length, 0)
    for (const [method, url, scope] of [
      ['POST', '/v1/messages', 'messages:write'],
      ['GET', '/v1/store/orders', 'orders:read'],
      ['POST', '/v1/store/orders', 'orders:write'],
      ['POST', '/v1/store/orders/ord_x/cancel', 'orders:write'],
    ] as const) {
      const response = await test.app.inject({ method, url, headers: reader, payload: {} })
      assert.equal(response.statusCode, 403, url)
      assert.match(response.headers['www-authenticate'] as string, new RegExp(`scope="${scope}"`))
    }
  })

  it('write implies read; a key made without scopes has them all; the scope check comes before the beta opt-in', async () => {
    const test = await shared()
    const writer = await keyWith(test, 'orders:write pets:write')
    const all = await keyWith(test, null)
    for (const url of ['/v1/pets', '/v1/store/orders', '/v1/store/inventory']) {
      assert.equal((await test.app.inject({ url, headers: writer })).statusCode, 200, url)
      assert.equal((await test.app.inject({ url, headers: all })).statusCode, 200, url)
    }
    const messages = await test.app.inject({
      method: 'POST',
      url: '/v1/messages',
      headers: all,
      payload: { message: 'hi' },
    })
    assert.equal(messages.statusCode, 202)
    const { 'animal-store-beta': _, ...noOptIn } = await keyWith(test, 'pets:read')
    assert.equal((await test.app.inject({ url: '/v1/store/orders', headers: noOptIn })).statusCode, 403)
  })

  it('parses the CLI and portal form of scopes, refusing unknown ones; stores them in a fixed order', () => {
    assert.equal(parseScopes('orders:write,pets:read'), 'pets:read orders:write')
    assert.equal(parseScopes(' pets:read , pets:read '), 'pets:read')
    assert.throws(() => parseScopes('pets:admin'), /Unknown scope "pets:admin"/)
    assert.throws(() => parseScopes(','), /at least one scope/)
    assert.deepEqual([...(grantedScopes('orders:write') ?? [])].sort(), ['orders:read', 'orders:write'])
    assert.equal(grantedScopes(null), null)
  })
})
