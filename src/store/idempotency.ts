import type { IdempotencyState } from './types.ts'

/** An idempotency record as both stores read it back. */
export interface IdempotencyRow {
  fingerprint: string
  state: 'in_progress' | 'done'
  status: number | null
  body: string | null
}

/** What an existing record means for a new request with this fingerprint. */
export function idempotencyState(row: IdempotencyRow, fingerprint: string): IdempotencyState {
  if (row.fingerprint !== fingerprint) return { state: 'mismatch' }
  if (row.state === 'in_progress') return { state: 'in_progress' }
  return { state: 'done', status: row.status as number, body: row.body as string }
}
