/**
 * Child processes of a bench run and the temporary folder, cleaned up whatever way the run ends:
 * normal end, error, Ctrl-C or SIGTERM. A bench that leaves a server pinned to a core skews the next one.
 */
import { type ChildProcess, spawn } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { ROOT } from '../scripts/start-command.ts'

const children = new Set<ChildProcess>()
const dirs = new Set<string>()
/** Asynchronous clean-ups (e.g. dropping a PostgreSQL schema), run once the children have stopped. */
const tasks: (() => Promise<void>)[] = []
let cleaning: Promise<void> | null = null

export function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'animal-store-bench-'))
  dirs.add(dir)
  return dir
}

export interface Started {
  child: ChildProcess
  pid: number
  /** Its stderr so far, to explain an early exit. */
  stderr(): string
  /** Resolves with the exit code (or signal name) when the process ends. */
  exited: Promise<number | string>
}

/**
 * BENCH_NICE (e.g. -10, as root): on a shared machine, other processes landing on the bench's cores
 * swing the rates by tens of percent; a higher priority keeps most of that out. Off by default,
 * since it slows everyone else down while the bench runs.
 */
const NICE = process.env.BENCH_NICE?.trim() ?? ''

/** The command line that runs `command` pinned to `cpu`, at BENCH_NICE's priority when set. */
export function pinned(cpu: string, command: string, args: string[]): [string, string[]] {
  const line = ['taskset', '-c', cpu, command, ...args]
  return NICE ? ['nice', ['-n', NICE, ...line]] : [line[0] as string, line.slice(1)]
}

/**
 * Starts `command` pinned to `cpu` with taskset. nice and taskset exec the command, so the pid is
 * the command's own: /proc/<pid>/status is the server's memory, not taskset's.
 * stdout goes to /dev/null: a pipe nobody reads would block the server, and a file would time the disk.
 */
export function startPinned(cpu: string, command: string, args: string[], env: NodeJS.ProcessEnv): Started {
  const [program, line] = pinned(cpu, command, args)
  // From the project root, as npm runs the start script (its relative paths are the project's).
  const child = spawn(program, line, { cwd: ROOT, env, stdio: ['ignore', 'ignore', 'pipe'] })
  children.add(child)
  let stderr = ''
  child.stderr?.on('data', (chunk: Buffer) => {
    if (stderr.length < 20_000) stderr += chunk.toString()
  })
  const exited = new Promise<number | string>((resolve) => {
    child.on('exit', (code, signal) => {
      children.delete(child)
      resolve(code ?? signal ?? 'unknown')
    })
  })
  if (child.pid === undefined) throw new Error(`could not start ${command}`)
  return { child, pid: child.pid, stderr: () => stderr, exited }
}

/** Asks a process to stop (SIGTERM: the service shuts down gracefully), then kills it after `graceMs`. */
export async function stop(started: Started, graceMs = 5000): Promise<void> {
  if (started.child.exitCode !== null || started.child.signalCode !== null) return
  started.child.kill('SIGTERM')
  const done = await Promise.race([started.exited.then(() => true), sleep(graceMs).then(() => false)])
  if (!done) {
    started.child.kill('SIGKILL')
    await started.exited
  }
}

/** True once the clean-up has begun: work failing after that (a schema dropped under a seeding) is expected. */
export function cleaningUp(): boolean {
  return cleaning !== null
}

/** Registers an asynchronous clean-up for the end of the run; it must be safe to run twice. */
export function atCleanup(task: () => Promise<void>): void {
  tasks.push(task)
}

/**
 * Stops every child still running, runs the registered clean-ups (after the children, whose
 * connections would otherwise hold what they drop) and removes the temporary folders. Safe to call
 * more than once.
 */
export function cleanup(): Promise<void> {
  cleaning ??= (async () => {
    await Promise.all(
      [...children].map(async (child) => {
        child.kill('SIGTERM')
        const exited = new Promise((resolve) => child.once('exit', resolve))
        if (!(await Promise.race([exited.then(() => true), sleep(5000).then(() => false)]))) child.kill('SIGKILL')
      }),
    )
    for (const task of tasks.splice(0)) {
      await task().catch((error: unknown) => process.stderr.write(`bench: clean-up failed: ${error}\n`))
    }
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true })
    dirs.clear()
  })()
  return cleaning
}

/** Registers the clean-up for Ctrl-C, SIGTERM and a plain exit (the last one can only be synchronous). */
export function cleanupOnExit(): void {
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.once(signal, () => {
      process.stderr.write(`\nbench: ${signal}, stopping the servers and removing temporary files\n`)
      void cleanup().finally(() => process.exit(130))
    })
  }
  process.once('exit', () => {
    for (const child of children) child.kill('SIGKILL')
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true })
  })
}
