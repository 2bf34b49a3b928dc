/**
 * When to try a webhook delivery again: after the Nth failed attempt, the Nth delay of the
 * schedule, give or take 20 % so that endpoints failing together are not retried in lockstep.
 */

/** The share of a delay by which it may come earlier or later. */
export const RETRY_JITTER = 0.2

/**
 * Milliseconds to wait after `attemptsMade` attempts have failed, or null when the schedule is
 * exhausted (give up). No attempt made yet (0) means now. `random` returns a number in [0, 1).
 */
export function retryDelayMs(
  attemptsMade: number,
  scheduleMs: readonly number[],
  random: () => number = Math.random,
): number | null {
  if (attemptsMade < 1) return 0
  const delay = scheduleMs[attemptsMade - 1]
  if (delay === undefined) return null
  return Math.round(delay * (1 - RETRY_JITTER + 2 * RETRY_JITTER * random()))
}
