/**
 * The signed-in account's webhook endpoints (an experimental feature: these pages exist only where
 * the operator lists `webhooks` in EXPERIMENTAL_FEATURES): list, add (the signing secret shown
 * once, on the page the POST redirects to, as after a rotation), disable and enable, rotate the
 * secret, delete, send a test event, send the failed deliveries since a time again, and each
 * endpoint's recent deliveries with Send again. Through the store, as every portal page is, with
 * the API's URL policy and limits.
 */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { FastifyRequest } from 'fastify'
import Type from 'typebox'
import type { Config } from '../../config.ts'
import { isDateTime } from '../../schemas/validation.ts'
import { EVENT_TYPES, type EventType, MAX_RECOVERED, MAX_WEBHOOK_ENDPOINTS } from '../../schemas/webhooks.ts'
import type { StoredWebhookEndpoint } from '../../store/types.ts'
import { newWebhookSecret } from '../../webhooks/signing.ts'
import { webhookUrl } from '../../webhooks/url-policy.ts'
import { accountId, type Portal } from '../context.ts'
import {
  CsrfOnlyForm,
  checkedBoxes,
  DeliveryParams,
  eventField,
  FIELD_MESSAGES,
  fieldError,
  NewWebhookForm,
  RecoverForm,
  WebhookParams,
} from '../forms.ts'
import { html } from '../html.ts'
import { errorPage } from '../views/error.ts'
import type { Notice, PageContext } from '../views/layout.ts'
import {
  deleteWebhookPage,
  newWebhookPage,
  type RecoveryFormState,
  rotatedSecretPage,
  type WebhookFormState,
  webhookPage,
  webhooksPage,
} from '../views/webhooks.ts'

/** Deliveries shown per endpoint. */
export const RECENT_DELIVERIES = 20
/** How long the secret a rotation replaces keeps signing beside the new one. */
export const PREVIOUS_SECRET_MS = 24 * 60 * 60_000

const EndpointQuery = Type.Object({
  changed: Type.Optional(Type.Enum(['enabled', 'disabled'] as const)),
  resent: Type.Optional(DeliveryParams.properties.deliveryId),
  /** Sent back from the secret's page once the secret was shown (a reload of it, say). */
  notice: Type.Optional(Type.Literal('secret-shown')),
  tested: Type.Optional(Type.String({ pattern: '^evt_[0-9A-Za-z]{1,64}$' })),
  recovered: Type.Optional(Type.Integer({ minimum: 0, maximum: MAX_RECOVERED })),
  more: Type.Optional(Type.Boolean()),
})
const WebhooksQuery = Type.Object({ deleted: Type.Optional(WebhookParams.properties.endpointId) })

/** The event types whose boxes the form checked, in the fixed order. */
const checked = (body: unknown): EventType[] => checkedBoxes(body, EVENT_TYPES, eventField)

const endpointNotFound = (c: PageContext) =>
  errorPage(c, 'Endpoint not found', 'You have no webhook endpoint with this id. It may belong to another account.')
const deliveryNotFound = (c: PageContext) =>
  errorPage(c, 'Delivery not found', 'This endpoint has no recent delivery with this id.')
/** What a refused Send test event or Send again of a disabled endpoint says. */
const disabledNotice = (then: string): Notice => ({
  kind: 'error',
  text: `This endpoint is disabled: nothing is sent to it. Enable it, then ${then}.`,
})

/** The form's time (UTC, minutes or seconds) as an instant, or null when no such time exists. */
function sinceOf(text: string): string | null {
  const iso = `${text.replace(' ', 'T')}${text.length === 16 ? ':00' : ''}Z`
  return isDateTime(iso) ? new Date(iso).toISOString() : null
}

const webhooks: FastifyPluginAsyncTypebox<{ portal: Portal; config: Config }> = async (app, { portal, config }) => {
  // Elsewhere no route at all: a 404 page, as any unknown portal page (and no link in the navigation).
  if (!app.offers({ level: 'experimental', feature: 'webhooks' })) return
  app.addHook('preHandler', portal.signedIn)
  const policy = { allowHttp: config.webhookAllowHttp, allowPrivate: config.webhookAllowPrivate }
  /** A button's form on one endpoint: its id in the path, only the CSRF token in the body. */
  const buttonForm = {
    schema: { hide: true, params: WebhookParams, body: CsrfOnlyForm },
    preValidation: portal.checkCsrf,
  }

  /** The list page with the form as sent, refused for `error`. */
  async function refused(
    request: FastifyRequest,
    reply: Parameters<Portal['send']>[1],
    code: number,
    form: WebhookFormState,
  ) {
    const list = await app.store.listWebhookEndpoints(accountId(request))
    return portal.send(request, reply, code, (c) => webhooksPage(c, list, MAX_WEBHOOK_ENDPOINTS, policy, form))
  }

  /** The endpoint's page, with its recent deliveries. */
  async function endpointPage(
    request: FastifyRequest,
    reply: Parameters<Portal['send']>[1],
    code: number,
    endpoint: StoredWebhookEndpoint,
    notice?: Notice,
    recovery?: RecoveryFormState,
  ) {
    const deliveries = (await app.store.listDeliveries(accountId(request), endpoint.id, RECENT_DELIVERIES)) ?? []
    return portal.send(request, reply, code, (c) =>
      webhookPage(c, endpoint, deliveries, RECENT_DELIVERIES, notice, recovery),
    )
  }

  app.get(
    '/webhooks',
    { schema: { hide: true, querystring: WebhooksQuery }, attachValidation: true },
    async (request, reply) => {
      const list = await app.store.listWebhookEndpoints(accountId(request))
      // A hand-edited query is ignored, as keys?revoked= ignores a bad id.
      const deleted = request.validationError ? undefined : request.query.deleted
      const notice: Notice | undefined = deleted
        ? {
            kind: 'success' as const,
            text: html`Endpoint <code>${deleted}</code> is deleted: nothing more is sent to it.`,
          }
        : undefined
      return portal.send(request, reply, 200, (c) => webhooksPage(c, list, MAX_WEBHOOK_ENDPOINTS, policy, { notice }))
    },
  )

  app.post(
    '/webhooks',
    { schema: { hide: true, body: NewWebhookForm }, attachValidation: true, preValidation: portal.checkCsrf },
    async (request, reply) => {
      if (request.validationError) {
        const body = request.body as Record<string, unknown>
        const url = typeof body?.url === 'string' ? body.url : undefined
        const description = typeof body?.description === 'string' ? body.description : undefined
        const error = fieldError(request.validationError.validation)
        return refused(request, reply, 400, { url, description, events: checked(body), error })
      }
      const { description } = request.body
      // A pasted address often brings a space or a line break with it.
      const typed = request.body.url.trim()
      const events = checked(request.body)
      const form = { url: typed, description, events }
      const accepted = webhookUrl(typed, policy)
      if ('problem' in accepted) {
        return refused(request, reply, 400, { ...form, error: { field: 'url', message: accepted.problem } })
      }
      const { url } = accepted
      if (events.length === 0) {
        const error = { field: 'events', message: 'Choose at least one event to send.' }
        return refused(request, reply, 400, { ...form, error })
      }
      const secret = newWebhookSecret()
      const endpoint = await app.store.createWebhookEndpoint({
        accountId: accountId(request),
        url,
        events,
        description,
        secret,
        max: MAX_WEBHOOK_ENDPOINTS,
      })
      if (!endpoint) {
        const message = `You have ${MAX_WEBHOOK_ENDPOINTS} endpoints, the most an account may have. Delete one to add another.`
        return refused(request, reply, 409, { ...form, error: { field: '', message } })
      }
      // Redirect after POST: a reload shows the page again, and adds no second endpoint.
      portal.flash.put(request, reply, { kind: 'webhook-secret', id: endpoint.id, secret, previousUntil: null })
      return reply.redirect(`/portal/webhooks/${endpoint.id}/secret`, 303)
    },
  )

  // The secret just made, by adding the endpoint or rotating its secret: shown this once.
  app.get('/webhooks/:endpointId/secret', { schema: { hide: true, params: WebhookParams } }, async (request, reply) => {
    const { endpointId } = request.params
    const flash = portal.flash.take(request, reply, 'webhook-secret', endpointId)
    const endpoint = flash && (await app.store.getWebhookEndpoint(accountId(request), endpointId))
    if (!flash || !endpoint) return reply.redirect(`/portal/webhooks/${endpointId}?notice=secret-shown`, 303)
    return portal.send(request, reply, 200, (c) =>
      flash.previousUntil === null
        ? newWebhookPage(c, endpoint, flash.secret)
        : rotatedSecretPage(c, endpoint, flash.secret, flash.previousUntil),
    )
  })

  app.get(
    '/webhooks/:endpointId',
    { schema: { hide: true, params: WebhookParams, querystring: EndpointQuery }, attachValidation: true },
    async (request, reply) => {
      // Only a bad query may be ignored: a bad id is a 400, as anywhere in the portal.
      if (request.validationError && request.validationError.validationContext !== 'querystring') {
        throw request.validationError
      }
      const endpoint = await app.store.getWebhookEndpoint(accountId(request), request.params.endpointId)
      if (!endpoint) return portal.send(request, reply, 404, endpointNotFound)
      const query = request.validationError ? {} : request.query
      let notice: Notice | undefined
      if (query.changed === 'enabled' && endpoint.status === 'enabled')
        notice = { kind: 'success', text: 'The endpoint is enabled: events are sent to it again.' }
      else if (query.changed === 'disabled' && endpoint.status === 'disabled')
        notice = { kind: 'success', text: 'The endpoint is disabled: nothing is sent to it until you enable it.' }
      else if (query.resent)
        notice = { kind: 'success', text: html`Delivery <code>${query.resent}</code> is queued to be sent again now.` }
      else if (query.tested)
        notice = {
          kind: 'success',
          text: html`Test event <code>${query.tested}</code> is queued: it is sent to this endpoint now, and shows in the deliveries below.`,
        }
      else if (query.recovered === 0)
        notice = { kind: 'info', text: 'No delivery failed since then: nothing was sent again.' }
      else if (query.recovered !== undefined)
        notice = {
          kind: 'success',
          text: `${query.recovered} failed ${query.recovered === 1 ? 'delivery is' : 'deliveries are'} queued to be sent again now.${query.more ? ` More failed since then: send again for the next ${MAX_RECOVERED}.` : ''}`,
        }
      else if (query.notice === 'secret-shown')
        notice = {
          kind: 'info',
          text: 'A signing secret is shown only once, so it is not shown again. If you did not copy it, rotate the secret to get a new one.',
        }
      return endpointPage(request, reply, 200, endpoint, notice)
    },
  )

  for (const [action, enabled] of [
    ['enable', true],
    ['disable', false],
  ] as const) {
    app.post(`/webhooks/:endpointId/${action}`, buttonForm, async (request, reply) => {
      // Scoped to the signed-in account: another account's endpoint is "not found", and stays as it is.
      const endpoint = await app.store.updateWebhookEndpoint(accountId(request), request.params.endpointId, {
        enabled,
      })
      if (!endpoint) return portal.send(request, reply, 404, endpointNotFound)
      return reply.redirect(`/portal/webhooks/${endpoint.id}?changed=${enabled ? 'enabled' : 'disabled'}`, 303)
    })
  }

  app.post('/webhooks/:endpointId/rotate', buttonForm, async (request, reply) => {
    const secret = newWebhookSecret()
    const previousUntil = new Date(Date.now() + PREVIOUS_SECRET_MS).toISOString()
    const endpoint = await app.store.rotateWebhookSecret(
      accountId(request),
      request.params.endpointId,
      secret,
      previousUntil,
    )
    if (!endpoint) return portal.send(request, reply, 404, endpointNotFound)
    // Redirect after POST: a reload shows the page again, and rotates nothing more.
    portal.flash.put(request, reply, { kind: 'webhook-secret', id: endpoint.id, secret, previousUntil })
    return reply.redirect(`/portal/webhooks/${endpoint.id}/secret`, 303)
  })

  app.get('/webhooks/:endpointId/delete', { schema: { hide: true, params: WebhookParams } }, async (request, reply) => {
    const endpoint = await app.store.getWebhookEndpoint(accountId(request), request.params.endpointId)
    if (!endpoint) return portal.send(request, reply, 404, endpointNotFound)
    return portal.send(request, reply, 200, (c) => deleteWebhookPage(c, endpoint))
  })

  app.post('/webhooks/:endpointId/delete', buttonForm, async (request, reply) => {
    const { endpointId } = request.params
    const deleted = await app.store.deleteWebhookEndpoint(accountId(request), endpointId)
    if (!deleted) return portal.send(request, reply, 404, endpointNotFound)
    return reply.redirect(`/portal/webhooks?deleted=${endpointId}`, 303)
  })

  app.post('/webhooks/:endpointId/test', buttonForm, async (request, reply) => {
    const { endpointId } = request.params
    const event = await app.store.sendTestEvent(accountId(request), endpointId)
    if (!event) {
      const endpoint = await app.store.getWebhookEndpoint(accountId(request), endpointId)
      if (!endpoint) return portal.send(request, reply, 404, endpointNotFound)
      return endpointPage(request, reply, 409, endpoint, disabledNotice('send a test event'))
    }
    // A redirect is no 2xx: the delivery loop is woken here, not by the write's own hook.
    app.webhookDeliveries.nudge()
    return reply.redirect(`/portal/webhooks/${endpointId}?tested=${event.id}`, 303)
  })

  app.post(
    '/webhooks/:endpointId/recover',
    {
      schema: { hide: true, params: WebhookParams, body: RecoverForm },
      attachValidation: true,
      preValidation: portal.checkCsrf,
    },
    async (request, reply) => {
      const { endpointId } = request.params
      const endpoint = await app.store.getWebhookEndpoint(accountId(request), endpointId)
      if (!endpoint) return portal.send(request, reply, 404, endpointNotFound)
      const typed = (request.body as { since?: unknown } | undefined)?.since
      const since = request.validationError ? null : sinceOf(request.body.since)
      if (since === null) {
        const form = { since: typeof typed === 'string' ? typed : undefined, error: FIELD_MESSAGES.since }
        return endpointPage(request, reply, 400, endpoint, undefined, form)
      }
      const recovered = await app.store.recoverDeliveries(accountId(request), endpointId, since, MAX_RECOVERED)
      if (!recovered) return endpointPage(request, reply, 409, endpoint, disabledNotice('send them again'))
      if (recovered.queued > 0) app.webhookDeliveries.nudge()
      const more = recovered.more ? '&more=true' : ''
      return reply.redirect(`/portal/webhooks/${endpointId}?recovered=${recovered.queued}${more}`, 303)
    },
  )

  app.post(
    '/webhooks/:endpointId/deliveries/:deliveryId/redeliver',
    { schema: { hide: true, params: DeliveryParams, body: CsrfOnlyForm }, preValidation: portal.checkCsrf },
    async (request, reply) => {
      const { endpointId, deliveryId } = request.params
      const endpoint = await app.store.getWebhookEndpoint(accountId(request), endpointId)
      if (!endpoint) return portal.send(request, reply, 404, endpointNotFound)
      // The buttons are on the endpoint's page: a delivery of another endpoint (or one long gone
      // from the page) is not this endpoint's to resend.
      const recent = (await app.store.listDeliveries(accountId(request), endpointId, RECENT_DELIVERIES * 5)) ?? []
      if (!recent.some((delivery) => delivery.id === deliveryId)) {
        return portal.send(request, reply, 404, deliveryNotFound)
      }
      if (endpoint.status === 'disabled') {
        return endpointPage(request, reply, 409, endpoint, disabledNotice('send the delivery again'))
      }
      const redelivered = await app.store.redeliver(accountId(request), deliveryId)
      if (!redelivered) return portal.send(request, reply, 404, deliveryNotFound)
      if (!redelivered.resent) {
        const notice = {
          kind: 'error' as const,
          text: 'This delivery is being sent right now: send it again once that attempt has ended.',
        }
        return endpointPage(request, reply, 409, endpoint, notice)
      }
      app.webhookDeliveries.nudge()
      return reply.redirect(`/portal/webhooks/${endpointId}?resent=${redelivered.delivery.id}`, 303)
    },
  )
}

export default webhooks
