/**
 * A webhook receiver on loopback for tests: records every request it gets, answers with what
 * `answer` says (200 unless told), after what `delayMs` says (at once unless told), and can be
 * stopped and started again on the same port.
 */
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import type { TestContext } from 'node:test'
import { Webhook } from 'standardwebhooks'

export interface Received {
  headers: http.IncomingHttpHeaders
  body: string
  /** The webhook-id header. */
  id: string
  /** The parsed body. */
  event: { type: string; timestamp: string; data: Record<string, unknown> }
}

export interface Receiver {
  url: string
  received: Received[]
  /** The status to answer the nth request (1-based) with. */
  answer: (n: number, request: Received) => number
  /** How long to hold the nth request (1-based) before answering it, in ms (0: at once). */
  delayMs: (n: number) => number
  /** Requests received and not answered yet (held by `delayMs`). */
  holding: number
  /** Distinct webhook-ids received. */
  ids(): Set<string>
  stop(): Promise<void>
  start(): Promise<void>
  /** Whether each received request verifies with this secret (standardwebhooks' own check). */
  verifiesWith(secret: string): boolean
}

export async function receiver(t: TestContext, path = '/hook'): Promise<Receiver> {
  let server: http.Server
  let port = 0
  const held = new Set<NodeJS.Timeout>()
  const self: Receiver = {
    url: '',
    received: [],
    answer: () => 200,
    delayMs: () => 0,
    holding: 0,
    ids: () => new Set(self.received.map((r) => r.id)),
    async stop() {
      // A held answer must not keep the test process alive past its test.
      for (const timer of held) clearTimeout(timer)
      held.clear()
      server.closeAllConnections()
      await new Promise((resolve) => server.close(resolve))
    },
    async start() {
      server = http.createServer((request, response) => {
        const chunks: Buffer[] = []
        request.on('data', (chunk) => chunks.push(chunk))
        request.on('end', () => {
          const body = Buffer.concat(chunks).toString()
          const got: Received = {
            headers: request.headers,
            body,
            id: String(request.headers['webhook-id']),
            event: JSON.parse(body),
          }
          self.received.push(got)
          const n = self.received.length
          response.statusCode = self.answer(n, got)
          const delay = self.delayMs(n)
          if (delay <= 0) return void response.end()
          self.holding++
          const timer = setTimeout(() => {
            held.delete(timer)
            self.holding--
            response.end()
          }, delay)
          held.add(timer)
        })
      })
      await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve))
      port = (server.address() as AddressInfo).port
      self.url = `http://127.0.0.1:${port}${path}`
    },
    verifiesWith(secret: string) {
      const webhook = new Webhook(secret)
      return self.received.every((r) => {
        try {
          webhook.verify(r.body, r.headers as Record<string, string>)
          return true
        } catch {
          return false
        }
      })
    },
  }
  await self.start()
  t.after(() => (server.listening ? self.stop() : undefined))
  return self
}
