import { type Html, html } from '../html.ts'
import { layout, type PageContext } from './layout.ts'

/** Any failure, as a page: what happened, and where to go from here. */
export function errorPage(context: PageContext, title: string, text: string, requestId?: string): Html {
  return layout(
    context,
    title,
    html`<p>${text}</p>
    ${requestId && html`<p class="hint">Request id: <code>${requestId}</code> (quote it if you report this).</p>`}
    <p><a href="${context.email ? '/portal/keys' : '/portal/sign-in'}">Back to the portal</a></p>`,
  )
}
