/**
 * The targets: the service as `npm start` runs it on a fresh seeded database (SQLite, PostgreSQL),
 * the peer, and the ceiling. With BENCH_BASE, each service target also runs from another checkout
 * (`addBaseTargets`): its CLI, store and server, so that its own migrations set its database up.
 */
import { execFile } from 'node:child_process'
import { mkdtempSync } from 'node:fs'
import { createServer as createHttpServer } from 'node:http'
import { type AddressInfo, createServer } from 'node:net'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { promisify } from 'node:util'
import { ROOT, startCommand } from '../scripts/start-command.ts'
import { readText, type Started, start } from './common.ts'
import { seedPeer } from './peer.ts'
import { adminQuery, BackendWatcher, type BenchSchema, createSchema } from './postgres.ts'
import { generateApiKey, type NewPet, openStoreAt, settingNamesAt } from './src.ts'

export interface Context {
  serverCpu: string
  clusterCpu: string
  postgresCpu: string
  pets: number
  /** Available pets to seed after the catalogue for the order and race workloads (0: none). */
  orderPets?: number
  /** This run's temporary folder. */
  dir: string
  /** The ceiling's answers, captured from a service. */
  fixturesFile?: string
  /** Extra node options of the measured servers (--cpu-prof). */
  nodeArgs?: string[]
}

export interface RunningTarget {
  baseUrl: string
  /** The service's database (none for the ceiling). */
  databaseUrl?: string
  /** The checkout the service runs from: this one (ROOT) or BENCH_BASE's; its code opens its database. */
  root?: string
  /** A valid API key of this target's database. */
  key: string
  /** Processes whose memory and CPU are the target's (read afresh: workers may restart). */
  readonly pids: number[]
  /** taskset list of its servers. */
  cpus: string
  /** PostgreSQL: the backends serving it, where they are pinned (null: not), and the pool of each instance. */
  backends?: BackendWatcher
  databaseCpus?: string | null
  poolSize?: number
  instances: number
  /** The same target with a key past its rate limit, for the ratelimited workload. */
  limited?: RunningTarget
  /** The pets of the order workloads: the race's RACE_PETS from `first`, then one per order from `next`. */
  orderPets?: OrderPets
  stop(): Promise<void>
}

export interface Target {
  label: string
  /** The service (the floor and the ceiling replay its answers), the peer (bench/peer.ts), the floor or the ceiling. */
  kind: 'service' | 'peer' | 'floor' | 'ceiling'
  database?: 'sqlite' | 'postgres'
  /** The workloads it can serve, when not all (the peer has no orders, messages or rate limits). */
  workloads?: string[]
  start(context: Context, env?: Record<string, string>): Promise<RunningTarget>
}

/** Connections per instance: the service's default DATABASE_POOL_SIZE, set so the report can say it. */
export const POOL_SIZE = 10
/** Well-formed (its checksum holds) but in no database: the unauthorized workload's key. */
export const UNKNOWN_KEY = generateApiKey('staging').secret

// biome-ignore format: a list of names reads better in rows.
export const NAMES = [
  'Bella', 'Max', 'Luna', 'Charlie', 'Lucy', 'Cooper', 'Daisy', 'Milo', 'Bailey', 'Rocky', 'Sadie', 'Buddy',
  'Molly', 'Tucker', 'Lola', 'Bear', 'Stella', 'Duke', 'Zoe', 'Oliver', 'Chloe', 'Leo', 'Penny', 'Teddy',
  'Nala', 'Simba', 'Coco', 'Loki', 'Rosie', 'Jack', 'Ruby', 'Oscar', 'Willow', 'Finn', 'Pepper', 'Winston',
  'Mochi', 'Ziggy', 'Biscuit', 'Pumpkin', 'Shadow', 'Ginger', 'Mr. Whiskers', 'Captain Fluffington',
  'Sir Barks-a-Lot', 'Princess Buttercup', 'Hazel', 'Rex', 'Tom', 'Misty', 'Smokey', 'Tiger', 'Kiwi', 'Nemo',
]

/** A small seeded PRNG (mulberry32): every run seeds the same data. */
export function random(seed: number): () => number {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed)
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296
  }
}

/** The catalogue's pets, 1..count, the same on every run and target: 70% available, 15% pending, 15% sold. */
export function* seededPets(count: number): Generator<NewPet> {
  const next = random(42)
  const status = (r: number): NewPet['status'] => (r < 0.7 ? 'available' : r < 0.85 ? 'pending' : 'sold')
  for (let i = 0; i < count; i++) {
    const name = NAMES[Math.floor(next() * NAMES.length)] as string
    yield { name, categoryId: 1 + Math.floor(next() * 8), status: status(next()) }
  }
}

/** Pets 1..count through the store of the checkout at `root` (the API's code path minus HTTP). */
async function seedPets(databaseUrl: string, count: number, root: string): Promise<void> {
  const pets = seededPets(count)
  const openStore = await openStoreAt(root)
  const store = await openStore({ databaseUrl, poolSize: 4, timeoutMs: 30_000 })
  try {
    // Writes issued in one turn share one transaction (the store's group commit); chunks keep memory flat.
    let chunk: Promise<unknown>[] = []
    for (const pet of pets) {
      chunk.push(store.createPet(pet))
      if (chunk.length === 10_000) {
        await Promise.all(chunk)
        chunk = []
      }
    }
    await Promise.all(chunk)
  } finally {
    await store.close()
  }
}

/** How many pets the race workload's connections all order. */
export const RACE_PETS = 50

export interface OrderPets {
  first: number
  /** The next pet no request has ordered yet; the last one seeded. */
  next: number
  last: number
}

/**
 * `count` available pets after the catalogue, with ids in one run: through the store on SQLite; on
 * PostgreSQL in one statement, as a commit per pet would take minutes (`schema` names it).
 */
async function seedOrderPets(
  databaseUrl: string,
  count: number,
  root: string,
  schema?: string,
): Promise<OrderPets | undefined> {
  if (!count) return undefined
  let ids: { first: number; last: number }
  if (schema) {
    const [row] = await adminQuery<{ first: string; last: string }>(
      `WITH added AS (INSERT INTO ${schema}.pets (name, category_id, status)
        SELECT 'Biscuit', 3, 'available' FROM generate_series(1, $1) RETURNING id)
      SELECT min(id) AS first, max(id) AS last FROM added`,
      [count],
    )
    ids = { first: Number(row?.first), last: Number(row?.last) }
  } else {
    const openStore = await openStoreAt(root)
    const store = await openStore({ databaseUrl, poolSize: 1, timeoutMs: 30_000 })
    ids = { first: Number.POSITIVE_INFINITY, last: 0 }
    try {
      for (let done = 0; done < count; done += 10_000) {
        const chunk = Array.from({ length: Math.min(10_000, count - done) }, () =>
          store.createPet({ name: 'Biscuit', categoryId: 3, status: 'available' }),
        )
        for (const { id } of await Promise.all(chunk))
          ids = { first: Math.min(ids.first, id), last: Math.max(ids.last, id) }
      }
    } finally {
      await store.close()
    }
  }
  // The Lua script counts ids from the first: they must have no gap.
  if (ids.last - ids.first + 1 !== count) throw new Error(`order pets seeded with gaps: ${JSON.stringify(ids)}`)
  return { ...ids, next: ids.first + RACE_PETS }
}

/**
 * The bench's settings and nothing of the caller's shell that would change the service (a REDIS_URL
 * left exported): no setting this checkout's service or `root`'s reads.
 */
async function serviceEnv(settings: Record<string, string>, root: string): Promise<NodeJS.ProcessEnv> {
  const env = { ...process.env }
  for (const name of new Set([...(await settingNamesAt(ROOT)), ...(await settingNamesAt(root))])) delete env[name]
  return { ...env, ...settings }
}

/**
 * An account and a key made with the operator CLI of the checkout at `root`, as an operator makes
 * them; the key is its last line.
 */
async function createKey(databaseUrl: string, root: string): Promise<string> {
  const env = await serviceEnv({ DATABASE_URL: databaseUrl, DEPLOYMENT: 'staging' }, root)
  const cli = (...args: string[]) =>
    promisify(execFile)(process.execPath, [join(root, 'bin/animal-store.ts'), ...args], { env, cwd: root })
  await cli('accounts', 'create', 'bench@example.com')
  const { stdout } = await cli('keys', 'create', 'bench@example.com', '--name', 'bench')
  const key = stdout.trim().split('\n').at(-1)
  if (!key?.startsWith('as_')) throw new Error(`the CLI printed no key:\n${stdout}`)
  return key
}

export const baseEnv = (databaseUrl: string, logLevel = 'info'): Record<string, string> => ({
  HOST: '127.0.0.1',
  DATABASE_URL: databaseUrl,
  DEPLOYMENT: 'staging',
  LOG_LEVEL: logLevel,
  // The limiters run as in production, with limits no workload reaches but the ratelimited one
  // (RATE_LIMIT=1 on its own instance): unknown keys from 127.0.0.1 must stay 401s, not turn into 429s.
  RATE_LIMIT: '1000000000',
  AUTH_FAILURE_LIMIT: '1000000',
  // The webhooks workload's receiver is a plain http server on 127.0.0.1, in the bench's process.
  EXPERIMENTAL_FEATURES: 'webhooks',
  WEBHOOK_ALLOW_PRIVATE_URLS: 'true',
  WEBHOOK_ALLOW_HTTP: 'true',
})

/**
 * Starts the service as `npm start` does (that of the checkout at `root`: its package.json's start
 * script, from its folder), twice: the first start fills the compile cache, as a deployment's does.
 */
export async function startService(
  context: Context,
  settings: Record<string, string>,
  { workers = 1, memorySettings = true, root = ROOT } = {},
): Promise<RunningTarget> {
  const key = await createKey(settings.DATABASE_URL as string, root)
  const port = await freePort()
  const command = startCommand(root)
  const scriptEnv = memorySettings ? command.env : { NODE_COMPILE_CACHE: command.env.NODE_COMPILE_CACHE ?? '' }
  const env = await serviceEnv({ ...scriptEnv, ...settings, PORT: String(port) }, root)
  const options = memorySettings ? command.nodeArgs : []
  const cpus = workers === 1 ? context.serverCpu : context.clusterCpu
  const first = start(cpus, process.execPath, [...options, command.script], env, root)
  await waitReady(first, port)
  await first.stop()
  const server = start(cpus, process.execPath, [...options, ...(context.nodeArgs ?? []), command.script], env, root)
  // Object.assign, not a spread: `pids` stays a getter.
  return Object.assign(await running(server, port, key, cpus, workers), { databaseUrl: settings.DATABASE_URL, root })
}

const sqliteService = (
  root: string,
  name: string,
  logLevel: string,
  memorySettings = true,
  extra: Record<string, string> = {},
): Target => ({
  kind: 'service',
  label: `sqlite, LOG_LEVEL=${logLevel}${memorySettings ? '' : ', default memory settings'}${Object.entries(extra)
    .map(([k, v]) => `, ${k}=${v}`)
    .join('')}`,
  database: 'sqlite',
  async start(context, env = {}) {
    const databaseUrl = `sqlite:${join(mkdtempSync(join(context.dir, `${name}-`)), 'store.db')}`
    await seedPets(databaseUrl, context.pets, root)
    const orderPets = await seedOrderPets(databaseUrl, context.orderPets ?? 0, root)
    const live = await startService(
      context,
      { ...baseEnv(databaseUrl, logLevel), ...extra, ...env },
      { memorySettings, root },
    )
    return Object.assign(live, { orderPets })
  },
})

/**
 * A target with traces on (OTEL_EXPORTER_OTLP_ENDPOINT), sent to a collector in the bench's own
 * process that reads each export and drops it: the cost of tracing every request and exporting it.
 */
const traced = (base: Target): Target => ({
  label: `${base.label}, traced (OTLP/HTTP)`,
  kind: base.kind,
  database: base.database,
  async start(context, env = {}) {
    const collector = createHttpServer((request, response) => {
      request.resume()
      request.on('end', () => response.end('{}'))
    })
    await new Promise<void>((resolve) => collector.listen(0, '127.0.0.1', resolve))
    const { port } = collector.address() as AddressInfo
    const live = await base.start(context, { ...env, OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${port}` })
    const stop = live.stop.bind(live)
    live.stop = async () => {
      await stop()
      collector.closeAllConnections()
      collector.close()
    }
    return live
  },
})

const postgresService = (root: string, name: string, workers: number): Target => ({
  kind: 'service',
  label: workers === 1 ? 'postgres, 1 instance' : `postgres, ${workers} instances (WORKERS=${workers})`,
  database: 'postgres',
  async start(context, env = {}) {
    const schema = await createSchema(name)
    await seedPets(schema.databaseUrl, context.pets, root)
    const orderPets = await seedOrderPets(schema.databaseUrl, context.orderPets ?? 0, root, schema.name)
    // What autovacuum would do soon after a bulk load: without statistics the planner takes the table for a tiny one.
    await adminQuery(`ANALYZE ${schema.name}.pets`)
    return Object.assign(await startPostgres(context, schema, workers, env, root), { orderPets })
  },
})

/** The service on a schema (dropped at stop); one instance's backends are pinned beside wrk, off the service's core. */
export async function startPostgres(context: Context, schema: BenchSchema, workers = 1, env = {}, root = ROOT) {
  const settings = { ...baseEnv(schema.databaseUrl), WORKERS: String(workers), DATABASE_POOL_SIZE: String(POOL_SIZE) }
  const live = await startService(context, { ...settings, ...env }, { workers, root })
  const databaseCpus = workers === 1 ? context.postgresCpu : null
  const backends = new BackendWatcher(schema.name, databaseCpus)
  const stopServer = live.stop
  return Object.assign(live, {
    backends,
    databaseCpus,
    poolSize: POOL_SIZE,
    async stop() {
      await stopServer()
      await backends.close()
      await schema.drop()
    },
  })
}

/** A server replaying a service's captured responses (the fixtures file), checking nothing. */
const replaying = (label: string, kind: 'floor' | 'ceiling', file: string): Target => ({
  label,
  kind,
  async start(context) {
    const port = await freePort()
    const script = [join(import.meta.dirname, file), context.fixturesFile as string]
    const server = start(context.serverCpu, process.execPath, [...(context.nodeArgs ?? []), ...script], {
      ...process.env,
      PORT: String(port),
    })
    // It checks no key, but wrk sends one anyway so both sides parse the same requests.
    const live = await running(server, port, 'as_test_unchecked', context.serverCpu)
    return { ...live, limited: { ...live, key: CEILING_LIMITED_KEY } }
  },
})
/** A bare node:http server answering with a service's captured responses (bench/ceiling.ts). */
const ceiling = replaying('ceiling (bare node:http)', 'ceiling', 'ceiling.ts')
/**
 * bench/fastify-floor.ts: Fastify replaying the same answers: the framework's floor, pinned and
 * measured like the service.
 */
const fastifyFloor = replaying('floor (bare Fastify)', 'floor', 'fastify-floor.ts')
/**
 * bench/peer.ts, plain Fastify and node:sqlite with no cache, on a database of its own seeded with
 * the same pets, and a key of its own; pinned and measured like the service.
 */
const peer: Target = {
  label: 'peer (plain Fastify + node:sqlite, no cache)',
  kind: 'peer',
  database: 'sqlite',
  workloads: ['list20', 'list100', 'get', 'unauthorized', 'post', 'mix'],
  async start(context) {
    const path = join(mkdtempSync(join(context.dir, 'peer-')), 'peer.db')
    const key = generateApiKey('staging').secret
    seedPeer(path, seededPets(context.pets), key)
    const port = await freePort()
    const env = { ...process.env, HOST: '127.0.0.1', PORT: String(port), PEER_DATABASE: path, LOG_LEVEL: 'info' }
    const script = join(import.meta.dirname, 'peer.ts')
    const server = start(context.serverCpu, process.execPath, [...(context.nodeArgs ?? []), script], env)
    return running(server, port, key, context.serverCpu)
  },
}

/** Whether a target can serve a workload (the peer serves only some). */
export const serves = (target: Target | undefined, workload: { name: string }) =>
  !target?.workloads || target.workloads.includes(workload.name)

/** What the ceiling tells the ratelimited workload's requests apart by. */
export const CEILING_LIMITED_KEY = 'as_test_limited'

/** The service's targets, run from the checkout at `root`. */
const serviceTargets = (root: string): Record<string, Target> => ({
  sqlite: sqliteService(root, 'sqlite', 'info'),
  'sqlite-warn': sqliteService(root, 'sqlite-warn', 'warn'),
  // Not run by default: traces on, exported to a local collector.
  'sqlite-traced': traced(sqliteService(root, 'sqlite-traced', 'info')),
  // Not run by default: the service without the start script's memory settings (decision 54).
  'sqlite-v8-defaults': sqliteService(root, 'sqlite-v8-defaults', 'info', false),
  // Not run by default: the service with its metrics on (METRICS_PORT, an ephemeral port), to show their cost.
  'sqlite-metrics': sqliteService(root, 'sqlite-metrics', 'info', true, { METRICS_PORT: '0' }),
  'postgres-1': postgresService(root, 'postgres-1', 1),
  'postgres-2': postgresService(root, 'postgres-2', 2),
  // Not run by default: one instance on PostgreSQL with traces on.
  'postgres-1-traced': traced(postgresService(root, 'postgres-1-traced', 1)),
})

export const TARGETS: Record<string, Target> = {
  ...serviceTargets(ROOT),
  // Not run by default: a plain Fastify + node:sqlite server, the reference without our features.
  peer,
  // Not run by default: bare Fastify replaying the service's answers, the framework's floor.
  'fastify-floor': fastifyFloor,
  ceiling,
}

/** The twin of service target `name` run from BENCH_BASE's checkout. */
export const BASE_SUFFIX = '@base'

/**
 * Adds `<name>@base` for each service target: the same target run from the checkout at `root` (its
 * server, start script, CLI and store), labelled with `what` (its commit).
 */
export function addBaseTargets(root: string, what: string): void {
  for (const [name, target] of Object.entries(serviceTargets(root)))
    TARGETS[`${name}${BASE_SUFFIX}`] = { ...target, label: `${target.label}, base ${what}` }
}

/** The processes of a server: itself and, for a node:cluster primary, its workers. */
const withChildren = (pid: number) => [
  pid,
  ...readText(`/proc/${pid}/task/${pid}/children`).split(' ').filter(Boolean).map(Number),
]

/** Waits until the server answers and, with WORKERS, until every worker is forked. */
async function running(server: Started, port: number, key: string, cpus: string, workers = 1): Promise<RunningTarget> {
  await waitReady(server, port)
  for (let waited = 0; workers > 1 && withChildren(server.pid).length <= workers; waited += 50) {
    if (waited > 30_000) throw new Error(`only ${withChildren(server.pid).length - 1} of ${workers} workers started`)
    await sleep(50)
  }
  return {
    baseUrl: `http://127.0.0.1:${port}`,
    key,
    get pids() {
      return workers > 1 ? withChildren(server.pid) : [server.pid]
    },
    cpus,
    instances: workers,
    stop: () => server.stop(),
  }
}

/** Polls /healthz until it answers, or fails with the server's stderr if it exits first. */
async function waitReady(server: Started, port: number): Promise<void> {
  let exited: number | string | undefined
  void server.exited.then((code) => {
    exited = code
  })
  for (let waited = 0; waited < 30_000; waited += 50) {
    if (exited !== undefined) throw new Error(`the server exited (${exited}) before answering:\n${server.stderr()}`)
    if (
      await fetch(`http://127.0.0.1:${port}/healthz`).then(
        (r) => r.ok,
        () => false,
      )
    )
      return
    await sleep(50)
  }
  throw new Error(`the server did not answer within 30 s:\n${server.stderr()}`)
}

/** A port free right now (the kernel picks it); the server binds it a moment later. */
function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createServer().once('error', reject)
    probe.listen(0, '127.0.0.1', () => {
      const { port } = probe.address() as { port: number }
      probe.close(() => resolve(port))
    })
  })
}
