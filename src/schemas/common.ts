import Type from 'typebox'
import { ERROR_CODES } from '../errors.ts'

/** The Error object of the spec, used for every error response. */
export const ErrorSchema = Type.Object(
  {
    code: Type.String({ description: `Machine-readable error code, one of: ${ERROR_CODES.join(', ')}.` }),
    message: Type.String({ description: 'Human-readable description.' }),
    status: Type.Integer({ description: 'The HTTP status code of the response.' }),
  },
  { $id: 'Error', additionalProperties: false },
)

/**
 * Largest integer that JSON numbers carry exactly to every client (RFC 7493 §2.2, Number.MAX_SAFE_INTEGER).
 * Integers in request bodies above it are refused rather than silently rounded.
 */
export const MAX_EXACT_INTEGER = Number.MAX_SAFE_INTEGER

/** An int64 identifier in a body or response: exact in JSON, so at most MAX_EXACT_INTEGER. */
export const Int64 = (options: { description: string; minimum?: number }) =>
  Type.Integer({ format: 'int64', maximum: MAX_EXACT_INTEGER, ...options })

/** An int64 path or query parameter: the whole int64 range, checked exactly on the decimal text. */
export const Int64Param = (options: { description: string }) => Type.Integer({ format: 'int64', ...options })

const ERROR_DESCRIPTIONS: Record<number, string> = {
  400: 'The request is invalid (see `code` and `message`).',
  401: 'The API key is missing or invalid. `WWW-Authenticate: Bearer` says why.',
  404: 'Not found.',
  500: 'Unexpected failure; the response carries no internals. Quote `X-Request-Id` when reporting it.',
  503: 'The database is unreachable; retry after `Retry-After` seconds.',
}

type ErrorResponse = { description: string; content: { 'application/json': { schema: typeof ErrorSchema } } }

/** The Error responses of an operation, by status, for its route schema (and its OpenAPI document). */
export function errorResponses<const S extends readonly (keyof typeof ERROR_DESCRIPTIONS & number)[]>(...statuses: S) {
  const response = (status: number): ErrorResponse => ({
    description: ERROR_DESCRIPTIONS[status] as string,
    content: { 'application/json': { schema: ErrorSchema } },
  })
  return Object.fromEntries(statuses.map((status) => [status, response(status)])) as { [K in S[number]]: ErrorResponse }
}
