/**
 * Conditional requests (RFC 9110 §13.1.1, §13.1.2, §13.2), decided here and nowhere else. A pet
 * (getPet, updatePet) has an ETag, from the version of its row; the API's other answers carry no
 * validator (no ETag, no Last-Modified); the portal's and the reference's static files carry an
 * ETag. So a condition compares against the current ETag when there is one, and otherwise depends
 * only on whether the target resource has a current representation: `If-Match: *` holds when it
 * has one, `If-None-Match: *` fails when it has one, and listed entity tags match nothing.
 * If-Match compares strongly (a weak tag never matches), If-None-Match weakly (§8.8.3.2). With no
 * modification date, If-Modified-Since and If-Unmodified-Since are ignored (§13.1.3, §13.1.4), and
 * so is If-Range.
 *
 * A failed condition is 412 precondition_failed, or 304 for If-None-Match on GET and HEAD
 * (§13.2.2). Conditions count only where the answer without them would be 2xx (§13.2.1): on GET
 * and HEAD they are judged on that answer, once it is ready (its ETag header); on other methods,
 * once the key and the rate limit have passed and before the content is read (preParsing), so a
 * failed condition writes nothing, and one on a target that is not there (config.exists) leaves
 * the handler to answer 404. A target has a representation there when a GET route serves
 * its path. A route whose target has an ETag only the database knows (config.etag: updatePet) has
 * its handler read the resource and ask `request.preconditions(etag)`, then write only that version
 * (the store compares it in the write's transaction, so a change in between is not overwritten).
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import { ApiError } from '../errors.ts'

declare module 'fastify' {
  interface FastifyContextConfig {
    /** The target has an ETag its handler reads: the handler judges the conditions (see above). */
    etag?: true
    /**
     * Whether the target exists for the caller. A condition that fails on a missing target is
     * ignored, and the handler answers its 404: without the condition the answer is no 2xx (§13.2.1).
     */
    exists?: (request: FastifyRequest) => Promise<boolean>
  }
  interface FastifyRequest {
    /** Whether the request has If-Match or If-None-Match, which its handler must judge (config.etag). */
    hasPreconditions(): boolean
    /** Throws 412 precondition_failed unless the conditions hold for a target whose current ETag is `etag`. */
    preconditions(etag: string): void
  }
}

type Outcome = 'ok' | 'failed' | 'not_modified'

/** A representation as a condition sees it: none, one without a validator (null), or its ETag. */
type Current = { etag: string | null } | undefined

const ENTITY_TAG = /\s*((?:W\/)?"[\x21\x23-\x7e\x80-\xff]*")\s*(?:,|$)/y

/** `*`, or the entity tags of a field (anything malformed matches nothing). */
function tags(field: string): '*' | string[] {
  if (field.trim() === '*') return '*'
  const found: string[] = []
  ENTITY_TAG.lastIndex = 0
  for (let match = ENTITY_TAG.exec(field); match; match = ENTITY_TAG.exec(field)) {
    found.push(match[1] as string)
  }
  return found
}

const opaque = (tag: string) => (tag.startsWith('W/') ? tag.slice(2) : tag)

/** RFC 9110 §13.2.2, steps 1 and 3 (steps 2, 4 and 5 need dates or ranges we do not have). */
function evaluate(request: FastifyRequest, current: Current): Outcome {
  const { 'if-match': ifMatch, 'if-none-match': ifNoneMatch } = request.headers
  if (ifMatch !== undefined) {
    const wanted = tags(ifMatch)
    const etag = current?.etag
    const holds =
      current !== undefined &&
      (wanted === '*' || (typeof etag === 'string' && !etag.startsWith('W/') && wanted.includes(etag)))
    if (!holds) return 'failed'
  }
  if (ifNoneMatch !== undefined && current !== undefined) {
    const unwanted = tags(ifNoneMatch)
    const etag = current.etag
    const matches = unwanted === '*' || (etag !== null && unwanted.some((tag) => opaque(tag) === opaque(etag)))
    if (matches) return request.method === 'GET' || request.method === 'HEAD' ? 'not_modified' : 'failed'
  }
  return 'ok'
}

function conditional(request: FastifyRequest): boolean {
  return request.headers['if-match'] !== undefined || request.headers['if-none-match'] !== undefined
}

function isRead(request: FastifyRequest): boolean {
  return request.method === 'GET' || request.method === 'HEAD'
}

export default fp(
  async (app: FastifyInstance) => {
    app.decorateRequest('hasPreconditions', function hasPreconditions(this: FastifyRequest) {
      return conditional(this)
    })
    app.decorateRequest('preconditions', function preconditions(this: FastifyRequest, etag: string) {
      if (evaluate(this, { etag }) !== 'ok') throw new ApiError('precondition_failed')
    })

    // GET and HEAD: a 2xx answer is the current representation.
    app.addHook('onSend', (request, reply, payload, done) => {
      if (!isRead(request) || !conditional(request) || reply.statusCode < 200 || reply.statusCode > 299) {
        return done(null, payload)
      }
      const etag = reply.getHeader('etag')
      const outcome = evaluate(request, { etag: typeof etag === 'string' ? etag : null })
      if (outcome === 'failed') {
        // What described the 200 does not describe this error (a page's next link).
        reply.removeHeader('link').removeHeader('etag')
        return done(new ApiError('precondition_failed'))
      }
      if (outcome === 'not_modified') {
        // A 304 has no content, nor a Content-Type (RFC 9110 §15.4.5). On HEAD, Fastify's own
        // hook after this one sets Content-Length from the payload: that of the 200, as allowed (§8.6).
        reply.code(304).removeHeader('content-type').removeHeader('content-length')
        return done(null, request.method === 'HEAD' ? payload : null)
      }
      done(null, payload)
    })

    // Other methods: before the content is read, so a failed condition is refused untouched.
    const readable = new Map<string, boolean>()
    app.addHook('preParsing', (request: FastifyRequest, _reply: FastifyReply, payload, done) => {
      if (isRead(request) || !conditional(request) || request.routeOptions.config.etag) return done(null, payload)
      const path = request.routeOptions.url ?? ''
      let exists = readable.get(path)
      if (exists === undefined) {
        exists = app.hasRoute({ method: 'GET', url: path })
        readable.set(path, exists)
      }
      if (evaluate(request, exists ? { etag: null } : undefined) === 'ok') return done(null, payload)
      const target = request.routeOptions.config.exists
      if (target === undefined) return done(new ApiError('precondition_failed'), payload)
      // Parameters are validated after this hook: one the schema refuses (a NUL the database cannot
      // take) is left to that 400, and never looked up.
      if (request.getValidationFunction('params')?.({ ...(request.params as object) }) === false) {
        return done(null, payload)
      }
      target(request).then(
        (found) => done(found ? new ApiError('precondition_failed') : null, payload),
        (error: Error) => done(error, payload),
      )
    })
  },
  { name: 'preconditions' },
)
