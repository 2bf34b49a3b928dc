import Type, { type TSchema } from 'typebox'
import { ERROR_CODES, ERRORS, type ErrorCode } from '../errors.ts'

/** The Error object of the spec, used for every error response. */
export const ErrorSchema = Type.Object(
  {
    code: Type.String({
      description: `Machine-readable error code, one of: ${ERROR_CODES.join(', ')}.`,
      examples: ['validation_failed'],
    }),
    message: Type.String({ description: 'Human-readable description.', examples: [ERRORS.validation_failed[1]] }),
    status: Type.Integer({ description: 'The HTTP status code of the response.', examples: [400] }),
  },
  // A response: open to fields added later (decision 20).
  { $id: 'Error' },
)

/**
 * Largest integer that JSON numbers carry exactly to every client (RFC 7493 §2.2, Number.MAX_SAFE_INTEGER).
 * Integers in request bodies above it are refused rather than silently rounded.
 */
export const MAX_EXACT_INTEGER = Number.MAX_SAFE_INTEGER

/**
 * Characters that show nothing: whitespace, controls (C0, DEL, C1), and the invisible format and
 * filler characters of the BMP (soft hyphen, zero-width space and joiners, bidi controls, word
 * joiner, braille blank, variation selectors, byte order mark, Hangul fillers, interlinear
 * annotation). Listed, not `\p{…}`: the pattern is also read by clients' validators, without /u.
 */
const INVISIBLE =
  '\\s\\u0000-\\u001f\\u007f-\\u009f\\u00ad\\u034f\\u061c\\u115f\\u1160\\u17b4\\u17b5\\u180b-\\u180f' +
  '\\u200b-\\u200f\\u202a-\\u202e\\u2060-\\u206f\\u2800\\u3164\\ufe00-\\ufe0f\\ufeff\\uffa0\\ufff9-\\ufffb'

/**
 * Text with at least one character that shows (a name of zero-width spaces is as blank as one of
 * spaces) and no NUL (PostgreSQL cannot store U+0000 in text, so neither store accepts it).
 */
export const VISIBLE_TEXT = `^(?=[\\s\\S]*[^${INVISIBLE}])[^\\u0000]*$`

/**
 * The example of an id that names an existing resource in a request (a path, a body), which
 * /docs fills in for "Try it out": no resource has it (ids count up from 1; this is the last one),
 * so an example executed as it stands changes nothing and is answered 404.
 */
export const ABSENT_ID_EXAMPLE = MAX_EXACT_INTEGER

/** An int64 identifier in a body or response: exact in JSON, so at most MAX_EXACT_INTEGER. */
export const Int64 = (options: { description: string; minimum?: number; examples?: number[] }) =>
  Type.Integer({ format: 'int64', maximum: MAX_EXACT_INTEGER, ...options })

/**
 * An id in a path or query: as in bodies, from 1 to MAX_EXACT_INTEGER, written as a plain decimal
 * (decision 99): `0`, `-1` or `01` is a 400, never a 404 or an alias of another id.
 */
export const Int64Param = (options: { description: string; examples?: number[] }) =>
  Type.Integer({ format: 'int64', minimum: 1, maximum: MAX_EXACT_INTEGER, ...options })

/** A documented response header; `required` when every such response carries it. */
type Header = { type: 'string'; description: string; required?: true }
type Headers = Record<string, Header>

/**
 * A response header as the document describes it. `required: true` stays in the route's schema,
 * where no one reads it, until src/plugins/openapi.ts moves it onto the document's Header Object.
 */
export const header = (description: string, { required = false } = {}): Header =>
  required ? { type: 'string', description, required: true } : { type: 'string', description }

/** On every response (src/http/index.ts). */
const REQUEST_ID_HEADER = {
  'X-Request-Id': header('Identifies this request in our logs: yours when you sent a sane one, else a UUID.', {
    required: true,
  }),
}

/**
 * A documented JSON response: the schema Fastify serializes with, plus the description and headers
 * that @fastify/swagger puts in the OpenAPI document.
 */
export function jsonResponse<T extends TSchema>(description: string, schema: T, headers?: Headers, example?: unknown) {
  const media = example === undefined ? { schema } : { schema, example }
  return { description, headers: { ...headers, ...REQUEST_ID_HEADER }, content: { 'application/json': media } }
}

/**
 * The body an error `code` has with its default message: the example of an error response, so
 * that the reference shows a real answer rather than `"string"` (code and status from src/errors.ts).
 */
export const errorExample = (code: ErrorCode, message: string = ERRORS[code][1]) => ({
  code,
  message,
  status: ERRORS[code][0],
})

/** A documented error response, with the body of `code` (and `message`, else its default) as its example. */
export const errorResponse = (code: ErrorCode, description: string, headers?: Headers, message?: string) =>
  jsonResponse(description, ErrorSchema, headers, errorExample(code, message))

/** A documented response without content (a 204). */
export function emptyResponse(description: string, headers?: Headers) {
  return { type: 'null' as const, description, headers: { ...headers, ...REQUEST_ID_HEADER } }
}

/** The 304 of a GET operation, the answer to `If-None-Match: *` (src/plugins/preconditions.ts). */
export function notModifiedResponse(headers?: Headers) {
  return {
    type: 'null' as const,
    description:
      'Not Modified: the answer to `If-None-Match: *`, as the resource exists (RFC 9110 §13.1.2). No content.',
    headers: { ...headers, ...REQUEST_ID_HEADER },
  }
}

/** Rate-limit headers on every response to a valid key (draft-ietf-httpapi-ratelimit-headers). */
export const RATE_LIMIT_HEADERS = {
  RateLimit: header('`"default";r=<remaining>;t=<seconds until reset>` (IETF draft).'),
  'RateLimit-Policy': header('`"default";q=<requests>;w=<window seconds>` (IETF draft).'),
}

/** On the success of a POST that takes an Idempotency-Key (src/plugins/idempotency.ts). */
export const IDEMPOTENT_HEADERS = {
  'Idempotent-Replayed': header('`true` when this is the stored response to an earlier request.'),
  ...RATE_LIMIT_HEADERS,
}

/** On the 201 of a POST that takes an Idempotency-Key: where the new `what` is. */
export const createdHeaders = (what: string) => ({
  Location: header(`The URL of the new ${what}.`, { required: true }),
  ...IDEMPOTENT_HEADERS,
})

/** On a page of a list at `path` (under /v1): the link to the next page of its `items`, if any. */
export const pageHeaders = (path: string, items: string) => ({
  Link: header(`\`<…${path}?…&cursor=…>; rel="next"\` when more ${items} follow (RFC 8288).`),
  ...RATE_LIMIT_HEADERS,
})

const ERROR_RESPONSES = {
  400: errorResponse('validation_failed', 'The request is invalid (see `code` and `message`).', RATE_LIMIT_HEADERS),
  401: errorResponse('missing_api_key', 'The API key is missing or invalid.', {
    'WWW-Authenticate': header(
      '`Bearer realm="animal-store"`, with `error="invalid_token"` when a key was sent, `error="invalid_request"` when the header is malformed (RFC 6750).',
    ),
  }),
  403: errorResponse('insufficient_scope', 'The API key lacks the scope this operation needs.', {
    'WWW-Authenticate': header('`Bearer realm="animal-store", error="insufficient_scope", scope="…"` (RFC 6750 §3.1).'),
    ...RATE_LIMIT_HEADERS,
  }),
  404: errorResponse('not_found', 'Not found.', RATE_LIMIT_HEADERS),
  409: errorResponse(
    'idempotency_conflict',
    'A request with this Idempotency-Key is still in progress.',
    RATE_LIMIT_HEADERS,
  ),
  413: errorResponse('payload_too_large', 'The body is larger than the limit (BODY_LIMIT).', RATE_LIMIT_HEADERS),
  415: errorResponse(
    'unsupported_media_type',
    'The body is not JSON in UTF-8 (`Content-Type: application/json`, no `Content-Encoding`).',
    RATE_LIMIT_HEADERS,
  ),
  422: errorResponse(
    'idempotency_key_reused',
    'This Idempotency-Key was used for a different request.',
    RATE_LIMIT_HEADERS,
  ),
  429: errorResponse('rate_limited', 'Too many requests for this API key (or bad keys from this address).', {
    'Retry-After': header('Seconds until the limit resets.'),
    ...RATE_LIMIT_HEADERS,
  }),
  500: errorResponse(
    'internal_error',
    'Unexpected failure; the body carries no internals. Quote `X-Request-Id` when reporting it.',
  ),
  503: errorResponse('service_unavailable', 'The database is unreachable; retry after `Retry-After` seconds.', {
    'Retry-After': header('Seconds to wait before retrying.'),
  }),
  default: errorResponse(
    'method_not_allowed',
    'Any other error, for any request: 405 (with `Allow`), 408, 412 (`If-Match`, `If-None-Match`), 417, 431, 501 or 505. The body is still the Error object.',
  ),
}

/** A status an operation may document an Error response for. */
export type ErrorStatus = Exclude<keyof typeof ERROR_RESPONSES, 'default'>

/**
 * The Error responses of an operation, by status, for its route schema (and its OpenAPI document),
 * and the `default` response that covers what any request can get.
 */
export function errorResponses<const S extends readonly ErrorStatus[]>(...statuses: S) {
  const responses = Object.fromEntries(statuses.map((status) => [status, ERROR_RESPONSES[status]]))
  return { ...responses, default: ERROR_RESPONSES.default } as {
    [K in S[number] | 'default']: (typeof ERROR_RESPONSES)[K]
  }
}

/** Documented responses with more headers each (e.g. those an operation sends on every answer). */
export function withHeaders<R extends Record<string, { headers: Headers }>>(responses: R, headers: Headers): R {
  const entries = Object.entries(responses).map(([status, response]) => [
    status,
    { ...response, headers: { ...headers, ...response.headers } },
  ])
  return Object.fromEntries(entries) as R
}

/** The query of an operation that takes no query parameters: any given is refused, not ignored. */
export const NoQuerySchema = Type.Object({}, { additionalProperties: false })

/** The optional Idempotency-Key request header of the POST operations. */
export const IdempotencyHeadersSchema = Type.Object({
  'idempotency-key': Type.Optional(
    Type.String({
      // A quoted key must hold something (`""` is no key), and a quote is only ever around a key, not
      // in one (`"a` is a broken quoting). The quotes do not count towards the 255.
      pattern: '^(?:"[!#-~]{1,255}"|[!#-~]{1,255})$',
      // The rule first: a malformed key's 400 quotes the description (src/schemas/validation.ts).
      description:
        '1 to 255 visible ASCII characters but `"`, e.g. a UUID, optionally in double quotes. Makes retries safe ' +
        '(draft-ietf-httpapi-idempotency-key-header); remembered for 24 hours per API key.',
    }),
  ),
})

/** What a POST that takes an Idempotency-Key accepts besides its body: that header, and no query. */
export const IDEMPOTENT_REQUEST = { headers: IdempotencyHeadersSchema, querystring: NoQuerySchema }

/** How many items a page holds: 1 to 100, 20 when not given (the spec's listPets rule, kept by every list). */
export const DEFAULT_PAGE_SIZE = 20
export const PageLimit = (what: string) =>
  Type.Optional(
    Type.Integer({
      minimum: 1,
      maximum: 100,
      default: DEFAULT_PAGE_SIZE,
      description: `Maximum number of ${what} returned.`,
    }),
  )

/**
 * An instant a client gives (a query parameter, a body field): RFC 3339, with its offset or `Z`,
 * years 1 to 9999 (src/schemas/validation.ts). Compare it as `new Date(value).toISOString()`.
 */
export const DateTimeInput = (description: string) =>
  Type.String({
    format: 'date-time',
    maxLength: 40,
    description: `${description} RFC 3339, e.g. 2026-11-22T12:00:00Z or 2026-11-22T13:00:00+01:00 (in a URL, write + as %2B).`,
    examples: ['2026-11-22T12:00:00Z'],
  })

/** The opaque position of the next page, from the previous page's Link header. */
export const Cursor = Type.Optional(
  Type.String({
    minLength: 1,
    maxLength: 200,
    description: 'Opaque position from the `Link: <…>; rel="next"` header of the previous page.',
  }),
)
