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
import { randomId } from '../api-keys.ts'
import type { Message } from '../schemas/messages.ts'
import { DEFAULT_PET_STATUS, type NewPet, type Pet } from '../schemas/pets.ts'
import { newerThanCode, readMigrations } from './migrations.ts'
import {
  type Account,
  type ApiKey,
  DatabaseUnavailableError,
  type ListPetsOptions,
  type NewApiKey,
  type PetPage,
  type Store,
} from './types.ts'

export interface PostgresOptions {
  databaseUrl: string
  /** Most connections this process opens. */
  poolSize: number
  /** Deadline for getting a connection, and for each statement. */
  timeoutMs: number
}

const PET_COLUMNS = 'id, name, category_id AS "categoryId", status'
const KEY_COLUMNS = `id, account_id AS "accountId", name, prefix, created_at AS "createdAt", expires_at AS "expiresAt",
  revoked_at AS "revokedAt", last_used_at AS "lastUsedAt"`
const MESSAGE_COLUMNS = 'id, body AS message, status, created_at AS "createdAt"'

// Node's socket errors and PostgreSQL's connection, shutdown and overload classes (08, 57P, 53300).
const UNAVAILABLE_CODES =
  /^(ECONNREFUSED|ECONNRESET|ETIMEDOUT|EPIPE|ENOTFOUND|EHOSTUNREACH|EAI_AGAIN|08...|57P0.|53300)$/
const UNAVAILABLE_MESSAGES = /timeout|terminated|Connection ended|not queryable|ended unexpectedly|Client was closed/i

function isUnavailable(error: unknown): boolean {
  const { code, message } = (error ?? {}) as { code?: unknown; message?: unknown }
  return (
    (typeof code === 'string' && UNAVAILABLE_CODES.test(code)) ||
    (typeof message === 'string' && UNAVAILABLE_MESSAGES.test(message))
  )
}

const SQL = {
  ping: 'SELECT 1',
  insertPet: `INSERT INTO pets (name, category_id, status) VALUES ($1, $2, $3) RETURNING ${PET_COLUMNS}`,
  getPet: `SELECT ${PET_COLUMNS} FROM pets WHERE id = $1`,
  listPets: `SELECT ${PET_COLUMNS} FROM pets WHERE id > $1 ORDER BY id LIMIT $2`,
  listPetsByStatus: `SELECT ${PET_COLUMNS} FROM pets WHERE status = $1 AND id > $2 ORDER BY id LIMIT $3`,
  insertAccount: `INSERT INTO accounts (email, created_at) VALUES ($1, now()) ON CONFLICT (email) DO NOTHING
    RETURNING id, email, created_at AS "createdAt"`,
  getAccountByEmail: 'SELECT id, email, created_at AS "createdAt" FROM accounts WHERE email = $1',
  insertKey: `INSERT INTO api_keys (id, account_id, name, prefix, key_hash, created_at, expires_at)
    VALUES ($1, $2, $3, $4, $5, now(), $6) RETURNING ${KEY_COLUMNS}`,
  listKeys: `SELECT ${KEY_COLUMNS} FROM api_keys WHERE account_id = $1 ORDER BY created_at DESC, id`,
  getKeyByHash: `SELECT ${KEY_COLUMNS} FROM api_keys WHERE key_hash = $1`,
  revokeKey: `UPDATE api_keys SET revoked_at = coalesce(revoked_at, now()) WHERE id = $1 RETURNING ${KEY_COLUMNS}`,
  insertMessage: `INSERT INTO messages (id, account_id, body, status, created_at) VALUES ($1, $2, $3, $4, now())
    RETURNING ${MESSAGE_COLUMNS}`,
  listMessages: `SELECT ${MESSAGE_COLUMNS} FROM messages WHERE account_id = $1 ORDER BY seq DESC LIMIT $2`,
  insertSecret: 'INSERT INTO secrets (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING',
  getSecret: 'SELECT value FROM secrets WHERE name = $1',
} as const

export class PostgresStore implements Store {
  #pool: Pool
  #closing: Promise<void> | null = null
  /** Statements under way, so that close() lets them finish. */
  #inflight = new Set<Promise<unknown>>()

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
    try {
      await store.#migrate()
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

  close(): Promise<void> {
    this.#closing ??= Promise.allSettled(this.#inflight).then(() => this.#pool.end())
    return this.#closing
  }

  // ─── PETS ──────────────────────────────────────────────────────────────────────────────────

  async createPet(pet: NewPet): Promise<Pet> {
    const rows = await this.#query<Pet>(
      'insertPet',
      [pet.name, pet.categoryId, pet.status ?? DEFAULT_PET_STATUS],
      'write',
    )
    return rows[0] as Pet
  }

  async getPet(id: number): Promise<Pet | null> {
    return (await this.#query<Pet>('getPet', [id]))[0] ?? null
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

  // ─── ACCOUNTS ──────────────────────────────────────────────────────────────────────────────

  async createAccount(email: string): Promise<Account | null> {
    return (await this.#query<Account>('insertAccount', [email.toLowerCase()], 'write'))[0] ?? null
  }

  async findAccountByEmail(email: string): Promise<Account | null> {
    return (await this.#query<Account>('getAccountByEmail', [email.toLowerCase()]))[0] ?? null
  }

  // ─── API KEYS ──────────────────────────────────────────────────────────────────────────────

  async createApiKey(key: NewApiKey): Promise<ApiKey> {
    const values = [randomId('key'), key.accountId, key.name, key.prefix, key.hash, key.expiresAt]
    return (await this.#query<ApiKey>('insertKey', values, 'write'))[0] as ApiKey
  }

  async listApiKeys(accountId: number): Promise<ApiKey[]> {
    return this.#query<ApiKey>('listKeys', [accountId])
  }

  async findApiKeyByHash(hash: string): Promise<ApiKey | null> {
    return (await this.#query<ApiKey>('getKeyByHash', [hash]))[0] ?? null
  }

  async revokeApiKey(id: string): Promise<ApiKey | null> {
    return (await this.#query<ApiKey>('revokeKey', [id], 'write'))[0] ?? null
  }

  // ─── MESSAGES ──────────────────────────────────────────────────────────────────────────────

  async createMessage(accountId: number, text: string): Promise<Message> {
    const values = [randomId('msg'), accountId, text, 'queued']
    return (await this.#query<Message>('insertMessage', values, 'write'))[0] as Message
  }

  async listMessages(accountId: number, limit: number): Promise<Message[]> {
    return this.#query<Message>('listMessages', [accountId, limit])
  }

  // ─── SETTINGS ──────────────────────────────────────────────────────────────────────────────

  async secret(name: string, generate: () => string): Promise<string> {
    await this.#query('insertSecret', [name, generate()], 'write')
    return ((await this.#query<{ value: string }>('getSecret', [name]))[0] as { value: string }).value
  }

  // ─── INTERNALS ─────────────────────────────────────────────────────────────────────────────

  #query<T>(name: keyof typeof SQL, values: unknown[], kind: 'read' | 'write' = 'read'): Promise<T[]> {
    if (this.#closing) return Promise.reject(new DatabaseUnavailableError('The store is closed'))
    const query = this.#run<T>(name, values, kind)
    this.#inflight.add(query)
    return query.finally(() => this.#inflight.delete(query))
  }

  /** Runs a named statement; reads get one retry on a fresh connection when the database went away. */
  async #run<T>(name: keyof typeof SQL, values: unknown[], kind: 'read' | 'write'): Promise<T[]> {
    const config: QueryConfig = { name, text: SQL[name], values }
    for (let attempt = 1; ; attempt++) {
      try {
        return (await this.#pool.query(config)).rows as T[]
      } catch (error) {
        if (!isUnavailable(error)) throw error
        if (kind === 'write' || attempt === 2) throw new DatabaseUnavailableError(String(error))
      }
    }
  }

  async #migrate(): Promise<void> {
    let client: PoolClient
    try {
      client = await this.#pool.connect()
    } catch (error) {
      throw isUnavailable(error) ? new DatabaseUnavailableError(`Cannot reach PostgreSQL: ${error}`) : error
    }
    try {
      await client.query('BEGIN')
      // One migrator per schema at a time; the lock ends with the transaction.
      await client.query("SELECT pg_advisory_xact_lock(hashtext('animal-store:' || current_schema()))")
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
      await client.query('COMMIT')
    } catch (error) {
      await client.query('ROLLBACK').catch(() => {})
      throw error
    } finally {
      client.release()
    }
  }
}

async function loadPg(): Promise<typeof import('pg')> {
  try {
    return await import('pg')
  } catch {
    throw new Error("DATABASE_URL is PostgreSQL, which needs the optional dependency 'pg': npm install pg")
  }
}
