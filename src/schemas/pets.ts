import Type from 'typebox'
import {
  ABSENT_ID_EXAMPLE,
  Cursor,
  DEFAULT_PAGE_SIZE,
  header,
  Int64,
  Int64Param,
  PageLimit,
  VISIBLE_TEXT,
} from './common.ts'

export const PET_STATUSES = ['available', 'pending', 'sold'] as const

export const PetStatusSchema = Type.Enum(PET_STATUSES, { type: 'string', description: 'Availability status.' })
export type PetStatus = Type.Static<typeof PetStatusSchema>
export const DEFAULT_PET_STATUS: PetStatus = 'available'

const petFields = {
  name: Type.String({
    minLength: 1,
    maxLength: 200,
    pattern: VISIBLE_TEXT,
    description: "The animal's name: 1 to 200 characters, not only spaces or invisible characters, no NUL.",
    // Without an example Swagger UI's "Try it out" invents a random string matching the pattern.
    examples: ['Rex'],
  }),
  categoryId: Int64({ minimum: 1, description: 'Identifier of the category the animal belongs to.', examples: [1] }),
}

export const NewPetSchema = Type.Object(
  { ...petFields, status: Type.Optional(Type.Enum(PET_STATUSES, { ...PetStatusSchema, default: DEFAULT_PET_STATUS })) },
  { $id: 'NewPet', additionalProperties: false, description: 'An animal to add.' },
)
export type NewPet = Type.Static<typeof NewPetSchema>

/**
 * A JSON Merge Patch of a Pet (RFC 7396): the fields to change, each optional. `null` would remove
 * a field, and every pet has all three: it is refused, like an unknown field (decision 78).
 */
export const PetPatchSchema = Type.Object(
  {
    name: Type.Optional(petFields.name),
    categoryId: Type.Optional(petFields.categoryId),
    status: Type.Optional(PetStatusSchema),
  },
  {
    $id: 'PetPatch',
    additionalProperties: false,
    description:
      'The fields to change (JSON Merge Patch, RFC 7396): those left out keep their value. None may be null ' +
      '(every pet has all three), and `pending` is set only by ordering the pet.',
  },
)
export type PetPatch = Type.Static<typeof PetPatchSchema>

/** The conditions updatePet takes (RFC 9110 §13.1), listed so that the reference and the client show them. */
export const PetPatchHeadersSchema = Type.Object({
  'if-match': Type.Optional(
    Type.String({
      description:
        'The `ETag` of the version to change (from `getPet` or an earlier change), or `*`: 412 when the animal is another version now.',
    }),
  ),
  'if-none-match': Type.Optional(
    Type.String({ description: 'Entity tags the animal must not match (`*`: any); 412 when it does.' }),
  ),
})

export const PetSchema = Type.Object(
  {
    id: Int64({ minimum: 1, description: 'Unique identifier assigned by the service on creation.', examples: [1] }),
    ...petFields,
    status: PetStatusSchema,
  },
  // A response: open to fields added later (decision 20), so clients that validate it keep working.
  { $id: 'Pet' },
)
export type Pet = Type.Static<typeof PetSchema>

export const PetsSchema = Type.Array(PetSchema, { description: 'A page of animals, ordered by id.' })

export { DEFAULT_PAGE_SIZE }

export const ListPetsQuerySchema = Type.Object(
  { limit: PageLimit('animals'), status: Type.Optional(PetStatusSchema), cursor: Cursor },
  { additionalProperties: false },
)
export type ListPetsQuery = Type.Static<typeof ListPetsQuerySchema>

export const PetParamsSchema = Type.Object(
  { petId: Int64Param({ description: 'The identifier of the animal.', examples: [ABSENT_ID_EXAMPLE] }) },
  { additionalProperties: false },
)

/** getPet was deprecated on 2026-01-01 (RFC 9745) and is removed on 5 December 2030 (RFC 8594; decision 19). */
export const GET_PET_SUNSET_MS = Date.UTC(2030, 11, 5)
export const GET_PET_DEPRECATED = {
  deprecation: `@${Date.UTC(2026, 0, 1) / 1000}`,
  sunset: new Date(GET_PET_SUNSET_MS).toUTCString(),
}

/** The headers every answer of the deprecated getPet carries, as the document describes them. */
export const DEPRECATION_HEADERS = {
  Deprecation: header(`\`${GET_PET_DEPRECATED.deprecation}\`: deprecated since 2026-01-01 (RFC 9745).`),
  Sunset: header(`\`${GET_PET_DEPRECATED.sunset}\`: removed then (RFC 8594).`),
  Link: header(
    '`<…/v1/pets>; rel="successor-version"`: use `GET /pets` with the `status` filter; ' +
      '`<…/docs#/pets/getPet>; rel="deprecation"`: the reference says so (RFC 9745 §3).',
  ),
}
