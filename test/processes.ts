/**
 * Real processes for end-to-end tests: the server (src/server.ts) and the CLI (bin/animal-store.ts),
 * started with Node 24 (process.execPath) and stopped when the test ends.
 */
import { type ChildProcess, execFile, spawn } from 'node:child_process'
import { createServer } from 'node:net'
import type { TestContext } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'

export const ROOT = new URL('..', import.meta.url).pathname

export async function freePort(): Promise<number> {
  const server = createServer().listen(0, '127.0.0.1')
  await new Promise((resolve) => server.once('listening', resolve))
  const { port } = server.address() as { port: number }
  await new Promise((resolve) => server.close(resolve))
  return port
}

export interface ServerProcess {
  url: string
  child: ChildProcess
  /** Everything written to stdout and stderr so far. */
  output: () => string
  /** Sends the signal and resolves with the exit code. */
  stop: (signal?: NodeJS.Signals) => Promise<number | null>
}

/** Starts src/server.ts on a free port and waits until /healthz answers. */
export async function startServer(t: TestContext, env: Record<string, string>): Promise<ServerProcess> {
  const port = await freePort()
  const child = spawn(process.execPath, ['src/server.ts'], {
    cwd: ROOT,
    env: { ...process.env, HOST: '127.0.0.1', PORT: String(port), LOG_LEVEL: 'warn', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  let output = ''
  child.stdout?.on('data', (chunk) => {
    output += chunk
  })
  child.stderr?.on('data', (chunk) => {
    output += chunk
  })
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)))
  t.after(() => {
    if (child.exitCode === null) child.kill('SIGKILL')
  })
  const url = `http://127.0.0.1:${port}`
  for (let i = 0; ; i++) {
    if (child.exitCode !== null) throw new Error(`server exited with ${child.exitCode}:\n${output}`)
    const response = await fetch(`${url}/healthz`).catch(() => null)
    if (response?.ok) break
    if (i > 200) throw new Error(`server did not start:\n${output}`)
    await sleep(50)
  }
  return {
    url,
    child,
    output: () => output,
    stop: (signal = 'SIGTERM') => {
      child.kill(signal)
      return exited
    },
  }
}

/** Runs the CLI; resolves with its exit code and output (never rejects on a non-zero exit). */
export function cli(args: string[], env: Record<string, string>) {
  return new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
    execFile(
      process.execPath,
      ['bin/animal-store.ts', ...args],
      { cwd: ROOT, env: { ...process.env, ...env } },
      (error, stdout, stderr) =>
        resolve({ code: error ? ((error as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    )
  })
}

/** Creates an account (if needed) and a key with the CLI; returns the key. */
export async function cliKey(env: Record<string, string>, email = 'user@example.com'): Promise<string> {
  await cli(['accounts', 'create', email], env)
  const created = await cli(['keys', 'create', email], env)
  if (created.code !== 0) throw new Error(created.stderr)
  return created.stdout.trimEnd().split('\n').at(-1) as string
}
