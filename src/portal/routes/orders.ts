/**
 * The signed-in account's orders (a beta of the API, used here through the store, as every portal
 * page is): newest first, a page at a time, and Cancel for a placed one, once confirmed.
 */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import Type from 'typebox'
import { accountId, type Portal } from '../context.ts'
import { CsrfOnlyForm, OrderParams } from '../forms.ts'
import { html } from '../html.ts'
import { errorPage } from '../views/error.ts'
import type { PageContext } from '../views/layout.ts'
import { cancelOrderPage, type OrderRow, ordersPage, petLabel } from '../views/orders.ts'

const PAGE_SIZE = 20

const OrdersQuery = Type.Object({
  /** Where an older page starts: the `next` position of the page before it. */
  before: Type.Optional(Type.Integer({ minimum: 1, maximum: Number.MAX_SAFE_INTEGER })),
  canceled: Type.Optional(OrderParams.properties.orderId),
})

const orderNotFound = (c: PageContext) =>
  errorPage(c, 'Order not found', 'You have no order with this id. It may belong to another account.')

const orders: FastifyPluginAsyncTypebox<{ portal: Portal }> = async (app, { portal }) => {
  app.addHook('preHandler', portal.signedIn)

  /** A page of the account's orders, each with its animal (null if it is no longer there). */
  async function page(account: number, before?: number): Promise<{ rows: OrderRow[]; next: number | null }> {
    const { orders, next } = await app.store.listOrders({ accountId: account, limit: PAGE_SIZE, before })
    const petIds = [...new Set(orders.map((order) => order.petId))]
    const pets = new Map(await Promise.all(petIds.map(async (id) => [id, await app.store.getPet(id)] as const)))
    return { rows: orders.map((order) => ({ order, pet: pets.get(order.petId) ?? null })), next }
  }

  app.get(
    '/orders',
    { schema: { hide: true, querystring: OrdersQuery }, attachValidation: true },
    async (request, reply) => {
      // A hand-edited query shows the newest orders, as keys?revoked= ignores a bad id.
      const query = request.validationError ? {} : request.query
      const list = await page(accountId(request), query.before)
      const canceled = query.canceled ? await app.store.getOrder(accountId(request), query.canceled) : null
      const pet = canceled && (await app.store.getPet(canceled.petId))
      const notice =
        canceled?.status === 'canceled'
          ? {
              kind: 'success' as const,
              text: html`Your order for ${petLabel(canceled.petId, pet ?? null)} (<code>${canceled.id}</code>) is canceled: it no longer holds the animal.`,
            }
          : undefined
      return portal.send(request, reply, 200, (c) => ordersPage(c, list, { notice, older: query.before !== undefined }))
    },
  )

  // Asks first, as revoking a key does; an order no longer placed has nothing to cancel.
  app.get('/orders/:orderId/cancel', { schema: { hide: true, params: OrderParams } }, async (request, reply) => {
    const order = await app.store.getOrder(accountId(request), request.params.orderId)
    if (!order) return portal.send(request, reply, 404, orderNotFound)
    if (order.status !== 'placed') return reply.redirect('/portal/orders', 303)
    const pet = await app.store.getPet(order.petId)
    return portal.send(request, reply, 200, (c) => cancelOrderPage(c, { order, pet }))
  })

  app.post(
    '/orders/:orderId/cancel',
    { schema: { hide: true, params: OrderParams, body: CsrfOnlyForm }, preValidation: portal.checkCsrf },
    async (request, reply) => {
      const { orderId } = request.params
      // Scoped to the signed-in account: another account's order is "not found", and stays as it is.
      const result = await app.store.transitionOrder(accountId(request), orderId, 'canceled')
      if ('refused' in result && result.refused === 'not_found') return portal.send(request, reply, 404, orderNotFound)
      if ('refused' in result) {
        // Completed or expired since the page was shown: say so on the list as it is now.
        const list = await page(accountId(request))
        const notice = {
          kind: 'error' as const,
          text: html`Order <code>${orderId}</code> is ${result.order.status}: it can no longer be canceled.`,
        }
        return portal.send(request, reply, 409, (c) => ordersPage(c, list, { notice }))
      }
      return reply.redirect(`/portal/orders?canceled=${result.order.id}`, 303)
    },
  )
}

export default orders
