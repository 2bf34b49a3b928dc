/**
 * Accounts and their API keys, as both the operator's CLI and the self-serve portal manage them:
 * the rules (email, password, key name, expiry) and the steps (create an account, issue a key)
 * live here once, so the two front ends cannot drift apart.
 */
import { randomBytes, scrypt, timingSafeEqual } from 'node:crypto'
import { promisify } from 'node:util'
import Type from 'typebox'
import type { Deployment } from '../config.ts'
import { stringRule } from '../lib/string-rule.ts'
import { CONTROL_CHARACTERS, EMAIL_DESCRIPTION, EmailSchema } from '../schemas/accounts.ts'
import type { Account, ApiKey, Store } from '../store/types.ts'
import { generateApiKey } from './api-keys.ts'

/** NIST SP 800-63B-4 §3.1.1.2: at least 15 characters for a password that is the only factor; no composition rules. */
export const PASSWORD_MIN_LENGTH = 15
export const PASSWORD_MAX_LENGTH = 256

export const PASSWORD_DESCRIPTION = `${PASSWORD_MIN_LENGTH} to ${PASSWORD_MAX_LENGTH} characters, not only spaces`
export const PasswordSchema = Type.String({
  minLength: PASSWORD_MIN_LENGTH,
  maxLength: PASSWORD_MAX_LENGTH,
  pattern: '\\S',
  description: PASSWORD_DESCRIPTION,
})

export const KEY_NAME_DESCRIPTION =
  '1 to 100 characters, not only spaces, no control characters (nor U+FFFD, which bytes that are not UTF-8 become)'
export const KeyNameSchema = Type.String({
  minLength: 1,
  maxLength: 100,
  pattern: `^(?=[\\s\\S]*\\S)[^${CONTROL_CHARACTERS}\\ufffd]*$`,
  description: KEY_NAME_DESCRIPTION,
})

export const DEFAULT_KEY_NAME = 'default'

/** The checks of the schemas above, and of an email address (schemas/accounts.ts). */
export const isPassword = stringRule(PasswordSchema)
export const isKeyName = stringRule(KeyNameSchema)
export const isEmail = stringRule(EmailSchema)

/** Thrown when an input breaks one of the rules above; the message is meant for people. */
export class AccountRuleError extends Error {
  override name = 'AccountRuleError'
}

const UNITS: Record<string, number> = { s: 1, m: 60, h: 3600, d: 86_400, w: 604_800 }

/**
 * The longest key lifetime, in days: far beyond the portal's longest choice (1 year), and well
 * within what a Date can hold (without a cap, 999999w made an invalid expiry date).
 */
export const MAX_LIFETIME_DAYS = 36_500
export const MAX_LIFETIME_DESCRIPTION = `100 years (${MAX_LIFETIME_DAYS}d)`

/** A key lifetime such as `30d` (a number and s, m, h, d or w, at most 100 years), in milliseconds. */
export function parseDuration(text: string): number {
  const match = /^([1-9][0-9]*)([smhdw])$/.exec(text)
  if (!match)
    throw new AccountRuleError(`must be a whole number above 0 followed by s, m, h, d or w, e.g. 30d (got "${text}")`)
  const seconds = Number(match[1]) * (UNITS[match[2] as string] as number)
  if (seconds > MAX_LIFETIME_DAYS * (UNITS.d as number)) {
    throw new AccountRuleError(`must be at most ${MAX_LIFETIME_DESCRIPTION} (got "${text}")`)
  }
  return seconds * 1000
}

/** Creates an account (with a password hash for the portal); null when the email is taken. */
export async function createAccount(
  store: Store,
  email: string,
  password?: string,
): Promise<(Account & { passwordHash: string | null }) | null> {
  if (!isEmail(email)) throw new AccountRuleError(`"${email}" is not ${EMAIL_DESCRIPTION}`)
  if (password !== undefined && !isPassword(password)) {
    throw new AccountRuleError(`The password must be ${PASSWORD_DESCRIPTION}.`)
  }
  const passwordHash = password === undefined ? null : await hashPassword(password)
  const account = await store.createAccount(email, passwordHash ?? undefined)
  return account && { ...account, passwordHash }
}

export interface IssuedKey {
  key: ApiKey
  /** The secret, to show once: only its hash is stored. */
  secret: string
}

/** Generates a key of this deployment for an account; `lifetimeMs` undefined means no expiry. */
export async function issueApiKey(
  store: Store,
  deployment: Deployment,
  request: { accountId: number; name: string; lifetimeMs?: number; scopes?: string | null },
): Promise<IssuedKey> {
  if (!isKeyName(request.name)) throw new AccountRuleError(`The name must be ${KEY_NAME_DESCRIPTION}.`)
  const generated = generateApiKey(deployment)
  const expiresAt = request.lifetimeMs === undefined ? null : new Date(Date.now() + request.lifetimeMs).toISOString()
  const key = await store.createApiKey({
    accountId: request.accountId,
    name: request.name,
    prefix: generated.prefix,
    hash: generated.hash,
    expiresAt,
    scopes: request.scopes ?? null,
  })
  return { key, secret: generated.secret }
}

export type KeyState = 'active' | 'revoked' | 'expired'

export function keyState(key: ApiKey, now = Date.now()): KeyState {
  if (key.revokedAt) return 'revoked'
  if (key.expiresAt && Date.parse(key.expiresAt) <= now) return 'expired'
  return 'active'
}

// ─── Passwords ──────────────────────────────────────────────────────────────────────────────────
// scrypt (memory-hard, in node:crypto) with OWASP's N=2^15, r=8, p=3: 32 MiB and ~0.3 s per hash
// on one core, run on libuv's thread pool so the event loop keeps serving. The parameters are kept
// in each hash, so they can be raised later without invalidating stored passwords.

const scryptAsync = promisify(scrypt) as (
  password: string,
  salt: Buffer,
  length: number,
  options: { N: number; r: number; p: number; maxmem: number },
) => Promise<Buffer>
const COST = { N: 2 ** 15, r: 8, p: 3 }
const HASH_BYTES = 32
const HASH_FORMAT = /^scrypt\$N=(\d+),r=(\d+),p=(\d+)\$([A-Za-z0-9_-]+)\$([A-Za-z0-9_-]+)$/

/** `scrypt$N=32768,r=8,p=3$<salt>$<hash>` (base64url). */
export async function hashPassword(password: string): Promise<string> {
  const salt = randomBytes(16)
  const derived = await derive(password, salt, COST, HASH_BYTES)
  return `scrypt$N=${COST.N},r=${COST.r},p=${COST.p}$${salt.toString('base64url')}$${derived.toString('base64url')}`
}

export async function verifyPassword(password: string, stored: string): Promise<boolean> {
  const match = HASH_FORMAT.exec(stored)
  if (!match) return false
  const [, N, r, p, salt, expected] = match as unknown as string[]
  const wanted = Buffer.from(expected as string, 'base64url')
  const derived = await derive(
    password,
    Buffer.from(salt as string, 'base64url'),
    { N: Number(N), r: Number(r), p: Number(p) },
    wanted.length,
  )
  return timingSafeEqual(derived, wanted)
}

function derive(password: string, salt: Buffer, cost: typeof COST, length: number): Promise<Buffer> {
  // Node refuses more than 32 MiB by default; scrypt needs 128·N·r bytes, plus headroom.
  return scryptAsync(password.normalize('NFKC'), salt, length, { ...cost, maxmem: 256 * cost.N * cost.r })
}
