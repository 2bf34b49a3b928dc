/**
 * Portal keys and messages: create (the secret shown once), list (never the secret), revoke
 * (refused by the API at once, and only for the owner), and the account's recent messages.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { hashApiKey } from '../../src/domain/api-keys.ts'
import { SCOPES } from '../../src/domain/scopes.ts'
import { bearer, errorBody, suiteApp } from '../helper.ts'
import { csrfOf, FormBrowser, heading, newAddress, signedInBrowser } from './browser.ts'

const DAY_MS = 86_400_000

// Each test looks only at its own account's keys and messages: one app serves the file.
const shared = suiteApp()

/** A browser signed in to a new account of its own (with a cheap password hash: see browser.ts). */
async function signedIn() {
  const test = await shared()
  return { ...test, ...(await signedInBrowser(test.app)) }
}

describe('Portal: create a key', () => {
  it('makes a key limited to the scopes left checked; none checked is refused; every box is every scope', async () => {
    const { app, browser, accountId } = await signedIn()
    const form = await browser.get('/portal/keys')
    for (const scope of SCOPES) {
      assert.match(form.body, new RegExp(`name="scope-${scope.replace(':', '-')}" checked`), scope)
    }
    const secret = await browser.createKey('reader', 'never', ['pets:read'])
    const [reader] = await app.store.listApiKeys(accountId)
    assert.equal(reader?.scopes, 'pets:read')
    assert.equal((await app.inject({ url: '/v1/pets', headers: bearer(secret) })).statusCode, 200)
    const refused = await app.inject({
      method: 'POST',
      url: '/v1/pets',
      headers: bearer(secret),
      payload: { name: 'Rex', categoryId: 1 },
    })
    assert.equal(refused.statusCode, 403)
    await browser.createKey('full')
    assert.equal((await app.store.listApiKeys(accountId))[0]?.scopes, null)
    const list = await browser.get('/portal/keys')
    assert.match(list.body, /<td data-label="Scopes"><code>pets:read<\/code><\/td>/)
    assert.match(list.body, /<td data-label="Scopes">All<\/td>/)
    const none = await browser.submit('/portal/keys', '/portal/keys', { name: 'nothing', expires: 'never' })
    assert.equal(none.statusCode, 400)
    assert.match(none.body, /Choose at least one thing the key may do\./)
    assert.equal((await app.store.listApiKeys(accountId)).length, 2)
  })

  it('shows the new key once, stores only its hash, and the API accepts it', async () => {
    const { app, browser, accountId } = await signedIn()
    const secret = await browser.createKey('laptop')
    assert.match(secret, /^as_test_[0-9A-Za-z]{38}$/)
    assert.match(browser.last?.body ?? '', /Copy it now: it is shown only this once\./)
    assert.equal(browser.last?.headers['cache-control'], 'no-store')
    const [key] = await app.store.listApiKeys(accountId)
    assert.equal(key?.name, 'laptop')
    assert.equal(key?.expiresAt, null)
    assert.equal((await app.store.findApiKeyByHash(hashApiKey(secret)))?.id, key?.id)

    const list = await browser.get('/portal/keys')
    assert.ok(!list.body.includes(secret), 'the list shows the secret')
    assert.ok(!list.body.includes(secret.slice(0, 20)), 'the list shows more than the prefix')
    assert.match(list.body, new RegExp(`<code>${secret.slice(0, 12)}…</code>`))

    const api = await app.inject({ url: '/v1/pets', headers: bearer(secret) })
    assert.equal(api.statusCode, 200)
  })

  it('sets the chosen expiry (30 days) and lists name, prefix, created, last used, expires and state', async () => {
    const { app, browser, accountId } = await signedIn()
    const before = Date.now()
    const secret = await browser.createKey('ci runner', '30d')
    const [key] = await app.store.listApiKeys(accountId)
    assert.ok(key?.expiresAt)
    const lifetime = Date.parse(key.expiresAt) - before
    assert.ok(lifetime >= 30 * DAY_MS && lifetime < 30 * DAY_MS + 60_000, `expires in ${lifetime} ms`)
    await app.store.touchApiKeys([{ id: key.id, at: '2030-01-02T03:04:00.000Z' }])
    const list = await browser.get('/portal/keys')
    const row = /<tbody>([\s\S]*?)<\/tbody>/.exec(list.body)?.[1] ?? ''
    assert.match(row, /<th scope="row">ci runner<\/th>/)
    assert.match(row, new RegExp(`${secret.slice(0, 12)}…`))
    assert.match(row, new RegExp(`<time datetime="${key.createdAt}">`))
    assert.match(row, /<time datetime="2030-01-02T03:04:00.000Z">2030-01-02 03:04 UTC<\/time>/)
    assert.match(row, new RegExp(`<time datetime="${key.expiresAt}">`))
    assert.match(row, /<td data-label="State">Active<\/td>/)
  })

  const refused: [string, Record<string, string>, RegExp][] = [
    ['an empty name', { name: '', expires: 'never' }, /Give the key a name of 1 to 100 characters/],
    ['a blank name', { name: '   ', expires: 'never' }, /Give the key a name/],
    ['a name of 101 characters', { name: 'x'.repeat(101), expires: 'never' }, /Give the key a name/],
    // What a form sent in another encoding than UTF-8 (name=%FF%FE) is decoded to.
    ['a name of bytes that are not UTF-8', { name: 'x\uFFFD\uFFFD', expires: 'never' }, /Give the key a name/],
    ['an expiry that is not offered', { name: 'laptop', expires: '2d' }, /Choose one of the offered expiry times/],
    ['an unknown field', { name: 'laptop', expires: 'never', scope: 'admin' }, /not filled in as expected/],
  ]
  for (const [what, fields, message] of refused) {
    it(`refuses ${what} with 400 and a message on the page, and creates no key`, async () => {
      const { app, browser, accountId } = await signedIn()
      const response = await browser.submit('/portal/keys', '/portal/keys', fields)
      assert.equal(response.statusCode, 400)
      assert.match(response.body, message)
      assert.deepEqual(await app.store.listApiKeys(accountId), [])
    })
  }

  it('refuses a form body with a bad escape (%zz, bytes that are not UTF-8) with 400 instead of storing its text', async () => {
    const { app, browser, accountId } = await signedIn()
    for (const name of ['%FF', '%ED%A0%80', '%zz']) {
      const page = await browser.get('/portal/keys')
      const csrf = encodeURIComponent(csrfOf(page.body, '/portal/keys'))
      const response = await browser.post('/portal/keys', `_csrf=${csrf}&name=${name}&expires=never`)
      assert.equal(response.statusCode, 400, name)
      assert.match(response.body, /<h1>Something is wrong with this request<\/h1>/)
    }
    assert.deepEqual(await app.store.listApiKeys(accountId), [])
  })

  it('a refused name with a NUL is shown back without the NUL (U+FFFD, as browsers would)', async () => {
    const { browser } = await signedIn()
    const response = await browser.submit('/portal/keys', '/portal/keys', { name: 'a\u0000b', expires: 'never' })
    assert.equal(response.statusCode, 400)
    assert.ok(!response.body.includes('\u0000'), 'a NUL reached the page')
    assert.match(response.body, /value="a\uFFFDb"/)
  })

  it('escapes what people typed: a key name with markup is shown as text', async () => {
    const { browser } = await signedIn()
    await browser.createKey('<img src=x onerror=alert(1)>')
    const list = await browser.get('/portal/keys')
    assert.ok(!list.body.includes('<img src=x'), 'markup in a name reached the page')
    assert.match(list.body, /&lt;img src=x onerror=alert\(1\)&gt;/)
  })
})

describe('Portal: a new key, shown once after a redirect', () => {
  it('answers the form with 303 (the key in an encrypted cookie, never the URL); a reload makes no second key and shows it no more', async () => {
    const { app, browser, accountId } = await signedIn()
    const posted = await browser.submit('/portal/keys', '/portal/keys', {
      name: 'laptop',
      expires: 'never',
      ...Object.fromEntries(SCOPES.map((scope) => [`scope-${scope.replace(':', '-')}`, 'on'])),
    })
    assert.equal(posted.statusCode, 303)
    assert.equal(posted.headers.location, '/portal/keys/new')
    const flash = posted.cookies.find((c) => c.name === 'as_flash')
    assert.ok(flash)
    assert.deepEqual(
      { httpOnly: flash.httpOnly, sameSite: flash.sameSite, path: flash.path, maxAge: flash.maxAge },
      { httpOnly: true, sameSite: 'Lax', path: '/portal', maxAge: 300 },
    )

    const shown = await browser.get('/portal/keys/new')
    assert.equal(shown.statusCode, 200)
    assert.equal(heading(shown.body), 'Your new API key')
    const secret = /id="secret"[^>]*value="(as_test_[0-9A-Za-z]+)"/.exec(shown.body)?.[1]
    assert.ok(secret)
    assert.ok(
      !flash.value.includes(secret) && !flash.value.includes(secret.slice(8)),
      'the cookie holds the key in clear',
    )
    // Shown: the cookie is cleared with the page.
    assert.equal(shown.cookies.find((c) => c.name === 'as_flash')?.value, '')
    assert.equal(browser.cookies.has('as_flash'), false)

    const reloaded = await browser.get('/portal/keys/new')
    assert.equal(reloaded.statusCode, 303)
    assert.equal(reloaded.headers.location, '/portal/keys?notice=secret-shown')
    const list = await browser.follow(reloaded)
    assert.ok(!list.body.includes(secret), 'the key is shown again')
    assert.match(list.body, /A new key is shown only once, so it is not shown again\./)
    assert.equal((await app.store.listApiKeys(accountId)).length, 1)
  })

  it('opens only in the session it was made in: another session of the same account, given the cookie, sees no key', async () => {
    const { app, browser, email } = await signedIn()
    const posted = await browser.submit('/portal/keys', '/portal/keys', {
      name: 'laptop',
      expires: 'never',
      'scope-pets-read': 'on',
    })
    const flash = posted.cookies.find((c) => c.name === 'as_flash')?.value as string
    const other = new FormBrowser(app, {}, { remoteAddress: newAddress() })
    assert.equal((await other.signIn(email)).statusCode, 303)
    other.cookies.set('as_flash', flash)
    const stolen = await other.get('/portal/keys/new')
    assert.equal(stolen.statusCode, 303)
    assert.equal(stolen.headers.location, '/portal/keys?notice=secret-shown')
    // A cookie tampered with is no flash either, and no error.
    browser.cookies.set('as_flash', `${flash.slice(0, -2)}AA`)
    assert.equal((await browser.get('/portal/keys/new')).statusCode, 303)
    browser.cookies.set('as_flash', 'not base64url at all!')
    assert.equal((await browser.get('/portal/keys/new')).statusCode, 303)
  })

  it('signing out clears a key not yet shown', async () => {
    const { browser } = await signedIn()
    const posted = await browser.submit('/portal/keys', '/portal/keys', {
      name: 'laptop',
      expires: 'never',
      'scope-pets-read': 'on',
    })
    assert.equal(posted.statusCode, 303)
    assert.ok(browser.cookies.has('as_flash'))
    const page = await browser.get('/portal/messages')
    await browser.post('/portal/sign-out', { _csrf: csrfOf(page.body, '/portal/sign-out') })
    assert.equal(browser.cookies.has('as_flash'), false)
  })
})

describe('Portal: revoke a key', () => {
  it('asks first, then revokes: the API refuses the key at once (401 revoked_api_key) and the list says Revoked', async () => {
    const { app, browser, accountId } = await signedIn()
    const secret = await browser.createKey('laptop')
    // Cached by the API as a verified key, as it would be after any use.
    assert.equal((await app.inject({ url: '/v1/pets', headers: bearer(secret) })).statusCode, 200)
    const [key] = await app.store.listApiKeys(accountId)
    assert.ok(key)
    const confirm = await browser.get(`/portal/keys/${key.id}/revoke`)
    assert.equal(confirm.statusCode, 200)
    assert.equal(heading(confirm.body), 'Revoke a key')
    const action = `/portal/keys/${key.id}/revoke`
    const response = await browser.post(action, { _csrf: csrfOf(confirm.body, action) })
    assert.equal(response.statusCode, 303)
    assert.equal(response.headers.location, `/portal/keys?revoked=${key.id}`)

    const refused = await app.inject({ url: '/v1/pets', headers: bearer(secret) })
    assert.equal(refused.statusCode, 401)
    assert.equal(errorBody(refused).code, 'revoked_api_key')
    const list = await browser.get(response.headers.location)
    assert.match(
      list.body,
      new RegExp(`Key <strong>laptop</strong> \\(<code>${secret.slice(0, 12)}…</code>\\) is revoked`),
    )
    assert.match(list.body, /<td data-label="State">Revoked <time/)
    assert.ok(!list.body.includes(`href="/portal/keys/${key.id}/revoke"`), 'a revoked key still offers Revoke')
  })

  it("cannot revoke another account's key: 404, nothing changes, and the key keeps working", async () => {
    const test = await shared()
    const victim = await test.newKey({ email: 'victim@example.com' })
    const { browser: attacker } = await signedInBrowser(test.app)
    const own = await attacker.get('/portal/keys')
    const _csrf = csrfOf(own.body, '/portal/sign-out')
    const confirm = await attacker.get(`/portal/keys/${victim.keyId}/revoke`)
    assert.equal(confirm.statusCode, 404)
    assert.match(confirm.body, /Key not found/)
    const response = await attacker.post(`/portal/keys/${victim.keyId}/revoke`, { _csrf })
    assert.equal(response.statusCode, 404)
    assert.match(response.headers['content-type'] as string, /^text\/html/)
    const [key] = await test.app.store.listApiKeys(victim.accountId)
    assert.equal(key?.revokedAt, null)
    assert.equal((await test.app.inject({ url: '/v1/pets', headers: bearer(victim.secret) })).statusCode, 200)
  })
})

describe('Portal: messages', () => {
  it("lists the account's recent messages, newest first, escaped, and never another account's", async () => {
    const { app, browser } = await signedIn()
    const empty = await browser.get('/portal/messages')
    assert.match(empty.body, /No messages yet/)
    const secret = await browser.createKey('laptop')
    const send = (key: string, message: string) =>
      app.inject({ method: 'POST', url: '/v1/messages', headers: bearer(key), payload: { message } })
    assert.equal((await send(secret, 'first hello')).statusCode, 202)
    assert.equal((await send(secret, '<script>alert(1)</script>')).statusCode, 202)
    const { browser: stranger } = await signedInBrowser(app)
    const strangerKey = await stranger.createKey('theirs')
    assert.equal((await send(strangerKey, 'not yours')).statusCode, 202)

    const page = await browser.get('/portal/messages')
    assert.equal(page.statusCode, 200)
    assert.ok(!page.body.includes('<script>alert(1)</script>'))
    assert.ok(!page.body.includes('not yours'))
    const escaped = page.body.indexOf('&lt;script&gt;alert(1)&lt;/script&gt;')
    const first = page.body.indexOf('first hello')
    assert.ok(escaped > 0 && first > escaped, 'newest first')
    // With no webhook endpoint subscribed, each is queued, then undelivered at the delivery loop's
    // next pass, which the page says with the reason (this sweep makes it so now).
    await app.store.markUndeliveredMessages()
    const swept = await browser.get('/portal/messages')
    assert.match(
      swept.body,
      /<td data-label="Status">undelivered: no enabled endpoint subscribed to message\.created<\/td>/,
    )
    assert.doesNotMatch(swept.body, /<td data-label="Status">(queued|failed)<\/td>/)
  })
})
