/**
 * Webhook endpoints (experimental, feature `webhooks`): where an account's events are POSTed,
 * signed with the endpoint's secret (Standard Webhooks). The secret is shown twice only: in the
 * answer that creates the endpoint and in the one that rotates it. The deliveries themselves are
 * made by the delivery loop (src/plugins/webhook-delivery.ts), nudged here when one is due at once.
 */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { FastifyRequest } from 'fastify'
import { scopeToReceive, subscribedTypes } from '../domain/events.ts'
import { ApiError, type ErrorCode } from '../errors.ts'
import { requestOrigin } from '../http/host.ts'
import { apiRoutes } from '../plugins/auth.ts'
import { insufficientScope } from '../plugins/scopes.ts'
import {
  createdHeaders,
  DEFAULT_PAGE_SIZE,
  type ErrorStatus,
  emptyResponse,
  errorResponse,
  errorResponses,
  IdempotencyHeadersSchema,
  jsonResponse,
  NoQuerySchema,
  RATE_LIMIT_HEADERS,
} from '../schemas/common.ts'
import { EventSchema } from '../schemas/events.ts'
import { sentId } from '../schemas/validation.ts'
import {
  CreatedWebhookEndpointSchema,
  DeliveriesSchema,
  DeliveryParamsSchema,
  DeliverySchema,
  type EventType,
  ListDeliveriesQuerySchema,
  MAX_RECOVERED,
  MAX_WEBHOOK_ENDPOINTS,
  NewWebhookEndpointSchema,
  RecoverDeliveriesSchema,
  RecoverySchema,
  RotatedWebhookEndpointSchema,
  WEBHOOKS_STABILITY,
  type WebhookEndpoint,
  WebhookEndpointParamsSchema,
  WebhookEndpointPatchSchema,
  WebhookEndpointSchema,
  WebhookEndpointsSchema,
} from '../schemas/webhooks.ts'
import type { StoredWebhookEndpoint, WebhookEndpointChanges } from '../store/types.ts'
import { newWebhookSecret } from '../webhooks/signing.ts'
import { type UrlPolicy, webhookUrl } from '../webhooks/url-policy.ts'

const stability = WEBHOOKS_STABILITY
const tags = ['webhooks']
/** How long a rotated-out secret keeps signing beside the new one. */
export const PREVIOUS_SECRET_MS = 24 * 3600 * 1000
/** Deliveries a redelivery may name: those listWebhookDeliveries can show. */
const REDELIVERABLE = 100

/** An error response documented with the body of `code`. */
const documented = (code: ErrorCode, description: string) => errorResponse(code, description, RATE_LIMIT_HEADERS)
/** The error responses of an operation on one endpoint: its 404 says that the account has no such endpoint. */
const endpointErrors = <const S extends readonly ErrorStatus[]>(...statuses: S) => ({
  ...errorResponses(...statuses),
  404: documented('webhook_endpoint_not_found', "`webhook_endpoint_not_found`: no such endpoint of this account's."),
})
const INVALID = {
  400: documented(
    'invalid_webhook_url',
    'The request is invalid: `invalid_webhook_url` (the message says why the URL is refused), or `validation_failed`.',
  ),
}

/** What every webhook operation's schema starts with: its tag, and no query (unless it names one). */
const OPERATION = { tags, querystring: NoQuerySchema }
/** An operation on one of the account's endpoints: the endpoint's id in the path. */
const ON_ENDPOINT = { ...OPERATION, params: WebhookEndpointParamsSchema }

const webhooks: FastifyPluginAsyncTypebox<{ urlPolicy: UrlPolicy }> = async (app, { urlPolicy }) => {
  if (!app.offers(stability)) return

  /** Refuses a subscription to events whose resources the key may not read (decision 97). */
  function checkEvents(granted: ReadonlySet<string> | null, events: EventType[] | undefined): void {
    if (granted === null || events === undefined) return
    for (const type of events) {
      const scope = scopeToReceive(type)
      if (granted.has(scope)) continue
      throw insufficientScope(scope, `Receiving ${type} events takes the scope ${scope}, which this API key lacks.`)
    }
  }

  /** The config of a change to one endpoint: a condition on an endpoint that is not there leaves its 404 (§13.2.1). */
  const endpointWrite = {
    scope: 'webhooks:write',
    stability,
    exists: async ({ caller, params }: FastifyRequest) =>
      (await app.store.getWebhookEndpoint(caller.accountId, (params as { endpointId: string }).endpointId)) !== null,
  } as const

  /** Whether the delivery is among the endpoint's REDELIVERABLE most recent (the store finds one by the account alone). */
  async function isRecentDelivery(accountId: number, endpointId: string, deliveryId: string): Promise<boolean> {
    const recent = await app.store.listDeliveries(accountId, endpointId, REDELIVERABLE)
    return recent?.some((delivery) => delivery.id === deliveryId) ?? false
  }

  /** The URL as events will be sent to it (webhookUrl); refuses one they could never go to, saying why. */
  function acceptedUrl<U extends string | undefined>(url: U): U {
    if (url === undefined) return url
    const accepted = webhookUrl(url, urlPolicy)
    if ('problem' in accepted) throw new ApiError('invalid_webhook_url', accepted.problem)
    return accepted.url as U
  }

  app.post(
    '/webhook-endpoints',
    {
      schema: {
        ...OPERATION,
        operationId: 'createWebhookEndpoint',
        summary: 'Add a webhook endpoint',
        description:
          `Subscribes a URL to event types. The answer holds the endpoint's signing secret, shown only here ` +
          `(and on rotation). An account has at most ${MAX_WEBHOOK_ENDPOINTS} endpoints. Receiving an event also ` +
          'takes the read scope of what it carries: `messages:read` for `message.created`, `orders:read` for `order.*`.',
        headers: IdempotencyHeadersSchema,
        body: NewWebhookEndpointSchema,
        response: {
          201: jsonResponse(
            'The endpoint, with its signing secret.',
            CreatedWebhookEndpointSchema,
            createdHeaders('endpoint'),
          ),
          ...errorResponses(401, 413, 415, 422, 429, 500, 503),
          ...INVALID,
          409: documented(
            'webhook_endpoint_limit',
            `\`webhook_endpoint_limit\`: the account has ${MAX_WEBHOOK_ENDPOINTS} endpoints already; ` +
              '`idempotency_conflict`: a request with this Idempotency-Key is still in progress.',
          ),
        },
      },
      config: { scope: 'webhooks:write', stability, replayLocation: endpointLocation },
      ...app.idempotent,
    },
    async function createWebhookEndpoint(request, reply) {
      const { description = '' } = request.body
      const url = acceptedUrl(request.body.url)
      const events = subscribedTypes(request.body.events)
      checkEvents(request.caller.scopes, events)
      const { accountId } = request.caller
      const endpoint = { accountId, url, events, description, secret: newWebhookSecret(), max: MAX_WEBHOOK_ENDPOINTS }
      const created = await app.store.createWebhookEndpoint(endpoint, request.idempotency ?? undefined)
      if (!created) {
        throw new ApiError(
          'webhook_endpoint_limit',
          `This account has ${MAX_WEBHOOK_ENDPOINTS} webhook endpoints, the most it may have: delete one first.`,
        )
      }
      return reply.code(201).header('location', endpointLocation(created, request)).send(created)
    },
  )

  app.get(
    '/webhook-endpoints',
    {
      schema: {
        ...OPERATION,
        operationId: 'listWebhookEndpoints',
        summary: "List the account's webhook endpoints",
        description: `All of them (at most ${MAX_WEBHOOK_ENDPOINTS}), newest first, without their secrets.`,
        response: {
          200: jsonResponse("The account's endpoints, newest first.", WebhookEndpointsSchema, RATE_LIMIT_HEADERS),
          ...errorResponses(400, 401, 429, 500, 503),
        },
      },
      config: { scope: 'webhooks:read', stability },
    },
    async function listWebhookEndpoints(request) {
      return (await app.store.listWebhookEndpoints(request.caller.accountId)).map(withoutSecret)
    },
  )

  app.get(
    '/webhook-endpoints/:endpointId',
    {
      schema: {
        ...ON_ENDPOINT,
        operationId: 'getWebhookEndpoint',
        summary: 'Get a webhook endpoint',
        description: "One of the account's endpoints, without its secret; another account's is 404.",
        response: {
          200: jsonResponse('The endpoint.', WebhookEndpointSchema, RATE_LIMIT_HEADERS),
          ...endpointErrors(400, 401, 404, 429, 500, 503),
        },
      },
      config: { scope: 'webhooks:read', stability },
    },
    async function getWebhookEndpoint({ caller, params: { endpointId } }) {
      return withoutSecret(found(await app.store.getWebhookEndpoint(caller.accountId, endpointId), endpointId))
    },
  )

  app.patch(
    '/webhook-endpoints/:endpointId',
    {
      schema: {
        ...ON_ENDPOINT,
        operationId: 'updateWebhookEndpoint',
        summary: 'Change a webhook endpoint',
        description:
          'Changes `url`, `events`, `description` or `status` with a JSON Merge Patch (RFC 7396): the fields sent ' +
          'replace their values, the others stay. `{"status":"disabled"}` stops deliveries (the pending ones ' +
          'fail); `{"status":"enabled"}` resumes them, also after a `410 Gone` disabled the endpoint. Changing ' +
          '`url` or `events`, or enabling, takes the read scope of each event the endpoint then receives.',
        consumes: ['application/merge-patch+json', 'application/json'],
        body: WebhookEndpointPatchSchema,
        response: {
          200: jsonResponse('The endpoint as it is now.', WebhookEndpointSchema, RATE_LIMIT_HEADERS),
          ...endpointErrors(401, 404, 413, 415, 429, 500, 503),
          ...INVALID,
        },
      },
      config: endpointWrite,
    },
    async function updateWebhookEndpoint(request) {
      const { endpointId } = request.params
      const { description, status } = request.body
      const url = acceptedUrl(request.body.url)
      const events = request.body.events && subscribedTypes(request.body.events)
      // Where the events go, or which: judged on the subscription the endpoint will have (decision 97).
      if (url !== undefined || events !== undefined || status === 'enabled') {
        const { accountId } = request.caller
        const receives = events ?? found(await app.store.getWebhookEndpoint(accountId, endpointId), endpointId).events
        checkEvents(request.caller.scopes, receives)
      }
      const changes: WebhookEndpointChanges = {
        ...(url !== undefined && { url }),
        ...(events !== undefined && { events }),
        ...(description !== undefined && { description }),
        ...(status !== undefined && { enabled: status === 'enabled' }),
      }
      const updated = await app.store.updateWebhookEndpoint(request.caller.accountId, endpointId, changes)
      return withoutSecret(found(updated, endpointId))
    },
  )

  app.delete(
    '/webhook-endpoints/:endpointId',
    {
      schema: {
        ...ON_ENDPOINT,
        operationId: 'deleteWebhookEndpoint',
        summary: 'Delete a webhook endpoint',
        description: 'Nothing more is sent to it: its pending deliveries fail. Its id is not used again.',
        response: {
          204: emptyResponse('Deleted. No content.', RATE_LIMIT_HEADERS),
          ...endpointErrors(400, 401, 404, 429, 500, 503),
        },
      },
      config: endpointWrite,
    },
    async function deleteWebhookEndpoint({ caller, params: { endpointId } }, reply) {
      if (!(await app.store.deleteWebhookEndpoint(caller.accountId, endpointId))) {
        throw endpointNotFound(endpointId)
      }
      return reply.code(204).send(null)
    },
  )

  app.post(
    '/webhook-endpoints/:endpointId/rotate-secret',
    {
      schema: {
        ...ON_ENDPOINT,
        operationId: 'rotateWebhookSecret',
        summary: "Rotate a webhook endpoint's signing secret",
        description:
          'Makes a new signing secret, shown only in this answer. For the next 24 hours each delivery is signed ' +
          'with both the new and the old secret (two `v1,…` signatures), so that a receiver may switch at its own ' +
          'pace; then with the new one alone. Rotating again ends the older secret at once.',
        response: {
          200: jsonResponse('The endpoint, with its new secret.', RotatedWebhookEndpointSchema, RATE_LIMIT_HEADERS),
          ...endpointErrors(400, 401, 404, 429, 500, 503),
        },
      },
      config: endpointWrite,
    },
    async function rotateWebhookSecret({ caller, params: { endpointId } }) {
      const previousSecretExpiresAt = new Date(Date.now() + PREVIOUS_SECRET_MS).toISOString()
      const secret = newWebhookSecret()
      const rotated = await app.store.rotateWebhookSecret(caller.accountId, endpointId, secret, previousSecretExpiresAt)
      return { ...found(rotated, endpointId), previousSecretExpiresAt }
    },
  )

  app.get(
    '/webhook-endpoints/:endpointId/deliveries',
    {
      schema: {
        ...ON_ENDPOINT,
        operationId: 'listWebhookDeliveries',
        summary: "List a webhook endpoint's recent deliveries",
        description:
          'The most recent `limit` deliveries, newest first: one page only, with no cursor (older ones are not ' +
          'listed). Each says how its attempts went.',
        querystring: ListDeliveriesQuerySchema,
        response: {
          200: jsonResponse('The most recent deliveries, newest first.', DeliveriesSchema, RATE_LIMIT_HEADERS),
          ...endpointErrors(400, 401, 404, 429, 500, 503),
        },
      },
      config: { scope: 'webhooks:read', stability },
    },
    async function listWebhookDeliveries({ caller, params: { endpointId }, query: { limit = DEFAULT_PAGE_SIZE } }) {
      return found(await app.store.listDeliveries(caller.accountId, endpointId, limit), endpointId)
    },
  )

  app.post(
    '/webhook-endpoints/:endpointId/deliveries/:deliveryId/redeliver',
    {
      schema: {
        ...OPERATION,
        operationId: 'redeliverWebhook',
        summary: 'Send a delivery again',
        description:
          `Sends the event again, now, with the same \`webhook-id\` and body, and retries it as a new delivery ` +
          `would be; a delivered or failed one included. Any of the ${REDELIVERABLE} most recent deliveries ` +
          'of an enabled endpoint, and not while an attempt of it is under way (it is never sent twice at once).',
        params: DeliveryParamsSchema,
        response: {
          202: jsonResponse('Accepted: the delivery is pending again, due now.', DeliverySchema, RATE_LIMIT_HEADERS),
          ...errorResponses(400, 401, 429, 500, 503),
          404: documented(
            'delivery_not_found',
            '`webhook_endpoint_not_found`, or `delivery_not_found`: no such delivery among its most recent.',
          ),
          409: documented(
            'webhook_endpoint_disabled',
            '`webhook_endpoint_disabled`: enable the endpoint first; or `delivery_in_progress`: an attempt is under way.',
          ),
        },
      },
      config: {
        ...endpointWrite,
        // The target is the delivery: one that is not among the endpoint's recent ones is 404 too.
        exists: ({ caller, params }: FastifyRequest) => {
          const { endpointId, deliveryId } = params as { endpointId: string; deliveryId: string }
          return isRecentDelivery(caller.accountId, endpointId, deliveryId)
        },
      },
    },
    async function redeliverWebhook(request, reply) {
      const { endpointId, deliveryId } = request.params
      const { accountId } = request.caller
      const endpoint = found(await app.store.getWebhookEndpoint(accountId, endpointId), endpointId)
      if (!(await isRecentDelivery(accountId, endpointId, deliveryId))) throw deliveryNotFound(deliveryId)
      if (endpoint.status === 'disabled') {
        throw new ApiError('webhook_endpoint_disabled', `Webhook endpoint ${endpointId} is disabled: enable it first.`)
      }
      const redelivered = await app.store.redeliver(accountId, deliveryId)
      // Found above: the endpoint was disabled or deleted since.
      if (!redelivered) throw await notSendable(accountId, endpointId)
      if (!redelivered.resent) {
        throw new ApiError(
          'delivery_in_progress',
          `Delivery ${deliveryId} is being attempted right now: send it again once that attempt has ended.`,
        )
      }
      app.webhookDeliveries.nudge()
      return reply.code(202).send(redelivered.delivery)
    },
  )

  /** Why the store sent nothing to an endpoint: the account has no such endpoint, or it is disabled. */
  async function notSendable(accountId: number, endpointId: string): Promise<ApiError> {
    if ((await app.store.getWebhookEndpoint(accountId, endpointId)) === null) return endpointNotFound(endpointId)
    return new ApiError('webhook_endpoint_disabled', `Webhook endpoint ${endpointId} is disabled: enable it first.`)
  }
  const DISABLED = {
    409: documented('webhook_endpoint_disabled', '`webhook_endpoint_disabled`: enable the endpoint first.'),
  }

  app.post(
    '/webhook-endpoints/:endpointId/test',
    {
      schema: {
        ...ON_ENDPOINT,
        operationId: 'sendWebhookTestEvent',
        summary: 'Send a test event to a webhook endpoint',
        description:
          'Queues a `webhook.test` event to this endpoint alone, whatever it subscribes to, to try a receiver: ' +
          "it is signed, sent and retried like any event, and listed in the endpoint's deliveries and in " +
          '`GET /v1/events`. Its `data` is the endpoint as `getWebhookEndpoint` shows it. Not to a disabled endpoint.',
        response: {
          202: jsonResponse('Accepted: the event, queued to the endpoint, due now.', EventSchema, RATE_LIMIT_HEADERS),
          ...endpointErrors(400, 401, 404, 429, 500, 503),
          ...DISABLED,
        },
      },
      config: endpointWrite,
    },
    async function sendWebhookTestEvent({ caller, params: { endpointId } }, reply) {
      const event = await app.store.sendTestEvent(caller.accountId, endpointId)
      if (!event) throw await notSendable(caller.accountId, endpointId)
      return reply.code(202).send(event)
    },
  )

  app.post(
    '/webhook-endpoints/:endpointId/recover',
    {
      schema: {
        ...ON_ENDPOINT,
        operationId: 'recoverWebhookDeliveries',
        summary: "Send a webhook endpoint's failed deliveries again",
        description:
          'After an outage of the receiver: makes the failed deliveries of this endpoint queued at or after `since` ' +
          'pending again, due now, each retried as a new delivery would be (the same `webhook-id` and body). At most ' +
          `the oldest ${MAX_RECOVERED} per call: when \`more\` is true, call again for the rest. Not for a disabled ` +
          'endpoint: enable it first.',
        body: RecoverDeliveriesSchema,
        response: {
          202: jsonResponse('Accepted: how many deliveries are pending again.', RecoverySchema, RATE_LIMIT_HEADERS),
          ...endpointErrors(400, 401, 404, 413, 415, 429, 500, 503),
          ...DISABLED,
        },
      },
      config: endpointWrite,
    },
    async function recoverWebhookDeliveries({ caller, params: { endpointId }, body }, reply) {
      const since = new Date(body.since).toISOString()
      const recovered = await app.store.recoverDeliveries(caller.accountId, endpointId, since, MAX_RECOVERED)
      if (!recovered) throw await notSendable(caller.accountId, endpointId)
      return reply.code(202).send(recovered)
    },
  )
}

function found<T>(value: T | null, endpointId: string): T {
  if (value === null) throw endpointNotFound(endpointId)
  return value
}

function withoutSecret({ secret: _, ...endpoint }: StoredWebhookEndpoint): WebhookEndpoint {
  return endpoint
}

function endpointNotFound(endpointId: string): ApiError {
  return new ApiError('webhook_endpoint_not_found', `No webhook endpoint ${sentId(endpointId)} for this account.`)
}

function deliveryNotFound(deliveryId: string): ApiError {
  return new ApiError('delivery_not_found', `No delivery ${sentId(deliveryId)} for this webhook endpoint.`)
}

function endpointLocation(endpoint: { id: string }, request: FastifyRequest): string {
  return `${requestOrigin(request)}/v1/webhook-endpoints/${endpoint.id}`
}

export default apiRoutes(webhooks, 'webhooks', ['store', 'idempotency', 'stability', 'webhook-delivery'])
