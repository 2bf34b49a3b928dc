/**
 * The Animal Store application, as one Fastify plugin. src/server.ts runs it as a process;
 * the tests build it the same way (test/helper.ts). The order below is the order things start.
 */
import { randomUUID } from 'node:crypto'
import type { Server } from 'node:http'
import type { Socket } from 'node:net'
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import type { FastifyHttpOptions, FastifyInstance, FastifyRequest } from 'fastify'
import pino, { type DestinationStream } from 'pino'
import { redactApiKeys } from './api-keys.ts'
import type { Config } from './config.ts'
import { onDraining } from './drain.ts'
import { ApiError } from './errors.ts'
import { malformedOrigin, setTargetScheme, validHost } from './host.ts'
import { wellEncoded } from './percent-encoding.ts'
import { limitPipelining } from './pipelining.ts'
import auth from './plugins/auth.ts'
import errors, {
  clientErrorHandler,
  frameworkError,
  originForm,
  rawErrorResponses,
  responseOn,
} from './plugins/errors.ts'
import idempotency from './plugins/idempotency.ts'
import openapi from './plugins/openapi.ts'
import preconditions from './plugins/preconditions.ts'
import rateLimit from './plugins/rate-limit.ts'
import requestBody, { hasBody } from './plugins/request-body.ts'
import store from './plugins/store.ts'
import portal from './portal/index.ts'
import { RequestLog, withLazyChildren } from './request-log.ts'
import health from './routes/health.ts'
import messages from './routes/messages.ts'
import pets from './routes/pets.ts'
import { schemaErrorFormatter, validatorCompiler } from './validation.ts'

/** How much longer a socket may stay idle than a request may take, so that the 408 is sent first. */
const CONNECTION_TIMEOUT_MARGIN_MS = 2000

export interface AppOptions {
  config: Config
}

/** A client's X-Request-Id is kept when it is a sane token (and not an API key); otherwise we make one. */
const REQUEST_ID = /^[\w.:-]{1,128}$/

/** Why a request cannot be taken whatever its route: a bad Host; Host, Authorization, Content-Type or Idempotency-Key sent twice. */
function framingError(request: FastifyRequest): ApiError | undefined {
  const raw = request.raw
  // Node's parser takes any version it can read (HTTP/2.0, a line with none): we speak 1.0 and 1.1.
  // Another major version is 505 (RFC 9110 §15.6.6); a line without one (Node's "0.9") is malformed.
  if (raw.httpVersionMajor > 1) {
    return new ApiError('http_version_not_supported', undefined, { connection: 'close' })
  }
  if (raw.httpVersionMajor !== 1 || raw.httpVersionMinor > 1) {
    return new ApiError('bad_request', 'The HTTP version must be HTTP/1.1 or HTTP/1.0.', { connection: 'close' })
  }
  if (!request.headers.host && raw.httpVersionMajor === 1 && raw.httpVersionMinor === 1) {
    return new ApiError('bad_request', 'The Host header is required (HTTP/1.1).')
  }
  const target = raw.url as string
  // The asterisk-form is for OPTIONS alone (RFC 9112 §3.2.4).
  if (target === '*' && request.method !== 'OPTIONS') {
    return new ApiError('bad_request', 'The request target "*" is only for OPTIONS (RFC 9112 §3.2.4).')
  }
  if (target.charCodeAt(0) !== 47 /* / */ && target !== '*') {
    const refused = absoluteForm(request, target)
    if (refused) return refused
  }
  if (target.includes('#')) return new ApiError('bad_request', 'The request target must not hold a fragment ("#").')
  const query = target.indexOf('?')
  // A bad escape in the query (percent-encoding.ts); sliced out only when the target holds a "%".
  if (query !== -1 && target.includes('%', query) && !wellEncoded(target.slice(query + 1))) {
    return new ApiError('bad_request', 'The query string holds a malformed percent-encoding, or one that is not UTF-8.')
  }
  // Node frames a body by its final coding, chunked, and would hand over whatever the others made
  // of it (501). A final coding other than chunked leaves no way to find the body's end: 400, and
  // the connection is closed (RFC 9112 §6.1).
  const coding = request.headers['transfer-encoding']
  if (coding !== undefined && coding.trim().toLowerCase() !== 'chunked') {
    if (!/(?:^|,)\s*chunked\s*$/i.test(coding)) {
      return new ApiError('bad_request', 'Transfer-Encoding must end in "chunked" (RFC 9112 §6.1).', {
        connection: 'close',
      })
    }
    return new ApiError('not_implemented', 'Transfer-Encoding other than "chunked" is not supported (RFC 9112 §6.1).')
  }
  const malformed = malformedOrigin(request)
  if (malformed) return new ApiError('bad_request', `The ${malformed} header is malformed.`)
  // Which of two a parser keeps is not something to bet a credential, or how a body is read, on
  // (RFC 9110 §5.3): Node keeps the first Content-Type, another parser may keep the last.
  const names = raw.rawHeaders
  let hosts = 0
  let authorizations = 0
  let contentTypes = 0
  let idempotencyKeys = 0
  for (let i = 0; i < names.length; i += 2) {
    const name = names[i] as string
    if (name.length === 4 && name.toLowerCase() === 'host' && ++hosts > 1) return sentTwice('Host')
    if (name.length === 13 && name.toLowerCase() === 'authorization' && ++authorizations > 1) {
      return sentTwice('Authorization')
    }
    if (name.length === 12 && name.toLowerCase() === 'content-type' && ++contentTypes > 1) {
      return sentTwice('Content-Type')
    }
    // Node joins the two with ", " into a key that is neither (and then not valid): say why instead.
    if (name.length === 15 && name.toLowerCase() === 'idempotency-key' && ++idempotencyKeys > 1) {
      return sentTwice('Idempotency-Key')
    }
  }
  return undefined
}

/**
 * A request target in absolute form (`GET http://host/v1/pets`, as sent to proxies): its host is
 * the one to use, whatever Host says (RFC 9112 §3.2.2), so it takes Host's place, and its path
 * becomes the target.
 */
function absoluteForm(request: FastifyRequest, target: string): ApiError | undefined {
  const url = URL.parse(target)
  if (!url || (url.protocol !== 'http:' && url.protocol !== 'https:') || !url.host) {
    return new ApiError('bad_request', 'The request target must be a path, or an absolute http(s) URL.')
  }
  // RFC 9110 §4.2.4: user information in an http(s) URI is an error (it is a phishing device).
  if (url.username || url.password) {
    return new ApiError('bad_request', 'The request target must not hold user information (user:password@).')
  }
  // The host as written, not as the URL parser rewrote it ("010.0.0.1" becomes 8.0.0.1): held to
  // the rule of a Host header (src/host.ts), which it takes the place of.
  if (!validHost(target.slice(url.protocol.length + 2).split(/[/?#]/, 1)[0] as string)) {
    return new ApiError('bad_request', "The request target's host is malformed.")
  }
  request.headers.host = url.host
  setTargetScheme(request, url.protocol === 'https:' ? 'https' : 'http')
  // From here on the target is its path as sent (not normalized: the router read it so), for
  // 404s, 405s, the key check and logs.
  const rest = originForm(target)
  request.raw.url = rest.startsWith('/') ? rest : `/${rest}`
  return undefined
}

const sentTwice = (name: string) => new ApiError('bad_request', `The ${name} header must be sent once.`)

/**
 * Fastify's server options for this app: used by src/server.ts and by the tests. `logStream` is
 * where log lines go (stdout, written synchronously, when not given).
 */
export function serverOptions(
  config: Config,
  logStream: DestinationStream = pino.destination({ dest: 1, sync: true }),
): FastifyHttpOptions<Server> {
  return {
    // Requests are logged without headers; anything shaped like a key is masked in URLs too.
    loggerInstance: withLazyChildren(
      pino(
        {
          level: config.logLevel,
          serializers: {
            // Behind a proxy the address comes from X-Forwarded-For, which the client may have written.
            req: (req) => ({
              method: req.method,
              url: redactApiKeys(req.url),
              remoteAddress: redactApiKeys(req.ip ?? ''),
            }),
          },
        },
        logStream,
      ),
    ),
    logController: new RequestLog(logStream, config.logLevel, config.trustProxy),
    genReqId: (req) => {
      const given = req.headers['x-request-id']
      return typeof given === 'string' && REQUEST_ID.test(given) && redactApiKeys(given) === given
        ? given
        : randomUUID()
    },
    trustProxy: config.trustProxy,
    bodyLimit: config.bodyLimit,
    // Longer than the request timeout, so that a stalled body gets its 408 before the idle socket is
    // closed (0, no request timeout, is no idle timeout either).
    connectionTimeout: config.requestTimeoutMs && config.requestTimeoutMs + CONNECTION_TIMEOUT_MARGIN_MS,
    keepAliveTimeout: config.keepAliveTimeoutMs,
    requestTimeout: config.requestTimeoutMs,
    // Node checks these timeouts every connectionsCheckingInterval (30 s by default): check every second.
    // Node's own "no Host" reply has no body: the onRequest hook below sends the Error instead.
    // A request with neither Content-Length nor Transfer-Encoding has no body: Node then skips the
    // body stream's events ('end', 'close'). Routes that take a body read an empty stream instead
    // (src/plugins/request-body.ts; decision 63).
    http: {
      headersTimeout: config.headersTimeoutMs,
      connectionsCheckingInterval: 1000,
      requireHostHeader: false,
      optimizeEmptyRequests: true,
    },
    return503OnClosing: false,
    routerOptions: { maxParamLength: 500 },
    schemaErrorFormatter,
    clientErrorHandler,
    frameworkErrors: frameworkError,
  }
}

export default async function animalStore(fastify: FastifyInstance, { config }: AppOptions): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>()
  app.setValidatorCompiler(validatorCompiler)
  // Connections past the cap are closed as soon as they are accepted.
  app.server.maxConnections = config.maxConnections
  // A client may close its side once it has sent its requests (RFC 9112 §9.6; `nc -N`,
  // shutdown(SHUT_WR)). By default Node then aborts the requests under way and closes the
  // connection unanswered, though a write may already be committed: a retry would store it twice.
  // They are answered, in order, and the connection closes after the last answer. A close in the
  // middle of a body is still a 400 (clientErrorHandler). `httpAllowHalfOpen` is Node's own switch.
  ;(app.server as Server & { httpAllowHalfOpen: boolean }).httpAllowHalfOpen = true
  // A connection's pipelined requests are served only so far ahead of what its client has read.
  limitPipelining(app.server)

  // Once the shutdown has begun, every answer closes its connection (src/drain.ts).
  let draining = false
  // Callback-style hooks: they run on every request, and cost less than async ones.
  app.addHook('onRequest', (request, reply, done) => {
    reply.header('x-request-id', request.id)
    if (draining) reply.header('connection', 'close')
    // Node stops reading a connection at a request with Upgrade (what follows would be the new
    // protocol). We upgrade to nothing, so the connection ends with this answer: a client that
    // pipelined more on it then knows to send that again (RFC 9112 §9.3.2), instead of waiting.
    if (request.headers.upgrade !== undefined) reply.header('connection', 'close')
    // GET and HEAD routes never read a body: Node would drain one sent anyway, however long,
    // until the request timeout. The connection ends with the answer instead.
    else if ((request.method === 'GET' || request.method === 'HEAD') && hasBody(request.headers)) {
      reply.header('connection', 'close')
    }
    done(framingError(request))
  })
  rawErrorResponses(app.server, app.log)
  // Once shutdown starts, answer in-flight requests with Connection: close, so their keep-alive
  // connections end with them instead of holding the process open until the keep-alive timeout
  // (Fastify does so itself for requests that arrive later). Connections with no response under
  // way are closed then too: Node closes idle keep-alive ones, but not one that has sent nothing
  // yet (a preconnect, a balancer's TCP check) or only part of a request, which would hold the
  // process until the shutdown timeout kills it.
  const sockets = new Set<Socket>()
  app.server.on('connection', (socket: Socket) => {
    // Node reads the peer's address when first asked, and has none once the socket is gone: ask
    // now, so that a request whose client left before its answer still has one (request.ip, logs).
    void socket.remoteAddress
    sockets.add(socket)
    socket.once('close', () => sockets.delete(socket))
  })
  const closeAfterAnswers = () => {
    for (const socket of sockets) {
      const response = responseOn(socket)
      if (response && !response.headersSent) response.setHeader('connection', 'close')
    }
  }
  onDraining(app.server, () => {
    draining = true
    closeAfterAnswers()
  })
  app.addHook('preClose', (done) => {
    for (const socket of sockets) if (!responseOn(socket)) socket.destroy()
    closeAfterAnswers()
    done()
  })

  await app.register(errors)
  await app.register(requestBody)
  await app.register(preconditions)
  await app.register(store, { config })
  await app.register(rateLimit, { config })
  await app.register(auth, { config })
  await app.register(idempotency)
  await app.register(openapi, { config })

  await app.register(health)
  await app.register(pets, { prefix: '/v1' })
  await app.register(messages, { prefix: '/v1' })
  await app.register(portal, { config })
}
