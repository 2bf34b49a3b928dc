/**
 * The account and key rules of src/domain/accounts.ts, shared by the CLI and the portal: what a key name,
 * an email address and a key lifetime may be, checked directly and through the portal's forms.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import Type from 'typebox'
import Value from 'typebox/value'
import {
  AccountRuleError,
  isEmail,
  isKeyName,
  isPassword,
  KEY_NAME_DESCRIPTION,
  KeyNameSchema,
  MAX_LIFETIME_DAYS,
  PasswordSchema,
  parseDuration,
} from '../../src/domain/accounts.ts'
import { stringRule } from '../../src/lib/string-rule.ts'
import { EXPIRY_CHOICES } from '../../src/portal/forms.ts'
import { EMAIL_DESCRIPTION, EmailSchema } from '../../src/schemas/accounts.ts'
import { suiteApp } from '../helper.ts'
import { FormBrowser, newAddress, newEmail, PASSWORD, signedInBrowser } from '../portal/browser.ts'

const DAY_MS = 86_400_000

/** Every C0 and C1 control character, and DEL. */
const CONTROLS = [
  ...Array.from({ length: 0x20 }, (_, i) => i),
  ...Array.from({ length: 0x9f - 0x7f + 1 }, (_, i) => 0x7f + i),
].map((code) => String.fromCodePoint(code))

const hex = (c: string) => `U+${(c.codePointAt(0) as number).toString(16).padStart(4, '0')}`

describe('Key names', () => {
  it('refuse every C0 and C1 control character and DEL, anywhere in the name', () => {
    for (const c of CONTROLS) {
      for (const name of [`lap${c}top`, `${c}laptop`, `laptop${c}`, c]) {
        assert.equal(Value.Check(KeyNameSchema, name), false, `${hex(c)} accepted in ${JSON.stringify(name)}`)
      }
    }
  })

  it('accept spaces inside, non-ASCII letters and emoji; refuse only-spaces, empty and over 100 characters', () => {
    for (const name of ['laptop', 'ci runner', ' padded ', 'Zürich büro', '東京', '🐈 cat', 'x'.repeat(100)]) {
      assert.ok(Value.Check(KeyNameSchema, name), `${JSON.stringify(name)} refused`)
    }
    for (const name of ['', '   ', '\u00a0', 'x'.repeat(101)]) {
      assert.equal(Value.Check(KeyNameSchema, name), false, `${JSON.stringify(name)} accepted`)
    }
  })

  it('the rule as people read it says control characters are refused', () => {
    assert.match(KEY_NAME_DESCRIPTION, /no control characters/)
  })
})

describe('Email addresses', () => {
  it('refuse every C0 and C1 control character and DEL, in the local part and in the domain', () => {
    for (const c of CONTROLS) {
      for (const email of [`a${c}b@example.com`, `ab@exa${c}mple.com`, `ab@example.co${c}m`]) {
        assert.equal(isEmail(email), false, `${hex(c)} accepted in ${JSON.stringify(email)}`)
      }
    }
  })

  it('still accept an ordinary address, and the rule as people read it mentions control characters', () => {
    assert.ok(isEmail('alice@example.com'))
    assert.ok(isEmail('Ünïcode+tag@exämple.org'))
    assert.match(EMAIL_DESCRIPTION, /control characters/)
  })
})

describe('The rules as checked outside a route (stringRule, without typebox/value)', () => {
  const emoji = '🐈'
  const samples = [
    undefined,
    42,
    '',
    ' ',
    '   ',
    '\u00a0',
    'x',
    'laptop',
    ' padded ',
    'evil\u001b[31m',
    '\ufffd',
    '\ud800 lone surrogate',
    'alice@example.com',
    'a@b.c',
    'a@b',
    'a b@example.com',
    'Ünïcode+tag@exämple.org',
    `${'a'.repeat(250)}@b.co`,
    `${'a'.repeat(249)}@b.co`,
    ...[14, 15, 99, 100, 101, 128, 129, 255, 256, 257].flatMap((n) => ['p'.repeat(n), emoji.repeat(n)]),
    `${emoji.repeat(255)}x`,
    `${'x'.repeat(99)}${emoji}`,
    'correct horse battery staple',
    `correct horse\nbattery staple`,
  ]
  for (const [name, schema, check] of [
    ['passwords', PasswordSchema, isPassword],
    ['key names', KeyNameSchema, isKeyName],
    ['email addresses', EmailSchema, isEmail],
  ] as const) {
    it(`${name}: the same answer as TypeBox's Value.Check, lengths counted in code points`, () => {
      for (const sample of samples) {
        assert.equal(check(sample), Value.Check(schema, sample), JSON.stringify(sample)?.slice(0, 40))
      }
    })
  }

  it('refuses, at once, a schema with a rule it does not check', () => {
    assert.throws(() => stringRule(Type.String({ format: 'email' })), /format/)
    assert.throws(() => stringRule(Type.Number() as never), /string schemas/)
  })
})

describe('Key lifetimes (parseDuration)', () => {
  it('reads each unit, up to exactly 100 years', () => {
    assert.equal(parseDuration('30s'), 30_000)
    assert.equal(parseDuration('5m'), 300_000)
    assert.equal(parseDuration('2h'), 7_200_000)
    assert.equal(parseDuration('30d'), 30 * DAY_MS)
    assert.equal(parseDuration('2w'), 14 * DAY_MS)
    assert.equal(parseDuration('99999999s'), 99_999_999_000)
    assert.equal(parseDuration('36500d'), 36_500 * DAY_MS)
    assert.equal(MAX_LIFETIME_DAYS, 36_500)
  })

  it('refuses a well-formed duration over 100 years by naming the limit, not the format', () => {
    for (const text of ['36501d', '5215w', '1000000w', '876001h', '3153600001s', `1${'0'.repeat(400)}d`]) {
      assert.throws(() => parseDuration(text), {
        name: 'AccountRuleError',
        message: new RegExp(`^must be at most 100 years \\(36500d\\) \\(got "${text}"\\)$`),
      })
    }
  })

  it('refuses a malformed duration by describing the format', () => {
    for (const text of ['', '30', 'd', '0d', '030d', '-5d', '+5d', '1.5d', '5 d', '5D', '5y', ' 5d', '5d ']) {
      assert.throws(
        () => parseDuration(text),
        (error: unknown) => {
          assert.ok(error instanceof AccountRuleError)
          assert.match(error.message, /^must be a whole number above 0 followed by s, m, h, d or w/)
          return true
        },
      )
    }
  })

  it('the longest lifetime still makes a valid expiry date', () => {
    assert.doesNotThrow(() => new Date(Date.now() + parseDuration(`${MAX_LIFETIME_DAYS}d`)).toISOString())
  })

  it('every expiry the portal offers is within the limit', () => {
    for (const [value] of EXPIRY_CHOICES) {
      if (value === 'never') continue
      assert.ok(parseDuration(value) <= MAX_LIFETIME_DAYS * DAY_MS, value)
    }
  })
})

describe('The portal applies the same rules', () => {
  // Each test looks only at its own account, or its own email: one app serves both.
  const shared = suiteApp()

  it('refuses a key name with control characters (400) and stores no key', async () => {
    const { app } = await shared()
    // Signed in to an account with a cheap password hash (see browser.ts), rather than signed up.
    const { browser, email } = await signedInBrowser(app)
    const response = await browser.submit('/portal/keys', '/portal/keys', {
      name: 'evil\u001b]0;pwned\u0007\u001b[31mRED\nfake row',
      expires: 'never',
    })
    assert.equal(response.statusCode, 400)
    assert.match(response.body, /Give the key a name/)
    const account = await app.store.findAccountByEmail(email)
    assert.ok(account)
    assert.deepEqual(await app.store.listApiKeys(account.id), [])
  })

  it('refuses to sign up with an email holding a control character (400) and creates no account', async () => {
    const { app } = await shared()
    const email = `z\u001b[31m${newEmail()}`
    const response = await new FormBrowser(app, {}, { remoteAddress: newAddress() }).submit(
      '/portal/sign-up',
      '/portal/sign-up',
      {
        email,
        password: PASSWORD,
        confirm: PASSWORD,
      },
    )
    assert.equal(response.statusCode, 400)
    assert.equal(await app.store.findAccountByEmail(email), null)
  })
})
