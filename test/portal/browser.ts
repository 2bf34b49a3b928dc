/**
 * A pretend browser over `app.inject` for the portal tests: it keeps cookies (per path), sends
 * forms as a browser does (urlencoded, with the page's CSRF token), and reads pages.
 */
import assert from 'node:assert/strict'
import type { FastifyInstance, LightMyRequestResponse } from 'fastify'
import { SCOPES } from '../../src/domain/scopes.ts'
import { scopeField } from '../../src/portal/forms.ts'

export const PASSWORD = 'correct horse battery staple'

export class FormBrowser {
  readonly app: FastifyInstance
  readonly cookies = new Map<string, string>()
  /** Extra headers on every request (e.g. another Host). */
  readonly headers: Record<string, string>
  last: LightMyRequestResponse | undefined

  constructor(app: FastifyInstance, headers: Record<string, string> = {}) {
    this.app = app
    this.headers = headers
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

  /** Creates a key on the keys page; returns its secret (shown once) and id. */
  /** As a browser submits the form: with the scope boxes it left checked (all, as the form comes). */
  async createKey(name = 'laptop', expires = 'never', scopes: readonly string[] = SCOPES) {
    const boxes = Object.fromEntries(scopes.map((scope) => [scopeField(scope), 'on']))
    const response = await this.submit('/portal/keys', '/portal/keys', { name, expires, ...boxes })
    assert.equal(response.statusCode, 201, `key not created: ${response.body}`)
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

let emails = 0
export const newEmail = () => `dev${++emails}-${process.pid}@example.com`

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
