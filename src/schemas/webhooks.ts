import Type from 'typebox'

/** What an endpoint can subscribe to; each event's `data` is the resource as the API returns it. */
export const EVENT_TYPES = [
  'message.created',
  'order.placed',
  'order.completed',
  'order.canceled',
  'order.expired',
] as const
export type EventType = (typeof EVENT_TYPES)[number]

const timestamp = (description: string) =>
  Type.String({
    format: 'date-time',
    description: `${description} ISO 8601 UTC.`,
    examples: ['2026-11-22T12:00:00.000Z'],
  })
const nullableTimestamp = (description: string) =>
  Type.Union([Type.String({ format: 'date-time' }), Type.Null()], { description: `${description} ISO 8601 UTC.` })

export const EventTypeSchema = Type.Enum(EVENT_TYPES, { type: 'string', description: 'An event type.' })

export const WebhookEndpointSchema = Type.Object(
  {
    id: Type.String({ description: 'Identifier of the endpoint.', examples: ['we_3kTMd9PqLw2xY8aZ'] }),
    url: Type.String({ description: 'Where events are POSTed.', examples: ['https://example.com/webhooks'] }),
    events: Type.Array(EventTypeSchema, { description: 'The event types sent to it.' }),
    description: Type.String({ description: 'A note for the account’s own use.', examples: ['Order sync'] }),
    status: Type.Enum(['enabled', 'disabled'] as const, {
      type: 'string',
      description: '`disabled` once the endpoint answered `410 Gone` (or was disabled by hand): nothing is sent.',
    }),
    disabledReason: Type.Union([Type.String(), Type.Null()], { description: 'Why it is disabled, or null.' }),
    createdAt: timestamp('When the endpoint was added.'),
    secretRotatedAt: nullableTimestamp('When the signing secret was last rotated, or null.'),
  },
  { $id: 'WebhookEndpoint' },
)
export type WebhookEndpoint = Type.Static<typeof WebhookEndpointSchema>

export const DELIVERY_STATUSES = ['pending', 'delivered', 'failed'] as const
export type DeliveryStatus = (typeof DELIVERY_STATUSES)[number]

export const DeliverySchema = Type.Object(
  {
    id: Type.String({ description: 'Identifier of the delivery.', examples: ['dlv_3kTMd9PqLw2xY8aZ'] }),
    eventId: Type.String({ description: 'The event (its `webhook-id`).', examples: ['evt_3kTMd9PqLw2xY8aZ'] }),
    eventType: EventTypeSchema,
    status: Type.Enum(DELIVERY_STATUSES, {
      type: 'string',
      description: '`pending` (being tried), `delivered` (a 2xx answer) or `failed` (every attempt ran out).',
    }),
    attempts: Type.Integer({ minimum: 0, description: 'Attempts made so far.' }),
    nextAttemptAt: nullableTimestamp('When the next attempt is due, while pending.'),
    lastAttemptAt: nullableTimestamp('When the last attempt was made, or null.'),
    lastStatus: Type.Union([Type.Integer(), Type.Null()], { description: 'The HTTP status of the last answer.' }),
    lastError: Type.Union([Type.String(), Type.Null()], { description: 'Why the last attempt failed, or null.' }),
    deliveredAt: nullableTimestamp('When a 2xx answer arrived, or null.'),
    createdAt: timestamp('When the event was queued for this endpoint.'),
  },
  { $id: 'Delivery' },
)
export type Delivery = Type.Static<typeof DeliverySchema>
