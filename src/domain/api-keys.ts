/**
 * API key format. A key looks like `as_live_<32 random base62><6 base62 checksum>`:
 * - `as_` says whose key it is (so secret scanners and people recognise it),
 * - `live` (production) or `test` (staging) says which deployment accepts it,
 * - 32 base62 characters carry ~190 bits from the CSPRNG,
 * - the CRC-32 checksum lets us refuse mistyped or made-up keys without touching the database.
 * Only the SHA-256 of a key is stored: a high-entropy key needs no slow hash to resist guessing.
 */
import { hash, randomBytes } from 'node:crypto'
import { crc32 } from 'node:zlib'
import type { Deployment } from '../config.ts'

const BASE62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz'
const RANDOM_LENGTH = 32
const CHECKSUM_LENGTH = 6
const TAGS: Record<Deployment, string> = { production: 'live', staging: 'test' }
const KEY_PATTERN = /^as_(live|test)_([0-9A-Za-z]{32})([0-9A-Za-z]{6})$/

/** How many characters of a key are kept and shown to identify it, e.g. `as_live_3kTM`. */
export const KEY_PREFIX_LENGTH = 12

export interface GeneratedKey {
  secret: string
  prefix: string
  hash: string
}

export function generateApiKey(deployment: Deployment): GeneratedKey {
  const random = randomBase62(RANDOM_LENGTH)
  const secret = `as_${TAGS[deployment]}_${random}${checksum(random)}`
  return { secret, prefix: secret.slice(0, KEY_PREFIX_LENGTH), hash: hashApiKey(secret) }
}

/** The deployment a well-formed key belongs to, or null when the text cannot be one of our keys. */
export function apiKeyDeployment(secret: string): Deployment | null {
  const match = KEY_PATTERN.exec(secret)
  if (!match || checksum(match[2] as string) !== match[3]) return null
  return match[1] === 'live' ? 'production' : 'staging'
}

export function hashApiKey(secret: string): string {
  return hash('sha256', secret, 'base64url')
}

const KEY_IN_TEXT = /as_(live|test)_[0-9A-Za-z]+/g

/**
 * Replaces anything that looks like one of our keys, for logs; in a URL, also a key written with
 * percent-escapes (`%61s_test_…`), and the text is then logged unescaped.
 */
export function redactApiKeys(text: string): string {
  // Almost no text holds a key: a plain search is much cheaper than running the pattern over it.
  const redacted = text.includes('as_') ? text.replace(KEY_IN_TEXT, 'as_$1_[REDACTED]') : text
  if (!text.includes('%')) return redacted
  const unescaped = unescapeAscii(text)
  if (!unescaped.includes('as_')) return redacted
  // Logged as sent unless escapes hid (part of) a key: then unescaped, with the whole key hidden.
  const hidden = unescaped.replace(KEY_IN_TEXT, 'as_$1_[REDACTED]')
  return hidden === unescapeAscii(redacted) ? redacted : hidden
}

/** ASCII percent-escapes undone, repeatedly (`%2561` → `%61` → `a`), a few times at most. */
function unescapeAscii(text: string): string {
  let out = text
  for (let round = 0; round < 4 && out.includes('%'); round++) {
    const next = out.replace(/%([0-7][0-9A-Fa-f])/g, (_, hex: string) => String.fromCharCode(Number.parseInt(hex, 16)))
    if (next === out) break
    out = next
  }
  return out
}

const ID_LENGTH = 16

/** Whether `text` has the form of a key id (`key_` and 16 base62 characters), the only form ever issued. */
export const isKeyId = (text: string) => new RegExp(`^key_[0-9A-Za-z]{${ID_LENGTH}}$`).test(text)

/** A random identifier such as `key_3kTMd9PqLw2xY8aZ` (ids are not secrets, but should not be guessable in sequence). */
export function randomId(prefix: string, length = ID_LENGTH): string {
  return `${prefix}_${randomBase62(length)}`
}

function randomBase62(length: number): string {
  let out = ''
  while (out.length < length) {
    // Bytes from 248 up are dropped so that every character is equally likely (248 = 4 × 62).
    for (const byte of randomBytes(length * 2)) {
      if (byte < 248) out += BASE62[byte % 62]
      if (out.length === length) break
    }
  }
  return out
}

function checksum(text: string): string {
  let n = crc32(text)
  let out = ''
  for (let i = 0; i < CHECKSUM_LENGTH; i++) {
    out = BASE62[n % 62] + out
    n = Math.floor(n / 62)
  }
  return out
}
