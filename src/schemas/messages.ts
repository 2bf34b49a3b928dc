import Type from 'typebox'
import { UNDELIVERED_REASON } from '../domain/events.ts'
import { Cursor, PageLimit, VISIBLE_TEXT } from './common.ts'

// A value added here is a change clients must already be ready for: the compatibility policy
// (docs/api.md, decision 104) has them take an unknown status as final and not delivered.
export const MESSAGE_STATUSES = ['queued', 'delivered', 'failed', 'undelivered'] as const
export const MessageStatusSchema = Type.Enum(MESSAGE_STATUSES, {
  type: 'string',
  description:
    '`queued` while the message is only queued; `delivered` once a webhook endpoint answered 2xx; `failed` when its delivery to every subscribed endpoint failed (the attempts ran out, or the endpoint was disabled); `undelivered` when no endpoint was subscribed to `message.created` (`statusReason` says so). More values may be added: take one you do not know as final and not delivered.',
})
export type MessageStatus = (typeof MESSAGE_STATUSES)[number]

export const NewMessageSchema = Type.Object(
  {
    message: Type.String({
      minLength: 1,
      maxLength: 10_000,
      pattern: VISIBLE_TEXT,
      description: 'The text to send: 1 to 10000 characters, not only spaces or invisible characters, no NUL.',
      // Without an example Swagger UI's "Try it out" invents a random string matching the pattern.
      examples: ['Hello from the quickstart'],
    }),
  },
  { $id: 'NewMessage', additionalProperties: false },
)
export type NewMessage = Type.Static<typeof NewMessageSchema>

export const MessageSchema = Type.Object(
  {
    id: Type.String({ description: 'Identifier of the message.', examples: ['msg_3kTMd9PqLw2xY8aZ'] }),
    message: Type.String({ description: 'The text that was sent.', examples: ['Hello from the quickstart'] }),
    status: MessageStatusSchema,
    statusReason: Type.Union([Type.String(), Type.Null()], {
      description: `Why the message ended as it did, where its status alone does not say: \`${UNDELIVERED_REASON}\` for \`undelivered\`; otherwise null (a \`failed\` message's deliveries say why each failed).`,
      examples: [null],
    }),
    createdAt: Type.String({
      format: 'date-time',
      description: 'ISO 8601 UTC timestamp, e.g. 2026-11-22T12:00:00.000Z.',
      examples: ['2026-11-22T12:00:00.000Z'],
    }),
    attempts: Type.Integer({
      minimum: 0,
      description: 'Delivery attempts made so far, over every endpoint.',
      examples: [0],
    }),
    deliveredAt: Type.Union([Type.String({ format: 'date-time' }), Type.Null()], {
      description: 'When an endpoint first answered 2xx, or null. ISO 8601 UTC.',
      examples: [null],
    }),
  },
  // A response: open to fields added later (decision 20).
  { $id: 'Message' },
)
export type Message = Type.Static<typeof MessageSchema>

export const MessagesSchema = Type.Array(MessageSchema, {
  description: "A page of the account's messages, newest first.",
})

export const MessageParamsSchema = Type.Object(
  {
    messageId: Type.String({
      minLength: 1,
      maxLength: 100,
      // No NUL: PostgreSQL cannot compare a text with U+0000 in it, and would fail the request.
      pattern: '^[^\\u0000]*$',
      description: 'The identifier of the message (`msg_…`).',
    }),
  },
  { additionalProperties: false },
)

export const ListMessagesQuerySchema = Type.Object(
  { limit: PageLimit('messages'), status: Type.Optional(MessageStatusSchema), cursor: Cursor },
  { additionalProperties: false },
)
