import {
  type Delivery,
  EVENT_TYPES,
  type EventType,
  MAX_RECOVERED,
  WEBHOOK_DESCRIPTION_MAX_LENGTH,
  type WebhookEndpoint,
} from '../../schemas/webhooks.ts'
import type { UrlPolicy } from '../../webhooks/url-policy.ts'
import { eventField, type FieldError } from '../forms.ts'
import { type Html, html } from '../html.ts'
import { time } from './keys.ts'
import { csrfInput, field, formErrors, layout, type Notice, type PageContext, secretField } from './layout.ts'

const EVENT_LABELS: Record<EventType, string> = {
  'message.created': 'a message is sent',
  'order.placed': 'an order is placed',
  'order.completed': 'an order is completed',
  'order.canceled': 'an order is canceled',
  'order.expired': 'an order’s hold ends',
}

const DELIVERY_LABELS: Record<Delivery['status'], string> = {
  pending: 'Pending',
  delivered: 'Delivered',
  failed: 'Failed',
}

const events = (list: readonly string[]) => list.map((type, i) => html`${i > 0 ? ', ' : ''}<code>${type}</code>`)

function status(endpoint: WebhookEndpoint): Html {
  return endpoint.status === 'enabled'
    ? html`Enabled`
    : html`Disabled${endpoint.disabledReason ? html`: ${endpoint.disabledReason}` : ''}`
}

function endpointRow(endpoint: WebhookEndpoint): Html {
  return html`<tr>
    <th scope="row"><a href="/portal/webhooks/${endpoint.id}" class="url">${endpoint.url}</a>${endpoint.description ? html`<br><span class="hint">${endpoint.description}</span>` : ''}</th>
    <td data-label="Events">${events(endpoint.events)}</td>
    <td data-label="Status">${status(endpoint)}</td>
    <td data-label="Created">${time(endpoint.createdAt)}</td>
  </tr>`
}

/** What this server takes as an endpoint's URL (WEBHOOK_ALLOW_HTTP, WEBHOOK_ALLOW_PRIVATE_URLS), in a sentence. */
export function urlHint(policy: UrlPolicy): string {
  const schemes = policy.allowHttp ? 'an https:// or http://' : 'an https://'
  if (!policy.allowPrivate) return `Where to POST the events: ${schemes} address on the public internet.`
  const example = `${policy.allowHttp ? 'http' : 'https'}://127.0.0.1:3000/webhooks`
  return `Where to POST the events: ${schemes} address on the public internet, a private network or this machine, such as ${example}.`
}

export interface WebhookFormState {
  url?: string
  description?: string
  events?: string[]
  error?: FieldError
  notice?: Notice
}

export function webhooksPage(
  context: PageContext,
  endpoints: WebhookEndpoint[],
  limit: number,
  policy: UrlPolicy,
  form: WebhookFormState = {},
): Html {
  const { beside: errors, notice: refused } = formErrors(form.error, ['url', 'description', 'events'])
  // A new form has every box checked, as a new key has every scope.
  const checked = form.events ?? [...EVENT_TYPES]
  const notice = refused ?? form.notice
  const full = endpoints.length >= limit
  return layout(
    context,
    'Webhooks',
    html`<p class="hint"><strong>Experimental</strong>: this feature may still change. Each event your account causes is POSTed to the endpoints subscribed to it, signed as <a href="https://www.standardwebhooks.com/">Standard Webhooks</a> describes.</p>
    <section aria-labelledby="endpoints-heading">
      <h2 id="endpoints-heading">Your endpoints</h2>
      ${
        endpoints.length === 0
          ? html`<p>You have no endpoints yet.</p>`
          : // The caption would be as wide as the table, cut by its scroll box on a phone: said above it.
            html`<p class="hint">Newest first. Open an endpoint to see its recent deliveries, disable it, rotate its secret or delete it.</p>
      <div class="table-wrap" tabindex="0" role="region" aria-label="Table of your webhook endpoints"><table>
        <caption class="visually-hidden">Your webhook endpoints</caption>
        <thead><tr><th scope="col">URL</th><th scope="col">Events</th><th scope="col">Status</th><th scope="col">Created</th></tr></thead>
        <tbody>${endpoints.map(endpointRow)}</tbody>
      </table></div>`
      }
    </section>
    <section aria-labelledby="create-heading">
      <h2 id="create-heading">Add an endpoint</h2>
      ${
        full
          ? html`<p>You have ${endpoints.length} endpoints, the most an account may have. Delete one to add another.</p>`
          : html`<form method="post" action="/portal/webhooks" novalidate>
        ${csrfInput(context)}
        ${field({ name: 'url', label: 'URL', type: 'url', value: form.url, hint: urlHint(policy), error: errors.url })}
        <fieldset class="field${errors.events ? ' invalid' : ''}"${errors.events ? html` aria-describedby="events-error"` : ''}>
          <legend>Events to send</legend>
          ${errors.events && html`<p class="field-error" id="events-error">${errors.events}</p>`}
          ${EVENT_TYPES.map(
            (type) =>
              html`<label class="choice"><input type="checkbox" name="${eventField(type)}"${checked.includes(type) ? html` checked` : ''}> <code>${type}</code> when ${EVENT_LABELS[type]}</label>`,
          )}
        </fieldset>
        ${field({ name: 'description', label: 'Description (optional)', value: form.description, hint: 'A note for yourself, e.g. order sync.', maxlength: WEBHOOK_DESCRIPTION_MAX_LENGTH, required: false, error: errors.description })}
        <button type="submit">Add endpoint</button>
      </form>`
      }
    </section>`,
    notice,
  )
}

/** The secret of an endpoint, shown once: when it is created and when it is rotated. */
function secretBlock(secret: string): Html {
  return html`<p><strong>Copy it now: it is shown only this once.</strong></p>
    ${secretField('Signing secret', secret)}
    <p>Every request to the endpoint carries the headers <code>webhook-id</code>, <code>webhook-timestamp</code> and <code>webhook-signature</code>. Verify them with this secret before trusting the body, with any Standard Webhooks library: in Node.js, the <code>standardwebhooks</code> package, <code>new Webhook(secret).verify(body, headers)</code> on the raw body.</p>`
}

export function newWebhookPage(context: PageContext, endpoint: WebhookEndpoint, secret: string): Html {
  return layout(
    context,
    'Your new webhook endpoint',
    html`<div class="notice success" role="status">Endpoint <code class="url">${endpoint.url}</code> added: it receives ${events(endpoint.events)}.</div>
    ${secretBlock(secret)}
    <p><a href="/portal/webhooks/${endpoint.id}">See the endpoint</a> · <a href="/portal/webhooks">Back to your endpoints</a></p>`,
  )
}

export function rotatedSecretPage(
  context: PageContext,
  endpoint: WebhookEndpoint,
  secret: string,
  previousUntil: string,
): Html {
  return layout(
    context,
    'Your new signing secret',
    html`<div class="notice success" role="status">The secret of <code class="url">${endpoint.url}</code> is rotated.</div>
    <p>Until ${time(previousUntil)} (24 hours), requests are signed with both the old and the new secret, so a receiver holding either accepts them: put the new one in place before then. After that only the new one signs.</p>
    ${secretBlock(secret)}
    <p><a href="/portal/webhooks/${endpoint.id}">Back to the endpoint</a></p>`,
  )
}

function lastAnswer(delivery: Delivery): Html {
  if (delivery.lastStatus !== null && delivery.lastError)
    return html`HTTP ${delivery.lastStatus}: ${delivery.lastError}`
  if (delivery.lastStatus !== null) return html`HTTP ${delivery.lastStatus}`
  if (delivery.lastError) return html`${delivery.lastError}`
  return html`—`
}

function deliveryRow(context: PageContext, endpoint: WebhookEndpoint, delivery: Delivery): Html {
  const next =
    delivery.status === 'delivered'
      ? html`Delivered ${time(delivery.deliveredAt)}`
      : delivery.status === 'pending'
        ? html`Next ${time(delivery.nextAttemptAt)}`
        : '—'
  return html`<tr>
    <th scope="row"><code>${delivery.eventType}</code><br><code class="hint">${delivery.eventId}</code></th>
    <td data-label="Status">${DELIVERY_LABELS[delivery.status]}</td>
    <td data-label="Attempts">${delivery.attempts}</td>
    <td data-label="Last answer">${lastAnswer(delivery)}</td>
    <td data-label="Queued">${time(delivery.createdAt)}</td>
    <td data-label="Last attempt">${time(delivery.lastAttemptAt, 'Never')}</td>
    <td data-label="Next or delivered">${next}</td>
    <td class="row-actions"><form method="post" action="/portal/webhooks/${endpoint.id}/deliveries/${delivery.id}/redeliver">
        ${csrfInput(context)}
        <button type="submit" class="secondary">Send again<span class="visually-hidden"> ${delivery.eventType} ${delivery.eventId}</span></button>
      </form></td>
  </tr>`
}

/** The recovery form as sent, when refused. */
export interface RecoveryFormState {
  since?: string
  error?: string
}

/** A time as a `datetime-local` input shows it, in UTC: 24 hours ago unless given. */
const localInput = (at = new Date(Date.now() - 24 * 3600_000)) => at.toISOString().slice(0, 16)

export function webhookPage(
  context: PageContext,
  endpoint: WebhookEndpoint,
  deliveries: Delivery[],
  limit: number,
  notice?: Notice,
  recovery: RecoveryFormState = {},
): Html {
  const enabled = endpoint.status === 'enabled'
  return layout(
    context,
    'Webhook endpoint',
    html`<dl class="details">
      <dt>URL</dt><dd><code class="url">${endpoint.url}</code></dd>
      ${endpoint.description ? html`<dt>Description</dt><dd>${endpoint.description}</dd>` : ''}
      <dt>Events</dt><dd>${events(endpoint.events)}</dd>
      <dt>Status</dt><dd>${status(endpoint)}</dd>
      <dt>Created</dt><dd>${time(endpoint.createdAt)}</dd>
      <dt>Secret rotated</dt><dd>${time(endpoint.secretRotatedAt, 'Never')}</dd>
      <dt>Id</dt><dd><code>${endpoint.id}</code></dd>
    </dl>
    <section aria-labelledby="manage-heading">
      <h2 id="manage-heading">Manage</h2>
      <form method="post" action="/portal/webhooks/${endpoint.id}/${enabled ? 'disable' : 'enable'}" class="actions">
        ${csrfInput(context)}
        <button type="submit" class="secondary">${enabled ? 'Disable' : 'Enable'}</button>
        <span class="hint">${enabled ? 'Nothing is sent while it is disabled, and its pending deliveries fail.' : 'Events are sent to it again from now on.'}</span>
      </form>
      <form method="post" action="/portal/webhooks/${endpoint.id}/rotate" class="actions">
        ${csrfInput(context)}
        <button type="submit" class="secondary">Rotate secret</button>
        <span class="hint">Shows a new secret once; the old one keeps signing for 24 hours.</span>
      </form>
      <form method="post" action="/portal/webhooks/${endpoint.id}/test" class="actions">
        ${csrfInput(context)}
        <button type="submit" class="secondary">Send test event</button>
        <span class="hint">Sends a <code>webhook.test</code> event to this endpoint now, signed like any event, whatever it subscribes to: its <code>data</code> is the endpoint. It shows in the deliveries below.</span>
      </form>
      <p class="actions"><a href="/portal/webhooks/${endpoint.id}/delete">Delete this endpoint</a></p>
    </section>
    <section aria-labelledby="recover-heading">
      <h2 id="recover-heading">Send failed deliveries again</h2>
      <form method="post" action="/portal/webhooks/${endpoint.id}/recover" novalidate>
        ${csrfInput(context)}
        ${field({ name: 'since', label: 'Failed since (UTC)', type: 'datetime-local', value: recovery.since ?? localInput(), hint: `After your receiver was down, say: every delivery queued since this time that failed is sent again now, the oldest ${MAX_RECOVERED} at a time.`, error: recovery.error })}
        <button type="submit" class="secondary">Send failed deliveries again</button>
      </form>
    </section>
    <section aria-labelledby="deliveries-heading">
      <h2 id="deliveries-heading">Recent deliveries</h2>
      ${
        deliveries.length === 0
          ? html`<p>No deliveries yet. Each event of a subscribed type is sent here once it happens.</p>`
          : html`<p class="hint">The ${limit} most recent, newest first. Send again queues a delivery to be sent at once, with the same event id${enabled ? '' : html`; <strong>enable the endpoint first</strong>`}.</p>
      <div class="table-wrap" tabindex="0" role="region" aria-label="Table of recent deliveries"><table>
        <caption class="visually-hidden">Recent deliveries</caption>
        <thead><tr><th scope="col">Event</th><th scope="col">Status</th><th scope="col">Attempts</th><th scope="col">Last answer</th><th scope="col">Queued</th><th scope="col">Last attempt</th><th scope="col">Next or delivered</th><th scope="col"><span class="visually-hidden">Actions</span></th></tr></thead>
        <tbody>${deliveries.map((delivery) => deliveryRow(context, endpoint, delivery))}</tbody>
      </table></div>`
      }
    </section>
    <p><a href="/portal/webhooks">Back to your endpoints</a></p>`,
    notice,
  )
}

export function deleteWebhookPage(context: PageContext, endpoint: WebhookEndpoint): Html {
  return layout(
    context,
    'Delete an endpoint',
    html`<p>Delete the endpoint <code class="url">${endpoint.url}</code> (created ${time(endpoint.createdAt)})?</p>
    <p>Nothing is sent to it from now on, and its pending deliveries fail. This cannot be undone.</p>
    <form method="post" action="/portal/webhooks/${endpoint.id}/delete" class="actions">
      ${csrfInput(context)}
      <button type="submit" class="danger">Delete endpoint</button>
      <a href="/portal/webhooks/${endpoint.id}">Cancel</a>
    </form>`,
  )
}
