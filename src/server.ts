/**
 * The process: reads the configuration, starts the app, listens, and shuts down cleanly on
 * SIGTERM/SIGINT (stop accepting, finish in-flight requests, close the database).
 *
 * With WORKERS > 1 this process becomes a node:cluster primary: it applies the migrations once,
 * forks that many workers sharing the port, restarts a worker that dies, and on SIGTERM/SIGINT
 * passes the signal on and exits when every worker has finished.
 */
import cluster from 'node:cluster'
import { flushCompileCache } from 'node:module'
import type { AddressInfo } from 'node:net'
import { hostname } from 'node:os'
import { setTimeout as sleep } from 'node:timers/promises'
import closeWithGrace from 'close-with-grace'
import Fastify from 'fastify'
import { type Config, ConfigError, LOG_LEVEL_VALUES, loadConfig, withoutPassword } from './config.ts'
import { bufferedLogStream } from './observability/log-stream.ts'
import { openStore } from './store/index.ts'

/** A worker that dies sooner than this after starting is restarted only after a pause. */
const CRASH_LOOP_MS = 5000
/** Workers in a row killed before they listened (an OOM kill at every start, say): then stop. */
const EARLY_KILLS = 3

/**
 * Log lines are buffered and written in chunks of about 4 KiB, at least every second: one write per line
 * would cost a fifth of the throughput. The rest is written at exit; only a process killed outright
 * (SIGKILL) loses up to that last second of log lines.
 */
const LOG_BUFFER_BYTES = 4096
const LOG_FLUSH_MS = 1000

/** Connections the kernel holds for us until we accept them: Node's 511 overflows in a burst (decision 66). */
const LISTEN_BACKLOG = 4096

/**
 * At a signal the kernel may hold connections not yet accepted and requests not yet read: the
 * shutdown lets them in for this long and a few turns of the event loop before it closes (decision 58).
 */
const SETTLE_MS = 200
const SETTLE_TURNS = 3

/** The origin a browser on this machine opens: a wildcard listening address (0.0.0.0, ::) is not one. */
function browserOrigin({ address, family, port }: AddressInfo): string {
  const host = address === '0.0.0.0' || address === '::' ? 'localhost' : family === 'IPv6' ? `[${address}]` : address
  return `http://${host}:${port}`
}

async function serve(config: Config): Promise<void> {
  // Imported here, not at the top: a cluster primary never serves, and need not load the app.
  const { default: animalStore, serverOptions } = await import('./app.ts')
  const logStream = bufferedLogStream(1, LOG_BUFFER_BYTES, LOG_FLUSH_MS)
  // However the process ends (close-with-grace below exits too), the lines still gathered are written first.
  process.on('exit', () => logStream.flushSync())
  const app = Fastify(serverOptions(config, logStream))
  await app.register(animalStore, { config })

  // SIGTERM and SIGINT are handled here rather than by close-with-grace, which exits at once on a
  // second one: a signal to the process group (Ctrl-C, systemd) reaches us twice under npm or a
  // cluster primary, which pass it on, and must not cut the in-flight requests short. Repeats are
  // ignored; the shutdown timeout is the backstop.
  const grace = closeWithGrace(
    { delay: config.shutdownTimeoutMs, logger: app.log, skip: ['SIGTERM', 'SIGINT'] },
    async ({ err }) => {
      if (err) app.log.error({ err }, 'shutting down after an uncaught error')
      await app.close()
    },
  )
  let stopping = false
  const stop = async (signal: NodeJS.Signals) => {
    if (stopping) return
    stopping = true
    app.log.info({ signal }, 'shutting down')
    app.startDraining()
    await sleep(SETTLE_MS)
    for (let turn = 0; turn < SETTLE_TURNS; turn++) await new Promise(setImmediate)
    // Stop accepting first, then read what the connections just accepted have sent: a proxy that
    // knows nothing of /readyz (nginx) sends its request the moment it connects, and a connection
    // closed before Node read it looks idle and is reset, losing a POST. A proxy retries a refused
    // connection elsewhere, whatever the method.
    await app.stopListening()
    grace.close()
  }
  process.on('SIGTERM', stop)
  process.on('SIGINT', stop)

  try {
    await app.listen({ port: config.port, host: config.host, backlog: LISTEN_BACKLOG })
  } catch (error) {
    // A signal that came during start-up is closing the app, and exits 0 when done: no failure.
    if (stopping) return
    throw error
  }
  // What this process serves, from its log alone (is a refused key from the other deployment?),
  // and the addresses a person opens next.
  const origin = browserOrigin(app.server.address() as AddressInfo)
  app.log.info(
    {
      deployment: config.deployment,
      database: withoutPassword(config.databaseUrl),
      portal: `${origin}/portal`,
      reference: `${origin}/docs`,
      openapi: `${origin}/v1/openapi.json`,
      // Its own listener (METRICS_PORT), when on.
      metrics: app.metricsAddress ? `${browserOrigin(app.metricsAddress)}/metrics` : undefined,
    },
    'serving',
  )
  // Node writes its compile cache (NODE_COMPILE_CACHE, set by `npm start`) at exit; write it now,
  // so that a process that is later killed, not stopped, still leaves it for the next start.
  flushCompileCache()
}

async function supervise(config: Config): Promise<void> {
  // Migrate once here, so that workers start on an up-to-date database (and a bad one stops us now).
  await (await openStore({ databaseUrl: config.databaseUrl, poolSize: 1, timeoutMs: config.databaseTimeoutMs })).close()

  let stopping = false
  // The primary's lines have the workers' shape and honour LOG_LEVEL as theirs do.
  const threshold = LOG_LEVEL_VALUES[config.logLevel] ?? Number.POSITIVE_INFINITY
  const host = hostname()
  const log = (level: number, message: string) => {
    if (level < threshold) return
    console.log(JSON.stringify({ level, time: Date.now(), pid: process.pid, hostname: host, msg: message }))
  }
  /** `earlyKills`: how many workers in a row before this one were killed before they listened. */
  const fork = (earlyKills = 0) => {
    const worker = cluster.fork()
    const started = Date.now()
    let listening = false
    worker.once('listening', () => (listening = true))
    worker.on('exit', async (code, signal) => {
      if (stopping) return
      // A worker that gave up before it listened (port taken, database gone) would fail again: stop,
      // as one process does, and let the supervisor decide (decision 30). One killed by a signal
      // while starting (SIGKILL, the OOM killer) may not recur: start another, unless EARLY_KILLS in a row were.
      const kills = listening ? 0 : earlyKills + 1
      if (!listening && (signal === null || kills >= EARLY_KILLS)) {
        return stop(`worker ${worker.process.pid} could not start (${signal ?? code}); stopping workers`, 1)
      }
      log(40, `worker ${worker.process.pid} exited (${signal ?? code}); starting another`)
      if (Date.now() - started < CRASH_LOOP_MS) await sleep(CRASH_LOOP_MS)
      if (!stopping) fork(kills)
    })
  }

  /** Stops every worker, then exits: 0 when asked to by a signal, 1 when a worker failed (`reason` says which). */
  const stop = (reason: string, exitCode = 0) => {
    if (stopping) return
    stopping = true
    log(exitCode === 0 ? 30 : 50, reason)
    const workers = Object.values(cluster.workers ?? {})
    for (const worker of workers) worker?.process.kill('SIGTERM')
    // Workers finish in-flight requests within their own shutdown timeout; this is the backstop.
    setTimeout(() => {
      for (const worker of workers) worker?.process.kill('SIGKILL')
      process.exit(1)
    }, config.shutdownTimeoutMs + 2000).unref()
    // Exit 0 only if every worker stopped cleanly: exit code 0, or ended by our SIGTERM before it
    // had set up its own handling (a worker still starting).
    let code = exitCode
    const exited = (worker: { process: { exitCode: number | null; signalCode: NodeJS.Signals | null } }) => {
      if (worker.process.exitCode !== 0 && worker.process.signalCode !== 'SIGTERM') code = 1
      if (Object.keys(cluster.workers ?? {}).length === 0) process.exit(code)
    }
    cluster.on('exit', exited)
    if (Object.keys(cluster.workers ?? {}).length === 0) process.exit(code)
  }
  process.on('SIGTERM', () => stop('primary received SIGTERM; stopping workers'))
  process.on('SIGINT', () => stop('primary received SIGINT; stopping workers'))
  for (let i = 0; i < config.workers; i++) fork()
  log(30, `primary ${process.pid} started ${config.workers} workers on ${config.host}:${config.port}`)
}

async function main(): Promise<void> {
  let config: Config
  try {
    config = loadConfig()
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error
    console.error(error.message)
    process.exit(1)
  }
  try {
    if (config.workers > 1 && cluster.isPrimary) await supervise(config)
    else await serve(config)
  } catch (error) {
    // E.g. the database cannot be reached or is newer than the code: say so in one line and stop.
    console.error(`animal-store could not start: ${error instanceof Error ? error.message : error}`)
    process.exit(1)
  }
}

await main()
