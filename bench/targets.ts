/**
 * What the load is aimed at. A target is started once per run, stays up through every round, and
 * is measured by the same wrk workloads. Today: the SQLite service (with its request log at info,
 * or at warn to see what logging costs) and the bare node:http ceiling. A PostgreSQL target with N
 * instances fits the same shape: seed through the store, start the service (N processes, or
 * WORKERS=N under one node:cluster primary), and return every pid whose memory counts (a cluster's
 * workers are the primary's children, /proc/<pid>/task/<pid>/children) and the one address to load.
 * Give it its own CPU list then: N instances on one core measure nothing.
 */
import { createServer } from 'node:net'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { type Started, startPinned, stop } from './processes.ts'
import { createKey, seedPets } from './seed.ts'
import { serviceEnv } from './service-env.ts'

const ROOT = join(import.meta.dirname, '..')

export interface BenchContext {
  /** taskset CPU list for servers. */
  serverCpu: string
  /** Pets seeded in each fresh database. */
  pets: number
  /** Temporary folder of this run (databases, fixtures, profiles). */
  dir: string
  /** The ceiling's precomputed responses, written by the runner from a service's answers. */
  fixturesFile?: string
  /** Extra node options for the server processes started from now on (e.g. --cpu-prof). */
  nodeArgs?: string[]
}

export interface RunningTarget {
  baseUrl: string
  /** A valid API key for this target's database. */
  key: string
  /** Processes whose memory is the target's RSS. */
  pids: number[]
  stop(): Promise<void>
}

export interface Target {
  name: string
  /** How the report names it. */
  label: string
  kind: 'service' | 'ceiling'
  start(context: BenchContext): Promise<RunningTarget>
}

/** The service on a fresh, seeded SQLite database. stdout (the request log) goes to /dev/null. */
export function sqliteService(name: string, logLevel: string): Target {
  return {
    name,
    label: `sqlite, LOG_LEVEL=${logLevel}`,
    kind: 'service',
    async start(context) {
      const databaseUrl = `sqlite:${join(context.dir, `${name}.db`)}`
      await seedPets(databaseUrl, context.pets)
      const key = await createKey(databaseUrl)
      const port = await freePort()
      const env = serviceEnv({
        PORT: String(port),
        HOST: '127.0.0.1',
        DATABASE_URL: databaseUrl,
        DEPLOYMENT: 'staging',
        LOG_LEVEL: logLevel,
        // The limiter runs as in production, with a limit no bench reaches: a 429 measures nothing.
        RATE_LIMIT: '1000000000',
      })
      const args = [...(context.nodeArgs ?? []), join(ROOT, 'src/server.ts')]
      const server = startPinned(context.serverCpu, process.execPath, args, env)
      return running(server, port, key)
    },
  }
}

/** The bare node:http server of bench/ceiling.ts, answering with the fixtures. */
export const ceiling: Target = {
  name: 'ceiling',
  label: 'ceiling (bare node:http)',
  kind: 'ceiling',
  async start(context) {
    if (!context.fixturesFile) throw new Error('the ceiling needs fixtures from a service target first')
    const port = await freePort()
    const env = { ...process.env, PORT: String(port) }
    const server = startPinned(
      context.serverCpu,
      process.execPath,
      [...(context.nodeArgs ?? []), join(import.meta.dirname, 'ceiling.ts'), context.fixturesFile],
      env,
    )
    // The ceiling checks no key; wrk sends one anyway so both sides parse the same requests.
    return running(server, port, 'as_test_unchecked')
  },
}

export const TARGETS: Record<string, Target> = {
  sqlite: sqliteService('sqlite', 'info'),
  'sqlite-warn': sqliteService('sqlite-warn', 'warn'),
  ceiling,
}

async function running(server: Started, port: number, key: string): Promise<RunningTarget> {
  const baseUrl = `http://127.0.0.1:${port}`
  await waitReady(server, `${baseUrl}/healthz`)
  return { baseUrl, key, pids: [server.pid], stop: () => stop(server) }
}

/** Polls until the server answers, or fails with its stderr if it exits first. */
async function waitReady(server: Started, url: string, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs
  let exited: number | string | undefined
  void server.exited.then((code) => {
    exited = code
  })
  while (Date.now() < deadline) {
    if (exited !== undefined) throw new Error(`the server exited (${exited}) before answering:\n${server.stderr()}`)
    try {
      if ((await fetch(url)).ok) return
    } catch {
      // Not listening yet.
    }
    await sleep(50)
  }
  throw new Error(`the server did not answer ${url} within ${timeoutMs / 1000} s:\n${server.stderr()}`)
}

/** A port free right now (the kernel picks it); the server binds it a moment later. */
function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createServer()
    probe.once('error', reject)
    probe.listen(0, '127.0.0.1', () => {
      const address = probe.address()
      probe.close(() => (typeof address === 'object' && address ? resolve(address.port) : reject(new Error('no port'))))
    })
  })
}
