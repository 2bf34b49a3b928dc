/**
 * The request log: one JSON line per request, in pino's format, written straight to the log
 * stream. Going through pino for this line (a child logger per request, generic serialization)
 * cost a quarter of the throughput of a cached read; this costs one template string.
 *
 * Everything else (failures, warnings) still goes through pino. Each request's pino child logger
 * is made only when something logs through it (LazyLogger), since most requests never do.
 */
import { hostname } from 'node:os'
import type { FastifyBaseLogger, FastifyReply, FastifyRequest } from 'fastify'
import { LogController } from 'fastify'
import type { Bindings, ChildLoggerOptions, DestinationStream, LevelWithSilent, Logger } from 'pino'
import { type Config, LOG_LEVEL_VALUES } from '../config.ts'
import { redactApiKeys } from '../domain/api-keys.ts'

const INFO = 30

export class RequestLog extends LogController {
  #stream: DestinationStream
  #enabled: boolean
  /** Whether `request.ip` may come from X-Forwarded-For, which the client may have written. */
  #ipFromHeader: boolean
  /** The fields every line starts with, as pino writes them (level and time come first). */
  #host = `"pid":${process.pid},"hostname":${JSON.stringify(hostname())}`

  constructor(stream: DestinationStream, level: string, trustProxy: Config['trustProxy']) {
    super({ requestIdLogLabel: 'requestId' })
    this.#stream = stream
    this.#enabled = (LOG_LEVEL_VALUES[level] ?? Number.POSITIVE_INFINITY) <= INFO
    this.#ipFromHeader = trustProxy !== false
  }

  override incomingRequest(): void {}

  override requestCompleted(_error: unknown, request: FastifyRequest, reply: FastifyReply): void {
    if (!this.#enabled) return
    // `ip` is read when the connection opens (src/http/index.ts); `?? ''` only keeps a log line from ever
    // throwing. A socket's address, and a request id (ours, or a client's that matched REQUEST_ID
    // in src/http/options.ts), hold nothing to escape or redact; X-Forwarded-For may hold anything.
    const ip = request.ip ?? ''
    const address = this.#ipFromHeader ? JSON.stringify(redactApiKeys(ip)) : `"${ip}"`
    const req = `{"method":"${request.method}","url":${JSON.stringify(redactApiKeys(request.url))},"remoteAddress":${address}}`
    // Milliseconds to the microsecond: the clock's other digits are noise, and cost thrice as much to print.
    const ms = Math.round(reply.elapsedTime * 1000) / 1000
    // An answer we chose (a 4xx, 501, our own 503) says why here, not in a line of its own (src/plugins/error-handler.ts).
    const refusal = request.refusal
    const why = refusal ? `"code":"${refusal.code}","detail":${JSON.stringify(redactApiKeys(refusal.message))},` : ''
    this.#stream.write(
      `{"level":${INFO},"time":${Date.now()},${this.#host},"requestId":"${request.id}","req":${req},` +
        `"status":${reply.statusCode},${why}"ms":${ms},"msg":"request completed"}\n`,
    )
  }
}

type Log = (...args: unknown[]) => void
const LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const

/**
 * A logger that becomes a real pino child logger the first time it is used. Its own children are
 * lazy too: a request's logger costs one small object unless something logs through it.
 */
class LazyLogger {
  #parent: FastifyBaseLogger | LazyLogger
  #bindings: Bindings
  #options: ChildLoggerOptions | undefined
  #child: FastifyBaseLogger | undefined

  constructor(parent: FastifyBaseLogger | LazyLogger, bindings: Bindings, options?: ChildLoggerOptions) {
    this.#parent = parent
    this.#bindings = bindings
    this.#options = options
  }

  get #real(): FastifyBaseLogger {
    if (this.#child === undefined) {
      const parent = this.#parent instanceof LazyLogger ? this.#parent.#real : this.#parent
      this.#child = parent.child(this.#bindings, this.#options)
    }
    return this.#child
  }

  get level(): LevelWithSilent {
    return (this.#child ?? this.#parent).level as LevelWithSilent
  }
  set level(level: LevelWithSilent) {
    this.#real.level = level
  }
  // The seven logging methods, each passing its arguments to the real logger's own.
  static {
    for (const level of LEVELS) {
      Object.defineProperty(LazyLogger.prototype, level, {
        value: function log(this: LazyLogger, ...args: unknown[]): void {
          ;(this.#real[level] as Log)(...args)
        },
        writable: true,
        configurable: true,
      })
    }
  }
  child(bindings: Bindings, options?: ChildLoggerOptions): FastifyBaseLogger {
    return new LazyLogger(this, bindings, options) as unknown as FastifyBaseLogger
  }
}

/**
 * The app's logger (Fastify's `loggerInstance`): `logger` itself, except that its children are
 * lazy. Fastify makes a child logger per request with the logger's own `child`; a
 * `childLoggerFactory` would do as well, but Fastify then checks every child it returns for the
 * seven logging methods, which cost more than the rest of the child logger.
 */
export function withLazyChildren(logger: Logger): FastifyBaseLogger {
  const root = Object.create(logger) as Logger
  root.child = ((bindings: Bindings, options?: ChildLoggerOptions) =>
    new LazyLogger(logger, bindings, options)) as unknown as Logger['child']
  return root
}
