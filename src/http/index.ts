/**
 * The HTTP/1.1 wire, apart from what the API means. Nothing here knows a route. It guards:
 * - framing: the version (505 for another major; decision 65), Host (decision 50), targets in
 *   absolute or asterisk form (decision 25), percent-encoding, Transfer-Encoding, headers that
 *   must come once (framing.ts);
 * - bodies: JSON in UTF-8, read within the request deadline, 100-continue sent only when read
 *   (request-body.ts; decisions 10, 53, 59, 63);
 * - what Node answers itself: parser errors, CONNECT, Expect (raw-replies.ts; decision 52);
 * - pipelining, bounded per connection (pipelining.ts; decision 62), and half-closed clients;
 * - Upgrade, and bodies sent to GET and HEAD, which end the connection with the answer (decision 59);
 * - the connection cap, and draining at shutdown: every answer closes its connection, idle
 *   sockets are closed (decision 58);
 * - closing in stages: a connection that ends while a body is still arriving reads on, within
 *   bounds, so that the client gets its answer, not a reset (lingering-close.ts; decision 74).
 */
import type { Server } from 'node:http'
import { Server as NetServer, type Socket } from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import fp from 'fastify-plugin'
import type { Config } from '../config.ts'
import { framingError } from './framing.ts'
import { isLingering, Linger } from './lingering-close.ts'
import { limitPipelining } from './pipelining.ts'
import { rawErrorResponses, responseOn } from './raw-replies.ts'
import requestBody, { hasBody } from './request-body.ts'

declare module 'fastify' {
  interface FastifyInstance {
    /** True once the shutdown has begun: /readyz fails, and every answer closes its connection. */
    readonly draining: boolean
    /** Called at the shutdown signal (src/server.ts), before the server stops listening. */
    startDraining(): void
    /**
     * Closes the listening socket alone, then waits until every connection accepted in the last
     * ACCEPTED_WAIT_MS has sent its first bytes: only then may app.close() close the idle ones.
     */
    stopListening(): Promise<void>
  }
}

/**
 * How long after its accept a connection may take to send its first bytes before it counts as idle
 * (a browser's spare one): nginx sends its request the moment it connects, but a process starved of
 * CPU reads it late (a fixed 50 ms was too short in CI).
 */
const ACCEPTED_WAIT_MS = 1000
const ACCEPTED_POLL_MS = 5

export default fp<{ config: Config }>(
  async (app, { config }) => {
    app.server.maxConnections = config.maxConnections
    // A client that closes its side once it has sent its requests (`nc -N`) gets them answered, in
    // order, instead of Node aborting them unanswered though a write may be committed (RFC 9112 §9.6).
    ;(app.server as Server & { httpAllowHalfOpen: boolean }).httpAllowHalfOpen = true
    limitPipelining(app.server)
    rawErrorResponses(app.server, app.log)
    app.decorateRequest('targetScheme', null)

    let draining = false
    // Callback-style: it runs on every request, and costs less than an async hook.
    app.addHook('onRequest', (request, reply, done) => {
      reply.header('x-request-id', request.id)
      if (draining) reply.header('connection', 'close')
      // We upgrade to nothing: what a client pipelined after the Upgrade must be sent again (RFC 9112 §9.3.2).
      if (request.headers.upgrade !== undefined) reply.header('connection', 'close')
      // GET and HEAD never read a body: Node would drain one, however long, until the request timeout.
      else if ((request.method === 'GET' || request.method === 'HEAD') && hasBody(request.headers)) {
        reply.header('connection', 'close')
      }
      done(framingError(request))
    })
    await app.register(requestBody)

    const linger = new Linger({
      timeMs: config.lingeringTimeMs,
      idleMs: config.lingeringTimeoutMs,
      bytes: config.lingeringBytes,
    })
    /** Each open connection, with when it was accepted (a monotonic clock: the wall clock may step back). */
    const sockets = new Map<Socket, number>()
    app.server.on('connection', (socket: Socket) => {
      // Node reads the peer's address lazily and has none once the socket is gone: read it now for the logs.
      void socket.remoteAddress
      linger.watch(socket)
      sockets.set(socket, performance.now())
      socket.once('close', () => sockets.delete(socket))
    })
    // Answers under way end their keep-alive connections, instead of holding the process open.
    const closeAfterAnswers = () => {
      for (const socket of sockets.keys()) {
        const response = responseOn(socket)
        if (response && !response.headersSent) response.setHeader('connection', 'close')
      }
    }
    app.decorate('draining', { getter: () => draining })
    app.decorate('startDraining', () => {
      draining = true
      closeAfterAnswers()
    })
    app.decorate('stopListening', async () => {
      // The listening socket alone: http's close would also close the connections that look idle.
      if (app.server.listening) NetServer.prototype.close.call(app.server)
      // A socket no byte has been read from yet looks idle to Node: closing it would reset a
      // request already sent (a POST behind nginx, which then answers 502 instead of retrying).
      const unheard = () => {
        const since = performance.now() - ACCEPTED_WAIT_MS
        for (const [socket, accepted] of sockets) if (socket.bytesRead === 0 && accepted > since) return true
        return false
      }
      await new Promise(setImmediate)
      while (unheard()) await sleep(ACCEPTED_POLL_MS)
    })
    // Node closes idle keep-alive sockets, but not one that sent nothing yet or half a request.
    // Lingering ones are waited for, within half the shutdown's deadline: the rest is for the answers
    // and the database.
    app.addHook('preClose', (done) => {
      linger.endBy(config.shutdownTimeoutMs / 2)
      for (const socket of sockets.keys()) if (!responseOn(socket) && !isLingering(socket)) socket.destroy()
      closeAfterAnswers()
      done()
    })
  },
  { name: 'http' },
)
