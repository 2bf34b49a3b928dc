/**
 * The account's events (experimental, feature `webhooks`): every event the API made for it, whether
 * or not an endpoint was subscribed, kept EVENT_RETENTION_DAYS (decision 113). An event carries its
 * resource, so reading one takes the read scope of that resource besides `webhooks:read`, as
 * subscribing to it does (decision 97).
 */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { ALL_EVENT_TYPES, type AnyEventType, filteredTypes, scopeToReceive } from '../domain/events.ts'
import { sharedCursorCodec } from '../domain/pagination.ts'
import { ApiError } from '../errors.ts'
import { apiRoutes } from '../plugins/auth.ts'
import { wantsEventStream } from '../plugins/event-stream.ts'
import { insufficientScope } from '../plugins/scopes.ts'
import {
  DEFAULT_PAGE_SIZE,
  errorResponse,
  errorResponses,
  jsonResponse,
  NoQuerySchema,
  RATE_LIMIT_HEADERS,
} from '../schemas/common.ts'
import {
  EventParamsSchema,
  EventSchema,
  EventsSchema,
  ListEventsHeadersSchema,
  ListEventsQuerySchema,
  withEventStream,
} from '../schemas/events.ts'
import { sentId } from '../schemas/validation.ts'
import { WEBHOOKS_STABILITY } from '../schemas/webhooks.ts'
import { cursorPage, pageResponse } from './next-page.ts'

const stability = WEBHOOKS_STABILITY
/** The route config of both operations: the key's scope, and the feature's stability. */
const config = { scope: 'webhooks:read', stability } as const
const tags = ['events']
const SCOPES_NOTE =
  'Besides `webhooks:read`, an event takes the read scope of what it carries: `messages:read` for ' +
  '`message.created`, `orders:read` for `order.*`.'

const events: FastifyPluginAsyncTypebox = async (app) => {
  if (!app.offers(stability)) return

  /** The event types this key may read (decision 97); null: every type. */
  function readable(granted: ReadonlySet<string> | null): AnyEventType[] | null {
    if (granted === null) return null
    const types = ALL_EVENT_TYPES.filter((type) => granted.has(scopeToReceive(type)))
    return types.length === ALL_EVENT_TYPES.length ? null : types
  }

  /** Refuses a type the key may not read, naming the scope it takes. */
  function checkType(granted: ReadonlySet<string> | null, type: AnyEventType): void {
    const scope = scopeToReceive(type)
    if (granted === null || granted.has(scope)) return
    throw insufficientScope(scope, `Reading ${type} events takes the scope ${scope}, which this API key lacks.`)
  }

  /** A stream starts now, or after its Last-Event-ID: a page's position means nothing to it (its `limit` is ignored). */
  function refuseListParameters(query: { createdAfter?: string; cursor?: string }): void {
    const given = (['createdAfter', 'cursor'] as const).filter((name) => query[name] !== undefined)
    if (given.length === 0) return
    throw new ApiError(
      'validation_failed',
      `The event stream takes only \`type\` (and the Last-Event-ID header to resume), not ${given.join(', ')}.`,
    )
  }

  // A key of its own: another list's cursor is refused here, not read as a position.
  const cursors = await sharedCursorCodec(app.store, 'events-cursor')

  app.get(
    '/events',
    {
      schema: {
        operationId: 'listEvents',
        summary: "List the account's events",
        description:
          'Every event of the account, newest first, whether or not an endpoint was subscribed to it, kept ' +
          'EVENT_RETENTION_DAYS (30 by default). `type` keeps those of some types (`order.*,message.created`), ' +
          '`createdAfter` those that happened after an instant. When more exist, `Link: <…>; rel="next"` gives ' +
          `the next page. ${SCOPES_NOTE} Without a \`type\`, the list holds the events the key may read. ` +
          'With `Accept: text/event-stream`, the live stream of the new events instead (Server-Sent Events; ' +
          '`Last-Event-ID` resumes after an event, 410 `last_event_id_unknown` when it is no longer kept).',
        tags,
        querystring: ListEventsQuerySchema,
        headers: ListEventsHeadersSchema,
        response: {
          200: withEventStream(pageResponse('events', EventsSchema, '/v1/events')),
          ...errorResponses(400, 401, 429, 500, 503),
          410: errorResponse(
            'last_event_id_unknown',
            '`last_event_id_unknown` (a stream): the `Last-Event-ID` is no longer in the event log, or never was.',
          ),
        },
      },
      config,
    },
    async function listEvents(request, reply) {
      const { limit = DEFAULT_PAGE_SIZE, type, createdAfter, cursor } = request.query
      const granted = request.caller.scopes
      const named = type === undefined ? undefined : filteredTypes(type)
      for (const each of named ?? []) checkType(granted, each)
      if (wantsEventStream(request.headers.accept)) {
        refuseListParameters(request.query)
        return app.eventStreams.open(request, reply, named ?? readable(granted))
      }
      const after = createdAfter === undefined ? undefined : new Date(createdAfter).toISOString()
      // The cursor is tied to the query as the store reads it: the same types, however they were spelled.
      const filter = new URLSearchParams({
        ...(named && { type: named.join(',') }),
        ...(after !== undefined && { createdAfter: after }),
      })
      const { before, linkNext } = cursorPage(cursors, filter, cursor)
      const types = named ?? readable(granted) ?? undefined
      const { accountId } = request.caller
      const page = await app.store.listEvents({ accountId, limit, types, createdAfter: after, before })
      return linkNext(request, reply, '/v1/events', limit, page.next, page.events)
    },
  )

  app.get(
    '/events/:eventId',
    {
      schema: {
        operationId: 'getEvent',
        summary: 'Get an event',
        description: `One of the account's events; another account's is 404. ${SCOPES_NOTE}`,
        tags,
        params: EventParamsSchema,
        querystring: NoQuerySchema,
        response: {
          200: jsonResponse('The event.', EventSchema, RATE_LIMIT_HEADERS),
          ...errorResponses(400, 401, 429, 500, 503),
          404: errorResponse(
            'event_not_found',
            "`event_not_found`: no such event of this account's (or no longer: events are kept EVENT_RETENTION_DAYS).",
            RATE_LIMIT_HEADERS,
          ),
        },
      },
      config,
    },
    async function getEvent(request) {
      const { eventId } = request.params
      const event = await app.store.getEvent(request.caller.accountId, eventId)
      if (!event) throw new ApiError('event_not_found', `No event ${sentId(eventId)} for this account.`)
      checkType(request.caller.scopes, event.type)
      return event
    },
  )
}

export default apiRoutes(events, 'events', ['store', 'stability'])
