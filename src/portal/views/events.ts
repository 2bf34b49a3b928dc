import type { Event } from '../../schemas/events.ts'
import { type Html, html } from '../html.ts'
import { time } from './keys.ts'
import { layout, type PageContext } from './layout.ts'

export function eventsPage(context: PageContext, events: Event[], limit: number): Html {
  return layout(
    context,
    'Events',
    events.length === 0
      ? html`<p>No events yet. Each message you send and each order you place, complete or cancel is one (see <code>GET /v1/events</code> in the <a href="/docs">API reference</a>).</p>`
      : html`<p class="hint">The ${limit} most recent events of your account, newest first, with what each carried: what <code>GET /v1/events</code> answers and what webhook endpoints receive.</p>
      <div class="table-wrap" tabindex="0" role="region" aria-label="Table of your events"><table>
      <caption class="visually-hidden">Events</caption>
      <thead><tr><th scope="col">When</th><th scope="col">Type</th><th scope="col">Data</th><th scope="col">Id</th></tr></thead>
      <tbody>${events.map(
        (e) =>
          html`<tr><td data-label="When">${time(e.createdAt)}</td><td data-label="Type"><code>${e.type}</code></td><td data-label="Data"><details><summary>Show</summary><pre>${JSON.stringify(e.data, null, 2)}</pre></details></td><td data-label="Id"><code>${e.id}</code></td></tr>`,
      )}</tbody>
    </table></div>`,
  )
}
