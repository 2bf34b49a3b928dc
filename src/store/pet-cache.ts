/**
 * A read-through cache of pet reads, beside the store (decision 47). A read the store answered is
 * kept, with the JSON the route made of it, for as long as nothing it holds may have changed:
 * a page until the store's petsVersion moves (a page that has a next page, for good: new pets get
 * higher ids), a pet until a write through this process forgets it. Routes never see it work.
 */
import { BoundedMap } from '../lib/bounded-map.ts'
import type { Pet } from '../schemas/pets.ts'
import type { ListPetsOptions, Store } from './types.ts'

/** Entries kept: pages are small, and the popular ones are few (first pages, common filters). */
const CACHED_PAGES = 1000
const CACHED_PETS = 10_000

/** A value as read, and its JSON once a route has serialized it (src/plugins/store.ts, sendRead). */
export interface Read<T> {
  readonly value: T
  /** The store's petsVersion when it was read. */
  readonly version: number | null
  json?: string
}

/** A page of pets as read: `value` is what the route sends; `nextAfterId` where the next page starts. */
export interface PageRead extends Read<Pet[]> {
  readonly nextAfterId: number | null
}

export class PetCache {
  readonly #store: Store
  readonly #pets = new BoundedMap<number, Read<Pet>>(CACHED_PETS)
  readonly #pages = new BoundedMap<string, PageRead>(CACHED_PAGES)

  constructor(store: Store) {
    this.#store = store
  }

  /**
   * Calls `use` with the pet (null: none): at once, without a promise, when it is cached (a
   * promise costs a cached read a tenth of its time), else once the store has answered.
   */
  pet<R>(id: number, use: (read: Read<Pet | null>) => R): R | Promise<R> {
    const hit = this.#pets.get(id)
    if (hit) return use(hit)
    return this.#store.getPet(id).then((pet) => {
      const read = { value: pet, version: null }
      if (pet) this.#pets.set(id, read as Read<Pet>)
      return use(read)
    })
  }

  /** Calls `use` with one page of pets, as `pet` does. */
  page<R>(options: ListPetsOptions, use: (read: PageRead) => R): R | Promise<R> {
    const key = `${options.limit} ${options.status} ${options.afterId}`
    const hit = this.#pages.get(key)
    if (hit && hit.nextAfterId !== null) return use(hit)
    const version = this.#store.petsVersion()
    if (hit && hit.version === version) return use(hit)
    return this.#store.listPets(options).then(({ pets, nextAfterId }) => {
      const read = { value: pets, nextAfterId, version }
      // A store that cannot tell when pets change gets no cached pages.
      if (version !== null) this.#pages.set(key, read)
      return use(read)
    })
  }

  /** Forgets what a write to this pet may have changed. */
  forget(id: number): void {
    this.#pets.delete(id)
    this.#pages.clear()
  }
}
