/**
 * The embedded store: SQLite through node:sqlite, one file (shared safely by several processes).
 *
 * Reads run on this thread's connection: a prepared statement, no round-trip. Writes go to the
 * writer thread (sqlite-writer.ts), which commits the writes that arrive together in one
 * transaction with one fsync (WAL, synchronous=FULL): a write's promise resolves only once its
 * commit is on disk, and the fsync never blocks the requests this thread is serving.
 *
 * A process that makes a write or two and exits (the CLI) opens it `direct`: no writer thread (its
 * start costs more than such a process's whole work); each write runs on this thread's connection,
 * through the same statements (sqlite-writer.ts's batchCommitter), as a batch of one.
 */
import { accessSync, constants, existsSync } from 'node:fs'
import { dirname } from 'node:path'
import { DatabaseSync, type StatementSync } from 'node:sqlite'
import { Worker } from 'node:worker_threads'
import type { Event } from '../schemas/events.ts'
import type { Message } from '../schemas/messages.ts'
import type { Inventory, Order, OrderStatus } from '../schemas/orders.ts'
import { DEFAULT_PET_STATUS, type NewPet, type Pet, type PetStatus } from '../schemas/pets.ts'
import type { Delivery, DeliveryStatus, Recovery } from '../schemas/webhooks.ts'
import { FEED_COLUMNS, type FeedRow, feedEventFromRow } from './feed-rows.ts'
import { latestMigration, newerThanCode, readMigrations } from './migrations.ts'
import { FILE_GONE, filesIdentity, makeFolders, sqlitePath } from './sqlite-file.ts'
import {
  batchCommitter,
  MESSAGE_COLUMNS,
  ORDER_COLUMNS,
  PRUNE_CHUNK,
  prepareAll,
  type WriteJob,
  type WriteOps,
  type WriteResult,
  type WriterAnswer,
  type WriterData,
  writeSettings,
} from './sqlite-writer.ts'
// The contract's types, as T.Name: the store's signatures are the contract's.
import type * as T from './types.ts'
import { DatabaseNotSetUpError, DatabaseUnavailableError, PET_FEED_PAGE } from './types.ts'
import {
  DELIVERY_COLUMNS,
  ENDPOINT_COLUMNS,
  type EndpointRow,
  EVENT_COLUMNS,
  type EventRow,
  endpointFromRow,
  eventFromRow,
} from './webhook-rows.ts'

/**
 * How long the writer waits for another process's write lock before failing with SQLITE_BUSY.
 * Only another process can hold it (this process has one writer), and the wait blocks only the
 * writer thread, so it can be generous.
 */
const BUSY_TIMEOUT_MS = 5000

/**
 * How long after a write failed for want of the database (locked by another process past the busy
 * timeout, an I/O error, a full disk) the store says it is not ready, unless a write succeeds
 * first. Bounded, so that an instance a balancer took out of service gets its next chance.
 */
const WRITES_FAILING_MS = 5000

/** How long after its writer thread ended the store starts a new one. */
const WRITER_RESTART_MS = 1000

/** Most of the database file that reads map into memory. */
const MMAP_BYTES = 1024 * 1024 * 1024

const PET_COLUMNS = 'id, name, category_id AS categoryId, status'
const KEY_COLUMNS = `id, account_id AS accountId, name, prefix, created_at AS createdAt, expires_at AS expiresAt,
  revoked_at AS revokedAt, last_used_at AS lastUsedAt, scopes`

// SQLITE_BUSY, _LOCKED, _IOERR, _CORRUPT, _FULL, _CANTOPEN, _NOTADB: the database cannot serve
// (now, or until an operator restores it), rather than "this request is wrong".
const UNAVAILABLE_RESULT_CODES = new Set([5, 6, 10, 11, 13, 14, 26])

function translate(error: unknown): unknown {
  const { code, errcode } = (error ?? {}) as { code?: string; errcode?: number }
  const unavailable =
    (code === 'ERR_SQLITE_ERROR' && UNAVAILABLE_RESULT_CODES.has((errcode ?? 0) & 0xff)) ||
    code === 'ERR_INVALID_STATE' ||
    String((error as Error | undefined)?.message).startsWith(FILE_GONE)
  return unavailable ? new DatabaseUnavailableError(String((error as Error).message ?? error)) : error
}

/** Runs a read, turning "cannot serve now" failures into DatabaseUnavailableError. */
function read<T>(run: () => T): Promise<T> {
  try {
    return Promise.resolve(run())
  } catch (error) {
    return Promise.reject(translate(error))
  }
}

/** Whether the file holds a database this service has set up (read only: it is left as it is). */
function isSetUp(path: string): boolean {
  const db = new DatabaseSync(path, { readOnly: true })
  try {
    return (
      db.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'").get() !== undefined
    )
  } finally {
    db.close()
  }
}

/**
 * SQLite's own words ("unable to open database file", "attempt to write a readonly database") say
 * neither which file nor why: name the file, and the likely cause when its folder is read-only.
 */
function named(path: string, error: unknown): Error {
  const failure = error instanceof Error ? error : new Error(String(error))
  let writable = true
  try {
    if (existsSync(dirname(path))) accessSync(dirname(path), constants.W_OK)
    if (existsSync(path)) accessSync(path, constants.W_OK)
  } catch {
    writable = false
  }
  const why = writable
    ? ''
    : ' (this user cannot write the file or its folder, where SQLite also keeps its -wal and -shm files)'
  failure.message = `${path}: ${failure.message}${why}`
  return failure
}

/** The highest migration applied to the database; 0 when it has none (no schema_migrations table). */
function appliedVersion(db: DatabaseSync): number {
  const table = db.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'").get()
  if (table === undefined) return 0
  const { applied } = db.prepare('SELECT max(version) AS applied FROM schema_migrations').get() as {
    applied: number | null
  }
  return applied ?? 0
}

export { sqlitePath }

type Op = keyof WriteOps

export class SqliteStore implements T.Store {
  #db: DatabaseSync
  #path: string
  /** The files this connection opened (see sqlite-file.ts). */
  #identity: string
  #sql: ReturnType<typeof prepareReads>
  /**
   * The pet change feed's own connection, with no file mapping: after each commit of another
   * connection, a look through a mapped connection cost 2.5 times as much (57 against 23 µs), and
   * a look follows every commit (decision 119). Opened at the first look: the CLI never looks.
   */
  #feed: { db: DatabaseSync; sql: ReturnType<typeof prepareFeed> } | null = null
  /** The writer thread; null when this store writes directly. */
  #writer: Worker | null = null
  /** Commits a batch on this thread's connection, when this store writes directly (StoreOptions.direct). */
  #direct: ((batch: WriteJob[]) => WriteResult[]) | null = null
  #ready: Promise<void>
  /** The new writer thread's start, while one is due after the last one ended. */
  #restart: NodeJS.Timeout | null = null
  /** Writes not yet sent: everything queued in one turn of the event loop goes in one message. */
  #outbox: WriteJob[] = []
  /** Those writes' callers, in the same order. */
  #unsent: Waiting[] = []
  /**
   * The messages sent to the writer and not yet fully answered, oldest first (the writer answers in
   * order). A linked list that dies young with its messages, not a long-lived Map (decision 64).
   */
  #oldest: Sent | null = null
  #newest: Sent | null = null
  #nextJob = 1
  #closing: Promise<void> | null = null
  /** Why the writer thread is gone, until a new one is ready: writes and readiness checks fail with it. */
  #writerGone: DatabaseUnavailableError | null = null
  /** When a write last failed for want of the database; null once one succeeds. */
  #writeFailedAt: number | null = null
  /** Called when the last waiting write is settled (close() waits for it). */
  #drained: (() => void) | null = null
  /** Told of each writer batch (the metrics), if anyone listens. */
  #onBatch: T.WriterBatchListener | null = null
  /** The active trace to keep with an event (StoreOptions.traceparent); none without tracing. */
  #traceparent: () => string | null = () => null

  private constructor(path: string, direct: boolean) {
    makeFolders(dirname(path))
    this.#db = new DatabaseSync(path)
    this.#path = path
    // This connection writes too: the migrations, and every write when it writes directly.
    writeSettings(this.#db, BUSY_TIMEOUT_MS)
    this.#db.exec('PRAGMA journal_mode = WAL')
    // Reads map the file: SQLite's own 2 MiB page cache thrashes at a million pets; mapped pages
    // are the OS's file cache, shared, not this process's memory.
    this.#db.exec(`PRAGMA mmap_size = ${MMAP_BYTES}`)
    this.#migrate()
    // Taken once the -wal and -shm files exist (the migration's first access made them).
    this.#identity = filesIdentity(path)
    this.#sql = prepareReads(this.#db)
    if (direct) {
      this.#direct = batchCommitter(this.#db, path)
      this.#ready = Promise.resolve()
    } else {
      this.#ready = this.#startWriter()
    }
  }

  /**
   * Opens (creating it if needed) and migrates the database file, and starts its writer thread;
   * `direct`: writes on this thread instead, with no writer thread (StoreOptions.direct).
   */
  static async open(
    url: string,
    {
      existing = false,
      direct = false,
      traceparent,
    }: { existing?: boolean; direct?: boolean; traceparent?: () => string | null } = {},
  ): Promise<SqliteStore> {
    const path = sqlitePath(url)
    // Each connection to :memory: would be a database of its own: the writer could not share it.
    if (path === ':memory:') throw new Error('DATABASE_URL sqlite::memory: is not supported; give a file path')
    if (existing && !existsSync(path))
      throw new DatabaseNotSetUpError(`No SQLite database at ${path}: check DATABASE_URL`)
    let store: SqliteStore | undefined
    try {
      // An empty file, or another program's database, is not one to set up unasked either.
      if (existing && !isSetUp(path)) {
        throw new DatabaseNotSetUpError(`The SQLite file ${path} holds no Animal Store tables: check DATABASE_URL`)
      }
      store = new SqliteStore(path, direct)
      if (traceparent) store.#traceparent = traceparent
      await store.#ready
      return store
    } catch (error) {
      await store?.close()
      throw error instanceof DatabaseNotSetUpError ? error : named(path, error)
    }
  }

  // ─── LIFECYCLE ─────────────────────────────────────────────────────────────────────────────

  async ping(): Promise<void> {
    if (this.#writerGone) throw this.#writerGone
    if (filesIdentity(this.#path) !== this.#identity) throw new DatabaseUnavailableError(`${FILE_GONE}: ${this.#path}`)
    // Reads may answer while every write fails: then this instance cannot serve.
    if (this.#writeFailedAt !== null && Date.now() - this.#writeFailedAt < WRITES_FAILING_MS) {
      throw new DatabaseUnavailableError('Writes to the database are failing')
    }
    await read(() => this.#sql.ping.get())
  }

  stats(): T.StoreStats {
    return {}
  }

  onWriterBatch(listener: T.WriterBatchListener): void {
    this.#onBatch = listener
  }

  close(): Promise<void> {
    this.#closing ??= (async () => {
      if (this.#restart) clearTimeout(this.#restart)
      this.#send()
      if (this.#oldest !== null) await new Promise<void>((resolve) => (this.#drained = resolve))
      const writer = this.#writer
      if (writer === null) {
        // Writes directly: each was committed before its promise settled.
      } else if (this.#writerGone) {
        // Gone, or a new one not ready yet: nothing of ours is queued there.
        await writer.terminate()
      } else {
        const exited = new Promise((resolve) => writer.once('exit', resolve))
        writer.postMessage('close')
        await exited
      }
      this.#feed?.db.close()
      this.#db.close()
    })()
    return this.#closing
  }

  // ─── PETS ──────────────────────────────────────────────────────────────────────────────────

  createPet({ name, categoryId, status = DEFAULT_PET_STATUS }: NewPet, idempotency?: T.IdempotencyRef): Promise<Pet> {
    // The writer answers with the id alone (a smaller message back): the rest is what was given.
    return this.#write('createPet', name, categoryId, status, idempotency ?? null).then((id) => ({
      id,
      name,
      categoryId,
      status,
    }))
  }

  getPet(id: number): Promise<Pet | null> {
    return read(() => (this.#sql.getPet.get(id) as Pet | undefined) ?? null)
  }

  listPets({ limit, status, afterId = 0 }: T.ListPetsOptions): Promise<T.PetPage> {
    return read(() => {
      // One row more than asked says whether another page exists.
      const rows = (status === undefined
        ? this.#sql.listPets.all(afterId, limit + 1)
        : this.#sql.listPetsByStatus.all(status, afterId, limit + 1)) as unknown as Pet[]
      const more = rows.length > limit
      if (more) rows.pop()
      return { pets: rows, nextAfterId: more ? (rows.at(-1)?.id ?? null) : null }
    })
  }

  async getVersionedPet(id: number): Promise<T.VersionedPet | null> {
    const row = await read(() => this.#sql.getVersionedPet.get(id) as (Pet & { version: number }) | undefined)
    if (!row) return null
    const { version, ...pet } = row
    return { pet, version }
  }

  updatePet(id: number, changes: T.PetChanges, ifVersion?: number): Promise<T.UpdatePetResult> {
    return this.#write('updatePet', id, changes, ifVersion ?? null)
  }

  inventory(): Promise<Inventory> {
    return read(() => {
      const counts: Inventory = { available: 0, pending: 0, sold: 0 }
      for (const row of this.#sql.inventory.all() as { status: PetStatus; count: number }[])
        counts[row.status] = row.count
      return counts
    })
  }

  readonly petFeed = 'on-read'
  /** PRAGMA data_version before the look that left the feed at `cursor`: until it moves, nothing was committed. */
  #feedQuiet: { dataVersion: number; cursor: string } | null = null

  petChanges(cursor: string | null): T.PetFeed {
    const feed = this.#feedStatements()
    const newest = () => String((feed.lastPetChange.get() as { seq: number | null }).seq ?? 0)
    if (cursor === null) return { changes: [], cursor: newest(), reset: false }
    // data_version moves with every commit of another connection (the writer thread's, the main
    // connection's when it writes directly, another process's): read before the look.
    const dataVersion = (feed.dataVersion.get() as { data_version: number }).data_version
    const quiet = this.#feedQuiet
    if (quiet !== null && quiet.cursor === cursor && quiet.dataVersion === dataVersion) {
      return { changes: [], cursor, reset: false }
    }
    // A look up the primary key from the cursor: a few µs when nothing changed.
    const after = Number(cursor)
    const rows = feed.petChangesAfter.all(after, PET_FEED_PAGE + 1) as unknown as (T.PetChange & { seq: number })[]
    if (rows.length === 0) {
      this.#feedQuiet = { dataVersion, cursor }
      return { changes: [], cursor, reset: false }
    }
    // Commits are serial here, so seq has no gap: one means rows were pruned past this reader.
    if (rows.length > PET_FEED_PAGE || (rows[0] as { seq: number }).seq !== after + 1) {
      return { changes: [], cursor: newest(), reset: true }
    }
    const last = (rows.at(-1) as { seq: number }).seq
    // Read after dataVersion: a commit after these rows moves it, and the next look reads again.
    this.#feedQuiet = { dataVersion, cursor: String(last) }
    return { changes: rows.map(({ petId, from, to }) => ({ petId, from, to })), cursor: String(last), reset: false }
  }

  #feedStatements(): ReturnType<typeof prepareFeed> {
    if (this.#feed === null) {
      // After close, fail as a look through a closed connection did, rather than open one left open.
      if (!this.#db.isOpen) throw new DatabaseUnavailableError('The store is closed')
      const db = new DatabaseSync(this.#path)
      db.exec(`PRAGMA busy_timeout = ${BUSY_TIMEOUT_MS}`)
      this.#feed = { db, sql: prepareFeed(db) }
    }
    return this.#feed.sql
  }

  // ─── ORDERS ────────────────────────────────────────────────────────────────────────────────

  placeOrder(order: T.PlaceOrder, idempotency?: T.IdempotencyRef): Promise<T.PlaceOrderResult> {
    return this.#write(
      'placeOrder',
      order.accountId,
      order.petId,
      order.holdMs,
      idempotency ?? null,
      this.#traceparent(),
    )
  }

  getOrder(accountId: number, id: string): Promise<Order | null> {
    return read(() => (this.#sql.getOrder.get(id, accountId) as Order | undefined) ?? null)
  }

  listOrders({ accountId, limit, status, petId, before }: T.ListOrdersOptions): Promise<T.OrderPage> {
    const after = [status ?? null, status ?? null, petId ?? null, petId ?? null]
    return read(() => {
      const { items, next } = newestFirst<Order>(this.#sql.listOrders, limit, accountId, before, ...after)
      return { orders: items, next }
    })
  }

  transitionOrder(accountId: number, id: string, to: 'completed' | 'canceled'): Promise<T.TransitionResult> {
    return this.#write('transitionOrder', accountId, id, to, this.#traceparent())
  }

  expireOrders(now: string): Promise<Order[]> {
    return this.#write('expireOrders', now)
  }

  orderCounts(): Promise<Record<OrderStatus, number>> {
    return read(() => {
      const counts: Record<OrderStatus, number> = { placed: 0, completed: 0, canceled: 0, expired: 0 }
      for (const row of this.#sql.orderCounts.all() as { status: OrderStatus; count: number }[])
        counts[row.status] = row.count
      return counts
    })
  }

  // ─── ACCOUNTS ──────────────────────────────────────────────────────────────────────────────

  createAccount(email: string, passwordHash?: string): Promise<T.Account | null> {
    return this.#write('createAccount', email.toLowerCase(), passwordHash ?? null)
  }

  findAccountByEmail(email: string): Promise<T.Account | null> {
    return read(() => (this.#sql.getAccountByEmail.get(email.toLowerCase()) as T.Account | undefined) ?? null)
  }

  findAccountLogin(email: string): Promise<{ account: T.Account; passwordHash: string | null } | null> {
    return read(() => {
      const row = this.#sql.getAccountLogin.get(email.toLowerCase()) as
        | (T.Account & { passwordHash: string | null })
        | undefined
      if (!row) return null
      const { passwordHash, ...account } = row
      return { account, passwordHash }
    })
  }

  setAccountPassword(accountId: number, passwordHash: string): Promise<boolean> {
    return this.#write('setAccountPassword', accountId, passwordHash)
  }

  // ─── SESSIONS ──────────────────────────────────────────────────────────────────────────────

  createSession(session: T.NewSession): Promise<boolean> {
    return this.#write('createSession', session.hash, session.accountId, session.expiresAt, session.passwordHash)
  }

  findSession(hash: string): Promise<T.Session | null> {
    return read(() => (this.#sql.getSession.get(hash, new Date().toISOString()) as T.Session | undefined) ?? null)
  }

  deleteSession(hash: string): Promise<void> {
    return this.#write('deleteSession', hash)
  }

  // ─── API KEYS ──────────────────────────────────────────────────────────────────────────────

  createApiKey(key: T.NewApiKey): Promise<T.ApiKey> {
    return this.#write('createApiKey', key.accountId, key.name, key.prefix, key.hash, key.expiresAt, key.scopes ?? null)
  }

  listApiKeys(accountId: number): Promise<T.ApiKey[]> {
    return read(() => this.#sql.listKeys.all(accountId) as unknown as T.ApiKey[])
  }

  findApiKeyByHash(hash: string): Promise<T.ApiKey | null> {
    return read(() => (this.#sql.getKeyByHash.get(hash) as T.ApiKey | undefined) ?? null)
  }

  revokeApiKey(id: string, accountId?: number): Promise<T.ApiKey | null> {
    return this.#write('revokeApiKey', id, accountId ?? null)
  }

  touchApiKeys(usages: { id: string; at: string }[]): Promise<void> {
    return this.#write('touchApiKeys', usages)
  }

  // ─── MESSAGES ──────────────────────────────────────────────────────────────────────────────

  createMessage(accountId: number, text: string, idempotency?: T.IdempotencyRef): Promise<Message> {
    return this.#write('createMessage', accountId, text, idempotency ?? null, this.#traceparent())
  }

  getMessage(accountId: number, id: string): Promise<Message | null> {
    return read(() => (this.#sql.getMessage.get(id, accountId) as Message | undefined) ?? null)
  }

  listMessages({ accountId, limit, status, before }: T.ListMessagesOptions): Promise<T.MessagePage> {
    return read(() => {
      const filters = [status ?? null, status ?? null]
      const { items, next } = newestFirst<Message>(this.#sql.listMessages, limit, accountId, before, ...filters)
      return { messages: items, next }
    })
  }

  // ─── WEBHOOKS ──────────────────────────────────────────────────────────────────────────────

  createWebhookEndpoint(
    endpoint: T.NewWebhookEndpoint,
    idempotency?: T.IdempotencyRef,
  ): Promise<T.StoredWebhookEndpoint | null> {
    const { accountId, url, events, description, secret, max = null } = endpoint
    return this.#write('createWebhookEndpoint', accountId, url, events, description, secret, max, idempotency ?? null)
  }

  listWebhookEndpoints(accountId: number): Promise<T.StoredWebhookEndpoint[]> {
    return read(() => (this.#sql.listEndpoints.all(accountId) as unknown as EndpointRow[]).map(endpointFromRow))
  }

  getWebhookEndpoint(accountId: number, id: string): Promise<T.StoredWebhookEndpoint | null> {
    return read(() => {
      const row = this.#sql.getEndpoint.get(id, accountId) as EndpointRow | undefined
      return row ? endpointFromRow(row) : null
    })
  }

  updateWebhookEndpoint(
    accountId: number,
    id: string,
    changes: T.WebhookEndpointChanges,
  ): Promise<T.StoredWebhookEndpoint | null> {
    return this.#write('updateWebhookEndpoint', accountId, id, changes)
  }

  deleteWebhookEndpoint(accountId: number, id: string): Promise<boolean> {
    return this.#write('deleteWebhookEndpoint', accountId, id)
  }

  rotateWebhookSecret(
    accountId: number,
    id: string,
    secret: string,
    previousUntil: string,
  ): Promise<T.StoredWebhookEndpoint | null> {
    return this.#write('rotateWebhookSecret', accountId, id, secret, previousUntil)
  }

  listDeliveries(accountId: number, endpointId: string, limit: number): Promise<Delivery[] | null> {
    return read(() => {
      const endpoint = this.#sql.getEndpointSeq.get(endpointId, accountId) as { seq: number } | undefined
      if (!endpoint) return null
      return this.#sql.listDeliveries.all(endpoint.seq, limit) as unknown as Delivery[]
    })
  }

  redeliver(accountId: number, deliveryId: string): Promise<T.Redelivery | null> {
    return this.#write('redeliver', accountId, deliveryId) as Promise<T.Redelivery | null>
  }

  sendTestEvent(accountId: number, endpointId: string): Promise<Event | null> {
    return this.#write('sendTestEvent', accountId, endpointId, this.#traceparent())
  }

  recoverDeliveries(accountId: number, endpointId: string, since: string, limit: number): Promise<Recovery | null> {
    return this.#write('recoverDeliveries', accountId, endpointId, since, limit)
  }

  claimDeliveries(
    limit: number,
    leaseMs: number,
    perEndpoint = Number.MAX_SAFE_INTEGER,
    attemptMs = leaseMs,
  ): Promise<T.ClaimedDelivery[]> {
    return this.#write('claimDeliveries', limit, leaseMs, perEndpoint, attemptMs)
  }

  recordDelivery(outcome: T.DeliveryOutcome): Promise<DeliveryStatus | null> {
    return this.#write('recordDelivery', outcome)
  }

  deliveriesDue(): Promise<boolean> {
    return read(() => this.#sql.deliveryDue.get(new Date().toISOString()) !== undefined)
  }

  markUndeliveredMessages(): Promise<number> {
    // Most of the time there is none: looked for first, so that the sweep writes nothing.
    if (this.#sql.unsubscribedMessage.get() === undefined) return Promise.resolve(0)
    return this.#write('markUndeliveredMessages')
  }

  outboxStats(): Promise<T.OutboxStats> {
    return read(() => this.#sql.outboxStats.get() as unknown as T.OutboxStats)
  }

  // ─── EVENTS ────────────────────────────────────────────────────────────────────────────────

  listEvents({ accountId, limit, types, createdAfter, before }: T.ListEventsOptions): Promise<T.EventPage> {
    return read(() => {
      // Every ISO timestamp sorts after '', and the types as one JSON array (json_each reads it).
      const filters = [createdAfter ?? '', types ? JSON.stringify(types) : null, types ? JSON.stringify(types) : null]
      const { items, next } = newestFirst<EventRow>(this.#sql.listEvents, limit, accountId, before, ...filters)
      return { events: items.map(eventFromRow), next }
    })
  }

  getEvent(accountId: number, id: string): Promise<Event | null> {
    return read(() => {
      const row = this.#sql.getEvent.get(id, accountId) as EventRow | undefined
      return row ? eventFromRow(row) : null
    })
  }

  // Commits are serial here: `seq` alone is commit order, and `tx` is always 0.
  eventFeedHead(): Promise<T.FeedPosition> {
    return read(() => ({ tx: 0n, seq: (this.#sql.eventFeedHead.get() as { seq: number }).seq }))
  }

  eventFeed(after: T.FeedPosition, limit: number): Promise<T.EventFeedPage> {
    return read(() => {
      const events = (this.#sql.eventFeed.all(after.seq, limit) as unknown as FeedRow[]).map(feedEventFromRow)
      return { events, position: events.at(-1)?.position ?? after }
    })
  }

  accountEvents({ accountId, after, upto, types, limit }: T.AccountEventsOptions): Promise<T.FeedEvent[]> {
    return read(() => {
      const typeList = types ? JSON.stringify(types) : null
      const rows = this.#sql.accountEvents.all(accountId, after.seq, upto.seq, typeList, typeList, limit)
      return (rows as unknown as FeedRow[]).map(feedEventFromRow)
    })
  }

  eventPosition(accountId: number, id: string): Promise<T.FeedPosition | null> {
    return read(() => {
      const row = this.#sql.eventPosition.get(id, accountId) as { seq: number } | undefined
      return row ? { tx: 0n, seq: row.seq } : null
    })
  }

  // ─── SETTINGS ──────────────────────────────────────────────────────────────────────────────

  async secret(name: string, generate: () => string): Promise<string> {
    await this.#write('insertSecret', name, generate())
    return read(() => (this.#sql.getSecret.get(name) as { value: string }).value)
  }

  // ─── IDEMPOTENCY ───────────────────────────────────────────────────────────────────────────

  claimIdempotencyKey(claim: T.IdempotencyClaim): Promise<T.IdempotencyState> {
    return this.#write('claimIdempotencyKey', claim)
  }

  releaseIdempotencyKey(ref: T.IdempotencyRef): Promise<void> {
    return this.#write('releaseIdempotencyKey', ref.scope, ref.key)
  }

  // ─── HOUSEKEEPING ──────────────────────────────────────────────────────────────────────────

  async purgeExpired(at: string, eventsBefore: string): Promise<number> {
    const purged = await this.#write('purgeExpired', at, eventsBefore)
    // One chunk per write job, so that the writes queued meanwhile commit between them.
    while ((await this.#write('prunePetChanges')) === PRUNE_CHUNK) {}
    return purged
  }

  // ─── INTERNALS ─────────────────────────────────────────────────────────────────────────────

  #migrate(): void {
    const db = this.#db
    // Mostly the schema is current: one read says so, without reading the files or taking the write
    // lock (which another process may hold for up to its busy timeout). Anything else: the steps below.
    if (appliedVersion(db) === latestMigration('sqlite')) return
    db.exec(`CREATE TABLE IF NOT EXISTS schema_migrations (
      version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL) STRICT`)
    const migrations = readMigrations('sqlite')
    for (const migration of migrations) {
      // IMMEDIATE takes the write lock first, so two processes starting together apply it once.
      db.exec('BEGIN IMMEDIATE')
      try {
        const { applied } = db.prepare('SELECT max(version) AS applied FROM schema_migrations').get() as {
          applied: number | null
        }
        const tooNew = newerThanCode(applied ?? 0, migrations)
        if (tooNew) throw tooNew
        if ((applied ?? 0) < migration.version) {
          db.exec(migration.sql)
          db.prepare('INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)').run(
            migration.version,
            migration.name,
            new Date().toISOString(),
          )
        }
        db.exec('COMMIT')
      } catch (error) {
        db.exec('ROLLBACK')
        throw error
      }
    }
  }

  /** Starts the writer thread; resolves once it is ready for writes. */
  #startWriter(): Promise<void> {
    const workerData: WriterData = { path: this.#path, busyTimeoutMs: BUSY_TIMEOUT_MS }
    const writer = new Worker(new URL('./sqlite-writer.ts', import.meta.url), { workerData })
    this.#writer = writer
    const ready = new Promise<void>((resolve, reject) => {
      writer.once('message', () => resolve())
      writer.once('error', reject)
    })
    writer.on('message', (answer: WriterAnswer | 'ready') => {
      if (answer === 'ready') return
      const [results, seconds] = answer
      this.#settle(results)
      this.#onBatch?.(results.length, seconds)
    })
    writer.on('error', (error) => this.#writerEnded(new DatabaseUnavailableError(`SQLite writer failed: ${error}`)))
    writer.on('exit', () => this.#writerEnded(new DatabaseUnavailableError('The SQLite writer has stopped')))
    return ready
  }

  /**
   * A writer that ends takes its waiting writes with it: they were not committed (or, if it ended
   * between its commit and its answer, they may have been: the client cannot tell, as with any
   * lost connection, and an Idempotency-Key makes the retry safe). A new writer starts a second
   * later; until it is ready, writes fail at once and the store is not ready.
   */
  #writerEnded(error: DatabaseUnavailableError): void {
    this.#failAll(error)
    if (this.#closing || this.#restart) return
    this.#restart = setTimeout(() => {
      this.#restart = null
      if (this.#closing) return
      // A writer that cannot start ends too, and the next attempt is a second later.
      this.#startWriter().then(
        () => {
          this.#writerGone = null
        },
        () => {},
      )
    }, WRITER_RESTART_MS)
    this.#restart.unref()
  }

  /** Queues a write for the writer thread; resolves with its result once its commit is durable. */
  #write<K extends Op>(op: K, ...args: Parameters<WriteOps[K]>): Promise<ReturnType<WriteOps[K]>> {
    if (this.#closing) return Promise.reject(new DatabaseUnavailableError('The store is closed'))
    if (this.#direct) return this.#writeNow(op, args)
    // A message to a thread that has exited is dropped without a word: the write would wait forever.
    if (this.#writerGone) return Promise.reject(this.#writerGone)
    const id = this.#nextJob++
    return new Promise((resolve, reject) => {
      this.#unsent.push({ id, resolve: resolve as (value: unknown) => void, reject })
      if (this.#outbox.push([id, op, args]) === 1) setImmediate(() => this.#send())
    })
  }

  /** Commits a write on this thread's connection (direct): settled once it is durable, or failed. */
  #writeNow<K extends Op>(op: K, args: Parameters<WriteOps[K]>): Promise<ReturnType<WriteOps[K]>> {
    const started = performance.now()
    const [[, ok, value]] = (this.#direct as (batch: WriteJob[]) => WriteResult[])([[this.#nextJob++, op, args]]) as [
      WriteResult,
    ]
    this.#onBatch?.(1, (performance.now() - started) / 1000)
    try {
      return Promise.resolve(this.#outcome(ok, value) as ReturnType<WriteOps[K]>)
    } catch (error) {
      return Promise.reject(error)
    }
  }

  /** A write's result as the writer reported it: its value, or its failure thrown (translated). */
  #outcome(ok: boolean, value: unknown): unknown {
    if (ok) {
      this.#writeFailedAt = null
      return value
    }
    const error = translate(Object.assign(new Error(), value))
    if (error instanceof DatabaseUnavailableError) this.#writeFailedAt = Date.now()
    throw error
  }

  #send(): void {
    if (this.#outbox.length === 0) return
    ;(this.#writer as Worker).postMessage(this.#outbox)
    const sent: Sent = { writes: this.#unsent, answered: 0, next: null }
    if (this.#newest) this.#newest.next = sent
    else this.#oldest = sent
    this.#newest = sent
    this.#outbox = []
    this.#unsent = []
  }

  #settle(results: WriteResult[]): void {
    for (const [id, ok, value] of results) {
      const waiting = this.#nextAnswered()
      // Never seen: it would give a request another's result. The writer is replaced instead, and
      // its waiting writes fail as when it ends (#writerEnded).
      if (waiting?.id !== id) {
        waiting?.reject(new DatabaseUnavailableError('The SQLite writer answered out of order'))
        void this.#writer?.terminate()
        return
      }
      try {
        waiting.resolve(this.#outcome(ok, value))
      } catch (error) {
        waiting.reject(error)
      }
    }
    if (this.#oldest === null && this.#unsent.length === 0) this.#drained?.()
  }

  /** The oldest write sent and not yet answered, now taken off the list. */
  #nextAnswered(): Waiting | undefined {
    const sent = this.#oldest
    if (sent === null) return undefined
    const waiting = sent.writes[sent.answered++]
    if (sent.answered === sent.writes.length) {
      this.#oldest = sent.next
      if (this.#oldest === null) this.#newest = null
      // A message that waited long may be in the old generation by now: let it hold nothing.
      sent.next = null
      sent.writes = NO_WRITES
    }
    return waiting
  }

  /** Fails every write not yet answered, and those to come until a new writer is ready. */
  #failAll(error: DatabaseUnavailableError): void {
    this.#writerGone ??= error
    for (const { reject } of this.#unsent) reject(error)
    for (let sent = this.#oldest; sent !== null; sent = sent.next) {
      for (const { reject } of sent.writes.slice(sent.answered)) reject(error)
    }
    this.#outbox = []
    this.#unsent = []
    this.#oldest = null
    this.#newest = null
    this.#drained?.()
  }
}

const NO_WRITES: Waiting[] = []

/** A write waiting for its commit. */
interface Waiting {
  id: number
  resolve: (value: unknown) => void
  reject: (error: unknown) => void
}

/** The writes of one message to the writer; `answered` of them, from the first, are settled. */
interface Sent {
  writes: Waiting[]
  answered: number
  next: Sent | null
}

/**
 * A page read newest first by `statement` (parameters: the account, the `seq` to start before, the
 * filters, then a limit): one row more than `limit` says whether another page follows. The rows
 * without their `seq`, and the `seq` the next page starts before.
 */
function newestFirst<Item>(
  statement: StatementSync,
  limit: number,
  accountId: number,
  before: number | undefined,
  ...filters: (string | number | null)[]
): { items: Item[]; next: number | null } {
  const rows = statement.all(
    accountId,
    before ?? Number.MAX_SAFE_INTEGER,
    ...filters,
    limit + 1,
  ) as unknown as (Item & {
    seq: number
  })[]
  const more = rows.length > limit
  if (more) rows.pop()
  return { items: rows.map(({ seq, ...item }) => item as Item), next: more ? (rows.at(-1)?.seq ?? null) : null }
}

/** The pet change feed's statements (SqliteStore#feed). */
function prepareFeed(db: DatabaseSync) {
  return prepareAll(db, {
    lastPetChange: 'SELECT max(seq) AS seq FROM pet_changes',
    dataVersion: 'PRAGMA data_version',
    petChangesAfter: `SELECT seq, pet_id AS petId, old_status AS "from", new_status AS "to" FROM pet_changes
      WHERE seq > ? ORDER BY seq LIMIT ?`,
  })
}

function prepareReads(db: DatabaseSync) {
  return prepareAll(db, {
    ping: 'SELECT 1',
    getPet: `SELECT ${PET_COLUMNS} FROM pets WHERE id = ?`,
    getVersionedPet: `SELECT ${PET_COLUMNS}, version FROM pets WHERE id = ?`,
    inventory: 'SELECT status, count(*) AS count FROM pets GROUP BY status',
    orderCounts: 'SELECT status, count(*) AS count FROM orders GROUP BY status',
    getOrder: `SELECT ${ORDER_COLUMNS} FROM orders WHERE id = ? AND account_id = ?`,
    listOrders: `SELECT seq, ${ORDER_COLUMNS} FROM orders WHERE account_id = ? AND seq < ?
      AND (? IS NULL OR status = ?) AND (? IS NULL OR pet_id = ?) ORDER BY seq DESC LIMIT ?`,
    listPets: `SELECT ${PET_COLUMNS} FROM pets WHERE id > ? ORDER BY id LIMIT ?`,
    listPetsByStatus: `SELECT ${PET_COLUMNS} FROM pets WHERE status = ? AND id > ? ORDER BY id LIMIT ?`,
    getAccountByEmail: 'SELECT id, email, created_at AS createdAt FROM accounts WHERE email = ?',
    getAccountLogin:
      'SELECT id, email, created_at AS createdAt, password_hash AS passwordHash FROM accounts WHERE email = ?',
    getSession: `SELECT s.account_id AS accountId, a.email, s.expires_at AS expiresAt
      FROM sessions s JOIN accounts a ON a.id = s.account_id WHERE s.id = ? AND s.expires_at > ?`,
    listKeys: `SELECT ${KEY_COLUMNS} FROM api_keys WHERE account_id = ? ORDER BY created_at DESC, id`,
    getKeyByHash: `SELECT ${KEY_COLUMNS} FROM api_keys WHERE key_hash = ?`,
    getMessage: `SELECT ${MESSAGE_COLUMNS} FROM messages WHERE id = ? AND account_id = ?`,
    listMessages: `SELECT seq, ${MESSAGE_COLUMNS} FROM messages WHERE account_id = ? AND seq < ?
      AND (? IS NULL OR status = ?) ORDER BY seq DESC LIMIT ?`,
    listEndpoints: `SELECT ${ENDPOINT_COLUMNS} FROM webhook_endpoints WHERE account_id = ? AND deleted_at IS NULL
      ORDER BY seq DESC`,
    getEndpoint: `SELECT ${ENDPOINT_COLUMNS} FROM webhook_endpoints
      WHERE id = ? AND account_id = ? AND deleted_at IS NULL`,
    getEndpointSeq: 'SELECT seq FROM webhook_endpoints WHERE id = ? AND account_id = ? AND deleted_at IS NULL',
    listDeliveries: `SELECT ${DELIVERY_COLUMNS} FROM deliveries d JOIN events e ON e.seq = d.event_seq
      WHERE d.endpoint_seq = ? ORDER BY d.seq DESC LIMIT ?`,
    listEvents: `SELECT ${EVENT_COLUMNS} FROM event_log WHERE account_id = ? AND seq < ? AND created_at > ?
      AND (? IS NULL OR type IN (SELECT value FROM json_each(?))) ORDER BY seq DESC LIMIT ?`,
    getEvent: `SELECT ${EVENT_COLUMNS} FROM event_log WHERE id = ? AND account_id = ?`,
    // The highest seq ever given (AUTOINCREMENT): unlike max(seq), the sweep's deletes never move it back.
    eventFeedHead: "SELECT coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'event_log'), 0) AS seq",
    eventFeed: `SELECT 0 AS tx, ${FEED_COLUMNS} FROM event_log WHERE seq > ? ORDER BY seq LIMIT ?`,
    accountEvents: `SELECT 0 AS tx, ${FEED_COLUMNS} FROM event_log WHERE account_id = ? AND seq > ? AND seq <= ?
      AND (? IS NULL OR type IN (SELECT value FROM json_each(?))) ORDER BY seq LIMIT ?`,
    eventPosition: 'SELECT seq FROM event_log WHERE id = ? AND account_id = ?',
    deliveryDue: "SELECT 1 FROM deliveries WHERE status = 'pending' AND next_attempt_at <= ? LIMIT 1",
    unsubscribedMessage: "SELECT 1 FROM messages WHERE status = 'queued' AND fanout = 0 LIMIT 1",
    outboxStats: `SELECT count(*) AS depth, min(created_at) AS oldestAt FROM deliveries WHERE status = 'pending'`,
    getSecret: 'SELECT value FROM secrets WHERE name = ?',
  })
}
