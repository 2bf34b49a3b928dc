/** The signed-in account's recent messages (sent with any of its keys). */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { Portal } from '../context.ts'
import { messagesPage } from '../views/messages.ts'

const RECENT_MESSAGES = 50

const messages: FastifyPluginAsyncTypebox<{ portal: Portal }> = async (app, { portal }) => {
  app.get('/messages', { schema: { hide: true }, preHandler: portal.signedIn }, async (request, reply) => {
    const { accountId } = request.portalSession as { accountId: number }
    const { messages: list } = await app.store.listMessages({ accountId, limit: RECENT_MESSAGES })
    return portal.send(request, reply, 200, (c) => messagesPage(c, list, RECENT_MESSAGES))
  })
}

export default messages
