/**
 * The scale-out store: PostgreSQL through `pg`, for several stateless instances on one database.
 *
 * - A bounded pool; every query is a named prepared statement and has a deadline, so nothing waits
 *   on a dead database for longer than `timeoutMs`. A connection that failed is discarded.
 * - Connection failures become DatabaseUnavailableError (503). Reads are retried once on a fresh
 *   connection (after a restart the pool may still hold dead ones); writes are never retried here,
 *   since a write whose answer was lost may have committed.
 * - Migrations run in one transaction under an advisory lock, so instances starting together
 *   apply them once.
 */
import type { Pool, PoolClient, QueryConfig } from 'pg'
import { randomId } from '../domain/api-keys.ts'
import { eventBody, subscribes, TEST_EVENT_TYPE, UNDELIVERED_REASON } from '../domain/events.ts'
import type { Event } from '../schemas/events.ts'
import type { Message } from '../schemas/messages.ts'
import type { Inventory, Order, OrderStatus } from '../schemas/orders.ts'
import { DEFAULT_PET_STATUS, type NewPet, type Pet, type PetStatus } from '../schemas/pets.ts'
import { type Delivery, type DeliveryStatus, EVENT_TYPES, type EventType, type Recovery } from '../schemas/webhooks.ts'
import { FEED_COLUMNS, type FeedRow, feedEventFromRow } from './feed-rows.ts'
import { type IdempotencyRow, idempotencyState } from './idempotency.ts'
import { latestMigration, newerThanCode, readMigrations } from './migrations.ts'
import {
  type Account,
  type AccountEventsOptions,
  type ApiKey,
  type ClaimedDelivery,
  DatabaseNotSetUpError,
  DatabaseUnavailableError,
  type DeliveryOutcome,
  type EventFeedPage,
  type EventPage,
  type FeedEvent,
  type FeedPosition,
  type IdempotencyClaim,
  type IdempotencyRef,
  type IdempotencyState,
  type ListEventsOptions,
  type ListMessagesOptions,
  type ListOrdersOptions,
  type ListPetsOptions,
  type MessagePage,
  type NewApiKey,
  type NewSession,
  type NewWebhookEndpoint,
  type OrderPage,
  type OutboxStats,
  PET_FEED_KEPT,
  PET_FEED_PAGE,
  type PetChange,
  type PetChanges,
  type PetFeed,
  type PetPage,
  type PlaceOrder,
  type PlaceOrderResult,
  type Redelivery,
  type Session,
  STREAM_POSITIONS_SECRET,
  type Store,
  type StoredWebhookEndpoint,
  type StoreStats,
  type TransitionResult,
  type UpdatePetResult,
  type VersionedPet,
  type WebhookEndpointChanges,
} from './types.ts'
import {
  DELIVERY_COLUMNS,
  ENDPOINT_COLUMNS,
  type EndpointRow,
  EVENT_COLUMNS,
  type EventRow,
  endpointData,
  endpointFromRow,
  eventFromRow,
} from './webhook-rows.ts'

export interface PostgresOptions {
  databaseUrl: string
  /** Most connections this process opens. */
  poolSize: number
  /** Deadline for getting a connection, and for each statement. */
  timeoutMs: number
  /** Refuse a schema with no migrations applied instead of migrating it (StoreOptions). */
  existing?: boolean
  /** The active trace to keep with an event (StoreOptions). */
  traceparent?: () => string | null
}

const PET_COLUMNS = 'id, name, category_id AS "categoryId", status'
const KEY_COLUMNS = `id, account_id AS "accountId", name, prefix, created_at AS "createdAt", expires_at AS "expiresAt",
  revoked_at AS "revokedAt", last_used_at AS "lastUsedAt", scopes`
// statusReason follows from the status: only `undelivered` has one (decision 104).
const MESSAGE_COLUMNS = `id, body AS message, status,
  CASE WHEN status = 'undelivered' THEN '${UNDELIVERED_REASON}' END AS "statusReason",
  created_at AS "createdAt", attempts, delivered_at AS "deliveredAt"`
const ORDER_COLUMNS = `id, pet_id AS "petId", status, created_at AS "createdAt", expires_at AS "expiresAt",
  updated_at AS "updatedAt"`

// Node's socket errors and PostgreSQL's connection, shutdown and overload classes (08, 57P, 53300).
const UNAVAILABLE_CODES =
  /^(ECONNREFUSED|ECONNRESET|ETIMEDOUT|EPIPE|ENOTFOUND|EHOSTUNREACH|EAI_AGAIN|08...|57P0.|53300)$/
// pg's and pg-pool's own timeouts, and the server's statement_timeout; not any message naming a
// timeout (a bad `statement_timeout` setting is a configuration error, not an outage).
const UNAVAILABLE_MESSAGES =
  /timeout (exceeded|expired)|read timeout|connection timeout|statement timeout|terminated|Connection ended|not queryable|ended unexpectedly|Client was closed/i

/**
 * A pooled connection the server closed (terminated backends, a restart): it fails its next
 * statement and leaves the pool, and the other idle connections may all be in the same state.
 */
const STALE_CODES = /^(57P01|57P02|ECONNRESET|EPIPE)$/
const STALE_MESSAGES = /terminating connection|terminated unexpectedly|not queryable|ended unexpectedly/i

function isStaleConnection(error: unknown): boolean {
  const { code, message } = (error ?? {}) as { code?: unknown; message?: unknown }
  return (
    (typeof code === 'string' && STALE_CODES.test(code)) ||
    (typeof message === 'string' && STALE_MESSAGES.test(message))
  )
}

function isUnavailable(error: unknown): boolean {
  const { code, message } = (error ?? {}) as { code?: unknown; message?: unknown }
  return (
    (typeof code === 'string' && UNAVAILABLE_CODES.test(code)) ||
    (typeof message === 'string' && UNAVAILABLE_MESSAGES.test(message))
  )
}

/** The bound of the event feed's reads: a CTE `bound(xid)`, 32-bit backend_xid compared modulo 2^32. */
const FEED_BOUND = `WITH bound AS (SELECT coalesce(min(x), pg_snapshot_xmax(pg_current_snapshot())) AS xid
  FROM pg_snapshot_xip(pg_current_snapshot()) AS x
  WHERE x::text::numeric % 4294967296 NOT IN (SELECT backend_xid::text::numeric FROM pg_stat_activity
    WHERE backend_xid IS NOT NULL AND datname IS DISTINCT FROM current_database()))`

const SQL = {
  ping: 'SELECT 1',
  insertPet: `INSERT INTO pets (name, category_id, status) VALUES ($1, $2, $3) RETURNING ${PET_COLUMNS}`,
  getPet: `SELECT ${PET_COLUMNS} FROM pets WHERE id = $1`,
  listPets: `SELECT ${PET_COLUMNS} FROM pets WHERE id > $1 ORDER BY id LIMIT $2`,
  // ORDER BY status, id (the same order, since status is fixed) matches pets_status_id exactly, so that
  // the generic plan of this prepared statement walks that index for any status, rare or common,
  // instead of scanning the primary key and filtering (1.8 ms instead of 0.03 ms at 30k pets).
  listPetsByStatus: `SELECT ${PET_COLUMNS} FROM pets WHERE status = $1 AND id > $2 ORDER BY status, id LIMIT $3`,
  getVersionedPet: `SELECT ${PET_COLUMNS}, version FROM pets WHERE id = $1`,
  // Every write that moves an order and its pet locks the order's row, then the pet's (updatePet,
  // placeOrder, transitionOrder, the sweep): one order of locks, so none waits on another in a cycle.
  lockPet: `SELECT ${PET_COLUMNS}, version FROM pets WHERE id = $1 FOR UPDATE`,
  updatePet: `UPDATE pets SET name = $1, category_id = $2, status = $3, version = version + 1 WHERE id = $4
    RETURNING ${PET_COLUMNS}, version`,
  inventory: 'SELECT status, count(*)::int AS count FROM pets GROUP BY status',
  orderCounts: 'SELECT status, count(*)::int AS count FROM orders GROUP BY status',
  // The guarded updates that make one winner: only an available pet is held, only a held one freed.
  holdPet:
    "UPDATE pets SET status = 'pending', version = version + 1 WHERE id = $1 AND status = 'available' RETURNING id",
  releasePet: "UPDATE pets SET status = $1, version = version + 1 WHERE id = $2 AND status = 'pending'",
  petExists: 'SELECT 1 FROM pets WHERE id = $1',
  placedOrderFor: "SELECT 1 FROM orders WHERE pet_id = $1 AND status = 'placed'",
  insertOrder: `INSERT INTO orders (id, account_id, pet_id, status, created_at, expires_at, updated_at)
    VALUES ($1, $2, $3, 'placed', now(), now() + $4::float8 * interval '1 millisecond', now()) RETURNING ${ORDER_COLUMNS}`,
  getOrder: `SELECT ${ORDER_COLUMNS} FROM orders WHERE id = $1 AND account_id = $2`,
  lockOrder: `SELECT seq, ${ORDER_COLUMNS}, expires_at <= now() AS due FROM orders
    WHERE id = $1 AND account_id = $2 FOR UPDATE`,
  listOrders: `SELECT seq, ${ORDER_COLUMNS} FROM orders WHERE account_id = $1 AND seq < $2
    AND ($3::text IS NULL OR status = $3) AND ($4::bigint IS NULL OR pet_id = $4) ORDER BY seq DESC LIMIT $5`,
  setOrderStatus: `UPDATE orders SET status = $1, updated_at = now() WHERE seq = $2 AND status = 'placed'
    RETURNING ${ORDER_COLUMNS}`,
  // With the account, whose `order.expired` event this is (not always the caller's, in placeOrder).
  expirePetOrder: `UPDATE orders SET status = 'expired', updated_at = now()
    WHERE pet_id = $1 AND status = 'placed' AND expires_at <= now() RETURNING ${ORDER_COLUMNS}, account_id AS "accountId"`,
  // Any instance may sweep: SKIP LOCKED lets two sweeps share the work, each order expired once.
  expireOrders: `WITH due AS (
      SELECT seq FROM orders WHERE status = 'placed' AND expires_at <= $1 ORDER BY expires_at LIMIT 1000
      FOR UPDATE SKIP LOCKED),
    expired AS (UPDATE orders o SET status = 'expired', updated_at = now() FROM due WHERE o.seq = due.seq
      RETURNING o.id, o.account_id, o.pet_id, o.status, o.created_at, o.expires_at, o.updated_at),
    freed AS (UPDATE pets p SET status = 'available', version = version + 1 FROM expired e
      WHERE p.id = e.pet_id AND p.status = 'pending')
    SELECT id, pet_id AS "petId", status, created_at AS "createdAt", expires_at AS "expiresAt",
      updated_at AS "updatedAt", account_id AS "accountId" FROM expired`,
  insertAccount: `INSERT INTO accounts (email, password_hash, created_at) VALUES ($1, $2, now())
    ON CONFLICT (email) DO NOTHING RETURNING id, email, created_at AS "createdAt"`,
  getAccountByEmail: 'SELECT id, email, created_at AS "createdAt" FROM accounts WHERE email = $1',
  getAccountLogin:
    'SELECT id, email, created_at AS "createdAt", password_hash AS "passwordHash" FROM accounts WHERE email = $1',
  // setAccountPassword runs these two in one transaction, as separate statements: under READ
  // COMMITTED the DELETE then sees a session committed while the UPDATE waited for the row lock.
  setPassword: 'UPDATE accounts SET password_hash = $1 WHERE id = $2 RETURNING id',
  deleteAccountSessions: 'DELETE FROM sessions WHERE account_id = $1',
  // FOR SHARE: a password being set makes this wait, then re-check the hash on the new row.
  insertSession: `INSERT INTO sessions (id, account_id, created_at, expires_at)
    SELECT $1, id, now(), $3 FROM accounts WHERE id = $2 AND password_hash IS NOT DISTINCT FROM $4 FOR SHARE`,
  getSession: `SELECT s.account_id AS "accountId", a.email, s.expires_at AS "expiresAt"
    FROM sessions s JOIN accounts a ON a.id = s.account_id WHERE s.id = $1 AND s.expires_at > now()`,
  deleteSession: 'DELETE FROM sessions WHERE id = $1',
  insertKey: `INSERT INTO api_keys (id, account_id, name, prefix, key_hash, created_at, expires_at, scopes)
    VALUES ($1, $2, $3, $4, $5, now(), $6, $7) RETURNING ${KEY_COLUMNS}`,
  listKeys: `SELECT ${KEY_COLUMNS} FROM api_keys WHERE account_id = $1 ORDER BY created_at DESC, id`,
  getKeyByHash: `SELECT ${KEY_COLUMNS} FROM api_keys WHERE key_hash = $1`,
  revokeKey: `UPDATE api_keys SET revoked_at = coalesce(revoked_at, now())
    WHERE id = $1 AND ($2::bigint IS NULL OR account_id = $2) RETURNING ${KEY_COLUMNS}`,
  touchKeys: `UPDATE api_keys k SET last_used_at = u.at FROM unnest($1::text[], $2::timestamptz[]) AS u(id, at)
    WHERE k.id = u.id AND (k.last_used_at IS NULL OR k.last_used_at < u.at)`,
  // fanout starts at 0: #emit sets it, in the same transaction, to the deliveries it made.
  insertMessage: `INSERT INTO messages (id, account_id, body, status, created_at) VALUES ($1, $2, $3, 'queued', now())
    RETURNING seq, ${MESSAGE_COLUMNS}`,
  getMessage: `SELECT ${MESSAGE_COLUMNS} FROM messages WHERE id = $1 AND account_id = $2`,
  listMessages: `SELECT seq, ${MESSAGE_COLUMNS} FROM messages WHERE account_id = $1 AND seq < $2
    AND ($3::text IS NULL OR status = $3) ORDER BY seq DESC LIMIT $4`,
  // Messages whose deliveries all ended: FOR UPDATE first, so that two transactions failing the last
  // two pending deliveries of one message take turns, and the second (a new snapshot under READ
  // COMMITTED) sees the first's delivery failed. recordDelivery's attempts update takes the same lock.
  lockMessages: 'SELECT seq FROM messages WHERE seq = ANY($1::bigint[]) ORDER BY seq FOR UPDATE',
  failFinishedMessages: `UPDATE messages m SET status = 'failed' WHERE m.seq = ANY($1::bigint[]) AND m.status = 'queued'
    AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.message_seq = m.seq AND d.status = 'pending')`,
  countAttempt: `UPDATE messages SET attempts = attempts + 1,
    status = CASE WHEN $2 THEN 'delivered' ELSE status END,
    delivered_at = CASE WHEN $2 THEN coalesce(delivered_at, $3) ELSE delivered_at END WHERE seq = $1`,
  requeueMessage: "UPDATE messages SET status = 'queued' WHERE seq = $1 AND status = 'failed'",
  // The subscriber lookup of #emit. FOR SHARE: an endpoint being deleted or disabled waits for this
  // transaction, and then fails the deliveries it made; one deleted or disabled first is not seen.
  activeEndpoints: `SELECT seq, events FROM webhook_endpoints
    WHERE account_id = $1 AND deleted_at IS NULL AND disabled_at IS NULL ORDER BY seq FOR SHARE`,
  // The event in the log ($9 its data, $10 its time) and, for endpoints ($5), in the outbox with a
  // delivery (ids $6) to each, and the message's fanout, in one statement.
  insertEvent: `WITH logged AS (INSERT INTO event_log (id, account_id, type, data, created_at)
      VALUES ($1, $2, $3, $9, $10)),
    event AS (INSERT INTO events (id, account_id, type, body, created_at, traceparent)
      SELECT $1, $2, $3, $4, now(), $8 WHERE cardinality($5::bigint[]) > 0 RETURNING seq),
    fanout AS (UPDATE messages SET fanout = cardinality($5::bigint[]) WHERE seq = $7)
    INSERT INTO deliveries (id, event_seq, endpoint_seq, message_seq, status, next_attempt_at, created_at)
    SELECT t.id, event.seq, t.endpoint, $7, 'pending', now(), now()
    FROM event, unnest($5::bigint[], $6::text[]) AS t(endpoint, id)`,
  // The account's row lock makes creates for one account take turns, so that the count holds
  // (NO KEY: inserts that only reference the account, checked under KEY SHARE, do not wait).
  lockAccount: 'SELECT id FROM accounts WHERE id = $1 FOR NO KEY UPDATE',
  countEndpoints: 'SELECT count(*)::int AS count FROM webhook_endpoints WHERE account_id = $1 AND deleted_at IS NULL',
  insertEndpoint: `INSERT INTO webhook_endpoints (id, account_id, url, events, description, secret, created_at)
    VALUES ($1, $2, $3, $4, $5, $6, now()) RETURNING ${ENDPOINT_COLUMNS}`,
  listEndpoints: `SELECT ${ENDPOINT_COLUMNS} FROM webhook_endpoints WHERE account_id = $1 AND deleted_at IS NULL
    ORDER BY seq DESC`,
  getEndpoint: `SELECT seq, ${ENDPOINT_COLUMNS} FROM webhook_endpoints
    WHERE id = $1 AND account_id = $2 AND deleted_at IS NULL`,
  // $6: null leaves the endpoint as it is, true enables it, false disables it.
  updateEndpoint: `UPDATE webhook_endpoints SET url = coalesce($3, url), events = coalesce($4, events),
      description = coalesce($5, description),
      disabled_at = CASE WHEN $6::boolean IS NULL THEN disabled_at WHEN $6 THEN NULL
        ELSE coalesce(disabled_at, now()) END,
      disabled_reason = CASE WHEN $6::boolean IS NULL THEN disabled_reason WHEN $6 THEN NULL
        WHEN disabled_at IS NOT NULL THEN disabled_reason ELSE 'disabled by the account' END
    WHERE id = $1 AND account_id = $2 AND deleted_at IS NULL RETURNING seq, ${ENDPOINT_COLUMNS}`,
  deleteEndpoint: `UPDATE webhook_endpoints SET deleted_at = now()
    WHERE id = $1 AND account_id = $2 AND deleted_at IS NULL RETURNING seq`,
  rotateSecret: `UPDATE webhook_endpoints SET previous_secret = secret, previous_secret_until = $4, secret = $3,
      secret_rotated_at = now()
    WHERE id = $1 AND account_id = $2 AND deleted_at IS NULL RETURNING ${ENDPOINT_COLUMNS}`,
  disableEndpoint:
    "UPDATE webhook_endpoints SET disabled_at = $2, disabled_reason = 'answered 410 Gone' WHERE seq = $1",
  // A live lease stays, with its end: the attempt under way records its outcome, and until then
  // the delivery is not sent again (decision 123). A lease run out goes.
  failEndpointDeliveries: `UPDATE deliveries SET status = 'failed', last_error = $2,
      lease = CASE WHEN next_attempt_at > now() THEN lease END,
      next_attempt_at = CASE WHEN lease IS NOT NULL AND next_attempt_at > now() THEN next_attempt_at END
    WHERE endpoint_seq = $1 AND status = 'pending' RETURNING message_seq AS "messageSeq"`,
  listDeliveries: `SELECT ${DELIVERY_COLUMNS} FROM deliveries d JOIN events e ON e.seq = d.event_seq
    WHERE d.endpoint_seq = $1 ORDER BY d.seq DESC LIMIT $2`,
  getDelivery: `SELECT ${DELIVERY_COLUMNS} FROM deliveries d JOIN events e ON e.seq = d.event_seq WHERE d.seq = $1`,
  // FOR SHARE OF w: as for activeEndpoints, a delete waits, then fails the delivery made pending here.
  lockRedelivery: `SELECT d.seq, d.message_seq AS "messageSeq" FROM deliveries d
    JOIN webhook_endpoints w ON w.seq = d.endpoint_seq
    WHERE d.id = $1 AND w.account_id = $2 AND w.deleted_at IS NULL AND w.disabled_at IS NULL FOR SHARE OF w`,
  // Not while an attempt holds a live lease (pending, or failed under it): a second one would send
  // the event twice at once.
  redeliver: `UPDATE deliveries SET status = 'pending', next_attempt_at = now(), lease = NULL, retry_base = attempts
    WHERE seq = $1 AND NOT (lease IS NOT NULL AND next_attempt_at > now()) RETURNING seq`,
  // The endpoints a claim serves (decision 122): from the endpoint after $1, those with a delivery
  // due, enabled, with room under $2 attempts in flight (leases more than $4 ms from their end), no
  // more than $3 of them, found by skipping along deliveries_endpoint_due (one probe per endpoint
  // with any pending). Each is held for the claim's transaction by an advisory lock that another
  // claim does not wait for but passes over, so that the claim's count of its leases, in the next
  // statement, is exact.
  claimableEndpoints: `WITH RECURSIVE pending AS (
      (SELECT endpoint_seq, next_attempt_at FROM deliveries WHERE status = 'pending' AND endpoint_seq > $1
        ORDER BY endpoint_seq, next_attempt_at LIMIT 1)
      UNION ALL
      SELECT n.endpoint_seq, n.next_attempt_at FROM pending p CROSS JOIN LATERAL (
        SELECT endpoint_seq, next_attempt_at FROM deliveries WHERE status = 'pending' AND endpoint_seq > p.endpoint_seq
        ORDER BY endpoint_seq, next_attempt_at LIMIT 1) n)
    SELECT p.endpoint_seq AS seq FROM pending p
    JOIN webhook_endpoints w ON w.seq = p.endpoint_seq AND w.disabled_at IS NULL AND w.deleted_at IS NULL
    WHERE p.next_attempt_at <= now() AND (SELECT count(*) FROM deliveries b WHERE b.endpoint_seq = p.endpoint_seq
      AND b.status = 'pending' AND b.lease IS NOT NULL
      AND b.next_attempt_at > now() + $4::float8 * interval '1 millisecond') < $2::bigint
      AND pg_try_advisory_xact_lock(hashtext('animal-store:claim:' || current_schema()), (p.endpoint_seq % 2147483647)::int)
    LIMIT $3`,
  // Leases deliveries of those endpoints ($5, in the order found), each offering its oldest due up to
  // its room under $4 attempts in flight (as above, $6), locked (and checked again, in case an
  // earlier claim took one): the first of each taken, then the second. A lease moves
  // next_attempt_at to its end, so a delivery whose holder died is due again then. The locks of
  // those not taken end with the transaction.
  claimDeliveries: `WITH candidates AS MATERIALIZED (
      SELECT c.seq, c.place, $4::bigint - (SELECT count(*) FROM deliveries b WHERE b.endpoint_seq = c.seq
        AND b.status = 'pending' AND b.lease IS NOT NULL
        AND b.next_attempt_at > now() + $6::float8 * interval '1 millisecond') AS room
      FROM unnest($5::bigint[]) WITH ORDINALITY AS c(seq, place)),
    offered AS MATERIALIZED (
      SELECT d.seq, c.place, row_number() OVER (PARTITION BY c.seq ORDER BY d.next_attempt_at, d.seq) AS turn
      FROM candidates c CROSS JOIN LATERAL (SELECT x.seq, x.next_attempt_at FROM deliveries x
        WHERE x.endpoint_seq = c.seq AND x.status = 'pending' AND x.next_attempt_at <= now()
        ORDER BY x.next_attempt_at LIMIT greatest(least(c.room, $1), 0) FOR UPDATE SKIP LOCKED) d),
    due AS (SELECT seq FROM offered ORDER BY turn, place LIMIT $1)
    UPDATE deliveries d SET lease = $2, next_attempt_at = now() + $3::float8 * interval '1 millisecond',
      attempts = d.attempts + 1
    FROM due, events e, webhook_endpoints w
    WHERE d.seq = due.seq AND e.seq = d.event_seq AND w.seq = d.endpoint_seq
    RETURNING d.id, d.lease, e.id AS "eventId", e.body, w.url, w.secret,
      CASE WHEN w.previous_secret_until > now() THEN w.previous_secret END AS "previousSecret",
      d.attempts - d.retry_base AS attempts, e.traceparent, d.endpoint_seq AS "endpointSeq"`,
  // FOR SHARE: as for activeEndpoints, a delete or a disable waits, then fails what this makes pending.
  lockEnabledEndpoint: `SELECT seq, ${ENDPOINT_COLUMNS}, now() AS at FROM webhook_endpoints
    WHERE id = $1 AND account_id = $2 AND deleted_at IS NULL AND disabled_at IS NULL FOR SHARE`,
  // Each is made due again as a resend makes it; not one whose attempt is still under way (decision 123).
  recoverDeliveries: `WITH chosen AS (SELECT seq FROM deliveries
      WHERE endpoint_seq = $1 AND status = 'failed' AND created_at >= $2
        AND NOT (lease IS NOT NULL AND next_attempt_at > now()) ORDER BY seq LIMIT $3 FOR UPDATE)
    UPDATE deliveries d SET status = 'pending', next_attempt_at = now(), lease = NULL, retry_base = d.attempts
    FROM chosen WHERE d.seq = chosen.seq AND d.status = 'failed' RETURNING d.message_seq AS "messageSeq"`,
  // As recoverDeliveries chooses: not one whose attempt is still under way.
  failedSince: `SELECT EXISTS (SELECT 1 FROM deliveries WHERE endpoint_seq = $1 AND status = 'failed'
    AND created_at >= $2 AND NOT (lease IS NOT NULL AND next_attempt_at > now())) AS more`,
  requeueMessages: "UPDATE messages SET status = 'queued' WHERE seq = ANY($1::bigint[]) AND status = 'failed'",
  listEvents: `SELECT ${EVENT_COLUMNS} FROM event_log WHERE account_id = $1 AND seq < $2
    AND ($3::timestamptz IS NULL OR created_at > $3) AND ($4::text[] IS NULL OR type = ANY($4))
    ORDER BY seq DESC LIMIT $5`,
  getEvent: `SELECT ${EVENT_COLUMNS} FROM event_log WHERE id = $1 AND account_id = $2`,
  // Below the oldest transaction of this database still open when the statement began: every one
  // below has ended, and any later one has a greater xid. Transactions of other databases of the
  // server (their xid in pg_stat_activity) write no event here, and hold nothing back (decision 116).
  eventFeedHead: `${FEED_BOUND} SELECT xid::text AS bound FROM bound`,
  eventFeed: `${FEED_BOUND} SELECT e.xid::text AS tx, ${FEED_COLUMNS} FROM event_log e, bound
    WHERE (e.xid, e.seq) > ($1::xid8, $2::bigint) AND e.xid < bound.xid ORDER BY e.xid, e.seq LIMIT $3`,
  accountEvents: `SELECT xid::text AS tx, ${FEED_COLUMNS} FROM event_log
    WHERE account_id = $1 AND (xid, seq) > ($2::xid8, $3::bigint) AND (xid, seq) <= ($4::xid8, $5::bigint)
    AND ($6::text[] IS NULL OR type = ANY($6)) ORDER BY xid, seq LIMIT $7`,
  eventPosition: 'SELECT xid::text AS tx, seq FROM event_log WHERE id = $1 AND account_id = $2',
  // A 410 disables the endpoint: its lock first, in the order deleteWebhookEndpoint takes them.
  lockDeliveryEndpoint: `SELECT w.seq, d.status FROM deliveries d JOIN webhook_endpoints w ON w.seq = d.endpoint_seq
    WHERE d.id = $1 AND d.lease = $2 FOR UPDATE OF w`,
  // $5: delivered; $6: when to retry (null: never). A delivery failed under its lease (its endpoint
  // disabled or deleted meanwhile) keeps its failure's reason, unless this attempt delivered it.
  recordDelivery: `UPDATE deliveries SET lease = NULL, last_attempt_at = $3, last_status = $4,
      last_error = CASE WHEN status = 'failed' AND NOT $5 THEN last_error ELSE $7 END,
      status = CASE WHEN $5 THEN 'delivered' WHEN status = 'failed' OR $6::timestamptz IS NULL THEN 'failed'
        ELSE 'pending' END,
      next_attempt_at = CASE WHEN $5 OR status = 'failed' THEN NULL ELSE $6::timestamptz END,
      delivered_at = CASE WHEN $5 THEN $8::timestamptz ELSE delivered_at END
    WHERE id = $1 AND lease = $2 AND status IN ('pending', 'failed')
    RETURNING endpoint_seq AS "endpointSeq", message_seq AS "messageSeq", status`,
  deliveriesDue: `SELECT EXISTS (SELECT 1 FROM deliveries WHERE status = 'pending' AND next_attempt_at <= now()) AS due`,
  markUndeliveredMessages: "UPDATE messages SET status = 'undelivered' WHERE status = 'queued' AND fanout = 0",
  outboxStats: `SELECT count(*)::int AS depth, min(created_at) AS "oldestAt" FROM deliveries WHERE status = 'pending'`,
  insertSecret: 'INSERT INTO secrets (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING',
  getSecret: 'SELECT value FROM secrets WHERE name = $1',
  dropStaleIdempotency: `DELETE FROM idempotency_keys WHERE scope = $1 AND key = $2
    AND (expires_at <= now() OR (state = 'in_progress' AND created_at <= $3))`,
  claimIdempotency: `INSERT INTO idempotency_keys (scope, key, fingerprint, state, created_at, expires_at)
    VALUES ($1, $2, $3, 'in_progress', now(), $4) ON CONFLICT (scope, key) DO NOTHING RETURNING 1 AS claimed`,
  getIdempotency: `SELECT fingerprint, state, response_status AS status, response_body AS body
    FROM idempotency_keys WHERE scope = $1 AND key = $2`,
  completeIdempotency: `UPDATE idempotency_keys SET state = 'done', response_status = $1, response_body = $2
    WHERE scope = $3 AND key = $4`,
  releaseIdempotency: "DELETE FROM idempotency_keys WHERE scope = $1 AND key = $2 AND state = 'in_progress'",
  purgeSessions: 'DELETE FROM sessions WHERE expires_at <= $1',
  // Rows pruned are recorded as the newest transaction pruned (pet_changes_pruned).
  prunePetChanges: `WITH gone AS (DELETE FROM pet_changes WHERE changed_at < now() - make_interval(mins => $1) RETURNING xid)
    UPDATE pet_changes_pruned SET xid = greatest(xid, (SELECT max(xid) FROM gone)) WHERE EXISTS (SELECT 1 FROM gone)`,
  petFeedSnapshot: 'SELECT pg_current_snapshot()::text AS snapshot',
  // The rows of transactions the last read's snapshot did not see, each once, however long another
  // transaction stays open; and whether rows it had not seen were pruned since.
  petChangesSince: `SELECT s.snapshot::text AS snapshot, p.xid >= pg_snapshot_xmin($1::pg_snapshot) AS pruned,
      c.pet_id AS "petId", c.old_status AS "from", c.new_status AS "to"
    FROM (SELECT pg_current_snapshot() AS snapshot) s
    CROSS JOIN pet_changes_pruned p
    LEFT JOIN LATERAL (SELECT pet_id, old_status, new_status FROM pet_changes
      WHERE xid >= pg_snapshot_xmin($1::pg_snapshot) AND NOT pg_visible_in_snapshot(xid, $1::pg_snapshot)
      ORDER BY xid LIMIT $2) c ON true`,
  purgeIdempotency: 'DELETE FROM idempotency_keys WHERE expires_at <= $1',
  purgeEvents: 'DELETE FROM event_log WHERE created_at < $1',
  // Rows of transactions after this snapshot are invisible to it: a row ahead is another server's.
  restoredEventsAhead: `SELECT EXISTS (SELECT 1 FROM event_log
    WHERE xid >= pg_snapshot_xmax(pg_current_snapshot())) AS ahead`,
} as const

type Statement = keyof typeof SQL
type Run = <T>(name: Statement, values: unknown[]) => Promise<T[]>
/** An endpoint an event may go to: the subscriber lookup of #emit. */
type Subscriber = { seq: number; events: string }
/** An order row with the account it belongs to, which the API never shows. */
type AccountOrder = Order & { accountId: number }

/** The event types as stored: space-separated, each once, in EVENT_TYPES order. */
const storedEvents = (events: EventType[]) => EVENT_TYPES.filter((type) => events.includes(type)).join(' ')
const withoutAccount = ({ accountId, ...order }: AccountOrder): Order => order

export class PostgresStore implements Store {
  #pool: Pool
  #closing: Promise<void> | null = null
  /**
   * How many statements are under way, so that close() lets them finish (it waits for `#drained`).
   * A count, not a Set of their promises: a Set kept for the process's life makes the young
   * collector keep and promote every settled promise its old tables still point at, and all the
   * request state those promises hold (decision 64).
   */
  #inflight = 0
  #drained: (() => void) | null = null
  /** Failed statements and transactions, for the metrics (stats()). */
  #errors = 0
  /** The active trace to keep with an event (StoreOptions.traceparent); none without tracing. */
  #traceparent: () => string | null = () => null
  /** The endpoint the last claim served last: the next claim starts after it (decision 122). */
  #servedEndpoint = 0

  private constructor(pool: Pool) {
    this.#pool = pool
  }

  /** Connects, applies pending migrations, and returns the store. */
  static async open(options: PostgresOptions): Promise<PostgresStore> {
    const pg = await loadPg()
    const { types } = pg.default
    const int8 = (text: string) => {
      const value = Number(text)
      // The schema's CHECK constraints keep ids below 2^53; anything else would be a corrupt row.
      if (!Number.isSafeInteger(value)) throw new Error(`bigint ${text} is beyond 2^53 - 1`)
      return value
    }
    const parseTimestamp = types.getTypeParser(types.builtins.TIMESTAMPTZ)
    const pool = new pg.default.Pool({
      connectionString: options.databaseUrl,
      max: options.poolSize,
      connectionTimeoutMillis: options.timeoutMs,
      query_timeout: options.timeoutMs,
      statement_timeout: options.timeoutMs,
      idleTimeoutMillis: 30_000,
      keepAlive: true,
      // The URL's own application_name, if any, wins (tests use it to find their connections).
      application_name: new URL(options.databaseUrl).searchParams.get('application_name') ?? 'animal-store',
      types: {
        getTypeParser: ((oid: number, format?: 'text') => {
          if (oid === types.builtins.INT8) return int8
          if (oid === types.builtins.TIMESTAMPTZ) return (text: string) => (parseTimestamp(text) as Date).toISOString()
          return types.getTypeParser(oid, format)
        }) as typeof types.getTypeParser,
      },
    })
    // An idle connection that dies (restart, pg_terminate_backend) is dropped by the pool; without
    // a listener its 'error' event would crash the process.
    pool.on('error', () => {})
    const store = new PostgresStore(pool)
    if (options.traceparent) store.#traceparent = options.traceparent
    try {
      await store.#migrate(options.existing ?? false)
      await store.#adoptRestoredEvents()
    } catch (error) {
      await pool.end()
      throw error
    }
    return store
  }

  // ─── LIFECYCLE ─────────────────────────────────────────────────────────────────────────────

  async ping(): Promise<void> {
    await this.#query('ping', [])
  }

  stats(): StoreStats {
    const pool = this.#pool
    return {
      pool: { total: pool.totalCount, idle: pool.idleCount, waiting: pool.waitingCount },
      queryErrors: this.#errors,
    }
  }

  close(): Promise<void> {
    this.#closing ??= (async () => {
      if (this.#inflight > 0) await new Promise<void>((resolve) => (this.#drained = resolve))
      await this.#pool.end()
    })()
    return this.#closing
  }

  // ─── PETS ──────────────────────────────────────────────────────────────────────────────────

  createPet(pet: NewPet, idempotency?: IdempotencyRef): Promise<Pet> {
    const values = [pet.name, pet.categoryId, pet.status ?? DEFAULT_PET_STATUS]
    return this.#writeCompleting('insertPet', values, 201, idempotency)
  }

  async getPet(id: number): Promise<Pet | null> {
    return (await this.#query<Pet>('getPet', [id]))[0] ?? null
  }

  /** Other instances write too, and telling costs a round-trip: the pet cache polls the feed. */
  readonly petFeed = 'polled'

  async petChanges(cursor: string | null): Promise<PetFeed> {
    if (cursor === null) {
      const [row] = await this.#query<{ snapshot: string }>('petFeedSnapshot', [])
      return { changes: [], cursor: row?.snapshot as string, reset: false }
    }
    const rows = await this.#query<PetChange & { snapshot: string; pruned: boolean }>('petChangesSince', [
      cursor,
      PET_FEED_PAGE + 1,
    ])
    const { snapshot, pruned } = rows[0] as { snapshot: string; pruned: boolean }
    const changes = rows.filter((row) => row.petId !== null)
    if (pruned || changes.length > PET_FEED_PAGE) return { changes: [], cursor: snapshot, reset: true }
    return {
      changes: changes.map(({ petId, from, to }) => ({ petId: Number(petId), from, to })),
      cursor: snapshot,
      reset: false,
    }
  }

  async listPets({ limit, status, afterId = 0 }: ListPetsOptions): Promise<PetPage> {
    // One row more than asked says whether another page exists.
    const rows =
      status === undefined
        ? await this.#query<Pet>('listPets', [afterId, limit + 1])
        : await this.#query<Pet>('listPetsByStatus', [status, afterId, limit + 1])
    const more = rows.length > limit
    if (more) rows.pop()
    return { pets: rows, nextAfterId: more ? (rows.at(-1)?.id ?? null) : null }
  }

  async getVersionedPet(id: number): Promise<VersionedPet | null> {
    const row = (await this.#query<Pet & { version: number }>('getVersionedPet', [id]))[0]
    if (!row) return null
    const { version, ...pet } = row
    return { pet, version }
  }

  updatePet(id: number, changes: PetChanges, ifVersion?: number): Promise<UpdatePetResult> {
    return this.#transaction(async (run) => {
      // A hold that has ended frees the pet first, as placeOrder does (the order's row, then the pet's).
      if (changes.status !== undefined) await this.#expireHeld(run, id)
      const [current] = await run<Pet & { version: number }>('lockPet', [id])
      if (!current) return { refused: 'not_found' }
      if (ifVersion !== undefined && current.version !== ifVersion) return { refused: 'version_mismatch' }
      const { version, ...pet } = current
      const next = { ...pet, ...changes }
      if (next.status !== pet.status) {
        if (next.status === 'pending' || (await run('placedOrderFor', [id])).length > 0) return { refused: 'held' }
      }
      if (next.name === pet.name && next.categoryId === pet.categoryId && next.status === pet.status) {
        return { updated: { pet, version } }
      }
      const [row] = await run<Pet & { version: number }>('updatePet', [next.name, next.categoryId, next.status, id])
      const { version: moved, ...updated } = row as Pet & { version: number }
      return { updated: { pet: updated, version: moved } }
    })
  }

  async inventory(): Promise<Inventory> {
    const counts: Inventory = { available: 0, pending: 0, sold: 0 }
    for (const row of await this.#query<{ status: PetStatus; count: number }>('inventory', [])) {
      counts[row.status] = row.count
    }
    return counts
  }

  // ─── ORDERS ────────────────────────────────────────────────────────────────────────────────

  async orderCounts(): Promise<Record<OrderStatus, number>> {
    const counts: Record<OrderStatus, number> = { placed: 0, completed: 0, canceled: 0, expired: 0 }
    for (const row of await this.#query<{ status: OrderStatus; count: number }>('orderCounts', [])) {
      counts[row.status] = row.count
    }
    return counts
  }

  placeOrder(order: PlaceOrder, idempotency?: IdempotencyRef): Promise<PlaceOrderResult> {
    return this.#transaction(async (run) => {
      // A hold that has ended frees the pet now, whatever the sweep has done yet.
      await this.#expireHeld(run, order.petId)
      if ((await run('holdPet', [order.petId])).length === 0) {
        const exists = (await run('petExists', [order.petId])).length > 0
        return { refused: exists ? 'pet_not_available' : 'pet_not_found' }
      }
      const values = [randomId('ord'), order.accountId, order.petId, order.holdMs]
      const placed = (await run<Order>('insertOrder', values))[0] as Order
      await this.#emit(run, order.accountId, 'order.placed', placed)
      if (idempotency) {
        await run('completeIdempotency', [201, JSON.stringify(placed), idempotency.scope, idempotency.key])
      }
      return { placed }
    })
  }

  async getOrder(accountId: number, id: string): Promise<Order | null> {
    return (await this.#query<Order>('getOrder', [id, accountId]))[0] ?? null
  }

  async listOrders({ accountId, limit, status, petId, before }: ListOrdersOptions): Promise<OrderPage> {
    const values = [accountId, before ?? Number.MAX_SAFE_INTEGER, status ?? null, petId ?? null, limit + 1]
    const rows = await this.#query<Order & { seq: number }>('listOrders', values)
    const more = rows.length > limit
    if (more) rows.pop()
    return { orders: rows.map(({ seq, ...order }) => order), next: more ? (rows.at(-1)?.seq ?? null) : null }
  }

  transitionOrder(accountId: number, id: string, to: 'completed' | 'canceled'): Promise<TransitionResult> {
    return this.#transaction(async (run) => {
      const [found] = await run<Order & { seq: number; due: boolean }>('lockOrder', [id, accountId])
      if (!found) return { refused: 'not_found' }
      const { seq, due, ...order } = found
      let current = order
      // A hold that has ended expires now, whatever the sweep has done yet.
      if (order.status === 'placed' && due) {
        const expired = await this.#expireHeld(run, order.petId)
        if (expired) current = withoutAccount(expired)
      }
      if (current.status === to) return { order: current, changed: false }
      if (current.status !== 'placed') return { refused: 'conflict', order: current }
      const updated = (await run<Order>('setOrderStatus', [to, seq]))[0] as Order
      await run('releasePet', [to === 'completed' ? 'sold' : 'available', order.petId])
      await this.#emit(run, accountId, to === 'completed' ? 'order.completed' : 'order.canceled', updated)
      return { order: updated, changed: true }
    })
  }

  expireOrders(now: string): Promise<Order[]> {
    return this.#transaction(async (run) => {
      const expired = await run<AccountOrder>('expireOrders', [now])
      const subscribers = new Map<number, Promise<Subscriber[]>>()
      for (const order of expired) await this.#emitOrder(run, 'order.expired', order, subscribers)
      return expired.map(withoutAccount)
    })
  }

  // ─── ACCOUNTS ──────────────────────────────────────────────────────────────────────────────

  async createAccount(email: string, passwordHash?: string): Promise<Account | null> {
    return (
      (await this.#query<Account>('insertAccount', [email.toLowerCase(), passwordHash ?? null], 'write'))[0] ?? null
    )
  }

  async findAccountByEmail(email: string): Promise<Account | null> {
    return (await this.#query<Account>('getAccountByEmail', [email.toLowerCase()]))[0] ?? null
  }

  async findAccountLogin(email: string): Promise<{ account: Account; passwordHash: string | null } | null> {
    const row = (
      await this.#query<Account & { passwordHash: string | null }>('getAccountLogin', [email.toLowerCase()])
    )[0]
    if (!row) return null
    const { passwordHash, ...account } = row
    return { account, passwordHash }
  }

  async setAccountPassword(accountId: number, passwordHash: string): Promise<boolean> {
    return this.#transaction(async (run) => {
      if ((await run('setPassword', [passwordHash, accountId])).length === 0) return false
      await run('deleteAccountSessions', [accountId])
      return true
    })
  }

  // ─── SESSIONS ──────────────────────────────────────────────────────────────────────────────

  async createSession(session: NewSession): Promise<boolean> {
    const values = [session.hash, session.accountId, session.expiresAt, session.passwordHash]
    return (await this.#result('insertSession', values)).rowCount === 1
  }

  async findSession(hash: string): Promise<Session | null> {
    return (await this.#query<Session>('getSession', [hash]))[0] ?? null
  }

  async deleteSession(hash: string): Promise<void> {
    await this.#query('deleteSession', [hash], 'write')
  }

  // ─── API KEYS ──────────────────────────────────────────────────────────────────────────────

  async createApiKey(key: NewApiKey): Promise<ApiKey> {
    const values = [randomId('key'), key.accountId, key.name, key.prefix, key.hash, key.expiresAt, key.scopes ?? null]
    return (await this.#query<ApiKey>('insertKey', values, 'write'))[0] as ApiKey
  }

  async listApiKeys(accountId: number): Promise<ApiKey[]> {
    return this.#query<ApiKey>('listKeys', [accountId])
  }

  async findApiKeyByHash(hash: string): Promise<ApiKey | null> {
    return (await this.#query<ApiKey>('getKeyByHash', [hash]))[0] ?? null
  }

  async revokeApiKey(id: string, accountId?: number): Promise<ApiKey | null> {
    return (await this.#query<ApiKey>('revokeKey', [id, accountId ?? null], 'write'))[0] ?? null
  }

  async touchApiKeys(usages: { id: string; at: string }[]): Promise<void> {
    if (usages.length === 0) return
    await this.#query('touchKeys', [usages.map((u) => u.id), usages.map((u) => u.at)], 'write')
  }

  // ─── MESSAGES ──────────────────────────────────────────────────────────────────────────────

  createMessage(accountId: number, text: string, idempotency?: IdempotencyRef): Promise<Message> {
    return this.#transaction(async (run) => {
      const [row] = await run<Message & { seq: number }>('insertMessage', [randomId('msg'), accountId, text])
      const { seq, ...message } = row as Message & { seq: number }
      await this.#emit(run, accountId, 'message.created', message, seq)
      if (idempotency) {
        await run('completeIdempotency', [202, JSON.stringify(message), idempotency.scope, idempotency.key])
      }
      return message
    })
  }

  async getMessage(accountId: number, id: string): Promise<Message | null> {
    return (await this.#query<Message>('getMessage', [id, accountId]))[0] ?? null
  }

  async listMessages({ accountId, limit, status, before }: ListMessagesOptions): Promise<MessagePage> {
    const values = [accountId, before ?? Number.MAX_SAFE_INTEGER, status ?? null, limit + 1]
    const rows = await this.#query<Message & { seq: number }>('listMessages', values)
    const more = rows.length > limit
    if (more) rows.pop()
    return { messages: rows.map(({ seq, ...message }) => message), next: more ? (rows.at(-1)?.seq ?? null) : null }
  }

  // ─── WEBHOOKS ──────────────────────────────────────────────────────────────────────────────

  async createWebhookEndpoint(
    endpoint: NewWebhookEndpoint,
    idempotency?: IdempotencyRef,
  ): Promise<StoredWebhookEndpoint | null> {
    const { accountId, url, events, description, secret, max } = endpoint
    const values = [randomId('we'), accountId, url, storedEvents(events), description, secret]
    return this.#transaction(async (run) => {
      if (max !== undefined) {
        await run('lockAccount', [accountId])
        const [{ count } = { count: 0 }] = await run<{ count: number }>('countEndpoints', [accountId])
        if (count >= max) return null
      }
      const stored = endpointFromRow((await run<EndpointRow>('insertEndpoint', values))[0] as EndpointRow)
      if (idempotency) {
        await run('completeIdempotency', [201, JSON.stringify(stored), idempotency.scope, idempotency.key])
      }
      return stored
    })
  }

  async listWebhookEndpoints(accountId: number): Promise<StoredWebhookEndpoint[]> {
    return (await this.#query<EndpointRow>('listEndpoints', [accountId])).map(endpointFromRow)
  }

  async getWebhookEndpoint(accountId: number, id: string): Promise<StoredWebhookEndpoint | null> {
    const [row] = await this.#query<EndpointRow & { seq: number }>('getEndpoint', [id, accountId])
    return row ? endpointFromRow(row) : null
  }

  updateWebhookEndpoint(
    accountId: number,
    id: string,
    changes: WebhookEndpointChanges,
  ): Promise<StoredWebhookEndpoint | null> {
    const events = changes.events === undefined ? null : storedEvents(changes.events)
    const values = [id, accountId, changes.url ?? null, events, changes.description ?? null, changes.enabled ?? null]
    return this.#transaction(async (run) => {
      const [row] = await run<EndpointRow & { seq: number }>('updateEndpoint', values)
      if (!row) return null
      if (changes.enabled === false) await this.#failPendingDeliveries(run, row.seq, 'endpoint disabled')
      return endpointFromRow(row)
    })
  }

  deleteWebhookEndpoint(accountId: number, id: string): Promise<boolean> {
    return this.#transaction(async (run) => {
      const [row] = await run<{ seq: number }>('deleteEndpoint', [id, accountId])
      if (!row) return false
      await this.#failPendingDeliveries(run, row.seq, 'endpoint deleted')
      return true
    })
  }

  async rotateWebhookSecret(
    accountId: number,
    id: string,
    secret: string,
    previousUntil: string,
  ): Promise<StoredWebhookEndpoint | null> {
    const [row] = await this.#query<EndpointRow>('rotateSecret', [id, accountId, secret, previousUntil], 'write')
    return row ? endpointFromRow(row) : null
  }

  async listDeliveries(accountId: number, endpointId: string, limit: number): Promise<Delivery[] | null> {
    const [endpoint] = await this.#query<{ seq: number }>('getEndpoint', [endpointId, accountId])
    if (!endpoint) return null
    return this.#query<Delivery>('listDeliveries', [endpoint.seq, limit])
  }

  redeliver(accountId: number, deliveryId: string): Promise<Redelivery | null> {
    return this.#transaction(async (run) => {
      const [found] = await run<{ seq: number; messageSeq: number | null }>('lockRedelivery', [deliveryId, accountId])
      if (!found) return null
      const resent = (await run('redeliver', [found.seq])).length > 0
      if (resent && found.messageSeq !== null) await run('requeueMessage', [found.messageSeq])
      const [delivery] = await run<Delivery>('getDelivery', [found.seq])
      return delivery ? { delivery, resent } : null
    })
  }

  sendTestEvent(accountId: number, endpointId: string): Promise<Event | null> {
    return this.#transaction(async (run) => {
      const [endpoint] = await run<EndpointRow & { seq: number; at: string }>('lockEnabledEndpoint', [
        endpointId,
        accountId,
      ])
      if (!endpoint) return null
      const event: Event = {
        id: randomId('evt'),
        type: TEST_EVENT_TYPE,
        createdAt: endpoint.at,
        data: endpointData(endpoint),
      }
      const body = eventBody(event.type, event.createdAt, event.data)
      const data = JSON.stringify(event.data)
      const values = [
        event.id,
        accountId,
        event.type,
        body,
        [endpoint.seq],
        [randomId('dlv')],
        null,
        this.#traceparent(),
      ]
      await run('insertEvent', [...values, data, event.createdAt])
      return event
    })
  }

  recoverDeliveries(accountId: number, endpointId: string, since: string, limit: number): Promise<Recovery | null> {
    return this.#transaction(async (run) => {
      const [endpoint] = await run<{ seq: number }>('lockEnabledEndpoint', [endpointId, accountId])
      if (!endpoint) return null
      const recovered = await run<{ messageSeq: number | null }>('recoverDeliveries', [endpoint.seq, since, limit])
      const messages = [...new Set(recovered.flatMap(({ messageSeq }) => (messageSeq === null ? [] : [messageSeq])))]
      if (messages.length > 0) {
        // In seq order, as #failPendingDeliveries locks them: two such transactions take turns.
        await run('lockMessages', [messages])
        await run('requeueMessages', [messages])
      }
      const [{ more } = { more: false }] = await run<{ more: boolean }>('failedSince', [endpoint.seq, since])
      return { queued: recovered.length, more }
    })
  }

  async claimDeliveries(
    limit: number,
    leaseMs: number,
    perEndpoint = Number.MAX_SAFE_INTEGER,
    attemptMs = leaseMs,
  ): Promise<ClaimedDelivery[]> {
    // A lease is an attempt in flight until its attempt's bound: past it, its holder has died.
    const busyAfter = leaseMs - attemptMs
    type Row = Omit<ClaimedDelivery, 'secrets'> & { secret: string; previousSecret: string | null; endpointSeq: string }
    const rows = await this.#transaction(async (run) => {
      // The endpoints after the last one served first, then from the first: each gets its turn.
      const find = (after: number, max: number) =>
        run<{ seq: string }>('claimableEndpoints', [after, perEndpoint, max, busyAfter]).then((found) =>
          found.map((e) => e.seq),
        )
      const endpoints = await find(this.#servedEndpoint, limit)
      if (endpoints.length < limit && this.#servedEndpoint > 0) {
        const more = await find(0, limit - endpoints.length)
        endpoints.push(...more.filter((seq) => !endpoints.includes(seq)))
      }
      if (endpoints.length === 0) return []
      return run<Row>('claimDeliveries', [limit, randomId('lease'), leaseMs, perEndpoint, endpoints, busyAfter])
    })
    // The next claim starts after the last endpoint served, in the order this one took them.
    const served = rows.map((row) => Number(row.endpointSeq))
    const wrapped = served.filter((seq) => seq <= this.#servedEndpoint)
    if (served.length > 0) this.#servedEndpoint = Math.max(...(wrapped.length > 0 ? wrapped : served))
    return rows.map(({ secret, previousSecret, endpointSeq: _, ...claimed }) => ({
      ...claimed,
      secrets: previousSecret === null ? [secret] : [secret, previousSecret],
    }))
  }

  recordDelivery(outcome: DeliveryOutcome): Promise<DeliveryStatus | null> {
    const { id, lease, at, answeredAt, delivered, status, error, retryAt, disableEndpoint } = outcome
    return this.#transaction(async (run) => {
      // The endpoint's lock before the delivery's, the order in which a delete takes them. A 410 for a
      // delivery failed meanwhile (its endpoint disabled, deleted, or enabled again since) disables nothing.
      let disabling = false
      if (disableEndpoint) {
        const [held] = await run<{ status: string }>('lockDeliveryEndpoint', [id, lease])
        if (!held) return null
        disabling = held.status === 'pending'
      }
      const values = [id, lease, at, status, delivered, delivered ? null : retryAt, error, answeredAt]
      type Row = { endpointSeq: number; messageSeq: number | null; status: DeliveryStatus }
      const [row] = await run<Row>('recordDelivery', values)
      if (!row) return null
      if (row.messageSeq !== null) {
        // Also locks the message, so that the last two deliveries of one message to fail take turns.
        await run('countAttempt', [row.messageSeq, delivered, answeredAt])
        if (!delivered && retryAt === null) await run('failFinishedMessages', [[row.messageSeq]])
      }
      if (disabling) {
        await run('disableEndpoint', [row.endpointSeq, at])
        await this.#failPendingDeliveries(run, row.endpointSeq, 'endpoint disabled')
      }
      return row.status
    })
  }

  async deliveriesDue(): Promise<boolean> {
    return ((await this.#query<{ due: boolean }>('deliveriesDue', []))[0] as { due: boolean }).due
  }

  async markUndeliveredMessages(): Promise<number> {
    return (await this.#result('markUndeliveredMessages', [])).rowCount ?? 0
  }

  async outboxStats(): Promise<OutboxStats> {
    return (await this.#query<OutboxStats>('outboxStats', []))[0] as OutboxStats
  }

  // ─── EVENTS ────────────────────────────────────────────────────────────────────────────────

  async listEvents({ accountId, limit, types, createdAfter, before }: ListEventsOptions): Promise<EventPage> {
    const values = [accountId, before ?? Number.MAX_SAFE_INTEGER, createdAfter ?? null, types ?? null, limit + 1]
    const rows = await this.#query<EventRow & { seq: number }>('listEvents', values)
    const more = rows.length > limit
    if (more) rows.pop()
    return { events: rows.map(eventFromRow), next: more ? (rows.at(-1)?.seq ?? null) : null }
  }

  async getEvent(accountId: number, id: string): Promise<Event | null> {
    const [row] = await this.#query<EventRow>('getEvent', [id, accountId])
    return row ? eventFromRow(row) : null
  }

  // Commit order is (xid, seq) here, and only ended transactions are read (migrations 008, 009).
  async eventFeedHead(): Promise<FeedPosition> {
    const [row] = await this.#query<{ bound: string }>('eventFeedHead', [])
    // Every ended transaction's events, whatever their seq; none of a transaction still open.
    return { tx: BigInt((row as { bound: string }).bound) - 1n, seq: Number.MAX_SAFE_INTEGER }
  }

  async eventFeed(after: FeedPosition, limit: number): Promise<EventFeedPage> {
    const rows = await this.#query<FeedRow>('eventFeed', [String(after.tx), after.seq, limit])
    const events = rows.map(feedEventFromRow)
    return { events, position: events.at(-1)?.position ?? after }
  }

  async accountEvents({ accountId, after, upto, types, limit }: AccountEventsOptions): Promise<FeedEvent[]> {
    const values = [accountId, String(after.tx), after.seq, String(upto.tx), upto.seq, types ?? null, limit]
    return (await this.#query<FeedRow>('accountEvents', values)).map(feedEventFromRow)
  }

  async eventPosition(accountId: number, id: string): Promise<FeedPosition | null> {
    const [row] = await this.#query<{ tx: string; seq: number }>('eventPosition', [id, accountId])
    return row ? { tx: BigInt(row.tx), seq: row.seq } : null
  }

  // ─── SETTINGS ──────────────────────────────────────────────────────────────────────────────

  async secret(name: string, generate: () => string): Promise<string> {
    await this.#query('insertSecret', [name, generate()], 'write')
    return ((await this.#query<{ value: string }>('getSecret', [name]))[0] as { value: string }).value
  }

  // ─── IDEMPOTENCY ───────────────────────────────────────────────────────────────────────────

  claimIdempotencyKey(claim: IdempotencyClaim): Promise<IdempotencyState> {
    return this.#transaction(async (run) => {
      await run('dropStaleIdempotency', [claim.scope, claim.key, claim.staleBefore])
      const claimed = await run('claimIdempotency', [claim.scope, claim.key, claim.fingerprint, claim.expiresAt])
      if (claimed.length > 0) return { state: 'claimed' } as const
      // READ COMMITTED: a claim that raced ours has committed by now (ours waited on its row).
      const [row] = await run<IdempotencyRow>('getIdempotency', [claim.scope, claim.key])
      return idempotencyState(row as IdempotencyRow, claim.fingerprint)
    })
  }

  async releaseIdempotencyKey(ref: IdempotencyRef): Promise<void> {
    await this.#query('releaseIdempotency', [ref.scope, ref.key], 'write')
  }

  // ─── HOUSEKEEPING ──────────────────────────────────────────────────────────────────────────

  async purgeExpired(now: string, eventsBefore: string): Promise<number> {
    await this.#result('prunePetChanges', [PET_FEED_KEPT.minutes])
    await this.#result('purgeEvents', [eventsBefore])
    const sessions = await this.#result('purgeSessions', [now])
    const records = await this.#result('purgeIdempotency', [now])
    return (sessions.rowCount ?? 0) + (records.rowCount ?? 0)
  }

  // ─── INTERNALS ─────────────────────────────────────────────────────────────────────────────

  async #query<T>(name: Statement, values: unknown[], kind: 'read' | 'write' = 'read'): Promise<T[]> {
    return (await this.#result(name, values, kind)).rows as T[]
  }

  /** Keeps track of work under way (for close) and refuses new work once closing. */
  #track<T>(work: () => Promise<T>): Promise<T> {
    if (this.#closing) return Promise.reject(new DatabaseUnavailableError('The store is closed'))
    const promise = work()
    this.#inflight++
    return promise.finally(() => {
      if (--this.#inflight === 0) this.#drained?.()
    })
  }

  /**
   * Runs a named statement. A read that fails because the database went away is retried once; one
   * that met a connection the server had closed is retried until it gets a live one (at most once
   * per pooled connection: each dead one leaves the pool as it fails).
   */
  #result(name: Statement, values: unknown[], kind: 'read' | 'write' = 'write') {
    const config: QueryConfig = { name, text: SQL[name], values }
    return this.#track(async () => {
      for (let attempt = 1; ; attempt++) {
        try {
          return await this.#pool.query(config)
        } catch (error) {
          this.#errors++
          if (!isUnavailable(error)) throw error
          const retries = isStaleConnection(error) ? (this.#pool.options.max ?? 1) : 1
          if (kind === 'write' || attempt > retries) throw new DatabaseUnavailableError(String(error))
        }
      }
    })
  }

  /**
   * A connection of the pool for several statements. While it is checked out, pg-pool no longer
   * listens for its 'error' event (a backend terminated, the network cut), which unheard would end
   * the process: this listens instead, and `release` discards a connection that failed rather
   * than return it to the pool.
   */
  async #checkout(): Promise<{ client: PoolClient; release: (error?: unknown) => void }> {
    let client: PoolClient
    try {
      client = await this.#pool.connect()
    } catch (error) {
      throw isUnavailable(error) ? new DatabaseUnavailableError(`Cannot reach PostgreSQL: ${error}`) : error
    }
    let failed: Error | undefined
    const onError = (error: Error) => {
      failed = error
    }
    client.on('error', onError)
    const release = (error?: unknown) => {
      const discard = failed ?? (isUnavailable(error) ? (error as Error) : undefined)
      // A discarded connection keeps the listener: it may still report its end after this.
      if (!discard) client.off('error', onError)
      client.release(discard)
    }
    return { client, release }
  }

  /** Runs `work` in one transaction on one connection; never retried. */
  #transaction<T>(work: (run: Run) => Promise<T>): Promise<T> {
    return this.#track(async () => {
      const { client, release } = await this.#checkout()
      const run: Run = async <R>(name: Statement, values: unknown[]) =>
        (await client.query({ name, text: SQL[name], values })).rows as R[]
      try {
        await client.query('BEGIN')
        const result = await work(run)
        await client.query('COMMIT')
        release()
        return result
      } catch (error) {
        this.#errors++
        await client.query('ROLLBACK').catch(() => {})
        release(error)
        throw isUnavailable(error) ? new DatabaseUnavailableError(String(error)) : error
      }
    })
  }

  /**
   * In the caller's transaction: records the event in the account's log and, when any of the
   * account's endpoints subscribes to `type`, queues it with one delivery to each such endpoint.
   * `data` is the resource as returned; its `updatedAt` (an order's) or else `createdAt` is the event's timestamp.
   * For a message's event (`messageSeq`) also sets the message's fanout. Returns how many
   * deliveries. `subscribers` shares the endpoint lookups of one transaction among its events.
   */
  async #emit(
    run: Run,
    accountId: number,
    type: EventType,
    data: Message | Order,
    messageSeq: number | null = null,
    subscribers = new Map<number, Promise<Subscriber[]>>(),
  ): Promise<number> {
    let lookup = subscribers.get(accountId)
    if (!lookup) {
      lookup = run<Subscriber>('activeEndpoints', [accountId])
      subscribers.set(accountId, lookup)
    }
    const endpoints = (await lookup).filter((endpoint) => subscribes(endpoint.events, type)).map((e) => e.seq)
    const timestamp = 'updatedAt' in data ? data.updatedAt : data.createdAt
    const ids = endpoints.map(() => randomId('dlv'))
    const queued = endpoints.length > 0
    const body = queued ? eventBody(type, timestamp, data) : null
    // The active trace, when tracing is on: the deliveries continue it.
    const traceparent = queued ? this.#traceparent() : null
    const values = [randomId('evt'), accountId, type, body, endpoints, ids, messageSeq, traceparent]
    await run('insertEvent', [...values, JSON.stringify(data), timestamp])
    return endpoints.length
  }

  /** Expires the pet's placed order if its hold has ended, freeing the pet; returns it (with its account). */
  async #expireHeld(run: Run, petId: number): Promise<AccountOrder | undefined> {
    const [expired] = await run<AccountOrder>('expirePetOrder', [petId])
    if (!expired) return undefined
    await run('releasePet', ['available', petId])
    await this.#emitOrder(run, 'order.expired', expired)
    return expired
  }

  /** An order's event, for the account the order belongs to (its data without that account). */
  #emitOrder(run: Run, type: EventType, order: AccountOrder, subscribers?: Map<number, Promise<Subscriber[]>>) {
    return this.#emit(run, order.accountId, type, withoutAccount(order), null, subscribers)
  }

  /**
   * Fails the endpoint's pending deliveries (it was deleted or disabled), then each of their messages
   * left with no pending delivery. The caller holds the endpoint's row lock.
   */
  async #failPendingDeliveries(run: Run, endpointSeq: number, reason: string): Promise<void> {
    const failed = await run<{ messageSeq: number | null }>('failEndpointDeliveries', [endpointSeq, reason])
    const messages = [...new Set(failed.flatMap(({ messageSeq }) => (messageSeq === null ? [] : [messageSeq])))]
    if (messages.length === 0) return
    await run('lockMessages', [messages])
    await run('failFinishedMessages', [messages])
  }

  /** Inserts one row and, for an idempotent request, completes its claim with the row in the same transaction. */
  async #writeCompleting<T>(
    name: Statement,
    values: unknown[],
    status: number,
    idempotency?: IdempotencyRef,
  ): Promise<T> {
    if (!idempotency) return (await this.#query<T>(name, values, 'write'))[0] as T
    return this.#transaction(async (run) => {
      const [row] = await run<T>(name, values)
      await run('completeIdempotency', [status, JSON.stringify(row), idempotency.scope, idempotency.key])
      return row as T
    })
  }

  /**
   * Events restored from another server (pg_restore) keep that server's xids, which may be ahead of
   * this one's: the stream would sort every new event behind them, and skip it. Then every event is
   * put before those to come (xid 1: seq order), not only those ahead, which would put the newer
   * before the older; and the key of the old server's stream positions is forgotten (decision 121).
   * Once, under the migrators' lock, without the statement timeout: a month of events may be many.
   */
  async #adoptRestoredEvents(): Promise<void> {
    const [check] = await this.#query<{ ahead: boolean }>('restoredEventsAhead', [])
    if (!check?.ahead) return
    await this.#ownTransaction(async (client) => {
      await client.query(MIGRATORS_LOCK)
      // Another instance starting beside this one may have moved them meanwhile.
      const { rows } = await client.query(SQL.restoredEventsAhead)
      if (!rows[0]?.ahead) return
      await client.query('SET LOCAL statement_timeout = 0')
      // node-pg's own timeout on the answer: a zero there means the pool's.
      const move = { text: "UPDATE event_log SET xid = '1' WHERE xid <> '1'", query_timeout: 2 ** 31 - 1 }
      await client.query(move as QueryConfig)
      await client.query('DELETE FROM secrets WHERE name = $1', [STREAM_POSITIONS_SECRET])
    })
  }

  /** Runs `work` in a transaction on a connection of its own, as startup's steps do: committed unless it throws. */
  async #ownTransaction(work: (client: PoolClient) => Promise<void>): Promise<void> {
    const { client, release } = await this.#checkout()
    try {
      await client.query('BEGIN')
      await work(client)
      await client.query('COMMIT')
      release()
    } catch (error) {
      await client.query('ROLLBACK').catch(() => {})
      release(error)
      throw error
    }
  }

  async #migrate(existing: boolean): Promise<void> {
    await this.#ownTransaction(async (client) => {
      const { rows: where } = await client.query(`SELECT current_schema() AS schema, current_database() AS database,
        current_setting('search_path') AS "searchPath",
        current_schema() IS NOT NULL AND to_regclass(quote_ident(current_schema()) || '.schema_migrations') IS NOT NULL AS "setUp"`)
      const { schema, database, searchPath, setUp } = where[0]
      // PostgreSQL's own words for this ("no schema has been selected to create in") name no schema.
      if (schema === null) {
        throw new Error(
          `No schema of search_path (${searchPath}) exists in database "${database}": create it, or fix DATABASE_URL`,
        )
      }
      if (existing && !setUp) {
        throw new DatabaseNotSetUpError(
          `Schema "${schema}" of database "${database}" holds no Animal Store tables: check DATABASE_URL`,
        )
      }
      if (setUp) {
        // Mostly the schema is current: then there is nothing to lock, create or read.
        const { rows } = await client.query('SELECT coalesce(max(version), 0) AS applied FROM schema_migrations')
        if (Number(rows[0].applied) === latestMigration('postgres')) return
      }
      await client.query(MIGRATORS_LOCK)
      await client.query(`CREATE TABLE IF NOT EXISTS schema_migrations (
        version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`)
      const { rows } = await client.query('SELECT coalesce(max(version), 0) AS applied FROM schema_migrations')
      const applied = Number(rows[0].applied)
      const migrations = readMigrations('postgres')
      const tooNew = newerThanCode(applied, migrations)
      if (tooNew) throw tooNew
      for (const migration of migrations.filter((m) => m.version > applied)) {
        await client.query(migration.sql)
        await client.query('INSERT INTO schema_migrations (version, name) VALUES ($1, $2)', [
          migration.version,
          migration.name,
        ])
      }
    })
  }
}

/** One migrator per schema at a time; the lock ends with the transaction. */
const MIGRATORS_LOCK = "SELECT pg_advisory_xact_lock(hashtext('animal-store:' || current_schema()))"

async function loadPg(): Promise<typeof import('pg')> {
  try {
    return await import('pg')
  } catch {
    throw new Error("DATABASE_URL is PostgreSQL, which needs the optional dependency 'pg': npm install pg")
  }
}
