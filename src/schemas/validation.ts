/**
 * Request validation: which Ajv settings apply to which part of a request, and how a failure reads.
 *
 * - Bodies are strict JSON: no type coercion ("7" is not an integer), unknown fields are refused.
 * - Path and query parameters arrive as text, so they are coerced, but integers must be written
 *   as plain decimals without leading zeros (`01` would be an alias of `1`), and `format: 'int64'`
 *   parameters are range-checked exactly on the text (a double cannot tell 9223372036854775807
 *   from 9223372036854775808).
 * - A parameter given twice (`?limit=1&limit=2`) arrives as an array and is refused.
 * - A `date-time` is RFC 3339's, a date that exists, within years 1 to 9999 in UTC: what both
 *   databases take (`Date.parse` alone takes `2026-02-30`, and years PostgreSQL refuses).
 */
import { Ajv, type ErrorObject, type Options } from 'ajv'
import type { FastifySchemaCompiler } from 'fastify'
import { errorWithoutStack } from '../errors.ts'

const INT64_MIN = -(2n ** 63n)
const INT64_MAX = 2n ** 63n - 1n
const DECIMAL = /^(?:0|-?[1-9][0-9]*)$/
const RFC3339 =
  /^(\d{4})-(\d{2})-(\d{2})[Tt]([01]\d|2[0-3]):[0-5]\d:[0-5]\d(?:\.\d{1,9})?(?:[Zz]|[+-](?:[01]\d|2[0-3]):[0-5]\d)$/

/** Whether `text` is an RFC 3339 date-time of a day that exists, within years 1 to 9999 in UTC. */
export function isDateTime(text: string): boolean {
  const match = RFC3339.exec(text)
  if (!match) return false
  const [, year, month, day] = match.map(Number) as number[]
  const date = new Date(0)
  date.setUTCFullYear(year as number, (month as number) - 1, day)
  if (date.getUTCMonth() !== (month as number) - 1 || date.getUTCDate() !== day) return false
  const instant = new Date(text)
  return !Number.isNaN(instant.getTime()) && /^(?!0000)\d{4}-/.test(instant.toISOString())
}

const common: Options = { allErrors: false, verbose: true, useDefaults: true, removeAdditional: false, strict: true }

function ajv(options: Options): Ajv {
  const instance = new Ajv({ ...common, ...options })
  // OpenAPI formats used by our schemas; `int64` is range-checked by the parameter wrapper below.
  instance.addFormat('int64', { type: 'number', validate: Number.isInteger })
  instance.addFormat('date-time', { type: 'string', validate: isDateTime })
  return instance
}

const bodyAjv = ajv({ coerceTypes: false })
const paramAjv = ajv({ coerceTypes: 'array' })

type IntegerSchema = { type?: unknown; format?: unknown; minimum?: number; maximum?: number }
type Schema = { properties?: Record<string, IntegerSchema> }

export const validatorCompiler: FastifySchemaCompiler<Schema> = ({ schema, httpPart }) => {
  if (httpPart === 'body') return bodyAjv.compile(schema)
  const validate = paramAjv.compile(schema)
  const integers = Object.entries(schema.properties ?? {}).filter(([, s]) => s.type === 'integer')
  if (integers.length === 0) return validate

  const check = (data: Record<string, unknown> | null) => {
    for (const [name, property] of integers) {
      const text = data?.[name]
      if (typeof text !== 'string') continue
      const error = integerTextError(text, property)
      if (error) {
        check.errors = [{ instancePath: `/${name}`, keyword: 'format', message: error, params: {}, schemaPath: '' }]
        return false
      }
    }
    const valid = validate(data)
    check.errors = validate.errors
    return valid
  }
  check.errors = null as ErrorObject[] | null | undefined
  return check
}

function integerTextError(text: string, { format, minimum, maximum }: IntegerSchema): string | undefined {
  if (!DECIMAL.test(text)) {
    return /^-?0[0-9]+$/.test(text) ? 'must be written without leading zeros' : 'must be a decimal integer'
  }
  // A double tells integers of up to 15 digits apart: longer texts are held to the bounds exactly,
  // the schema's own first (as Ajv words them), else an int64's.
  if (text.length > 15) {
    const value = BigInt(text)
    const high = maximum !== undefined ? BigInt(maximum) : format === 'int64' ? INT64_MAX : undefined
    const low = minimum !== undefined ? BigInt(minimum) : format === 'int64' ? INT64_MIN : undefined
    if (high !== undefined && value > high) return `must be at most ${high}`
    if (low !== undefined && value < low) return `must be at least ${low}`
  }
  return undefined
}

const PART_NAMES: Record<string, string> = { body: 'body', querystring: 'query', params: 'path', headers: 'header' }

/** Turns the first Ajv error into one sentence naming the field, e.g. "body.categoryId must be an integer". */
export function schemaErrorFormatter(errors: ErrorObject[], dataVar: string): Error {
  const error = errors[0]
  const part = PART_NAMES[dataVar] ?? dataVar
  const message = error ? describe(part, error) : `${part} is invalid`
  return errorWithoutStack(message)
}

/** Longest name of the client's own (an unknown field, a key in its body) that a message repeats. */
const NAME_SHOWN = 64

const cutShort = (text: string) => (text.length > NAME_SHOWN ? `${text.slice(0, NAME_SHOWN).toWellFormed()}…` : text)

/** A name the client chose, as a message shows it: cut short if long, and visible if empty. */
export function shown(name: string): string {
  return name === '' ? '""' : cutShort(name)
}

/** An id the client sent, as a not-found message repeats it: as it is when plain, else quoted (a blank one shows). */
export function sentId(id: string): string {
  return /^[\x21\x23-\x7e]+$/.test(id) && id.length <= NAME_SHOWN ? id : JSON.stringify(cutShort(id))
}

/** The first field of the object `error` is about that its schema does not know, if it forbids such. */
function unknownField(error: ErrorObject): string | undefined {
  const schema = error.parentSchema as { additionalProperties?: unknown; properties?: object } | undefined
  if (schema?.additionalProperties !== false || typeof error.data !== 'object' || error.data === null) return undefined
  const known = schema.properties ?? {}
  return Object.keys(error.data).find((name) => !Object.hasOwn(known, name))
}

function describe(part: string, error: ErrorObject): string {
  const path = error.instancePath
    .split('/')
    .slice(1)
    .map((s) => shown(s.replaceAll('~1', '/').replaceAll('~0', '~')))
  const field = [part, ...path].join('.')
  const p = error.params as Record<string, unknown>
  const schema = (error.parentSchema ?? {}) as { description?: string }
  switch (error.keyword) {
    case 'required': {
      // A misspelt field is both missing and unknown: name the field it was sent as, too.
      const sent = unknownField(error)
      return `${field}.${p.missingProperty} is required${sent === undefined ? '' : ` (${field}.${shown(sent)} is not a known field)`}`
    }
    case 'additionalProperties':
      return `${field}.${shown(String(p.additionalProperty))} is not a known field`
    case 'type':
      if (part === 'query' && Array.isArray(error.data)) return `${field} must be given once`
      // In a merge patch, null would remove the field (RFC 7396): say that it may not be.
      if (error.data === null) return `${field} must be ${article(String(p.type))}, not null`
      return `${field} must be ${article(String(p.type))}`
    case 'enum':
      return `${field} must be one of: ${(p.allowedValues as unknown[]).join(', ')}`
    case 'minimum':
      return `${field} must be at least ${p.limit}`
    case 'maximum':
      return `${field} must be at most ${p.limit}`
    case 'minLength':
      return `${field} must be at least ${p.limit} character${p.limit === 1 ? '' : 's'} long`
    case 'maxLength':
      return `${field} must be at most ${p.limit} characters long`
    case 'format':
      if (p.format === 'date-time') {
        // A `+01:00` offset sent unencoded in a URL arrives as a space before it.
        const plus = part === 'query' && typeof error.data === 'string' && / \d\d:\d\d$/.test(error.data)
        return `${field} must be a date and time such as 2026-11-22T12:00:00Z (RFC 3339)${plus ? '; in a URL, write + as %2B' : ''}`
      }
      return `${field} ${error.message ?? 'is invalid'}`
    case 'pattern': {
      // A query parameter's value is the client's own, typed in a URL: say which one was refused.
      const value =
        part !== 'query' || typeof error.data !== 'string'
          ? ''
          : error.data === ''
            ? ' (empty)'
            : ` ("${shown(error.data)}")`
      return `${field}${value} is invalid${schema.description ? `: ${schema.description}` : ''}`
    }
    case 'minItems':
      return `${field} must have at least ${p.limit} item${p.limit === 1 ? '' : 's'}`
    case 'maxItems':
      return `${field} must have at most ${p.limit} item${p.limit === 1 ? '' : 's'}`
    case 'uniqueItems':
      return `${field} must not repeat an item (items ${Math.min(Number(p.i), Number(p.j))} and ${Math.max(Number(p.i), Number(p.j))} are the same)`
    default:
      return `${field} ${error.message ?? 'is invalid'}`
  }
}

function article(type: string): string {
  if (type === 'integer' || type === 'object' || type === 'array') return `an ${type}`
  if (type === 'null') return 'null'
  return `a ${type}`
}
