/** The retry schedule: the Nth failure waits the Nth delay, ±20 %, and the end of the list gives up. */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import fc from 'fast-check'
import { retryDelayMs } from '../../src/webhooks/schedule.ts'

// Standard Webhooks' schedule after the first, immediate attempt (the default of WEBHOOK_RETRY_SCHEDULE).
const STANDARD = [5, 300, 1800, 7200, 18_000, 36_000, 36_000].map((s) => s * 1000)

describe('Webhook retry schedule', () => {
  it('after the Nth failed attempt waits the Nth delay (no jitter at the middle of the range)', () => {
    const middle = () => 0.5
    assert.deepEqual(
      STANDARD.map((_, i) => retryDelayMs(i + 1, STANDARD, middle)),
      STANDARD,
    )
  })

  it('gives up once the schedule is exhausted: 8 attempts in all, over about 27.6 hours', () => {
    assert.equal(retryDelayMs(STANDARD.length + 1, STANDARD), null)
    assert.equal(retryDelayMs(100, STANDARD), null)
    assert.equal(retryDelayMs(1, []), null)
    // 5 s + 5 min + 30 min + 2 h + 5 h + 10 h + 10 h (not the "about 3 days" sometimes quoted).
    assert.equal(
      STANDARD.reduce((sum, ms) => sum + ms, 0),
      99_305_000,
    )
  })

  it('sends at once when no attempt was made yet', () => {
    assert.equal(retryDelayMs(0, STANDARD), 0)
  })

  it('moves each delay by at most 20 %, both ways', () => {
    assert.equal(
      retryDelayMs(2, STANDARD, () => 0),
      240_000,
    )
    assert.equal(
      retryDelayMs(2, STANDARD, () => 0.999_999),
      360_000,
    )
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: STANDARD.length }),
        fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true }),
        (n, r) => {
          const delay = retryDelayMs(n, STANDARD, () => r) as number
          const base = STANDARD[n - 1] as number
          return Number.isInteger(delay) && delay >= base * 0.8 && delay <= base * 1.2
        },
      ),
    )
  })

  it('spreads endpoints that failed together (Math.random by default)', () => {
    const delays = new Set(Array.from({ length: 20 }, () => retryDelayMs(3, STANDARD)))
    assert.ok(delays.size > 1)
  })
})
