import Type, { type TSchema } from 'typebox'
import { ALL_EVENT_TYPES, type AnyEventType, EVENT_TYPES, type EventType, SUBSCRIPTIONS } from '../domain/events.ts'
import type { Stability } from '../plugins/stability.ts'
import { CONTROL_CHARACTERS } from './accounts.ts'
import { DateTimeInput, PageLimit } from './common.ts'

export { ALL_EVENT_TYPES, type AnyEventType, EVENT_TYPES, type EventType } from '../domain/events.ts'

/** An endpoint's description, in characters: the API's limit, and the portal's form's. */
export const WEBHOOK_DESCRIPTION_MAX_LENGTH = 200

/** Every webhook operation, and its schemas in the document, exist only where the operator offers them. */
export const WEBHOOKS_STABILITY: Stability = { level: 'experimental', feature: 'webhooks' }

/** Endpoints one account may have at once. */
export const MAX_WEBHOOK_ENDPOINTS = 16

const timestamp = (description: string) =>
  Type.String({
    format: 'date-time',
    description: `${description} ISO 8601 UTC.`,
    examples: ['2026-11-22T12:00:00.000Z'],
  })
/** A value of `schema`, or null. */
const nullable = <T extends TSchema>(schema: T, description: string, example: unknown = null) =>
  Type.Union([schema, Type.Null()], { description, examples: [example] })
const nullableTimestamp = (description: string) =>
  nullable(Type.String({ format: 'date-time' }), `${description} ISO 8601 UTC.`)

export const EventTypeSchema = Type.Enum(EVENT_TYPES, { type: 'string', description: 'An event type.' })
/** Any event's type: those an endpoint subscribes to, and `webhook.test`, sent only when asked. */
export const AnyEventTypeSchema = Type.Enum(ALL_EVENT_TYPES, {
  type: 'string',
  description: 'The event type: one an endpoint subscribes to, or `webhook.test` (sent to one endpoint when asked).',
})

/** Under the reserved `.example` domain (RFC 2606): an endpoint made from the example sends events nowhere. */
const URL_EXAMPLE = 'https://hooks.example/animal-store'
const SECRET_EXAMPLE = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw'
const webhookFields = {
  url: Type.String({
    minLength: 1,
    maxLength: 2048,
    description:
      'Where events are POSTed: an absolute `https://` URL on a public address, without a username or password (see WEBHOOK_ALLOW_HTTP, WEBHOOK_ALLOW_PRIVATE_URLS).',
    examples: [URL_EXAMPLE],
  }),
  events: Type.Array(
    Type.Enum(SUBSCRIPTIONS, { type: 'string', description: 'An event type, or `order.*` or `message.*`.' }),
    {
      minItems: 1,
      maxItems: SUBSCRIPTIONS.length,
      uniqueItems: true,
      description:
        'The event types to send to it, each name once: `order.*` (or `message.*`) stands for all of that ' +
        'resource’s, and the endpoint lists them one by one (a type also named by a wildcard is sent once).',
      examples: [['order.placed', 'order.completed']],
    },
  ),
  description: Type.String({
    maxLength: WEBHOOK_DESCRIPTION_MAX_LENGTH,
    // One line of text: no control character (a terminal escape would reach the CLI's output and the
    // portal), NUL included, which PostgreSQL cannot store in text.
    pattern: `^[^${CONTROL_CHARACTERS}]*$`,
    description: `A note for the account’s own use: 0 to ${WEBHOOK_DESCRIPTION_MAX_LENGTH} characters on one line, no control characters.`,
    examples: ['Order sync'],
  }),
}

export const WebhookStatusSchema = Type.Enum(['enabled', 'disabled'] as const, {
  type: 'string',
  description: '`disabled` once the endpoint answered `410 Gone` (or was disabled by hand): nothing is sent.',
})

export const WebhookEndpointSchema = Type.Object(
  {
    id: Type.String({ description: 'Identifier of the endpoint.', examples: ['we_3kTMd9PqLw2xY8aZ'] }),
    url: Type.String({ description: 'Where events are POSTed.', examples: [URL_EXAMPLE] }),
    events: Type.Array(EventTypeSchema, {
      description: 'The event types sent to it.',
      examples: [['order.placed', 'order.completed']],
    }),
    description: Type.String({ description: 'A note for the account’s own use.', examples: ['Order sync'] }),
    status: WebhookStatusSchema,
    disabledReason: nullable(Type.String(), 'Why it is disabled, or null.'),
    createdAt: timestamp('When the endpoint was added.'),
    secretRotatedAt: nullableTimestamp('When the signing secret was last rotated, or null.'),
  },
  { $id: 'WebhookEndpoint' },
)
export type WebhookEndpoint = Type.Static<typeof WebhookEndpointSchema>

export const WebhookEndpointsSchema = Type.Array(WebhookEndpointSchema, {
  description: "The account's webhook endpoints, newest first (never their secrets).",
})

const secretField = Type.String({
  description:
    'The signing secret (`whsec_…`): verify each delivery with it (Standard Webhooks). Shown only on creation and rotation: keep it.',
  examples: [SECRET_EXAMPLE],
})

export const NewWebhookEndpointSchema = Type.Object(
  { ...webhookFields, description: Type.Optional({ ...webhookFields.description, default: '' }) },
  { $id: 'NewWebhookEndpoint', additionalProperties: false, description: 'A webhook endpoint to add.' },
)
export type NewWebhookEndpoint = Type.Static<typeof NewWebhookEndpointSchema>

export const CreatedWebhookEndpointSchema = Type.Object(
  { ...WebhookEndpointSchema.properties, secret: secretField },
  { $id: 'CreatedWebhookEndpoint', description: 'A new webhook endpoint, with its signing secret (shown this once).' },
)

export const RotatedWebhookEndpointSchema = Type.Object(
  {
    ...WebhookEndpointSchema.properties,
    secret: secretField,
    previousSecretExpiresAt: timestamp('Until when the previous secret still signs each delivery, beside the new one.'),
  },
  {
    $id: 'RotatedWebhookEndpoint',
    description:
      'A webhook endpoint with its new signing secret (shown this once), and when the old one stops signing.',
  },
)

export const WebhookEndpointPatchSchema = Type.Object(
  {
    url: Type.Optional(webhookFields.url),
    events: Type.Optional(webhookFields.events),
    description: Type.Optional(webhookFields.description),
    status: Type.Optional(WebhookStatusSchema),
  },
  {
    $id: 'WebhookEndpointPatch',
    additionalProperties: false,
    description:
      'The fields to change (JSON Merge Patch, RFC 7396): those left out keep their value; none may be null. ' +
      '`status: disabled` stops deliveries (pending ones fail); `enabled` resumes them.',
  },
)
export type WebhookEndpointPatch = Type.Static<typeof WebhookEndpointPatchSchema>

const id = (name: string, prefix: string) =>
  Type.String({
    minLength: 1,
    maxLength: 100,
    // No NUL: PostgreSQL cannot compare a text with U+0000 in it, and would fail the request.
    pattern: '^[^\\u0000]*$',
    description: `The identifier of the ${name} (\`${prefix}_…\`).`,
  })

export const WebhookEndpointParamsSchema = Type.Object(
  { endpointId: id('webhook endpoint', 'we') },
  { additionalProperties: false },
)

export const DeliveryParamsSchema = Type.Object(
  { endpointId: id('webhook endpoint', 'we'), deliveryId: id('delivery', 'dlv') },
  { additionalProperties: false },
)

export const ListDeliveriesQuerySchema = Type.Object(
  { limit: PageLimit('deliveries') },
  { additionalProperties: false },
)

export const DELIVERY_STATUSES = ['pending', 'delivered', 'failed'] as const
export type DeliveryStatus = (typeof DELIVERY_STATUSES)[number]

export const DeliverySchema = Type.Object(
  {
    id: Type.String({ description: 'Identifier of the delivery.', examples: ['dlv_3kTMd9PqLw2xY8aZ'] }),
    eventId: Type.String({ description: 'The event (its `webhook-id`).', examples: ['evt_3kTMd9PqLw2xY8aZ'] }),
    eventType: AnyEventTypeSchema,
    status: Type.Enum(DELIVERY_STATUSES, {
      type: 'string',
      description: '`pending` (being tried), `delivered` (a 2xx answer) or `failed` (every attempt ran out).',
    }),
    attempts: Type.Integer({ minimum: 0, description: 'Attempts made so far.', examples: [1] }),
    nextAttemptAt: nullableTimestamp('When the next attempt is due, while pending.'),
    lastAttemptAt: nullableTimestamp('When the last attempt was made, or null.'),
    lastStatus: nullable(Type.Integer(), 'The HTTP status of the last answer.', 200),
    lastError: nullable(Type.String(), 'Why the last attempt failed, or null.'),
    deliveredAt: nullableTimestamp('When a 2xx answer arrived, or null.'),
    createdAt: timestamp('When the event was queued for this endpoint.'),
  },
  { $id: 'Delivery', description: 'One event sent to one endpoint, and how its attempts went.' },
)
export type Delivery = Type.Static<typeof DeliverySchema>

export const DeliveriesSchema = Type.Array(DeliverySchema, {
  description: "The endpoint's most recent deliveries, newest first.",
})

/**
 * What an endpoint receives: the body each event's deliveries POST (src/domain/events.ts,
 * eventBody), published in the document's top-level `webhooks` so that a receiver can type it.
 */
const eventSchema = (type: AnyEventType, $id: string, data: TSchema, when: string, description: string) =>
  // Object.assign only tells the type what the options already set (for the document's references).
  Object.assign(
    Type.Object(
      {
        type: Type.Literal(type, { description: 'The event type.', examples: [type] }),
        timestamp: Type.String({
          format: 'date-time',
          description: `When it happened: ${when}. ISO 8601 UTC.`,
          examples: ['2026-11-22T12:00:00.000Z'],
        }),
        data,
      },
      { $id, description },
    ),
    { $id, description },
  )

const orderEvent = (type: EventType, $id: string, description: string) =>
  eventSchema(type, $id, Type.Ref('Order'), "the order's `updatedAt`", description)

export const EVENT_SCHEMAS = {
  'message.created': eventSchema(
    'message.created',
    'MessageCreatedEvent',
    Type.Ref('Message'),
    "the message's `createdAt`",
    'A message was sent: `data` is the message as sendMessage answered it (`queued`).',
  ),
  'order.placed': orderEvent(
    'order.placed',
    'OrderPlacedEvent',
    'An order was placed: it holds its animal (`pending`).',
  ),
  'order.completed': orderEvent(
    'order.completed',
    'OrderCompletedEvent',
    'An order was completed: its animal is sold.',
  ),
  'order.canceled': orderEvent(
    'order.canceled',
    'OrderCanceledEvent',
    'An order was canceled (API or portal): its animal is available again.',
  ),
  'order.expired': orderEvent(
    'order.expired',
    'OrderExpiredEvent',
    'A placed order reached its `expiresAt`: its animal is available again.',
  ),
  'webhook.test': eventSchema(
    'webhook.test',
    'WebhookTestEvent',
    Type.Ref('WebhookEndpoint'),
    'when it was asked for',
    'A test event, sent to one endpoint when asked (sendWebhookTestEvent): `data` is the endpoint, without its secret.',
  ),
} satisfies Record<AnyEventType, TSchema>

/** Failed deliveries one recovery sends again at most: a bounded write; call again for the rest. */
export const MAX_RECOVERED = 1000

export const RecoverDeliveriesSchema = Type.Object(
  { since: DateTimeInput('Send again the failed deliveries queued at or after this instant.') },
  {
    $id: 'RecoverDeliveries',
    additionalProperties: false,
    description: 'Which failed deliveries of the endpoint to send again.',
  },
)

export const RecoverySchema = Type.Object(
  {
    queued: Type.Integer({
      minimum: 0,
      maximum: MAX_RECOVERED,
      description: `Failed deliveries made pending again, due now: the oldest first, ${MAX_RECOVERED} at most.`,
      examples: [12],
    }),
    more: Type.Boolean({
      description: `Whether failed deliveries since then remain, past the ${MAX_RECOVERED} of one call: call again.`,
      examples: [false],
    }),
  },
  { $id: 'Recovery', description: 'What a recovery queued.' },
)
export type Recovery = Type.Static<typeof RecoverySchema>
