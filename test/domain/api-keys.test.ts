import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import {
  apiKeyDeployment,
  generateApiKey,
  hashApiKey,
  KEY_PREFIX_LENGTH,
  redactApiKeys,
} from '../../src/domain/api-keys.ts'

describe('API key format (point 3)', () => {
  it('is a high-entropy token whose prefix names the deployment', () => {
    const live = generateApiKey('production')
    const test = generateApiKey('staging')
    assert.match(live.secret, /^as_live_[0-9A-Za-z]{38}$/)
    assert.match(test.secret, /^as_test_[0-9A-Za-z]{38}$/)
    assert.equal(apiKeyDeployment(live.secret), 'production')
    assert.equal(apiKeyDeployment(test.secret), 'staging')
    assert.equal(live.prefix, live.secret.slice(0, KEY_PREFIX_LENGTH))
  })

  it('never repeats and uses the whole alphabet evenly enough', () => {
    const secrets = Array.from({ length: 2000 }, () => generateApiKey('staging').secret.slice(8, 40))
    assert.equal(new Set(secrets).size, secrets.length)
    const counts = new Map<string, number>()
    for (const c of secrets.join('')) counts.set(c, (counts.get(c) ?? 0) + 1)
    assert.equal(counts.size, 62)
    const expected = (2000 * 32) / 62
    for (const [c, n] of counts) assert.ok(Math.abs(n - expected) < expected * 0.25, `${c} appears ${n} times`)
  })

  it('detects typos through its checksum', () => {
    const { secret } = generateApiKey('production')
    const position = 20
    const changed = secret.slice(0, position) + (secret[position] === 'a' ? 'b' : 'a') + secret.slice(position + 1)
    assert.equal(apiKeyDeployment(changed), null)
    for (const bad of [
      '',
      'as_live_',
      `${secret}x`,
      secret.slice(0, -1),
      secret.replace('as_live_', 'as_prod_'),
      `Bearer ${secret}`,
    ]) {
      assert.equal(apiKeyDeployment(bad), null, bad)
    }
  })

  it('hashes to SHA-256 (base64url), never storing the secret', () => {
    const { secret, hash } = generateApiKey('staging')
    assert.equal(hash, hashApiKey(secret))
    assert.match(hash, /^[\w-]{43}$/)
    assert.ok(!hash.includes(secret.slice(8)))
  })

  it('redacts keys from log text', () => {
    const { secret } = generateApiKey('production')
    assert.equal(redactApiKeys(`/v1/pets?key=${secret}&x=1`), '/v1/pets?key=as_live_[REDACTED]&x=1')
    // Percent-escapes hide nothing: the key is found in the unescaped text, which is what is logged.
    const escaped = `%61s%5Flive_${secret.slice(8, 20)}%${secret.charCodeAt(20).toString(16)}${secret.slice(21)}`
    assert.equal(redactApiKeys(`/v1/pets/${escaped}?x=%20`), '/v1/pets/as_live_[REDACTED]?x= ')
    assert.equal(redactApiKeys('/v1/pets?status=a%20b'), '/v1/pets?status=a%20b')
    // A key in the clear is redacted where it stands, the rest kept as it was sent.
    assert.equal(redactApiKeys(`/v1/pets?t=Bearer%20${secret}`), '/v1/pets?t=Bearer%20as_live_[REDACTED]')
    // Partly escaped: the part in the clear must not be all that is hidden.
    const partly = `${secret.slice(0, 9)}%${secret.charCodeAt(9).toString(16)}${secret.slice(10)}`
    assert.equal(redactApiKeys(`/v1/pets?k=${partly}`), '/v1/pets?k=as_live_[REDACTED]')
    // Escaped twice (%2561 is %61 is a).
    assert.equal(redactApiKeys(`/v1/pets?x=%2561s_live_${secret.slice(8)}`), '/v1/pets?x=as_live_[REDACTED]')
  })
})
