/**
 * What the load is aimed at. A target is started once per run, stays up through every round, and
 * is measured by the same wrk workloads: the SQLite service (with its request log at info, or at
 * warn to see what logging costs), the service on PostgreSQL with one instance and with two, and
 * the bare node:http ceiling.
 *
 * Two instances are WORKERS=2 (node:cluster): there is no load balancer on this machine and wrk
 * loads one address, so two processes sharing one port is how two instances get the load. They
 * get both cores (BENCH_CLUSTER_CPU): two instances on one core would measure nothing.
 */
import { mkdtempSync } from 'node:fs'
import { createServer } from 'node:net'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { startCommand } from '../scripts/start-command.ts'
import { adminQuery, BackendWatcher, type BenchSchema, createSchema } from './postgres.ts'
import { type Started, startPinned, stop } from './processes.ts'
import { createKey, seedPets } from './seed.ts'
import { serviceEnv } from './service-env.ts'
import { withChildren } from './usage.ts'

export interface BenchContext {
  /** taskset CPU list for servers. */
  serverCpu: string
  /** taskset CPU list for a target of several instances. */
  clusterCpu: string
  /** taskset CPU list for the PostgreSQL backends of a one-instance target (beside wrk by default). */
  postgresCpu: string
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
  /** Processes whose memory is the target's RSS and whose CPU is the service's (read afresh: workers may restart). */
  readonly pids: number[]
  /** The CPUs the server processes may run on (taskset list). */
  cpus: string
  /** PostgreSQL targets: the backends serving this target, and the pool size of each instance. */
  backends?: BackendWatcher
  /** Where its PostgreSQL backends may run (a taskset list), or null when not pinned. */
  databaseCpus?: string | null
  poolSize?: number
  /** Server processes that serve requests (WORKERS); 1 when absent. */
  instances?: number
  stop(): Promise<void>
}

export interface Target {
  name: string
  /** How the report names it. */
  label: string
  kind: 'service' | 'ceiling'
  database?: 'sqlite' | 'postgres'
  start(context: BenchContext): Promise<RunningTarget>
}

/** Connections per instance: the service's default DATABASE_POOL_SIZE, set so the report can say it. */
export const POOL_SIZE = 10

/** Settings every service target runs with. */
function baseEnv(databaseUrl: string, logLevel: string): Record<string, string> {
  return {
    HOST: '127.0.0.1',
    DATABASE_URL: databaseUrl,
    DEPLOYMENT: 'staging',
    LOG_LEVEL: logLevel,
    // The limiter runs as in production, with a limit no bench reaches: a 429 measures nothing.
    RATE_LIMIT: '1000000000',
  }
}

/** The service on a fresh, seeded SQLite database. stdout (the request log) goes to /dev/null. */
export function sqliteService(name: string, logLevel: string, memorySettings = true): Target {
  return {
    name,
    label: `sqlite, LOG_LEVEL=${logLevel}${memorySettings ? '' : ', default memory settings'}`,
    kind: 'service',
    database: 'sqlite',
    async start(context) {
      // A new folder per start: the bench starts every target afresh each round.
      const databaseUrl = `sqlite:${join(mkdtempSync(join(context.dir, `${name}-`)), 'store.db')}`
      await seedPets(databaseUrl, context.pets)
      return startSqliteService(context, databaseUrl, logLevel, memorySettings)
    },
  }
}

/**
 * The service on an existing SQLite database, pinned to the servers' CPU, with a new API key;
 * without the start script's memory settings when `memorySettings` is false.
 */
export async function startSqliteService(
  context: BenchContext,
  databaseUrl: string,
  logLevel = 'info',
  memorySettings = true,
): Promise<RunningTarget> {
  const key = await createKey(databaseUrl)
  const port = await freePort()
  const server = await startService(context, context.serverCpu, port, baseEnv(databaseUrl, logLevel), memorySettings)
  return running(server, port, key, context.serverCpu)
}

/**
 * The service on PostgreSQL, in a schema of its own seeded like the SQLite targets (through the
 * store), with one instance or WORKERS=`workers`.
 */
export function postgresService(name: string, workers: number): Target {
  return {
    name,
    label: workers === 1 ? 'postgres, 1 instance' : `postgres, ${workers} instances (WORKERS=${workers})`,
    kind: 'service',
    database: 'postgres',
    async start(context) {
      const schema = await createSchema(name)
      await seedPets(schema.databaseUrl, context.pets)
      // What autovacuum would do within a minute of a bulk load: without statistics the planner
      // takes a 10,000-row table for a tiny one and picks bitmap scans plus a sort for every page.
      await adminQuery(`ANALYZE ${schema.name}.pets`)
      return startPostgresService(context, schema, workers)
    },
  }
}

/**
 * The service on an existing PostgreSQL schema, with a new API key; stop() also drops the schema.
 * PostgreSQL is the machine's server: with one instance, this target's backends are pinned beside
 * wrk (so the service's core is its own, as on the SQLite rows, and the CPU table can say which
 * side is the limit); with several, the workers, the backends and wrk share the cores, which is
 * what several instances on a two-core box means.
 */
export async function startPostgresService(
  context: BenchContext,
  schema: BenchSchema,
  workers = 1,
): Promise<RunningTarget> {
  const key = await createKey(schema.databaseUrl)
  const port = await freePort()
  const cpus = workers === 1 ? context.serverCpu : context.clusterCpu
  const server = await startService(context, cpus, port, {
    ...baseEnv(schema.databaseUrl, 'info'),
    WORKERS: String(workers),
    DATABASE_POOL_SIZE: String(POOL_SIZE),
  })
  const live = await running(server, port, key, cpus, workers)
  const databaseCpus = workers === 1 ? context.postgresCpu : null
  const backends = new BackendWatcher(schema.applicationName, databaseCpus)
  return {
    baseUrl: live.baseUrl,
    key,
    get pids() {
      return live.pids
    },
    cpus,
    backends,
    databaseCpus,
    poolSize: POOL_SIZE,
    instances: workers,
    async stop() {
      await live.stop()
      await backends.close()
      await schema.drop()
    },
  }
}

/**
 * Starts the service as `npm start` does (package.json's start script: its node options and its
 * environment settings), pinned to `cpus`, on `port`, with `settings` as its configuration; when
 * `memorySettings` is false, without the script's memory settings (its node options and every
 * environment setting but the compile cache: V8's and glibc's defaults, to compare). It is started
 * twice: the first start fills Node's compile cache, as a deployment's first start does, so that
 * what is measured is every later start (no TypeScript stripper loaded, less memory).
 */
async function startService(
  context: BenchContext,
  cpus: string,
  port: number,
  settings: Record<string, string>,
  memorySettings = true,
): Promise<Started> {
  const command = startCommand()
  // The comparison keeps the compile cache: where stripped code is kept is not a memory setting.
  const scriptEnv = memorySettings
    ? command.env
    : Object.fromEntries(Object.entries(command.env).filter(([name]) => name === 'NODE_COMPILE_CACHE'))
  const env = serviceEnv({ ...scriptEnv, ...settings, PORT: String(port) })
  const options = memorySettings ? command.nodeArgs : []
  const first = startPinned(cpus, process.execPath, [...options, command.script], env)
  await waitReady(first, `http://127.0.0.1:${port}/healthz`)
  await stop(first)
  return startPinned(cpus, process.execPath, [...options, ...(context.nodeArgs ?? []), command.script], env)
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
    return running(server, port, 'as_test_unchecked', context.serverCpu)
  },
}

export const TARGETS: Record<string, Target> = {
  sqlite: sqliteService('sqlite', 'info'),
  'sqlite-warn': sqliteService('sqlite-warn', 'warn'),
  // Not run by default: the service without the start script's memory settings (decision 54).
  'sqlite-v8-defaults': sqliteService('sqlite-v8-defaults', 'info', false),
  'postgres-1': postgresService('postgres-1', 1),
  'postgres-2': postgresService('postgres-2', 2),
  ceiling,
}

/** Waits until the server answers (and, with WORKERS, until every worker is forked). */
async function running(server: Started, port: number, key: string, cpus: string, workers = 1): Promise<RunningTarget> {
  const baseUrl = `http://127.0.0.1:${port}`
  await waitReady(server, `${baseUrl}/healthz`)
  const deadline = Date.now() + 30_000
  while (workers > 1 && withChildren(server.pid).length < workers + 1) {
    if (Date.now() > deadline)
      throw new Error(`only ${withChildren(server.pid).length - 1} of ${workers} workers started`)
    await sleep(50)
  }
  return {
    baseUrl,
    key,
    get pids() {
      return workers > 1 ? withChildren(server.pid) : [server.pid]
    },
    cpus,
    stop: () => stop(server),
  }
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
