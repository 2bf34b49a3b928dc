/**
 * A bound on pipelining (decision 62): at most PIPELINE_DEPTH requests of a connection wait behind
 * an answer not yet written; past it nothing more is served, and the connection closes after the
 * last answer under way, lingering (lingering-close.ts, RFC 9112 §9.6) so that the client reads what
 * it was sent and retries the rest on a new connection (§9.3.2). Requests read meanwhile are thrown
 * away: past DROPPED_LIMIT of them the connection is no longer read at all.
 */
import type { RequestListener, Server, ServerResponse } from 'node:http'
import type { Socket } from 'node:net'
import { lingeringClose } from './lingering-close.ts'

/** More than any pipelining client uses (browsers do not pipeline; benchmarks use 16). */
export const PIPELINE_DEPTH = 64
/** Requests thrown away before the connection is no longer read. */
export const DROPPED_LIMIT = 256

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
  // this one lingers instead, whether or not a request is still arriving.
  socket.destroySoon = () => lingeringClose(socket)
  const last = pipeline.last
  if (last !== null && !last.headersSent) last.shouldKeepAlive = false
  else if (last === null || last.writableFinished) lingeringClose(socket)
  else last.once('finish', () => lingeringClose(socket))
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
