/**
 * The account's events (experimental, feature `webhooks`): each event the API made, whether or not
 * an endpoint was subscribed to it, kept EVENT_RETENTION_DAYS (decision 113).
 */
import Type from 'typebox'
import { ALL_EVENT_TYPES, EVENT_TYPE_FILTERS, WILDCARDS } from '../domain/events.ts'
import { Cursor, DateTimeInput, PageLimit } from './common.ts'
import { AnyEventTypeSchema } from './webhooks.ts'

const escaped = (name: string) => name.replace(/[.*]/g, (c) => `\\${c}`)
const FILTER_NAME = `(?:${EVENT_TYPE_FILTERS.map(escaped).join('|')})`

export const EventSchema = Type.Object(
  {
    id: Type.String({
      description: 'Identifier of the event: the `webhook-id` of each of its deliveries.',
      examples: ['evt_3kTMd9PqLw2xY8aZ'],
    }),
    type: AnyEventTypeSchema,
    createdAt: Type.String({
      format: 'date-time',
      description: 'When it happened: the `timestamp` of its webhook payload. ISO 8601 UTC.',
      examples: ['2026-11-22T12:00:00.000Z'],
    }),
    // Any object: an event keeps the resource as it was, even once the resource's schema has grown.
    data: Type.Unsafe<Record<string, unknown>>({
      type: 'object',
      additionalProperties: true,
      description:
        'The resource as the API returned it when the event happened: the Message (`message.created`), the ' +
        'Order (`order.*`), or the WebhookEndpoint without its secret (`webhook.test`).',
      examples: [
        {
          id: 'ord_3kTMd9PqLw2xY8aZ',
          petId: 1,
          status: 'placed',
          createdAt: '2026-11-22T12:00:00.000Z',
          expiresAt: '2026-11-22T12:30:00.000Z',
          updatedAt: '2026-11-22T12:00:00.000Z',
        },
      ],
    }),
  },
  // A response: open to fields added later (decision 20).
  { $id: 'Event', description: 'Something that happened to a resource of the account; what a webhook delivers.' },
)
export type Event = Type.Static<typeof EventSchema>

export const EventsSchema = Type.Array(EventSchema, { description: "A page of the account's events, newest first." })

export const EventParamsSchema = Type.Object(
  {
    eventId: Type.String({
      minLength: 1,
      maxLength: 100,
      // No NUL: PostgreSQL cannot compare a text with U+0000 in it, and would fail the request.
      pattern: '^[^\\u0000]*$',
      description: 'The identifier of the event (`evt_…`), its `webhook-id`.',
    }),
  },
  { additionalProperties: false },
)

export const ListEventsQuerySchema = Type.Object(
  {
    limit: PageLimit('events'),
    type: Type.Optional(
      Type.String({
        maxLength: 500,
        pattern: `^${FILTER_NAME}(?:, *${FILTER_NAME})*$`,
        // Also the message of a 400 (query.type … is invalid: …): plain words, no Markdown.
        description:
          `Only events of these types, separated by commas: ${ALL_EVENT_TYPES.join(', ')}; or ` +
          `${WILDCARDS.join(', ')} for every type of one resource.`,
        examples: ['order.*,message.created'],
      }),
    ),
    createdAfter: Type.Optional(DateTimeInput('Only events that happened after this instant.')),
    cursor: Cursor,
  },
  { additionalProperties: false },
)

/** The header that resumes a stream, declared so that generated clients know it (the list ignores it). */
export const ListEventsHeadersSchema = Type.Object({
  'last-event-id': Type.Optional(
    Type.String({
      description:
        'With `Accept: text/event-stream`: the stream starts after this event (its `id`, or the `id` of the ' +
        "stream's `position` frame: where it began), replaying those that came since; 410 " +
        '`last_event_id_unknown` when it is no longer kept. The list ignores it.',
      examples: ['evt_3kTMd9PqLw2xY8aZ'],
    }),
  ),
})

/** The 200 of GET /v1/events, which also answers `Accept: text/event-stream` with the live stream (decision 116). */
export function withEventStream<Response extends { content: Record<string, unknown> }>(response: Response) {
  const stream = Type.String({
    description:
      'Server-Sent Events: `retry:` once; when opened without `Last-Event-ID`, a `position` event whose `id:` ' +
      'stands for where the stream began (resume from it if the connection is lost before any event); then ' +
      'for each new event of the account `id:` (its id, what `Last-Event-ID` names), `event:` (its type) and ' +
      '`data:` (the Event as JSON); every EVENT_STREAM_HEARTBEAT_SECONDS a `: heartbeat` comment and a fresh ' +
      '`position` event (where the log stands: resume from the last id received, event or position).',
    examples: [
      'id: evt_3kTMd9PqLw2xY8aZ\nevent: message.created\ndata: {"id":"evt_3kTMd9PqLw2xY8aZ","type":"message.created","createdAt":"2026-11-22T12:00:00.000Z","data":{}}\n\n',
    ],
  })
  return { ...response, content: { ...response.content, 'text/event-stream': { schema: stream } } }
}
