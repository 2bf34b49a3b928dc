import { randomBytes } from 'node:crypto'
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { FastifyReply, FastifyRequest } from 'fastify'
import { cursorCodec } from '../domain/pagination.ts'
import { ApiError } from '../errors.ts'
import { linkScheme, malformedOrigin } from '../http/host.ts'
import { BoundedMap } from '../lib/bounded-map.ts'
import {
  ErrorSchema,
  errorResponses,
  header,
  IdempotencyHeadersSchema,
  jsonResponse,
  MAX_EXACT_INTEGER,
  NoQuerySchema,
  notModifiedResponse,
  RATE_LIMIT_HEADERS,
  withHeaders,
} from '../schemas/common.ts'
import {
  DEFAULT_PAGE_SIZE,
  ListPetsQuerySchema,
  NewPetSchema,
  PetParamsSchema,
  PetSchema,
  PetsSchema,
} from '../schemas/pets.ts'

/** getPet was deprecated on 2026-01-01 (RFC 9745 `@` form) and is removed on 5 December 2030 (RFC 8594). */
const DEPRECATED_AT = `@${Date.UTC(2026, 0, 1) / 1000}`
const SUNSET_MS = Date.UTC(2030, 11, 5)
const SUNSET = new Date(SUNSET_MS).toUTCString()
/** The two headers every answer of getPet carries (the Link is built per request). */
const DEPRECATED = { deprecation: DEPRECATED_AT, sunset: SUNSET }
/** Where the API reference (the portal's /docs) describes the deprecation: RFC 9745 §3's link. */
const DEPRECATION_DOCS = '/docs#/pets/getPet'
const DEPRECATION_REL = 'rel="deprecation"; type="text/html"'
const DEPRECATION_HEADERS = {
  Deprecation: header(`\`${DEPRECATED_AT}\`: deprecated since 2026-01-01 (RFC 9745).`),
  Sunset: header(`\`${SUNSET}\`: removed then (RFC 8594).`),
  Link: header(
    '`<…/v1/pets>; rel="successor-version"`: use `GET /pets` with the `status` filter; ' +
      '`<…/docs#/pets/getPet>; rel="deprecation"`: the reference says so (RFC 9745 §3).',
  ),
}
const { default: GET_PET_OTHER_ERRORS, ...GET_PET_ERRORS } = errorResponses(400, 401, 429, 500, 503)
const security = [{ bearerAuth: [] }]
const JSON_TYPE = 'application/json; charset=utf-8'
/** Entries kept: pages are small, and the popular ones are few (first pages, common filters). */
const CACHED_PAGES = 1000
const CACHED_PETS = 10_000

/** A serialized page of GET /pets, with the path and query of the next page, as of one petsVersion. */
interface Page {
  version: number | null
  body: string
  next: string | null
}

const pets: FastifyPluginAsyncTypebox = async (app) => {
  const cursors = cursorCodec(await app.store.secret('cursor', () => randomBytes(32).toString('base64url')))
  // Serialized responses, so that a repeated read costs neither the database nor the serializer.
  // A page is valid for one petsVersion; a pet, forever (pets never change).
  const pages = new BoundedMap<string, Page>(CACHED_PAGES)
  const petBodies = new BoundedMap<number, string>(CACHED_PETS)
  app.addHook('onRequest', app.authenticate)
  app.addHook('onRequest', app.rateLimit)

  app.get(
    '/pets',
    {
      schema: {
        operationId: 'listPets',
        summary: 'List animals',
        description:
          'Animals in id order, `limit` per page. When more exist, `Link: <…>; rel="next"` gives the next page.',
        tags: ['pets'],
        security,
        querystring: ListPetsQuerySchema,
        response: {
          200: jsonResponse('A page of animals, ordered by id.', PetsSchema, {
            Link: header('`<…/v1/pets?…&cursor=…>; rel="next"` when more animals follow (RFC 8288).'),
            ...RATE_LIMIT_HEADERS,
          }),
          304: notModifiedResponse(RATE_LIMIT_HEADERS),
          ...errorResponses(400, 401, 429, 500, 503),
        },
      },
    },
    (request, reply) => {
      // Ajv has filled in the default; the fallback only satisfies the type.
      const { limit = DEFAULT_PAGE_SIZE, status, cursor } = request.query
      // Cached pages are keyed by the cursor text itself: only verified cursors ever get an entry.
      // No cursor and the text `undefined` must not share a key.
      const key = cursor === undefined ? `${limit} ${status}` : `${limit} ${status} ${cursor}`
      const page = pages.get(key)
      const send = (page: Page) => {
        if (page.next) reply.header('link', `<${origin(request)}${page.next}>; rel="next"`)
        sendSerialized(reply, page.body)
      }
      // A cached page is sent at once, without a promise (Fastify takes a handler that sent and returned nothing).
      // A page with a next one is final: a new pet's id is above every pet's, so it lands after it
      // (the store's promise when it has a version). Only a last page waits on the version.
      if (page?.next) return send(page)
      const version = app.store.petsVersion()
      if (page && page.version === version) return send(page)
      const afterId = cursor === undefined ? undefined : cursors.decode(cursor, status)
      return app.store.listPets({ limit, status, afterId }).then(({ pets, nextAfterId }) => {
        const next = new URLSearchParams({ limit: String(limit), ...(status && { status }) })
        if (nextAfterId !== null) next.set('cursor', cursors.encode(nextAfterId, status))
        const fresh = { version, body: serialize(reply, pets), next: nextAfterId === null ? null : `/v1/pets?${next}` }
        if (version !== null) pages.set(key, fresh)
        send(fresh)
      })
    },
  )

  app.post(
    '/pets',
    {
      schema: {
        operationId: 'createPet',
        summary: 'Add an animal',
        tags: ['pets'],
        security,
        headers: IdempotencyHeadersSchema,
        querystring: NoQuerySchema,
        body: NewPetSchema,
        response: {
          201: jsonResponse('The animal as stored, with its new id.', PetSchema, {
            Location: header('The URL of the new animal.'),
            'Idempotent-Replayed': header('`true` when this is the stored response to an earlier request.'),
            ...RATE_LIMIT_HEADERS,
          }),
          ...errorResponses(400, 401, 409, 413, 415, 422, 429, 500, 503),
        },
      },
      config: { replayLocation: petLocation },
      ...app.idempotent,
    },
    async (request, reply) => {
      const pet = await app.store.createPet(request.body, request.idempotency ?? undefined)
      return reply.code(201).header('location', petLocation(pet, request)).send(pet)
    },
  )

  app.get(
    '/pets/:petId',
    {
      schema: {
        operationId: 'getPet',
        summary: 'Get an animal (deprecated)',
        description: 'Deprecated, removed on 5 December 2030: use `GET /pets` with the `status` filter.',
        deprecated: true,
        tags: ['pets'],
        security,
        params: PetParamsSchema,
        querystring: NoQuerySchema,
        response: {
          200: jsonResponse('The animal.', PetSchema, { ...DEPRECATION_HEADERS, ...RATE_LIMIT_HEADERS }),
          304: notModifiedResponse({ ...DEPRECATION_HEADERS, ...RATE_LIMIT_HEADERS }),
          // Every answer of the operation says it is deprecated, errors included (the default
          // covers framework errors such as 408 and 431, sent before any route is known).
          ...withHeaders(GET_PET_ERRORS, DEPRECATION_HEADERS),
          default: GET_PET_OTHER_ERRORS,
          404: jsonResponse('No animal with this id.', ErrorSchema, { ...DEPRECATION_HEADERS, ...RATE_LIMIT_HEADERS }),
          410: jsonResponse('From 5 December 2030: the operation is removed.', ErrorSchema, {
            ...DEPRECATION_HEADERS,
            ...RATE_LIMIT_HEADERS,
          }),
        },
      },
      // Removed on its Sunset date by the clock, not by a release someone has to remember to ship:
      // after the key check (the route's onRequest hooks run after the app's), before anything
      // about the request is judged.
      onRequest: (_request, _reply, done) => {
        done(Date.now() >= SUNSET_MS ? new ApiError('operation_removed') : undefined)
      },
      // Errors get the deprecation headers from sendError; answers from the handler, below.
      config: { answerHeaders: deprecated },
    },
    (request, reply) => {
      const { petId } = request.params
      // Ids run from 1 to MAX_EXACT_INTEGER, so any other (valid int64) id cannot exist.
      if (petId < 1 || petId > MAX_EXACT_INTEGER) {
        // An id beyond ±2^53 is not exact as a number: the message then does not repeat it.
        throw new ApiError('pet_not_found', Number.isSafeInteger(petId) ? `No pet with id ${petId}.` : undefined)
      }
      const body = petBodies.get(petId)
      // A cached pet is sent at once, without a promise, as a cached page is.
      if (body !== undefined) return void sendSerialized(deprecated(request, reply), body)
      return app.store.getPet(petId).then((pet) => {
        if (!pet) throw new ApiError('pet_not_found', `No pet with id ${petId}.`)
        const fresh = serialize(reply, pet)
        petBodies.set(petId, fresh)
        sendSerialized(deprecated(request, reply), fresh)
      })
    },
  )
}

/**
 * Every answer of getPet says it is deprecated, errors included (a 401 as much as a 200); the
 * successor's link is not built from a Host this answer may be refusing.
 */
function deprecated(request: FastifyRequest, reply: FastifyReply): FastifyReply {
  reply.headers(DEPRECATED)
  if (!malformedOrigin(request)) {
    const base = origin(request)
    reply.header('link', `<${base}/v1/pets>; rel="successor-version", <${base}${DEPRECATION_DOCS}>; ${DEPRECATION_REL}`)
  }
  return reply
}

/** The route's own 200 serializer (fast-json-stringify from the response schema), for caching its output. */
function serialize(reply: FastifyReply, payload: unknown): string {
  const fn = reply.getSerializationFunction('200', 'application/json') as (payload: unknown) => string
  return fn(payload)
}

/** Sends JSON that was serialized by `serialize`: a string with a JSON type is sent as it is. */
function sendSerialized(reply: FastifyReply, body: string): FastifyReply {
  // The type provider expects the schema's object type; the string is that object, already serialized.
  return reply.type(JSON_TYPE).send(body as never)
}

function petLocation(pet: { id: number }, request: FastifyRequest): string {
  return `${origin(request)}/v1/pets/${pet.id}`
}

/** Scheme and host the client used (X-Forwarded-* honoured when TRUST_PROXY is on), for absolute links. */
function origin(request: FastifyRequest): string {
  // An HTTP/1.0 client may send no Host: then the address it reached us at stands in.
  const { localAddress = '', localPort } = request.socket
  const host = request.host || `${localAddress.includes(':') ? `[${localAddress}]` : localAddress}:${localPort}`
  return `${linkScheme(request)}://${host}`
}

export default pets
