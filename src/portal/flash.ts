/**
 * A secret shown once (a new API key, a webhook signing secret), carried from the POST that makes
 * it to the page that shows it: the POST answers 303, so that a reload reloads that page instead
 * of repeating the action (decision 101). It travels in the cookie `as_flash`, encrypted and
 * authenticated (AES-256-GCM) under a key every instance shares through the database, bound to the
 * session, for five minutes; the page that shows it clears it. Never in a URL, never stored.
 */
import { createCipheriv, createDecipheriv, hash, randomBytes } from 'node:crypto'
import type { FastifyReply, FastifyRequest } from 'fastify'
import { cookieOptions, FLASH_COOKIE, SESSION_COOKIE } from './session.ts'

/** `id`: the key's or the endpoint's. */
export type Flash =
  | { kind: 'api-key'; id: string; secret: string }
  /** `previousUntil`: a rotation, and until when the old secret still signs; null: a new endpoint. */
  | { kind: 'webhook-secret'; id: string; secret: string; previousUntil: string | null }

/** Long enough for the browser to follow the redirect, short enough not to linger unread. */
export const FLASH_LIFETIME_MS = 5 * 60_000

const IV_BYTES = 12
const TAG_BYTES = 16

export interface Flashes {
  /** Keeps `flash` for the next page of this browser's session. */
  put(request: FastifyRequest, reply: FastifyReply, flash: Flash): void
  /**
   * This session's flash of `kind` (and of the key or endpoint `id`, if given), cleared so that it
   * is shown once; null when there is none (already shown, expired, another session's). A flash of
   * another kind or id is left for its own page.
   */
  take<K extends Flash['kind']>(
    request: FastifyRequest,
    reply: FastifyReply,
    kind: K,
    id?: string,
  ): Extract<Flash, { kind: K }> | null
}

/** `secret`: shared by every instance (store.secret), so that any of them reads what another wrote. */
export function createFlashes(secret: string): Flashes {
  const key = hash('sha256', `portal-flash|${secret}`, 'buffer')
  // The session's token as associated data: the cookie opens only in the session it was made in.
  const session = (request: FastifyRequest) => Buffer.from(request.cookies[SESSION_COOKIE] ?? '')

  function open(request: FastifyRequest, value: string): Flash | null {
    const bytes = Buffer.from(value, 'base64url')
    if (bytes.length <= IV_BYTES + TAG_BYTES) return null
    try {
      const decipher = createDecipheriv('aes-256-gcm', key, bytes.subarray(0, IV_BYTES))
      decipher.setAAD(session(request))
      decipher.setAuthTag(bytes.subarray(IV_BYTES, IV_BYTES + TAG_BYTES))
      const text = Buffer.concat([decipher.update(bytes.subarray(IV_BYTES + TAG_BYTES)), decipher.final()])
      const { until, flash } = JSON.parse(text.toString()) as { until: number; flash: Flash }
      return until > Date.now() ? flash : null
    } catch {
      return null
    }
  }

  return {
    put(request, reply, flash) {
      const iv = randomBytes(IV_BYTES)
      const cipher = createCipheriv('aes-256-gcm', key, iv)
      cipher.setAAD(session(request))
      const text = JSON.stringify({ until: Date.now() + FLASH_LIFETIME_MS, flash })
      const sealed = Buffer.concat([cipher.update(text), cipher.final()])
      const value = Buffer.concat([iv, cipher.getAuthTag(), sealed]).toString('base64url')
      reply.setCookie(FLASH_COOKIE, value, cookieOptions(request, FLASH_LIFETIME_MS))
    },
    take<K extends Flash['kind']>(request: FastifyRequest, reply: FastifyReply, kind: K, id?: string) {
      const value = request.cookies[FLASH_COOKIE]
      if (value === undefined) return null
      const flash = open(request, value)
      if (flash !== null && (flash.kind !== kind || (id !== undefined && flash.id !== id))) return null
      reply.clearCookie(FLASH_COOKIE, cookieOptions(request))
      return flash as Extract<Flash, { kind: K }> | null
    },
  }
}
