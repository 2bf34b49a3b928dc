/**
 * The README is the front door: this runs its quickstart section, verbatim but for the port,
 * against a fresh server process, and checks every output it shows; and the same for the webhooks
 * walkthrough of docs/webhooks.md.
 */
import assert from 'node:assert/strict'
import { execFile, spawn } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, it, type TestContext } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
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

/**
 * Runs a quickstart as `bash -eu -c script` in a process group of its own (execFile would not make
 * one: it hands spawn no `detached`), which the test ends with what the script left in the background.
 * Resolves to its stdout; rejects on a non-zero exit, with its stderr, or when it outlives `timeoutMs`.
 */
function runQuickstart(t: TestContext, script: string, options: { env: NodeJS.ProcessEnv; timeoutMs: number }) {
  const child = spawn('bash', ['-eu', '-c', script], { cwd: ROOT, env: options.env, detached: true })
  const group = child.pid as number
  t.after(() => endGroup(group))
  let stdout = ''
  let stderr = ''
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk))
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk))
  return new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => void endGroup(group), options.timeoutMs)
    child.on('close', (code, signal) => {
      clearTimeout(timer)
      if (code === 0) resolve(stdout)
      else reject(new Error(`the quickstart ended ${signal ?? `with exit code ${code}`}:\n${stderr}\n${stdout}`))
    })
  })
}

/**
 * Ends the process group a quickstart ran in, with what it left in the background. SIGTERM first;
 * `npm exec` outlives it with its `sh -c` children, so what is left after a moment is killed.
 */
async function endGroup(group: number): Promise<void> {
  const signal = (name: NodeJS.Signals | 0) => {
    try {
      process.kill(-group, name)
      return true
    } catch {
      return false // the group has ended
    }
  }
  if (!signal('SIGTERM')) return
  for (let tries = 0; tries < 20 && signal(0); tries++) await sleep(100)
  signal('SIGKILL')
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
    // The receiver and listen it starts in the background run on until the test ends its group.
    const stdout = await runQuickstart(t, script.join('\n'), { env, timeoutMs: 100_000 })
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
    // The receiver it starts in the background stops after one delivery; should none come, the
    // test ends its group. (A pkill by name would also end another run of this test.)
    const stdout = await runQuickstart(t, script.join('\n'), { env: { ...env, API_KEY: apiKey }, timeoutMs: 60_000 })
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
