/**
 * Waiting in tests for state that announces itself by no event: a bounded poll. Where there is an
 * event (a log line, a 'close', a response), tests wait on that instead; nothing waits a fixed time.
 */
import { setTimeout as pause } from 'node:timers/promises'

export interface UntilOptions {
  /** Give up after this long (default 10 s). */
  timeoutMs?: number
  /** Between two checks (default 20 ms). */
  everyMs?: number
}

/**
 * Resolves with `check()`'s first truthy value; rejects with an error naming `what` (and the last
 * value seen) when the deadline passes first. A throwing check rejects at once.
 */
export async function until<T>(
  what: string,
  check: () => T | Promise<T>,
  { timeoutMs = 10_000, everyMs = 20 }: UntilOptions = {},
): Promise<NonNullable<T>> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const value = await check()
    if (value) return value as NonNullable<T>
    if (Date.now() >= deadline) throw new Error(`not ${what} within ${timeoutMs} ms (last: ${String(value)})`)
    await pause(everyMs)
  }
}
