/**
 * The interactive API reference at /docs: Swagger UI (swagger-ui-dist, served from this process,
 * no CDN) rendering the document the API serves at /v1/openapi.json. Its "Try it out" calls this
 * same server: docs.js lists this origin first among the servers. Paste a key under "Authorize".
 */
import helmet from '@fastify/helmet'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { ownFile, packageFile, serveAssets } from './assets.ts'
import { DOCS_HEADERS, strictTransportSecurity } from './headers.ts'
import { type Html, html } from './html.ts'
import { htmlPage } from './views/layout.ts'

/**
 * A page of /docs. Swagger UI renders its own <main> (the operations), so the reference page has
 * none of ours, and its hidden h1 stands in the header; other pages put `body` in a <main>.
 */
function page(title: string, body: Html, { reference = false } = {}): string {
  return htmlPage(
    title,
    html`<link rel="stylesheet" href="/docs/assets/swagger-ui.css">
  <link rel="stylesheet" href="/docs/assets/docs.css">
  <script src="/docs/assets/swagger-ui-bundle.js" defer></script>
  <script src="/docs/assets/docs.js" defer></script>`,
    html`<header class="docs-header">
    ${reference ? html`<h1 class="visually-hidden">Animal Store API reference</h1>` : ''}
    <nav aria-label="Portal"><a href="/portal">Animal Store developer portal</a> · <a href="/portal/keys">API keys</a> · <a href="/v1/openapi.json">OpenAPI document</a></nav>
    <p>To try an operation: create a key in the portal, choose <strong>Authorize</strong> and paste it, open an operation, then choose <strong>Execute</strong>. Requests go to this server.</p>
  </header>
  ${reference ? body : html`<main id="main">${body}</main>`}`,
  ).text
}

const send = (reply: FastifyReply, status: number, body: string) =>
  reply.code(status).type('text/html; charset=utf-8').send(body)

export default async function docs(app: FastifyInstance): Promise<void> {
  await app.register(helmet, DOCS_HEADERS)
  app.addHook('onRequest', strictTransportSecurity)
  serveAssets(app, {
    'swagger-ui.css': packageFile('swagger-ui-dist/swagger-ui.css'),
    'swagger-ui-bundle.js': packageFile('swagger-ui-dist/swagger-ui-bundle.js'),
    'docs.css': [ownFile('docs.css'), ownFile('shared.css')],
    'docs.js': ownFile('docs.js'),
  })

  const reference = page(
    'API reference',
    html`<div id="reference" data-spec="/v1/openapi.json">
      <noscript><p class="docs-fallback">The interactive reference needs JavaScript. The OpenAPI document it shows is at <a href="/v1/openapi.json">/v1/openapi.json</a>.</p></noscript>
    </div>`,
    { reference: true },
  )
  app.get('/', { schema: { hide: true } }, async (_request, reply) => send(reply, 200, reference))

  // A wrong method on /docs is 405 with Allow, as anywhere else; like the API's, it is answered
  // from an onRequest hook, before any body is read: in a scope that holds only the not-found
  // handler, so the real pages never run the hook.
  const notFound = (request: FastifyRequest, reply: FastifyReply) => {
    const { statusCode, headers } = app.unroutedError(request)
    if (headers?.allow) reply.header('allow', headers.allow)
    const title = statusCode === 405 ? 'Method not allowed' : 'Page not found'
    const missing = html`<h1>${title}</h1><p>The API reference is at <a href="/docs">/docs</a>.</p>`
    return send(reply, statusCode, page(title, missing))
  }
  await app.register(async (scope) => {
    scope.addHook('onRequest', (request, reply, _done) => {
      notFound(request, reply)
    })
    scope.setNotFoundHandler(async (request, reply) => notFound(request, reply))
  })
}
