/**
 * A bound on pipelining: requests a client sends before it has read the answers to the earlier ones.
 *
 * Node parses all that one read of a connection brings (up to 64 KiB: a thousand small requests)
 * and serves every request at once, holding each answer until the ones before it are written. A
 * client that pipelines thousands of requests and never reads made us hold them all (200 such
 * connections: 1.1 GB, and /healthz took 10 s). So at most PIPELINE_DEPTH requests of a connection
 * wait behind an answer not yet written. From the next one on, nothing more of the connection is
 * served, and it is closed after the last answer under way (which says `Connection: close` when
 * still possible): a pipelining client retries the unanswered requests on a new connection
 * (RFC 9112 §9.3.2).
 *
 * The close lingers (RFC 9112 §9.6): the server ends its side, goes on reading what the client
 * still sends, and lets the connection go when the client ends its side, or after LINGER_MS. Closed
 * at once, with requests unread, the kernel would reset the connection, and the client would lose
 * answers it had not read yet. What is read meanwhile is still turned into requests by Node, and
 * thrown away: past DROPPED_LIMIT of them the connection is no longer read at all.
 */
import type { RequestListener, Server, ServerResponse } from 'node:http'
import type { Socket } from 'node:net'

/** More than any pipelining client uses (browsers do not pipeline; benchmarks use 16). */
export const PIPELINE_DEPTH = 64
/** Requests thrown away before the connection is no longer read. */
export const DROPPED_LIMIT = 256
/** How long a closing connection waits for its client to end its side. */
export const LINGER_MS = 2000

interface Pipeline {
  /** Requests whose answers wait behind another one not yet written. */
  waiting: number
  /** The last request served: its answer ends the connection once the limit is passed. */
  last: ServerResponse | null
  /** The limit was passed: nothing more of this connection is served. */
  closing: boolean
  /** Requests thrown away since. */
  dropped: number
}

const PIPELINE = Symbol('pipeline')

type PipelinedSocket = Socket & { [PIPELINE]?: Pipeline }

/** Puts the bound in front of the server's request listener (Fastify's). */
export function limitPipelining(server: Server): void {
  const listeners = server.listeners('request') as RequestListener[]
  if (listeners.length !== 1) throw new Error(`limitPipelining expects one request listener, found ${listeners.length}`)
  const serve = listeners[0] as RequestListener
  server.removeListener('request', serve)
  server.on('request', (request, response) => {
    const socket = request.socket as PipelinedSocket
    // The usual case: no answer is under way on this connection, and it was never over the limit.
    if (response.socket !== null && socket[PIPELINE] === undefined) return serve(request, response)
    socket[PIPELINE] ??= { waiting: 0, last: null, closing: false, dropped: 0 }
    const pipeline = socket[PIPELINE]
    if (pipeline.closing) {
      if (++pipeline.dropped === DROPPED_LIMIT) stopReading(socket)
      return
    }
    if (response.socket === null) {
      if (pipeline.waiting >= PIPELINE_DEPTH) return close(socket, pipeline)
      pipeline.waiting++
      response.once('finish', () => pipeline.waiting--)
    }
    pipeline.last = response
    serve(request, response)
  })
}

/** Serves nothing more of the connection, and closes it after the last answer under way. */
function close(socket: Socket, pipeline: Pipeline): void {
  pipeline.closing = true
  pipeline.dropped = 1
  // Node closes a connection after an answer that says `Connection: close` with destroySoon():
  // this one lingers instead.
  socket.destroySoon = () => linger(socket)
  const last = pipeline.last
  if (last !== null && !last.headersSent) last.shouldKeepAlive = false
  else if (last === null || last.writableFinished) linger(socket)
  else last.once('finish', () => linger(socket))
}

/** Ends our side, and lets the connection go once the client ends its own, or after LINGER_MS. */
function linger(socket: Socket): void {
  if (socket.destroyed) return
  socket.end()
  const timer = setTimeout(() => socket.destroy(), LINGER_MS).unref()
  socket.once('end', () => socket.destroy())
  socket.once('close', () => clearTimeout(timer))
}

/** Reads nothing more of the connection: Node resumes reading by itself (as requests start, as answers finish). */
function stopReading(socket: Socket): void {
  socket.pause()
  socket.resume = () => socket
}

/**
 * The last answer served on a connection that has pipelined, finished or not (null for one that
 * never has: its only answer is Node's `_httpMessage`). Answers go in order, so once it is
 * written all are: the client error handler sends its refusal after it.
 */
export function lastAnswer(socket: Socket): ServerResponse | null {
  return (socket as PipelinedSocket)[PIPELINE]?.last ?? null
}
