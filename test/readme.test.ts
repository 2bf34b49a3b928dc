/**
 * The README is the front door: this runs its quickstart section, verbatim but for the port,
 * against a fresh server process, and checks every output it shows; and the same for the webhooks
 * walkthrough of docs/webhooks.md.
 */
import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, it } from 'node:test'
import { promisify } from 'node:util'
import { tempDir } from './helper.ts'
import { freePort, ROOT, startServer } from './processes.ts'
import { assertShows, codeBlocks, docSection } from './readme.ts'

interface Step {
  command: string
  expected: string[]
}

/** The commands of a marked section of `page`, each with the output it shows. */
function quickstart(section = 'quickstart', page = 'README.md'): Step[] {
  const steps: Step[] = []
  for (const { lang, body } of codeBlocks(docSection(page, section))) {
    if (lang === 'sh') steps.push({ command: body, expected: [] })
    else if (lang === 'text') (steps.at(-1) as Step).expected = body.trimEnd().split('\n')
  }
  return steps
}

describe('README quickstart (point 12)', () => {
  it('every command of the quickstart prints what the README says', { timeout: 120_000 }, async (t) => {
    const steps = quickstart()
    assert.ok(steps.length >= 8)
    // The service as the quickstart says to start it: the messages step's listen reads the event stream.
    assert.match(readFileSync(join(ROOT, 'README.md'), 'utf8'), /`EXPERIMENTAL_FEATURES=webhooks npm start`/)
    const dir = tempDir(t)
    const serverEnv = { DATABASE_URL: `sqlite:${join(dir, 'db.sqlite')}`, LOG_LEVEL: 'warn' }
    const server = await startServer(t, { ...serverEnv, EXPERIMENTAL_FEATURES: 'webhooks' }, { ready: '/readyz' })
    const port = server.port
    const receiverPort = await freePort()
    const env = { ...process.env, PORT: String(port), RECEIVER_PORT: String(receiverPort), ...serverEnv }
    // As for a reader who made the account in "Get an API key": the quickstart, run under `set -e`,
    // must go on past its own `accounts create`.
    await promisify(execFile)('npx', ['animal-store', 'accounts', 'create', 'you@example.com'], { cwd: ROOT, env })
    const local = (text: string) =>
      text
        .replaceAll('127.0.0.1:8080', `127.0.0.1:${port}`)
        .replaceAll('127.0.0.1:4000', `127.0.0.1:${receiverPort}`)
        .replaceAll(/\b(listen|receiver)\.log\b/g, (file) => join(dir, file))
    // Not pipefail: `curl … | head -c 30` ends curl with SIGPIPE, as it would in anyone's shell.
    const script = steps.map((step, i) => `echo; echo "@@@ ${i}"\n${local(step.command)}`)
    // In a process group of its own, with the receiver and listen it starts in the background,
    // which run on until the group is ended.
    const options = { cwd: ROOT, env, timeout: 100_000, detached: true }
    const running = promisify(execFile)('bash', ['-eu', '-c', script.join('\n')], options)
    const group = running.child.pid as number
    t.after(() => {
      try {
        process.kill(-group, 'SIGTERM')
      } catch {
        // The group has ended.
      }
    })
    const { stdout } = await running
    const outputs = stdout.split(/^@@@ \d+\n/m).slice(1)
    assert.equal(outputs.length, steps.length)
    steps.forEach((step, i) => {
      assertShows(
        (outputs[i] as string)
          .replaceAll(`127.0.0.1:${port}`, '127.0.0.1:8080')
          .replaceAll(`127.0.0.1:${receiverPort}`, '127.0.0.1:4000'),
        step.expected,
        `README: \`${step.command.trim()}\``,
        { ignoreCase: true },
      )
    })
  })

  it('the webhooks quickstart of docs/webhooks.md: a message reaches the local receiver, verified, and is delivered', {
    timeout: 90_000,
  }, async (t) => {
    const [start, ...steps] = quickstart('webhooks-quickstart', 'docs/webhooks.md')
    // The first block starts the service: its settings, before `npm start`, are the server's.
    const settings = Object.fromEntries(
      (start?.command.trim().replace(/ npm start$/, '') ?? '').split(' ').map((pair) => pair.split('=')),
    )
    assert.equal(settings.EXPERIMENTAL_FEATURES, 'webhooks')
    const dir = tempDir(t)
    const serverEnv = { DATABASE_URL: `sqlite:${join(dir, 'db.sqlite')}`, LOG_LEVEL: 'warn' }
    const server = await startServer(t, { ...serverEnv, ...settings }, { ready: '/readyz' })
    const receiverPort = await freePort()
    const run = promisify(execFile)
    const env = { ...process.env, ...serverEnv, RECEIVER_PORT: String(receiverPort) }
    await run('npx', ['animal-store', 'accounts', 'create', 'hooks@example.com'], { cwd: ROOT, env })
    const key = await run('npx', ['animal-store', 'keys', 'create', 'hooks@example.com'], { cwd: ROOT, env })
    const apiKey = key.stdout.trim().split('\n').at(-1) as string
    const local = (text: string) =>
      text
        .replaceAll('127.0.0.1:8080', `127.0.0.1:${server.port}`)
        .replaceAll('127.0.0.1:4000', `127.0.0.1:${receiverPort}`)
        .replaceAll('receiver.log', join(dir, 'receiver.log'))
    const script = steps.map((step, i) => `echo; echo "@@@ ${i}"\n${local(step.command)}`)
    // In a process group of its own, with the receiver it starts in the background: that receiver
    // stops after one delivery, and should none come, ending the group ends it. (A pkill by name
    // would also end the other database's run of this test, whose script names the receiver too.)
    // execFile hands `detached` to spawn, though its options type does not list it.
    const options = { cwd: ROOT, env: { ...env, API_KEY: apiKey }, timeout: 60_000, detached: true }
    const running = run('bash', ['-eu', '-c', script.join('\n')], options)
    const group = running.child.pid as number
    t.after(() => {
      try {
        process.kill(-group, 'SIGTERM')
      } catch {
        // The group has ended: the receiver got its one delivery.
      }
    })
    const { stdout } = await running
    const outputs = stdout.split(/^@@@ \d+\n/m).slice(1)
    assert.equal(outputs.length, steps.length)
    steps.forEach((step, i) => {
      assertShows(
        (outputs[i] as string)
          .replaceAll(`127.0.0.1:${server.port}`, '127.0.0.1:8080')
          .replaceAll(`127.0.0.1:${receiverPort}`, '127.0.0.1:4000'),
        step.expected,
        `docs/webhooks.md: \`${step.command.trim()}\``,
      )
    })
  })
})
