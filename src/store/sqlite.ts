/**
 * The embedded store: SQLite through node:sqlite, one file, one process (or several, see README).
 *
 * Durability: WAL with synchronous=FULL, so a commit is on disk before its promise resolves.
 * To pay for that fsync once per burst rather than once per request, writes that arrive in the
 * same turn of the event loop are committed together in one transaction (group commit); each
 * write runs in its own savepoint, so one failing write does not undo the others.
 */
import { mkdirSync } from 'node:fs'
import { dirname } from 'node:path'
import { DatabaseSync, type StatementSync } from 'node:sqlite'
import { randomId } from '../api-keys.ts'
import type { Message } from '../schemas/messages.ts'
import { DEFAULT_PET_STATUS, type NewPet, type Pet } from '../schemas/pets.ts'
import { type IdempotencyRow, idempotencyState } from './idempotency.ts'
import { newerThanCode, readMigrations } from './migrations.ts'
import {
  type Account,
  type ApiKey,
  DatabaseUnavailableError,
  type IdempotencyClaim,
  type IdempotencyRef,
  type IdempotencyState,
  type ListPetsOptions,
  type NewApiKey,
  type PetPage,
  type Session,
  type Store,
} from './types.ts'

/**
 * How long a statement waits for another process's write lock before failing with SQLITE_BUSY.
 * Only another process can hold it (in-process writes are serialised by the batch), so this wait
 * happens only when several workers share one file.
 */
const BUSY_TIMEOUT_MS = 5000

const PET_COLUMNS = 'id, name, category_id AS categoryId, status'
const KEY_COLUMNS = `id, account_id AS accountId, name, prefix, created_at AS createdAt, expires_at AS expiresAt,
  revoked_at AS revokedAt, last_used_at AS lastUsedAt`
const MESSAGE_COLUMNS = 'id, body AS message, status, created_at AS createdAt'

// SQLITE_BUSY, _LOCKED, _IOERR, _FULL, _CANTOPEN: the database cannot serve now, rather than "this write is wrong".
const UNAVAILABLE_RESULT_CODES = new Set([5, 6, 10, 13, 14])

function translate(error: unknown): unknown {
  const { code, errcode } = (error ?? {}) as { code?: string; errcode?: number }
  const unavailable =
    (code === 'ERR_SQLITE_ERROR' && UNAVAILABLE_RESULT_CODES.has((errcode ?? 0) & 0xff)) || code === 'ERR_INVALID_STATE'
  return unavailable ? new DatabaseUnavailableError(String(error)) : error
}

/** Runs a read, turning "cannot serve now" failures into DatabaseUnavailableError. */
function read<T>(run: () => T): Promise<T> {
  try {
    return Promise.resolve(run())
  } catch (error) {
    return Promise.reject(translate(error))
  }
}

interface PendingWrite {
  run: () => unknown
  resolve: (value: unknown) => void
  reject: (error: unknown) => void
}

/** `sqlite:data/x.db`, `sqlite:/abs/x.db`, `sqlite:///abs/x.db` or `sqlite::memory:` → the file path. */
export function sqlitePath(url: string): string {
  const rest = url.replace(/^sqlite:/, '')
  return rest.startsWith('//') ? rest.slice(2) : rest
}

export class SqliteStore implements Store {
  #db: DatabaseSync
  #pending: PendingWrite[] = []
  #flushing: Promise<void> | null = null
  #closed = false
  #petsVersion = 0
  #dataVersion = -1
  #sql: ReturnType<typeof prepareStatements>

  constructor(url: string) {
    const path = sqlitePath(url)
    if (path !== ':memory:') mkdirSync(dirname(path), { recursive: true })
    this.#db = new DatabaseSync(path)
    this.#db.exec(`PRAGMA busy_timeout = ${BUSY_TIMEOUT_MS}`)
    this.#db.exec('PRAGMA journal_mode = WAL')
    this.#db.exec('PRAGMA synchronous = FULL')
    this.#db.exec('PRAGMA foreign_keys = ON')
    this.#migrate()
    this.#sql = prepareStatements(this.#db)
  }

  // ─── LIFECYCLE ─────────────────────────────────────────────────────────────────────────────

  async ping(): Promise<void> {
    await read(() => this.#sql.ping.get())
  }

  async close(): Promise<void> {
    if (this.#closed) return
    this.#closed = true
    while (this.#flushing || this.#pending.length > 0) await (this.#flushing ?? this.#scheduleFlush())
    this.#db.close()
  }

  // ─── PETS ──────────────────────────────────────────────────────────────────────────────────

  createPet(pet: NewPet, idempotency?: IdempotencyRef): Promise<Pet> {
    return this.#write(() => {
      const created = this.#sql.insertPet.get(
        pet.name,
        pet.categoryId,
        pet.status ?? DEFAULT_PET_STATUS,
      ) as unknown as Pet
      if (idempotency) this.#completeIdempotency(idempotency, 201, created)
      this.#petsVersion++
      return created
    })
  }

  getPet(id: number): Promise<Pet | null> {
    return read(() => (this.#sql.getPet.get(id) as Pet | undefined) ?? null)
  }

  listPets({ limit, status, afterId = 0 }: ListPetsOptions): Promise<PetPage> {
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

  petsVersion(): number {
    // data_version changes when another connection (another process) commits; our own pet writes
    // are counted in #petsVersion directly. Either one moves the version.
    const { data_version } = this.#sql.dataVersion.get() as { data_version: number }
    if (data_version !== this.#dataVersion) {
      this.#dataVersion = data_version
      this.#petsVersion++
    }
    return this.#petsVersion
  }

  // ─── ACCOUNTS ──────────────────────────────────────────────────────────────────────────────

  createAccount(email: string, passwordHash?: string): Promise<Account | null> {
    return this.#write(
      () =>
        (this.#sql.insertAccount.get(email.toLowerCase(), passwordHash ?? null, now()) as Account | undefined) ?? null,
    )
  }

  findAccountByEmail(email: string): Promise<Account | null> {
    return read(() => (this.#sql.getAccountByEmail.get(email.toLowerCase()) as Account | undefined) ?? null)
  }

  findAccountLogin(email: string): Promise<{ account: Account; passwordHash: string | null } | null> {
    return read(() => {
      const row = this.#sql.getAccountLogin.get(email.toLowerCase()) as
        | (Account & { passwordHash: string | null })
        | undefined
      if (!row) return null
      const { passwordHash, ...account } = row
      return { account, passwordHash }
    })
  }

  setAccountPassword(accountId: number, passwordHash: string): Promise<boolean> {
    return this.#write(() => this.#sql.setPassword.run(passwordHash, accountId).changes > 0)
  }

  // ─── SESSIONS ──────────────────────────────────────────────────────────────────────────────

  createSession(session: { hash: string; accountId: number; expiresAt: string }): Promise<void> {
    return this.#write(() => {
      this.#sql.insertSession.run(session.hash, session.accountId, now(), session.expiresAt)
    })
  }

  findSession(hash: string): Promise<Session | null> {
    return read(() => (this.#sql.getSession.get(hash, now()) as Session | undefined) ?? null)
  }

  deleteSession(hash: string): Promise<void> {
    return this.#write(() => {
      this.#sql.deleteSession.run(hash)
    })
  }

  // ─── API KEYS ──────────────────────────────────────────────────────────────────────────────

  createApiKey(key: NewApiKey): Promise<ApiKey> {
    return this.#write(
      () =>
        this.#sql.insertKey.get(
          randomId('key'),
          key.accountId,
          key.name,
          key.prefix,
          key.hash,
          now(),
          key.expiresAt,
        ) as unknown as ApiKey,
    )
  }

  listApiKeys(accountId: number): Promise<ApiKey[]> {
    return read(() => this.#sql.listKeys.all(accountId) as unknown as ApiKey[])
  }

  findApiKeyByHash(hash: string): Promise<ApiKey | null> {
    return read(() => (this.#sql.getKeyByHash.get(hash) as ApiKey | undefined) ?? null)
  }

  revokeApiKey(id: string, accountId?: number): Promise<ApiKey | null> {
    const owner = accountId ?? null
    return this.#write(() => (this.#sql.revokeKey.get(now(), id, owner, owner) as ApiKey | undefined) ?? null)
  }

  touchApiKeys(usages: { id: string; at: string }[]): Promise<void> {
    return this.#write(() => {
      for (const { id, at } of usages) this.#sql.touchKey.run(at, id, at)
    })
  }

  // ─── MESSAGES ──────────────────────────────────────────────────────────────────────────────

  createMessage(accountId: number, text: string, idempotency?: IdempotencyRef): Promise<Message> {
    return this.#write(() => {
      const message = this.#sql.insertMessage.get(
        randomId('msg'),
        accountId,
        text,
        'queued',
        now(),
      ) as unknown as Message
      if (idempotency) this.#completeIdempotency(idempotency, 202, message)
      return message
    })
  }

  listMessages(accountId: number, limit: number): Promise<Message[]> {
    return read(() => this.#sql.listMessages.all(accountId, limit) as unknown as Message[])
  }

  // ─── SETTINGS ──────────────────────────────────────────────────────────────────────────────

  async secret(name: string, generate: () => string): Promise<string> {
    await this.#write(() => this.#sql.insertSecret.run(name, generate()))
    return read(() => (this.#sql.getSecret.get(name) as { value: string }).value)
  }

  // ─── IDEMPOTENCY ───────────────────────────────────────────────────────────────────────────

  claimIdempotencyKey(claim: IdempotencyClaim): Promise<IdempotencyState> {
    return this.#write((): IdempotencyState => {
      const at = now()
      this.#sql.dropStaleIdempotency.run(claim.scope, claim.key, at, claim.staleBefore)
      if (this.#sql.claimIdempotency.get(claim.scope, claim.key, claim.fingerprint, at, claim.expiresAt)) {
        return { state: 'claimed' }
      }
      const row = this.#sql.getIdempotency.get(claim.scope, claim.key) as unknown as IdempotencyRow
      return idempotencyState(row, claim.fingerprint)
    })
  }

  releaseIdempotencyKey(ref: IdempotencyRef): Promise<void> {
    return this.#write(() => {
      this.#sql.releaseIdempotency.run(ref.scope, ref.key)
    })
  }

  // ─── HOUSEKEEPING ──────────────────────────────────────────────────────────────────────────

  purgeExpired(at: string): Promise<number> {
    return this.#write(
      () => Number(this.#sql.purgeSessions.run(at).changes) + Number(this.#sql.purgeIdempotency.run(at).changes),
    )
  }

  // ─── INTERNALS ─────────────────────────────────────────────────────────────────────────────

  #migrate(): void {
    const db = this.#db
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
            now(),
          )
        }
        db.exec('COMMIT')
      } catch (error) {
        db.exec('ROLLBACK')
        throw error
      }
    }
  }

  #completeIdempotency(ref: IdempotencyRef, status: number, body: unknown): void {
    this.#sql.completeIdempotency.run(status, JSON.stringify(body), ref.scope, ref.key)
  }

  /** Queues a write for the next group commit; resolves with its result once the commit is durable. */
  #write<T>(run: () => T): Promise<T> {
    if (this.#closed) return Promise.reject(new Error('The store is closed'))
    return new Promise<T>((resolve, reject) => {
      this.#pending.push({ run, resolve: resolve as (value: unknown) => void, reject })
      if (this.#pending.length === 1 && !this.#flushing) this.#scheduleFlush()
    })
  }

  #scheduleFlush(): Promise<void> {
    this.#flushing ??= new Promise<void>((done) => {
      // setImmediate runs after the I/O callbacks of this loop turn, so requests read together commit together.
      setImmediate(() => {
        this.#flush()
        this.#flushing = null
        if (this.#pending.length > 0) this.#scheduleFlush()
        done()
      })
    })
    return this.#flushing
  }

  #flush(): void {
    const batch = this.#pending
    this.#pending = []
    if (batch.length === 0) return
    const db = this.#db
    const results: { ok: boolean; value: unknown }[] = []
    try {
      db.exec('BEGIN IMMEDIATE')
      for (const write of batch) {
        this.#sql.savepoint.run()
        try {
          results.push({ ok: true, value: write.run() })
          this.#sql.release.run()
        } catch (error) {
          this.#sql.rollbackTo.run()
          this.#sql.release.run()
          results.push({ ok: false, value: error })
        }
      }
      db.exec('COMMIT')
    } catch (error) {
      if (db.isTransaction) db.exec('ROLLBACK')
      for (const write of batch) write.reject(translate(error))
      return
    }
    batch.forEach((write, i) => {
      const result = results[i] as { ok: boolean; value: unknown }
      if (result.ok) write.resolve(result.value)
      else write.reject(result.value)
    })
  }
}

function prepareStatements(db: DatabaseSync) {
  const s = (sql: string): StatementSync => db.prepare(sql)
  return {
    ping: s('SELECT 1'),
    dataVersion: s('PRAGMA data_version'),
    savepoint: s('SAVEPOINT write'),
    release: s('RELEASE write'),
    rollbackTo: s('ROLLBACK TO write'),
    insertPet: s(`INSERT INTO pets (name, category_id, status) VALUES (?, ?, ?) RETURNING ${PET_COLUMNS}`),
    getPet: s(`SELECT ${PET_COLUMNS} FROM pets WHERE id = ?`),
    listPets: s(`SELECT ${PET_COLUMNS} FROM pets WHERE id > ? ORDER BY id LIMIT ?`),
    listPetsByStatus: s(`SELECT ${PET_COLUMNS} FROM pets WHERE status = ? AND id > ? ORDER BY id LIMIT ?`),
    insertAccount: s(`INSERT INTO accounts (email, password_hash, created_at) VALUES (?, ?, ?)
      ON CONFLICT (email) DO NOTHING RETURNING id, email, created_at AS createdAt`),
    getAccountByEmail: s('SELECT id, email, created_at AS createdAt FROM accounts WHERE email = ?'),
    getAccountLogin: s(
      'SELECT id, email, created_at AS createdAt, password_hash AS passwordHash FROM accounts WHERE email = ?',
    ),
    setPassword: s('UPDATE accounts SET password_hash = ? WHERE id = ?'),
    insertSession: s('INSERT INTO sessions (id, account_id, created_at, expires_at) VALUES (?, ?, ?, ?)'),
    getSession: s(`SELECT s.account_id AS accountId, a.email, s.expires_at AS expiresAt
      FROM sessions s JOIN accounts a ON a.id = s.account_id WHERE s.id = ? AND s.expires_at > ?`),
    deleteSession: s('DELETE FROM sessions WHERE id = ?'),
    insertKey: s(`INSERT INTO api_keys (id, account_id, name, prefix, key_hash, created_at, expires_at)
      VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING ${KEY_COLUMNS}`),
    listKeys: s(`SELECT ${KEY_COLUMNS} FROM api_keys WHERE account_id = ? ORDER BY created_at DESC, id`),
    getKeyByHash: s(`SELECT ${KEY_COLUMNS} FROM api_keys WHERE key_hash = ?`),
    revokeKey: s(`UPDATE api_keys SET revoked_at = coalesce(revoked_at, ?)
      WHERE id = ? AND (? IS NULL OR account_id = ?) RETURNING ${KEY_COLUMNS}`),
    touchKey: s('UPDATE api_keys SET last_used_at = ? WHERE id = ? AND (last_used_at IS NULL OR last_used_at < ?)'),
    insertMessage: s(`INSERT INTO messages (id, account_id, body, status, created_at) VALUES (?, ?, ?, ?, ?)
      RETURNING ${MESSAGE_COLUMNS}`),
    listMessages: s(`SELECT ${MESSAGE_COLUMNS} FROM messages WHERE account_id = ? ORDER BY seq DESC LIMIT ?`),
    insertSecret: s('INSERT INTO secrets (name, value) VALUES (?, ?) ON CONFLICT (name) DO NOTHING'),
    getSecret: s('SELECT value FROM secrets WHERE name = ?'),
    dropStaleIdempotency: s(`DELETE FROM idempotency_keys WHERE scope = ? AND key = ?
      AND (expires_at <= ? OR (state = 'in_progress' AND created_at <= ?))`),
    claimIdempotency: s(`INSERT INTO idempotency_keys (scope, key, fingerprint, state, created_at, expires_at)
      VALUES (?, ?, ?, 'in_progress', ?, ?) ON CONFLICT (scope, key) DO NOTHING RETURNING 1 AS claimed`),
    getIdempotency: s(`SELECT fingerprint, state, response_status AS status, response_body AS body
      FROM idempotency_keys WHERE scope = ? AND key = ?`),
    completeIdempotency: s(`UPDATE idempotency_keys SET state = 'done', response_status = ?, response_body = ?
      WHERE scope = ? AND key = ?`),
    releaseIdempotency: s("DELETE FROM idempotency_keys WHERE scope = ? AND key = ? AND state = 'in_progress'"),
    purgeSessions: s('DELETE FROM sessions WHERE expires_at <= ?'),
    purgeIdempotency: s('DELETE FROM idempotency_keys WHERE expires_at <= ?'),
  }
}

function now(): string {
  return new Date().toISOString()
}
