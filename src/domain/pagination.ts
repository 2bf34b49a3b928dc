/**
 * Opaque pagination cursors: `<base64url(afterId.status)>.<HMAC>`. The HMAC (SHA-256, truncated to
 * 128 bits, keyed by a secret shared through the database) means a cursor cannot be forged or
 * edited, and it binds the cursor to the status filter it was issued for.
 */
import { createHmac, timingSafeEqual } from 'node:crypto'
import { ApiError } from '../errors.ts'
import { BoundedMap } from '../lib/bounded-map.ts'
import type { PetStatus } from '../schemas/pets.ts'

const MAC_BYTES = 16
/** Cursors kept once made: the next-page link of a popular page is the same cursor every time. */
const ENCODED_CURSORS = 1000

export interface CursorCodec {
  encode(afterId: number, status: PetStatus | undefined): string
  /** The id to continue after; throws invalid_cursor when the cursor was not issued for this query. */
  decode(cursor: string, status: PetStatus | undefined): number
}

export function cursorCodec(secret: string): CursorCodec {
  const mac = (payload: string) => createHmac('sha256', secret).update(payload).digest().subarray(0, MAC_BYTES)
  const invalid = (why: string) => new ApiError('invalid_cursor', `The cursor ${why}; start again without one.`)

  const encoded = new BoundedMap<string, string>(ENCODED_CURSORS)

  return {
    encode(afterId, status) {
      const payload = `${afterId}.${status ?? ''}`
      let cursor = encoded.get(payload)
      if (cursor === undefined) {
        cursor = `${Buffer.from(payload).toString('base64url')}.${mac(payload).toString('base64url')}`
        encoded.set(payload, cursor)
      }
      return cursor
    },
    decode(cursor, status) {
      const parts = cursor.split('.')
      if (parts.length !== 2) throw invalid('is not valid')
      const [encoded = '', signature = ''] = parts
      const payload = Buffer.from(encoded, 'base64url').toString()
      const given = Buffer.from(signature, 'base64url')
      // Only the canonical spelling counts, so that a cursor has exactly one valid form.
      const canonical =
        given.toString('base64url') === signature && Buffer.from(payload).toString('base64url') === encoded
      if (given.length !== MAC_BYTES || !canonical) throw invalid('is not valid')
      if (!timingSafeEqual(given, mac(payload))) throw invalid('is not valid')
      const [afterId, issuedFor] = payload.split('.')
      if ((issuedFor || undefined) !== status) throw invalid(`was issued for status=${issuedFor || '(any)'}`)
      return Number(afterId)
    },
  }
}
