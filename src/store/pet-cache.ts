/**
 * The pet cache (decision 98): reads of pets kept, with the JSON the route made of them, until the
 * pet change feed (Store.petChanges) says that something they hold changed. It keeps itself: every
 * pet write by any process, this one or another, lands in the feed in its own transaction, and the
 * cache forgets exactly the pets written and the pages that could hold them. Writes of other kinds
 * (orders that leave a pet alone, messages, keys, idempotency records) forget nothing.
 * - SQLite ('on-read'): the feed is read before the first cached read of each turn of the event
 *   loop (a look up an index), so a write anywhere is seen by the next request.
 * - PostgreSQL ('polled'): the feed is read every POLL_MS, and an entry is served only while the
 *   last read of it is younger than FRESH_MS.
 * On both, a pet write through this process forgets what it changed before it answers (cachedStore:
 * SQLite reads its feed, PostgreSQL takes the change from the write's result), so this process shows
 * its own writes at once.
 * Routes never see it work; nothing outside this file forgets.
 */
import { BoundedMap } from '../lib/bounded-map.ts'
import type { Pet, PetStatus } from '../schemas/pets.ts'
import type { ListPetsOptions, PetChange, PetFeed, Store } from './types.ts'

/** Entries kept: pages are small, and the popular ones are few (first pages, common filters). */
const CACHED_PAGES = 1000
const CACHED_PETS = 10_000

/**
 * The longest a pet changed by another instance may be served as it was (PostgreSQL): the freshness
 * bound of docs/store.md. Past it without a read of the feed, the cache is not used.
 */
export const FRESH_MS = 1000
/** How often an instance reads the feed where it must poll (PostgreSQL). */
export const POLL_MS = 100

/** A value as read, and its JSON once a route has serialized it (src/plugins/store.ts, sendRead). */
export interface Read<T> {
  readonly value: T
  json?: string
}

/** A pet as read (null: none), with the version of its row (its ETag). */
export interface PetRead extends Read<Pet | null> {
  /** The pet's own version, moved by every change to it; null when there is no pet. */
  readonly petVersion: number | null
  /** Its ETag, once a route has made it. */
  etag?: string
}

/** A page of pets as read: `value` is what the route sends; `nextAfterId` where the next page starts. */
export interface PageRead extends Read<Pet[]> {
  readonly nextAfterId: number | null
  readonly afterId: number
  readonly status: PetStatus | undefined
}

/** Whether the pet `change` touched could change `page`: its pets, or its link to the next page. */
function couldChange(page: PageRead, { petId, from, to }: PetChange): boolean {
  if (petId <= page.afterId) return false
  // A full page ends at its last pet; the last page is open to any later id (a new pet). Past a full
  // page, a pet that leaves what it lists may have been the last after it: then its link is wrong.
  if (page.nextAfterId !== null && petId > page.nextAfterId) {
    return from !== null && (page.status === undefined ? to === null : from === page.status && to !== from)
  }
  return page.status === undefined || page.status === from || page.status === to
}

/** Changes times pages past which all pages are forgotten at once: cheaper than checking each. */
const PAGE_CHECKS = 20_000

export class PetCache {
  readonly #store: Store
  readonly #pets = new BoundedMap<number, PetRead>(CACHED_PETS)
  readonly #pages = new BoundedMap<string, PageRead>(CACHED_PAGES)
  /** Where the next read of the feed starts. */
  #cursor: string | null = null
  /**
   * Moved by every change the feed brings: a read that began before may hold what the change
   * replaced, and is then not kept.
   */
  #generation = 0
  /** Polled feeds: when the last read of the feed that succeeded was sent (performance.now()). */
  #syncedAt = Number.NEGATIVE_INFINITY
  /** Feeds read on read: whether it was read in this turn of the event loop. */
  #lookedThisTurn = false
  #syncing: Promise<void> | null = null
  #again: Promise<void> | null = null
  #timer: NodeJS.Timeout | null = null
  #hits = 0
  #misses = 0

  constructor(store: Store) {
    this.#store = store
  }

  /** Starts following the feed: at once where it is read on each read, on a timer where it is polled. */
  async start(): Promise<void> {
    await this.sync()
    if (this.#store.petFeed === 'polled') {
      this.#timer = setInterval(() => void this.sync().catch(() => {}), POLL_MS).unref()
    }
  }

  stop(): void {
    if (this.#timer) clearInterval(this.#timer)
    this.#timer = null
  }

  /** Reads served from the cache and from the store, since the start. */
  stats(): { hits: number; misses: number } {
    return { hits: this.#hits, misses: this.#misses }
  }

  /**
   * Calls `use` with the pet (value null: none): at once, without a promise, when it is cached (a
   * promise costs a cached read a tenth of its time), else once the store has answered.
   */
  pet<R>(id: number, use: (read: PetRead) => R): R | Promise<R> {
    return this.#through(this.#pets, id, use, async () => {
      const found = await this.#store.getVersionedPet(id)
      // Misses are not kept: a pet created anywhere is found at once.
      return { read: { value: found?.pet ?? null, petVersion: found?.version ?? null }, keep: found !== null }
    })
  }

  /** Calls `use` with one page of pets, as `pet` does. */
  page<R>(options: ListPetsOptions, use: (read: PageRead) => R): R | Promise<R> {
    const { limit, status, afterId = 0 } = options
    return this.#through(this.#pages, `${limit} ${status} ${afterId}`, use, async () => {
      const { pets, nextAfterId } = await this.#store.listPets(options)
      return { read: { value: pets, nextAfterId, afterId, status }, keep: true }
    })
  }

  /** A hit from `entries`, or `load`'s read, kept unless a change came while it was read. */
  #through<K, V, R>(
    entries: BoundedMap<K, V>,
    key: K,
    use: (read: V) => R,
    load: () => Promise<{ read: V; keep: boolean }>,
  ): R | Promise<R> {
    const usable = this.#usable()
    const hit = usable ? entries.get(key) : undefined
    if (hit) {
      this.#hits++
      return use(hit)
    }
    this.#misses++
    const generation = this.#generation
    return load().then(({ read, keep }) => {
      if (keep && usable && generation === this.#generation) entries.set(key, read)
      return use(read)
    })
  }

  /**
   * Reads the feed and forgets what it names. Resolves once a read of the feed that began after
   * this call has been applied: every pet write committed before the call is forgotten by then.
   * Concurrent calls share reads, so at most one is under way and one waits.
   */
  sync(): Promise<void> {
    if (this.#syncing === null) {
      this.#syncing = this.#read().finally(() => {
        this.#syncing = null
      })
      return this.#syncing
    }
    this.#again ??= this.#syncing
      .catch(() => {})
      .then(() => {
        this.#again = null
        return this.sync()
      })
    return this.#again
  }

  /** Forgets every pet and page: a write of this process failed, and may have changed anything. */
  forgetAll(): void {
    this.#generation++
    this.#pets.clear()
    this.#pages.clear()
  }

  /** Forgets what this process's own write changed, as its result tells (cachedStore). */
  forget(changes: PetChange[]): void {
    this.#forget(changes)
  }

  async #read(): Promise<void> {
    const sentAt = performance.now()
    const feed = await this.#store.petChanges(this.#cursor)
    // A gap in the polls longer than the bound: what was kept is too old to trust, whatever came.
    const stale = this.#store.petFeed === 'polled' && sentAt - this.#syncedAt > FRESH_MS
    this.#apply(feed, stale)
    this.#syncedAt = sentAt
  }

  /**
   * Whether cached reads may be served now (and new ones kept). Where the feed is read on read, it
   * is read once per turn of the event loop: a request served in a turn arrived before it began, so
   * it sees every write acknowledged before it was sent.
   */
  #usable(): boolean {
    if (this.#store.petFeed === 'polled') return performance.now() - this.#syncedAt <= FRESH_MS
    if (this.#cursor === null) return false
    if (!this.#lookedThisTurn) {
      this.#lookedThisTurn = true
      setImmediate(() => {
        this.#lookedThisTurn = false
      })
      this.#apply(this.#store.petChanges(this.#cursor) as PetFeed, false)
    }
    return true
  }

  /** Moves the cursor on, and forgets what the feed names (everything, on a reset): nothing the first time. */
  #apply(feed: PetFeed, forgetAll: boolean): void {
    const first = this.#cursor === null
    this.#cursor = feed.cursor
    if (first) return
    if (feed.reset || forgetAll) this.forgetAll()
    else this.#forget(feed.changes)
  }

  #forget(changes: PetChange[]): void {
    if (changes.length === 0) return
    this.#generation++
    for (const change of changes) this.#pets.delete(change.petId)
    if (changes.length * this.#pages.size > PAGE_CHECKS) this.#pages.clear()
    for (const [key, page] of this.#pages) {
      if (changes.some((change) => couldChange(page, change))) this.#pages.delete(key)
    }
  }
}

/** Every status a pet may have had before a change whose result does not say. */
const ANY_BEFORE: PetChange['from'][] = ['available', 'pending', 'sold']

/**
 * Store methods that change pets, and the changes their results tell. Once such a write is done,
 * this process forgets what it changed before answering, so it shows the change at once: from the
 * result where the feed is polled (a query per write would halve PostgreSQL's write rate), by
 * reading the feed where that is cheap. A method missing here is still seen by the next turn's look
 * (SQLite) or the next poll (PostgreSQL).
 */
type Told<M extends PetWrite> = (args: Parameters<Store[M]>, result: Awaited<ReturnType<Store[M]>>) => PetChange[]
type PetWrite = 'createPet' | 'updatePet' | 'placeOrder' | 'transitionOrder' | 'expireOrders'
const PET_WRITES: { [M in PetWrite]: Told<M> } = {
  createPet: (_, pet) => [{ petId: pet.id, from: null, to: pet.status }],
  updatePet: ([id, changes], result) => {
    if ('updated' in result) return ANY_BEFORE.map((from) => ({ petId: id, from, to: result.updated.pet.status }))
    // Refused, a status change may still have expired the pet's ended hold (Store.updatePet).
    return changes.status === undefined ? [] : [{ petId: id, from: 'pending', to: 'available' }]
  },
  placeOrder: ([order], result) =>
    'placed' in result ? [{ petId: order.petId, from: 'available', to: 'pending' }] : [],
  transitionOrder: ([, , to], result) => {
    if ('changed' in result && result.changed)
      return [{ petId: result.order.petId, from: 'pending', to: to === 'completed' ? 'sold' : 'available' }]
    // Refused as expired, the call may have expired the ended hold itself (Store.transitionOrder).
    return 'order' in result && result.order.status === 'expired'
      ? [{ petId: result.order.petId, from: 'pending', to: 'available' }]
      : []
  },
  expireOrders: (_, orders) => orders.map((order) => ({ petId: order.petId, from: 'pending', to: 'available' })),
}

/** The store, as the app uses it: a pet write returns once the cache has forgotten what it changed. */
export function cachedStore(store: Store, cache: PetCache): Store {
  // Per method: the store's function and its wrapper, made again if the function is replaced.
  const wrapped = new Map<string, { original: unknown; method: (...args: unknown[]) => unknown }>()
  const wrap = (method: (...args: unknown[]) => unknown, name: string) => {
    const told = (PET_WRITES as unknown as Record<string, (args: unknown[], result: never) => PetChange[]>)[name]
    // Called on the store itself, not the proxy: its private fields are the store's.
    if (told === undefined) return method.bind(store)
    return async (...args: unknown[]) => {
      let result: unknown
      try {
        result = await Reflect.apply(method, store, args)
      } catch (error) {
        // A failed write may have committed before its answer was lost: forget everything, with no
        // query, since the database may be what failed (a feed read would wait its timeout again).
        cache.forgetAll()
        throw error
      }
      if (store.petFeed === 'polled') cache.forget(told(args, result as never))
      else await cache.sync().catch(() => {})
      return result
    }
  }
  return new Proxy(store, {
    get(target, name) {
      const value: unknown = Reflect.get(target, name, target)
      if (typeof value !== 'function' || typeof name !== 'string') return value
      let entry = wrapped.get(name)
      if (entry?.original !== value) {
        entry = { original: value, method: wrap(value as (...args: unknown[]) => unknown, name) }
        wrapped.set(name, entry)
      }
      return entry.method
    },
  })
}
