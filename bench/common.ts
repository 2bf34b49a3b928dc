/** What both benches share: BENCH_* settings, pinned child processes and their clean-up, wrk, /proc, tables. */
import { type ChildProcess, execFile, spawn, spawnSync } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { availableParallelism, loadavg, release, tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { promisify } from 'node:util'
import { ROOT } from '../scripts/start-command.ts'

export const log = (line: string) => void process.stderr.write(`${line}\n`)

export function fail(message: string): never {
  log(`bench: ${message}`)
  process.exit(1)
}

function integer(name: string, fallback: number, min: number, max = Number.MAX_SAFE_INTEGER): number {
  const text = process.env[name]?.trim()
  const value = Number(text || fallback)
  if (!Number.isInteger(value) || value < min || value > max) fail(`${name} must be an integer from ${min} to ${max}`)
  return value
}

/** A comma-separated setting; a typo fails at the start rather than measuring something else. */
export function list(name: string, fallback: string[], known: string[]): string[] {
  const values = process.env[name]?.trim() ? (process.env[name] as string).split(',').map((v) => v.trim()) : fallback
  const unknown = values.find((v) => !known.includes(v))
  if (unknown) fail(`${name}: unknown "${unknown}" (known: ${known.join(', ')})`)
  return values
}

const text = (name: string, fallback: string) => process.env[name]?.trim() || fallback

export function readSettings() {
  const seconds = integer('BENCH_SECONDS', 5, 1)
  const warmupSeconds = integer('BENCH_WARMUP_SECONDS', 2, 0)
  return {
    seconds,
    rounds: integer('BENCH_ROUNDS', 3, 1),
    warmupSeconds,
    connections: integer('BENCH_CONNECTIONS', 16, 1),
    pets: integer('BENCH_PETS', 10_000, 100),
    /** Available pets seeded for the order workload, one per request: more than 20,000 orders a second would use. */
    orderPets: integer('BENCH_ORDER_PETS', 20_000 * (warmupSeconds + seconds) + 1000, 100),
    nice: integer('BENCH_NICE', 0, -20, 19),
    serverCpu: text('BENCH_SERVER_CPU', '0'),
    clientCpu: text('BENCH_CLIENT_CPU', '1'),
    /** CPUs of a target with several instances (postgres-2). */
    clusterCpu: text('BENCH_CLUSTER_CPU', '0,1'),
    /** CPUs of the PostgreSQL backends of a one-instance target: wrk's by default. */
    postgresCpu: text('BENCH_POSTGRES_CPU', text('BENCH_CLIENT_CPU', '1')),
    /** Where the markdown report goes; empty: nowhere. */
    doc: process.env.BENCH_DOC ?? 'docs/performance.md',
    /**
     * Another checkout of this repository (a `git worktree add` of an older commit, its node_modules
     * in place): each service target X gets a twin X@base run from it, in the same rounds. '': none.
     */
    base: process.env.BENCH_BASE?.trim() ? resolve(process.env.BENCH_BASE.trim()) : '',
    /** A folder for --cpu-prof profiles of the measured servers, to open in Chrome DevTools or speedscope. */
    profileDir: process.env.BENCH_PROFILE?.trim() ?? '',
  }
}
export type Settings = ReturnType<typeof readSettings>

/** The BENCH_* settings of this run, as the environment part of its command line. */
export const changedSettings = () =>
  Object.entries(process.env)
    .filter(([name]) => name.startsWith('BENCH_'))
    .map(([name, value]) => `${name}=${value}`)
    .join(' ')

export interface Started {
  child: ChildProcess
  pid: number
  /** Its stderr so far, to explain an early exit. */
  stderr(): string
  exited: Promise<number | string>
  /** SIGTERM (the service shuts down gracefully), SIGKILL after 5 s. */
  stop(): Promise<void>
}

const started = new Set<Started>()
const dirs: string[] = []
const tasks: (() => Promise<unknown>)[] = []
let cleaning: Promise<void> | null = null

export function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'animal-store-bench-'))
  dirs.push(dir)
  return dir
}

/** An asynchronous clean-up (dropping a schema), run after the children have stopped; must be safe twice. */
export const atCleanup = (task: () => Promise<unknown>) => void tasks.push(task)

/** taskset (and nice, with BENCH_NICE) exec the command, so the child's pid is the command's own. */
function pinned(cpu: string, command: string, args: string[]): [string, string[]] {
  const line = ['-c', cpu, command, ...args]
  const nice = process.env.BENCH_NICE?.trim()
  return nice ? ['nice', ['-n', nice, 'taskset', ...line]] : ['taskset', line]
}

/**
 * Starts a server pinned to `cpu`, from the project root as npm does (or from `cwd`, another
 * checkout's root); stdout to /dev/null (a pipe would block it), unless `pipes`: then stdin and
 * stdout are pipes, for a child that talks with the bench (bench/stream-reader.ts) and whose
 * stdout the caller reads.
 */
export function start(
  cpu: string,
  command: string,
  args: string[],
  env: NodeJS.ProcessEnv,
  cwd = ROOT,
  pipes = false,
): Started {
  const io = pipes ? 'pipe' : 'ignore'
  const child = spawn(...pinned(cpu, command, args), { cwd, env, stdio: [io, io, 'pipe'] })
  if (child.pid === undefined) throw new Error(`could not start ${command}`)
  let stderr = ''
  child.stderr?.on('data', (chunk: Buffer) => {
    if (stderr.length < 20_000) stderr += chunk
  })
  const exited = new Promise<number | string>((resolve) =>
    child.on('exit', (code, signal) => resolve(code ?? `${signal}`)),
  )
  const self: Started = {
    child,
    pid: child.pid,
    stderr: () => stderr,
    exited,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGTERM')
        if (!(await Promise.race([exited.then(() => true), sleep(5000).then(() => false)]))) child.kill('SIGKILL')
      }
      await exited
    },
  }
  started.add(self)
  void exited.then(() => started.delete(self))
  return self
}

function cleanup(): Promise<void> {
  cleaning ??= (async () => {
    await Promise.all([...started].map((s) => s.stop()))
    for (const task of tasks.splice(0)) await task().catch((error) => log(`bench: clean-up failed: ${error}`))
    for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true })
  })()
  return cleaning
}

/** Runs a bench, stopping its servers and removing its files however it ends (a server left pinned skews the next run). */
export async function main(name: string, body: () => Promise<void>): Promise<void> {
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.once(signal, () => {
      log(`\n${name}: ${signal}, stopping the servers and removing temporary files`)
      void cleanup().finally(() => process.exit(130))
    })
  }
  process.once('exit', () => {
    for (const s of started) s.child.kill('SIGKILL')
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true })
  })
  try {
    await body()
  } catch (error) {
    // Once cleaning up, failures (a schema dropped under a seeding) are expected.
    if (!cleaning) log(`${name}: ${error instanceof Error ? error.message : String(error)}`)
    process.exitCode = 1
  } finally {
    await cleanup()
  }
}

const onPath = (command: string) => spawnSync('sh', ['-c', `command -v ${command}`]).status === 0

/** wrk and taskset must exist; wrk is installed with apt-get when we are root (as on CI). */
export function ensureTools(): void {
  if (!onPath('taskset')) fail('taskset is missing: install util-linux (apt-get install -y util-linux).')
  if (onPath('wrk')) return
  if (process.getuid?.() !== 0) fail('wrk is missing: install it with "sudo apt-get install -y wrk".')
  log('bench: wrk is missing, installing it with apt-get')
  spawnSync('sh', ['-c', 'apt-get update && apt-get install -y wrk'], { stdio: 'inherit' })
  if (!onPath('wrk')) fail('installing wrk with apt-get failed; install it by hand.')
}

/** A report's **Machine:** line: the host, and the wrk that measured on it. */
export const machineLine = (host: Machine) =>
  `**Machine:** ${host.cpu}, ${host.cores} cores, Node ${host.node}, ${host.os}, ${wrkVersion()}.`

/** A report's **Date:** line, with the command (and the settings it changed) that made the report. */
export const dateLine = (started: Date, command: string) =>
  `**Date:** ${started.toISOString().slice(0, 16).replace('T', ' ')} UTC. **Command:** \`${`${changedSettings()} ${command}`.trim()}\`.`

export function wrkVersion(): string {
  // `wrk -v` prints its version line and exits 1.
  const out = spawnSync('wrk', ['-v'], { encoding: 'utf8' })
  return (out.stdout || out.stderr).split('\n')[0]?.replace(/ Copyright.*/, '') ?? 'wrk'
}

export interface WrkResult {
  requestsPerSecond: number
  requests: number
  /** Latency percentiles, ms. */
  p50: number
  p99: number
  /** "Non-2xx or 3xx responses". */
  non2xx: number
  /** connect + read + write + timeout errors. */
  socketErrors: number
  /** What a script printed as "script <name> <number>" lines (bench/lua/order.lua: answers by status). */
  script: Record<string, number>
}

/** Runs `wrk -t1 --latency` pinned to `cpu` and reads its text report; `onSpawn` gets wrk's pid. */
export async function wrk(cpu: string, args: string[], onSpawn: (pid: number) => void): Promise<WrkResult> {
  // A request slower than --timeout counts as a timeout error rather than a latency sample.
  const running = promisify(execFile)(...pinned(cpu, 'wrk', ['-t1', '--latency', '--timeout', '10s', ...args]))
  if (running.child.pid) onSpawn(running.child.pid)
  const report = (await running).stdout
  const find = (pattern: RegExp) => pattern.exec(report)?.[1]
  const ms = (what: string) => {
    const [, n, unit] = new RegExp(`^\\s+${what}%\\s+([\\d.]+)(us|ms|s)$`, 'm').exec(report) ?? []
    if (!n) throw new Error(`wrk's report has no p${what}:\n${report}`)
    return Number(n) * { us: 0.001, ms: 1, s: 1000 }[unit as 'us' | 'ms' | 's']
  }
  const rps = find(/^Requests\/sec:\s+([\d.]+)/m)
  if (!rps) throw new Error(`wrk's report has no request rate:\n${report}`)
  const socket = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(report) ?? []
  return {
    requestsPerSecond: Number(rps),
    requests: Number(find(/^\s*(\d+) requests in /m)),
    p50: ms('50'),
    p99: ms('99'),
    non2xx: Number(find(/Non-2xx or 3xx responses: (\d+)/) ?? 0),
    socketErrors: socket.slice(1).reduce((sum, n) => sum + Number(n), 0),
    script: Object.fromEntries([...report.matchAll(/^script (\S+) (\d+)$/gm)].map(([, k, n]) => [k, Number(n)])),
  }
}

export const readText = (path: string) => {
  try {
    return readFileSync(path, 'utf8')
  } catch {
    return ''
  }
}

export function machine() {
  const os = /^PRETTY_NAME="?([^"\n]+)"?$/m.exec(readText('/etc/os-release'))?.[1] ?? 'Linux'
  return {
    cpu: /^model name\s*:\s*(.+)$/m.exec(readText('/proc/cpuinfo'))?.[1]?.trim() ?? 'unknown CPU',
    cores: availableParallelism(),
    node: process.version,
    os: `${os}, kernel ${release()}`,
    loadAverage: loadavg()
      .map((n) => n.toFixed(2))
      .join(' '),
  }
}
export type Machine = ReturnType<typeof machine>

/** A clock of the share of time some task waited for a CPU (/proc/pressure/cpu; null without PSI). */
export function contention(): () => number | null {
  const micros = () => Number(/^some .*total=(\d+)$/m.exec(readText('/proc/pressure/cpu'))?.[1] ?? Number.NaN)
  const [from, at] = [micros(), performance.now()]
  return () => {
    const waited = (micros() - from) / 10 / (performance.now() - at)
    return Number.isNaN(waited) ? null : waited
  }
}

export function median(values: number[]): number {
  const sorted = values.toSorted((a, b) => a - b)
  const mid = Math.floor(sorted.length / 2)
  return sorted.length % 2 ? (sorted[mid] as number) : ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2
}

/** A markdown table whose columns from `firstNumeric` on are right-aligned. */
export function markdownTable(header: string[], lines: string[][], firstNumeric: number): string {
  const widths = header.map((h, i) => Math.max(h.length, ...lines.map((l) => (l[i] as string).length)))
  const pad = (c: string, i: number) => (i >= firstNumeric ? c.padStart(widths[i] ?? 0) : c.padEnd(widths[i] ?? 0))
  const rule = widths.map((w, i) => (i >= firstNumeric ? `${'-'.repeat(w - 1)}:` : '-'.repeat(w)))
  return [header.map(pad), rule, ...lines.map((l) => l.map(pad))].map((cells) => `| ${cells.join(' | ')} |`).join('\n')
}

/** `doc` with section `name` replaced or appended: each bench rewrites only its part of docs/performance.md. */
export function withSection(doc: string, name: string, content: string): string {
  const [start, end] = [`<!-- ${name}:start -->`, `<!-- ${name}:end -->`]
  const block = content.startsWith(start) ? content : `${start}\n${content.trim()}\n${end}`
  const current = section(doc, name)
  return current === null ? `${doc.trimEnd()}\n\n${block}\n` : doc.replace(current, () => block)
}

export function section(doc: string, name: string): string | null {
  const from = doc.indexOf(`<!-- ${name}:start -->`)
  const to = doc.indexOf(`<!-- ${name}:end -->`, from)
  return from === -1 || to === -1 ? null : doc.slice(from, to + `<!-- ${name}:end -->`.length)
}

/** "<short hash> <subject>" of the commit checked out at `root`, or its path when git cannot tell. */
export function commitOf(root: string): string {
  const out = spawnSync('git', ['-C', root, 'log', '-1', '--format=%h %s'], { encoding: 'utf8' })
  const dirty = spawnSync('git', ['-C', root, 'status', '--porcelain', '--untracked-files=no'], { encoding: 'utf8' })
  if (out.status !== 0 || !out.stdout.trim()) return root
  return `${out.stdout.trim()}${dirty.stdout.trim() ? ' (with uncommitted changes)' : ''}`
}
