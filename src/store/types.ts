/**
 * The storage contract. One implementation per database (sqlite.ts, postgres.ts), each with the
 * sections in this order, each proven by the same suite (test/store/contract.ts).
 *
 * Rules for every implementation:
 * - Methods return domain values (or null for "absent"), never HTTP, and take no request.
 * - A write resolves only once it is durable (committed and, for SQLite, fsynced).
 * - Ids: pets get increasing int64 ids from 1, never above Number.MAX_SAFE_INTEGER, never reused;
 *   accounts likewise; keys and messages get random prefixed string ids (`key_…`, `msg_…`).
 * - Timestamps are ISO 8601 UTC strings with milliseconds and `Z`.
 * - Pets change through updatePet and orders; each change moves the pet's `version` (its ETag).
 * - One placed order per pet, enforced by the database (a guarded update and a unique index), never
 *   by a lock in one process: orders on one pet from any number of instances have one winner.
 * - Events (the webhook outbox): a write that makes an event (a message, an order's transition)
 *   stores it, with one delivery per subscribed endpoint, in the same transaction as the change;
 *   and, subscribed or not, its row in the account's event log (the same id), kept until purged.
 *   A delivery is worked on by one holder of its lease at a time; an outcome recorded under a lease
 *   that was lost (it ran out and another instance took it) is ignored.
 */
import type { Event } from '../schemas/events.ts'
import type { Message, MessageStatus } from '../schemas/messages.ts'
import type { Inventory, Order, OrderStatus } from '../schemas/orders.ts'
import type { NewPet, Pet, PetStatus } from '../schemas/pets.ts'
import type {
  AnyEventType,
  Delivery,
  DeliveryStatus,
  EventType,
  Recovery,
  WebhookEndpoint,
} from '../schemas/webhooks.ts'

export { DatabaseUnavailableError } from '../errors.ts'

/** The database named is not one the service has set up, and the caller asked not to set it up (StoreOptions.existing). */
export class DatabaseNotSetUpError extends Error {
  override name = 'DatabaseNotSetUpError'
}

export interface ListPetsOptions {
  /** 1 to 100. */
  limit: number
  status?: PetStatus
  /** Return only pets with an id greater than this (keyset pagination). */
  afterId?: number
}

export interface PetPage {
  /** At most `limit` pets, ordered by id ascending. */
  pets: Pet[]
  /** When more pets match after this page: the id to pass as `afterId` for the next one. */
  nextAfterId: number | null
}

/** One change to a pet: its status before (null: created) and after (null: deleted). */
export interface PetChange {
  petId: number
  from: PetStatus | null
  to: PetStatus | null
}

export interface PetFeed {
  changes: PetChange[]
  cursor: string
  reset: boolean
}

/** Feed rows kept (SQLite, by count) or minutes kept (PostgreSQL, by age) when pruned: far past any live reader. */
export const PET_FEED_KEPT = { rows: 10_000, minutes: 10 }

/** Feed rows answered at once at most; more is answered as `reset`, cheaper than forgetting each. */
export const PET_FEED_PAGE = 1000

/** A pet and its version: a number that moves with every change to it (its ETag). */
export interface VersionedPet {
  pet: Pet
  version: number
}

/** The fields a PATCH may change, already merged by the caller (JSON Merge Patch). */
export interface PetChanges {
  name?: string
  categoryId?: number
  status?: PetStatus
}

export type UpdatePetResult =
  | { updated: VersionedPet }
  /** No such pet. */
  | { refused: 'not_found' }
  /** `ifVersion` was given and the pet has another version now. */
  | { refused: 'version_mismatch' }
  /** A placed order holds the pet, or `pending` was asked for: only orders hold pets. */
  | { refused: 'held' }

export interface PlaceOrder {
  accountId: number
  petId: number
  /** How long the hold lasts from the order's creation (its expiresAt − createdAt), unless completed or canceled first. */
  holdMs: number
}

export type PlaceOrderResult =
  | { placed: Order }
  | { refused: 'pet_not_found' }
  /** The pet is not `available` (another order holds it, or it is sold). */
  | { refused: 'pet_not_available' }

export type TransitionResult =
  /** `changed` is false when the order already had that status (a repeated request). */
  | { order: Order; changed: boolean }
  | { refused: 'not_found' }
  /** The order is in another final state; `order` says which. */
  | { refused: 'conflict'; order: Order }

export interface ListOrdersOptions {
  accountId: number
  /** 1 to 100. */
  limit: number
  status?: OrderStatus
  petId?: number
  /** Return only orders placed before this position (keyset pagination, newest first). */
  before?: number
}

export interface OrderPage {
  orders: Order[]
  /** When more orders match after this page: the position to pass as `before`. */
  next: number | null
}

export interface ListMessagesOptions {
  accountId: number
  /** 1 to 100. */
  limit: number
  status?: MessageStatus
  /** Return only messages sent before this position (keyset pagination, newest first). */
  before?: number
}

export interface MessagePage {
  messages: Message[]
  /** When more messages match after this page: the position to pass as `before`. */
  next: number | null
}

export interface ListEventsOptions {
  accountId: number
  /** 1 to 100. */
  limit: number
  /** Only events of these types; absent: of every type. */
  types?: AnyEventType[]
  /** Only events that happened after this instant (ISO 8601 UTC with milliseconds, as toISOString writes it). */
  createdAfter?: string
  /** Return only events recorded before this position (keyset pagination, newest first). */
  before?: number
}

export interface EventPage {
  events: Event[]
  /** When more events match after this page: the position to pass as `before`. */
  next: number | null
}

/**
 * The secret (`secret(name)`) that seals the event stream's positions. A backup's copy has none
 * (src/store/sqlite-backup.ts): restored, it refuses the positions given after the backup, whose
 * seq its log will give again to other events (decision 121).
 */
export const STREAM_POSITIONS_SECRET = 'event-stream-positions'

/**
 * Where a reader of the event feed stands, in commit order: by transaction (`tx`, PostgreSQL's
 * xid8; always 0 on SQLite, whose commits are serial), then by `seq` (decision 116).
 */
export interface FeedPosition {
  tx: bigint
  seq: number
}

/** An event as the live stream reads it: with its account and its position in the feed. */
export interface FeedEvent {
  event: Event
  accountId: number
  position: FeedPosition
}

export interface EventFeedPage {
  /** Every account's events after the position asked for, in commit order. */
  events: FeedEvent[]
  /** Where the reader stands after them: the last one's position, or the one asked for when none. */
  position: FeedPosition
}

export interface AccountEventsOptions {
  accountId: number
  /** Events after this position… */
  after: FeedPosition
  /** …up to this one, included: a position the feed has already passed. */
  upto: FeedPosition
  types?: AnyEventType[]
  /** 1 to 1000. */
  limit: number
}

export interface NewWebhookEndpoint {
  accountId: number
  url: string
  events: EventType[]
  description: string
  /** `whsec_…`: kept, since every delivery is signed with it. */
  secret: string
  /** The most endpoints the account may have: at that many, nothing is stored (none: no cap). */
  max?: number
}

/** An endpoint as the account sees it, with its secret(s) for the portal and the owner's reads. */
export interface StoredWebhookEndpoint extends WebhookEndpoint {
  secret: string
}

export interface WebhookEndpointChanges {
  url?: string
  events?: EventType[]
  description?: string
  /** true: enabled again (and `disabledReason` cleared); false: disabled by the account. */
  enabled?: boolean
}

/** A delivery due now, leased to one deliverer until `leaseUntil`. */
export interface ClaimedDelivery {
  id: string
  /** Proves the lease when the outcome is recorded. */
  lease: string
  /** The event's id: the `webhook-id`, the same on every attempt. */
  eventId: string
  /** The exact bytes to send, the same on every attempt. */
  body: string
  url: string
  /** The endpoint's current secret, then its previous one while that still signs. */
  secrets: string[]
  /** Attempts made, this one included, since the delivery was made or last sent again by hand: its step on the retry schedule. */
  attempts: number
  /** The W3C traceparent of the request that made the event, when tracing was on: its attempts continue that trace. */
  traceparent: string | null
}

/** A resend's result: the delivery as it is now, and whether it was made due again (Store.redeliver). */
export interface Redelivery {
  delivery: Delivery
  resent: boolean
}

export interface DeliveryOutcome {
  id: string
  lease: string
  /** When the attempt was made. */
  at: string
  /** When the attempt ended, its answer in (a delivery's and its message's `deliveredAt`). */
  answeredAt: string
  delivered: boolean
  status: number | null
  error: string | null
  /** When not delivered: when to try again, or null to give up (the delivery fails). */
  retryAt: string | null
  /** A `410 Gone`: the endpoint is disabled, and its pending deliveries fail. */
  disableEndpoint: boolean
}

export interface OutboxStats {
  /** Deliveries not yet delivered nor failed. */
  depth: number
  /** When the oldest of them was queued, or null. */
  oldestAt: string | null
}

/** What a store tells the metrics about itself (src/observability/metrics.ts). */
export interface StoreStats {
  /** PostgreSQL: the pool's connections, open, idle, and callers waiting for one. */
  pool?: { total: number; idle: number; waiting: number }
  /** PostgreSQL: statements and transactions that failed (each attempt) since the store opened. */
  queryErrors?: number
}

/** SQLite: one writer batch committed (or failed): how many writes, and seconds from BEGIN to COMMIT returned. */
export type WriterBatchListener = (size: number, seconds: number) => void

export interface Account {
  id: number
  email: string
  createdAt: string
}

export interface ApiKey {
  id: string
  accountId: number
  name: string
  /** The first characters of the secret, e.g. `as_live_3kTM`, to recognise a key. Never the secret. */
  prefix: string
  createdAt: string
  expiresAt: string | null
  revokedAt: string | null
  lastUsedAt: string | null
  /** What the key may do: scopes separated by spaces (as OAuth writes them); null, every scope. */
  scopes: string | null
}

export interface NewApiKey {
  accountId: number
  name: string
  prefix: string
  /** SHA-256 of the secret (see api-keys.ts). The secret itself is never stored. */
  hash: string
  expiresAt: string | null
  /** Space-separated scopes; null or absent: every scope (keys made before scopes existed). */
  scopes?: string | null
}

export interface NewSession {
  hash: string
  accountId: number
  expiresAt: string
  passwordHash: string | null
}

export interface Session {
  accountId: number
  email: string
  expiresAt: string
}

/** Ties a write to the Idempotency-Key it was sent with (see claimIdempotencyKey). */
export interface IdempotencyRef {
  /** Whose key space: the id of the API key that sent the request. */
  scope: string
  key: string
}

export interface IdempotencyClaim extends IdempotencyRef {
  /** Hash of what the request asks for (method, path, body): the same key must mean the same request. */
  fingerprint: string
  /** When the record may be forgotten and the key reused. */
  expiresAt: string
  /** An unfinished claim older than this belongs to a request that died, and may be taken over. */
  staleBefore: string
}

export type IdempotencyState =
  | { state: 'claimed' }
  | { state: 'in_progress' }
  | { state: 'mismatch' }
  | { state: 'done'; status: number; body: string }

export interface Store {
  // ─── LIFECYCLE ───────────────────────────────────────────────────────────────────────────────
  /**
   * Resolves when the database answers a trivial query and this store can write to it; rejects
   * otherwise (SQLite: also for a few seconds after a write failed for want of the database).
   */
  ping(): Promise<void>
  /** Finishes pending writes and releases the database. Safe to call twice. */
  close(): Promise<void>
  /** Counters and gauges of the store itself, read without a round-trip. */
  stats(): StoreStats
  /** SQLite only: calls `listener` after each batch of the writer thread. */
  onWriterBatch?(listener: WriterBatchListener): void

  // ─── PETS ────────────────────────────────────────────────────────────────────────────────────
  /**
   * Stores a pet (`status` defaults to `available`) and returns it with its new id. With an
   * idempotency reference, the claim is completed with the response in the same transaction.
   */
  createPet(pet: NewPet, idempotency?: IdempotencyRef): Promise<Pet>
  /** The pet with this id, or null. */
  getPet(id: number): Promise<Pet | null>
  /** One page of pets in id order, optionally of one status, after a given id. */
  listPets(options: ListPetsOptions): Promise<PetPage>
  /**
   * The pet change feed (decision 98): the changes to pets committed after `cursor` by any process,
   * and the cursor to ask from next; `cursor` null asks only for that cursor. Each reader keeps its
   * own cursor. `reset`: what came after the cursor is not all there (pruned, or more than
   * PET_FEED_PAGE), so any pet read before may have changed. With `petFeed` 'on-read' (SQLite) it
   * answers synchronously with one look up an index, cheap enough once per turn of the event loop;
   * with 'polled' (PostgreSQL) it is a query, for a timer.
   */
  petChanges(cursor: string | null): PetFeed | Promise<PetFeed>
  readonly petFeed: 'on-read' | 'polled'

  /** The pet with its version, or null. */
  getVersionedPet(id: number): Promise<VersionedPet | null>
  /**
   * Applies `changes` to a pet in one transaction. A pet held by a placed order cannot change
   * status (an order whose hold has ended is expired first, freeing the pet), and no pet becomes
   * `pending` this way; with `ifVersion`, only that version is changed.
   */
  updatePet(id: number, changes: PetChanges, ifVersion?: number): Promise<UpdatePetResult>
  /** How many pets have each status; every status is present. */
  inventory(): Promise<Inventory>

  // ─── ORDERS ──────────────────────────────────────────────────────────────────────────────────
  /**
   * Places an order and makes its pet `pending`, in one transaction, only if the pet is
   * `available`. With an idempotency reference, the claim is completed with the order (201).
   */
  placeOrder(order: PlaceOrder, idempotency?: IdempotencyRef): Promise<PlaceOrderResult>
  /** The account's order with this id, or null (another account's order is null too). */
  getOrder(accountId: number, id: string): Promise<Order | null>
  /** One page of the account's orders, newest first. */
  listOrders(options: ListOrdersOptions): Promise<OrderPage>
  /**
   * Moves a placed order to `completed` (its pet to `sold`) or `canceled` (its pet to
   * `available`), in one transaction. A placed order whose hold has ended expires first.
   */
  transitionOrder(accountId: number, id: string, to: 'completed' | 'canceled'): Promise<TransitionResult>
  /** Expires every placed order whose hold ended by `now`, freeing their pets; returns them. */
  expireOrders(now: string): Promise<Order[]>
  /** How many orders (of every account) have each status; every status is present. */
  orderCounts(): Promise<Record<OrderStatus, number>>

  // ─── ACCOUNTS ────────────────────────────────────────────────────────────────────────────────
  /**
   * Creates an account, optionally with a password hash (portal sign-up); null when the email
   * (compared case-insensitively) is taken. Emails are stored lower-case.
   */
  createAccount(email: string, passwordHash?: string): Promise<Account | null>
  /** The account with this email (case-insensitive), or null. */
  findAccountByEmail(email: string): Promise<Account | null>
  /** The account and its password hash (null when it has none, e.g. made by the CLI), or null. */
  findAccountLogin(email: string): Promise<{ account: Account; passwordHash: string | null } | null>
  /**
   * Sets or replaces an account's password hash and ends the account's portal sessions, in one
   * transaction (a new password signs every browser out); false when no such account.
   */
  setAccountPassword(accountId: number, passwordHash: string): Promise<boolean>

  // ─── SESSIONS ────────────────────────────────────────────────────────────────────────────────
  /**
   * Stores a portal session under the hash of its token, if the account's password hash is still
   * `passwordHash` (the one the password was checked against; null: none). A password set since
   * then wins: no session is stored, and false is returned. Together with setAccountPassword this
   * leaves no session made with a password that was replaced, however the two interleave.
   */
  createSession(session: NewSession): Promise<boolean>
  /** The unexpired session with this token hash, or null. */
  findSession(hash: string): Promise<Session | null>
  deleteSession(hash: string): Promise<void>

  // ─── API KEYS ────────────────────────────────────────────────────────────────────────────────
  createApiKey(key: NewApiKey): Promise<ApiKey>
  /** Keys of an account, newest first, revoked and expired ones included. */
  listApiKeys(accountId: number): Promise<ApiKey[]>
  /** The key whose secret has this hash, revoked or not, or null. */
  findApiKeyByHash(hash: string): Promise<ApiKey | null>
  /**
   * Marks a key revoked (keeping the first revocation time) and returns it; null when no such key,
   * or when `accountId` is given and the key belongs to another account.
   */
  revokeApiKey(id: string, accountId?: number): Promise<ApiKey | null>
  /** Records when keys were last used (best effort, batched by the caller). */
  touchApiKeys(usages: { id: string; at: string }[]): Promise<void>

  // ─── MESSAGES ────────────────────────────────────────────────────────────────────────────────
  /**
   * Stores a message of an account with status `queued` (idempotency as for createPet), and its
   * `message.created` event for the endpoints subscribed to it.
   */
  createMessage(accountId: number, text: string, idempotency?: IdempotencyRef): Promise<Message>
  /** The account's message with this id, or null (another account's too). */
  getMessage(accountId: number, id: string): Promise<Message | null>
  /** One page of the account's messages, newest first. Never another account's. */
  listMessages(options: ListMessagesOptions): Promise<MessagePage>

  // ─── WEBHOOKS ────────────────────────────────────────────────────────────────────────────────
  /**
   * Stores an endpoint, or nothing (null) when the account has `max` already: counted in the same
   * transaction, so creates at once on any instances never pass the cap together. With an
   * idempotency reference, the claim is completed with the endpoint, its secret included (the
   * 201 a retry replays), in the same transaction.
   */
  createWebhookEndpoint(
    endpoint: NewWebhookEndpoint,
    idempotency?: IdempotencyRef,
  ): Promise<StoredWebhookEndpoint | null>
  /** The account's endpoints (deleted ones are gone), newest first. */
  listWebhookEndpoints(accountId: number): Promise<StoredWebhookEndpoint[]>
  getWebhookEndpoint(accountId: number, id: string): Promise<StoredWebhookEndpoint | null>
  /** Applies the changes; disabling fails the endpoint's pending deliveries. Null: no such endpoint. */
  updateWebhookEndpoint(
    accountId: number,
    id: string,
    changes: WebhookEndpointChanges,
  ): Promise<StoredWebhookEndpoint | null>
  /** Deletes the endpoint and fails its pending deliveries; false when no such endpoint. */
  deleteWebhookEndpoint(accountId: number, id: string): Promise<boolean>
  /**
   * Makes `secret` the endpoint's signing secret; the one it replaces keeps signing beside it until
   * `previousUntil`. Null: no such endpoint.
   */
  rotateWebhookSecret(
    accountId: number,
    id: string,
    secret: string,
    previousUntil: string,
  ): Promise<StoredWebhookEndpoint | null>
  /** The endpoint's most recent deliveries, newest first (null: no such endpoint of the account's). */
  listDeliveries(accountId: number, endpointId: string, limit: number): Promise<Delivery[] | null>
  /**
   * Makes a delivery of the account's pending again, due now, its retry schedule started over (a
   * resend): `resent`. Null when there is none, or its endpoint is disabled (it would never be
   * sent). A delivery being attempted now (a live lease) is left as it is (`resent: false`): a second
   * attempt at once would send the event twice in parallel.
   */
  redeliver(accountId: number, deliveryId: string): Promise<Redelivery | null>
  /**
   * Leases up to `limit` deliveries that are due (never delivered, not failed, next attempt at or
   * before now, no live lease) to the caller for `leaseMs`, counting the attempt. Across instances
   * a delivery is leased to one at a time; an instance that died loses its leases when they run out.
   * Endpoints take turns: each offers its oldest due deliveries, at most `perEndpoint` (default: no
   * cap) less its attempts in flight (on every instance: leases in their first `attemptMs`, default
   * `leaseMs`; past that, the holder has died), so one endpoint's backlog holds
   * up no other's; endpoints are served in turn across claims. A claim running at the same moment
   * as another may pass over the endpoints that one is serving, and take fewer.
   */
  claimDeliveries(limit: number, leaseMs: number, perEndpoint?: number, attemptMs?: number): Promise<ClaimedDelivery[]>
  /**
   * Records an attempt's outcome, and the message's status when the event is a message's. Returns the
   * delivery's status then (`failed` for one failed under the attempt, whatever its answer but a 2xx),
   * or null when the lease was lost (nothing is recorded).
   */
  recordDelivery(outcome: DeliveryOutcome): Promise<DeliveryStatus | null>
  /**
   * Queues a `webhook.test` event to this endpoint alone (whatever it subscribes to), recorded like
   * any event: the event log and one delivery, due now. Its data is the endpoint without its
   * secret. Null when the account has no such endpoint, or it is disabled (it would never be sent).
   */
  sendTestEvent(accountId: number, endpointId: string): Promise<Event | null>
  /**
   * Makes the endpoint's failed deliveries queued at or after `since` pending again, due now, their
   * retries started over (as a resend), the oldest `limit` of them; their messages are queued again.
   * Null when the account has no such endpoint, or it is disabled.
   */
  recoverDeliveries(accountId: number, endpointId: string, since: string, limit: number): Promise<Recovery | null>
  /** Whether a delivery is due, without writing (a cheap check before claimDeliveries). */
  deliveriesDue(): Promise<boolean>
  /** Marks `undelivered` the queued messages that no endpoint was subscribed to; returns how many. */
  markUndeliveredMessages(): Promise<number>
  outboxStats(): Promise<OutboxStats>

  // ─── EVENTS ──────────────────────────────────────────────────────────────────────────────────
  /** One page of the account's event log, newest first. Never another account's. */
  listEvents(options: ListEventsOptions): Promise<EventPage>
  /** The account's event with this id, or null (another account's too). */
  getEvent(accountId: number, id: string): Promise<Event | null>
  /**
   * The feed's head: a position at or after every event committed so far, so that a reader starting
   * there sees only what commits next. Every event committed later has a greater position. It never
   * moves back, not even when the sweep deletes the newest events.
   */
  eventFeedHead(): Promise<FeedPosition>
  /**
   * Every account's events committed after `after`, in commit order, at most `limit`. No event ever
   * appears behind a position already returned: an event whose transaction is still open is left
   * for a later read, with every event that commits after it.
   */
  eventFeed(after: FeedPosition, limit: number): Promise<EventFeedPage>
  /** The account's events between two positions the feed has passed, in commit order (a stream's replay). */
  accountEvents(options: AccountEventsOptions): Promise<FeedEvent[]>
  /** The position of the account's event with this id, or null (pruned, never made, another account's). */
  eventPosition(accountId: number, id: string): Promise<FeedPosition | null>

  // ─── SETTINGS ────────────────────────────────────────────────────────────────────────────────
  /**
   * The named secret shared by every instance on this database, created with `generate()` by
   * whichever instance asks first (e.g. the key that signs pagination cursors).
   */
  secret(name: string, generate: () => string): Promise<string>

  // ─── IDEMPOTENCY ─────────────────────────────────────────────────────────────────────────────
  /**
   * Claims an Idempotency-Key for one request, durably, before the request does its work:
   * `claimed` (go ahead, then complete it through createPet/createMessage or release it),
   * `in_progress` (another request holds it), `mismatch` (it was used for another request), or
   * `done` with the stored response to replay. Expired or stale records are taken over.
   */
  claimIdempotencyKey(claim: IdempotencyClaim): Promise<IdempotencyState>
  /** Gives up an unfinished claim (the request failed before it wrote anything). */
  releaseIdempotencyKey(ref: IdempotencyRef): Promise<void>

  // ─── HOUSEKEEPING ────────────────────────────────────────────────────────────────────────────
  /**
   * Deletes expired sessions and idempotency records, the pet feed's rows no reader can still need
   * (PET_FEED_KEPT), and the events of the log that happened before `eventsBefore`
   * (EVENT_RETENTION_DAYS); returns how many sessions and records.
   */
  purgeExpired(now: string, eventsBefore: string): Promise<number>
}
