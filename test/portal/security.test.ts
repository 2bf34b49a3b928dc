/**
 * What the portal and the reference page must never get wrong: security headers, cookie flags,
 * CSRF on every form, sane HTML for every failure, and an API under /v1 that is exactly as before
 * (JSON only, bearer keys only, no cookies, no CORS).
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import type { FastifyInstance } from 'fastify'
import { API_OPERATIONS, bearer, errorBody, suiteApp } from '../helper.ts'
import { csrfOf, FormBrowser, newAddress, newEmail, PASSWORD, signedInBrowser } from './browser.ts'

const PAGES = ['/portal/sign-in', '/portal/sign-up', '/portal/nowhere', '/docs', '/docs/nowhere']

function assertSecurityHeaders(headers: Record<string, unknown>, url: string) {
  const csp = String(headers['content-security-policy'])
  assert.match(csp, /default-src 'none'/, url)
  assert.match(csp, /script-src 'self'(;|$)/, `${url}: scripts only from this origin`)
  assert.match(csp, /style-src 'self'(;|$)/, `${url}: styles only from this origin`)
  assert.match(csp, /frame-ancestors 'none'/, url)
  assert.match(csp, /form-action 'self'/, url)
  assert.doesNotMatch(csp, /unsafe-inline|unsafe-eval|\*/, url)
  assert.equal(headers['x-content-type-options'], 'nosniff', url)
  assert.equal(headers['x-frame-options'], 'DENY', url)
  assert.equal(headers['referrer-policy'], 'no-referrer', url)
  assert.equal(headers['access-control-allow-origin'], undefined, `${url}: no CORS`)
}

/** Posts the sign-up form of `page` (its CSRF token, a new email) with `headers` and nothing else: no browser. */
function postSignUp(app: FastifyInstance, page: string, headers: Record<string, string>) {
  return app.inject({
    method: 'POST',
    url: '/portal/sign-up',
    headers: { ...headers, 'content-type': 'application/x-www-form-urlencoded' },
    payload: new URLSearchParams({
      _csrf: csrfOf(page, '/portal/sign-up'),
      email: newEmail(),
      password: PASSWORD,
      confirm: PASSWORD,
    }).toString(),
  })
}

// Each test adds only what it looks at (its accounts, keys and browsers, each browser of an address
// of its own): one app serves every suite of this file, and another one behind a proxy.
const shared = suiteApp()
const proxied = suiteApp({ TRUST_PROXY: 'true' })

describe('Portal security headers', () => {
  for (const url of PAGES) {
    it(`${url}: CSP without inline scripts or styles, nosniff, no framing, and HTML`, async () => {
      const { app } = await shared()
      const response = await app.inject({ url })
      assertSecurityHeaders(response.headers, url)
      assert.match(String(response.headers['content-type']), /^text\/html; charset=utf-8/)
      assert.match(response.body, /^<!doctype html>\n<html lang="en">/)
    })
  }

  it('HSTS only on pages fetched over HTTPS (here through a TRUST_PROXY proxy), never over plain HTTP (RFC 6797 §7.2)', async () => {
    const plain = (await shared()).app
    const behindProxy = (await proxied()).app
    for (const url of PAGES) {
      const overHttp = await plain.inject({ url })
      assert.equal(overHttp.headers['strict-transport-security'], undefined, url)
      const overHttps = await behindProxy.inject({ url, headers: { 'x-forwarded-proto': 'https' } })
      assert.equal(overHttps.headers['strict-transport-security'], 'max-age=31536000; includeSubDomains', url)
    }
  })

  it('pages carry no inline script, inline style or event handler (the CSP would block them)', async () => {
    const { app } = await shared()
    const { browser } = await signedInBrowser(app)
    await browser.createKey('laptop')
    const pages = [browser.last?.body as string]
    for (const url of ['/portal/keys', '/portal/messages', '/portal/nowhere', '/docs'])
      pages.push((await browser.get(url)).body)
    pages.push((await app.inject({ url: '/portal/sign-up' })).body)
    for (const page of pages) {
      for (const script of page.match(/<script[^>]*>/g) ?? []) assert.match(script, /src="\/(portal|docs)\/assets\//)
      assert.doesNotMatch(page, /<script[^>]*>[^<]/, 'inline script')
      assert.doesNotMatch(page, /<style|\sstyle=/, 'inline style')
      assert.doesNotMatch(page, /\son[a-z]+=/, 'event handler attribute')
    }
  })

  it('portal pages are never cached; assets are revalidated with an ETag', async () => {
    const { app } = await shared()
    assert.equal((await app.inject({ url: '/portal/sign-in' })).headers['cache-control'], 'no-store')
    for (const url of ['/portal/assets/portal.css', '/portal/assets/portal.js', '/docs/assets/swagger-ui-bundle.js']) {
      const asset = await app.inject({ url })
      assert.equal(asset.statusCode, 200, url)
      assert.equal(asset.headers['cache-control'], 'no-cache', url)
      const again = await app.inject({ url, headers: { 'if-none-match': String(asset.headers.etag) } })
      assert.equal(again.statusCode, 304, url)
    }
  })
})

describe('Portal cookies', () => {
  it('over plain HTTP to 127.0.0.1 (local development): HttpOnly, SameSite=Lax, Path=/portal, not Secure', async () => {
    const { app } = await shared()
    const browser = new FormBrowser(app, { host: '127.0.0.1:8080' }, { remoteAddress: newAddress() })
    const response = await browser.signUp(newEmail())
    const session = response.cookies.find((c) => c.name === 'as_session')
    assert.ok(session)
    assert.deepEqual(
      { httpOnly: session.httpOnly, sameSite: session.sameSite, path: session.path, secure: session.secure },
      { httpOnly: true, sameSite: 'Lax', path: '/portal', secure: undefined },
    )
  })

  for (const [what, headers, served] of [
    ['any other host', { host: 'portal.animal-store.example' }, shared],
    ['HTTPS behind a proxy (TRUST_PROXY)', { host: 'localhost', 'x-forwarded-proto': 'https' }, proxied],
  ] as const) {
    it(`for ${what}: every cookie is Secure as well as HttpOnly and SameSite=Lax`, async () => {
      const { app } = await served()
      const page = await app.inject({ url: '/portal/sign-up', headers })
      const csrf = page.cookies.find((c) => c.name === 'as_csrf')
      assert.ok(csrf)
      assert.equal(csrf.secure, true)
      const response = await postSignUp(app, page.body, { ...headers, cookie: `as_csrf=${csrf.value}` })
      assert.equal(response.statusCode, 303)
      const session = response.cookies.find((c) => c.name === 'as_session')
      assert.deepEqual(
        { secure: session?.secure, httpOnly: session?.httpOnly, sameSite: session?.sameSite },
        { secure: true, httpOnly: true, sameSite: 'Lax' },
      )
    })
  }
})

describe('Portal CSRF protection', () => {
  async function signedInWithKey() {
    const test = await shared()
    const { browser, accountId } = await signedInBrowser(test.app)
    await browser.createKey('laptop')
    const [key] = await test.app.store.listApiKeys(accountId)
    return { ...test, browser, accountId, keyId: key?.id as string }
  }

  const forged: [string, (token: string) => Record<string, string>, Record<string, string>][] = [
    ['no token', () => ({}), {}],
    ['a made-up token', () => ({ _csrf: 'x'.repeat(43) }), {}],
    [
      'a token of another page, with one character changed',
      // The last character, made different whatever it was (a fixed "A" would sometimes be no change).
      (token) => ({ _csrf: `${token.slice(0, -1)}${token.endsWith('A') ? 'B' : 'A'}` }),
      {},
    ],
    ['the right token, sent from another site', (token) => ({ _csrf: token }), { 'sec-fetch-site': 'cross-site' }],
  ]
  for (const [what, form, headers] of forged) {
    it(`refuses every form with ${what}: 403 HTML, and nothing happens`, async () => {
      const { app, browser, accountId, keyId } = await signedInWithKey()
      const token = csrfOf((await browser.get('/portal/keys')).body, '/portal/keys')
      for (const [action, fields] of [
        ['/portal/keys', { name: 'forged', expires: 'never' }],
        [`/portal/keys/${keyId}/revoke`, {}],
        ['/portal/sign-out', {}],
        ['/portal/sign-in', { email: 'x@example.com', password: PASSWORD }],
        ['/portal/sign-up', { email: newEmail(), password: PASSWORD, confirm: PASSWORD }],
      ] as const) {
        const response = await browser.post(action, { ...fields, ...form(token) }, headers)
        assert.equal(response.statusCode, 403, `${action}: ${response.statusCode}`)
        assert.match(String(response.headers['content-type']), /^text\/html/)
        assert.match(response.body, /This form has expired/)
      }
      const keys = await app.store.listApiKeys(accountId)
      assert.deepEqual(
        keys.map((k) => [k.name, k.revokedAt]),
        [['laptop', null]],
      )
      assert.equal((await browser.get('/portal/keys')).statusCode, 200, 'still signed in')
    })
  }

  it("refuses a token taken from another browser's page (it is bound to that browser's cookies)", async () => {
    const { app, browser, accountId } = await signedInWithKey()
    const { browser: attacker } = await signedInBrowser(app)
    const theirs = csrfOf((await attacker.get('/portal/keys')).body, '/portal/keys')
    const response = await browser.post('/portal/keys', { _csrf: theirs, name: 'forged', expires: 'never' })
    assert.equal(response.statusCode, 403)
    assert.equal((await app.store.listApiKeys(accountId)).length, 1)
  })

  it('refuses a form sent without the CSRF cookie (e.g. cookies blocked), even with a token from a page', async () => {
    const { app } = await shared()
    const page = await app.inject({ url: '/portal/sign-up' })
    const response = await postSignUp(app, page.body, {})
    assert.equal(response.statusCode, 403)
  })
})

describe('Portal failures are HTML pages', () => {
  const cases: [
    string,
    { method: 'GET' | 'POST' | 'DELETE'; url: string; headers?: Record<string, string>; payload?: string },
    number,
  ][] = [
    ['an unknown page', { method: 'GET', url: '/portal/nowhere' }, 404],
    [
      'a JSON body',
      { method: 'POST', url: '/portal/sign-in', headers: { 'content-type': 'application/json' }, payload: '{}' },
      415,
    ],
    [
      'a body over BODY_LIMIT',
      {
        method: 'POST',
        url: '/portal/sign-in',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        payload: `a=${'x'.repeat(140_000)}`,
      },
      413,
    ],
    ['a malformed key id', { method: 'GET', url: '/portal/keys/not-a-key/revoke' }, 400],
    ['a wrong method on a portal page', { method: 'DELETE', url: '/portal/sign-in' }, 405],
    ['a wrong method on the reference', { method: 'POST', url: '/docs' }, 405],
    // Answered before any body is read: a broken or oversized JSON body changes nothing.
    [
      'a wrong method on the reference, with a broken JSON body',
      { method: 'POST', url: '/docs', headers: { 'content-type': 'application/json' }, payload: '{bad' },
      405,
    ],
    [
      'an unknown reference page, with an oversized body',
      {
        method: 'POST',
        url: '/docs/x',
        headers: { 'content-type': 'application/json' },
        payload: `"${'x'.repeat(140_000)}"`,
      },
      404,
    ],
    // Fastify cannot route these, so they never reach the portal's own hooks.
    ['an undecodable URL', { method: 'GET', url: '/portal/%zz' }, 400],
    ['a key id too long to route', { method: 'POST', url: `/portal/keys/${'k'.repeat(5000)}/revoke` }, 400],
    ['an undecodable reference URL', { method: 'GET', url: '/docs/%zz' }, 400],
  ]
  for (const [what, request, status] of cases) {
    it(`${what}: ${status}, as an HTML page with the security headers`, async () => {
      const { app } = await shared()
      const response = await app.inject(request)
      assert.equal(response.statusCode, status)
      assert.match(String(response.headers['content-type']), /^text\/html; charset=utf-8/)
      assert.match(response.body, /<h1>[^<]+<\/h1>/)
      assertSecurityHeaders(response.headers, request.url)
      assert.match(String(response.headers['x-request-id']), /^[0-9a-f-]{36}$/)
      if (status === 405) assert.match(String(response.headers.allow), /^GET(, HEAD)?/)
      // The page says what the status says.
      const heading = { 404: 'Page not found', 405: 'Method not allowed' }[status as 404 | 405]
      if (heading) assert.match(response.body, new RegExp(`<h1>${heading}</h1>`))
    })
  }
})

describe('The API under /v1 is untouched by the portal', () => {
  it('still answers 415 to a form body, with the JSON error body', async () => {
    const test = await shared()
    const { secret } = await test.newKey()
    const response = await test.app.inject({
      method: 'POST',
      url: '/v1/pets',
      headers: { ...bearer(secret), 'content-type': 'application/x-www-form-urlencoded' },
      payload: 'name=Rex&categoryId=1',
    })
    assert.equal(response.statusCode, 415)
    assert.equal(errorBody(response).code, 'unsupported_media_type')
  })

  it('does not take a portal session cookie as a credential (401 missing_api_key), and sends no portal headers', async () => {
    const { app } = await shared()
    const { browser } = await signedInBrowser(app)
    const cookie = [...browser.cookies].map(([name, value]) => `${name}=${value}`).join('; ')
    const response = await app.inject({ url: '/v1/pets', headers: { cookie } })
    assert.equal(response.statusCode, 401)
    assert.equal(errorBody(response).code, 'missing_api_key')
    assert.equal(response.headers['content-security-policy'], undefined)
    assert.equal(response.headers['set-cookie'], undefined)
  })

  it('answers no CORS preflight: no Access-Control headers on OPTIONS, for the API or the portal', async () => {
    const { app } = await shared()
    for (const url of ['/v1/pets', '/portal/sign-in']) {
      const response = await app.inject({
        method: 'OPTIONS',
        url,
        headers: { origin: 'https://evil.example', 'access-control-request-method': 'POST' },
      })
      assert.notEqual(response.statusCode, 204, url)
      assert.equal(response.headers['access-control-allow-origin'], undefined, url)
      assert.equal(response.headers['access-control-allow-credentials'], undefined, url)
    }
  })

  it('keeps the OpenAPI document to the API: no portal or reference routes in it', async () => {
    const { app } = await shared()
    const document = (await app.inject({ url: '/v1/openapi.json' })).json()
    assert.deepEqual(Object.keys(document.paths).sort(), Object.keys(API_OPERATIONS))
  })
})
