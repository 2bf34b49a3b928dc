/**
 * A pretend browser over `app.inject` for the portal tests: it keeps cookies (per path), sends
 * forms as a browser does (urlencoded, with the page's CSRF token), and reads pages. And accounts
 * to sign in to that cost no real password hash (see cheapPasswordHash).
 */
import assert from 'node:assert/strict'
import { randomBytes, scryptSync } from 'node:crypto'
import type { FastifyInstance, LightMyRequestResponse } from 'fastify'
import { SCOPES } from '../../src/domain/scopes.ts'
import { scopeField } from '../../src/portal/forms.ts'

export const PASSWORD = 'correct horse battery staple'

export class FormBrowser {
  readonly app: FastifyInstance
  readonly cookies = new Map<string, string>()
  /** Extra headers on every request (e.g. another Host). */
  readonly headers: Record<string, string>
  /** The client address the app sees (inject's default, 127.0.0.1, when undefined). */
  readonly remoteAddress: string | undefined
  last: LightMyRequestResponse | undefined

  constructor(
    app: FastifyInstance,
    headers: Record<string, string> = {},
    { remoteAddress }: { remoteAddress?: string } = {},
  ) {
    this.app = app
    this.headers = headers
    this.remoteAddress = remoteAddress
  }

  private cookieHeader(url: string): Record<string, string> {
    // Every portal cookie has Path=/portal: send them only there, as a browser would.
    if (!url.startsWith('/portal') || this.cookies.size === 0) return {}
    return { cookie: [...this.cookies].map(([name, value]) => `${name}=${value}`).join('; ') }
  }

  private keep(response: LightMyRequestResponse): LightMyRequestResponse {
    for (const cookie of response.cookies as { name: string; value: string; maxAge?: number; expires?: Date }[]) {
      const gone = cookie.maxAge === 0 || (cookie.expires && cookie.expires.getTime() <= Date.now())
      if (gone || cookie.value === '') this.cookies.delete(cookie.name)
      else this.cookies.set(cookie.name, cookie.value)
    }
    this.last = response
    return response
  }

  async get(url: string, headers: Record<string, string> = {}): Promise<LightMyRequestResponse> {
    return this.keep(
      await this.app.inject({
        method: 'GET',
        url,
        ...(this.remoteAddress && { remoteAddress: this.remoteAddress }),
        headers: { ...this.headers, ...this.cookieHeader(url), ...headers },
      }),
    )
  }

  /** Posts a form: fields to encode, or a body already encoded (as sent, even if malformed). */
  async post(url: string, form: Record<string, string> | string | Buffer, headers: Record<string, string> = {}) {
    return this.keep(
      await this.app.inject({
        method: 'POST',
        url,
        ...(this.remoteAddress && { remoteAddress: this.remoteAddress }),
        headers: {
          ...this.headers,
          ...this.cookieHeader(url),
          'content-type': 'application/x-www-form-urlencoded',
          ...headers,
        },
        payload: typeof form === 'string' || Buffer.isBuffer(form) ? form : new URLSearchParams(form).toString(),
      }),
    )
  }

  /** The page a 303 sends the browser to, opened as a browser does; any other answer as it is. */
  async follow(response: LightMyRequestResponse): Promise<LightMyRequestResponse> {
    if (response.statusCode !== 303) return response
    return this.get(response.headers.location as string)
  }

  /** Opens `page`, fills in its form (the one posting to `action`) with `fields` and the page's CSRF token. */
  async submit(page: string, action: string, fields: Record<string, string>) {
    const opened = await this.get(page)
    assert.equal(opened.statusCode, 200, `GET ${page}: ${opened.statusCode}`)
    return this.post(action, { _csrf: csrfOf(opened.body, action), ...fields })
  }

  async signUp(email: string, password = PASSWORD) {
    const response = await this.submit('/portal/sign-up', '/portal/sign-up', { email, password, confirm: password })
    assert.equal(response.statusCode, 303, `sign-up failed: ${response.body}`)
    return response
  }

  async signIn(email: string, password = PASSWORD) {
    return this.submit('/portal/sign-in', '/portal/sign-in', { email, password })
  }

  /**
   * Creates a key on the keys page, as a browser submits the form: with the scope boxes it left
   * checked (all, as the form comes). Follows the redirect to the page that shows the key once;
   * returns the key.
   */
  async createKey(name = 'laptop', expires = 'never', scopes: readonly string[] = SCOPES) {
    const boxes = Object.fromEntries(scopes.map((scope) => [scopeField(scope), 'on']))
    const posted = await this.submit('/portal/keys', '/portal/keys', { name, expires, ...boxes })
    assert.equal(posted.statusCode, 303, `key not created: ${posted.body}`)
    assert.equal(posted.headers.location, '/portal/keys/new')
    const response = await this.follow(posted)
    assert.equal(response.statusCode, 200)
    const secret = /id="secret"[^>]*value="(as_test_[0-9A-Za-z]+)"/.exec(response.body)?.[1]
    assert.ok(secret, 'the new key page shows no key')
    return secret
  }
}

/** The CSRF token of the form posting to `action` on a page. */
export function csrfOf(html: string, action: string): string {
  const form = html.split('<form').find((f) => f.includes(`action="${action}"`))
  const token = form && /name="_csrf" value="([^"]*)"/.exec(form)?.[1]
  assert.ok(token, `no form to ${action} with a CSRF token on the page`)
  return token
}

/** The text of a page's <h1>. */
export const heading = (html: string) => /<h1[^>]*>([\s\S]*?)<\/h1>/.exec(html)?.[1]?.trim()

/**
 * The page at `path`, reached from the navigation (a link called `name` on any portal page) and
 * answered as every portal page: 200, headed `name`, never stored by a cache.
 */
export async function navigateTo(browser: FormBrowser, path: string, name: string) {
  const keys = await browser.get('/portal/keys')
  assert.match(keys.body, new RegExp(`<a href="${path}">${name}</a>`))
  const page = await browser.get(path)
  assert.equal(page.statusCode, 200)
  assert.equal(heading(page.body), name)
  assert.equal(page.headers['cache-control'], 'no-store')
  return page
}

let emails = 0
export const newEmail = () => `dev${++emails}-${process.pid}@example.com`

let addresses = 0
/**
 * A client address no other browser of this process has: the portal limits sign-ins and sign-ups
 * per address, and the tests sharing an app must not add up to those limits.
 */
export const newAddress = () => {
  const n = ++addresses
  return `10.${(n >> 16) & 255}.${(n >> 8) & 255}.${n & 255}`
}

/**
 * A hash of `password` in the format of src/domain/accounts.ts, at a cost about a hundred times
 * lower (N=1024, p=1): verifyPassword takes the cost from the hash, so signing in with it is
 * cheap. For tests that need an account with a password, not the hashing itself (a real hash,
 * made or checked, costs ~0.3 s of CPU).
 */
export function cheapPasswordHash(password = PASSWORD): string {
  const salt = randomBytes(16)
  const derived = scryptSync(password.normalize('NFKC'), salt, 32, { N: 1024, r: 8, p: 1 })
  return `scrypt$N=1024,r=8,p=1$${salt.toString('base64url')}$${derived.toString('base64url')}`
}

/** A new account with `password` (a cheap hash), made in the store: no sign-up form, no sign-up limit. */
export async function newAccount(app: FastifyInstance, email = newEmail(), password = PASSWORD) {
  const account = await app.store.createAccount(email, cheapPasswordHash(password))
  assert.ok(account, `${email} is taken`)
  return account
}

/**
 * A browser with an address of its own (newAddress), signed in through the sign-in form to a new
 * account (newAccount): where a test of the signed-in pages starts, without a sign-up's hash.
 */
export async function signedInBrowser(
  app: FastifyInstance,
  { email = newEmail(), headers = {} }: { email?: string; headers?: Record<string, string> } = {},
) {
  const account = await newAccount(app, email)
  const browser = new FormBrowser(app, headers, { remoteAddress: newAddress() })
  const response = await browser.signIn(email)
  assert.equal(response.statusCode, 303, `sign-in failed: ${response.body}`)
  return { browser, email, accountId: account.id }
}

/** The cells of a page's table rows (its tbody), as text without markup or screen-reader-only text. */
export function tableRows(page: string): string[][] {
  const body = /<tbody>([\s\S]*?)<\/tbody>/.exec(page)?.[1] ?? ''
  return [...body.matchAll(/<tr>([\s\S]*?)<\/tr>/g)].map(([, row]) =>
    [...(row as string).matchAll(/<t[hd][^>]*>([\s\S]*?)<\/t[hd]>/g)].map(([, cell]) =>
      (cell as string)
        .replace(/<span class="visually-hidden">[\s\S]*?<\/span>/g, '')
        .replace(/<[^>]+>/g, ' ')
        .replace(/\s+/g, ' ')
        .trim(),
    ),
  )
}
