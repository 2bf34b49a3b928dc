import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { bearer, build, errorBody, suiteApp, type TestApp } from '../helper.ts'

const PRECONDITION_FAILED = {
  code: 'precondition_failed',
  message:
    'The If-Match or If-None-Match condition does not hold: compare with the current ETag (answers without one match only "*").',
  status: 412,
}

/** A new key of `test`, and a pet made with it. */
async function setup(test: TestApp) {
  const { secret } = await test.newKey()
  const pet = await test.app.inject({
    method: 'POST',
    url: '/v1/pets',
    headers: bearer(secret),
    payload: { name: 'Rex', categoryId: 1 },
  })
  return { test, secret, petId: pet.json().id as number }
}

async function petCount(test: TestApp, secret: string): Promise<number> {
  return (await test.app.inject({ url: '/v1/pets?limit=100', headers: bearer(secret) })).json().length
}

describe('Conditional requests (RFC 9110 §13): against the ETag where there is one, else existence', () => {
  // Each test makes its own key and pet: one app serves them, but for the test that counts every pet
  // in the store (pets are global), which has its own. Few pets are made here: pet 999999 stays unknown.
  const shared = suiteApp()

  it('GET and HEAD: If-Match with tags other than the current one is 412, If-Match: * is served', async () => {
    const { test, secret, petId } = await setup(await shared())
    for (const method of ['GET', 'HEAD'] as const) {
      for (const url of [`/v1/pets/${petId}`, '/v1/pets', '/v1/pets?status=available']) {
        for (const tags of ['"abc"', 'W/"abc"', '"a", "b"']) {
          const refused = await test.app.inject({ method, url, headers: { ...bearer(secret), 'if-match': tags } })
          assert.equal(refused.statusCode, 412, `${method} ${url} ${tags}`)
          if (method === 'GET') assert.deepEqual(errorBody(refused), PRECONDITION_FAILED)
        }
        const any = await test.app.inject({ method, url, headers: { ...bearer(secret), 'if-match': '*' } })
        assert.equal(any.statusCode, 200, `${method} ${url} *`)
      }
    }
    // What described the 200 is not sent with the 412: no next-page link.
    await test.app.inject({
      method: 'POST',
      url: '/v1/pets',
      headers: bearer(secret),
      payload: { name: 'Max', categoryId: 1 },
    })
    assert.match(
      String((await test.app.inject({ url: '/v1/pets?limit=1', headers: bearer(secret) })).headers.link),
      /next/,
    )
    const page = await test.app.inject({ url: '/v1/pets?limit=1', headers: { ...bearer(secret), 'if-match': '"a"' } })
    assert.equal(page.statusCode, 412)
    assert.equal(page.headers.link, undefined)
  })

  it('files that have an ETag: If-Match compares it strongly, If-None-Match weakly, in lists', async () => {
    const { test } = await setup(await shared())
    for (const url of ['/portal/assets/portal.css', '/docs/assets/docs.js']) {
      const plain = await test.app.inject({ url })
      const etag = String(plain.headers.etag)
      assert.match(etag, /^"[\w-]+"$/, url)
      const status = async (headers: Record<string, string>, method: 'GET' | 'HEAD' = 'GET') =>
        (await test.app.inject({ method, url, headers })).statusCode
      assert.equal(await status({ 'if-match': etag }), 200, url)
      assert.equal(await status({ 'if-match': `"x", ${etag}` }), 200, url)
      assert.equal(await status({ 'if-match': `W/${etag}` }), 412, url)
      assert.equal(await status({ 'if-match': '"x"' }), 412, url)
      assert.equal(await status({ 'if-none-match': etag }), 304, url)
      assert.equal(await status({ 'if-none-match': etag }, 'HEAD'), 304, url)
      assert.equal(await status({ 'if-none-match': `W/${etag}` }), 304, url)
      assert.equal(await status({ 'if-none-match': `"x", ${etag}` }), 304, url)
      assert.equal(await status({ 'if-none-match': '"x"' }), 200, url)
    }
  })

  it('GET and HEAD: If-None-Match: * is 304 with no content; entity tags never match, so the answer is 200', async () => {
    const { test, secret, petId } = await setup(await shared())
    for (const method of ['GET', 'HEAD'] as const) {
      for (const url of [`/v1/pets/${petId}`, '/v1/pets']) {
        const plain = await test.app.inject({ method, url, headers: bearer(secret) })
        const notModified = await test.app.inject({ method, url, headers: { ...bearer(secret), 'if-none-match': '*' } })
        assert.equal(notModified.statusCode, 304, `${method} ${url}`)
        assert.equal(notModified.body, '')
        assert.equal(notModified.headers['content-type'], undefined)
        // None, or the 200's own length (RFC 9110 §8.6).
        const length = notModified.headers['content-length']
        assert.ok(length === undefined || length === plain.headers['content-length'], `${method} ${url}: ${length}`)
        const tags = await test.app.inject({ method, url, headers: { ...bearer(secret), 'if-none-match': '"abc"' } })
        assert.equal(tags.statusCode, 200)
        assert.equal(tags.body, plain.body)
      }
    }
    // The deprecated operation says so on its 304 too.
    const deprecated = await test.app.inject({
      url: `/v1/pets/${petId}`,
      headers: { ...bearer(secret), 'if-none-match': '*' },
    })
    assert.equal(deprecated.headers.deprecation, '@1767225600')
  })

  it('POST /v1/pets: a failed condition is 412 and stores nothing, whatever the body', async (t) => {
    const { test, secret } = await setup(await build(t))
    for (const [condition, payload] of [
      [{ 'if-match': '"abc"' }, { name: 'Max', categoryId: 1 }],
      [{ 'if-none-match': '*' }, { name: 'Max', categoryId: 1 }],
      // Conditions come before the content is read or judged.
      [{ 'if-match': '"abc"' }, { name: '' }],
      [{ 'if-match': '"abc"' }, '{"name": "Max", "categ'],
    ] as const) {
      const response = await test.app.inject({
        method: 'POST',
        url: '/v1/pets',
        headers: {
          ...bearer(secret),
          ...condition,
          'content-type': 'application/json',
          'idempotency-key': `k-${Object.values(condition)[0]}`,
        },
        payload: typeof payload === 'string' ? payload : JSON.stringify(payload),
      })
      assert.equal(response.statusCode, 412, JSON.stringify(condition))
      assert.deepEqual(errorBody(response), PRECONDITION_FAILED)
    }
    assert.equal(await petCount(test, secret), 1)
    for (const condition of [{ 'if-match': '*' }, { 'if-none-match': '"abc"' }]) {
      const response = await test.app.inject({
        method: 'POST',
        url: '/v1/pets',
        headers: { ...bearer(secret), ...condition },
        payload: { name: 'Max', categoryId: 1 },
      })
      assert.equal(response.statusCode, 201, JSON.stringify(condition))
    }
    assert.equal(await petCount(test, secret), 3)
  })

  it('POST /v1/messages: the list of messages is the target, so If-Match: * holds and If-None-Match: * fails', async () => {
    const { test, secret } = await setup(await shared())
    const post = (condition: Record<string, string>) =>
      test.app.inject({
        method: 'POST',
        url: '/v1/messages',
        headers: { ...bearer(secret), ...condition },
        payload: { message: 'hello' },
      })
    // GET /v1/messages gives the collection a representation, without an ETag.
    assert.equal((await post({ 'if-match': '*' })).statusCode, 202)
    assert.equal((await post({ 'if-match': '"abc"' })).statusCode, 412)
    assert.equal((await post({ 'if-none-match': '*' })).statusCode, 412)
  })

  it('conditions on a request that would not succeed anyway, and date conditions, are ignored', async () => {
    const { test, secret, petId } = await setup(await shared())
    const noKey = await test.app.inject({ url: `/v1/pets/${petId}`, headers: { 'if-match': '"abc"' } })
    assert.equal(noKey.statusCode, 401)
    const missing = await test.app.inject({ url: '/v1/pets/999999', headers: { ...bearer(secret), 'if-match': '"a"' } })
    assert.equal(missing.statusCode, 404)
    const past = 'Thu, 01 Jan 1970 00:00:00 GMT'
    const dated = await test.app.inject({
      url: `/v1/pets/${petId}`,
      headers: { ...bearer(secret), 'if-unmodified-since': past, 'if-modified-since': 'Fri, 01 Jan 2100 00:00:00 GMT' },
    })
    assert.equal(dated.statusCode, 200)
    const created = await test.app.inject({
      method: 'POST',
      url: '/v1/pets',
      headers: { ...bearer(secret), 'if-unmodified-since': past },
      payload: { name: 'Max', categoryId: 1 },
    })
    assert.equal(created.statusCode, 201)
  })

  it('a condition on an order or a webhook endpoint that is not there is ignored: 404, as without it', async (t) => {
    const test = await build(t, { EXPERIMENTAL_FEATURES: 'webhooks' })
    const { secret } = await test.newKey()
    const headers = { ...bearer(secret), 'animal-store-beta': 'orders, webhooks', 'content-type': 'application/json' }
    const pet = await test.app.inject({
      method: 'POST',
      url: '/v1/pets',
      headers,
      payload: { name: 'Rex', categoryId: 1 },
    })
    const order = await test.app.inject({
      method: 'POST',
      url: '/v1/store/orders',
      headers,
      payload: { petId: pet.json().id },
    })
    const endpoint = await test.app.inject({
      method: 'POST',
      url: '/v1/webhook-endpoints',
      headers,
      payload: { url: 'https://example.com/hook', events: ['order.*'] },
    })
    const missing = 'AAAAAAAAAAAAAAAA'
    for (const [method, path, body] of [
      ['POST', `/v1/store/orders/${order.json().id}/cancel`, undefined],
      ['PATCH', `/v1/webhook-endpoints/${endpoint.json().id}`, { description: 'x' }],
      ['DELETE', `/v1/webhook-endpoints/${endpoint.json().id}`, undefined],
      ['POST', `/v1/webhook-endpoints/${endpoint.json().id}/rotate-secret`, undefined],
    ] as const) {
      const there = { method, url: path, headers: { ...headers, 'if-match': '"x"' }, ...(body && { payload: body }) }
      if (body === undefined) delete (there.headers as Record<string, string>)['content-type']
      const refused = await test.app.inject(there)
      assert.equal(refused.statusCode, 412, `${method} ${path}`)
      const gone = path.replace(/(ord|we)_\w+/, (id) => `${id.slice(0, id.indexOf('_'))}_${missing}`)
      const absent = await test.app.inject({ ...there, url: gone })
      assert.equal(absent.statusCode, 404, `${method} ${gone}: ${absent.body}`)
      // An id the schema refuses is never looked up (PostgreSQL cannot take a NUL): its 400.
      const malformed = path.replace(/(ord|we)_\w+/, '%00')
      const refusedId = await test.app.inject({ ...there, url: malformed })
      assert.equal(refusedId.statusCode, 400, `${method} ${malformed}: ${refusedId.body}`)
    }
    // A resend's target is the delivery: one that is not there is 404 under an endpoint that is.
    const resend = await test.app.inject({
      method: 'POST',
      url: `/v1/webhook-endpoints/${endpoint.json().id}/deliveries/dlv_${missing}/redeliver`,
      headers: { ...bearer(secret), 'animal-store-beta': 'webhooks', 'if-match': '"x"' },
    })
    assert.equal(resend.statusCode, 404, resend.body)
  })
})
