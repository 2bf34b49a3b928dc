/**
 * Closing in stages (RFC 9112 §9.6; decision 74). A connection closed while the client is still
 * sending makes the kernel reset it, and the reset makes the client's kernel throw away the answer
 * it had received but not yet read: a client uploading a body too large got `EPIPE` instead of its
 * 413 one time in four or five under load. So a connection that ends while a body is still arriving
 * lingers: our side ends after the answer (FIN), what the client still sends is read and thrown
 * away, and the connection goes when the client ends its side, or at the first bound passed:
 * LINGERING_TIME_SECONDS in all, LINGERING_TIMEOUT_SECONDS without a byte, LINGERING_BYTES read
 * (nginx's lingering_close, lingering_time and lingering_timeout).
 *
 * A lingering connection still holds its place under MAX_CONNECTIONS, and the shutdown waits for
 * it, but no longer than it is told (`endBy`).
 */
import type { IncomingMessage } from 'node:http'
import { Socket } from 'node:net'

export interface LingerBounds {
  /** Longest a closing connection is read, in all. */
  timeMs: number
  /** Longest wait for the client's next bytes. */
  idleMs: number
  /** Most bytes read and thrown away. */
  bytes: number
}

/** Node's HTTP parser of a connection (`socket.parser`): the request it is reading, and its place in the server's list. */
interface Parser {
  incoming?: IncomingMessage | null
  remove?: () => void
}

const LINGER = Symbol('linger')
const DEADLINE = Symbol('lingerDeadline')

type LingerSocket = Socket & {
  parser?: Parser | null
  [LINGER]?: Linger
  /** Set once the connection lingers: when it is let go at the latest. */
  [DEADLINE]?: { at: number; timer: NodeJS.Timeout }
}

/** The lingering connections of one server, and their bounds. */
export class Linger {
  readonly bounds: LingerBounds
  /** Connections lingering now. */
  readonly sockets = new Set<Socket>()
  /** No connection lingers past this time (set by the shutdown). */
  private notAfter = Number.POSITIVE_INFINITY

  constructor(bounds: LingerBounds) {
    this.bounds = bounds
  }

  /**
   * Makes Node's own close after an answer that ends the connection (`Connection: close`, which it
   * does with destroySoon()) linger when that answer came before the request's body had all arrived.
   */
  watch(socket: Socket): void {
    const s = socket as LingerSocket
    s[LINGER] = this
    s.destroySoon = closeSoon
  }

  /** From now on no connection lingers more than `ms` longer: the shutdown's share of its own deadline. */
  endBy(ms: number): void {
    this.notAfter = Math.min(this.notAfter, Date.now() + ms)
    for (const socket of this.sockets) this.deadline(socket as LingerSocket)
  }

  /** Ends our side, and reads and throws away what the client still sends, within the bounds. */
  close(socket: Socket): void {
    const s = socket as LingerSocket
    if (s.destroyed || s[DEADLINE]) return
    // The client has ended its side already: nothing more can come to be reset by.
    if (s.readableEnded) {
      destroySoon(s)
      return
    }
    s.end()
    const { bounds } = this
    const letGo = () => s.destroy()
    // What the client sends now is no request: Node's parser reads no more of it (its 'data'
    // listener goes, which also stops it reading the socket natively), and its server no longer
    // counts the connection as one whose request may time out or whose idleness ends it at close.
    s.removeAllListeners('data')
    s.parser?.remove?.()
    s.setTimeout(0)
    let read = 0
    const idle = setTimeout(letGo, bounds.idleMs)
    s[DEADLINE] = { at: Date.now() + bounds.timeMs, timer: setTimeout(letGo, bounds.timeMs) }
    this.deadline(s)
    s.on('data', (chunk: Buffer) => {
      read += chunk.length
      if (read > bounds.bytes) letGo()
      else idle.refresh()
    })
    s.once('end', letGo)
    this.sockets.add(s)
    s.once('close', () => {
      clearTimeout(idle)
      clearTimeout(s[DEADLINE]?.timer)
      this.sockets.delete(s)
    })
    // Node's parser may have stopped the socket reading (a body nobody read). It restarted it
    // through its own 'resume' listener, gone now, and the stream's own resume() does not: its
    // state says a read is under way. Its _read() starts the socket reading if it is not.
    s.resume()
    s._read(0)
  }

  /** Brings the connection's deadline forward to the shutdown's, if that is sooner. */
  private deadline(s: LingerSocket): void {
    const deadline = s[DEADLINE]
    if (!deadline || deadline.at <= this.notAfter) return
    clearTimeout(deadline.timer)
    deadline.at = this.notAfter
    deadline.timer = setTimeout(() => s.destroy(), Math.max(0, this.notAfter - Date.now()))
  }
}

/** Closes a connection in stages, with the bounds of its server (at once if it has none: not served by us). */
export function lingeringClose(socket: Socket): void {
  const linger = (socket as LingerSocket)[LINGER]
  if (linger) linger.close(socket)
  else destroySoon(socket)
}

/** Whether the connection is lingering. */
export function isLingering(socket: Socket): boolean {
  return (socket as LingerSocket)[DEADLINE] !== undefined
}

/** A watched socket's destroySoon(): lingers if the request being read has not all arrived. */
function closeSoon(this: LingerSocket): void {
  const incoming = this.parser?.incoming
  if (incoming && !incoming.complete) lingeringClose(this)
  else destroySoon(this)
}

/** Node's own close: ends our side, and destroys the socket once that is written. */
function destroySoon(socket: Socket): void {
  Socket.prototype.destroySoon.call(socket)
}
