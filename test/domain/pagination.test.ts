import assert from 'node:assert/strict'
import { createHmac } from 'node:crypto'
import { describe, it } from 'node:test'
import { cursorCodec } from '../../src/domain/pagination.ts'
import type { ApiError } from '../../src/errors.ts'

describe('Pagination cursors (point 5)', () => {
  const codec = cursorCodec('a secret')

  it('round-trips the position and the status filter', () => {
    assert.equal(codec.decode(codec.encode(42, undefined), undefined), 42)
    assert.equal(codec.decode(codec.encode(9007199254740991, 'sold'), 'sold'), 9007199254740991)
    // Filters with dots: an event type, a time.
    const filter = 'type=order.placed,order.canceled&createdAfter=2026-12-07T10:00:00.000Z'
    assert.equal(codec.decode(codec.encode(7, filter), filter), 7)
  })

  it('is opaque: neither the cursor nor its decoded parts show the position or the filter', () => {
    const cursor = codec.encode(123456, 'status=sold')
    const decoded = cursor.split('.').map((part) => Buffer.from(part, 'base64url').toString('latin1'))
    for (const text of [cursor, ...decoded]) {
      assert.ok(!text.includes('123456') && !text.includes('sold'), text)
    }
    assert.equal(codec.encode(123456, 'status=sold'), cursor, 'the same page, the same cursor')
    assert.equal(codec.encode(7, 'status=sold').length, cursor.length, 'nor its length the digits')
  })

  it('still takes a cursor issued before positions were encrypted (a link being followed)', () => {
    const payload = '42.sold'
    const tag = createHmac('sha256', 'a secret').update(payload).digest().subarray(0, 16)
    const legacy = `${Buffer.from(payload).toString('base64url')}.${tag.toString('base64url')}`
    assert.equal(codec.decode(legacy, 'sold'), 42)
    // A current cursor's tag with a guessed position in clear is refused: no oracle for guesses.
    const [, tag2] = codec.encode(42, 'sold').split('.')
    for (const guess of ['42.sold', '0000000000000042.sold']) {
      const guessed = `${Buffer.from(guess).toString('base64url')}.${tag2}`
      assert.throws(
        () => codec.decode(guessed, 'sold'),
        (e: ApiError) => e.code === 'invalid_cursor',
      )
    }
  })

  it('refuses cursors signed with another secret, edited ones, and ones for another status', () => {
    const other = cursorCodec('another secret')
    const cursor = codec.encode(10, 'sold')
    const refused = (fn: () => unknown) =>
      assert.throws(fn, (e: ApiError) => e.code === 'invalid_cursor' && e.statusCode === 400)
    refused(() => codec.decode(other.encode(10, 'sold'), 'sold'))
    refused(() => codec.decode(cursor, 'available'))
    refused(() => codec.decode(cursor, undefined))
    refused(() => codec.decode(`${Buffer.from('11.sold').toString('base64url')}.${cursor.split('.')[1]}`, 'sold'))
    for (const junk of ['', '.', 'abc', 'a.b.c', '....', '🐕']) refused(() => codec.decode(junk, undefined))
    // A valid cursor with anything after it is an edited one.
    for (const tail of ['.', '.tampered', '....']) refused(() => codec.decode(`${cursor}${tail}`, 'sold'))
  })
})
