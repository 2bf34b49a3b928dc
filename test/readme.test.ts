/**
 * The README is the front door: this runs its quickstart section, verbatim but for the port,
 * against a fresh server process, and checks every output it shows.
 */
import assert from 'node:assert/strict'
import { execFile, spawn } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { createServer } from 'node:net'
import { join } from 'node:path'
import { describe, it } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { promisify } from 'node:util'
import { tempDir } from './helper.ts'

const root = new URL('..', import.meta.url).pathname

interface Step {
  command: string
  expected: string[]
}

function quickstart(): Step[] {
  const readme = readFileSync(join(root, 'README.md'), 'utf8')
  const section = readme.split('<!-- quickstart:start -->')[1]?.split('<!-- quickstart:end -->')[0]
  assert.ok(section, 'README has no quickstart section')
  const steps: Step[] = []
  for (const [, lang, body] of section.matchAll(/```(sh|text)\n([\s\S]*?)```/g)) {
    if (lang === 'sh') steps.push({ command: body as string, expected: [] })
    else (steps.at(-1) as Step).expected = (body as string).trimEnd().split('\n')
  }
  return steps
}

async function freePort(): Promise<number> {
  const server = createServer().listen(0, '127.0.0.1')
  await new Promise((resolve) => server.once('listening', resolve))
  const { port } = server.address() as { port: number }
  await new Promise((resolve) => server.close(resolve))
  return port
}

/** `expected` lines must appear in `actual`, in order; `…` matches anything. */
function assertShows(actual: string, expected: string[], command: string) {
  const lines = actual.split('\n').map((l) => l.replace(/\r$/, ''))
  let from = 0
  for (const line of expected) {
    const pattern = new RegExp(
      `^${line
        .split('…')
        .map((part) => part.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'))
        .join('.*?')}$`,
      'i',
    )
    const at = lines.findIndex((l, i) => i >= from && pattern.test(l))
    assert.ok(at >= 0, `README: \`${command.trim()}\` should print\n  ${line}\nbut printed:\n${actual}`)
    from = at + 1
  }
}

describe('README quickstart (point 12)', () => {
  it('every command of the quickstart prints what the README says', { timeout: 60_000 }, async (t) => {
    const steps = quickstart()
    assert.ok(steps.length >= 8)
    const port = await freePort()
    const env = {
      ...process.env,
      PORT: String(port),
      DATABASE_URL: `sqlite:${join(tempDir(t), 'db.sqlite')}`,
      LOG_LEVEL: 'warn',
    }
    const server = spawn(process.execPath, ['src/server.ts'], { cwd: root, env, stdio: 'inherit' })
    t.after(() => server.kill('SIGKILL'))
    for (let i = 0; ; i++) {
      const ready = await fetch(`http://127.0.0.1:${port}/readyz`).catch(() => null)
      if (ready?.ok) break
      assert.ok(i < 100, 'the server did not start')
      await sleep(100)
    }
    // Not pipefail: `curl … | head -c 30` ends curl with SIGPIPE, as it would in anyone's shell.
    const script = steps.map(
      (step, i) => `echo; echo "@@@ ${i}"\n${step.command.replaceAll('127.0.0.1:8080', `127.0.0.1:${port}`)}`,
    )
    const { stdout } = await promisify(execFile)('bash', ['-eu', '-c', script.join('\n')], {
      cwd: root,
      env,
    })
    const outputs = stdout.split(/^@@@ \d+\n/m).slice(1)
    assert.equal(outputs.length, steps.length)
    steps.forEach((step, i) => {
      assertShows((outputs[i] as string).replaceAll(`127.0.0.1:${port}`, '127.0.0.1:8080'), step.expected, step.command)
    })
  })
})
