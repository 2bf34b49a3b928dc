/**
 * Fastify's server options, used by src/server.ts and by the tests: the wire's timeouts and
 * limits, request ids, the logger, and who answers what Node's parser or the router refuse.
 */
import { randomUUID } from 'node:crypto'
import type { Server } from 'node:http'
import type { FastifyHttpOptions } from 'fastify'
import pino, { type DestinationStream } from 'pino'
import type { Config } from '../config.ts'
import { redactApiKeys } from '../domain/api-keys.ts'
import { RequestLog, withLazyChildren } from '../observability/request-log.ts'
import { frameworkError } from '../plugins/unrouted.ts'
import { schemaErrorFormatter } from '../schemas/validation.ts'
import { clientErrorHandler } from './raw-replies.ts'

/** How much longer a socket may stay idle than a request may take, so that the 408 is sent first. */
const CONNECTION_TIMEOUT_MARGIN_MS = 2000

/** A client's X-Request-Id is kept when it is a sane token (and not an API key; decision 27). */
const REQUEST_ID = /^[\w.:-]{1,128}$/

/** `logStream` is where log lines go (stdout, written synchronously, when not given). */
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
    // 0, no request timeout, is no idle timeout either.
    connectionTimeout: config.requestTimeoutMs && config.requestTimeoutMs + CONNECTION_TIMEOUT_MARGIN_MS,
    keepAliveTimeout: config.keepAliveTimeoutMs,
    requestTimeout: config.requestTimeoutMs,
    http: {
      headersTimeout: config.headersTimeoutMs,
      // Node checks the timeouts above every 30 s by default.
      connectionsCheckingInterval: 1000,
      // Node's own "no Host" reply has no body: framing.ts sends the Error instead.
      requireHostHeader: false,
      // Bodiless requests skip the body stream's events; request-body.ts reads an empty one (decision 63).
      optimizeEmptyRequests: true,
    },
    return503OnClosing: false,
    routerOptions: { maxParamLength: 500 },
    schemaErrorFormatter,
    clientErrorHandler,
    frameworkErrors: frameworkError,
  }
}
