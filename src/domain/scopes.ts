/**
 * What an API key may do (decision 77). Each operation needs one scope; a write scope also grants
 * the read of the same resource. A key made without scopes (every key made before scopes) has all.
 */
export const SCOPES = [
  'pets:read',
  'pets:write',
  'orders:read',
  'orders:write',
  'messages:read',
  'messages:write',
  'webhooks:read',
  'webhooks:write',
] as const
export type Scope = (typeof SCOPES)[number]

/** The scopes a key's stored text grants, write implying read; null: every scope. */
export function grantedScopes(stored: string | null): ReadonlySet<string> | null {
  if (stored === null) return null
  const granted = new Set<string>()
  for (const scope of stored.split(' ')) {
    if (!scope) continue
    granted.add(scope)
    if (scope.endsWith(':write')) granted.add(scope.replace(/:write$/, ':read'))
  }
  return granted
}

/** "pets:read,orders:write" (the CLI's and the portal's form) → the stored text; throws naming a scope that is none. */
export function parseScopes(list: string): string {
  const scopes = [...new Set(list.split(/[\s,]+/).filter(Boolean))]
  const unknown = scopes.find((scope) => !(SCOPES as readonly string[]).includes(scope))
  if (unknown !== undefined) throw new Error(`Unknown scope "${unknown}": the scopes are ${SCOPES.join(', ')}.`)
  if (scopes.length === 0) throw new Error(`Name at least one scope: ${SCOPES.join(', ')}.`)
  return SCOPES.filter((scope) => scopes.includes(scope)).join(' ')
}
