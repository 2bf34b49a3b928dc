/**
 * The load generator: wrk (Debian's package), pinned with taskset. We parse its text report
 * (`--latency` adds the 50/75/90/99% distribution) rather than trusting a script to print it.
 */
import { spawn, spawnSync } from 'node:child_process'
import { pinned } from './processes.ts'

export interface WrkResult {
  requestsPerSecond: number
  requests: number
  /** Latency percentiles, in milliseconds. */
  p50: number
  p99: number
  /** Responses whose status was not 2xx or 3xx ("Non-2xx or 3xx responses"). */
  non2xx: number
  /** connect + read + write + timeout errors ("Socket errors"). */
  socketErrors: number
}

function onPath(command: string): boolean {
  return spawnSync('sh', ['-c', `command -v ${command}`], { stdio: 'ignore' }).status === 0
}

/** wrk and taskset must exist; wrk is installed when we are root (as on CI and the dev machines). */
export function ensureTools(): void {
  if (!onPath('taskset')) fail('taskset is missing: install util-linux (apt-get install -y util-linux).')
  if (onPath('wrk')) return
  if (process.getuid?.() !== 0)
    fail('wrk is missing: install it with "sudo apt-get update && sudo apt-get install -y wrk".')
  process.stderr.write('bench: wrk is missing, installing it with apt-get\n')
  const install = spawnSync('sh', ['-c', 'apt-get update && apt-get install -y wrk'], { stdio: 'inherit' })
  if (install.status !== 0 || !onPath('wrk')) fail('installing wrk with apt-get failed; install it by hand.')
}

function fail(message: string): never {
  process.stderr.write(`bench: ${message}\n`)
  process.exit(1)
}

export function wrkVersion(): string {
  // `wrk -v` prints its version line and exits 1.
  const out = spawnSync('wrk', ['-v'], { encoding: 'utf8' })
  return (out.stdout || out.stderr).split('\n')[0]?.replace(/ Copyright.*/, '') ?? 'wrk'
}

export interface WrkOptions {
  cpu: string
  url: string
  seconds: number
  connections: number
  /** A Lua script from bench/lua and the arguments its init(args) receives. */
  script?: string
  scriptArgs?: string[]
  headers?: string[]
  /** Called with wrk's pid once it runs (taskset and nice exec it, so the pid is wrk's own). */
  onSpawn?: (pid: number) => void
}

/** Runs wrk (asynchronously, so the caller can sample the server's memory meanwhile). */
export async function runWrk(options: WrkOptions): Promise<WrkResult> {
  const args = ['-t1', `-c${options.connections}`, `-d${options.seconds}s`, '--latency']
  // A request that takes longer than this counts as a timeout error rather than a latency sample.
  args.push('--timeout', '10s')
  for (const header of options.headers ?? []) args.push('-H', header)
  if (options.script) args.push('-s', options.script)
  args.push(options.url)
  if (options.scriptArgs) args.push('--', ...options.scriptArgs)
  const [program, line] = pinned(options.cpu, 'wrk', args)
  const child = spawn(program, line, { stdio: ['ignore', 'pipe', 'pipe'] })
  if (child.pid !== undefined) options.onSpawn?.(child.pid)
  let out = ''
  let err = ''
  child.stdout.on('data', (chunk: Buffer) => {
    out += chunk.toString()
  })
  child.stderr.on('data', (chunk: Buffer) => {
    err += chunk.toString()
  })
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve))
  if (code !== 0) throw new Error(`wrk failed (exit ${code}): ${err.trim() || out.trim()}`)
  return parseWrk(out)
}

const UNIT_MS: Record<string, number> = { us: 0.001, ms: 1, s: 1000, m: 60_000, h: 3_600_000 }

function duration(text: string | undefined, what: string, report: string): number {
  const match = /^([\d.]+)(us|ms|s|m|h)$/.exec(text ?? '')
  if (!match) throw new Error(`wrk report has no ${what}:\n${report}`)
  return Number(match[1]) * (UNIT_MS[match[2] as string] as number)
}

/** Reads wrk's text report. Throws when a number we rely on is missing, rather than reporting 0. */
export function parseWrk(report: string): WrkResult {
  const rps = /^Requests\/sec:\s+([\d.]+)/m.exec(report)?.[1]
  const requests = /^\s*(\d+) requests in /m.exec(report)?.[1]
  if (rps === undefined || requests === undefined) throw new Error(`wrk report has no request rate:\n${report}`)
  const socket = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(report)
  return {
    requestsPerSecond: Number(rps),
    requests: Number(requests),
    p50: duration(/^\s+50%\s+(\S+)/m.exec(report)?.[1], 'p50', report),
    p99: duration(/^\s+99%\s+(\S+)/m.exec(report)?.[1], 'p99', report),
    non2xx: Number(/Non-2xx or 3xx responses: (\d+)/.exec(report)?.[1] ?? 0),
    socketErrors: socket ? socket.slice(1).reduce((sum, n) => sum + Number(n), 0) : 0,
  }
}
