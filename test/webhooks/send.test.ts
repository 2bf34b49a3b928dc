/**
 * One delivery attempt against real receivers on 127.0.0.1: signed and verifiable, 2xx only,
 * redirects not followed, bounded in time and in what it reads, and private addresses refused
 * when connecting (a name resolving to one as well) unless allowed.
 */
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import http, { type IncomingMessage, type ServerResponse } from 'node:http'
import https from 'node:https'
import type { AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, describe, it, type TestContext } from 'node:test'
import { Webhook } from 'standardwebhooks'
import { closeWebhookAgents, MAX_RESPONSE_BYTES, sendWebhook, USER_AGENT } from '../../src/webhooks/send.ts'
import { newWebhookSecret, signatureHeaders } from '../../src/webhooks/signing.ts'
import { freePort } from '../processes.ts'
import { until } from '../wait.ts'

interface Received {
  method: string
  url: string
  headers: IncomingMessage['headers']
  body: string
}

interface Receiver {
  url: string
  port: number
  received: Received[]
  connections: number
}

/** An HTTP server on 127.0.0.1 that records each request and answers with `answer` (default 204). */
async function receiver(
  t: TestContext,
  answer: (req: IncomingMessage, res: ServerResponse) => void = (_, res) => res.writeHead(204).end(),
  server: http.Server = http.createServer(),
): Promise<Receiver> {
  const state = { received: [] as Received[], connections: 0 }
  server.on('connection', () => state.connections++)
  server.on('request', (req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = []
    req.on('data', (chunk: Buffer) => chunks.push(chunk))
    req.on('end', () => {
      state.received.push({
        method: req.method ?? '',
        url: req.url ?? '',
        headers: req.headers,
        body: Buffer.concat(chunks).toString(),
      })
      answer(req, res)
    })
  })
  server.listen(0, '127.0.0.1')
  await new Promise((resolve) => server.once('listening', resolve))
  t.after(() => {
    server.closeAllConnections()
    server.close()
  })
  const { port } = server.address() as AddressInfo
  const scheme = server instanceof https.Server ? 'https' : 'http'
  return Object.assign(state, { port, url: `${scheme}://127.0.0.1:${port}/hooks` })
}

const open = { timeoutMs: 5000, allowPrivate: true }
const guarded = { timeoutMs: 5000, allowPrivate: false }
const body = JSON.stringify({ type: 'pet.created', data: { id: 7 } })

after(closeWebhookAgents)

describe('Sending a webhook', () => {
  it('POSTs the body with the signature headers; the receiver verifies it with either secret', async (t) => {
    const target = await receiver(t)
    const secrets = [newWebhookSecret(), newWebhookSecret()]
    const headers = signatureHeaders('msg_1', new Date(), body, secrets)
    const result = await sendWebhook(target.url, { ...headers }, body, open)
    assert.deepEqual({ ...result, ms: 0 }, { delivered: true, status: 204, error: null, ms: 0 })
    const [request] = target.received as [Received]
    assert.equal(request.method, 'POST')
    assert.equal(request.url, '/hooks')
    assert.equal(request.body, body)
    assert.equal(request.headers['content-type'], 'application/json')
    assert.equal(request.headers['user-agent'], USER_AGENT)
    assert.equal(request.headers['webhook-id'], 'msg_1')
    const received = request.headers as Record<string, string>
    for (const secret of secrets) assert.deepEqual(new Webhook(secret).verify(request.body, received), JSON.parse(body))
    assert.throws(() => new Webhook(newWebhookSecret()).verify(request.body, received), /No matching signature/)
  })

  it('counts every 2xx as delivered, and nothing else', async (t) => {
    let status = 200
    const target = await receiver(t, (_, res) => res.writeHead(status).end('thanks'))
    for (const [answer, delivered] of [
      [200, true],
      [202, true],
      [299, true],
      [400, false],
      [410, false],
      [500, false],
      [503, false],
    ] as const) {
      status = answer
      const result = await sendWebhook(target.url, {}, body, open)
      assert.deepEqual({ ...result, ms: 0 }, { delivered, status: answer, error: null, ms: 0 }, String(answer))
    }
  })

  it('does not follow a redirect: a 3xx is a failed attempt, its Location is never asked', async (t) => {
    const elsewhere = await receiver(t)
    for (const status of [301, 302, 307, 308]) {
      const target = await receiver(t, (_, res) => res.writeHead(status, { location: elsewhere.url }).end())
      const result = await sendWebhook(target.url, {}, body, open)
      assert.equal(result.delivered, false)
      assert.equal(result.status, status)
      assert.equal(target.received.length, 1)
    }
    assert.equal(elsewhere.received.length, 0)
  })

  it('gives up on a receiver that never answers, within the timeout', async (t) => {
    const target = await receiver(t, () => {})
    const result = await sendWebhook(target.url, {}, body, { ...open, timeoutMs: 300 })
    assert.deepEqual({ ...result, ms: 0 }, { delivered: false, status: null, error: 'timeout', ms: 0 })
    assert.ok(result.ms >= 250 && result.ms < 5000, `${result.ms} ms`)
    assert.equal(target.received.length, 1)
  })

  it('bounds the whole attempt: a 2xx whose body never ends still counts, at the timeout', async (t) => {
    const target = await receiver(t, (_, res) => {
      res.writeHead(200)
      res.write('still going')
    })
    const result = await sendWebhook(target.url, {}, body, { ...open, timeoutMs: 300 })
    assert.deepEqual({ ...result, ms: 0 }, { delivered: true, status: 200, error: null, ms: 0 })
    assert.ok(result.ms >= 250 && result.ms < 5000, `${result.ms} ms`)
  })

  it('reads at most 64 KiB of a response and then drops the connection', async (t) => {
    let closed = false
    const target = await receiver(t, (_, res) => {
      res.on('close', () => {
        closed = true
      })
      res.writeHead(500)
      // Endless: a client reading it all would only stop at its timeout.
      const chunk = Buffer.alloc(16 * 1024, 'x')
      const pump = () => {
        while (!res.destroyed && res.write(chunk));
        if (!res.destroyed) res.once('drain', pump)
      }
      pump()
    })
    const result = await sendWebhook(target.url, {}, body, { ...open, timeoutMs: 20_000 })
    assert.deepEqual({ ...result, ms: 0 }, { delivered: false, status: 500, error: null, ms: 0 })
    assert.ok(result.ms < 10_000, `${result.ms} ms`)
    await until('the receiver sees its connection dropped', () => closed)
    assert.equal(MAX_RESPONSE_BYTES, 65_536)
  })

  it('reports a refused connection', async () => {
    const port = await freePort()
    const result = await sendWebhook(`http://127.0.0.1:${port}/hooks`, {}, body, open)
    assert.deepEqual({ ...result, ms: 0 }, { delivered: false, status: null, error: 'connection refused', ms: 0 })
  })

  it('refuses private addresses, written or resolved, unless allowed', async (t) => {
    const target = await receiver(t)
    const hosts = [
      ['127.0.0.1', '127.0.0.1'],
      // A name: only the address it resolves to, when connecting, can be refused.
      ['localhost', /^(127\.0\.0\.1|::1)$/],
      ['[::ffff:127.0.0.1]', '::ffff:7f00:1'],
      // IPv4-compatible: request-filtering-agent would let it through.
      ['[::127.0.0.1]', '::7f00:1'],
    ] as const
    for (const [host, address] of hosts) {
      const result = await sendWebhook(`http://${host}:${target.port}/hooks`, {}, body, guarded)
      assert.equal(result.delivered, false, host)
      assert.equal(result.status, null, host)
      assert.match(result.error ?? '', /^address not allowed: /, host)
      assert.match(result.error?.slice('address not allowed: '.length) ?? '', new RegExp(address), host)
    }
    assert.equal(target.received.length, 0)
    assert.equal(target.connections, 0)
    for (const host of ['127.0.0.1', 'localhost', '[::ffff:127.0.0.1]']) {
      const result = await sendWebhook(`http://${host}:${target.port}/hooks`, {}, body, open)
      assert.equal(result.delivered, true, host)
    }
    assert.equal(target.received.length, 3)
  })

  it('reuses one kept-alive connection across sends, until the agents are closed', async (t) => {
    const target = await receiver(t)
    for (let i = 0; i < 3; i++) assert.equal((await sendWebhook(target.url, {}, body, open)).delivered, true)
    assert.equal(target.connections, 1)
    closeWebhookAgents()
    assert.equal((await sendWebhook(target.url, {}, body, open)).delivered, true)
    assert.equal(target.connections, 2)
  })

  it('over https: refuses private addresses, and reports a certificate it cannot trust', async (t) => {
    // Not test/helper.ts's tempDir: importing it loads the whole app.
    const dir = mkdtempSync(join(tmpdir(), 'animal-store-webhook-tls-'))
    t.after(() => rmSync(dir, { recursive: true, force: true }))
    const [key, cert] = [join(dir, 'key.pem'), join(dir, 'cert.pem')]
    execFileSync(
      'openssl',
      [
        'req',
        '-x509',
        '-newkey',
        'ec',
        '-pkeyopt',
        'ec_paramgen_curve:prime256v1',
        '-nodes',
        '-subj',
        '/CN=127.0.0.1',
        '-days',
        '1',
        '-keyout',
        key,
        '-out',
        cert,
      ],
      { stdio: 'ignore' },
    )
    const target = await receiver(
      t,
      undefined,
      https.createServer({ key: readFileSync(key), cert: readFileSync(cert) }),
    )
    assert.deepEqual((await sendWebhook(target.url, {}, body, guarded)).error, 'address not allowed: 127.0.0.1')
    assert.match((await sendWebhook(target.url, {}, body, open)).error ?? '', /^tls: /)
    // https to a plain http server.
    const plain = await receiver(t)
    assert.match((await sendWebhook(plain.url.replace('http:', 'https:'), {}, body, open)).error ?? '', /^tls: /)
    assert.equal(target.received.length + plain.received.length, 0)
  })

  it('never throws: a bad URL, scheme, header or host is a result', async () => {
    const results = [
      await sendWebhook('not a url', {}, body, open),
      await sendWebhook('ftp://example.com/', {}, body, open),
      await sendWebhook('http://127.0.0.1:1/', { 'webhook-id': 'a\r\nb' }, body, open),
      await sendWebhook('http://no-such-host.invalid/', {}, body, guarded),
    ]
    assert.deepEqual(
      results.map(({ delivered, status }) => ({ delivered, status })),
      results.map(() => ({ delivered: false, status: null })),
    )
    assert.deepEqual(
      results.slice(0, 2).map(({ error }) => error),
      ['invalid url', 'unsupported scheme'],
    )
    assert.match(results[2]?.error ?? '', /header/i)
    assert.match(results[3]?.error ?? '', /^dns: /)
  })
})
