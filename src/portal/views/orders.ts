import type { Order } from '../../schemas/orders.ts'
import type { Pet } from '../../schemas/pets.ts'
import { type Html, html } from '../html.ts'
import { time } from './keys.ts'
import { csrfInput, layout, type Notice, type PageContext } from './layout.ts'

export interface OrderRow {
  order: Order
  /** The animal ordered; null if it is no longer in the catalogue. */
  pet: Pet | null
}

const STATUS_LABELS: Record<Order['status'], string> = {
  placed: 'Placed',
  completed: 'Completed',
  canceled: 'Canceled',
  expired: 'Expired',
}

/** An animal as people know it: its name and id. */
export function petLabel(petId: number, pet: Pet | null): Html {
  return pet ? html`<strong>${pet.name}</strong> (#${petId})` : html`#${petId}`
}

function orderRow({ order, pet }: OrderRow): Html {
  const placed = order.status === 'placed'
  return html`<tr>
    <th scope="row"><code>${order.id}</code></th>
    <td data-label="Animal">${petLabel(order.petId, pet)}</td>
    <td data-label="Status">${STATUS_LABELS[order.status]}</td>
    <td data-label="Placed">${time(order.createdAt)}</td>
    <td data-label="Hold ends">${placed ? time(order.expiresAt) : '—'}</td>
    <td data-label="Last change">${time(order.updatedAt)}</td>
    <td class="row-actions">${
      placed
        ? html`<a href="/portal/orders/${order.id}/cancel">Cancel<span class="visually-hidden"> the order for ${pet?.name ?? `animal ${order.petId}`}</span></a>`
        : ''
    }</td>
  </tr>`
}

export function ordersPage(
  context: PageContext,
  list: { rows: OrderRow[]; next: number | null },
  options: { notice?: Notice; older?: boolean } = {},
): Html {
  const pages =
    (options.older || list.next !== null) &&
    html`<p class="actions">${options.older ? html`<a href="/portal/orders">Newest orders</a>` : ''}
    ${list.next !== null ? html`<a href="/portal/orders?before=${list.next}">Older orders</a>` : ''}</p>`
  return layout(
    context,
    'Orders',
    list.rows.length === 0
      ? html`<p>${options.older ? 'No older orders.' : 'No orders yet.'} Place one with <code>POST /v1/store/orders</code> and one of your keys (a beta: send <code>Animal-Store-Beta: orders</code>, or use the typed client, which does); see the <a href="/docs">API reference</a>.</p>
      ${options.older ? html`<p><a href="/portal/orders">Newest orders</a></p>` : ''}`
      : // The caption would be as wide as the table, cut by its scroll box on a phone: said above it.
        html`<p class="hint">Your account's orders, newest first. A placed order holds its animal until its hold ends, unless you complete or cancel it first.</p>
      <div class="table-wrap" tabindex="0" role="region" aria-label="Table of your orders"><table>
      <caption class="visually-hidden">Orders</caption>
      <thead><tr><th scope="col">Order</th><th scope="col">Animal</th><th scope="col">Status</th><th scope="col">Placed</th><th scope="col">Hold ends</th><th scope="col">Last change</th><th scope="col"><span class="visually-hidden">Actions</span></th></tr></thead>
      <tbody>${list.rows.map(orderRow)}</tbody>
    </table></div>
    ${pages}`,
    options.notice,
  )
}

/** Asks before canceling, as revoking a key does: once free, the animal may be ordered by anyone. */
export function cancelOrderPage(context: PageContext, { order, pet }: OrderRow): Html {
  return layout(
    context,
    'Cancel an order',
    html`<p>Cancel your order for ${petLabel(order.petId, pet)} (<code>${order.id}</code>, placed ${time(order.createdAt)})?</p>
    <p>The animal is no longer held for you: anyone may order it from now on. This cannot be undone.</p>
    <form method="post" action="/portal/orders/${order.id}/cancel" class="actions">
      ${csrfInput(context)}
      <button type="submit" class="danger">Cancel order</button>
      <a href="/portal/orders">Keep the order</a>
    </form>`,
  )
}
