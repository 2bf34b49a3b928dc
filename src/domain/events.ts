/**
 * Webhook events: the body every delivery of an event sends, fixed when the event is stored so that
 * each retry sends the same bytes. Standard Webhooks' payload shape: `type`, `timestamp`, `data`
 * (the resource as the API returns it) (decision 86).
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

/**
 * The `statusReason` of an `undelivered` message: when it was sent no enabled endpoint was subscribed
 * to its event, so it went nowhere (the stores' SQL derives it from the status, decision 104).
 */
export const UNDELIVERED_REASON = 'no enabled endpoint subscribed to message.created'

/** An event carries its resource: subscribing to it reads that resource (decision 97). */
const SCOPE_TO_RECEIVE: Record<EventType, Scope> = {
  'message.created': 'messages:read',
  'order.placed': 'orders:read',
  'order.completed': 'orders:read',
  'order.canceled': 'orders:read',
  'order.expired': 'orders:read',
}

export function scopeToReceive(type: EventType): Scope {
  return SCOPE_TO_RECEIVE[type]
}

export function eventBody(type: EventType, timestamp: string, data: unknown): string {
  return JSON.stringify({ type, timestamp, data })
}

/** Whether an endpoint's stored subscription (event types separated by spaces) includes this type. */
export function subscribes(events: string, type: EventType): boolean {
  return ` ${events} `.includes(` ${type} `)
}
