/**
 * Portal sessions: a random token in an HttpOnly cookie; the database keeps only its SHA-256
 * (like API keys), so a leaked database cannot be replayed as sessions.
 */
import { hash, randomBytes } from 'node:crypto'
import type { CookieSerializeOptions } from '@fastify/cookie'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import type { Session } from '../store/types.ts'

export const SESSION_COOKIE = 'as_session'
export const CSRF_COOKIE = 'as_csrf'
/** A secret on its way to the page that shows it once (flash.ts). */
export const FLASH_COOKIE = 'as_flash'
/** Absolute lifetime of a session: a working day. There is no sliding renewal. */
export const SESSION_LIFETIME_MS = 8 * 3600 * 1000
/** Cookies go to the portal only: the API and the reference never see them. */
export const COOKIE_PATH = '/portal'

const LOOPBACK = /^(localhost|127(\.\d{1,3}){3}|\[::1\])$/i

/**
 * Cookies are Secure except over plain HTTP to this machine (http://127.0.0.1:8080, local
 * development). Anywhere else a browser refuses to send them over plain HTTP, so a portal reached
 * over HTTP from another host fails closed instead of leaking sessions. Behind a TLS proxy, set
 * TRUST_PROXY so that the protocol is read from X-Forwarded-Proto.
 */
export function isLocalDevelopment(request: FastifyRequest): boolean {
  return request.protocol === 'http' && LOOPBACK.test(request.hostname)
}

export function cookieOptions(request: FastifyRequest, maxAgeMs?: number): CookieSerializeOptions {
  return {
    path: COOKIE_PATH,
    httpOnly: true,
    sameSite: 'lax',
    secure: !isLocalDevelopment(request),
    ...(maxAgeMs !== undefined && { maxAge: Math.floor(maxAgeMs / 1000) }),
  }
}

export const randomToken = () => randomBytes(32).toString('base64url')
const tokenHash = (token: string) => hash('sha256', token, 'base64url')

/**
 * Signs an account in: a new session (never a reused token), in the database and in the cookie.
 * `passwordHash` is the hash the password was checked against: if the password was set anew
 * meanwhile (`accounts set-password`), no session starts and this returns false.
 */
export async function startSession(
  app: FastifyInstance,
  request: FastifyRequest,
  reply: FastifyReply,
  account: { id: number; passwordHash: string | null },
): Promise<boolean> {
  const previous = request.cookies[SESSION_COOKIE]
  if (previous) await app.store.deleteSession(tokenHash(previous))
  const token = randomToken()
  const expiresAt = new Date(Date.now() + SESSION_LIFETIME_MS).toISOString()
  const stored = await app.store.createSession({
    hash: tokenHash(token),
    accountId: account.id,
    expiresAt,
    passwordHash: account.passwordHash,
  })
  if (stored) reply.setCookie(SESSION_COOKIE, token, cookieOptions(request, SESSION_LIFETIME_MS))
  return stored
}

/** The unexpired session of this request's cookie, or null. */
export async function findSession(app: FastifyInstance, request: FastifyRequest): Promise<Session | null> {
  const token = request.cookies[SESSION_COOKIE]
  return token ? app.store.findSession(tokenHash(token)) : null
}

export async function endSession(app: FastifyInstance, request: FastifyRequest, reply: FastifyReply): Promise<void> {
  const token = request.cookies[SESSION_COOKIE]
  if (token) await app.store.deleteSession(tokenHash(token))
  reply.clearCookie(SESSION_COOKIE, cookieOptions(request))
  // Bound to the session, it could no longer be read: not left behind.
  if (request.cookies[FLASH_COOKIE]) reply.clearCookie(FLASH_COOKIE, cookieOptions(request))
}
