/**
 * Opaque pagination cursors: `<base64url(encrypted afterId.filter)>.<HMAC>`. The HMAC (SHA-256,
 * truncated to 128 bits, keyed by a secret shared through the database) means a cursor cannot be
 * forged or edited, and it binds the cursor to the filters it was issued for (`status=sold`,
 * `petId=7`). The position is encrypted (AES-256-CTR with the HMAC as its IV, as SIV does): a list's
 * position is a sequence all accounts share, and in clear it would tell one account how busy the
 * others are. The same page always gets the same cursor.
 */
import { createCipheriv, createHmac, randomBytes, timingSafeEqual } from 'node:crypto'
import { ApiError } from '../errors.ts'
import { BoundedMap } from '../lib/bounded-map.ts'
import type { Store } from '../store/types.ts'

const MAC_BYTES = 16
/** Digits of the largest position, 2^53 - 1. */
const POSITION_DIGITS = 16
/** Cursors kept once made: the next-page link of a popular page is the same cursor every time. */
const ENCODED_CURSORS = 1000

export interface CursorCodec {
  encode(afterId: number, filter: string | undefined): string
  /** The id to continue after; throws invalid_cursor when the cursor was not issued for this query. */
  decode(cursor: string, filter: string | undefined): number
}

/** A pets cursor's filter is its status alone (cursors issued before orders had filters of their own). */
const issued = (filter: string | undefined) =>
  !filter ? 'the list without filters' : filter.includes('=') ? filter : `status=${filter}`

/** Strings a client is given and hands back unchanged: sealed, it can neither read nor forge them. */
export interface Sealer {
  /** `<base64url(encrypted payload)>.<base64url(HMAC)>`: the same payload always gives the same token. */
  seal(payload: string): string
  /** The payload, or null when the token was not sealed by this sealer (edited, forged, another database's). */
  open(token: string): string | null
}

/** The token's two parts, in their one canonical spelling, or null. */
function tokenParts(token: string): { encoded: string; body: Buffer; given: Buffer } | null {
  const parts = token.split('.')
  if (parts.length !== 2) return null
  const [encoded = '', signature = ''] = parts
  const body = Buffer.from(encoded, 'base64url')
  const given = Buffer.from(signature, 'base64url')
  // Only the canonical spelling counts, so that a token has exactly one valid form.
  const canonical = given.toString('base64url') === signature && body.toString('base64url') === encoded
  return given.length === MAC_BYTES && canonical ? { encoded, body, given } : null
}

/** Seals with keys derived from `secret` for `purpose`: tokens of one purpose never open as another's. */
export function sealer(secret: string, purpose: string): Sealer {
  const macKey = createHmac('sha256', secret).update(`${purpose} mac`).digest()
  const mac = (payload: string) => createHmac('sha256', macKey).update(payload).digest().subarray(0, MAC_BYTES)
  const encryptionKey = createHmac('sha256', secret).update(`${purpose} encryption`).digest()
  /** Encrypts or decrypts (CTR is its own inverse) under the token's MAC, a 16-byte IV (as SIV does). */
  const crypt = (data: Buffer, iv: Buffer) => {
    const cipher = createCipheriv('aes-256-ctr', encryptionKey, iv)
    return Buffer.concat([cipher.update(data), cipher.final()])
  }
  return {
    seal(payload) {
      const tag = mac(payload)
      return `${crypt(Buffer.from(payload), tag).toString('base64url')}.${tag.toString('base64url')}`
    },
    open(token) {
      const parts = tokenParts(token)
      if (parts === null) return null
      const payload = crypt(parts.body, parts.given).toString()
      return timingSafeEqual(parts.given, mac(payload)) ? payload : null
    },
  }
}

export function cursorCodec(secret: string): CursorCodec {
  const sealed = sealer(secret, 'cursor')
  // A tag of the sealed form never passes the older form's check (keys of their own), which would
  // tell a client whether a guessed position is right.
  const legacyMac = (payload: string) => createHmac('sha256', secret).update(payload).digest().subarray(0, MAC_BYTES)
  /** A cursor issued before positions were encrypted, by a link a client may still be following. */
  const legacy = (cursor: string) => {
    const parts = tokenParts(cursor)
    if (parts === null) return null
    const payload = parts.body.toString()
    const genuine = Buffer.from(payload).toString('base64url') === parts.encoded
    return genuine && timingSafeEqual(parts.given, legacyMac(payload)) ? payload : null
  }
  const invalid = (why: string) => new ApiError('invalid_cursor', `The cursor ${why}; start again without one.`)

  const encoded = new BoundedMap<string, string>(ENCODED_CURSORS)

  return {
    encode(afterId, filter) {
      // At a fixed width, so that a cursor's length does not tell the position's digits either.
      const payload = `${String(afterId).padStart(POSITION_DIGITS, '0')}.${filter ?? ''}`
      let cursor = encoded.get(payload)
      if (cursor === undefined) {
        cursor = sealed.seal(payload)
        encoded.set(payload, cursor)
      }
      return cursor
    },
    decode(cursor, filter) {
      const payload = sealed.open(cursor) ?? legacy(cursor)
      if (payload === null) throw invalid('is not valid')
      // The filter may hold dots (`type=order.placed`, a time): only the first one ends the id.
      const dot = payload.indexOf('.')
      const afterId = payload.slice(0, dot)
      const issuedFor = payload.slice(dot + 1)
      if ((issuedFor || undefined) !== filter) {
        // Named as the store reads it (`order.*` spelled out): the link that gave it holds the same.
        throw new ApiError(
          'invalid_cursor',
          `The cursor was issued for ${issued(issuedFor)}: send it with the filters of the link that gave it, or start again without one.`,
        )
      }
      return Number(afterId)
    },
  }
}

/** The codec of one list's cursors, keyed by the secret `name` that every instance shares through the store. */
export async function sharedCursorCodec(store: Pick<Store, 'secret'>, name: string): Promise<CursorCodec> {
  return cursorCodec(await sharedSecret(store, name))
}

/** A sealer for `purpose`, keyed by the secret `name` that every instance shares through the store. */
export async function sharedSealer(store: Pick<Store, 'secret'>, name: string, purpose: string): Promise<Sealer> {
  return sealer(await sharedSecret(store, name), purpose)
}

const sharedSecret = (store: Pick<Store, 'secret'>, name: string) =>
  store.secret(name, () => randomBytes(32).toString('base64url'))
