/**
 * The CLI run in this process, through src/cli.ts's main, with an environment and standard
 * streams of its own: what a test of the CLI's answers needs, without the half a second (or more,
 * on a busy machine) of starting Node for each command. The few tests of what only a real process
 * shows (the bin, exit statuses, a reader that goes away) use processes.ts's `cli`.
 */
import { Readable, Writable } from 'node:stream'
import { main } from '../src/cli.ts'
import type { Exit } from './processes.ts'

/**
 * Runs `animal-store <args>` with `env` as its whole environment (as processes.ts's `cli` gives a
 * child none of the service's variables but these) and `input` piped to it, then closed.
 */
export async function runCli(args: string[], env: Record<string, string>, input?: string | Buffer): Promise<Exit> {
  const stdout = collect()
  const stderr = collect()
  const stdin = Readable.from(input === undefined ? [] : [Buffer.from(input)], { objectMode: false })
  const code = await main(args, { env, stdin, stdout: stdout.stream, stderr: stderr.stream })
  return { code, signal: null, stdout: stdout.text(), stderr: stderr.text() }
}

/** A stream that keeps what is written to it, as it is written, and gives it back as text. */
function collect() {
  const chunks: Buffer[] = []
  const stream = new Writable({
    write(chunk: Buffer, _encoding, done) {
      chunks.push(chunk)
      done()
    },
  })
  return { stream, text: () => Buffer.concat(chunks).toString('utf8') }
}
