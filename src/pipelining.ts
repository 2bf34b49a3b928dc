/**
 * A bound on pipelining: requests a client sends before it has read the answers to the earlier ones.
 *
 * Node parses all that one read of a connection brings (up to 64 KiB: a thousand small requests)
 * and serves every request at once, holding each answer until the ones before it are written. A
 * client that pipelines thousands of requests and never reads made us hold them all (200 such
 * connections: 1.1 GB, and /healthz took 10 s). So at most PIPELINE_DEPTH requests of a connection
 * wait behind an answer not yet written. At the next one we stop reading the connection, serve
 * none of what follows, and close it after the last answer under way (which says
 * `Connection: close`): a pipelining client retries the unanswered requests on a new connection
 * (RFC 9112 §9.3.2), and a client that does not read ends at the connection timeout.
 */
import type { RequestListener, Server, ServerResponse } from 'node:http'
import type { Socket } from 'node:net'

/** More than any pipelining client uses (browsers do not pipeline; benchmarks use 16). */
export const PIPELINE_DEPTH = 64

interface Pipeline {
  /** Requests whose answers wait behind another one not yet written. */
  waiting: number
  /** The last request served: its answer ends the connection once the limit is passed. */
  last: ServerResponse | null
  /** The limit was passed: nothing more of this connection is served. */
  closing: boolean
}

const PIPELINE = Symbol('pipeline')

type PipelinedSocket = Socket & { [PIPELINE]?: Pipeline }

/** Puts the bound in front of the server's request listener (Fastify's). */
export function limitPipelining(server: Server, depth = PIPELINE_DEPTH): void {
  const listeners = server.listeners('request') as RequestListener[]
  if (listeners.length !== 1) throw new Error(`limitPipelining expects one request listener, found ${listeners.length}`)
  const serve = listeners[0] as RequestListener
  server.removeListener('request', serve)
  server.on('request', (request, response) => {
    const socket = request.socket as PipelinedSocket
    // The usual case: no answer is under way on this connection, and it was never over the limit.
    if (response.socket !== null && socket[PIPELINE] === undefined) return serve(request, response)
    socket[PIPELINE] ??= { waiting: 0, last: null, closing: false }
    const pipeline = socket[PIPELINE]
    if (pipeline.closing) return
    if (response.socket === null) {
      if (pipeline.waiting >= depth) return close(socket, pipeline)
      pipeline.waiting++
      response.once('finish', () => pipeline.waiting--)
    }
    pipeline.last = response
    serve(request, response)
  })
}

/** Stops reading the connection, and ends it after the last answer under way. */
function close(socket: Socket, pipeline: Pipeline): void {
  pipeline.closing = true
  socket.pause()
  const last = pipeline.last
  if (last === null || last.writableFinished) {
    socket.end()
  } else if (!last.headersSent) {
    // Node then writes `Connection: close` and ends the connection after this answer.
    last.shouldKeepAlive = false
  } else {
    last.once('finish', () => socket.end())
  }
}
