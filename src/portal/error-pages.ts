/**
 * Failures under /portal as HTML pages (the API's JSON error contract is untouched): the same
 * mapping as the API's (src/errors.ts) picks the status, a page says it in words.
 */
import type { FastifyInstance } from 'fastify'
import { toApiError } from '../errors.ts'
import { logError } from '../plugins/error-handler.ts'
import type { Portal } from './context.ts'
import { portalHeaders } from './headers.ts'
import { errorPage } from './views/error.ts'

const PAGES: Record<number, [title: string, text: string]> = {
  400: ['Something is wrong with this request', 'The request could not be understood. Go back and try again.'],
  404: ['Page not found', 'There is no page at this address.'],
  405: ['Method not allowed', 'This page does not take this kind of request.'],
  408: ['Too slow', 'The request took too long to arrive. Try again.'],
  413: ['Too large', 'The form holds more than the portal accepts.'],
  415: ['Not a form', 'The portal accepts only forms sent by its own pages.'],
  429: ['Too many requests', 'Wait a little and try again.'],
  500: ['Something went wrong', 'Something failed on our side. It has been logged; try again later.'],
  503: ['Temporarily unavailable', 'The service cannot reach its database right now. Try again in a few seconds.'],
}

/** The page for a status: its own, or the generic one of its class. */
function pageFor(status: number): [title: string, text: string] {
  return PAGES[status] ?? (PAGES[status >= 500 ? 500 : 400] as [string, string])
}

export function htmlErrors(app: FastifyInstance, portal: Portal): void {
  // A portal URL Fastify cannot route (`/portal/%zz`) is answered from the root instance, where
  // neither cookies nor helmet exist: a page without forms, with the portal's content security
  // policy and its framing, sniffing, referrer and caching headers.
  for (const prefix of ['/portal/', '/docs/']) {
    app.answerUnrouted(prefix, (error, request, reply) => {
      const sent = toApiError(error)
      const status = sent.statusCode
      const [title, text] = pageFor(status)
      logError(error, sent, request, 'portal request')
      const page = errorPage({ email: null, csrf: '' }, title, text)
      reply
        .code(status)
        .headers({ ...portalHeaders(), 'x-request-id': request.id })
        .type('text/html; charset=utf-8')
        .send(page.text)
    })
  }

  app.setNotFoundHandler(async (request, reply) => {
    // A signed-in user keeps the signed-in menu (their account, Sign out) on a page that is not there.
    await portal.withSession(request)
    const { statusCode, headers } = app.unroutedError(request)
    if (headers?.allow) reply.header('allow', headers.allow)
    const [title, text] = pageFor(statusCode)
    return portal.send(request, reply, statusCode, (c) => errorPage(c, title, text))
  })

  app.setErrorHandler(async (error, request, reply) => {
    const sent = toApiError(error)
    logError(error, sent, request, 'portal request')
    if (sent.headers?.['retry-after']) reply.header('retry-after', sent.headers['retry-after'])
    const [title, text] = pageFor(sent.statusCode)
    const requestId = sent.statusCode >= 500 ? request.id : undefined
    // Cookies may not have been parsed if the failure came first; a page without forms is still a page.
    request.cookies ??= {}
    return portal.send(request, reply, sent.statusCode, (c) => errorPage(c, title, text, requestId))
  })
}
