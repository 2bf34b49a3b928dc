/**
 * The operator's CLI on a real SQLite file: each command run in this process through src/cli.ts's
 * main (test/cli-run.ts), with an environment and standard streams of its own; the few things only
 * a real process shows (the bin, exit statuses as a shell sees them, a reader that goes away) run
 * `bin/animal-store.ts` as a child process, exactly as `npx animal-store …` runs it. The
 * end-to-end tests then point the real app at the same file to check that what the CLI wrote is
 * what the server reads.
 */
import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { PassThrough, Readable } from 'node:stream'
import { after, before, describe, it, type TestContext } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { readStdin } from '../src/cli.ts'
import { generateApiKey } from '../src/domain/api-keys.ts'
import { openStore } from '../src/store/index.ts'
import { runCli } from './cli-run.ts'
import { bearer, build, errorBody, type TestApp } from './helper.ts'
import { FormBrowser, PASSWORD } from './portal/browser.ts'
import { cli, type Exit, spawnNode } from './processes.ts'

const STAGING_KEY = /^as_test_[0-9A-Za-z]{38}$/
const LIVE_KEY = /^as_live_[0-9A-Za-z]{38}$/
/** How many leading characters of a key are stored and shown (`as_test_AbCd`); the rest is the secret part. */
const SHOWN = 12
const DAY_MS = 86_400_000
/** The C0 and C1 control characters and DELs in `text` but its line ends: none may reach the terminal raw. */
function rawControls(text: string): string[] {
  return [...text.replaceAll('\n', '')].filter((c) => {
    const code = c.codePointAt(0) as number
    return code <= 0x1f || (code >= 0x7f && code <= 0x9f)
  })
}
/** A key name that, printed raw, retitles the terminal, turns it red and forges a row of `keys list`. */
const EVIL_NAME = 'evil\u001b]0;pwned\u0007\u001b[31mRED\nfake row'

/** Runs `animal-store <args>` on `databaseUrl` (with `input` piped to it), in this process, and collects its exit code and output. */
function cliOn(
  databaseUrl: string,
  args: string[],
  env: Record<string, string> = {},
  input?: string | Buffer,
): Promise<Exit> {
  return runCli(args, { DATABASE_URL: databaseUrl, ...env }, input)
}

/** A run that must succeed: exit 0, nothing on stderr. */
async function ok(databaseUrl: string, args: string[], env: Record<string, string> = {}, input?: string | Buffer) {
  const run = await cliOn(databaseUrl, args, env, input)
  assert.equal(run.code, 0, `animal-store ${args.join(' ')} failed: ${run.stderr}`)
  assert.equal(run.stderr, '', `animal-store ${args.join(' ')} wrote to stderr`)
  return run
}

/** Exit statuses of a failed run: the command could not be done, or its command line is wrong. */
const FAILED = 1
const USAGE = 2

/** A run that must fail with `code`: exactly one line on stderr, nothing on stdout. */
async function fails(
  databaseUrl: string,
  args: string[],
  env: Record<string, string> = {},
  input?: string | Buffer,
  code = FAILED,
) {
  const run = await cliOn(databaseUrl, args, env, input)
  const what = `animal-store ${args.join(' ')}`
  assert.equal(run.code, code, `${what} exited ${run.code}`)
  assert.equal(run.stdout, '', `${what} wrote to stdout`)
  assert.match(run.stderr, /^[^\n]+\n$/, `${what}: stderr is not exactly one line: ${JSON.stringify(run.stderr)}`)
  return run.stderr.trimEnd()
}

/** A run whose command line is wrong: exit 2, one line on stderr. */
const wrongUsage = (databaseUrl: string, args: string[]) => fails(databaseUrl, args, {}, undefined, USAGE)

function lastLine(text: string): string {
  return text.trimEnd().split('\n').at(-1) as string
}

/** `keys create`'s secret: the last line of stdout, alone. */
async function createKey(databaseUrl: string, email: string, options: string[] = [], env: Record<string, string> = {}) {
  const run = await ok(databaseUrl, ['keys', 'create', email, ...options], env)
  return lastLine(run.stdout)
}

/** Parses `keys list`'s table into rows keyed by the header's column names. */
function parseTable(stdout: string): Record<string, string>[] {
  const [header, ...rows] = stdout.trimEnd().split('\n') as [string, ...string[]]
  const names = header.trim().split(/\s{2,}/)
  return rows.map((row) => {
    const cells = row.trim().split(/\s{2,}/)
    assert.equal(cells.length, names.length, `cannot parse row ${JSON.stringify(row)} under ${JSON.stringify(header)}`)
    return Object.fromEntries(names.map((name, i) => [name, cells[i] as string]))
  })
}

/** `keys list <email>` for the key whose secret is `secret` (found by its shown prefix). */
async function listedKey(databaseUrl: string, email: string, secret: string): Promise<Record<string, string>> {
  const rows = parseTable((await ok(databaseUrl, ['keys', 'list', email])).stdout)
  const row = rows.find((r) => r.PREFIX === `${secret.slice(0, SHOWN)}…`)
  assert.ok(row, `no row for ${secret.slice(0, SHOWN)}… in ${JSON.stringify(rows)}`)
  return row
}

function tempDir(): string {
  return mkdtempSync(join(tmpdir(), 'animal-store-cli-'))
}

/** A fresh SQLite file for one test, removed afterwards. */
function newDatabase(t: TestContext): { dir: string; url: string } {
  const dir = tempDir()
  t.after(() => rmSync(dir, { recursive: true, force: true }))
  return { dir, url: `sqlite:${join(dir, 'db.sqlite')}` }
}

/** A fresh database with one account. */
async function withAccount(t: TestContext, email = 'alice@example.com') {
  const db = newDatabase(t)
  await ok(db.url, ['accounts', 'create', email])
  return { ...db, email }
}

/** GET /v1/pets on a built app with `secret` as the key. */
function listPets(test: TestApp, secret: string) {
  return test.app.inject({ url: '/v1/pets', headers: bearer(secret) })
}

/** The app refuses `secret`: GET /v1/pets answers 401 with the error `code`. */
async function assertRefused(test: TestApp, secret: string, code: string) {
  const refused = await listPets(test, secret)
  assert.equal(refused.statusCode, 401)
  assert.equal(errorBody(refused).code, code)
}

describe('CLI: accounts create', () => {
  it('creates an account and says so on stdout (exit 0, nothing on stderr)', async (t) => {
    const { url } = newDatabase(t)
    const run = await ok(url, ['accounts', 'create', 'alice@example.com'])
    assert.match(run.stdout, /alice@example\.com/)
    const list = await ok(url, ['keys', 'list', 'alice@example.com'])
    assert.doesNotMatch(list.stdout, /as_(test|live)_/)
  })

  it('refuses a duplicate account: non-zero exit, one line on stderr naming the address', async (t) => {
    const { url } = await withAccount(t)
    const message = await fails(url, ['accounts', 'create', 'alice@example.com'])
    assert.match(message, /alice@example\.com/)
    assert.match(message, /--if-not-exists/)
  })

  it('--if-not-exists: an account that exists is a success (exit 0), said on stdout, and left as it was', async (t) => {
    const { url, email } = await withAccount(t)
    const secret = await createKey(url, email)
    const again = await ok(url, ['accounts', 'create', email, '--if-not-exists'])
    assert.equal(again.stdout, `An account for ${email} already exists; nothing to do.\n`)
    // The same account, its key still there; and on a new address the option creates as without it.
    const list = await ok(url, ['keys', 'list', email])
    assert.match(list.stdout, new RegExp(secret.slice(0, SHOWN)))
    const created = await ok(url, ['accounts', 'create', 'bob@example.com', '--if-not-exists'])
    assert.match(created.stdout, /^Created account \d+ for bob@example\.com\.\n$/)
  })
})

describe('CLI: accounts set-password', () => {
  const NEW_PASSWORD = 'another horse battery staple'

  it('takes the first line of piped input, whatever ends it (LF, CRLF or a lone CR)', async () => {
    for (const input of ['a good long password\nrest', 'a good long password\r\nrest', 'a good long password\rrest']) {
      assert.equal(
        await readStdin('New password: ', Readable.from([input])),
        'a good long password',
        JSON.stringify(input),
      )
    }
    // A line end split across two reads.
    assert.equal(await readStdin('', Readable.from(['a good long password\r', '\n'])), 'a good long password')
  })

  it('stops reading piped input that runs past any password, and says why in one line', {
    timeout: 10_000,
  }, async () => {
    // Endless input with no line end: only a cap on what is read can end it.
    const endless = new Readable({
      read() {
        this.push('a'.repeat(65_536))
      },
    })
    await assert.rejects(readStdin('New password: ', endless), /15 to 256 characters/)
  })

  it('gives an account made by the CLI a portal password, piped on standard input: it can then sign in', async (t) => {
    const { url, email } = await withAccount(t)
    const run = await ok(url, ['accounts', 'set-password', email], {}, `${PASSWORD}\n`)
    assert.match(run.stdout, /alice@example\.com/)
    const { app } = await build(t, { DATABASE_URL: url })
    assert.equal((await new FormBrowser(app).signIn(email, PASSWORD)).statusCode, 303)
    assert.notEqual((await new FormBrowser(app).signIn(email, NEW_PASSWORD)).statusCode, 303, 'another password works')
  })

  it('a new password ends the portal sessions the account had, and only the new one signs in', async (t) => {
    const { url, email } = await withAccount(t)
    await ok(url, ['accounts', 'set-password', email], {}, PASSWORD)
    const { app } = await build(t, { DATABASE_URL: url })
    const browser = new FormBrowser(app)
    assert.equal((await browser.signIn(email, PASSWORD)).statusCode, 303)
    assert.equal((await browser.get('/portal/keys')).statusCode, 200)

    await ok(url, ['accounts', 'set-password', email], {}, `${NEW_PASSWORD}\r\n`)
    const after = await browser.get('/portal/keys')
    assert.equal(after.statusCode, 303, 'the session outlived the password')
    assert.match(String(after.headers.location), /^\/portal\/sign-in/)
    assert.notEqual((await new FormBrowser(app).signIn(email, PASSWORD)).statusCode, 303, 'the old password works')
    assert.equal((await new FormBrowser(app).signIn(email, NEW_PASSWORD)).statusCode, 303)
  })

  for (const [what, input] of [
    ['a password shorter than the portal allows', 'too short\n'],
    ['a password of spaces only', `${' '.repeat(20)}\n`],
    ['an empty standard input', ''],
  ] as const) {
    it(`refuses ${what} in one line, and stores nothing`, async (t) => {
      const { url, email } = await withAccount(t)
      assert.match(await fails(url, ['accounts', 'set-password', email], {}, input), /15 to 256 characters/)
      const store = await openStore({ databaseUrl: url, poolSize: 1, timeoutMs: 5000 })
      t.after(() => store.close())
      assert.equal((await store.findAccountLogin(email))?.passwordHash, null)
    })
  }

  it('refuses input that is not UTF-8 in one line, and stores nothing (it would be kept as U+FFFD)', async (t) => {
    const { url, email } = await withAccount(t)
    for (const input of [Buffer.alloc(40, 0xff), Buffer.from(`caf\xe9 caf\xe9 caf\xe9 caf\xe9\n`, 'latin1')]) {
      assert.match(await fails(url, ['accounts', 'set-password', email], {}, input), /not UTF-8/)
    }
    const store = await openStore({ databaseUrl: url, poolSize: 1, timeoutMs: 5000 })
    t.after(() => store.close())
    assert.equal((await store.findAccountLogin(email))?.passwordHash, null)
  })

  it('at a terminal, prompts on stderr and does not echo what is typed; Ctrl-C cancels', async () => {
    const typed = async (keys: string) => {
      const terminal = Object.assign(new PassThrough(), { isTTY: true, setRawMode: () => terminal })
      const shown = new PassThrough()
      let output = ''
      shown.on('data', (chunk) => {
        output += chunk
      })
      const line = readStdin('New password: ', terminal, shown)
      terminal.write(keys)
      const result = await line.then(
        (value) => ({ value }),
        (error: Error) => ({ error }),
      )
      return { ...result, output }
    }
    const entered = await typed(`${PASSWORD}\r`)
    assert.deepEqual(entered, { value: PASSWORD, output: 'New password: \n' })
    const cancelled = await typed('half typed\u0003')
    assert.match(String('error' in cancelled && cancelled.error.message), /Cancelled/)
    assert.equal(cancelled.output, 'New password: \n')
  })

  it('refuses an unknown account in one line naming it', async (t) => {
    const { url } = await withAccount(t)
    assert.match(await fails(url, ['accounts', 'set-password', 'bob@example.com'], {}, PASSWORD), /bob@example\.com/)
  })
})

describe('CLI: the real bin, as `npx animal-store` runs it (child processes)', () => {
  it('runs commands through bin/animal-store.ts, answering with the exit statuses a script tests', async (t) => {
    const { url } = newDatabase(t)
    const env = { DATABASE_URL: url }
    const help = await cli(['help'], env)
    assert.deepEqual([help.code, help.stderr], [0, ''])
    assert.match(help.stdout, /^Usage: animal-store <command>\n[\s\S]*keys revoke <key-id>/)
    const none = await cli([], env)
    assert.deepEqual([none.code, none.stdout], [USAGE, ''])
    assert.match(none.stderr, /^Usage: animal-store <command>\n/)
    const unknown = await cli(['frobnicate'], env)
    assert.deepEqual([unknown.code, unknown.stdout], [USAGE, ''])
    assert.equal(unknown.stderr, 'animal-store: Unknown command "frobnicate". Run "animal-store help".\n')

    const created = await cli(['accounts', 'create', 'alice@example.com'], env)
    assert.deepEqual([created.code, created.stderr], [0, ''])
    assert.match(created.stdout, /^Created account \d+ for alice@example\.com\.\n$/)
    const key = await cli(['keys', 'create', 'alice@example.com'], env)
    assert.deepEqual([key.code, key.stderr], [0, ''])
    const secret = lastLine(key.stdout)
    assert.match(secret, STAGING_KEY)
    const list = await cli(['keys', 'list', 'alice@example.com'], env)
    assert.deepEqual([list.code, list.stderr], [0, ''])
    assert.equal(parseTable(list.stdout)[0]?.PREFIX, `${secret.slice(0, SHOWN)}…`)
    const failed = await cli(['keys', 'list', 'nobody@example.com'], env)
    assert.deepEqual([failed.code, failed.stdout], [FAILED, ''])
    assert.match(failed.stderr, /^animal-store: No account for nobody@example\.com; [^\n]+\n$/)
  })

  it('stops quietly, exit 0, when standard output is closed (`animal-store help | true`)', async () => {
    const { child, exited } = spawnNode(['bin/animal-store.ts', 'help'], {})
    child.stdout.destroy()
    const run = await exited
    assert.equal(run.stderr, '')
    assert.equal(run.code, 0)
  })

  it('revokes the new key when it cannot be written out (the reader went away), in one line on stderr', async (t) => {
    const { url, email } = await withAccount(t)
    const { child, exited } = spawnNode(['bin/animal-store.ts', 'keys', 'create', email, '--name', 'lost'], {
      DATABASE_URL: url,
    })
    // Like `… | head -c 0`: nobody reads standard output.
    child.stdout.destroy()
    const run = await exited
    assert.equal(run.code, 1)
    assert.match(
      run.stderr,
      /^animal-store: Could not write the new key to standard output, so key key_\w+ was revoked\.\n$/,
    )
    const store = await openStore({ databaseUrl: url, poolSize: 1, timeoutMs: 5000 })
    t.after(() => store.close())
    const account = await store.findAccountByEmail(email)
    const [key] = await store.listApiKeys(account?.id as number)
    assert.equal(key?.name, 'lost')
    assert.ok(key?.revokedAt, 'the key nobody received is still active')
  })
})

describe('CLI: keys create', () => {
  it('makes a key restricted to --scopes, shown by keys list; an unknown scope is a usage error', async (t) => {
    const { url, email } = await withAccount(t)
    const run = await ok(url, ['keys', 'create', email, '--scopes', 'orders:write,pets:read'])
    // Comma-separated, as --scopes takes them and keys list shows them.
    assert.match(run.stdout, /, scopes: pets:read,orders:write\.\n/)
    await ok(url, ['keys', 'create', email, '--name', 'full'])
    const list = await ok(url, ['keys', 'list', email])
    assert.match(list.stdout, /SCOPES/)
    assert.match(list.stdout, /pets:read,orders:write/)
    assert.match(list.stdout, /full .* all\n/)
    assert.match(
      await wrongUsage(url, ['keys', 'create', email, '--scopes', 'pets:admin']),
      /Unknown scope "pets:admin"/,
    )
    assert.match(await wrongUsage(url, ['keys', 'list', email, '--scopes', 'pets:read']), /--scopes/)
  })

  it('prints a staging key (as_test_…) alone on the last line by default (DEPLOYMENT defaults to staging)', async (t) => {
    const { url, email } = await withAccount(t)
    const run = await ok(url, ['keys', 'create', email])
    const secret = lastLine(run.stdout)
    assert.match(secret, STAGING_KEY)
    assert.ok(run.stdout.endsWith(`\n${secret}\n`), 'the key is not alone on the last line')
    assert.equal(run.stdout.split(secret).length - 1, 1, 'the key is printed more than once')
    // An operator who forgot DEPLOYMENT for a production server is told.
    assert.match(run.stdout, /^Created staging key key_\w+ .*\nA production server refuses it: DEPLOYMENT=production/m)
  })

  it('prints a production key (as_live_…) with DEPLOYMENT=production, with no word about staging', async (t) => {
    const { url, email } = await withAccount(t)
    const run = await ok(url, ['keys', 'create', email], { DEPLOYMENT: 'production' })
    assert.match(lastLine(run.stdout), LIVE_KEY)
    assert.match(run.stdout, /^Created production key /)
    assert.doesNotMatch(run.stdout, /refuses/)
  })

  it('makes a different key every time', async (t) => {
    const { url, email } = await withAccount(t)
    const first = await createKey(url, email)
    const second = await createKey(url, email)
    assert.notEqual(first, second)
    assert.notEqual(first.slice(0, SHOWN), second.slice(0, SHOWN))
  })

  it('sets no expiry by default', async (t) => {
    const { url, email } = await withAccount(t)
    const secret = await createKey(url, email)
    assert.equal((await listedKey(url, email, secret)).EXPIRES, '-')
  })

  it('--expires-in 30d sets an expiry about 30 days ahead (as keys list shows)', async (t) => {
    const { url, email } = await withAccount(t)
    const before = Date.now()
    const secret = await createKey(url, email, ['--expires-in', '30d'])
    const afterwards = Date.now()
    const row = await listedKey(url, email, secret)
    const expires = Date.parse(row.EXPIRES as string)
    assert.ok(Number.isFinite(expires), `EXPIRES is not a date: ${row.EXPIRES}`)
    assert.ok(
      expires >= before + 30 * DAY_MS - 1000 && expires <= afterwards + 30 * DAY_MS + 1000,
      `expiry ${row.EXPIRES} is not 30 days after creation`,
    )
    assert.equal(row.STATE, 'active')
  })

  it('--name names the key in keys list', async (t) => {
    const { url, email } = await withAccount(t)
    const secret = await createKey(url, email, ['--name', 'ci-runner'])
    assert.equal((await listedKey(url, email, secret)).NAME, 'ci-runner')
  })

  it('--expires-in takes any well-formed duration up to 100 years: 99999999s (about 3 years) and 36500d', async (t) => {
    const { url, email } = await withAccount(t)
    for (const [duration, seconds] of [
      ['99999999s', 99_999_999],
      ['36500d', 36_500 * 86_400],
    ] as const) {
      const before = Date.now()
      const secret = await createKey(url, email, ['--expires-in', duration])
      const expires = Date.parse((await listedKey(url, email, secret)).EXPIRES as string)
      assert.ok(Math.abs(expires - before - seconds * 1000) < 60_000, `${duration}: expires ${new Date(expires)}`)
    }
  })

  it('refuses a key name with control characters, saying so, and stores no key', async (t) => {
    const { url, email } = await withAccount(t)
    assert.match(await wrongUsage(url, ['keys', 'create', email, '--name', EVIL_NAME]), /control characters/)
    assert.match((await ok(url, ['keys', 'list', email])).stdout, /has no keys/)
  })
})

describe('CLI: keys list', () => {
  it('shows each key id, prefix and state, and never the secret', async (t) => {
    const { url, email } = await withAccount(t)
    const secrets = [await createKey(url, email), await createKey(url, email, ['--expires-in', '2w'])]
    const run = await ok(url, ['keys', 'list', email])
    const rows = parseTable(run.stdout)
    assert.equal(rows.length, 2)
    for (const secret of secrets) {
      assert.ok(!run.stdout.includes(secret), 'keys list printed a full key')
      assert.ok(!run.stdout.includes(secret.slice(SHOWN)), 'keys list printed the secret part of a key')
      const row = rows.find((r) => r.PREFIX === `${secret.slice(0, SHOWN)}…`)
      assert.ok(row, `no row shows the prefix ${secret.slice(0, SHOWN)}`)
      assert.match(row.ID as string, /^key_[0-9A-Za-z]+$/)
      assert.equal(row.STATE, 'active')
    }
    assert.notEqual(rows[0]?.ID, rows[1]?.ID)
  })

  it('lists only the account’s own keys', async (t) => {
    const { url, email } = await withAccount(t)
    await ok(url, ['accounts', 'create', 'bob@example.com'])
    const mine = await createKey(url, email)
    const bobs = await createKey(url, 'bob@example.com')
    const rows = parseTable((await ok(url, ['keys', 'list', email])).stdout)
    assert.deepEqual(
      rows.map((r) => r.PREFIX),
      [`${mine.slice(0, SHOWN)}…`],
    )
    assert.notEqual(bobs.slice(0, SHOWN), mine.slice(0, SHOWN))
  })

  it('escapes control characters a stored name already holds (older rows): no raw ESC or BEL, no forged row', async (t) => {
    const { url, email } = await withAccount(t)
    // Written past today's rules, as a row from before them could be.
    const store = await openStore({ databaseUrl: url, poolSize: 1, timeoutMs: 5000 })
    try {
      const account = await store.findAccountByEmail(email)
      assert.ok(account)
      const { prefix, hash } = generateApiKey('staging')
      await store.createApiKey({ accountId: account.id, name: EVIL_NAME, prefix, hash, expiresAt: null })
    } finally {
      await store.close()
    }
    const { stdout } = await ok(url, ['keys', 'list', email])
    assert.deepEqual(rawControls(stdout), [], `raw control characters in ${JSON.stringify(stdout)}`)
    const rows = parseTable(stdout)
    assert.equal(rows.length, 1, `forged rows in ${JSON.stringify(stdout)}`)
    assert.equal(rows[0]?.NAME, 'evil\\u001b]0;pwned\\u0007\\u001b[31mRED\\u000afake row')
  })

  it('escapes invisible characters that reorder or break what the operator reads (bidi overrides, U+2028)', async (t) => {
    const { url, email } = await withAccount(t)
    const name = 'safe\u202eevil\u2066x\u2028y'
    const created = await ok(url, ['keys', 'create', email, '--name', name])
    assert.match(created.stdout, /"safe\\u202eevil\\u2066x\\u2028y"/)
    const { stdout } = await ok(url, ['keys', 'list', email])
    assert.doesNotMatch(stdout, /[\u202e\u2066\u2028]/)
    assert.equal(parseTable(stdout)[0]?.NAME, 'safe\\u202eevil\\u2066x\\u2028y')
  })

  it('refuses a missing SQLite file in one line naming it, and creates neither the file nor its folder', async (t) => {
    const dir = tempDir()
    t.after(() => rmSync(dir, { recursive: true, force: true }))
    const path = join(dir, 'nonexistent', 'dir', 'db.sqlite')
    for (const args of [
      ['keys', 'list', 'x@y.com'],
      ['keys', 'create', 'x@y.com'],
      ['keys', 'revoke', 'key_doesNotExist0000'],
    ]) {
      const message = await fails(`sqlite:${path}`, args)
      assert.ok(message.includes(path), `${args.join(' ')}: ${message}`)
      assert.ok(!existsSync(join(dir, 'nonexistent')), `${args.join(' ')} created ${join(dir, 'nonexistent')}`)
    }
  })
})

describe('CLI: keys revoke', () => {
  it('revokes a key by id: keys list then shows it revoked, and the other keys still active', async (t) => {
    const { url, email } = await withAccount(t)
    const revoked = await createKey(url, email)
    const kept = await createKey(url, email)
    const id = (await listedKey(url, email, revoked)).ID as string
    const run = await ok(url, ['keys', 'revoke', id])
    assert.match(run.stdout, new RegExp(id))
    assert.ok(!run.stdout.includes(revoked), 'keys revoke printed the key')
    assert.equal((await listedKey(url, email, revoked)).STATE, 'revoked')
    assert.equal((await listedKey(url, email, kept)).STATE, 'active')
  })

  it('revoking a key again succeeds and says since when it is revoked: the first time, kept', async (t) => {
    const { url, email } = await withAccount(t)
    const id = (await listedKey(url, email, await createKey(url, email))).ID as string
    const first = await ok(url, ['keys', 'revoke', id])
    const since = /is revoked, since (\S+)\.$/m.exec(first.stdout)?.[1]
    assert.ok(since && !Number.isNaN(Date.parse(since)), first.stdout)
    assert.match(first.stdout, /^Running servers refuse it within their API_KEY_CACHE_SECONDS \(5 s here\), /m)
    const again = await ok(url, ['keys', 'revoke', id])
    assert.match(
      again.stdout,
      new RegExp(`^Key ${id} \\(.*\\) is revoked, since ${since.replace(/\./g, '\\.')}\\.$`, 'm'),
    )
  })
})

describe('CLI: bad input → non-zero exit, exactly one line on stderr, nothing on stdout', () => {
  let dir: string
  let url: string
  before(async () => {
    dir = tempDir()
    url = `sqlite:${join(dir, 'db.sqlite')}`
    const run = await cliOn(url, ['accounts', 'create', 'alice@example.com'])
    assert.equal(run.code, 0, run.stderr)
  })
  after(() => rmSync(dir, { recursive: true, force: true }))

  const cases: [string, string[], RegExp, number][] = [
    ['an unknown command', ['frobnicate'], /frobnicate/, USAGE],
    ['an unknown action', ['keys', 'rotate', 'alice@example.com'], /rotate/, USAGE],
    [
      'a group without an action, naming its actions',
      ['keys'],
      /^animal-store: "keys" needs one of: create, list, revoke\. Run "animal-store help"\.$/,
      USAGE,
    ],
    [
      'accounts without an action, naming its actions',
      ['accounts'],
      /^animal-store: "accounts" needs one of: create, set-password\. Run "animal-store help"\.$/,
      USAGE,
    ],
    ['accounts create without an email', ['accounts', 'create'], /email/i, USAGE],
    ['keys create without an email', ['keys', 'create'], /email/i, USAGE],
    ['keys list without an email', ['keys', 'list'], /email/i, USAGE],
    ['keys revoke without a key id', ['keys', 'revoke'], /key/i, USAGE],
    ['a malformed email', ['accounts', 'create', 'not-an-email'], /not-an-email/, USAGE],
    ['an email with a space', ['keys', 'create', 'alice @example.com'], /alice @example\.com/, USAGE],
    ['keys create for an unknown account', ['keys', 'create', 'nobody@example.com'], /nobody@example\.com/, FAILED],
    ['keys list for an unknown account', ['keys', 'list', 'nobody@example.com'], /nobody@example\.com/, FAILED],
    [
      'a duration with an unknown unit (3x)',
      ['keys', 'create', 'alice@example.com', '--expires-in', '3x'],
      /3x/,
      USAGE,
    ],
    [
      'a duration without a unit (30)',
      ['keys', 'create', 'alice@example.com', '--expires-in', '30'],
      /expires-in/,
      USAGE,
    ],
    [
      'a zero duration (0d), saying it must be above 0',
      ['keys', 'create', 'alice@example.com', '--expires-in', '0d'],
      /--expires-in must be a whole number above 0 .*"0d"/,
      USAGE,
    ],
    ['a negative duration (-1d)', ['keys', 'create', 'alice@example.com', '--expires-in=-1d'], /expires-in/, USAGE],
    [
      "a negative duration as a separate argument (-5d), in our words rather than the parser's",
      ['keys', 'create', 'alice@example.com', '--expires-in', '-5d'],
      /^animal-store: --expires-in must be a whole number above 0 .*\(got "-5d"\)$/,
      USAGE,
    ],
    [
      "-1d as a separate argument, in our words rather than the parser's",
      ['keys', 'create', 'alice@example.com', '--expires-in', '-1d', '--name', 'x'],
      /^animal-store: --expires-in must be a whole number above 0 .*\(got "-1d"\)$/,
      USAGE,
    ],
    [
      'a duration over 100 years (1000000w), naming the limit',
      ['keys', 'create', 'alice@example.com', '--expires-in', '1000000w'],
      /--expires-in must be at most 100 years \(36500d\).*1000000w/,
      USAGE,
    ],
    [
      'a duration just over 100 years (36501d), naming the limit',
      ['keys', 'create', 'alice@example.com', '--expires-in', '36501d'],
      /at most 100 years \(36500d\)/,
      USAGE,
    ],
    [
      '--if-not-exists on another command than accounts create',
      ['keys', 'list', 'alice@example.com', '--if-not-exists'],
      /^animal-store: --if-not-exists applies only to "accounts create"\.$/,
      USAGE,
    ],
    [
      'a repeated --name',
      ['keys', 'create', 'alice@example.com', '--name', 'a', '--name', 'b'],
      /--name .*more than once/,
      USAGE,
    ],
    [
      'a repeated --expires-in',
      ['keys', 'create', 'alice@example.com', '--expires-in', '1d', '--expires-in=2d'],
      /--expires-in .*more than once/,
      USAGE,
    ],
    [
      '--expires-in without a value, with the way to help',
      ['keys', 'create', 'alice@example.com', '--expires-in'],
      /^animal-store: Option '--expires-in <value>' argument missing\. Run "animal-store help"\.$/,
      USAGE,
    ],
    [
      '--name without a value, its sentence ended before the way to help',
      ['keys', 'create', 'alice@example.com', '--name'],
      /^animal-store: Option '--name <value>' argument missing\. Run "animal-store help"\.$/,
      USAGE,
    ],
    [
      'a value given to --help, its sentence ended before the way to help',
      ['--help=yes'],
      /^animal-store: Option '-h, --help' does not take an argument\. Run "animal-store help"\.$/,
      USAGE,
    ],
    [
      'an unknown flag, in the words of the other bad input',
      ['keys', 'create', 'alice@example.com', '--scope', 'admin'],
      /^animal-store: Unknown option "--scope"\. Run "animal-store help"\.$/,
      USAGE,
    ],
    [
      '--version (there is none)',
      ['--version'],
      /^animal-store: Unknown option "--version"\. Run "animal-store help"\.$/,
      USAGE,
    ],
    ['a flag of another command', ['keys', 'list', 'alice@example.com', '--name', 'x'], /--name/, USAGE],
    ['an empty --name', ['keys', 'create', 'alice@example.com', '--name', ''], /--name/, USAGE],
    ['an extra argument', ['accounts', 'create', 'alice@example.com', 'bob@example.com'], /bob@example\.com/, USAGE],
    ['revoking an unknown key id', ['keys', 'revoke', 'key_doesNotExist0000'], /key_doesNotExist0000/, FAILED],
    ['a malformed key id (garbage)', ['keys', 'revoke', 'garbage'], /^animal-store: "garbage" is not a key id /, USAGE],
    ['a key id one character short', ['keys', 'revoke', 'key_doesNotExist000'], /is not a key id/, USAGE],
  ]
  for (const [what, args, message, code] of cases) {
    it(`refuses ${what} (exit ${code}): animal-store ${args.join(' ')}`, async () => {
      assert.match(await fails(url, args, {}, undefined, code), message)
    })
  }

  // Not in the table above: its title would carry the escape character to the test report.
  it('refuses an email with an escape character, saying so, and echoes it escaped', async () => {
    const message = await wrongUsage(url, ['accounts', 'create', 'z\u001b[31m@example.com'])
    assert.match(message, /"z\\u001b\[31m@example\.com" is not an email address .*control characters/)
  })

  it('refuses a bad configuration (DEPLOYMENT=prod) in one line naming the variable', async () => {
    assert.match(await fails(url, ['keys', 'list', 'alice@example.com'], { DEPLOYMENT: 'prod' }), /DEPLOYMENT/)
  })

  it('writes nothing to the database when refusing', async () => {
    await wrongUsage(url, ['keys', 'create', 'alice@example.com', '--expires-in', '3x'])
    await wrongUsage(url, ['keys', 'create', 'alice@example.com', '--bogus'])
    const run = await ok(url, ['keys', 'list', 'alice@example.com'])
    assert.doesNotMatch(run.stdout, /as_(test|live)_/)
  })
})

describe('CLI: help', () => {
  it('animal-store with no command prints the usage on stderr and exits 2 (a usage error, as POSIX tools do)', async (t) => {
    const { url } = newDatabase(t)
    const run = await cliOn(url, [])
    assert.equal(run.code, USAGE)
    assert.equal(run.stdout, '')
    assert.match(run.stderr, /^Usage: animal-store <command>\n[\s\S]*keys revoke <key-id>[\s\S]*Exit status: 0 done/)
  })

  for (const args of [['help'], ['--help'], ['-h']]) {
    it(`animal-store ${args.join(' ') || '(no arguments)'} prints the usage on stdout and exits 0`, async (t) => {
      const { url } = newDatabase(t)
      const run = await ok(url, args)
      assert.match(run.stdout, /accounts create/)
      assert.match(run.stdout, /keys create/)
      assert.match(run.stdout, /keys list/)
      assert.match(run.stdout, /keys revoke/)
    })
  }
})

describe('CLI keys against the app (end to end, same SQLite file)', () => {
  it('a key created by the CLI is accepted; after keys revoke, a freshly built app refuses it with 401 revoked_api_key', async (t) => {
    const { url, email } = await withAccount(t)
    const secret = await createKey(url, email)

    const first = await build(t, { DATABASE_URL: url })
    const accepted = await listPets(first, secret)
    assert.equal(accepted.statusCode, 200, accepted.body)
    assert.deepEqual(accepted.json(), [])

    await ok(url, ['keys', 'revoke', (await listedKey(url, email, secret)).ID as string])

    await assertRefused(await build(t, { DATABASE_URL: url }), secret, 'revoked_api_key')
  })

  it('a running app with API_KEY_CACHE_SECONDS=0 refuses a key as soon as the CLI revokes it', async (t) => {
    const { url, email } = await withAccount(t)
    const secret = await createKey(url, email)
    const running = await build(t, { DATABASE_URL: url, API_KEY_CACHE_SECONDS: '0' })
    assert.equal((await listPets(running, secret)).statusCode, 200)
    await ok(url, ['keys', 'revoke', (await listedKey(url, email, secret)).ID as string])
    await assertRefused(running, secret, 'revoked_api_key')
  })

  it('a production key works on a production app and is refused (401 invalid_api_key) by a staging app', async (t) => {
    const { url, email } = await withAccount(t)
    const secret = await createKey(url, email, [], { DEPLOYMENT: 'production' })
    const production = await build(t, { DATABASE_URL: url, DEPLOYMENT: 'production' })
    assert.equal((await listPets(production, secret)).statusCode, 200)
    const staging = await build(t, { DATABASE_URL: url })
    await assertRefused(staging, secret, 'invalid_api_key')
  })

  it('a key created with --expires-in 1s is refused with 401 expired_api_key once it lapses, and listed as expired', async (t) => {
    const { url, email } = await withAccount(t)
    const secret = await createKey(url, email, ['--expires-in', '1s'])
    // Real time, not a mocked clock: the app and `keys list` below read the real one.
    await sleep(1100)
    await assertRefused(await build(t, { DATABASE_URL: url }), secret, 'expired_api_key')
    assert.equal((await listedKey(url, email, secret)).STATE, 'expired')
  })

  it('the SQLite files never hold the key in plain text, only its SHA-256', async (t) => {
    const { dir, url, email } = await withAccount(t)
    const secrets = [await createKey(url, email), await createKey(url, email, ['--name', 'second'])]
    // Use the keys through a running app, so the -wal file has recent writes (e.g. last use) too.
    const app = await build(t, { DATABASE_URL: url })
    for (const secret of secrets) {
      assert.equal((await listPets(app, secret)).statusCode, 200)
    }
    const files = readdirSync(dir).filter((name) => name.startsWith('db.sqlite'))
    assert.ok(files.includes('db.sqlite'), `no database file in ${files.join(', ')}`)
    const bytes = Buffer.concat(files.map((name) => readFileSync(join(dir, name))))
    for (const secret of secrets) {
      assert.ok(!bytes.includes(secret), 'the key is stored in plain text')
      assert.ok(!bytes.includes(secret.slice(SHOWN)), 'the secret part of the key is stored in plain text')
      // Positive control, so that the search above is known to look in the right place.
      const digest = createHash('sha256').update(secret).digest()
      const stored = [digest.toString('base64url'), digest.toString('hex'), digest.toString('base64')]
      assert.ok(
        stored.some((text) => bytes.includes(text)) || bytes.includes(digest),
        'the SHA-256 of the key is not in the database',
      )
    }
  })
})
