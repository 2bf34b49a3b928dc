import type { Store } from './types.ts'

export interface StoreOptions {
  /** `sqlite:<path>` or `postgres://…` */
  databaseUrl: string
  /** PostgreSQL only: most connections per process. */
  poolSize: number
  /** PostgreSQL only: deadline for a connection and for each statement. */
  timeoutMs: number
  /**
   * Refuse a database the service has not set up (no migrations applied) rather than set it up:
   * for tools that only use what is there, so that a mistyped DATABASE_URL creates nothing.
   */
  existing?: boolean
  /**
   * SQLite: no writer thread; each write is committed on the calling thread, through the same
   * statements, before its promise settles (blocking the thread for its fsync, with no group
   * commit). For a process that makes a write or two and exits (the CLI), where starting the
   * thread costs more than the work. PostgreSQL: no effect (it has no writer thread).
   */
  direct?: boolean
  /**
   * With tracing on: the traceparent of the span active when a write makes an event, kept with the
   * event so that its deliveries continue the request's trace. Unset: none is kept.
   */
  traceparent?: () => string | null
}

/** Opens the store named by DATABASE_URL, applying pending migrations. */
export async function openStore(options: StoreOptions): Promise<Store> {
  if (options.databaseUrl.startsWith('sqlite:')) {
    const { SqliteStore } = await import('./sqlite.ts')
    return SqliteStore.open(options.databaseUrl, options)
  }
  const { PostgresStore } = await import('./postgres.ts')
  return PostgresStore.open(options)
}

export { DatabaseNotSetUpError, DatabaseUnavailableError, type Store } from './types.ts'
