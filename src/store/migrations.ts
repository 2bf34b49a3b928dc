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

export function readMigrations(dialect: 'sqlite' | 'postgres'): Migration[] {
  const dir = new URL(`../../migrations/${dialect}/`, import.meta.url)
  const migrations = readdirSync(dir)
    .filter((file) => file.endsWith('.sql'))
    .map((file) => {
      const match = FILE.exec(file)
      if (!match) throw new Error(`Migration file name ${file} is not NNN_name.sql`)
      return { version: Number(match[1]), name: match[2] as string, sql: readFileSync(new URL(file, dir), 'utf8') }
    })
    .sort((a, b) => a.version - b.version)
  migrations.forEach((m, i) => {
    if (m.version !== i + 1)
      throw new Error(`Migrations must be numbered 001, 002, … without gaps (found ${m.version})`)
  })
  return migrations
}

export function newerThanCode(applied: number, migrations: Migration[]): Error | null {
  const known = migrations.length
  return applied > known
    ? new Error(`The database is at schema version ${applied}, newer than this code (${known}); upgrade the code.`)
    : null
}
