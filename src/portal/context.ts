/**
 * What every portal route needs: the signed-in session, the CSRF token of the page it renders,
 * and one way to send a page. Built once per app by createPortal, handed to the route modules.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import type { Session } from '../store/types.ts'
import { csrfToken, validCsrf } from './csrf.ts'
import { createFlashes, type Flashes } from './flash.ts'
import type { Html } from './html.ts'
import { CSRF_COOKIE, cookieOptions, findSession, randomToken, SESSION_COOKIE } from './session.ts'
import { errorPage } from './views/error.ts'
import type { PageContext } from './views/layout.ts'

declare module 'fastify' {
  interface FastifyRequest {
    /** The portal session of this request, once `withSession` or `signedIn` ran; null when signed out. */
    portalSession: Session | null
  }
}

export interface Portal {
  /** Sends a whole HTML page, rendered with this request's context. */
  send(request: FastifyRequest, reply: FastifyReply, status: number, view: (context: PageContext) => Html): FastifyReply
  /** preHandler: loads the session, if any. */
  withSession(request: FastifyRequest): Promise<void>
  /** preHandler: loads the session; without one, redirects to the sign-in page. */
  signedIn(request: FastifyRequest, reply: FastifyReply): Promise<void>
  /** preValidation of every form: without this browser's CSRF token, 403 and nothing happens. */
  checkCsrf(request: FastifyRequest, reply: FastifyReply): Promise<void>
  /** The secrets shown once, on their way from a POST to the page it redirects to. */
  flash: Flashes
}

/** The account of a request that the `signedIn` hook let through. */
export const accountId = (request: FastifyRequest): number => (request.portalSession as Session).accountId

export async function createPortal(app: FastifyInstance): Promise<Portal> {
  // Shared by every instance through the database, so a form rendered by one is accepted by another.
  const secret = await app.store.secret('portal-csrf', randomToken)
  const flash = createFlashes(await app.store.secret('portal-flash', randomToken))
  app.decorateRequest('portalSession', null)
  const webhooks = app.offers({ level: 'experimental', feature: 'webhooks' })

  function context(request: FastifyRequest, reply: FastifyReply): PageContext {
    // Any page may hold a form, so a browser without a CSRF cookie gets one with its first page.
    if (!request.cookies[CSRF_COOKIE]) {
      const value = randomToken()
      request.cookies[CSRF_COOKIE] = value
      reply.setCookie(CSRF_COOKIE, value, cookieOptions(request))
    }
    return { email: request.portalSession?.email ?? null, csrf: csrfToken(secret, request) ?? '', webhooks }
  }

  const portal: Portal = {
    flash,
    send(request, reply, status, view) {
      const page = view(context(request, reply))
      return reply.code(status).type('text/html; charset=utf-8').send(page.text)
    },
    async withSession(request) {
      request.portalSession = await findSession(app, request)
    },
    async signedIn(request, reply) {
      request.portalSession = await findSession(app, request)
      if (request.portalSession) return
      const expired = request.cookies[SESSION_COOKIE] !== undefined
      if (expired) reply.clearCookie(SESSION_COOKIE, cookieOptions(request))
      return reply.redirect(`/portal/sign-in${expired ? '?notice=expired' : ''}`, 303)
    },
    async checkCsrf(request, reply) {
      if (validCsrf(secret, request)) return
      request.log.info('portal form refused: missing or wrong CSRF token')
      return portal.send(request, reply, 403, (c) =>
        errorPage(
          c,
          'This form has expired',
          'The form was not sent from this page in this browser, or the page is too old. Nothing was changed. Open the page again and resend the form (cookies must be enabled).',
        ),
      )
    },
  }
  return portal
}
