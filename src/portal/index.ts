/**
 * The client developer's side, served by the same process as the API: the self-serve portal at
 * /portal (accounts, keys, messages) and the interactive API reference at /docs.
 *
 * Everything here is encapsulated: cookies, form bodies and security headers exist only under
 * /portal and /docs. The API under /v1 still takes JSON only, knows nothing of cookies, and
 * accepts only bearer keys.
 */
import { parse as parseQuery } from 'node:querystring'
import cookie from '@fastify/cookie'
import formbody from '@fastify/formbody'
import helmet from '@fastify/helmet'
import type { FastifyInstance } from 'fastify'
import type { Config } from '../config.ts'
import { ApiError } from '../errors.ts'
import { wellEncoded } from '../percent-encoding.ts'
import { ownFile, serveAssets } from './assets.ts'
import { createPortal } from './context.ts'
import docs from './docs.ts'
import { htmlErrors } from './errors.ts'
import { PORTAL_HEADERS, strictTransportSecurity } from './headers.ts'
import account from './routes/account.ts'
import keys from './routes/keys.ts'
import messages from './routes/messages.ts'

/** A form body (application/x-www-form-urlencoded); a bad escape would be stored as its literal text. */
function parseForm(text: string): Record<string, string | string[]> {
  if (!wellEncoded(text)) throw new ApiError('bad_request', 'The form is not properly URL-encoded.')
  return parseQuery(text) as Record<string, string | string[]>
}

async function pages(app: FastifyInstance, { config }: { config: Config }): Promise<void> {
  // Forms only: the JSON parser inherited from the API is dropped here.
  app.removeAllContentTypeParsers()
  await app.register(formbody, { parser: parseForm })
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
}

export default async function portal(app: FastifyInstance, { config }: { config: Config }): Promise<void> {
  await app.register(pages, { prefix: '/portal', config })
  await app.register(docs, { prefix: '/docs' })
}
