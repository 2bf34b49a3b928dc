/**
 * Conditional requests (RFC 9110 §13). Our answers carry no validator (no ETag, no Last-Modified),
 * so an entity-tag condition depends only on whether the target resource has a current
 * representation: `If-Match: *` holds when it has one, and `If-Match` with entity tags never holds
 * (none can match); `If-None-Match: *` fails when it has one, and with entity tags always holds.
 * With no modification date, If-Modified-Since and If-Unmodified-Since are ignored (§13.1.3,
 * §13.1.4), and so is If-Range, as nothing serves ranges.
 *
 * A failed condition is 412 precondition_failed, or 304 for If-None-Match on GET and HEAD
 * (§13.2.2). Conditions count only where the answer without them would be 2xx (§13.2.1): on GET
 * and HEAD they are judged on that answer, once it is ready; on other methods, after the checks
 * that come before the content (key, rate limit, media type), and before the body is validated or
 * anything is written. A target has a representation there when a GET route serves its path.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest, HookHandlerDoneFunction } from 'fastify'
import fp from 'fastify-plugin'
import { ApiError } from '../errors.ts'

type Outcome = 'ok' | 'failed' | 'not_modified'

/** `*`, or else a list of entity tags (none of which can match ours, as we have none). */
function isAny(field: string | string[]): boolean {
  return (Array.isArray(field) ? field.join(',') : field).trim() === '*'
}

/** RFC 9110 §13.2.2, steps 1 and 3 (steps 2, 4 and 5 need dates or ranges we do not have). */
function evaluate(request: FastifyRequest, hasRepresentation: boolean): Outcome {
  const { 'if-match': ifMatch, 'if-none-match': ifNoneMatch } = request.headers
  if (ifMatch !== undefined && !(hasRepresentation && isAny(ifMatch))) return 'failed'
  if (ifNoneMatch !== undefined && hasRepresentation && isAny(ifNoneMatch)) {
    return request.method === 'GET' || request.method === 'HEAD' ? 'not_modified' : 'failed'
  }
  return 'ok'
}

function conditional(request: FastifyRequest): boolean {
  return request.headers['if-match'] !== undefined || request.headers['if-none-match'] !== undefined
}

export default fp(
  async (app: FastifyInstance) => {
    // GET and HEAD: a 2xx answer is the current representation.
    app.addHook('onSend', (request, reply, payload, done) => {
      const read = request.method === 'GET' || request.method === 'HEAD'
      if (!read || !conditional(request) || reply.statusCode < 200 || reply.statusCode > 299) {
        return done(null, payload)
      }
      const outcome = evaluate(request, true)
      if (outcome === 'failed') return done(new ApiError('precondition_failed'))
      if (outcome === 'not_modified') {
        // A 304 has no content, nor a Content-Type (RFC 9110 §15.4.5). On HEAD, Fastify's own
        // hook after this one sets Content-Length from the payload: that of the 200, as allowed (§8.6).
        reply.code(304).removeHeader('content-type').removeHeader('content-length')
        return done(null, request.method === 'HEAD' ? payload : null)
      }
      done(null, payload)
    })

    // Other methods: before the body is validated, so a failed condition is refused untouched.
    const readable = new Map<string, boolean>()
    app.addHook('preValidation', (request: FastifyRequest, _reply: FastifyReply, done: HookHandlerDoneFunction) => {
      if (request.method === 'GET' || request.method === 'HEAD' || !conditional(request)) return done()
      const path = request.routeOptions.url ?? ''
      let exists = readable.get(path)
      if (exists === undefined) {
        exists = app.hasRoute({ method: 'GET', url: path })
        readable.set(path, exists)
      }
      done(evaluate(request, exists) === 'ok' ? undefined : new ApiError('precondition_failed'))
    })
  },
  { name: 'preconditions' },
)
