import { keyState } from '../../domain/accounts.ts'
import { SCOPES, type Scope } from '../../domain/scopes.ts'
import type { ApiKey } from '../../store/types.ts'
import { EXPIRY_CHOICES, type FieldError, scopeField } from '../forms.ts'
import { type Html, html } from '../html.ts'
import { csrfInput, field, formErrors, layout, type Notice, type PageContext, secretField } from './layout.ts'

/** A timestamp as people read it, in UTC, with the exact value for machines. */
export function time(iso: string | null, none = '—'): Html {
  if (!iso) return html`${none}`
  return html`<time datetime="${iso}">${iso.slice(0, 16).replace('T', ' ')} UTC</time>`
}

const STATE_LABELS = { active: 'Active', revoked: 'Revoked', expired: 'Expired' }

const SCOPE_LABELS: Record<Scope, string> = {
  'pets:read': 'list and fetch animals, count them',
  'pets:write': 'add and change animals',
  'orders:read': 'list and fetch your orders',
  'orders:write': 'place, complete and cancel orders',
  'messages:read': 'list and fetch your messages',
  'messages:write': 'send messages',
  'webhooks:read': 'list your webhook endpoints and their deliveries (experimental)',
  'webhooks:write': 'add, change and delete webhook endpoints, rotate secrets, redeliver (experimental)',
}

function keyRow(key: ApiKey): Html {
  const state = keyState(key)
  return html`<tr>
    <th scope="row">${key.name}</th>
    <td data-label="Prefix"><code>${key.prefix}…</code></td>
    <td data-label="Created">${time(key.createdAt)}</td>
    <td data-label="Last used">${time(key.lastUsedAt, 'Never')}</td>
    <td data-label="Expires">${time(key.expiresAt, 'Never')}</td>
    <td data-label="Scopes">${key.scopes === null ? 'All' : key.scopes.split(' ').map((scope, i) => html`${i > 0 ? ', ' : ''}<code>${scope}</code>`)}</td>
    <td data-label="State">${state === 'revoked' ? html`Revoked ${time(key.revokedAt)}` : STATE_LABELS[state]}</td>
    <td class="row-actions">${
      state === 'revoked'
        ? ''
        : html`<a href="/portal/keys/${key.id}/revoke">Revoke<span class="visually-hidden"> ${key.name}</span></a>`
    }</td>
  </tr>`
}

export function keysPage(
  context: PageContext,
  keys: ApiKey[],
  form: { name?: string; expires?: string; scopes?: string[]; error?: FieldError; notice?: Notice } = {},
): Html {
  const { beside: errors, notice: refused } = formErrors(form.error, ['name', 'expires', 'scopes'])
  // A new form has every box checked: a key does everything unless its owner says otherwise.
  const scopes = form.scopes ?? [...SCOPES]
  const notice = refused ?? form.notice
  const selected = form.expires ?? '90d'
  return layout(
    context,
    'API keys',
    html`<section aria-labelledby="create-heading">
      <h2 id="create-heading">Create a key</h2>
      <p>Send a key as <code>Authorization: Bearer &lt;API_KEY&gt;</code>. Use one key per program or machine, so that you can revoke one without the others.</p>
      <form method="post" action="/portal/keys" novalidate>
        ${csrfInput(context)}
        ${field({ name: 'name', label: 'Name', value: form.name, hint: 'What uses it, e.g. laptop or ci.', maxlength: 100, error: errors.name })}
        <div class="field${errors.expires ? ' invalid' : ''}">
          <label for="expires">Expires after</label>
          ${errors.expires && html`<p class="field-error" id="expires-error">${errors.expires}</p>`}
          <select id="expires" name="expires"${errors.expires ? html` aria-invalid="true" aria-describedby="expires-error"` : ''}>
            ${EXPIRY_CHOICES.map(([value, label]) => html`<option value="${value}"${value === selected ? html` selected` : ''}>${label}</option>`)}
          </select>
        </div>
        <fieldset class="field${errors.scopes ? ' invalid' : ''}"${errors.scopes ? html` aria-describedby="scopes-error"` : ''}>
          <legend>What it may do</legend>
          <p class="hint">Uncheck what this key must not do. Writing includes reading; with every box checked the key also gets what later versions add.</p>
          ${errors.scopes && html`<p class="field-error" id="scopes-error">${errors.scopes}</p>`}
          ${SCOPES.map(
            (scope) =>
              html`<label class="choice"><input type="checkbox" name="${scopeField(scope)}"${scopes.includes(scope) ? html` checked` : ''}> <code>${scope}</code> ${SCOPE_LABELS[scope]}</label>`,
          )}
        </fieldset>
        <button type="submit">Create key</button>
      </form>
    </section>
    <section aria-labelledby="keys-heading">
      <h2 id="keys-heading">Your keys</h2>
      ${
        keys.length === 0
          ? html`<p>You have no keys yet.</p>`
          : // The caption would be as wide as the table, cut by its scroll box on a phone: said above it.
            html`<p class="hint">Newest first. Only the first characters of each key are kept; the secret is never shown again.</p>
      <div class="table-wrap" tabindex="0" role="region" aria-label="Table of your keys"><table>
        <caption class="visually-hidden">Your keys</caption>
        <thead><tr><th scope="col">Name</th><th scope="col">Prefix</th><th scope="col">Created</th><th scope="col">Last used</th><th scope="col">Expires</th><th scope="col">Scopes</th><th scope="col">State</th><th scope="col"><span class="visually-hidden">Actions</span></th></tr></thead>
        <tbody>${keys.map(keyRow)}</tbody>
      </table></div>`
      }
    </section>`,
    notice,
  )
}

export function newKeyPage(context: PageContext, key: ApiKey, secret: string): Html {
  return layout(
    context,
    'Your new API key',
    html`<div class="notice success" role="status">Key <strong>${key.name}</strong> created${key.expiresAt ? html`; it expires ${time(key.expiresAt)}` : ''}.</div>
    <p><strong>Copy it now: it is shown only this once.</strong> We keep only a hash of it, so it cannot be shown again; if you lose it, create another and revoke this one.</p>
    ${secretField('API key', secret)}
    <p>In a terminal: <code>export API_KEY=${secret}</code></p>
    <p><a href="/portal/keys">Back to your keys</a></p>`,
  )
}

export function revokePage(context: PageContext, key: ApiKey): Html {
  return layout(
    context,
    'Revoke a key',
    html`<p>Revoke <strong>${key.name}</strong> (<code>${key.prefix}…</code>, created ${time(key.createdAt)})?</p>
    <p>Every request with this key is refused from now on. This cannot be undone.</p>
    <form method="post" action="/portal/keys/${key.id}/revoke" class="actions">
      ${csrfInput(context)}
      <button type="submit" class="danger">Revoke key</button>
      <a href="/portal/keys">Cancel</a>
    </form>`,
  )
}
