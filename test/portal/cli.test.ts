/**
 * The CLI and the portal manage the same accounts and keys: the CLI (run in this process through
 * src/cli.ts's main, with its own store) and the app, on one database of this run's kind (SQLite
 * or PostgreSQL).
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { runCli } from '../cli-run.ts'
import { bearer, build, errorBody, testDatabaseUrl } from '../helper.ts'
import { csrfOf, FormBrowser, newEmail, PASSWORD } from './browser.ts'

async function shared(t: Parameters<typeof build>[0]) {
  const url = await testDatabaseUrl(t)
  const test = await build(t, { DATABASE_URL: url, API_KEY_CACHE_SECONDS: '0' })
  const run = async (...args: string[]) => {
    const result = await runCli(args, { DATABASE_URL: url, LOG_LEVEL: 'silent' })
    assert.equal(result.code, 0, `animal-store ${args.join(' ')}: ${result.stderr}`)
    return result.stdout
  }
  return { ...test, url, run }
}

describe('CLI and portal, one set of accounts and keys', () => {
  it('a key made in the portal is listed by the CLI; the CLI revokes it; the portal shows it revoked and the API refuses it', async (t) => {
    const { app, run } = await shared(t)
    const email = newEmail()
    const browser = new FormBrowser(app)
    await browser.signUp(email)
    const secret = await browser.createKey('from the portal')
    const listed = await run('keys', 'list', email)
    const row = listed.split('\n').find((line) => line.includes(`${secret.slice(0, 12)}…`))
    assert.ok(row, listed)
    assert.match(row, /from the portal/)
    assert.ok(!listed.includes(secret), 'the CLI printed the secret')
    const keyId = row.split(/\s+/)[0] as string
    await run('keys', 'revoke', keyId)
    const page = await browser.get('/portal/keys')
    assert.match(page.body, /<td data-label="State">Revoked <time/)
    const refused = await app.inject({ url: '/v1/pets', headers: bearer(secret) })
    assert.equal(errorBody(refused).code, 'revoked_api_key')
  })

  it('a key the CLI made for a portal account shows in the portal, and the portal revokes it', async (t) => {
    const { app, run } = await shared(t)
    const email = newEmail()
    const browser = new FormBrowser(app)
    await browser.signUp(email)
    const secret = (await run('keys', 'create', email, '--name', 'from the cli', '--expires-in', '7d'))
      .trimEnd()
      .split('\n')
      .at(-1) as string
    const page = await browser.get('/portal/keys')
    assert.match(page.body, /<th scope="row">from the cli<\/th>/)
    assert.match(page.body, new RegExp(`${secret.slice(0, 12)}…`))
    const accountId = (await app.store.findAccountByEmail(email))?.id as number
    const [key] = await app.store.listApiKeys(accountId)
    assert.ok(key?.expiresAt)
    const action = `/portal/keys/${key.id}/revoke`
    const confirm = await browser.get(action)
    assert.equal((await browser.post(action, { _csrf: csrfOf(confirm.body, action) })).statusCode, 303)
    assert.match(await run('keys', 'list', email), /revoked/)
  })

  it('the same email cannot be taken twice, whichever side comes first', async (t) => {
    const { app, url, run } = await shared(t)
    const portalFirst = newEmail()
    await new FormBrowser(app).signUp(portalFirst)
    const taken = await runCli(['accounts', 'create', portalFirst], { DATABASE_URL: url })
    assert.notEqual(taken.code, 0)
    assert.match(taken.stderr, /already exists/)
    // --if-not-exists takes the portal's account as it is: exit 0, and its password still signs in.
    const kept = await runCli(['accounts', 'create', portalFirst, '--if-not-exists'], { DATABASE_URL: url })
    assert.deepEqual([kept.code, kept.stderr], [0, ''])
    assert.match(kept.stdout, /already exists/)
    assert.equal((await new FormBrowser(app).signIn(portalFirst, PASSWORD)).statusCode, 303)

    const cliFirst = newEmail()
    await run('accounts', 'create', cliFirst)
    const browser = new FormBrowser(app)
    const response = await browser.submit('/portal/sign-up', '/portal/sign-up', {
      email: cliFirst,
      password: 'correct horse battery staple',
      confirm: 'correct horse battery staple',
    })
    assert.equal(response.statusCode, 400)
    assert.match(response.body, /An account with this email already exists/)
  })

  it('the CLI applies the same key rules as the portal (name of 1 to 100 characters, not only spaces)', async () => {
    const result = await runCli(['keys', 'create', 'someone@example.com', '--name', '   '], {
      DATABASE_URL: 'sqlite::memory:',
    })
    assert.notEqual(result.code, 0)
    assert.match(result.stderr, /--name must be 1 to 100 characters, not only spaces/)
  })
})
