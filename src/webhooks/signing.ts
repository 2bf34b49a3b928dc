/**
 * Standard Webhooks signatures, made by the `standardwebhooks` library (no HMAC code of ours): a
 * receiver verifies them with any Standard Webhooks library. During a secret's rotation the old
 * and the new secret both sign, so a receiver still holding either one accepts the message.
 */
import { randomBytes } from 'node:crypto'
import { Webhook } from 'standardwebhooks'

export interface SignatureHeaders {
  'webhook-id': string
  'webhook-timestamp': string
  'webhook-signature': string
}

/** A new signing secret: `whsec_` and the base64 of 24 random bytes, the form the library reads. */
export function newWebhookSecret(): string {
  return `whsec_${randomBytes(24).toString('base64')}`
}

/**
 * The three headers of one delivery attempt: `webhook-signature` holds one `v1,<signature>` per
 * secret, separated by spaces. A Webhook is built per call: that only decodes the secret's base64.
 * Throws when there is no secret (a message must never go out unsigned).
 */
export function signatureHeaders(id: string, timestamp: Date, body: string, secrets: string[]): SignatureHeaders {
  if (secrets.length === 0) throw new Error('signatureHeaders: no secret to sign with')
  return {
    'webhook-id': id,
    'webhook-timestamp': String(Math.floor(timestamp.getTime() / 1000)),
    'webhook-signature': secrets.map((secret) => new Webhook(secret).sign(id, timestamp, body)).join(' '),
  }
}
