import type { Store } from './types.ts'

/** Opens the store named by DATABASE_URL (`sqlite:…` or `postgres://…`), applying pending migrations. */
export async function openStore(databaseUrl: string): Promise<Store> {
  if (databaseUrl.startsWith('sqlite:')) {
    const { SqliteStore } = await import('./sqlite.ts')
    return new SqliteStore(databaseUrl)
  }
  throw new Error(`Unsupported DATABASE_URL scheme: ${databaseUrl.split(':')[0]}`)
}

export type { Store } from './types.ts'
