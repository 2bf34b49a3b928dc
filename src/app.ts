/**
 * The Animal Store application, as one Fastify plugin. src/server.ts runs it as a process;
 * the tests build it the same way (test/helper.ts). The order below is the order things start.
 */
import { randomUUID } from 'node:crypto'
import type { Server } from 'node:http'
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import type { FastifyHttpOptions, FastifyInstance } from 'fastify'
import pino, { type DestinationStream } from 'pino'
import { redactApiKeys } from './api-keys.ts'
import type { Config } from './config.ts'
import auth from './plugins/auth.ts'
import errors, { clientErrorHandler, sendError } from './plugins/errors.ts'
import idempotency from './plugins/idempotency.ts'
import openapi from './plugins/openapi.ts'
import rateLimit from './plugins/rate-limit.ts'
import store from './plugins/store.ts'
import portal from './portal/index.ts'
import { lazyChildLogger, RequestLog } from './request-log.ts'
import health from './routes/health.ts'
import messages from './routes/messages.ts'
import pets from './routes/pets.ts'
import { schemaErrorFormatter, validatorCompiler } from './validation.ts'

export interface AppOptions {
  config: Config
}

/** A client's X-Request-Id is kept when it is a sane token; otherwise we make one. */
const REQUEST_ID = /^[\w.:-]{1,128}$/

/**
 * Fastify's server options for this app: used by src/server.ts and by the tests. `logStream` is
 * where log lines go (stdout, written synchronously, when not given).
 */
export function serverOptions(
  config: Config,
  logStream: DestinationStream = pino.destination({ dest: 1, sync: true }),
): FastifyHttpOptions<Server> {
  return {
    logger: {
      stream: logStream,
      level: config.logLevel,
      // Requests are logged without headers; anything shaped like a key is masked in URLs too.
      serializers: {
        req: (req) => ({ method: req.method, url: redactApiKeys(req.url), remoteAddress: req.ip }),
      },
    },
    logController: new RequestLog(logStream, config.logLevel),
    childLoggerFactory: lazyChildLogger,
    genReqId: (req) => {
      const given = req.headers['x-request-id']
      return typeof given === 'string' && REQUEST_ID.test(given) ? given : randomUUID()
    },
    trustProxy: config.trustProxy,
    bodyLimit: config.bodyLimit,
    connectionTimeout: config.requestTimeoutMs,
    keepAliveTimeout: config.keepAliveTimeoutMs,
    requestTimeout: config.requestTimeoutMs,
    // Node checks these timeouts every connectionsCheckingInterval (30 s by default): check every second.
    http: { headersTimeout: config.headersTimeoutMs, connectionsCheckingInterval: 1000 },
    return503OnClosing: false,
    routerOptions: { maxParamLength: 500 },
    schemaErrorFormatter,
    clientErrorHandler,
    frameworkErrors: sendError,
  }
}

export default async function animalStore(fastify: FastifyInstance, { config }: AppOptions): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>()
  app.setValidatorCompiler(validatorCompiler)
  // Connections past the cap are closed as soon as they are accepted.
  app.server.maxConnections = config.maxConnections
  // Bodies are JSON only: anything else, text/plain included, is 415.
  app.removeContentTypeParser('text/plain')

  // Callback-style hooks: they run on every request, and cost less than async ones.
  app.addHook('onRequest', (request, reply, done) => {
    reply.header('x-request-id', request.id)
    done()
  })
  // Once shutdown starts, answer in-flight requests with Connection: close, so their keep-alive
  // connections end with them instead of holding the process open until the keep-alive timeout.
  let closing = false
  app.addHook('preClose', (done) => {
    closing = true
    done()
  })
  app.addHook('onSend', (_request, reply, payload, done) => {
    if (closing) reply.header('connection', 'close')
    done(null, payload)
  })

  await app.register(errors)
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
