/**
 * The service's start command, read from package.json's "start" script, so that the bench and the
 * tests run the service exactly as `npm start` does (its environment settings and node options).
 * The script has the shape `[NAME=value …] node [--option …] src/server.ts`; anything else is an
 * error here rather than a bench that quietly measures a different command.
 */
import { readFileSync } from 'node:fs'
import { isAbsolute, join } from 'node:path'

export const ROOT = join(import.meta.dirname, '..')

export interface StartCommand {
  /** Environment settings of the script, paths made absolute (npm runs scripts from the project root). */
  env: Record<string, string>
  /** Node's options, before the script. */
  nodeArgs: string[]
  /** The server script, absolute. */
  script: string
}

export function startCommand(): StartCommand {
  const { scripts } = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { scripts: { start: string } }
  const words = scripts.start.trim().split(/\s+/)
  const env: Record<string, string> = {}
  let word = words.shift()
  for (; word?.includes('='); word = words.shift()) {
    const [name, value] = word.split(/=(.*)/) as [string, string]
    env[name] = value.startsWith('.') || value.includes('/') ? absolute(value) : value
  }
  const script = words.pop()
  if (word !== 'node' || !script?.endsWith('.ts') || words.some((w) => !w.startsWith('--'))) {
    throw new Error(`package.json "start" is not "[NAME=value …] node [--option …] <script>.ts": ${scripts.start}`)
  }
  return { env, nodeArgs: words, script: absolute(script) }
}

function absolute(path: string): string {
  return isAbsolute(path) ? path : join(ROOT, path)
}
