import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { FastifyReply, FastifyRequest } from 'fastify'
import { sharedCursorCodec } from '../domain/pagination.ts'
import { ApiError } from '../errors.ts'
import { malformedOrigin, requestOrigin } from '../http/host.ts'
import { apiRoutes } from '../plugins/auth.ts'
import {
  createdHeaders,
  errorResponse,
  errorResponses,
  header,
  IDEMPOTENT_REQUEST,
  jsonResponse,
  MAX_EXACT_INTEGER,
  NoQuerySchema,
  notModifiedResponse,
  pageHeaders,
  RATE_LIMIT_HEADERS,
  withHeaders,
} from '../schemas/common.ts'
import {
  DEFAULT_PAGE_SIZE,
  DEPRECATION_HEADERS,
  GET_PET_DEPRECATED,
  GET_PET_SUNSET_MS,
  ListPetsQuerySchema,
  NewPetSchema,
  PetParamsSchema,
  PetPatchHeadersSchema,
  PetPatchSchema,
  PetSchema,
  PetsSchema,
} from '../schemas/pets.ts'

const DEPRECATION_DOCS = '/docs#/pets/getPet'
const { default: GET_PET_OTHER_ERRORS, ...GET_PET_ERRORS } = errorResponses(400, 401, 429, 500, 503)

/** A pet's ETag: strong, moved by every change to the pet (its row's version; decision 80). */
export const petETag = (id: number, version: number) => `"${id}-${version}"`
const ETAG_HEADER = {
  ETag: header('The version of this animal (`"<id>-<version>"`): send it in `If-Match` to change only this version.'),
}
/** Attempts of a conditional update that other writes keep overtaking before it gives up (412). */
const UPDATE_ATTEMPTS = 3

const pets: FastifyPluginAsyncTypebox = async (app) => {
  const cursors = await sharedCursorCodec(app.store, 'cursor')

  app.get(
    '/pets',
    {
      schema: {
        operationId: 'listPets',
        summary: 'List animals',
        description:
          'Animals in id order, `limit` per page. When more exist, `Link: <…>; rel="next"` gives the next page.',
        tags: ['pets'],
        querystring: ListPetsQuerySchema,
        response: {
          200: jsonResponse('A page of animals, ordered by id.', PetsSchema, pageHeaders('/v1/pets', 'animals')),
          304: notModifiedResponse(RATE_LIMIT_HEADERS),
          ...errorResponses(400, 401, 429, 500, 503),
        },
      },
      config: { scope: 'pets:read' },
    },
    function listPets(request, reply) {
      // Ajv has filled in the default; the fallback only satisfies the type.
      const { limit = DEFAULT_PAGE_SIZE, status, cursor } = request.query
      const afterId = cursor === undefined ? undefined : cursors.decode(cursor, status)
      return app.petCache.page({ limit, status, afterId }, (page) => {
        const { nextAfterId } = page
        if (nextAfterId !== null) {
          const next = `/v1/pets?limit=${limit}${status ? `&status=${status}` : ''}&cursor=${cursors.encode(nextAfterId, status)}`
          reply.header('link', `<${requestOrigin(request)}${next}>; rel="next"`)
        }
        reply.sendRead(page)
      })
    },
  )

  app.post(
    '/pets',
    {
      schema: {
        operationId: 'createPet',
        summary: 'Add an animal',
        description:
          'Adds an animal to the catalogue: 201 with the animal as stored and its URL in `Location`. ' +
          'Send an `Idempotency-Key` to retry safely.',
        tags: ['pets'],
        ...IDEMPOTENT_REQUEST,
        body: NewPetSchema,
        response: {
          201: jsonResponse('The animal as stored, with its new id.', PetSchema, createdHeaders('animal')),
          ...errorResponses(400, 401, 409, 413, 415, 422, 429, 500, 503),
        },
      },
      config: { scope: 'pets:write', replayLocation: petLocation },
      ...app.idempotent,
    },
    async function createPet(request, reply) {
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
        params: PetParamsSchema,
        querystring: NoQuerySchema,
        response: {
          200: jsonResponse('The animal.', PetSchema, {
            ...DEPRECATION_HEADERS,
            ...ETAG_HEADER,
            ...RATE_LIMIT_HEADERS,
          }),
          304: notModifiedResponse({ ...DEPRECATION_HEADERS, ...ETAG_HEADER, ...RATE_LIMIT_HEADERS }),
          // Every answer says it is deprecated, errors included (the default covers framework
          // errors such as 408 and 431, sent before any route is known).
          ...withHeaders(GET_PET_ERRORS, DEPRECATION_HEADERS),
          default: GET_PET_OTHER_ERRORS,
          404: errorResponse(
            'pet_not_found',
            'No animal with this id.',
            { ...DEPRECATION_HEADERS, ...RATE_LIMIT_HEADERS },
            'No pet with id 1.',
          ),
          410: errorResponse('operation_removed', 'From 5 December 2030: the operation is removed.', {
            ...DEPRECATION_HEADERS,
            ...RATE_LIMIT_HEADERS,
          }),
        },
      },
      // Removed on its Sunset date by the clock, after the key check, before anything else is judged.
      onRequest: (_request, _reply, done) => {
        done(Date.now() >= GET_PET_SUNSET_MS ? new ApiError('operation_removed') : undefined)
      },
      // Errors get the deprecation headers from sendError; answers from the handler.
      config: { scope: 'pets:read', answerHeaders: deprecated },
    },
    function getPet(request, reply) {
      const { petId } = request.params
      // Ids run from 1 to MAX_EXACT_INTEGER, so any other (valid int64) id cannot exist.
      if (petId < 1 || petId > MAX_EXACT_INTEGER) throw petNotFound(petId)
      return app.petCache.pet(petId, (pet) => {
        if (pet.value === null) throw petNotFound(petId)
        pet.etag ??= petETag(petId, pet.petVersion as number)
        deprecated(request, reply).header('etag', pet.etag).sendRead(pet)
      })
    },
  )

  app.patch(
    '/pets/:petId',
    {
      schema: {
        operationId: 'updatePet',
        summary: 'Change an animal',
        description:
          'Changes `name`, `categoryId` or `status` with a JSON Merge Patch (RFC 7396): the fields sent ' +
          'replace their values, the others stay. Send `If-Match` with the `ETag` of `getPet` or of an ' +
          'earlier change to change only that version (412 when it has changed since). A pet held by a ' +
          'placed order keeps its status (409 `pet_held`), and only an order makes a pet `pending` ' +
          '(409 `pending_by_order_only`).',
        tags: ['pets'],
        consumes: ['application/merge-patch+json', 'application/json'],
        headers: PetPatchHeadersSchema,
        params: PetParamsSchema,
        querystring: NoQuerySchema,
        body: PetPatchSchema,
        response: {
          200: jsonResponse('The animal as it is now.', PetSchema, { ...ETAG_HEADER, ...RATE_LIMIT_HEADERS }),
          ...errorResponses(400, 401, 404, 413, 415, 429, 500, 503),
          409: errorResponse(
            'pet_held',
            '`pet_held`: a placed order holds the animal, so its status stays; `pending_by_order_only`: ' +
              'only an order makes an animal pending.',
            RATE_LIMIT_HEADERS,
          ),
          412: errorResponse(
            'precondition_failed',
            '`If-Match` does not name the current `ETag` (the animal changed since), or `If-None-Match` does.',
            RATE_LIMIT_HEADERS,
          ),
        },
      },
      // Its conditions are judged against the pet's ETag, by the handler (src/plugins/preconditions.ts).
      config: { scope: 'pets:write', etag: true },
    },
    async function updatePet(request, reply) {
      const { petId } = request.params
      if (petId < 1 || petId > MAX_EXACT_INTEGER) throw petNotFound(petId)
      const changes = request.body
      for (let attempt = 1; ; attempt++) {
        // With conditions, the version they hold for is the only one the store may change.
        let ifVersion: number | undefined
        if (request.hasPreconditions()) {
          const current = await app.store.getVersionedPet(petId)
          if (current === null) throw petNotFound(petId)
          request.preconditions(petETag(petId, current.version))
          ifVersion = current.version
        }
        // Forgotten whatever the outcome: a write that failed for want of the database may have committed.
        const result = await app.store.updatePet(petId, changes, ifVersion)
        if ('updated' in result) {
          const { pet, version } = result.updated
          return reply.header('etag', petETag(pet.id, version)).send(pet)
        }
        if (result.refused === 'not_found') throw petNotFound(petId)
        if (result.refused === 'held') {
          throw new ApiError(changes.status === 'pending' ? 'pending_by_order_only' : 'pet_held')
        }
        // Changed between the check and the write: judge the conditions again on what it is now.
        if (attempt === UPDATE_ATTEMPTS) throw new ApiError('precondition_failed')
      }
    },
  )
}

function petNotFound(petId: number): ApiError {
  return new ApiError('pet_not_found', `No pet with id ${petId}.`)
}

/** Every answer of getPet says it is deprecated; the links are not built from a Host it may be refusing. */
function deprecated(request: FastifyRequest, reply: FastifyReply): FastifyReply {
  reply.headers(GET_PET_DEPRECATED)
  if (!malformedOrigin(request)) {
    const base = requestOrigin(request)
    reply.header(
      'link',
      `<${base}/v1/pets>; rel="successor-version", <${base}${DEPRECATION_DOCS}>; rel="deprecation"; type="text/html"`,
    )
  }
  return reply
}

function petLocation(pet: { id: number }, request: FastifyRequest): string {
  return `${requestOrigin(request)}/v1/pets/${pet.id}`
}

export default apiRoutes(pets, 'pets', ['store', 'idempotency'])
