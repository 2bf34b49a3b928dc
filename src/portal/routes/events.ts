/**
 * The signed-in account's recent events, with what each one carried (an experimental feature, as
 * the events API: the page exists only where the operator lists `webhooks` in EXPERIMENTAL_FEATURES).
 */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { accountId, type Portal } from '../context.ts'
import { eventsPage } from '../views/events.ts'

const RECENT_EVENTS = 50

const events: FastifyPluginAsyncTypebox<{ portal: Portal }> = async (app, { portal }) => {
  if (!app.offers({ level: 'experimental', feature: 'webhooks' })) return
  app.get('/events', { schema: { hide: true }, preHandler: portal.signedIn }, async (request, reply) => {
    const { events: list } = await app.store.listEvents({ accountId: accountId(request), limit: RECENT_EVENTS })
    return portal.send(request, reply, 200, (c) => eventsPage(c, list, RECENT_EVENTS))
  })
}

export default events
