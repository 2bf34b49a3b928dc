/** Everything the bench takes from src/, in one place, so that a move in src/ is one edit here. */
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import type { openStore } from '../src/store/index.ts'

export { generateApiKey } from '../src/domain/api-keys.ts'
export { cursorCodec } from '../src/domain/pagination.ts'
export type { NewPet } from '../src/schemas/pets.ts'
export { openStore } from '../src/store/index.ts'
export type { FeedPosition, Store } from '../src/store/types.ts'

/**
 * openStore of the checkout at `root`: this one's, or another's (BENCH_BASE). A database is only
 * ever set up and written by the code of the service that runs on it: another checkout may have
 * other migrations.
 */
export async function openStoreAt(root: string): Promise<typeof openStore> {
  const store = (await import(pathToFileURL(join(root, 'src/store/index.ts')).href)) as { openStore: typeof openStore }
  return store.openStore
}

/** The names of the environment settings of the checkout at `root` (its src/config.ts). */
export async function settingNamesAt(root: string): Promise<string[]> {
  const config = (await import(pathToFileURL(join(root, 'src/config.ts')).href)) as {
    EnvSchema: { properties: Record<string, unknown> }
  }
  return Object.keys(config.EnvSchema.properties)
}
