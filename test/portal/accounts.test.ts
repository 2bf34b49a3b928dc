/**
 * Portal accounts: sign-up (password rules, taken emails), sign-in (generic refusal, limits),
 * sessions (cookie, expiry, sign-out). Through app.inject on this run's database.
 */
import assert from 'node:assert/strict'
import { hash } from 'node:crypto'
import { describe, it } from 'node:test'
import type { FastifyInstance } from 'fastify'
import { PASSWORD_MAX_LENGTH, PASSWORD_MIN_LENGTH } from '../../src/domain/accounts.ts'
import { SIGN_IN_PER_ADDRESS, SIGN_IN_PER_EMAIL } from '../../src/portal/limits.ts'
import { SESSION_LIFETIME_MS } from '../../src/portal/session.ts'
import { build, loggedAsOutage, suiteApp } from '../helper.ts'
import {
  cheapPasswordHash,
  csrfOf,
  FormBrowser,
  heading,
  newAccount,
  newAddress,
  newEmail,
  PASSWORD,
  signedInBrowser,
} from './browser.ts'

/** A browser of an address of its own: the tests sharing an app must not add up to a per-address limit. */
const browserOf = (app: FastifyInstance) => new FormBrowser(app, {}, { remoteAddress: newAddress() })

/**
 * Accounts (with one cheap hash) for nobody1@example.com … nobody100@example.com: a wrong password
 * for them costs little, where an unknown email (nobody0) is checked against the decoy hash at the
 * full cost. The limits count both alike.
 */
async function nobodies(app: FastifyInstance) {
  const hash = cheapPasswordHash()
  for (let i = 1; i <= 100; i++) await app.store.createAccount(`nobody${i}@example.com`, hash)
}

describe('Portal sign-up', () => {
  // Each test signs up its own emails, from its own address: one app serves them all.
  const shared = suiteApp()

  it('creates the account with a scrypt password hash, signs it in and lands on the keys page', async () => {
    const { app } = await shared()
    const browser = browserOf(app)
    const email = newEmail()
    const response = await browser.signUp(email)
    assert.equal(response.headers.location, '/portal/keys')
    const login = await app.store.findAccountLogin(email)
    assert.match(login?.passwordHash ?? '', /^scrypt\$N=32768,r=8,p=3\$[\w-]{22}\$[\w-]{43}$/)
    assert.ok(!login?.passwordHash?.includes(PASSWORD))
    const keys = await browser.get('/portal/keys')
    assert.equal(keys.statusCode, 200)
    assert.equal(heading(keys.body), 'API keys')
    assert.match(keys.body, new RegExp(`Signed in as <strong>${email}</strong>`))
  })

  it('answers a database outage with a 503 page, logged at warn in one line without a stack', async (t) => {
    const { app, logs } = await build(t, {}, { captureLogs: true })
    const browser = new FormBrowser(app)
    const page = await browser.get('/portal/sign-up')
    await app.store.close() // the database is gone from under the app
    const email = newEmail()
    const csrf = csrfOf(page.body, '/portal/sign-up')
    const response = await browser.post('/portal/sign-up', {
      _csrf: csrf,
      email,
      password: PASSWORD,
      confirm: PASSWORD,
    })
    assert.equal(response.statusCode, 503)
    assert.equal(response.headers['retry-after'], '5')
    loggedAsOutage(logs, response)
  })

  it('refuses an email that is taken, whatever its case, and keeps the first account', async () => {
    const { app } = await shared()
    const email = newEmail()
    await newAccount(app, email)
    const second = browserOf(app)
    const response = await second.submit('/portal/sign-up', '/portal/sign-up', {
      email: email.toUpperCase(),
      password: `${PASSWORD} 2`,
      confirm: `${PASSWORD} 2`,
    })
    assert.equal(response.statusCode, 400)
    assert.match(response.body, /An account with this email already exists/)
    assert.equal(second.cookies.has('as_session'), false)
    assert.equal((await second.signIn(email, PASSWORD)).statusCode, 303, 'the first password still works')
  })

  const refused: [string, Record<string, string>, RegExp][] = [
    [
      `a password shorter than ${PASSWORD_MIN_LENGTH} characters`,
      { password: 'x'.repeat(PASSWORD_MIN_LENGTH - 1) },
      /Choose a password of 15 to 256 characters/,
    ],
    [
      `a password longer than ${PASSWORD_MAX_LENGTH} characters`,
      { password: 'x'.repeat(PASSWORD_MAX_LENGTH + 1) },
      /Choose a password/,
    ],
    ['a password of only spaces', { password: ' '.repeat(20) }, /Choose a password/],
    ['a confirmation that differs', { confirm: `${PASSWORD}!` }, /The two passwords differ/],
    ['a malformed email', { email: 'not-an-email' }, /Enter an email address such as alice@example\.com/],
    ['a missing email', { email: '' }, /Enter an email address/],
  ]
  for (const [what, change, message] of refused) {
    it(`refuses ${what} with 400, says why next to the field, and creates nothing`, async () => {
      const { app } = await shared()
      const browser = browserOf(app)
      const email = newEmail()
      const fields = { email, password: PASSWORD, confirm: change.password ?? PASSWORD, ...change }
      const response = await browser.submit('/portal/sign-up', '/portal/sign-up', fields)
      assert.equal(response.statusCode, 400)
      assert.match(response.headers['content-type'] as string, /^text\/html/)
      assert.match(response.body, message)
      assert.match(response.body, /aria-invalid="true"/)
      assert.equal(await app.store.findAccountByEmail(email), null)
    })
  }

  /** A browser that opened the sign-up page, for a body made by hand: the CSRF token and PASSWORD, encoded. */
  async function handMadeSignUp() {
    const { app } = await shared()
    const browser = browserOf(app)
    const page = await browser.get('/portal/sign-up')
    const csrf = encodeURIComponent(csrfOf(page.body, '/portal/sign-up'))
    return { app, browser, csrf, password: encodeURIComponent(PASSWORD) }
  }

  it('refuses a form whose bytes are not UTF-8 with 400, rather than store U+FFFD in their place', async () => {
    const { app, browser, csrf, password } = await handMadeSignUp()
    // Browsers percent-encode every byte that is not ASCII; a hand-made client may send them raw.
    const body = Buffer.concat([
      Buffer.from(`_csrf=${csrf}&email=r1`),
      Buffer.from([0xff]),
      Buffer.from(`@example.com&password=${password}&confirm=${password}`),
    ])
    const response = await browser.post('/portal/sign-up', body)
    assert.equal(response.statusCode, 400)
    assert.match(response.body, /<h1>Something is wrong with this request<\/h1>/)
    assert.equal(await app.store.findAccountByEmail('r1\ufffd@example.com'), null)
  })

  it('refuses a form that gives a field twice with 400, the CSRF token included, and creates nothing', async () => {
    const { app, browser, csrf, password } = await handMadeSignUp()
    for (const [twice, email] of [
      [`_csrf=${csrf}`, 'r2@example.com'],
      ['email=r3@example.com', 'r3@example.com'],
    ] as const) {
      const body = `${twice}&_csrf=${csrf}&email=${email}&password=${password}&confirm=${password}`
      const response = await browser.post('/portal/sign-up', body)
      assert.equal(response.statusCode, 400, twice)
      assert.match(response.body, /<h1>Something is wrong with this request<\/h1>/)
      assert.equal(await app.store.findAccountByEmail(email), null)
    }
  })

  it(`accepts a password of exactly ${PASSWORD_MIN_LENGTH} characters, spaces and any script included`, async () => {
    const { app } = await shared()
    const password = 'ça va très bien'
    assert.equal(password.length, PASSWORD_MIN_LENGTH)
    const email = newEmail()
    await browserOf(app).signUp(email, password)
    assert.equal((await browserOf(app).signIn(email, password)).statusCode, 303)
  })

  it(`lets a browser type every password the server takes: ${PASSWORD_MAX_LENGTH} characters of two UTF-16 units each`, async () => {
    const { app } = await shared()
    // A browser counts maxlength in UTF-16 units; the server counts characters.
    const longest = '🐶'.repeat(PASSWORD_MAX_LENGTH)
    for (const url of ['/portal/sign-up', '/portal/sign-in']) {
      const page = (await app.inject({ url })).body
      const limits = [...page.matchAll(/type="password"[^>]*maxlength="(\d+)"/g)].map((m) => Number(m[1]))
      assert.ok(limits.length > 0, url)
      for (const limit of limits) assert.ok(longest.length <= limit, `${url}: maxlength ${limit}`)
    }
    const email = newEmail()
    await browserOf(app).signUp(email, longest)
    assert.equal((await browserOf(app).signIn(email, longest)).statusCode, 303)
  })
})

describe('Portal sign-in', () => {
  // Each test signs in to its own accounts from its own addresses; the tests of the limits, which
  // count every attempt of an address, have an app of their own.
  const shared = suiteApp()

  it('signs in with the right password: a new HttpOnly, SameSite=Lax session cookie for /portal, 8 hours', async () => {
    const { app } = await shared()
    const email = newEmail()
    await newAccount(app, email)
    const browser = browserOf(app)
    const response = await browser.signIn(email)
    assert.equal(response.statusCode, 303)
    assert.equal(response.headers.location, '/portal/keys')
    const cookie = response.cookies.find((c) => c.name === 'as_session')
    assert.ok(cookie)
    assert.equal(cookie.httpOnly, true)
    assert.equal(cookie.sameSite, 'Lax')
    assert.equal(cookie.path, '/portal')
    assert.equal(cookie.maxAge, SESSION_LIFETIME_MS / 1000)
    // Only the hash of the token is stored.
    const stored = await app.store.findSession(hash('sha256', cookie.value, 'base64url'))
    assert.equal(stored?.email, email)
    assert.equal(await app.store.findSession(cookie.value), null)
  })

  it('refuses a wrong password and an unknown email with the same words, and starts no session', async () => {
    const { app } = await shared()
    const email = newEmail()
    await newAccount(app, email)
    for (const [address, password] of [
      [email, `${PASSWORD}x`],
      [newEmail(), PASSWORD],
    ] as const) {
      const browser = browserOf(app)
      const response = await browser.signIn(address, password)
      assert.equal(response.statusCode, 400)
      assert.match(response.body, /The email or the password is wrong\./)
      assert.equal(browser.cookies.has('as_session'), false)
      assert.match(response.body, new RegExp(`value="${address}"`), 'the email is kept in the form')
    }
  })

  it('refuses an account made by the CLI (it has no password): nobody can sign in to it', async () => {
    const test = await shared()
    const { accountId } = await test.newKey({ email: 'operator-made@example.com' })
    assert.ok(accountId)
    const response = await browserOf(test.app).signIn('operator-made@example.com', '')
    assert.equal(response.statusCode, 400)
    const guessed = await browserOf(test.app).signIn('operator-made@example.com', PASSWORD)
    assert.equal(guessed.statusCode, 400)
    assert.match(guessed.body, /The email or the password is wrong/)
  })

  it(`limits attempts per email: after ${SIGN_IN_PER_EMAIL} in 15 minutes, 429 with Retry-After, even with the right password`, async (t) => {
    // Counts every attempt of the address (127.0.0.1): an app of its own.
    const { app } = await build(t)
    const email = newEmail()
    await newAccount(app, email)
    const browser = new FormBrowser(app)
    const page = await browser.get('/portal/sign-in')
    const _csrf = csrfOf(page.body, '/portal/sign-in')
    for (let i = 0; i < SIGN_IN_PER_EMAIL; i++) {
      const wrong = await browser.post('/portal/sign-in', { _csrf, email, password: `wrong password ${i}!!` })
      assert.equal(wrong.statusCode, 400)
    }
    const limited = await browser.post('/portal/sign-in', { _csrf, email, password: PASSWORD })
    assert.equal(limited.statusCode, 429)
    assert.match(limited.headers['content-type'] as string, /^text\/html/)
    const retryAfter = Number(limited.headers['retry-after'])
    assert.ok(retryAfter > 14 * 60 && retryAfter <= 15 * 60, `Retry-After: ${retryAfter}`)
    assert.match(limited.body, /Too many sign-in attempts\. Try again in 15 minutes\./)
    assert.equal(browser.cookies.has('as_session'), false)
    // Another account from the same address is not locked out by this one.
    const other = newEmail()
    await newAccount(app, other)
    assert.equal((await new FormBrowser(app).signIn(other)).statusCode, 303)
  })

  it(`limits attempts per client address: ${SIGN_IN_PER_ADDRESS} in 15 minutes, whatever the emails`, async (t) => {
    const { app } = await build(t)
    await nobodies(app)
    const browser = new FormBrowser(app)
    const page = await browser.get('/portal/sign-in')
    const _csrf = csrfOf(page.body, '/portal/sign-in')
    for (let i = 0; i < SIGN_IN_PER_ADDRESS; i++) {
      const response = await browser.post('/portal/sign-in', { _csrf, email: `nobody${i}@example.com`, password: 'x' })
      assert.equal(response.statusCode, 400, `attempt ${i + 1}`)
    }
    const limited = await browser.post('/portal/sign-in', { _csrf, email: 'nobody@example.com', password: 'x' })
    assert.equal(limited.statusCode, 429)
    assert.ok(Number(limited.headers['retry-after']) > 0)
  })

  it('counts an IPv6 client by its /64: a new address of the same network for each attempt changes nothing', async (t) => {
    const { app } = await build(t, { TRUST_PROXY: 'true' })
    await nobodies(app)
    const browser = new FormBrowser(app, { 'x-forwarded-for': '2001:db8:1:2::1' })
    const page = await browser.get('/portal/sign-in')
    const _csrf = csrfOf(page.body, '/portal/sign-in')
    const attempt = (address: string, i: number) => {
      browser.headers['x-forwarded-for'] = address
      return browser.post('/portal/sign-in', { _csrf, email: `nobody${i}@example.com`, password: 'x' })
    }
    for (let i = 0; i < SIGN_IN_PER_ADDRESS; i++) {
      assert.equal((await attempt(`2001:db8:1:2::${(i + 1).toString(16)}`, i)).statusCode, 400, `attempt ${i + 1}`)
    }
    assert.equal((await attempt('2001:db8:1:2:ffff:ffff:ffff:ffff', 99)).statusCode, 429)
    // Another network is another client.
    assert.equal((await attempt('2001:db8:1:3::1', 100)).statusCode, 400)
  })
})

describe('Portal sessions', () => {
  // Each test signs in to its own account, from its own address: one app serves them all.
  const shared = suiteApp()

  it('signing out ends the session in the database: the old cookie no longer opens any page', async () => {
    const { app } = await shared()
    const { browser } = await signedInBrowser(app)
    const token = browser.cookies.get('as_session') as string
    const keys = await browser.get('/portal/keys')
    const response = await browser.post('/portal/sign-out', { _csrf: csrfOf(keys.body, '/portal/sign-out') })
    assert.equal(response.statusCode, 303)
    assert.equal(response.headers.location, '/portal/sign-in?notice=signed-out')
    const cleared = response.cookies.find((c) => c.name === 'as_session')
    assert.ok(cleared && (cleared.value === '' || cleared.maxAge === 0 || (cleared.expires as Date) < new Date()))
    assert.equal(await app.store.findSession(hash('sha256', token, 'base64url')), null)
    const signedOut = await browser.get('/portal/sign-in?notice=signed-out')
    assert.match(signedOut.body, /You are signed out\./)
    // Replaying the old cookie by hand gets the sign-in page, not the account.
    const replay = await app.inject({ url: '/portal/keys', headers: { cookie: `as_session=${token}` } })
    assert.equal(replay.statusCode, 303)
    assert.match(replay.headers.location as string, /^\/portal\/sign-in/)
  })

  it('an expired session is refused: the page redirects to sign-in, says so, and clears the cookie', async () => {
    const test = await shared()
    const { accountId } = await test.newKey()
    const token = 'expired-session-token-for-this-test-000000000'
    await test.app.store.createSession({
      hash: hash('sha256', token, 'base64url'),
      accountId,
      expiresAt: new Date(Date.now() - 1000).toISOString(),
      passwordHash: null,
    })
    const response = await test.app.inject({ url: '/portal/keys', headers: { cookie: `as_session=${token}` } })
    assert.equal(response.statusCode, 303)
    assert.equal(response.headers.location, '/portal/sign-in?notice=expired')
    assert.ok(
      response.cookies.some(
        (c) => c.name === 'as_session' && (c.value === '' || c.maxAge === 0 || (c.expires as Date) < new Date()),
      ),
    )
    const page = await test.app.inject({ url: '/portal/sign-in?notice=expired' })
    assert.match(page.body, /Your session has ended/)
  })

  it('a session that is still valid opens the pages; signed out, every account page redirects to sign-in', async () => {
    const { app } = await shared()
    for (const url of ['/portal/keys', '/portal/messages', '/portal/keys/key_abc/revoke']) {
      const response = await app.inject({ url })
      assert.equal(response.statusCode, 303, url)
      assert.equal(response.headers.location, '/portal/sign-in', url)
    }
    const { browser } = await signedInBrowser(app)
    for (const url of ['/portal/keys', '/portal/messages']) assert.equal((await browser.get(url)).statusCode, 200, url)
    assert.equal((await browser.get('/portal')).headers.location, '/portal/keys')
    assert.equal((await browser.get('/portal/sign-in')).headers.location, '/portal/keys')
  })

  it("a page that is not there keeps the menu of the browser's state: signed in, the account and Sign out", async () => {
    const { app } = await shared()
    const browser = browserOf(app)
    const signedOut = await browser.get('/portal/nowhere')
    assert.equal(signedOut.statusCode, 404)
    assert.match(signedOut.body, /Create an account/)
    const email = newEmail()
    await newAccount(app, email)
    assert.equal((await browser.signIn(email)).statusCode, 303)
    const signedIn = await browser.get('/portal/nowhere')
    assert.equal(signedIn.statusCode, 404)
    assert.equal(heading(signedIn.body), 'Page not found')
    assert.match(signedIn.body, new RegExp(`Signed in as <strong>${email}</strong>`))
    assert.doesNotMatch(signedIn.body, /Create an account/)
    // Its Sign out form works: the page's CSRF token is this session's.
    const out = await browser.post('/portal/sign-out', { _csrf: csrfOf(signedIn.body, '/portal/sign-out') })
    assert.equal(out.statusCode, 303)
    assert.equal(out.headers.location, '/portal/sign-in?notice=signed-out')
  })

  it('signing in replaces the session the browser had: the previous token stops working', async () => {
    const { app } = await shared()
    const { browser, email } = await signedInBrowser(app)
    const first = browser.cookies.get('as_session') as string
    // A sign-in form left open in another tab, sent while the browser still holds the first session.
    const keys = await browser.get('/portal/keys')
    const response = await browser.post('/portal/sign-in', {
      _csrf: csrfOf(keys.body, '/portal/sign-out'),
      email,
      password: PASSWORD,
    })
    assert.equal(response.statusCode, 303)
    const second = browser.cookies.get('as_session') as string
    assert.notEqual(second, first)
    assert.equal(await app.store.findSession(hash('sha256', first, 'base64url')), null)
    assert.equal((await app.store.findSession(hash('sha256', second, 'base64url')))?.email, email)
  })
})
