/**
 * Whether every `%` escape in a query string or form body is well-formed and encodes UTF-8.
 * Node's query and form parsers keep a bad escape (`%zz`, `%ff`) as literal text instead: the
 * request is refused (400), as the router refuses one in the path.
 */
export function wellEncoded(text: string): boolean {
  if (!text.includes('%')) return true
  try {
    decodeURIComponent(text)
    return true
  } catch {
    return false
  }
}
