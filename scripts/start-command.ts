/**
 * The service's start command, read from package.json's "start" script, so that the bench and the
 * tests run the service exactly as `npm start` does (its environment settings and node options).
 * The script has the shape `[NAME=value …] exec node [--option …] src/server.ts`; anything else is
 * an error here rather than a bench that quietly measures a different command. Values and paths
 * are kept as written: run the command from ROOT (or the checkout it was read from), as npm does.
 */
import { readFileSync } from 'node:fs'
import { join } from 'node:path'

export const ROOT = join(import.meta.dirname, '..')

export interface StartCommand {
  /** Environment settings of the script, as written. */
  env: Record<string, string>
  /** Node's options. */
  nodeArgs: string[]
  /** The server script, relative to ROOT (to `root`). */
  script: string
}

const SHAPE = /^((?:[A-Z_][A-Z0-9_]*=\S+\s+)*)exec\s+node\s+((?:--\S+\s+)*)(\S+\.ts)$/

/** The start command of this checkout, or of another at `root` (the bench's BENCH_BASE). */
export function startCommand(root = ROOT): StartCommand {
  const { scripts } = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { scripts: { start: string } }
  const match = SHAPE.exec(scripts.start.trim())
  if (!match) {
    throw new Error(`package.json "start" is not "[NAME=value …] exec node [--option …] <script>.ts": ${scripts.start}`)
  }
  const [, assignments = '', options = '', script = ''] = match
  const env = Object.fromEntries(
    assignments
      .split(/\s+/)
      .filter(Boolean)
      .map((a) => a.split(/=(.*)/, 2)),
  )
  return { env, nodeArgs: options.split(/\s+/).filter(Boolean), script }
}
