/** Rows of the webhook tables as domain values: the same mapping for every database. */
import type { Event } from '../schemas/events.ts'
import type { AnyEventType, EventType, WebhookEndpoint } from '../schemas/webhooks.ts'
import type { FeedEvent, StoredWebhookEndpoint } from './types.ts'

/** The columns both stores select for an endpoint (timestamps already ISO strings). */
export interface EndpointRow {
  id: string
  url: string
  events: string
  description: string
  secret: string
  disabledAt: string | null
  disabledReason: string | null
  createdAt: string
  secretRotatedAt: string | null
}

export const ENDPOINT_COLUMNS = `id, url, events, description, secret, disabled_at AS "disabledAt",
  disabled_reason AS "disabledReason", created_at AS "createdAt", secret_rotated_at AS "secretRotatedAt"`

export function endpointFromRow(row: EndpointRow): StoredWebhookEndpoint {
  return {
    id: row.id,
    url: row.url,
    events: row.events.split(' ') as EventType[],
    description: row.description,
    status: row.disabledAt === null ? 'enabled' : 'disabled',
    disabledReason: row.disabledReason,
    createdAt: row.createdAt,
    secretRotatedAt: row.secretRotatedAt,
    secret: row.secret,
  }
}

export const DELIVERY_COLUMNS = `d.id, e.id AS "eventId", e.type AS "eventType", d.status, d.attempts,
  CASE WHEN d.status = 'pending' THEN d.next_attempt_at END AS "nextAttemptAt", d.last_attempt_at AS "lastAttemptAt",
  d.last_status AS "lastStatus", d.last_error AS "lastError", d.delivered_at AS "deliveredAt", d.created_at AS "createdAt"`

/** An event of the log as both stores select it (with its position, `seq`), its data as stored (JSON). */
export interface EventRow {
  id: string
  type: AnyEventType
  createdAt: string
  data: string
}

export const EVENT_COLUMNS = 'seq, id, type, created_at AS "createdAt", data'

export function eventFromRow(row: EventRow): Event {
  return { id: row.id, type: row.type, createdAt: row.createdAt, data: JSON.parse(row.data) }
}

/** An event of the log as the live stream's reads select it: with its account and its transaction. */
export interface FeedRow extends EventRow {
  /** PostgreSQL's xid8, as text; 0 on SQLite. */
  tx: string | number
  seq: number
  accountId: number
}

/** The columns of a FeedRow but `tx`, which each store selects its own way. */
export const FEED_COLUMNS = `account_id AS "accountId", ${EVENT_COLUMNS}`

export function feedEventFromRow(row: FeedRow): FeedEvent {
  return { event: eventFromRow(row), accountId: row.accountId, position: { tx: BigInt(row.tx), seq: row.seq } }
}

/** An endpoint as its `webhook.test` event carries it: as the API shows it, without its secret. */
export function endpointData(row: EndpointRow): WebhookEndpoint {
  const { secret: _, ...endpoint } = endpointFromRow(row)
  return endpoint
}
