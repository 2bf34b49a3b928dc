/**
 * The page frame every portal page shares: skip link, navigation, one <main> with one <h1>.
 * No inline script or style anywhere (the CSP forbids both): behaviour and looks come from
 * /portal/assets, and every page works without JavaScript.
 */
import { CSRF_FIELD } from '../csrf.ts'
import type { FieldError } from '../forms.ts'
import { type Html, html } from '../html.ts'

export interface PageContext {
  /** The signed-in account's email, or null when signed out. */
  email: string | null
  /** The CSRF token for this page's forms. */
  csrf: string
  /** The webhooks pages exist (an experimental feature this deployment offers): linked in the navigation. */
  webhooks?: boolean
}

export interface Notice {
  kind: 'success' | 'error' | 'info'
  text: string | Html
}

export const csrfInput = (context: PageContext) =>
  html`<input type="hidden" name="${CSRF_FIELD}" value="${context.csrf}">`

export function layout(context: PageContext, title: string, body: Html, notice?: Notice): Html {
  const nav = context.email
    ? html`<li><a href="/portal/keys">API keys</a></li>
        <li><a href="/portal/messages">Messages</a></li>
        <li><a href="/portal/orders">Orders</a></li>
        ${context.webhooks && html`<li><a href="/portal/webhooks">Webhooks</a></li><li><a href="/portal/events">Events</a></li>`}
        <li><a href="/docs">API reference</a></li>
        <li class="account">
          <form method="post" action="/portal/sign-out">
            ${csrfInput(context)}
            <span>Signed in as <strong>${context.email}</strong></span>
            <button type="submit" class="link">Sign out</button>
          </form>
        </li>`
    : html`<li><a href="/portal/sign-in">Sign in</a></li>
        <li><a href="/portal/sign-up">Create an account</a></li>
        <li><a href="/docs">API reference</a></li>`
  return htmlPage(
    title,
    html`<link rel="stylesheet" href="/portal/assets/portal.css">
  <script src="/portal/assets/portal.js" defer></script>`,
    html`<a class="skip-link" href="#main">Skip to content</a>
  <header>
    <nav aria-label="Portal">
      <a class="brand" href="/portal">Animal Store</a>
      <ul>${nav}</ul>
    </nav>
  </header>
  <main id="main" tabindex="-1">
    <h1>${title}</h1>
    ${notice && html`<div class="notice ${notice.kind}" role="${notice.kind === 'error' ? 'alert' : 'status'}">${notice.text}</div>`}
    ${body}
  </main>
  <footer>
    <p>Animal Store developer portal · <a href="/docs">API reference</a> · <a href="/v1/openapi.json">OpenAPI document</a></p>
  </footer>`,
  )
}

/**
 * The document around every HTML page we serve, the portal's and /docs: language, charset,
 * viewport, icon and title; `head` adds the page's stylesheets and scripts.
 */
export function htmlPage(title: string, head: Html, body: Html): Html {
  return html`<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <meta name="viewport" content="width=device-width, initial-scale=1">
  <link rel="icon" href="/portal/assets/favicon.svg" type="image/svg+xml">
  <title>${title} · Animal Store</title>
  ${head}
</head>
<body>
  ${body}
</body>
</html>
`
}

/**
 * Where a refused form says why: beside the field when it is one of `fields`, else (a refusal of
 * the form as a whole) in a notice atop the page.
 */
export function formErrors<F extends string>(
  error: FieldError | undefined,
  fields: readonly F[],
): { beside: Partial<Record<F, string>>; notice?: Notice } {
  if (!error) return { beside: {} }
  if ((fields as readonly string[]).includes(error.field)) {
    return { beside: { [error.field]: error.message } as Partial<Record<F, string>> }
  }
  return { beside: {}, notice: { kind: 'error', text: error.message } }
}

/** A secret shown this once, read-only, with a Copy button (that /portal/assets shows where scripts run). */
export function secretField(label: string, secret: string): Html {
  return html`<div class="field">
      <label for="secret">${label}</label>
      <input id="secret" class="secret" type="text" value="${secret}" readonly spellcheck="false" autocomplete="off">
      <button type="button" class="secondary" data-copy="secret" data-status="copy-status" hidden>Copy to clipboard</button>
      <p id="copy-status" class="hint" role="status"></p>
    </div>`
}

/** A labelled input with its hint and, when refused, its error (announced and linked by aria-describedby). */
export function field(options: {
  name: string
  label: string
  type?: string
  value?: string
  hint?: string
  error?: string
  autocomplete?: string
  required?: boolean
  /** The server's limit, in characters (code points). */
  maxlength?: number
}): Html {
  const { name, label, type = 'text', value, hint, error, autocomplete, required = true } = options
  // Browsers count maxlength in UTF-16 units, where a character may take two: twice the limit
  // never cuts what the server takes (the server tells when it is too long).
  const maxlength = options.maxlength && options.maxlength * 2
  const described = [hint && `${name}-hint`, error && `${name}-error`].filter(Boolean).join(' ')
  return html`<div class="field${error ? ' invalid' : ''}">
    <label for="${name}">${label}</label>
    ${hint && html`<p class="hint" id="${name}-hint">${hint}</p>`}
    ${error && html`<p class="field-error" id="${name}-error">${error}</p>`}
    <input id="${name}" name="${name}" type="${type}"${value !== undefined && type !== 'password' ? html` value="${value}"` : ''}${autocomplete ? html` autocomplete="${autocomplete}"` : ''}${required ? html` required` : ''}${maxlength ? html` maxlength="${maxlength}"` : ''}${described ? html` aria-describedby="${described}"` : ''}${error ? html` aria-invalid="true" autofocus` : ''}>
  </div>`
}
