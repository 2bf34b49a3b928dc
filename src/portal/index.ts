/**
 * The client developer's side, served by the same process as the API: the self-serve portal at
 * /portal (accounts, keys, messages, orders, and webhooks and events where offered) and the interactive API reference at /docs; `GET /` leads to
 * the portal.
 *
 * Everything here is encapsulated: cookies, form bodies and security headers exist only under
 * /portal and /docs. The API under /v1 still takes JSON only, knows nothing of cookies, and
 * accepts only bearer keys.
 */
import { isUtf8 } from 'node:buffer'
import { parse as parseQuery } from 'node:querystring'
import cookie from '@fastify/cookie'
import helmet from '@fastify/helmet'
import type { FastifyInstance } from 'fastify'
import type { Config } from '../config.ts'
import { ApiError } from '../errors.ts'
import { wellEncoded } from '../http/percent-encoding.ts'
import { shown } from '../schemas/validation.ts'
import { ownFile, serveAssets } from './assets.ts'
import { createPortal } from './context.ts'
import docs from './docs.ts'
import { htmlErrors } from './error-pages.ts'
import { PORTAL_HEADERS, strictTransportSecurity } from './headers.ts'
import account from './routes/account.ts'
import events from './routes/events.ts'
import keys from './routes/keys.ts'
import messages from './routes/messages.ts'
import orders from './routes/orders.ts'
import webhooks from './routes/webhooks.ts'

/**
 * A form body (application/x-www-form-urlencoded). Bytes that are not UTF-8 would turn into U+FFFD
 * and be stored so; a bad escape would be stored as its literal text.
 */
function parseForm(bytes: Buffer): Record<string, string> {
  if (!isUtf8(bytes)) throw new ApiError('bad_request', 'The form is not valid UTF-8.')
  const text = bytes.toString()
  if (!wellEncoded(text)) throw new ApiError('bad_request', 'The form is not properly URL-encoded.')
  const fields = parseQuery(text)
  // Our forms name each field once: a field sent twice (even the CSRF token) is a malformed form.
  for (const [name, value] of Object.entries(fields)) {
    if (Array.isArray(value))
      throw new ApiError('bad_request', `The form gives the field "${shown(name)}" more than once.`)
  }
  return fields as Record<string, string>
}

async function pages(app: FastifyInstance, { config }: { config: Config }): Promise<void> {
  // Forms only: the JSON parser inherited from the API is dropped here.
  app.removeAllContentTypeParsers()
  app.addContentTypeParser('application/x-www-form-urlencoded', { parseAs: 'buffer' }, (_request, body, done) => {
    try {
      done(null, parseForm(body as Buffer))
    } catch (error) {
      done(error as Error, undefined)
    }
  })
  await app.register(cookie)
  await app.register(helmet, PORTAL_HEADERS)
  app.addHook('onRequest', strictTransportSecurity)
  // Pages show keys and account data: never store them in a cache (assets say otherwise).
  app.addHook('onRequest', async (_request, reply) => {
    reply.header('cache-control', 'no-store')
  })
  const portal = await createPortal(app)
  htmlErrors(app, portal)

  serveAssets(app, {
    'portal.css': [ownFile('portal.css'), ownFile('shared.css')],
    'portal.js': ownFile('portal.js'),
    'favicon.svg': ownFile('favicon.svg'),
  })
  await app.register(account, { portal })
  await app.register(keys, { portal, config })
  await app.register(messages, { portal })
  await app.register(orders, { portal })
  // Experimental: its pages exist only where the operator turned the feature on.
  await app.register(webhooks, { portal, config })
  await app.register(events, { portal })
}

export default async function portal(app: FastifyInstance, { config }: { config: Config }): Promise<void> {
  await app.register(pages, { prefix: '/portal', config })
  await app.register(docs, { prefix: '/docs' })
  // The front door: a person who opens the server's address lands in the portal, whose every page
  // links the reference and the OpenAPI document. 302, not 301: browsers would keep a 301 forever.
  app.get('/', { schema: { hide: true } }, async (_request, reply) => reply.redirect('/portal', 302))
}
