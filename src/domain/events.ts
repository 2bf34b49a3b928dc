/**
 * Webhook events: the body every delivery of an event sends, fixed when the event is stored so that
 * each retry sends the same bytes. Standard Webhooks' payload shape: `type`, `timestamp`, `data`
 * (the resource as the API returns it) (decision 86). Every event is also kept in the account's
 * event log, read through GET /v1/events (decision 113).
 */
import type { Scope } from './scopes.ts'

/** What an endpoint can subscribe to; each event's `data` is the resource as the API returns it. */
export const EVENT_TYPES = [
  'message.created',
  'order.placed',
  'order.completed',
  'order.canceled',
  'order.expired',
] as const
export type EventType = (typeof EVENT_TYPES)[number]

/** What an endpoint's `events` may list: a type, or a resource's wildcard (`order.*`: its every type). */
export const SUBSCRIPTIONS = [...EVENT_TYPES, 'message.*', 'order.*'] as const
export type Subscription = (typeof SUBSCRIPTIONS)[number]

/** The types a subscription names, wildcards spelled out, each once, in EVENT_TYPES order. */
export function subscribedTypes(names: readonly Subscription[]): EventType[] {
  return namedTypes(EVENT_TYPES, names)
}

/** Those of `types` that `names` name, by themselves or by their resource's wildcard, in their order. */
function namedTypes<T extends string>(types: readonly T[], names: readonly string[]): T[] {
  return types.filter((type) => names.includes(type) || names.includes(`${type.split('.')[0]}.*`))
}

/**
 * The `statusReason` of an `undelivered` message: when it was sent no enabled endpoint was subscribed
 * to its event, so it went nowhere (the stores' SQL derives it from the status, decision 104).
 */
export const UNDELIVERED_REASON = 'no enabled endpoint subscribed to message.created'

/** Sent to one endpoint when asked (POST …/test), never subscribed to: its `data` is the endpoint. */
export const TEST_EVENT_TYPE = 'webhook.test'

/** Every type an event of the log can have: those an endpoint subscribes to, and the test event. */
export const ALL_EVENT_TYPES = [...EVENT_TYPES, TEST_EVENT_TYPE] as const
export type AnyEventType = (typeof ALL_EVENT_TYPES)[number]

/** An event carries its resource: subscribing to it, or reading it, reads that resource (decision 97). */
const SCOPE_TO_RECEIVE: Record<AnyEventType, Scope> = {
  'message.created': 'messages:read',
  'order.placed': 'orders:read',
  'order.completed': 'orders:read',
  'order.canceled': 'orders:read',
  'order.expired': 'orders:read',
  'webhook.test': 'webhooks:read',
}

export function scopeToReceive(type: AnyEventType): Scope {
  return SCOPE_TO_RECEIVE[type]
}

export function eventBody(type: AnyEventType, timestamp: string, data: unknown): string {
  return JSON.stringify({ type, timestamp, data })
}

/** Whether an endpoint's stored subscription (event types separated by spaces) includes this type. */
export function subscribes(events: string, type: EventType): boolean {
  return ` ${events} `.includes(` ${type} `)
}

/** `order.*` and the like: every type of one resource. */
export const WILDCARDS = [...new Set(ALL_EVENT_TYPES.map((type) => `${type.split('.')[0]}.*`))]

/** The names a type filter may list, separated by commas: a type, or a resource's wildcard. */
export const EVENT_TYPE_FILTERS: readonly string[] = [...ALL_EVENT_TYPES, ...WILDCARDS]

/**
 * The types a filter such as `order.*, message.created` names, each once, in ALL_EVENT_TYPES order.
 * The filter's syntax is the schema's (a pattern of EVENT_TYPE_FILTERS, spaces allowed after a
 * comma, as people write lists): any other name is ignored.
 */
export function filteredTypes(filter: string): AnyEventType[] {
  return namedTypes(ALL_EVENT_TYPES, filterNames(filter))
}

/** The names a filter lists, separated by commas, the spaces around each dropped. */
export function filterNames(filter: string): string[] {
  return filter.split(',').map((name) => name.trim())
}
