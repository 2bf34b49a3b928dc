/**
 * Real processes for end-to-end tests: the server (src/server.ts), the CLI (bin/animal-store.ts)
 * and any other script, started with Node 24 (process.execPath) and stopped when the test ends.
 * Children get our environment without the service's own variables, so a developer's shell
 * cannot change what a test sees.
 */
import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process'
import {
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs'
import { createServer, type Socket } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, type TestContext } from 'node:test'
import { ROOT, startCommand } from '../scripts/start-command.ts'
import { EnvSchema } from '../src/config.ts'
import { until } from './wait.ts'

export { ROOT }

/**
 * Ports handed out lately by any test process on this machine. Test files run two at a time, and
 * the kernel may hand the same free port to both while neither server listens yet: then one
 * server fails to bind, and its test's readiness check is answered by the other file's server.
 */
const RESERVED_PORTS = join(tmpdir(), 'animal-store-test-ports')
/** Long enough for any test to finish with its port; an older reservation is stale. */
const RESERVATION_MS = 10 * 60_000

/** A port no process listens on, and that no other test process was given in the last minutes. */
export async function freePort(): Promise<number> {
  mkdirSync(RESERVED_PORTS, { recursive: true })
  for (;;) {
    const port = await unusedPort()
    const reservation = join(RESERVED_PORTS, String(port))
    try {
      writeFileSync(reservation, '', { flag: 'wx' })
      return port
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error
      // Given to another test lately: ask for another, and clear the reservation if it is stale.
      const reservedAt = statSync(reservation, { throwIfNoEntry: false })?.mtimeMs ?? 0
      if (Date.now() - reservedAt > RESERVATION_MS) {
        rmSync(reservation, { force: true })
      }
    }
  }
}

async function unusedPort(): Promise<number> {
  const server = createServer().listen(0, '127.0.0.1')
  await new Promise((resolve) => server.once('listening', resolve))
  const { port } = server.address() as { port: number }
  await new Promise((resolve) => server.close(resolve))
  return port
}

/**
 * Whether process `pid` holds the listening socket of 127.0.0.1:`port` (from /proc: the LISTEN row
 * of /proc/net/tcp and the process's file descriptors). True where there is no /proc to ask.
 */
export function listens(pid: number, port: number): boolean {
  return listeningPorts(pid)?.includes(port) ?? true
}

/** The port process `pid` listens on at 127.0.0.1 (from /proc), or null while it listens on none. */
export function listeningPort(pid: number): number | null {
  return listeningPorts(pid)?.[0] ?? null
}

/** The ports process `pid` listens on at 127.0.0.1 or 0.0.0.0; undefined where there is no /proc to ask. */
function listeningPorts(pid: number): number[] | undefined {
  if (!existsSync('/proc/net/tcp')) return undefined
  let sockets: string[]
  try {
    sockets = readdirSync(`/proc/${pid}/fd`).map((fd) => safeReadlink(join(`/proc/${pid}/fd`, fd)))
  } catch {
    return [] // the process is gone
  }
  return readFileSync('/proc/net/tcp', 'utf8')
    .split('\n')
    .map((row) => row.trim().split(/\s+/))
    .filter((fields) => /^(0100007F|00000000):/.test(fields[1] ?? '') && fields[3] === '0A')
    .filter((fields) => sockets.includes(`socket:[${fields[9]}]`))
    .map((fields) => Number.parseInt((fields[1] as string).slice(9), 16))
}

/**
 * Whether the server listening at 127.0.0.1:`serverPort` has read everything `client` sent it: its
 * end of the connection holds no unread bytes (the rx_queue of /proc/net/tcp). Node parses what it
 * reads at once, so a request whose headers were sent is then in flight. True where there is no /proc.
 */
export function readByServer(serverPort: number, client: Socket): boolean {
  if (!existsSync('/proc/net/tcp')) return true
  const hex = (port: number) => `0100007F:${port.toString(16).toUpperCase().padStart(4, '0')}`
  const row = readFileSync('/proc/net/tcp', 'utf8')
    .split('\n')
    .map((line) => line.trim().split(/\s+/))
    .find((fields) => fields[1] === hex(serverPort) && fields[2] === hex(client.localPort as number))
  return row !== undefined && Number.parseInt(row[4]?.split(':')[1] ?? '1', 16) === 0
}

/** Whether the kernel has delivered every signal sent to process `pid` (none pending; true without /proc). */
export function noSignalPending(pid: number): boolean {
  let status: string
  try {
    status = readFileSync(`/proc/${pid}/status`, 'utf8')
  } catch {
    return true // no /proc, or the process is gone: nothing is pending
  }
  const pending = (field: string) => new RegExp(`^${field}:\\s*(\\w+)`, 'm').exec(status)?.[1] ?? '0'
  return BigInt(`0x${pending('SigPnd')}`) === 0n && BigInt(`0x${pending('ShdPnd')}`) === 0n
}

function safeReadlink(path: string): string {
  try {
    return readlinkSync(path)
  } catch {
    return ''
  }
}

/** A child's environment: ours without any of the service's variables, plus `overrides`. */
export function childEnv(overrides: Record<string, string>): NodeJS.ProcessEnv {
  const env = { ...process.env }
  for (const name of Object.keys(EnvSchema.properties)) delete env[name]
  delete env.NODE_TEST_CONTEXT
  // The tests start a few hundred processes: compiled once, they start a fifth sooner.
  env.NODE_COMPILE_CACHE = join(ROOT, 'node_modules/.cache/test-compile-cache')
  return { ...env, ...overrides }
}

export interface Exit {
  code: number | null
  /** Set when the process was killed (by us, or by the timeout of runNode). */
  signal: NodeJS.Signals | null
  stdout: string
  stderr: string
}

/**
 * Spawns `node <args>` in ROOT and collects its output; `exited` resolves once it has all been read.
 * `input`, when given, is written to its standard input, which is then closed.
 */
export function spawnNode(args: string[], env: Record<string, string>, timeout?: number, input?: string | Buffer) {
  const child = spawn(process.execPath, args, { cwd: ROOT, env: childEnv(env), timeout })
  if (input !== undefined) child.stdin.end(input)
  const output = { stdout: '', stderr: '', both: '' }
  for (const stream of ['stdout', 'stderr'] as const) {
    child[stream].setEncoding('utf8').on('data', (chunk: string) => {
      output[stream] += chunk
      output.both += chunk
    })
  }
  const exited = new Promise<Exit>((resolve, reject) => {
    child.on('error', reject)
    child.on('close', (code, signal) => resolve({ code, signal, stdout: output.stdout, stderr: output.stderr }))
  })
  return { child, output, exited }
}

/** `node`'s arguments and environment that run the server as `npm start` does (package.json's start script), plus `env`. */
function serverCommand(env: Record<string, string>): [string[], Record<string, string>] {
  const { env: scriptEnv, nodeArgs, script } = startCommand()
  return [[...nodeArgs, script], { ...scriptEnv, ...env }]
}

/** Runs the server as `npm start` does until it exits, killed after `timeout` ms; never rejects on a non-zero exit. */
export function runServer(env: Record<string, string>, timeout: number): Promise<Exit> {
  return runNode(...serverCommand(env), timeout)
}

/** Runs `node <args>` to completion, killed after `timeout` ms; never rejects on a non-zero exit. */
export function runNode(
  args: string[],
  env: Record<string, string>,
  timeout = 20_000,
  input?: string | Buffer,
): Promise<Exit> {
  return spawnNode(args, env, timeout, input).exited
}

/** Runs the CLI (`animal-store <args>`), with `input` piped to it; resolves with its exit code and output. */
export function cli(args: string[], env: Record<string, string>, input?: string | Buffer): Promise<Exit> {
  return runNode(['bin/animal-store.ts', ...args], env, undefined, input)
}

/**
 * Creates an account (if needed) and a key with the CLI, run in this process (test/cli-run.ts: the
 * same main, without starting Node twice); returns the key.
 */
export async function cliKey(env: Record<string, string>, email = 'user@example.com'): Promise<string> {
  const { runCli } = await import('./cli-run.ts')
  await runCli(['accounts', 'create', email], env)
  const created = await runCli(['keys', 'create', email], env)
  if (created.code !== 0) throw new Error(created.stderr)
  return created.stdout.trimEnd().split('\n').at(-1) as string
}

export type LogLine = Record<string, unknown>

/** What to undo when a test (a TestContext) or a suite (see suiteCleanup) ends. */
export type Cleanup = Pick<TestContext, 'after'>

/**
 * A Cleanup for what a suite shares (call it in a describe() body, start in a before() hook): its
 * steps run, last first, after the suite's last test. A server start costs a second of CPU: tests
 * that only read their own requests' log lines share one.
 */
export function suiteCleanup(): Cleanup {
  const steps: (() => unknown)[] = []
  after(async () => {
    for (const step of steps.reverse()) await step()
  })
  return { after: (step: () => unknown) => void steps.push(step) } as Cleanup
}

export interface ServerProcess {
  url: string
  port: number
  child: ChildProcessWithoutNullStreams
  /** Everything written to stdout and stderr so far, interleaved. */
  output: () => string
  stdout: () => string
  stderr: () => string
  /** stdout's lines, each parsed as JSON (throws if one is not JSON). */
  logs: () => LogLine[]
  /** Resolves with the first complete log line matching `test`; rejects after `ms` or when the process exits. */
  waitForLog: (test: (line: LogLine) => boolean, ms?: number) => Promise<LogLine>
  /** Resolves when the process has exited and its output is all read. */
  exited: Promise<Exit>
  /** Sends the signal and resolves with the exit code (once the output is all read). */
  stop: (signal?: NodeJS.Signals) => Promise<number | null>
}

export interface StartOptions {
  /** Resolve once GET <ready> answers 2xx (default /healthz); false: at once, the caller waits its own way. */
  ready?: string | false
}

/**
 * Starts the server as `npm start` does (package.json's start script: src/server.ts with its node
 * options and compile cache) on port 0 (LOG_LEVEL=warn unless `env` says otherwise), learns the port
 * the kernel gave it from /proc, and waits until it is ready. Without /proc it gets a free port.
 */
export async function startServer(
  t: Cleanup,
  env: Record<string, string>,
  { ready = '/healthz' }: StartOptions = {},
): Promise<ServerProcess> {
  const fixedPort = existsSync('/proc/net/tcp') ? 0 : await freePort()
  const { child, output, exited } = spawnNode(
    ...serverCommand({ HOST: '127.0.0.1', PORT: String(fixedPort), LOG_LEVEL: 'warn', ...env }),
  )
  const running = () => child.exitCode === null && child.signalCode === null
  t.after(() => {
    if (running()) child.kill('SIGKILL')
  })
  const waiters = new Set<() => void>()
  const wake = () => {
    for (const waiter of waiters) waiter()
  }
  child.stdout.on('data', wake)
  exited.then(wake, wake)

  const waitForLog = (test: (line: LogLine) => boolean, ms = 5000) =>
    new Promise<LogLine>((resolve, reject) => {
      const check = () => {
        // Only complete lines: the last element after split is the unfinished one.
        for (const line of output.stdout.split('\n').slice(0, -1).filter(Boolean)) {
          let parsed: LogLine
          try {
            parsed = JSON.parse(line)
          } catch {
            continue
          }
          if (test(parsed)) {
            done()
            return resolve(parsed)
          }
        }
        if (!running()) {
          done()
          reject(new Error(`server exited (${child.exitCode ?? child.signalCode}); stderr: ${output.stderr}`))
        }
      }
      const timer = setTimeout(() => {
        done()
        reject(new Error(`no such log line within ${ms} ms; stdout: ${output.stdout}; stderr: ${output.stderr}`))
      }, ms)
      const done = () => {
        clearTimeout(timer)
        waiters.delete(check)
      }
      waiters.add(check)
      check()
    })

  // A PORT of the caller's own: a server with METRICS_PORT listens on two.
  let port = Number(env.PORT) || fixedPort || null
  /** The port, once the server listens (with ready: false the caller waits its own way first). */
  const knownPort = () => {
    port ??= listeningPort(child.pid as number)
    if (!port) throw new Error(`the server listens on no port yet:\n${output.both}`)
    return port
  }
  if (ready) {
    await until(
      `serving ${ready}`,
      async () => {
        if (!running()) throw new Error(`server exited with ${child.exitCode ?? child.signalCode}`)
        port ??= listeningPort(child.pid as number)
        if (!port) return false
        const response = await fetch(`http://127.0.0.1:${port}${ready}`).catch(() => null)
        // A fixed port may be held by another test's server (this one then fails to bind): it must be ours.
        return response?.ok && listens(child.pid as number, port)
      },
      // Generous: on a busy CI machine a start (a cluster's, one after a SIGKILL) can be slow, and
      // how fast a server starts is not what these tests are about.
      { timeoutMs: 45_000 },
    ).catch((error) => {
      throw new Error(`server did not start: ${error.message}\n${output.both}`)
    })
  }
  return {
    get url() {
      return `http://127.0.0.1:${knownPort()}`
    },
    get port() {
      return knownPort()
    },
    child,
    output: () => output.both,
    stdout: () => output.stdout,
    stderr: () => output.stderr,
    logs: () =>
      output.stdout
        .split('\n')
        .filter((line) => line !== '')
        .map((line) => {
          try {
            return JSON.parse(line) as LogLine
          } catch {
            throw new Error(`log line is not JSON: ${line}`)
          }
        }),
    waitForLog,
    exited,
    stop: async (signal = 'SIGTERM') => {
      child.kill(signal)
      return (await exited).code
    },
  }
}
