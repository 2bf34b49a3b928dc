/**
 * The README is the front door: this runs its quickstart section, verbatim but for the port,
 * against a fresh server process, and checks every output it shows.
 */
import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { join } from 'node:path'
import { describe, it } from 'node:test'
import { promisify } from 'node:util'
import { tempDir } from './helper.ts'
import { ROOT, startServer } from './processes.ts'
import { assertShows, codeBlocks, readmeSection } from './readme.ts'

interface Step {
  command: string
  expected: string[]
}

function quickstart(): Step[] {
  const steps: Step[] = []
  for (const { lang, body } of codeBlocks(readmeSection('quickstart'))) {
    if (lang === 'sh') steps.push({ command: body, expected: [] })
    else if (lang === 'text') (steps.at(-1) as Step).expected = body.trimEnd().split('\n')
  }
  return steps
}

describe('README quickstart (point 12)', () => {
  it('every command of the quickstart prints what the README says', { timeout: 60_000 }, async (t) => {
    const steps = quickstart()
    assert.ok(steps.length >= 8)
    const serverEnv = { DATABASE_URL: `sqlite:${join(tempDir(t), 'db.sqlite')}`, LOG_LEVEL: 'warn' }
    const server = await startServer(t, serverEnv, { ready: '/readyz' })
    const port = server.port
    const env = { ...process.env, PORT: String(port), ...serverEnv }
    // Not pipefail: `curl … | head -c 30` ends curl with SIGPIPE, as it would in anyone's shell.
    const script = steps.map(
      (step, i) => `echo; echo "@@@ ${i}"\n${step.command.replaceAll('127.0.0.1:8080', `127.0.0.1:${port}`)}`,
    )
    const { stdout } = await promisify(execFile)('bash', ['-eu', '-c', script.join('\n')], {
      cwd: ROOT,
      env,
    })
    const outputs = stdout.split(/^@@@ \d+\n/m).slice(1)
    assert.equal(outputs.length, steps.length)
    steps.forEach((step, i) => {
      assertShows(
        (outputs[i] as string).replaceAll(`127.0.0.1:${port}`, '127.0.0.1:8080'),
        step.expected,
        `README: \`${step.command.trim()}\``,
        { ignoreCase: true },
      )
    })
  })
})
