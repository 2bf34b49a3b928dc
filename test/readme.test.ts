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
import { freePort, ROOT, startServer } from './processes.ts'
import { assertShows, codeBlocks, readmeSection } from './readme.ts'

interface Step {
  command: string
  expected: string[]
}

function quickstart(section = 'quickstart'): Step[] {
  const steps: Step[] = []
  for (const { lang, body } of codeBlocks(readmeSection(section))) {
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

  it('the webhooks quickstart: a message reaches the local receiver, verified, and is delivered', {
    timeout: 90_000,
  }, async (t) => {
    const [start, ...steps] = quickstart('webhooks-quickstart')
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
    // The README's receiver stops after one delivery; should none come, it must not outlive the test.
    t.after(() => run('pkill', ['-f', 'examples/webhook-receiver.ts']).catch(() => {}))
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
    const { stdout } = await run('bash', ['-eu', '-c', script.join('\n')], {
      cwd: ROOT,
      env: { ...env, API_KEY: apiKey },
      timeout: 60_000,
    })
    const outputs = stdout.split(/^@@@ \d+\n/m).slice(1)
    assert.equal(outputs.length, steps.length)
    steps.forEach((step, i) => {
      assertShows(
        (outputs[i] as string)
          .replaceAll(`127.0.0.1:${server.port}`, '127.0.0.1:8080')
          .replaceAll(`127.0.0.1:${receiverPort}`, '127.0.0.1:4000'),
        step.expected,
        `README: \`${step.command.trim()}\``,
      )
    })
  })
})
