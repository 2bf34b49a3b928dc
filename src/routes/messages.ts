import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { errorResponses, jsonResponse } from '../schemas/common.ts'
import { MessageSchema, NewMessageSchema } from '../schemas/messages.ts'

const messages: FastifyPluginAsyncTypebox = async (app) => {
  app.addHook('onRequest', app.authenticate)

  app.post(
    '/messages',
    {
      schema: {
        operationId: 'sendMessage',
        summary: 'Send a message (quickstart example)',
        description: 'Stores the message durably for the calling account and queues it: 202 with status `queued`.',
        tags: ['messages'],
        security: [{ bearerAuth: [] }],
        body: NewMessageSchema,
        response: {
          202: jsonResponse('Accepted: stored and queued.', MessageSchema),
          ...errorResponses(400, 401, 500, 503),
        },
      },
    },
    async (request, reply) => {
      const message = await app.store.createMessage(request.caller.accountId, request.body.message)
      return reply.code(202).send(message)
    },
  )
}

export default messages
