/**
 * `animal-store listen` against the real app: it forwards the account's events to a receiver on
 * this machine (a node:http server in the test) as signed webhook deliveries, which the
 * standardwebhooks package verifies; it survives a server killed with SIGKILL and restarted,
 * forwarding every event once; and it refuses what it cannot do with one line and its exit status.
 * Most runs are in this process (src/cli.ts's main, with its own streams and a signal for Ctrl-C);
 * the crash test runs the server and listen as the processes a developer starts.
 */
import assert from 'node:assert/strict'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { PassThrough } from 'node:stream'
import { describe, it } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { Webhook } from 'standardwebhooks'
import { main } from '../src/cli.ts'
import { generateApiKey } from '../src/domain/api-keys.ts'
import { runCli } from './cli-run.ts'
import { bearer, build, type Cleanup, testDatabaseUrl } from './helper.ts'
import { cliKey, spawnNode, startServer } from './processes.ts'
import { until } from './wait.ts'

const WEBHOOKS = { EXPERIMENTAL_FEATURES: 'webhooks' }
/** A line listen prints for an event it forwarded: local time, type, id, the receiver's answer. */
const FORWARDED = /^\d\d:\d\d:\d\d {2}(\S+) +(evt_\S+) {2}→ (\d{3}) in \d+ ms$/gm

interface Delivery {
  id: string
  body: { type: string; timestamp: string; data: { id: string; message?: string } }
}

/** A webhook receiver on 127.0.0.1: it verifies each POST with `secret`, as examples/webhook-receiver.ts does, and answers 204. */
async function receiver(t: Cleanup, secret: string) {
  const webhook = new Webhook(secret)
  const verified: Delivery[] = []
  const refused: string[] = []
  const server = http.createServer((request, response) => {
    const chunks: Buffer[] = []
    request.on('data', (chunk: Buffer) => chunks.push(chunk))
    request.on('end', () => {
      const body = Buffer.concat(chunks).toString()
      try {
        const event = webhook.verify(body, request.headers as Record<string, string>) as Delivery['body']
        verified.push({ id: String(request.headers['webhook-id']), body: event })
        response.writeHead(204).end()
      } catch (error) {
        refused.push((error as Error).message)
        response.writeHead(400).end()
      }
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.after(() => {
    server.closeAllConnections()
    server.close()
  })
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`
  return { url, verified, refused }
}

/** `animal-store listen <args>` run in this process until `stop()` (Ctrl-C); its output as it comes. */
function startListen(t: Cleanup, args: string[], env: Record<string, string>) {
  const stop = new AbortController()
  let stdout = ''
  let stderr = ''
  const out = new PassThrough().setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk))
  const err = new PassThrough().setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk))
  const exited = main(['listen', ...args], { env, stdout: out, stderr: err, signal: stop.signal })
  t.after(() => stop.abort())
  return {
    stdout: () => stdout,
    stderr: () => stderr,
    // Generous: a CI machine running both halves of the suite at once can be several times slower.
    printed: (what: string, pattern: RegExp) =>
      until(what, () => pattern.test(stdout) || stderr !== '', { timeoutMs: 30_000 }),
    stop: async () => {
      stop.abort()
      return exited
    },
    exited,
  }
}

/** The session secret, as `animal-store listen --print-secret` prints it for the receiver. */
async function printedSecret(apiKey: string): Promise<string> {
  const run = await runCli(['listen', '--print-secret'], { API_KEY: apiKey })
  assert.deepEqual([run.code, run.stderr], [0, ''])
  assert.match(run.stdout, /^whsec_[A-Za-z0-9+/]{32}\n$/)
  return run.stdout.trim()
}

describe('animal-store listen', () => {
  it('forwards a message.created to a local receiver, signed so that standardwebhooks verifies it, and prints the line', async (t) => {
    const { app, newKey } = await build(t, WEBHOOKS)
    const api = await app.listen({ port: 0, host: '127.0.0.1' })
    const { secret: apiKey } = await newKey()
    const signingSecret = await printedSecret(apiKey)
    const hook = await receiver(t, signingSecret)
    const listen = startListen(t, ['--forward-to', hook.url, '--url', api], { API_KEY: apiKey })
    await listen.printed('ready', /^Ready: /m)
    assert.equal(listen.stderr(), '')
    assert.ok(listen.stdout().includes(signingSecret), 'listen prints the secret --print-secret gives')

    const sent = await fetch(`${api}/v1/messages`, {
      method: 'POST',
      headers: { ...bearer(apiKey), 'content-type': 'application/json' },
      body: JSON.stringify({ message: 'Hello, listen' }),
    })
    assert.equal(sent.status, 202)
    const message = (await sent.json()) as { id: string }
    await until('forwarded', () => hook.verified.length > 0 && [...listen.stdout().matchAll(FORWARDED)].length > 0, {
      timeoutMs: 30_000,
    })

    assert.deepEqual(hook.refused, [])
    const [delivery] = hook.verified as [Delivery]
    assert.equal(delivery.body.type, 'message.created')
    assert.equal(delivery.body.data.id, message.id)
    assert.equal(delivery.body.data.message, 'Hello, listen')
    // The body a registered endpoint would get: the event's type, its createdAt, its data.
    const stored = await app.inject({ url: `/v1/events/${delivery.id}`, headers: { ...bearer(apiKey), ...beta } })
    const event = stored.json()
    assert.deepEqual(delivery.body, { type: event.type, timestamp: event.createdAt, data: event.data })
    const [line] = [...listen.stdout().matchAll(FORWARDED)]
    assert.deepEqual(line?.slice(1), ['message.created', delivery.id, '204'])
    assert.equal(await listen.stop(), 0, listen.stderr())
  })

  it('refuses a command line without --forward-to, with a receiver or API URL not http(s), an unknown event type or no key: exit 2', async () => {
    const key = { API_KEY: generateApiKey('staging').secret }
    const cases: [string[], Record<string, string>, RegExp][] = [
      [[], key, /--forward-to is required/],
      [['--forward-to', 'localhost:3000/hook'], key, /--forward-to must be an http:\/\/ or https:\/\/ URL/],
      [['--forward-to', 'not a url'], key, /--forward-to must be/],
      [['--forward-to', 'http://127.0.0.1:3000/hook', '--url', 'ftp://127.0.0.1'], key, /--url must be/],
      [['--forward-to', 'http://127.0.0.1:3000/hook', '--events', 'order.*,pet.created'], key, /"pet\.created"/],
      [['--forward-to', 'http://127.0.0.1:3000/hook'], {}, /API key is required/],
      // Mistyped: its checksum fails, and its secret would match no delivery.
      [['--print-secret'], { API_KEY: 'nonsense' }, /API key is malformed/],
      [
        ['--print-secret'],
        { API_KEY: `${key.API_KEY.slice(0, -1)}${key.API_KEY.endsWith('x') ? 'y' : 'x'}` },
        /API key is malformed/,
      ],
      [
        ['--forward-to', 'http://127.0.0.1:3000/hook', '--resume-after', 'nope'],
        key,
        /--resume-after must be an event id/,
      ],
      [
        ['--forward-to', 'http://127.0.0.1:3000/hook'],
        { ...key, ANIMAL_STORE_URL: 'localhost:8080' },
        /ANIMAL_STORE_URL/,
      ],
      [['--print-secret', '--forward-to', 'http://127.0.0.1:3000/hook'], key, /--print-secret takes no other/],
      [['--forward-to', 'http://a/', '--forward-to', 'http://b/'], key, /given more than once/],
      [['--forward-to', 'http://127.0.0.1:3000/hook', 'extra'], key, /extra/],
    ]
    for (const [args, env, message] of cases) {
      const run = await runCli(['listen', ...args], env)
      const what = `listen ${args.join(' ')}`
      assert.deepEqual([run.code, run.stdout], [2, ''], `${what}: ${run.stderr}`)
      assert.match(run.stderr, /^animal-store: [^\n]+\n$/, what)
      assert.match(run.stderr, message, what)
    }
  })

  it('takes --events with spaces after the commas; with none, names the types the key may not read', async (t) => {
    const { app, newKey } = await build(t, WEBHOOKS)
    const api = await app.listen({ port: 0, host: '127.0.0.1' })
    const spaced = startListen(
      t,
      ['--forward-to', 'http://127.0.0.1:9/hook', '--url', api, '--events', 'order.*, message.created'],
      {
        API_KEY: (await newKey()).secret,
      },
    )
    await spaced.printed('ready', /^Ready: forwarding order\.\*,message\.created from /m)
    assert.equal(await spaced.stop(), 0, spaced.stderr())

    const { secret } = await newKey({ scopes: 'webhooks:read orders:read' })
    const narrow = startListen(t, ['--forward-to', 'http://127.0.0.1:9/hook', '--url', api], { API_KEY: secret })
    await narrow.printed('the note', /^Note: /m)
    assert.match(
      narrow.stdout(),
      /^Note: this key may not read message\.created \(messages:read\): those events are not forwarded\.$/m,
    )
    assert.equal(await narrow.stop(), 0, narrow.stderr())
  })

  it('--help or -h prints its usage, and exits 0', async () => {
    for (const help of ['--help', '-h']) {
      const run = await runCli(['listen', '--forward-to', 'http://127.0.0.1:3000/hook', help], {})
      assert.deepEqual([run.code, run.stderr], [0, ''], help)
      assert.match(run.stdout, /^Usage: animal-store listen/, help)
      assert.match(run.stdout, /--forward-to <url>/, help)
      assert.match(run.stdout, /--print-secret/, help)
    }
  })

  it("exits 1 with the server's message when the event to resume after is not kept (410) or the key is refused (401)", async (t) => {
    const { app, newKey } = await build(t, WEBHOOKS)
    const api = await app.listen({ port: 0, host: '127.0.0.1' })
    const { secret: apiKey } = await newKey()
    const forward = ['--forward-to', 'http://127.0.0.1:9/hook', '--url', api]

    const gone = await runCli(['listen', ...forward, '--resume-after', 'evt_neverExisted0000'], { API_KEY: apiKey })
    assert.equal(gone.code, 1, gone.stderr)
    assert.match(gone.stderr, /^animal-store: http:\/\/127\.0\.0\.1:\d+\/v1 answered 410: [^\n]+\n$/)
    assert.match(gone.stderr, /without --resume-after/)
    assert.doesNotMatch(gone.stdout, /Ready/)

    const refused = await runCli(['listen', ...forward], { API_KEY: generateApiKey('staging').secret })
    assert.equal(refused.code, 1, refused.stderr)
    assert.match(refused.stderr, /^animal-store: http:\/\/127\.0\.0\.1:\d+\/v1 answered 401: [^\n]+\n$/)
  })

  it('says the server has no event stream without EXPERIMENTAL_FEATURES=webhooks (404): exit 1', async (t) => {
    const { app, newKey } = await build(t)
    const api = await app.listen({ port: 0, host: '127.0.0.1' })
    const { secret: apiKey } = await newKey()
    // The address as the typed client's examples take it.
    const run = await runCli(['listen', '--forward-to', 'http://127.0.0.1:9/hook'], {
      API_KEY: apiKey,
      ANIMAL_STORE_URL: `${api}/v1`,
    })
    assert.equal(run.code, 1, run.stderr)
    assert.match(run.stderr, /answered 404: .*EXPERIMENTAL_FEATURES=webhooks/)
  })

  it('stops at SIGTERM with exit 0 after forwarding, whatever the garbage collector has done meanwhile', async (t) => {
    const { app, newKey } = await build(t, WEBHOOKS)
    const api = await app.listen({ port: 0, host: '127.0.0.1' })
    const { secret: apiKey } = await newKey()
    const hook = await receiver(t, await printedSecret(apiKey))
    // A collection every 50 ms: what a long session meets sooner or later. Once seen: a stop that no
    // longer reached the stream's read, which a collection had cut loose, and listen ran on.
    const collecting = ['--expose-gc', '--import', 'data:text/javascript,setInterval(() => gc(), 50).unref()']
    const args = [...collecting, 'bin/animal-store.ts', 'listen', '--forward-to', hook.url, '--url', api]
    const listen = spawnNode(args, { API_KEY: apiKey })
    t.after(() => listen.child.kill('SIGKILL'))
    await until('listen ready', () => /^Ready: /m.test(listen.output.stdout) || listen.child.exitCode !== null, {
      timeoutMs: 30_000,
    })
    for (let i = 0; i < 20; i++) {
      const sent = await fetch(`${api}/v1/messages`, {
        method: 'POST',
        headers: { ...bearer(apiKey), 'content-type': 'application/json' },
        body: JSON.stringify({ message: `#${i}` }),
      })
      assert.equal(sent.status, 202)
    }
    await until('every message forwarded', () => hook.verified.length >= 20, { timeoutMs: 30_000 })
    await sleep(500) // collections while the stream waits for more

    listen.child.kill('SIGTERM')
    const exit = await Promise.race([listen.exited, sleep(10_000, null, { ref: false })])
    assert.ok(exit, `listen did not exit within 10 s of SIGTERM:\n${listen.output.both}`)
    assert.deepEqual([exit.code, exit.signal, exit.stderr], [0, null, ''])
  })

  it('after a kill -9 of the server and its restart, under a steady flow of messages, has forwarded every accepted one, none twice', {
    timeout: 120_000,
  }, async (t) => {
    const databaseUrl = await testDatabaseUrl(t)
    const env = { DATABASE_URL: databaseUrl, ...WEBHOOKS }
    const first = await startServer(t, env)
    const apiKey = await cliKey({ DATABASE_URL: databaseUrl })
    const hook = await receiver(t, await printedSecret(apiKey))
    // As a developer runs it: its own process, which the kill does not touch.
    const args = ['bin/animal-store.ts', 'listen', '--forward-to', hook.url, '--url', first.url]
    const listen = spawnNode(args, { API_KEY: apiKey })
    t.after(() => listen.child.kill('SIGKILL'))
    await until('listen ready', () => /^Ready: /m.test(listen.output.stdout) || listen.child.exitCode !== null, {
      timeoutMs: 30_000,
    })
    assert.equal(listen.child.exitCode, null, listen.output.both)

    // A message every 20 ms, through the kill and the restart: those answered 202 are committed.
    const accepted: string[] = []
    let flowing = true
    const flow = (async () => {
      while (flowing) {
        const sent = await fetch(`${first.url}/v1/messages`, {
          method: 'POST',
          headers: { ...bearer(apiKey), 'content-type': 'application/json' },
          body: JSON.stringify({ message: `#${accepted.length}` }),
          // A request caught by the kill is given up, not waited for: the flow goes on.
          signal: AbortSignal.timeout(5000),
        }).catch(() => null)
        if (sent?.status === 202) accepted.push(((await sent.json()) as { id: string }).id)
        else await sent?.body?.cancel()
        await sleep(20)
      }
    })()
    await until('messages accepted before the kill', () => accepted.length >= 10, { timeoutMs: 30_000 })
    first.child.kill('SIGKILL')
    await first.exited
    const acceptedBefore = accepted.length
    await startServer(t, { ...env, PORT: String(first.port) })
    await until('messages accepted after the restart', () => accepted.length >= acceptedBefore + 25, {
      timeoutMs: 30_000,
    })
    await until('listen reconnected', () => /reconnected after/.test(listen.output.stdout), { timeoutMs: 30_000 })
    flowing = false
    await flow

    const forwarded = () => new Set(hook.verified.map((delivery) => delivery.body.data.id))
    await until('every accepted message forwarded', () => accepted.every((id) => forwarded().has(id)), {
      timeoutMs: 30_000,
    }).catch(() => {})
    const missing = accepted.filter((id) => !forwarded().has(id))
    const ids = hook.verified.map((delivery) => delivery.id)
    const twice = ids.filter((id, i) => ids.indexOf(id) !== i)
    t.diagnostic(`${accepted.length} accepted, ${acceptedBefore} before the kill; ${ids.length} forwarded`)
    assert.deepEqual(missing, [], `skipped, of ${accepted.length} accepted:\n${listen.output.both}`)
    assert.deepEqual(twice, [], 'forwarded twice in one session')
    assert.deepEqual(hook.refused, [])
    assert.equal((listen.output.stdout.match(/lost the connection/g) ?? []).length, 1, listen.output.stdout)

    listen.child.kill('SIGTERM')
    // Once seen in CI: listen still running long after SIGTERM. Fail then with what it printed, not at the test's timeout.
    const exit = await Promise.race([listen.exited, sleep(15_000, null, { ref: false })])
    assert.ok(exit, `listen did not exit within 15 s of SIGTERM:\n${listen.output.both}`)
    assert.deepEqual([exit.code, exit.signal, exit.stderr], [0, null, ''])
  })
})

const beta = { 'animal-store-beta': 'webhooks' }
