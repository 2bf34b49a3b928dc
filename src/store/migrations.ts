/**
 * Versioned SQL migrations: `migrations/<dialect>/NNN_name.sql`, applied in order, each once.
 * Every store records applied versions in `schema_migrations` and refuses a database that has
 * versions this code does not know (a downgrade).
 */
import { readdirSync, readFileSync } from 'node:fs'

export interface Migration {
  version: number
  name: string
  sql: string
}

const FILE = /^(\d{3})_([a-z0-9_]+)\.sql$/

/** The migration files of `dialect`, checked and in order, without their SQL (nothing is read but the folder). */
function migrationFiles(dialect: 'sqlite' | 'postgres'): { version: number; name: string; url: URL }[] {
  const dir = new URL(`../../migrations/${dialect}/`, import.meta.url)
  const files = readdirSync(dir)
    .filter((file) => file.endsWith('.sql'))
    .map((file) => {
      const match = FILE.exec(file)
      if (!match) throw new Error(`Migration file name ${file} is not NNN_name.sql`)
      return { version: Number(match[1]), name: match[2] as string, url: new URL(file, dir) }
    })
    .sort((a, b) => a.version - b.version)
  files.forEach((m, i) => {
    if (m.version !== i + 1)
      throw new Error(`Migrations must be numbered 001, 002, … without gaps (found ${m.version})`)
  })
  return files
}

export function readMigrations(dialect: 'sqlite' | 'postgres'): Migration[] {
  return migrationFiles(dialect).map(({ version, name, url }) => ({ version, name, sql: readFileSync(url, 'utf8') }))
}

/**
 * The version a database is at once every migration is applied, from the folder's listing alone:
 * a store that finds its database there has nothing to do, and need not read the files or take a lock.
 */
export function latestMigration(dialect: 'sqlite' | 'postgres'): number {
  return migrationFiles(dialect).length
}

export function newerThanCode(applied: number, migrations: Migration[]): Error | null {
  const known = migrations.length
  return applied > known
    ? new Error(`The database is at schema version ${applied}, newer than this code (${known}); upgrade the code.`)
    : null
}
