import Type from 'typebox'
import { ABSENT_ID_EXAMPLE, Cursor, Int64, Int64Param, PageLimit } from './common.ts'

export const ORDER_STATUSES = ['placed', 'completed', 'canceled', 'expired'] as const
export const OrderStatusSchema = Type.Enum(ORDER_STATUSES, {
  type: 'string',
  description:
    '`placed` holds the pet until `expiresAt`; `completed` (the pet is sold), `canceled` and `expired` (the pet is available again) are final.',
})
export type OrderStatus = Type.Static<typeof OrderStatusSchema>

const timestamp = (description: string, example: string) =>
  Type.String({ format: 'date-time', description: `${description} ISO 8601 UTC.`, examples: [example] })

export const OrderSchema = Type.Object(
  {
    id: Type.String({ description: 'Identifier of the order.', examples: ['ord_3kTMd9PqLw2xY8aZ'] }),
    petId: Int64({ minimum: 1, description: 'The animal the order is for.', examples: [1] }),
    status: OrderStatusSchema,
    createdAt: timestamp('When the order was placed.', '2026-11-22T12:00:00.000Z'),
    expiresAt: timestamp(
      "When a placed order's hold on the animal ends, unless completed or canceled first.",
      '2026-11-22T12:30:00.000Z',
    ),
    updatedAt: timestamp('When the order last changed status (its creation, until then).', '2026-11-22T12:00:00.000Z'),
  },
  // A response: open to fields added later (decision 20).
  { $id: 'Order' },
)
export type Order = Type.Static<typeof OrderSchema>

export const OrdersSchema = Type.Array(OrderSchema, { description: "A page of the account's orders, newest first." })

export const NewOrderSchema = Type.Object(
  {
    petId: Int64({
      minimum: 1,
      description: 'The animal to reserve: it must be `available`.',
      examples: [ABSENT_ID_EXAMPLE],
    }),
  },
  { $id: 'NewOrder', additionalProperties: false, description: 'An order for one animal.' },
)
export type NewOrder = Type.Static<typeof NewOrderSchema>

export const OrderParamsSchema = Type.Object(
  {
    orderId: Type.String({
      minLength: 1,
      maxLength: 100,
      // No NUL: PostgreSQL cannot compare a text with U+0000 in it, and would fail the request.
      pattern: '^[^\\u0000]*$',
      description: 'The identifier of the order (`ord_…`).',
    }),
  },
  { additionalProperties: false },
)

export const ListOrdersQuerySchema = Type.Object(
  {
    limit: PageLimit('orders'),
    status: Type.Optional(OrderStatusSchema),
    petId: Type.Optional(Int64Param({ description: 'Only the orders for this animal.' })),
    cursor: Cursor,
  },
  { additionalProperties: false },
)

export const InventorySchema = Type.Object(
  {
    available: Type.Integer({ minimum: 0, description: 'Animals that can be ordered.', examples: [12] }),
    pending: Type.Integer({
      minimum: 0,
      description: 'Animals held by a placed order (or added as pending).',
      examples: [3],
    }),
    sold: Type.Integer({ minimum: 0, description: 'Animals sold.', examples: [40] }),
  },
  { $id: 'Inventory', description: 'How many animals have each status.' },
)
export type Inventory = Type.Static<typeof InventorySchema>
