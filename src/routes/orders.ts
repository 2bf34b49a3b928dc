import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { FastifyRequest } from 'fastify'
import { sharedCursorCodec } from '../domain/pagination.ts'
import { ApiError } from '../errors.ts'
import { requestOrigin } from '../http/host.ts'
import { apiRoutes } from '../plugins/auth.ts'
import type { Stability } from '../plugins/stability.ts'
import {
  createdHeaders,
  DEFAULT_PAGE_SIZE,
  errorResponse,
  errorResponses,
  IDEMPOTENT_REQUEST,
  jsonResponse,
  MAX_EXACT_INTEGER,
  NoQuerySchema,
  RATE_LIMIT_HEADERS,
} from '../schemas/common.ts'
import {
  InventorySchema,
  ListOrdersQuerySchema,
  NewOrderSchema,
  type Order,
  OrderParamsSchema,
  OrderSchema,
  OrdersSchema,
} from '../schemas/orders.ts'
import { sentId } from '../schemas/validation.ts'
import type { TransitionResult } from '../store/types.ts'
import { cursorPage, pageResponse } from './next-page.ts'

const stability: Stability = { level: 'beta', feature: 'orders' }
const tags = ['store']

const orders: FastifyPluginAsyncTypebox<{ orderHoldMs: number }> = async (app, { orderHoldMs }) => {
  if (!app.offers(stability)) return
  app.post(
    '/store/orders',
    {
      schema: {
        operationId: 'placeOrder',
        summary: 'Order an animal',
        description:
          'Reserves an `available` animal: it becomes `pending` until the order is completed, canceled or expires.',
        tags,
        ...IDEMPOTENT_REQUEST,
        body: NewOrderSchema,
        response: {
          201: jsonResponse('The order, placed; the animal is now `pending`.', OrderSchema, createdHeaders('order')),
          ...errorResponses(400, 401, 404, 413, 415, 422, 429, 500, 503),
          409: errorResponse(
            'pet_not_available',
            '`pet_not_available`: a placed order holds the animal, or it is sold (or was added as pending); ' +
              '`idempotency_conflict`: a request with this Idempotency-Key is still in progress.',
            RATE_LIMIT_HEADERS,
          ),
        },
      },
      config: { scope: 'orders:write', stability, replayLocation: orderLocation },
      ...app.idempotent,
    },
    async function placeOrder(request, reply) {
      const { petId } = request.body
      const result = await app.store.placeOrder(
        { accountId: request.caller.accountId, petId, holdMs: orderHoldMs },
        request.idempotency ?? undefined,
      )
      if ('refused' in result) {
        throw result.refused === 'pet_not_found'
          ? new ApiError('pet_not_found', `No pet with id ${petId}.`)
          : new ApiError(
              'pet_not_available',
              `Pet ${petId} is not available: it is pending (an order holds it, or it was added so) or sold.`,
            )
      }
      return reply.code(201).header('location', orderLocation(result.placed, request)).send(result.placed)
    },
  )

  // A key of its own: a pets cursor is no orders cursor, though both are an id and a filter.
  const cursors = await sharedCursorCodec(app.store, 'orders-cursor')

  app.get(
    '/store/orders',
    {
      schema: {
        operationId: 'listOrders',
        summary: "List the account's orders",
        description: 'Newest first, `limit` per page. When more exist, `Link: <…>; rel="next"` gives the next page.',
        tags,
        querystring: ListOrdersQuerySchema,
        response: {
          200: pageResponse('orders', OrdersSchema, '/v1/store/orders'),
          ...errorResponses(400, 401, 429, 500, 503),
        },
      },
      config: { scope: 'orders:read', stability },
    },
    async function listOrders(request, reply) {
      const { limit = DEFAULT_PAGE_SIZE, status, petId, cursor } = request.query
      const filter = new URLSearchParams({
        ...(status && { status }),
        ...(petId !== undefined && { petId: String(petId) }),
      })
      const { before, linkNext } = cursorPage(cursors, filter, cursor)
      // Pet ids run from 1 to MAX_EXACT_INTEGER: no order is for any other (valid int64) id.
      if (petId !== undefined && (petId < 1 || petId > MAX_EXACT_INTEGER)) return []
      const page = await app.store.listOrders({ accountId: request.caller.accountId, limit, status, petId, before })
      return linkNext(request, reply, '/v1/store/orders', limit, page.next, page.orders)
    },
  )

  app.get(
    '/store/orders/:orderId',
    {
      schema: {
        operationId: 'getOrder',
        summary: 'Get an order',
        tags,
        params: OrderParamsSchema,
        querystring: NoQuerySchema,
        response: {
          200: jsonResponse('The order.', OrderSchema, RATE_LIMIT_HEADERS),
          ...errorResponses(400, 401, 404, 429, 500, 503),
        },
      },
      config: { scope: 'orders:read', stability },
    },
    async function getOrder(request) {
      const order = await app.store.getOrder(request.caller.accountId, request.params.orderId)
      if (!order) throw orderNotFound(request.params.orderId)
      return order
    },
  )

  for (const [action, to, operationId, summary] of [
    ['complete', 'completed', 'completeOrder', 'Complete an order: the animal is sold'],
    ['cancel', 'canceled', 'cancelOrder', 'Cancel an order: the animal is available again'],
  ] as const) {
    app.post(
      `/store/orders/:orderId/${action}`,
      {
        schema: {
          operationId,
          summary,
          description: `Moves a \`placed\` order to \`${to}\`. Repeating it answers 200 with the order; from another final status, 409.`,
          tags,
          params: OrderParamsSchema,
          querystring: NoQuerySchema,
          response: {
            200: jsonResponse(`The order, now \`${to}\`.`, OrderSchema, RATE_LIMIT_HEADERS),
            ...errorResponses(400, 401, 404, 429, 500, 503),
            409: errorResponse(
              'order_conflict',
              `\`order_conflict\`: the order is final in another status (${others(to)}), so it cannot become \`${to}\`.`,
              RATE_LIMIT_HEADERS,
            ),
          },
        },
        config: {
          scope: 'orders:write',
          stability,
          // A condition on an order that is not there leaves its 404 (§13.2.1).
          exists: async ({ caller, params }: FastifyRequest) =>
            (await app.store.getOrder(caller.accountId, (params as { orderId: string }).orderId)) !== null,
        },
      },
      async function moveOrder(request) {
        const { orderId } = request.params
        return answer(await app.store.transitionOrder(request.caller.accountId, orderId, to), orderId, to)
      },
    )
  }

  /** The order after a move, or why it cannot move. */
  function answer(result: TransitionResult, orderId: string, to: string): Order {
    if ('refused' in result && result.refused === 'not_found') throw orderNotFound(orderId)
    if ('refused' in result) {
      throw new ApiError('order_conflict', `Order ${orderId} is ${result.order.status}: it cannot become ${to}.`)
    }
    return result.order
  }

  app.get(
    '/store/inventory',
    {
      schema: {
        operationId: 'getInventory',
        summary: 'Count the animals by status',
        tags,
        querystring: NoQuerySchema,
        response: {
          200: jsonResponse('How many animals have each status.', InventorySchema, RATE_LIMIT_HEADERS),
          ...errorResponses(400, 401, 429, 500, 503),
        },
      },
      config: { scope: 'pets:read', stability },
    },
    async function getInventory() {
      return app.store.inventory()
    },
  )
}

/** The final statuses other than `to`, from which an order cannot move to it. */
function others(to: string): string {
  return ['completed', 'canceled', 'expired'].filter((status) => status !== to).join(', ')
}

function orderNotFound(orderId: string): ApiError {
  return new ApiError('order_not_found', `No order ${sentId(orderId)} for this account.`)
}

function orderLocation(order: { id: string }, request: FastifyRequest): string {
  return `${requestOrigin(request)}/v1/store/orders/${order.id}`
}

export default apiRoutes(orders, 'orders', ['store', 'idempotency', 'stability'])
