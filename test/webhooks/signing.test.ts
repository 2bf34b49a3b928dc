/**
 * Signatures a receiver can check with any Standard Webhooks library: here the reference one's
 * verify(), and the specification's own example.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { Webhook } from 'standardwebhooks'
import { newWebhookSecret, signatureHeaders } from '../../src/webhooks/signing.ts'

const body = JSON.stringify({ type: 'pet.created', data: { id: 7, name: 'Rex' } })

describe('Webhook signing (Standard Webhooks)', () => {
  it('makes secrets of whsec_ and 24 random bytes in base64', () => {
    const secret = newWebhookSecret()
    assert.match(secret, /^whsec_[A-Za-z0-9+/]{32}$/)
    assert.equal(Buffer.from(secret.slice('whsec_'.length), 'base64').length, 24)
    assert.notEqual(newWebhookSecret(), secret)
  })

  it("matches the specification's example signature", () => {
    const headers = signatureHeaders(
      'msg_p5jXN8AQM9LWM0D4loKWxJek',
      new Date(1_614_265_330_000),
      '{"test": 2432232314}',
      ['whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw'],
    )
    assert.deepEqual(headers, {
      'webhook-id': 'msg_p5jXN8AQM9LWM0D4loKWxJek',
      'webhook-timestamp': '1614265330',
      'webhook-signature': 'v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=',
    })
  })

  it('signs with one secret: the receiver holding it verifies, others do not', () => {
    const secret = newWebhookSecret()
    const headers = signatureHeaders('msg_1', new Date(), body, [secret])
    assert.match(headers['webhook-signature'], /^v1,[A-Za-z0-9+/]{43}=$/)
    assert.deepEqual(new Webhook(secret).verify(body, { ...headers }), JSON.parse(body))
    assert.throws(() => new Webhook(newWebhookSecret()).verify(body, { ...headers }), /No matching signature/)
    assert.throws(() => new Webhook(secret).verify(`${body} `, { ...headers }), /No matching signature/)
    assert.throws(
      () => new Webhook(secret).verify(body, { ...headers, 'webhook-id': 'msg_2' }),
      /No matching signature/,
    )
  })

  it('during a rotation, signs with both secrets, one v1 signature each: either verifies', () => {
    const [oldSecret, newSecret] = [newWebhookSecret(), newWebhookSecret()]
    const headers = signatureHeaders('msg_1', new Date(), body, [oldSecret, newSecret])
    const signatures = headers['webhook-signature'].split(' ')
    assert.equal(signatures.length, 2)
    for (const [i, secret] of [oldSecret, newSecret].entries()) {
      assert.deepEqual(new Webhook(secret).verify(body, { ...headers }), JSON.parse(body))
      // Each signature is its own secret's, in the order given.
      const alone = { ...headers, 'webhook-signature': signatures[i] as string }
      assert.deepEqual(new Webhook(secret).verify(body, alone), JSON.parse(body))
    }
    assert.throws(() => new Webhook(newWebhookSecret()).verify(body, { ...headers }), /No matching signature/)
  })

  it('puts the timestamp in whole seconds, which the receiver checks for age', () => {
    const secret = newWebhookSecret()
    const old = new Date(Date.now() - 10 * 60_000)
    const headers = signatureHeaders('msg_1', old, body, [secret])
    assert.equal(headers['webhook-timestamp'], String(Math.floor(old.getTime() / 1000)))
    assert.throws(() => new Webhook(secret).verify(body, { ...headers }), /too old/)
  })

  it('refuses to sign with no secret', () => {
    assert.throws(() => signatureHeaders('msg_1', new Date(), body, []), /no secret/)
  })
})
