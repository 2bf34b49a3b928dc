/**
 * Whether a path still names the database file a connection opened. A file deleted or replaced
 * under a running server keeps taking writes, into an inode nothing points at: they would be gone
 * at the next start. Both threads of the SQLite store compare the file's identity with the one they
 * opened, so that such writes are refused (503) instead of acknowledged. The same holds for its
 * -wal file (where a commit lives until a checkpoint copies it into the database file) and its
 * -shm file (the index other connections find the -wal's commits by).
 */
import { existsSync, mkdirSync, statSync } from 'node:fs'
import { dirname } from 'node:path'

/** The message's start that says the file went away (the main thread turns it into DatabaseUnavailableError). */
export const FILE_GONE = 'The database file, or its -wal or -shm file, was removed or replaced while in use'

/** Device and inode of the file at `path`, or null when there is none. */
export function fileIdentity(path: string): string | null {
  const stat = statSync(path, { throwIfNoEntry: false })
  return stat ? `${stat.dev}:${stat.ino}` : null
}

/**
 * The identities of the database file and of its -wal and -shm files. While the store's
 * connections are open SQLite keeps both of those (it deletes them with the last connection).
 */
export function filesIdentity(path: string): string {
  return [path, `${path}-wal`, `${path}-shm`].map(fileIdentity).join(' ')
}

/**
 * `mkdir -p`, one level at a time: Node's recursive mkdir spins forever where mkdir answers
 * ENOENT under a folder that exists (a path in /proc). The error, if any, is mkdir's for the
 * first folder that could not be made (its `path`).
 */
export function makeFolders(dir: string): void {
  if (existsSync(dir)) return
  makeFolders(dirname(dir))
  try {
    mkdirSync(dir)
  } catch (error) {
    // Another process starting beside this one made it first.
    if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error
  }
}

/** `sqlite:data/x.db`, `sqlite:/abs/x.db` or `sqlite:///abs/x.db` → the file path. */
export function sqlitePath(url: string): string {
  const rest = url.replace(/^sqlite:/, '')
  return rest.startsWith('//') ? rest.slice(2) : rest
}
