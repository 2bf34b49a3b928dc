/**
 * Limits on the forms that cost a password hash: sign-in attempts per email and per address
 * (against guessing), sign-ups per address (against flooding); an IPv6 address counts as its /64.
 * They use the app's shared rate counter (memory, or Redis across instances) and, like the API's
 * limiter, fail open.
 */
import { type Counter, clientNetwork } from '../plugins/rate-limit-counters.ts'

export const SIGN_IN_WINDOW_MS = 15 * 60_000
/** Sign-in attempts per email address per window, successful or not. */
export const SIGN_IN_PER_EMAIL = 10
/** Sign-in attempts per client address per window (several people may share an address). */
export const SIGN_IN_PER_ADDRESS = 50
export const SIGN_UP_WINDOW_MS = 60 * 60_000
export const SIGN_UP_PER_ADDRESS = 10

/** Seconds until the caller may try again, or null when this attempt is within the limits. */
async function over(counter: Counter, limits: [key: string, max: number, windowMs: number][]): Promise<number | null> {
  let wait: number | null = null
  for (const [key, max, windowMs] of limits) {
    const { count, resetMs } = await counter.hit(key, windowMs)
    if (count > max) wait = Math.max(wait ?? 0, Math.ceil(resetMs / 1000))
  }
  return wait
}

export function signInWait(counter: Counter, email: string, address: string): Promise<number | null> {
  return over(counter, [
    [`portal-sign-in:email:${email.trim().toLowerCase()}`, SIGN_IN_PER_EMAIL, SIGN_IN_WINDOW_MS],
    [`portal-sign-in:address:${clientNetwork(address)}`, SIGN_IN_PER_ADDRESS, SIGN_IN_WINDOW_MS],
  ])
}

export function signUpWait(counter: Counter, address: string): Promise<number | null> {
  return over(counter, [[`portal-sign-up:address:${clientNetwork(address)}`, SIGN_UP_PER_ADDRESS, SIGN_UP_WINDOW_MS]])
}

/** "15 minutes", "1 minute", "30 seconds": how long to wait, for people. */
export function waitText(seconds: number): string {
  if (seconds < 60) return `${seconds} second${seconds === 1 ? '' : 's'}`
  const minutes = Math.ceil(seconds / 60)
  return `${minutes} minute${minutes === 1 ? '' : 's'}`
}
