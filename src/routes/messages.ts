import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import fp from 'fastify-plugin'
import {
  errorResponses,
  header,
  IdempotencyHeadersSchema,
  jsonResponse,
  NoQuerySchema,
  RATE_LIMIT_HEADERS,
} from '../schemas/common.ts'
import { MessageSchema, NewMessageSchema } from '../schemas/messages.ts'

const messages: FastifyPluginAsyncTypebox = async (app) => {
  app.addHook('onRequest', app.authenticate)
  app.addHook('onRequest', app.rateLimit)

  app.post(
    '/messages',
    {
      schema: {
        operationId: 'sendMessage',
        summary: 'Send a message (quickstart example)',
        description: 'Stores the message durably for the calling account and queues it: 202 with status `queued`.',
        tags: ['messages'],
        headers: IdempotencyHeadersSchema,
        querystring: NoQuerySchema,
        body: NewMessageSchema,
        response: {
          202: jsonResponse('Accepted: stored and queued.', MessageSchema, {
            'Idempotent-Replayed': header('`true` when this is the stored response to an earlier request.'),
            ...RATE_LIMIT_HEADERS,
          }),
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
}

export default fp(messages, {
  name: 'messages',
  dependencies: ['store', 'auth', 'rate-limit', 'idempotency'],
  encapsulate: true,
})
