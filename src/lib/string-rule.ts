/**
 * A check for a string schema (TypeBox's Type.String with minLength, maxLength and pattern), as
 * JSON Schema and TypeBox's Value.Check read one: lengths in code points, the pattern a Unicode
 * regular expression, unanchored. For the rules checked outside a route's validation (the CLI, the
 * portal's steps in domain/accounts.ts): typebox/value is some 300 modules, a tenth of a second of
 * every command-line run, for three such checks.
 */

/** What a string schema may say besides its rules: annotations, which check nothing. */
const ANNOTATIONS = new Set(['description', 'title', 'examples', 'default'])

interface StringSchema {
  type?: unknown
  minLength?: number
  maxLength?: number
  pattern?: string
}

/** The check for `schema`; throws at once for a keyword it cannot check (it would pass values it should refuse). */
export function stringRule(schema: StringSchema): (value: unknown) => value is string {
  const { type, minLength = 0, maxLength = Number.POSITIVE_INFINITY, pattern, ...rest } = schema
  const unchecked = Object.keys(rest).filter((keyword) => !ANNOTATIONS.has(keyword))
  if (type !== 'string' || unchecked.length > 0) {
    throw new Error(
      `stringRule checks string schemas of minLength, maxLength and pattern (got ${JSON.stringify(schema)})`,
    )
  }
  const regexp = pattern === undefined ? null : new RegExp(pattern, 'u')
  return (value: unknown): value is string => {
    if (typeof value !== 'string') return false
    // Code points, not UTF-16 units: '🐈' is one character.
    let length = 0
    for (const _ of value) length++
    return length >= minLength && length <= maxLength && (regexp === null || regexp.test(value))
  }
}
