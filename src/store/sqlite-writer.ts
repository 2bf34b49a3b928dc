/**
 * The SQLite writer: runs in a worker thread of SqliteStore, with its own connection.
 *
 * With synchronous=FULL every COMMIT waits for an fsync. On the main thread that wait would stop
 * every request; here it stops only the writer, while the main thread goes on reading, parsing and
 * queueing the next writes. Writes that arrive while a commit is under way are committed together
 * in the next transaction (group commit), each in its own savepoint so that one failing write does
 * not undo the others. A result is posted back only after its COMMIT returned, i.e. is on disk.
 */
import { flushCompileCache } from 'node:module'
import { DatabaseSync, type StatementSync } from 'node:sqlite'
import { parentPort, workerData } from 'node:worker_threads'
import { randomId } from '../domain/api-keys.ts'
import {
  type AnyEventType,
  EVENT_TYPES,
  type EventType,
  eventBody,
  TEST_EVENT_TYPE,
  UNDELIVERED_REASON,
} from '../domain/events.ts'
import type { Event } from '../schemas/events.ts'
import type { Message } from '../schemas/messages.ts'
import type { Order } from '../schemas/orders.ts'
import type { Pet } from '../schemas/pets.ts'
import type { DeliveryStatus } from '../schemas/webhooks.ts'
import { type IdempotencyRow, idempotencyState } from './idempotency.ts'
import { FILE_GONE, fileIdentity, filesIdentity } from './sqlite-file.ts'
import type {
  Account,
  ApiKey,
  ClaimedDelivery,
  DeliveryOutcome,
  IdempotencyClaim,
  IdempotencyRef,
  IdempotencyState,
  PetChanges,
  PlaceOrderResult,
  StoredWebhookEndpoint,
  TransitionResult,
  UpdatePetResult,
  WebhookEndpointChanges,
} from './types.ts'
import { PET_FEED_KEPT } from './types.ts'

/**
 * The feed's rows deleted in one transaction: a backlog (590,000 rows held the writer 627 ms in one
 * DELETE) is pruned a chunk at a time, other writes committing between the chunks.
 */
export const PRUNE_CHUNK = 5000

import { DELIVERY_COLUMNS, ENDPOINT_COLUMNS, type EndpointRow, endpointData, endpointFromRow } from './webhook-rows.ts'

/** A job from the main thread: [id, operation, arguments]. */
export type WriteJob = [number, keyof WriteOps, unknown[]]
/** A result to the main thread: [id, ok, value or error details]. */
export type WriteResult = [number, boolean, unknown]
/** A batch's answer: its results, in order, and the seconds from its BEGIN to its COMMIT returned (for the metrics). */
export type WriterAnswer = [WriteResult[], number]

export interface WriterData {
  path: string
  busyTimeoutMs: number
}

const KEY_COLUMNS = `id, account_id AS accountId, name, prefix, created_at AS createdAt, expires_at AS expiresAt,
  revoked_at AS revokedAt, last_used_at AS lastUsedAt, scopes`
// statusReason follows from the status: only `undelivered` has one (decision 104).
export const MESSAGE_COLUMNS = `id, body AS message, status,
  CASE WHEN status = 'undelivered' THEN '${UNDELIVERED_REASON}' END AS statusReason,
  created_at AS createdAt, attempts, delivered_at AS deliveredAt`
const PET_COLUMNS = 'id, name, category_id AS categoryId, status'
export const ORDER_COLUMNS = `id, pet_id AS petId, status, created_at AS createdAt, expires_at AS expiresAt,
  updated_at AS updatedAt`
/** An order and whose it is (the events it makes go to that account's endpoints). */
type OwnedOrder = Order & { accountId: number }

/** Each of `sql`'s statements prepared on `db`, by the same name (both threads prepare theirs once, at the start). */
export function prepareAll<Name extends string>(
  db: DatabaseSync,
  sql: Record<Name, string>,
): Record<Name, StatementSync> {
  const entries = Object.entries<string>(sql).map(([name, text]) => [name, db.prepare(text)])
  return Object.fromEntries(entries) as Record<Name, StatementSync>
}

function prepareWrites(db: DatabaseSync) {
  return prepareAll(db, {
    begin: 'BEGIN IMMEDIATE',
    commit: 'COMMIT',
    rollback: 'ROLLBACK',
    savepoint: 'SAVEPOINT write',
    release: 'RELEASE write',
    rollbackTo: 'ROLLBACK TO write',
    insertPet: 'INSERT INTO pets (name, category_id, status) VALUES (?, ?, ?)',
    getVersionedPet: `SELECT ${PET_COLUMNS}, version FROM pets WHERE id = ?`,
    updatePet: `UPDATE pets SET name = ?, category_id = ?, status = ?, version = version + 1 WHERE id = ?
      RETURNING ${PET_COLUMNS}, version`,
    // The guarded updates that make one winner: only an available pet is held, only a held one freed.
    holdPet: "UPDATE pets SET status = 'pending', version = version + 1 WHERE id = ? AND status = 'available'",
    releasePet: "UPDATE pets SET status = ?, version = version + 1 WHERE id = ? AND status = 'pending'",
    petExists: 'SELECT 1 FROM pets WHERE id = ?',
    placedOrderFor: "SELECT 1 FROM orders WHERE pet_id = ? AND status = 'placed'",
    insertOrder: `INSERT INTO orders (id, account_id, pet_id, status, created_at, expires_at, updated_at)
      VALUES (?, ?, ?, 'placed', ?, ?, ?) RETURNING ${ORDER_COLUMNS}`,
    getOrder: `SELECT seq, ${ORDER_COLUMNS} FROM orders WHERE id = ? AND account_id = ?`,
    setOrderStatus: `UPDATE orders SET status = ?, updated_at = ? WHERE seq = ? AND status = 'placed'
      RETURNING ${ORDER_COLUMNS}`,
    expireOrders: `UPDATE orders SET status = 'expired', updated_at = ?
      WHERE status = 'placed' AND expires_at <= ? RETURNING ${ORDER_COLUMNS}, account_id AS accountId`,
    expirePetOrder: `UPDATE orders SET status = 'expired', updated_at = ?
      WHERE pet_id = ? AND status = 'placed' AND expires_at <= ? RETURNING ${ORDER_COLUMNS}, account_id AS accountId`,
    insertAccount: `INSERT INTO accounts (email, password_hash, created_at) VALUES (?, ?, ?)
      ON CONFLICT (email) DO NOTHING RETURNING id, email, created_at AS createdAt`,
    setPassword: 'UPDATE accounts SET password_hash = ? WHERE id = ?',
    deleteAccountSessions: 'DELETE FROM sessions WHERE account_id = ?',
    insertSession: `INSERT INTO sessions (id, account_id, created_at, expires_at)
      SELECT ?, id, ?, ? FROM accounts WHERE id = ? AND password_hash IS ?`,
    deleteSession: 'DELETE FROM sessions WHERE id = ?',
    insertKey: `INSERT INTO api_keys (id, account_id, name, prefix, key_hash, created_at, expires_at, scopes)
      VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING ${KEY_COLUMNS}`,
    revokeKey: `UPDATE api_keys SET revoked_at = coalesce(revoked_at, ?)
      WHERE id = ? AND (? IS NULL OR account_id = ?) RETURNING ${KEY_COLUMNS}`,
    touchKey: 'UPDATE api_keys SET last_used_at = ? WHERE id = ? AND (last_used_at IS NULL OR last_used_at < ?)',
    insertMessage: `INSERT INTO messages (id, account_id, body, status, created_at, fanout)
      VALUES (?, ?, ?, 'queued', ?, ?) RETURNING seq, ${MESSAGE_COLUMNS}`,
    // ─── webhooks
    subscribedEndpoints: `SELECT seq FROM webhook_endpoints WHERE account_id = ? AND deleted_at IS NULL
      AND disabled_at IS NULL AND instr(' ' || events || ' ', ' ' || ? || ' ') > 0`,
    logEvent: 'INSERT INTO event_log (id, account_id, type, data, created_at) VALUES (?, ?, ?, ?, ?)',
    insertEvent: `INSERT INTO events (id, account_id, type, body, created_at, traceparent) VALUES (?, ?, ?, ?, ?, ?)
      RETURNING seq`,
    insertDelivery: `INSERT INTO deliveries (id, event_seq, endpoint_seq, message_seq, status, next_attempt_at, created_at)
      VALUES (?, ?, ?, ?, 'pending', ?, ?)`,
    countEndpoints: 'SELECT count(*) AS count FROM webhook_endpoints WHERE account_id = ? AND deleted_at IS NULL',
    insertEndpoint: `INSERT INTO webhook_endpoints (id, account_id, url, events, description, secret, created_at)
      VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING ${ENDPOINT_COLUMNS}`,
    getEndpoint: `SELECT seq, ${ENDPOINT_COLUMNS} FROM webhook_endpoints
      WHERE id = ? AND account_id = ? AND deleted_at IS NULL`,
    updateEndpoint: `UPDATE webhook_endpoints SET url = ?, events = ?, description = ?, disabled_at = ?,
      disabled_reason = ? WHERE seq = ? RETURNING ${ENDPOINT_COLUMNS}`,
    deleteEndpoint: 'UPDATE webhook_endpoints SET deleted_at = ? WHERE seq = ?',
    rotateSecret: `UPDATE webhook_endpoints SET previous_secret = secret, previous_secret_until = ?, secret = ?,
      secret_rotated_at = ? WHERE seq = ? RETURNING ${ENDPOINT_COLUMNS}`,
    disableEndpoint: 'UPDATE webhook_endpoints SET disabled_at = ?, disabled_reason = ? WHERE seq = ?',
    // A live lease stays, with its end: the attempt under way records its outcome, and until then
    // the delivery is not sent again (decision 123). A lease run out goes.
    failEndpointDeliveries: `UPDATE deliveries SET status = 'failed', lease = CASE WHEN next_attempt_at > ? THEN lease END,
      next_attempt_at = CASE WHEN lease IS NOT NULL AND next_attempt_at > ? THEN next_attempt_at END,
      last_error = ? WHERE endpoint_seq = ? AND status = 'pending' RETURNING message_seq AS messageSeq`,
    failMessage: `UPDATE messages SET status = 'failed' WHERE seq = ? AND status = 'queued'
      AND NOT EXISTS (SELECT 1 FROM deliveries WHERE message_seq = messages.seq AND status = 'pending')`,
    deliverMessage: `UPDATE messages SET status = 'delivered', delivered_at = coalesce(delivered_at, ?),
      attempts = attempts + 1 WHERE seq = ?`,
    countMessageAttempt: 'UPDATE messages SET attempts = attempts + 1 WHERE seq = ?',
    requeueMessage: "UPDATE messages SET status = 'queued' WHERE seq = ? AND status = 'failed'",
    redeliverable: `SELECT d.seq, d.message_seq AS messageSeq FROM deliveries d
      JOIN webhook_endpoints w ON w.seq = d.endpoint_seq
      WHERE d.id = ? AND w.account_id = ? AND w.deleted_at IS NULL AND w.disabled_at IS NULL`,
    // Not while an attempt holds a live lease (pending, or failed under it): a second one would send
    // the event twice at once.
    redeliver: `UPDATE deliveries SET status = 'pending', next_attempt_at = ?, lease = NULL, retry_base = attempts
      WHERE seq = ? AND NOT (lease IS NOT NULL AND next_attempt_at > ?)`,
    getDelivery: `SELECT ${DELIVERY_COLUMNS} FROM deliveries d JOIN events e ON e.seq = d.event_seq WHERE d.id = ?`,
    // Each is made due again as a resend makes it; not one whose attempt is still under way (decision 123).
    recoverDeliveries: `UPDATE deliveries SET status = 'pending', next_attempt_at = ?, lease = NULL, retry_base = attempts
      WHERE seq IN (SELECT seq FROM deliveries WHERE endpoint_seq = ? AND status = 'failed' AND created_at >= ?
        AND NOT (lease IS NOT NULL AND next_attempt_at > ?) ORDER BY seq LIMIT ?)
      RETURNING message_seq AS messageSeq`,
    // As recoverDeliveries chooses: not one whose attempt is still under way.
    failedSince: `SELECT 1 FROM deliveries WHERE endpoint_seq = ? AND status = 'failed' AND created_at >= ?
      AND NOT (lease IS NOT NULL AND next_attempt_at > ?) LIMIT 1`,
    // From the endpoint after ?, those with a delivery due and room under ? attempts in flight (leases
    // ending after ?), in turn, no more than ? of them (decision 122): a probe by the primary key and
    // two indexes each.
    offeringEndpoints: `SELECT seq, ? - busy AS room FROM (SELECT w.seq, (SELECT count(*) FROM deliveries b
        WHERE b.endpoint_seq = w.seq AND b.status = 'pending' AND b.lease IS NOT NULL AND b.next_attempt_at > ?) AS busy
      FROM webhook_endpoints w WHERE w.seq > ? AND w.disabled_at IS NULL AND w.deleted_at IS NULL AND EXISTS (SELECT 1
        FROM deliveries d WHERE d.endpoint_seq = w.seq AND d.status = 'pending' AND d.next_attempt_at <= ?)
      ORDER BY w.seq) WHERE busy < ? LIMIT ?`,
    endpointDue: `SELECT seq FROM deliveries
      WHERE endpoint_seq = ? AND status = 'pending' AND next_attempt_at <= ? ORDER BY next_attempt_at LIMIT ?`,
    claimDelivery: `UPDATE deliveries SET lease = ?, next_attempt_at = ?, attempts = attempts + 1 WHERE seq = ?
      RETURNING id, event_seq AS eventSeq, endpoint_seq AS endpointSeq, attempts - retry_base AS attempts`,
    claimedEvent: 'SELECT id, body, traceparent FROM events WHERE seq = ?',
    claimedEndpoint: `SELECT url, secret, CASE WHEN previous_secret_until > ? THEN previous_secret END AS previous
      FROM webhook_endpoints WHERE seq = ?`,
    // A delivery failed under its lease (its endpoint disabled or deleted meanwhile) keeps its
    // failure's reason, unless this attempt delivered it: `failed` is its status unless delivered.
    leasedDelivery: 'SELECT status FROM deliveries WHERE id = ? AND lease = ?',
    recordDelivery: `UPDATE deliveries SET lease = NULL, last_attempt_at = ?, last_status = ?,
      last_error = CASE WHEN status = 'failed' AND ? = 'failed' THEN last_error ELSE ? END,
      status = CASE WHEN status = 'failed' THEN ? ELSE ? END,
      next_attempt_at = CASE WHEN status = 'failed' THEN NULL ELSE ? END, delivered_at = coalesce(?, delivered_at)
      WHERE id = ? AND lease = ? AND status IN ('pending', 'failed')
      RETURNING message_seq AS messageSeq, endpoint_seq AS endpointSeq, status`,
    markUndelivered: "UPDATE messages SET status = 'undelivered' WHERE status = 'queued' AND fanout = 0",
    insertSecret: 'INSERT INTO secrets (name, value) VALUES (?, ?) ON CONFLICT (name) DO NOTHING',
    dropStaleIdempotency: `DELETE FROM idempotency_keys WHERE scope = ? AND key = ?
      AND (expires_at <= ? OR (state = 'in_progress' AND created_at <= ?))`,
    claimIdempotency: `INSERT INTO idempotency_keys (scope, key, fingerprint, state, created_at, expires_at)
      VALUES (?, ?, ?, 'in_progress', ?, ?) ON CONFLICT (scope, key) DO NOTHING RETURNING 1 AS claimed`,
    getIdempotency: `SELECT fingerprint, state, response_status AS status, response_body AS body
      FROM idempotency_keys WHERE scope = ? AND key = ?`,
    completeIdempotency: `UPDATE idempotency_keys SET state = 'done', response_status = ?, response_body = ?
      WHERE scope = ? AND key = ?`,
    releaseIdempotency: "DELETE FROM idempotency_keys WHERE scope = ? AND key = ? AND state = 'in_progress'",
    purgeSessions: 'DELETE FROM sessions WHERE expires_at <= ?',
    prunePetChanges: `DELETE FROM pet_changes WHERE seq IN (SELECT seq FROM pet_changes
      WHERE seq <= (SELECT max(seq) FROM pet_changes) - ? ORDER BY seq LIMIT ?)`,
    purgeIdempotency: 'DELETE FROM idempotency_keys WHERE expires_at <= ?',
    purgeEvents: 'DELETE FROM event_log WHERE created_at < ?',
  })
}

function now(): string {
  return new Date().toISOString()
}

/** Every write the store makes. Each runs inside the batch's transaction, in its own savepoint. */
function writeOps(sql: ReturnType<typeof prepareWrites>) {
  /** The endpoint the last claim served last: the next claim starts after it (decision 122). */
  let servedEndpoint = 0
  const complete = (ref: IdempotencyRef | null, status: number, body: unknown) => {
    if (ref) sql.completeIdempotency.run(status, JSON.stringify(body), ref.scope, ref.key)
  }
  /** Records an event in the account's log, in the caller's transaction; returns it. */
  const record = (accountId: number, type: AnyEventType, at: string, data: unknown): Event => {
    const id = randomId('evt')
    sql.logEvent.run(id, accountId, type, JSON.stringify(data), at)
    return { id, type, createdAt: at, data: data as Event['data'] }
  }
  /** Queues a recorded event in the outbox, with one delivery to each of these endpoints. */
  const queue = (
    accountId: number,
    event: Event,
    endpoints: number[],
    messageSeq: number | null,
    traceparent: string | null,
  ) => {
    const { id, type, createdAt: at, data } = event
    // Due at once: `at` says when the change happened, which a sweep may give ahead of the clock.
    const clock = now()
    const queued = at < clock ? at : clock
    const body = eventBody(type, at, data)
    const { seq } = sql.insertEvent.get(id, accountId, type, body, queued, traceparent) as { seq: number }
    for (const endpoint of endpoints) sql.insertDelivery.run(randomId('dlv'), seq, endpoint, messageSeq, queued, queued)
  }
  /**
   * Records an event and, when endpoints of the account subscribe to its type, queues it with one
   * delivery to each, in the caller's transaction; returns how many endpoints.
   */
  const emit = (
    accountId: number,
    type: EventType,
    at: string,
    data: unknown,
    messageSeq: number | null = null,
    traceparent: string | null = null,
  ) => {
    const endpoints = (sql.subscribedEndpoints.all(accountId, type) as { seq: number }[]).map(({ seq }) => seq)
    const event = record(accountId, type, at, data)
    if (endpoints.length > 0) queue(accountId, event, endpoints, messageSeq, traceparent)
    return endpoints.length
  }
  /** An order's event, for the account that placed it. */
  const emitOrder = ({ accountId, ...order }: OwnedOrder, type: EventType): Order => {
    emit(accountId, type, order.updatedAt, order)
    return order
  }
  /** Expires the pet's placed order if its hold has ended, freeing the pet; returns it. */
  const expireHeld = (petId: number, at: string): Order | undefined => {
    const expired = sql.expirePetOrder.get(at, petId, at) as OwnedOrder | undefined
    if (!expired) return undefined
    sql.releasePet.run('available', petId)
    return emitOrder(expired, 'order.expired')
  }
  /** Fails an endpoint's pending deliveries, and the messages left with none pending. */
  const failDeliveries = (endpointSeq: number, reason: string) => {
    const at = now()
    const failed = sql.failEndpointDeliveries.all(at, at, reason, endpointSeq) as { messageSeq: number | null }[]
    for (const { messageSeq } of failed) if (messageSeq !== null) sql.failMessage.run(messageSeq)
  }
  const endpointOf = (accountId: number, id: string) =>
    sql.getEndpoint.get(id, accountId) as (EndpointRow & { seq: number; disabledAt: string | null }) | undefined
  return {
    /** Returns the new pet's id: the row holds what was given (a STRICT table stores values as they are). */
    createPet(name: string, categoryId: number, status: Pet['status'], idempotency: IdempotencyRef | null): number {
      const id = Number(sql.insertPet.run(name, categoryId, status).lastInsertRowid)
      if (idempotency) complete(idempotency, 201, { id, name, categoryId, status })
      return id
    },
    updatePet(id: number, changes: PetChanges, ifVersion: number | null): UpdatePetResult {
      // A hold that has ended frees the pet first, as placeOrder does: else its order, which can
      // no longer move, would hold the pet until the sweep.
      if (changes.status !== undefined) expireHeld(id, now())
      const current = sql.getVersionedPet.get(id) as (Pet & { version: number }) | undefined
      if (!current) return { refused: 'not_found' }
      if (ifVersion !== null && current.version !== ifVersion) return { refused: 'version_mismatch' }
      const { version, ...pet } = current
      const next = { ...pet, ...changes }
      if (next.status !== pet.status && (next.status === 'pending' || sql.placedOrderFor.get(id))) {
        return { refused: 'held' }
      }
      if (next.name === pet.name && next.categoryId === pet.categoryId && next.status === pet.status) {
        return { updated: { pet, version } }
      }
      const row = sql.updatePet.get(next.name, next.categoryId, next.status, id) as unknown as Pet & { version: number }
      const { version: moved, ...updated } = row
      return { updated: { pet: updated, version: moved } }
    },
    placeOrder(
      accountId: number,
      petId: number,
      holdMs: number,
      idempotency: IdempotencyRef | null,
      traceparent: string | null = null,
    ) {
      const at = now()
      const expiresAt = new Date(Date.parse(at) + holdMs).toISOString()
      expireHeld(petId, at)
      if (sql.holdPet.run(petId).changes === 0) {
        return { refused: sql.petExists.get(petId) ? 'pet_not_available' : 'pet_not_found' } as PlaceOrderResult
      }
      const order = sql.insertOrder.get(randomId('ord'), accountId, petId, at, expiresAt, at) as unknown as Order
      emit(accountId, 'order.placed', at, order, null, traceparent)
      complete(idempotency, 201, order)
      return { placed: order } as PlaceOrderResult
    },
    transitionOrder(
      accountId: number,
      id: string,
      to: 'completed' | 'canceled',
      traceparent: string | null = null,
    ): TransitionResult {
      const at = now()
      const found = sql.getOrder.get(id, accountId) as (Order & { seq: number }) | undefined
      if (!found) return { refused: 'not_found' }
      const { seq, ...order } = found
      // A hold that has ended expires now, whatever the sweep has done yet.
      const current =
        order.status === 'placed' && order.expiresAt <= at ? (expireHeld(order.petId, at) ?? order) : order
      if (current.status === to) return { order: current, changed: false }
      if (current.status !== 'placed') return { refused: 'conflict', order: current }
      const updated = sql.setOrderStatus.get(to, at, seq) as unknown as Order
      sql.releasePet.run(to === 'completed' ? 'sold' : 'available', order.petId)
      emit(accountId, to === 'completed' ? 'order.completed' : 'order.canceled', at, updated, null, traceparent)
      return { order: updated, changed: true }
    },
    expireOrders(at: string): Order[] {
      const expired = sql.expireOrders.all(at, at) as unknown as OwnedOrder[]
      return expired.map((order) => {
        sql.releasePet.run('available', order.petId)
        return emitOrder(order, 'order.expired')
      })
    },
    createAccount(email: string, passwordHash: string | null): Account | null {
      return (sql.insertAccount.get(email, passwordHash, now()) as Account | undefined) ?? null
    },
    setAccountPassword(accountId: number, passwordHash: string): boolean {
      if (sql.setPassword.run(passwordHash, accountId).changes === 0) return false
      sql.deleteAccountSessions.run(accountId)
      return true
    },
    createSession(hash: string, accountId: number, expiresAt: string, passwordHash: string | null): boolean {
      return sql.insertSession.run(hash, now(), expiresAt, accountId, passwordHash).changes > 0
    },
    deleteSession(hash: string): void {
      sql.deleteSession.run(hash)
    },
    createApiKey(
      accountId: number,
      name: string,
      prefix: string,
      hash: string,
      expiresAt: string | null,
      scopes: string | null,
    ): ApiKey {
      return sql.insertKey.get(
        randomId('key'),
        accountId,
        name,
        prefix,
        hash,
        now(),
        expiresAt,
        scopes,
      ) as unknown as ApiKey
    },
    revokeApiKey(id: string, accountId: number | null): ApiKey | null {
      return (sql.revokeKey.get(now(), id, accountId, accountId) as ApiKey | undefined) ?? null
    },
    touchApiKeys(usages: { id: string; at: string }[]): void {
      for (const { id, at } of usages) sql.touchKey.run(at, id, at)
    },
    createMessage(
      accountId: number,
      text: string,
      idempotency: IdempotencyRef | null,
      traceparent: string | null = null,
    ): Message {
      const at = now()
      const fanout = (sql.subscribedEndpoints.all(accountId, 'message.created') as unknown[]).length
      const row = sql.insertMessage.get(randomId('msg'), accountId, text, at, fanout) as unknown as Message & {
        seq: number
      }
      const { seq, ...message } = row
      emit(accountId, 'message.created', at, message, seq, traceparent)
      complete(idempotency, 202, message)
      return message
    },
    createWebhookEndpoint(
      accountId: number,
      url: string,
      events: EventType[],
      description: string,
      secret: string,
      max: number | null,
      idempotency: IdempotencyRef | null,
    ): StoredWebhookEndpoint | null {
      // Writes take turns (one writer, and BEGIN IMMEDIATE between processes): this count holds.
      if (max !== null && (sql.countEndpoints.get(accountId) as { count: number }).count >= max) return null
      const row = sql.insertEndpoint.get(
        randomId('we'),
        accountId,
        url,
        eventList(events),
        description,
        secret,
        now(),
      ) as unknown as EndpointRow
      const endpoint = endpointFromRow(row)
      complete(idempotency, 201, endpoint)
      return endpoint
    },
    updateWebhookEndpoint(accountId: number, id: string, changes: WebhookEndpointChanges) {
      const current = endpointOf(accountId, id)
      if (!current) return null
      const at = now()
      let { disabledAt, disabledReason } = current
      if (changes.enabled === true) [disabledAt, disabledReason] = [null, null]
      if (changes.enabled === false && disabledAt === null) {
        ;[disabledAt, disabledReason] = [at, 'disabled by the account']
        failDeliveries(current.seq, 'endpoint disabled')
      }
      const row = sql.updateEndpoint.get(
        changes.url ?? current.url,
        changes.events ? eventList(changes.events) : current.events,
        changes.description ?? current.description,
        disabledAt,
        disabledReason,
        current.seq,
      ) as unknown as EndpointRow
      return endpointFromRow(row)
    },
    deleteWebhookEndpoint(accountId: number, id: string): boolean {
      const current = endpointOf(accountId, id)
      if (!current) return false
      sql.deleteEndpoint.run(now(), current.seq)
      failDeliveries(current.seq, 'endpoint deleted')
      return true
    },
    rotateWebhookSecret(accountId: number, id: string, secret: string, previousUntil: string) {
      const current = endpointOf(accountId, id)
      if (!current) return null
      return endpointFromRow(sql.rotateSecret.get(previousUntil, secret, now(), current.seq) as unknown as EndpointRow)
    },
    redeliver(accountId: number, deliveryId: string) {
      const row = sql.redeliverable.get(deliveryId, accountId) as { seq: number; messageSeq: number | null } | undefined
      if (!row) return null
      const at = now()
      const resent = sql.redeliver.run(at, row.seq, at).changes > 0
      if (resent && row.messageSeq !== null) sql.requeueMessage.run(row.messageSeq)
      return { delivery: sql.getDelivery.get(deliveryId), resent }
    },
    sendTestEvent(accountId: number, endpointId: string, traceparent: string | null = null): Event | null {
      const endpoint = endpointOf(accountId, endpointId)
      if (!endpoint || endpoint.disabledAt !== null) return null
      const event = record(accountId, TEST_EVENT_TYPE, now(), endpointData(endpoint))
      queue(accountId, event, [endpoint.seq], null, traceparent)
      return event
    },
    recoverDeliveries(accountId: number, endpointId: string, since: string, limit: number) {
      const endpoint = endpointOf(accountId, endpointId)
      if (!endpoint || endpoint.disabledAt !== null) return null
      const at = now()
      const recovered = sql.recoverDeliveries.all(at, endpoint.seq, since, at, limit) as { messageSeq: number | null }[]
      for (const { messageSeq } of recovered) if (messageSeq !== null) sql.requeueMessage.run(messageSeq)
      return { queued: recovered.length, more: sql.failedSince.get(endpoint.seq, since, at) !== undefined }
    },
    claimDeliveries(limit: number, leaseMs: number, perEndpoint: number, attemptMs: number): ClaimedDelivery[] {
      const at = now()
      const lease = randomId('lease')
      const until = new Date(Date.parse(at) + leaseMs).toISOString()
      // A lease is an attempt in flight until its attempt's bound: past it, its holder has died.
      const busyAfter = new Date(Date.parse(at) + leaseMs - attemptMs).toISOString()
      // The endpoints after the last one served first, then from the first: each gets its turn. Each
      // offers its oldest due deliveries up to its room; the first of each is taken, then the second.
      const offering = (after: number, max: number) =>
        sql.offeringEndpoints.all(perEndpoint, busyAfter, after, at, perEndpoint, max) as {
          seq: number
          room: number
        }[]
      const endpoints = offering(servedEndpoint, limit)
      if (endpoints.length < limit && servedEndpoint > 0) {
        const taken = new Set(endpoints.map(({ seq }) => seq))
        endpoints.push(...offering(0, limit - endpoints.length).filter(({ seq }) => !taken.has(seq)))
      }
      const offered: { seq: number; endpoint: number; turn: number }[] = []
      for (const endpoint of endpoints) {
        const due = sql.endpointDue.all(endpoint.seq, at, Math.min(endpoint.room, limit)) as { seq: number }[]
        offered.push(...due.map(({ seq }, turn) => ({ seq, endpoint: endpoint.seq, turn })))
      }
      // In turn, and within a turn in the order the endpoints were found (after the last one served).
      const order = new Map(endpoints.map(({ seq }, i) => [seq, i]))
      offered.sort((a, b) => a.turn - b.turn || (order.get(a.endpoint) ?? 0) - (order.get(b.endpoint) ?? 0))
      const chosen = offered.slice(0, limit)
      if (chosen.length > 0) servedEndpoint = (chosen.at(-1) as { endpoint: number }).endpoint
      return chosen.map(({ seq }) => {
        const { id, eventSeq, endpointSeq, attempts } = sql.claimDelivery.get(lease, until, seq) as {
          id: string
          eventSeq: number
          endpointSeq: number
          attempts: number
        }
        const event = sql.claimedEvent.get(eventSeq) as { id: string; body: string; traceparent: string | null }
        const endpoint = sql.claimedEndpoint.get(at, endpointSeq) as {
          url: string
          secret: string
          previous: string | null
        }
        const secrets = endpoint.previous === null ? [endpoint.secret] : [endpoint.secret, endpoint.previous]
        const { traceparent } = event
        return { id, lease, eventId: event.id, body: event.body, url: endpoint.url, secrets, attempts, traceparent }
      })
    },
    recordDelivery(outcome: DeliveryOutcome): DeliveryStatus | null {
      const { at, answeredAt, delivered, retryAt } = outcome
      const status = delivered ? 'delivered' : retryAt !== null ? 'pending' : 'failed'
      const ended = delivered ? 'delivered' : 'failed'
      // A 410 for a delivery failed meanwhile (its endpoint disabled, deleted, or enabled again since)
      // disables nothing.
      const held = sql.leasedDelivery.get(outcome.id, outcome.lease) as { status: string } | undefined
      const row = sql.recordDelivery.get(
        at,
        outcome.status,
        ended,
        outcome.error,
        ended,
        status,
        delivered ? null : retryAt,
        delivered ? answeredAt : null,
        outcome.id,
        outcome.lease,
      ) as { messageSeq: number | null; endpointSeq: number; status: DeliveryStatus } | undefined
      if (!row) return null
      if (row.messageSeq !== null) {
        if (delivered) sql.deliverMessage.run(answeredAt, row.messageSeq)
        else {
          sql.countMessageAttempt.run(row.messageSeq)
          if (status === 'failed') sql.failMessage.run(row.messageSeq)
        }
      }
      if (outcome.disableEndpoint && held?.status === 'pending') {
        sql.disableEndpoint.run(at, 'answered 410 Gone', row.endpointSeq)
        failDeliveries(row.endpointSeq, 'endpoint disabled')
      }
      return row.status
    },
    markUndeliveredMessages(): number {
      return Number(sql.markUndelivered.run().changes)
    },
    insertSecret(name: string, value: string): void {
      sql.insertSecret.run(name, value)
    },
    claimIdempotencyKey(claim: IdempotencyClaim): IdempotencyState {
      const at = now()
      sql.dropStaleIdempotency.run(claim.scope, claim.key, at, claim.staleBefore)
      if (sql.claimIdempotency.get(claim.scope, claim.key, claim.fingerprint, at, claim.expiresAt)) {
        return { state: 'claimed' }
      }
      const row = sql.getIdempotency.get(claim.scope, claim.key) as unknown as IdempotencyRow
      return idempotencyState(row, claim.fingerprint)
    },
    releaseIdempotencyKey(scope: string, key: string): void {
      sql.releaseIdempotency.run(scope, key)
    },
    /** Deletes up to PRUNE_CHUNK of the feed's rows past the newest PET_FEED_KEPT.rows; returns how many. */
    prunePetChanges(): number {
      return Number(sql.prunePetChanges.run(PET_FEED_KEPT.rows, PRUNE_CHUNK).changes)
    },
    purgeExpired(at: string, eventsBefore: string): number {
      sql.purgeEvents.run(eventsBefore)
      return Number(sql.purgeSessions.run(at).changes) + Number(sql.purgeIdempotency.run(at).changes)
    },
  }
}

export type WriteOps = ReturnType<typeof writeOps>

/** Event types as stored: known ones, each once, in the catalogue's order, separated by spaces. */
function eventList(events: EventType[]): string {
  return EVENT_TYPES.filter((type) => events.includes(type)).join(' ')
}

/** Details of a failed write that survive the trip to the main thread (an Error's own fields do not all). */
function describe(error: unknown): Record<string, unknown> {
  const { message, code, errcode, errstr } = (error ?? {}) as Record<string, unknown>
  return { message: String(message ?? error), code, errcode, errstr }
}

/**
 * Commits batches of writes on `db`, each batch in one transaction; returns each write's result.
 * The writer thread runs it for the batches that reach it, and SqliteStore itself on its own
 * connection when it writes directly (StoreOptions.direct), one write at a time: the same
 * statements, and the same checks, on either thread.
 */
export function batchCommitter(db: DatabaseSync, path: string): (batch: WriteJob[]) => WriteResult[] {
  const sql = prepareWrites(db)
  // Looked up in a Map: an operation's name arrives as a new string with each message, and an
  // object's keyed lookup by such a string threw V8's optimized code out on every batch.
  const ops = new Map(Object.entries(writeOps(sql)) as [string, (...args: unknown[]) => unknown][])
  const identity = fileIdentity(path)
  const identities = filesIdentity(path)

  /**
   * Runs a batch in one transaction. Without savepoints (the usual case: writes seldom fail, and a
   * savepoint costs two more statements per write), the first failing write undoes the batch and
   * the result is null: the caller runs it again with a savepoint per write, so that the failing
   * write fails alone. A write alone in its batch needs none: its failure is the transaction's.
   */
  const runBatch = (batch: WriteJob[], savepoints: boolean): WriteResult[] | null => {
    const results: WriteResult[] = []
    sql.begin.run()
    for (const [id, op, args] of batch) {
      const run = ops.get(op) as (...args: unknown[]) => unknown
      if (savepoints) sql.savepoint.run()
      try {
        results.push([id, true, run(...args)])
        if (savepoints) sql.release.run()
      } catch (error) {
        if (!savepoints) {
          // Some failures (a full disk, an I/O error) have ended the transaction already.
          if (db.isTransaction) sql.rollback.run()
          return batch.length === 1 ? [[id, false, describe(error)]] : null
        }
        sql.rollbackTo.run()
        sql.release.run()
        results.push([id, false, describe(error)])
      }
    }
    sql.commit.run()
    return results
  }

  return (batch) => {
    try {
      // A file no longer at its path (moved, deleted, replaced) is not where the data is read and
      // kept: refuse the batch without writing it there. Checked again after the commit, in case it
      // went meanwhile; then the writes may be in the moved file, as with any lost answer.
      if (fileIdentity(path) !== identity) throw new Error(`${FILE_GONE}: ${path}`)
      const results = runBatch(batch, false) ?? (runBatch(batch, true) as WriteResult[])
      // The -wal and -shm too: a commit into a removed -wal is lost like one into a removed file.
      if (filesIdentity(path) !== identities) throw new Error(`${FILE_GONE}: ${path}`)
      return results
    } catch (error) {
      if (db.isTransaction) sql.rollback.run()
      return batch.map(([id]): WriteResult => [id, false, describe(error)])
    }
  }
}

/** The connection's settings for writing: each commit waits for its fsync. */
export function writeSettings(db: DatabaseSync, busyTimeoutMs: number): void {
  db.exec(`PRAGMA busy_timeout = ${busyTimeoutMs}`)
  db.exec('PRAGMA synchronous = FULL')
  db.exec('PRAGMA foreign_keys = ON')
}

function startWriter(port: NonNullable<typeof parentPort>, data: WriterData): void {
  const db = new DatabaseSync(data.path)
  writeSettings(db, data.busyTimeoutMs)
  const commit = batchCommitter(db, data.path)
  let queue: WriteJob[] = []
  let scheduled = false

  const flush = () => {
    scheduled = false
    const batch = queue
    queue = []
    const started = performance.now()
    const results = commit(batch)
    port.postMessage([results, (performance.now() - started) / 1000] satisfies WriterAnswer)
  }

  port.on('message', (message: WriteJob[] | 'close') => {
    if (message === 'close') {
      if (queue.length > 0) flush()
      db.close()
      port.close()
      return
    }
    queue.push(...message)
    // Let every job already waiting in the port join this batch before committing it.
    if (!scheduled) {
      scheduled = true
      setImmediate(flush)
    }
  })
  port.postMessage('ready')
  // This thread's share of the compile cache (see src/server.ts).
  flushCompileCache()
}

if (parentPort) startWriter(parentPort, workerData as WriterData)
