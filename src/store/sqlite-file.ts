/**
 * Whether a path still names the database file a connection opened. A file deleted or replaced
 * under a running server keeps taking writes, into an inode nothing points at: they would be gone
 * at the next start. Both threads of the SQLite store compare the file's identity with the one they
 * opened, so that such writes are refused (503) instead of acknowledged.
 */
import { statSync } from 'node:fs'

/** The message's start that says the file went away (the main thread turns it into DatabaseUnavailableError). */
export const FILE_GONE = 'The database file was removed or replaced while in use'

/** Device and inode of the file at `path`, or null when there is none. */
export function fileIdentity(path: string): string | null {
  const stat = statSync(path, { throwIfNoEntry: false })
  return stat ? `${stat.dev}:${stat.ino}` : null
}
