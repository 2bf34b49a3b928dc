import type { Message } from '../../schemas/messages.ts'
import { type Html, html } from '../html.ts'
import { time } from './keys.ts'
import { layout, type PageContext } from './layout.ts'

export function messagesPage(context: PageContext, messages: Message[], limit: number): Html {
  return layout(
    context,
    'Messages',
    messages.length === 0
      ? html`<p>No messages yet. Send one with <code>POST /v1/messages</code> and one of your keys (see the <a href="/docs">API reference</a>).</p>`
      : // The caption would be as wide as the table, cut by its scroll box on a phone: said above it.
        html`<p class="hint">The ${limit} most recent messages your keys sent, newest first.</p>
      <div class="table-wrap" tabindex="0" role="region" aria-label="Table of your messages"><table>
      <caption class="visually-hidden">Messages</caption>
      <thead><tr><th scope="col">Sent</th><th scope="col">Status</th><th scope="col">Message</th><th scope="col">Id</th></tr></thead>
      <tbody>${messages.map(
        (m) =>
          html`<tr><td data-label="Sent">${time(m.createdAt)}</td><td data-label="Status">${m.statusReason === null ? m.status : `${m.status}: ${m.statusReason}`}</td><td data-label="Message" class="message-text">${m.message}</td><td data-label="Id"><code>${m.id}</code></td></tr>`,
      )}</tbody>
    </table></div>`,
  )
}
