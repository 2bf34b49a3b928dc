/**
 * `animal-store backup <file>`: a consistent copy of the SQLite database, taken while the server
 * writes to it, with SQLite's online backup API (node:sqlite's `backup()`).
 *
 * The copy is taken in one backup step, that is in one read transaction: a snapshot of the last
 * commit before it began, WAL included. In WAL mode a reader blocks no writer, so the server goes on
 * committing meanwhile (its checkpoints stop short of the snapshot, and the -wal file grows until
 * the copy is done). Steps of a few pages would end the read transaction between steps, and SQLite
 * restarts a backup whenever another connection commits between two of them: under steady writes
 * (200 commits a second) a backup of 100-page steps never finished, while one step copied a 216 MB
 * file in under 2 s with the writer going on.
 */
import { closeSync, existsSync, fsyncSync, linkSync, openSync, renameSync, rmSync, statSync } from 'node:fs'
import { dirname } from 'node:path'
import { backup, DatabaseSync } from 'node:sqlite'
import { makeFolders } from './sqlite-file.ts'
import { DatabaseNotSetUpError, STREAM_POSITIONS_SECRET } from './types.ts'

/** More pages than any database has: `backup()` then copies it all in one step (it refuses -1). */
const ALL_PAGES = 2 ** 31 - 1

export interface BackupResult {
  pages: number
  bytes: number
}

/** Thrown when the backup cannot go where it was asked to; the message says why, for people. */
export class BackupTargetError extends Error {}

/** Thrown when the target exists: a backup never replaces a file. */
export class BackupTargetExistsError extends BackupTargetError {}

/** Copies the database at `source` to a new file `target`, written as `<target>.partial` and then put in place. */
export async function backupSqlite(source: string, target: string): Promise<BackupResult> {
  if (!existsSync(source)) throw new DatabaseNotSetUpError(`No SQLite database at ${source}: check DATABASE_URL`)
  if (existsSync(target)) throw new BackupTargetExistsError(`${target} already exists: give the backup a new name`)
  // Read only: the backup changes nothing in the service's files.
  const db = new DatabaseSync(source, { readOnly: true })
  const partial = `${target}.partial`
  try {
    const setUp = db.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'").get()
    if (setUp === undefined) {
      throw new DatabaseNotSetUpError(`The SQLite file ${source} holds no Animal Store tables: check DATABASE_URL`)
    }
    folderFor(target)
    removePartial(partial) // left by a backup that was interrupted
    const pages = await backup(db, partial, { rate: ALL_PAGES })
    check(partial)
    putInPlace(partial, target)
    return { pages, bytes: statSync(target).size }
  } finally {
    db.close()
    removePartial(partial)
  }
}

/**
 * The copy opens, its pages are sound and its migrations are there; closing it removes its -wal and
 * -shm. It forgets the key of the event stream's positions: restored, it makes a new one.
 */
function check(path: string): void {
  const copy = new DatabaseSync(path)
  try {
    const result = copy.prepare('PRAGMA quick_check').get() as { quick_check: string }
    if (result.quick_check !== 'ok')
      throw new Error(`The copy ${path} fails SQLite's quick_check: ${result.quick_check}`)
    copy.prepare('SELECT max(version) FROM schema_migrations').get()
    copy.prepare('DELETE FROM secrets WHERE name = ?').run(STREAM_POSITIONS_SECRET)
  } finally {
    copy.close()
  }
}

/**
 * Renames `partial` to `target` and makes the rename durable. A hard link, not a rename, so that a
 * file that appeared at `target` meanwhile is not replaced; where links are not supported, a rename.
 */
function putInPlace(partial: string, target: string): void {
  try {
    linkSync(partial, target)
    rmSync(partial)
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code
    if (code === 'EEXIST') throw new BackupTargetExistsError(`${target} already exists: give the backup a new name`)
    if (code !== 'EPERM' && code !== 'ENOTSUP' && code !== 'EOPNOTSUPP') throw error
    renameSync(partial, target)
  }
  const folder = openSync(dirname(target), 'r')
  try {
    fsyncSync(folder)
  } finally {
    closeSync(folder)
  }
}

/** Makes the target's folder if it is missing; a BackupTargetError, in plain words, if it cannot be made. */
function folderFor(target: string): void {
  const folder = dirname(target)
  try {
    makeFolders(folder)
  } catch (error) {
    const { code, path, message } = error as NodeJS.ErrnoException
    // Node's "ENOENT: no such file or directory, mkdir '/proc/x'" → "no such file or directory".
    const reason =
      code === 'ENOTDIR' && path !== undefined
        ? `${dirname(path)} is a file, not a folder`
        : (/^[A-Z]+: (.*?), \w+ '/.exec(message)?.[1] ?? message)
    throw new BackupTargetError(
      `Cannot make the folder ${folder} for the backup: ${reason}${code ? ` (${code})` : ''}.`,
    )
  }
}

/**
 * Removes what a backup to `partial` left. Never fails for want of it (nothing there, or no
 * folder: a path through a file answers ENOTDIR): it runs on the way out of a failed backup, and
 * must not take the place of that failure.
 */
function removePartial(partial: string): void {
  for (const suffix of ['', '-journal', '-wal', '-shm']) {
    try {
      rmSync(`${partial}${suffix}`, { force: true })
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOTDIR') throw error
    }
  }
}
