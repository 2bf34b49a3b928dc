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
 */
import type { Message } from '../schemas/messages.ts'
import type { NewPet, Pet, PetStatus } from '../schemas/pets.ts'

/**
 * The database cannot be reached or did not answer in time. Stores throw it instead of a driver
 * error so that the API can answer 503 with Retry-After; the write it interrupted was not applied
 * or, at worst, is applied exactly once and was never acknowledged.
 */
export class DatabaseUnavailableError extends Error {
  override name = 'DatabaseUnavailableError'
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
}

export interface NewApiKey {
  accountId: number
  name: string
  prefix: string
  /** SHA-256 of the secret (see api-keys.ts). The secret itself is never stored. */
  hash: string
  expiresAt: string | null
}

export interface Store {
  // ─── LIFECYCLE ───────────────────────────────────────────────────────────────────────────────
  /** Resolves when the database answers a trivial query; rejects otherwise. */
  ping(): Promise<void>
  /** Finishes pending writes and releases the database. Safe to call twice. */
  close(): Promise<void>

  // ─── PETS ────────────────────────────────────────────────────────────────────────────────────
  /** Stores a pet (`status` defaults to `available`) and returns it with its new id. */
  createPet(pet: NewPet): Promise<Pet>
  /** The pet with this id, or null. */
  getPet(id: number): Promise<Pet | null>
  /** One page of pets in id order, optionally of one status, after a given id. */
  listPets(options: ListPetsOptions): Promise<PetPage>

  // ─── ACCOUNTS ────────────────────────────────────────────────────────────────────────────────
  /** Creates an account; null when the email (compared case-insensitively) is taken. */
  createAccount(email: string): Promise<Account | null>
  /** The account with this email (case-insensitive), or null. */
  findAccountByEmail(email: string): Promise<Account | null>

  // ─── API KEYS ────────────────────────────────────────────────────────────────────────────────
  createApiKey(key: NewApiKey): Promise<ApiKey>
  /** Keys of an account, newest first, revoked and expired ones included. */
  listApiKeys(accountId: number): Promise<ApiKey[]>
  /** The key whose secret has this hash, revoked or not, or null. */
  findApiKeyByHash(hash: string): Promise<ApiKey | null>
  /** Marks a key revoked (keeping the first revocation time) and returns it; null when no such key. */
  revokeApiKey(id: string): Promise<ApiKey | null>

  // ─── MESSAGES ────────────────────────────────────────────────────────────────────────────────
  /** Stores a message of an account with status `queued`. */
  createMessage(accountId: number, text: string): Promise<Message>
  /** The account's most recent messages, newest first. Never another account's. */
  listMessages(accountId: number, limit: number): Promise<Message[]>

  // ─── SETTINGS ────────────────────────────────────────────────────────────────────────────────
  /**
   * The named secret shared by every instance on this database, created with `generate()` by
   * whichever instance asks first (e.g. the key that signs pagination cursors).
   */
  secret(name: string, generate: () => string): Promise<string>
}
