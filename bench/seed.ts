/**
 * A fresh database with realistic data: pets through the store (the same code path as the API,
 * minus HTTP, so 10,000 pets take well under a second), and an account and key through the CLI,
 * exactly as an operator makes them.
 */
import { execFile } from 'node:child_process'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { ROOT } from '../scripts/start-command.ts'
import { serviceEnv } from './service-env.ts'
import type { NewPet } from './src.ts'
import { openStore } from './src.ts'

// biome-ignore format: a list of names reads better in rows.
export const NAMES = [
  'Bella', 'Max', 'Luna', 'Charlie', 'Lucy', 'Cooper', 'Daisy', 'Milo', 'Bailey', 'Rocky', 'Sadie', 'Buddy',
  'Molly', 'Tucker', 'Lola', 'Bear', 'Stella', 'Duke', 'Zoe', 'Oliver', 'Chloe', 'Leo', 'Penny', 'Teddy',
  'Nala', 'Simba', 'Coco', 'Loki', 'Rosie', 'Jack', 'Ruby', 'Oscar', 'Willow', 'Finn', 'Pepper', 'Winston',
  'Mochi', 'Ziggy', 'Biscuit', 'Pumpkin', 'Shadow', 'Ginger', 'Mr. Whiskers', 'Captain Fluffington',
  'Sir Barks-a-Lot', 'Princess Buttercup', 'Hazel', 'Rex', 'Tom', 'Misty', 'Smokey', 'Tiger', 'Kiwi', 'Nemo',
]

/** Mostly available, as in a live shop: 70% available, 15% pending, 15% sold. */
function status(r: number): NonNullable<NewPet['status']> {
  return r < 0.7 ? 'available' : r < 0.85 ? 'pending' : 'sold'
}

/** A small seeded PRNG (mulberry32): every run seeds the same data. */
export function random(seed: number): () => number {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed)
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296
  }
}

/** Adds `count` pets (ids 1..count on a fresh database). */
export async function seedPets(databaseUrl: string, count: number): Promise<void> {
  const next = random(42)
  const store = await openStore({ databaseUrl, poolSize: 4, timeoutMs: 30_000 })
  try {
    // Writes issued in one turn share one transaction (the store's group commit); chunks keep memory flat.
    for (let done = 0; done < count; done += 10_000) {
      const chunk = Array.from({ length: Math.min(10_000, count - done) }, () => {
        const name = NAMES[Math.floor(next() * NAMES.length)] as string
        return store.createPet({ name, categoryId: 1 + Math.floor(next() * 8), status: status(next()) })
      })
      await Promise.all(chunk)
    }
  } finally {
    await store.close()
  }
}

const run = promisify(execFile)

/** Creates an account and an API key with the operator CLI; returns the key (its last line of output). */
export async function createKey(databaseUrl: string): Promise<string> {
  const env = serviceEnv({ DATABASE_URL: databaseUrl, DEPLOYMENT: 'staging' })
  const cli = [join(ROOT, 'bin/animal-store.ts')]
  await run(process.execPath, [...cli, 'accounts', 'create', 'bench@example.com'], { env, cwd: ROOT })
  const { stdout } = await run(process.execPath, [...cli, 'keys', 'create', 'bench@example.com', '--name', 'bench'], {
    env,
    cwd: ROOT,
  })
  const key = stdout.trim().split('\n').at(-1)
  if (!key?.startsWith('as_')) throw new Error(`the CLI printed no key:\n${stdout}`)
  return key
}
