import { randomBytes } from 'node:crypto'
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { FastifyRequest } from 'fastify'
import { ApiError } from '../errors.ts'
import { cursorCodec } from '../pagination.ts'
import {
  errorResponses,
  header,
  IdempotencyHeadersSchema,
  jsonResponse,
  MAX_EXACT_INTEGER,
  RATE_LIMIT_HEADERS,
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
const SUNSET = new Date(Date.UTC(2030, 11, 5)).toUTCString()
const security = [{ bearerAuth: [] }]

const pets: FastifyPluginAsyncTypebox = async (app) => {
  const cursors = cursorCodec(await app.store.secret('cursor', () => randomBytes(32).toString('base64url')))
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
          ...errorResponses(400, 401, 429, 500, 503),
        },
      },
    },
    async (request, reply) => {
      // Ajv has filled in the default; the fallback only satisfies the type.
      const { limit = DEFAULT_PAGE_SIZE, status, cursor } = request.query
      const afterId = cursor === undefined ? undefined : cursors.decode(cursor, status)
      const page = await app.store.listPets({ limit, status, afterId })
      if (page.nextAfterId !== null) {
        const next = new URLSearchParams({ limit: String(limit), ...(status && { status }) })
        next.set('cursor', cursors.encode(page.nextAfterId, status))
        reply.header('link', `<${origin(request)}/v1/pets?${next}>; rel="next"`)
      }
      return page.pets
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
        body: NewPetSchema,
        response: {
          201: jsonResponse('The animal as stored, with its new id.', PetSchema, {
            Location: header('The URL of the new animal.'),
            'Idempotent-Replayed': header('`true` when this is the stored response to an earlier request.'),
            ...RATE_LIMIT_HEADERS,
          }),
          ...errorResponses(400, 401, 409, 422, 429, 500, 503),
        },
      },
      config: { replayLocation: petLocation },
      preHandler: app.idempotent,
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
        response: {
          200: jsonResponse('The animal.', PetSchema, {
            Deprecation: header(`\`${DEPRECATED_AT}\`: deprecated since 2026-01-01 (RFC 9745).`),
            Sunset: header(`\`${SUNSET}\`: removed then (RFC 8594).`),
            Link: header('`<…/v1/pets>; rel="successor-version"`: use `GET /pets` with the `status` filter.'),
            ...RATE_LIMIT_HEADERS,
          }),
          ...errorResponses(400, 401, 404, 429, 500, 503),
        },
      },
    },
    async (request, reply) => {
      reply.headers({
        deprecation: DEPRECATED_AT,
        sunset: SUNSET,
        link: `<${origin(request)}/v1/pets>; rel="successor-version"`,
      })
      const { petId } = request.params
      // Ids run from 1 to MAX_EXACT_INTEGER, so any other (valid int64) id cannot exist.
      if (petId < 1 || petId > MAX_EXACT_INTEGER) throw new ApiError('pet_not_found')
      const pet = await app.store.getPet(petId)
      if (!pet) throw new ApiError('pet_not_found', `No pet with id ${petId}.`)
      return pet
    },
  )
}

function petLocation(pet: { id: number }, request: FastifyRequest): string {
  return `${origin(request)}/v1/pets/${pet.id}`
}

/** Scheme and host the client used (X-Forwarded-* honoured when TRUST_PROXY is on), for absolute links. */
function origin(request: { protocol: string; host: string }): string {
  return `${request.protocol}://${request.host}`
}

export default pets
