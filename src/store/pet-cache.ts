/**
 * A read-through cache of pet reads, beside the store (decision 79). A read the store
 * answered is kept, with the JSON the route made of it, for as long as nothing it holds may have
 * changed, as far as this process can tell without a round-trip:
 * - where the store has a petsVersion (SQLite: it moves with any commit by any process), while it
 *   stays the same;
 * - where it has none (PostgreSQL: other instances write too), for FRESH_MS at most.
 * A write through this process forgets what it changed at once (`forget`). Routes never see it work.
 */
import { BoundedMap } from '../lib/bounded-map.ts'
import type { Pet } from '../schemas/pets.ts'
import type { ListPetsOptions, Store } from './types.ts'

/** Entries kept: pages are small, and the popular ones are few (first pages, common filters). */
const CACHED_PAGES = 1000
const CACHED_PETS = 10_000

/**
 * The longest a pet changed by another instance may be served as it was, where the store cannot
 * tell that it changed (the freshness bound of docs/store.md, decision 79).
 */
export const FRESH_MS = 1000

/** A value as read, and its JSON once a route has serialized it (src/plugins/store.ts, sendRead). */
export interface Read<T> {
  readonly value: T
  /** The store's petsVersion when it was read. */
  readonly version: number | null
  json?: string
}

/** A pet as read (null: none), with the version of its row (its ETag), and when to read it again. */
export interface PetRead extends Read<Pet | null> {
  /** The pet's own version, moved by every change to it; null when there is no pet. */
  readonly petVersion: number | null
  /** Date.now() past which the read is not served, where the store has no petsVersion. */
  readonly until: number
  /** Its ETag, once a route has made it. */
  etag?: string
}

/** A page of pets as read: `value` is what the route sends; `nextAfterId` where the next page starts. */
export interface PageRead extends Read<Pet[]> {
  readonly nextAfterId: number | null
  /** Date.now() past which the read is not served, where the store has no petsVersion. */
  readonly until: number
}

export class PetCache {
  readonly #store: Store
  readonly #pets = new BoundedMap<number, PetRead>(CACHED_PETS)
  readonly #pages = new BoundedMap<string, PageRead>(CACHED_PAGES)
  /**
   * Moved by every `forget`: a read that began before a write through this process may return
   * what the write replaced, and is then not kept.
   */
  #generation = 0

  constructor(store: Store) {
    this.#store = store
  }

  /**
   * Calls `use` with the pet (value null: none): at once, without a promise, when it is cached (a
   * promise costs a cached read a tenth of its time), else once the store has answered.
   */
  pet<R>(id: number, use: (read: PetRead) => R): R | Promise<R> {
    const hit = this.#pets.get(id)
    if (hit) {
      const version = this.#store.petsVersion()
      if (version === null ? Date.now() < hit.until : hit.version === version) return use(hit)
    }
    // Taken before the read: what changes after it is seen by the next read, within the bound.
    const version = this.#store.petsVersion()
    const until = Date.now() + FRESH_MS
    const generation = this.#generation
    return this.#store.getVersionedPet(id).then((found) => {
      const read: PetRead = { value: found?.pet ?? null, petVersion: found?.version ?? null, version, until }
      // Misses are not kept: a pet created anywhere is found at once.
      if (found && generation === this.#generation) this.#pets.set(id, read)
      return use(read)
    })
  }

  /** Calls `use` with one page of pets, as `pet` does. */
  page<R>(options: ListPetsOptions, use: (read: PageRead) => R): R | Promise<R> {
    const key = `${options.limit} ${options.status} ${options.afterId}`
    const version = this.#store.petsVersion()
    const hit = this.#pages.get(key)
    // Pets change now: any page, not only the last, is as old as the version it was read at.
    if (hit && (version === null ? Date.now() < hit.until : hit.version === version)) return use(hit)
    const until = Date.now() + FRESH_MS
    const generation = this.#generation
    return this.#store.listPets(options).then(({ pets, nextAfterId }) => {
      const read = { value: pets, nextAfterId, version, until }
      if (generation === this.#generation) this.#pages.set(key, read)
      return use(read)
    })
  }

  /**
   * Forgets what a write to this pet may have changed: this process shows the change at once.
   * Every write that changes a pet calls it once the write is done (createPet, updatePet, orders).
   */
  forget(id: number): void {
    this.#generation++
    this.#pets.delete(id)
    this.#pages.clear()
  }
}
