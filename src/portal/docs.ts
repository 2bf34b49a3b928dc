/**
 * The interactive API reference at /docs: Swagger UI (swagger-ui-dist, served from this process,
 * no CDN) rendering the document the API serves at /v1/openapi.json. Its "Try it out" calls this
 * same server: docs.js lists this origin first among the servers. Paste a key under "Authorize".
 * Beside it, /docs/errors: the table of error codes the document's description links to.
 */
import helmet from '@fastify/helmet'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { ERROR_CODES, ERRORS } from '../errors.ts'
import { ownFile, packageFile, serveAssets } from './assets.ts'
import { DOCS_HEADERS, strictTransportSecurity } from './headers.ts'
import { type Html, html } from './html.ts'
import { htmlPage } from './views/layout.ts'

/**
 * A page of /docs. Swagger UI renders its own <main> (the operations), so the reference page has
 * none of ours, and its hidden h1 stands in the header; other pages put `body` in a <main>, with
 * neither Swagger UI nor its script.
 */
function page(title: string, body: Html, { reference = false } = {}): string {
  return htmlPage(
    title,
    reference
      ? html`<link rel="stylesheet" href="/docs/assets/swagger-ui.css">
  <link rel="stylesheet" href="/docs/assets/docs.css">
  <script src="/docs/assets/swagger-ui-bundle.js" defer></script>
  <script src="/docs/assets/docs.js" defer></script>`
      : html`<link rel="stylesheet" href="/docs/assets/docs.css">`,
    html`<header class="docs-header">
    ${reference ? html`<h1 class="visually-hidden">Animal Store API reference</h1>` : ''}
    <nav aria-label="Portal"><a href="/portal">Animal Store developer portal</a> · <a href="/portal/keys">API keys</a> · ${reference ? '' : html`<a href="/docs">API reference</a> · `}<a href="/v1/openapi.json">OpenAPI document</a></nav>
    ${reference ? html`<p>To try an operation: create a key in the portal, choose <strong>Authorize</strong> and paste it, open an operation, choose <strong>Try it out</strong>, then <strong>Execute</strong>. Requests go to this server.</p>` : ''}
  </header>
  ${reference ? body : html`<main id="main" class="docs-page">${body}</main>`}`,
  ).text
}

/** A code that may wrap after each underscore, on a phone (`webhook_endpoint_not_found`). */
const breakable = (code: string) => code.split('_').map((part, i) => (i === 0 ? part : html`_<wbr>${part}`))

/** Every error code, from src/errors.ts: one row each, its id the code (so `/docs/errors#pet_held` links to it). */
const errorTable = html`<h1>Error codes</h1>
    <p>Every error answer of the API is JSON, <code>{"code": "…", "message": "…", "status": 404}</code>, with the HTTP status it is sent with. Branch on <code>code</code>; the message is for people, and often says more than the default below. Each operation in <a href="/docs">the reference</a> lists the statuses it answers.</p>
    <table class="error-codes">
      <caption class="visually-hidden">Error codes, their HTTP status and default message</caption>
      <thead><tr><th scope="col">Code</th><th scope="col">Status</th><th scope="col">Default message</th></tr></thead>
      <tbody>
        ${ERROR_CODES.map((code) => html`<tr id="${code}"><th scope="row"><code>${breakable(code)}</code></th><td>${ERRORS[code][0]}</td><td>${ERRORS[code][1]}</td></tr>`)}
      </tbody>
    </table>`

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
  const errors = page('Error codes', errorTable)
  app.get('/errors', { schema: { hide: true } }, async (_request, reply) => send(reply, 200, errors))

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
