import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { sharedCursorCodec } from '../domain/pagination.ts'
import { ApiError } from '../errors.ts'
import { apiRoutes } from '../plugins/auth.ts'
import {
  DEFAULT_PAGE_SIZE,
  errorResponse,
  errorResponses,
  IDEMPOTENT_HEADERS,
  IDEMPOTENT_REQUEST,
  jsonResponse,
  NoQuerySchema,
  RATE_LIMIT_HEADERS,
} from '../schemas/common.ts'
import {
  ListMessagesQuerySchema,
  MessageParamsSchema,
  MessageSchema,
  MessagesSchema,
  NewMessageSchema,
} from '../schemas/messages.ts'
import { sentId } from '../schemas/validation.ts'
import { cursorPage, pageResponse } from './next-page.ts'

const tags = ['messages']

const messages: FastifyPluginAsyncTypebox = async (app) => {
  app.post(
    '/messages',
    {
      schema: {
        operationId: 'sendMessage',
        summary: 'Send a message (quickstart example)',
        description:
          'Stores the message durably for the calling account and queues it: 202 with status `queued`. ' +
          'It becomes `delivered` once a webhook endpoint subscribed to `message.created` answers 2xx, or `failed`; ' +
          'with no endpoint subscribed, `undelivered` within a second.',
        tags,
        ...IDEMPOTENT_REQUEST,
        body: NewMessageSchema,
        response: {
          202: jsonResponse('Accepted: stored and queued.', MessageSchema, IDEMPOTENT_HEADERS),
          ...errorResponses(400, 401, 409, 413, 415, 422, 429, 500, 503),
        },
      },
      config: { scope: 'messages:write' },
      ...app.idempotent,
    },
    async function sendMessage(request, reply) {
      const { accountId } = request.caller
      const message = await app.store.createMessage(accountId, request.body.message, request.idempotency ?? undefined)
      return reply.code(202).send(message)
    },
  )

  // A key of their own: a cursor of another list (pets, orders) is refused here, not read as a position.
  const cursors = await sharedCursorCodec(app.store, 'messages-cursor')

  app.get(
    '/messages',
    {
      schema: {
        operationId: 'listMessages',
        summary: "List the account's messages",
        description:
          'Newest first, `limit` per page, optionally of one `status`. When more exist, `Link: <…>; rel="next"` gives the next page.',
        tags,
        querystring: ListMessagesQuerySchema,
        response: {
          200: pageResponse('messages', MessagesSchema, '/v1/messages'),
          ...errorResponses(400, 401, 429, 500, 503),
        },
      },
      config: { scope: 'messages:read' },
    },
    async function listMessages(request, reply) {
      const { limit = DEFAULT_PAGE_SIZE, status, cursor } = request.query
      const { before, linkNext } = cursorPage(cursors, new URLSearchParams(status && { status }), cursor)
      const page = await app.store.listMessages({ accountId: request.caller.accountId, limit, status, before })
      return linkNext(request, reply, '/v1/messages', limit, page.next, page.messages)
    },
  )

  app.get(
    '/messages/:messageId',
    {
      schema: {
        operationId: 'getMessage',
        summary: 'Get a message',
        description: "One of the account's messages, with its delivery status; another account's is 404.",
        tags,
        params: MessageParamsSchema,
        querystring: NoQuerySchema,
        response: {
          200: jsonResponse('The message.', MessageSchema, RATE_LIMIT_HEADERS),
          ...errorResponses(400, 401, 429, 500, 503),
          404: errorResponse(
            'message_not_found',
            "`message_not_found`: no such message of this account's.",
            RATE_LIMIT_HEADERS,
          ),
        },
      },
      config: { scope: 'messages:read' },
    },
    async function getMessage(request) {
      const { messageId } = request.params
      const message = await app.store.getMessage(request.caller.accountId, messageId)
      if (!message) throw new ApiError('message_not_found', `No message ${sentId(messageId)} for this account.`)
      return message
    },
  )
}

export default apiRoutes(messages, 'messages', ['store', 'idempotency'])
