/**
 * CSRF protection for every portal form: a synchronizer token that is an HMAC of the browser's
 * CSRF cookie and its session cookie, under a secret shared by every instance through the
 * database. A form from another site cannot carry it (it can read neither the cookies nor the
 * secret), a token stolen from one session is useless in another, and nothing is stored per form.
 * Cross-site POSTs are also refused outright when the browser says so (Sec-Fetch-Site).
 */
import { createHmac, timingSafeEqual } from 'node:crypto'
import type { FastifyRequest } from 'fastify'
import { CSRF_COOKIE, SESSION_COOKIE } from './session.ts'

/** The name of the hidden form field that carries the token. */
export const CSRF_FIELD = '_csrf'

export function csrfToken(secret: string, request: FastifyRequest): string | null {
  const browser = request.cookies[CSRF_COOKIE]
  if (!browser) return null
  const session = request.cookies[SESSION_COOKIE] ?? ''
  return createHmac('sha256', secret).update(`${browser}|${session}`).digest('base64url')
}

/** True when a form submission carries the token of this browser and session, from this site. */
export function validCsrf(secret: string, request: FastifyRequest): boolean {
  if (request.headers['sec-fetch-site'] === 'cross-site') return false
  const expected = csrfToken(secret, request)
  const sent = (request.body as Record<string, unknown> | undefined)?.[CSRF_FIELD]
  if (expected === null || typeof sent !== 'string') return false
  const a = Buffer.from(sent)
  const b = Buffer.from(expected)
  return a.length === b.length && timingSafeEqual(a, b)
}
