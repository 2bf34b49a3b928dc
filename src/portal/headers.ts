/**
 * Security headers of the portal and the reference page (@fastify/helmet, registered only in their
 * scopes: the JSON API sends none of this). Scripts and styles come only from this origin, never
 * inline; no page may be framed; forms post only here.
 */
import type { FastifyHelmetOptions } from '@fastify/helmet'
import type { onRequestHookHandler } from 'fastify'

const common = {
  defaultSrc: ["'none'"],
  scriptSrc: ["'self'"],
  styleSrc: ["'self'"],
  formAction: ["'self'"],
  frameAncestors: ["'none'"],
  baseUri: ["'none'"],
}

function options(directives: Record<string, string[]>): FastifyHelmetOptions {
  return {
    contentSecurityPolicy: { useDefaults: false, directives },
    xFrameOptions: { action: 'deny' },
    // Key pages must not leak their URL (or anything else) to other sites.
    referrerPolicy: { policy: 'no-referrer' },
    // Sent by `strictTransportSecurity` below instead, on HTTPS only.
    strictTransportSecurity: false,
  }
}

/**
 * HSTS on pages the client fetched over HTTPS (directly, or through a TRUST_PROXY proxy that says
 * so in X-Forwarded-Proto), never over plain HTTP (RFC 6797 §7.2).
 */
export const strictTransportSecurity: onRequestHookHandler = (request, reply, done) => {
  if (request.protocol === 'https') reply.header('strict-transport-security', 'max-age=31536000; includeSubDomains')
  done()
}

export const PORTAL_HEADERS = options({ ...common, imgSrc: ["'self'"] })

/** Swagger UI draws its icons from data: URIs and calls the API ("Try it out") on this origin. */
export const DOCS_HEADERS = options({ ...common, imgSrc: ["'self'", 'data:'], connectSrc: ["'self'"] })

/**
 * The portal's headers as plain name/value pairs, for pages sent where helmet's hooks never ran
 * (requests Fastify could not route, answered from the root instance).
 */
export function portalHeaders(): Record<string, string> {
  const directives = (PORTAL_HEADERS.contentSecurityPolicy as { directives: Record<string, string[]> }).directives
  const csp = Object.entries(directives)
    .map(([name, values]) => `${name.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)} ${values.join(' ')}`)
    .join('; ')
  return {
    'content-security-policy': csp,
    'x-content-type-options': 'nosniff',
    'x-frame-options': 'DENY',
    'referrer-policy': 'no-referrer',
    'cache-control': 'no-store',
  }
}
