/** Rows of the event log as the live stream reads them (decision 116): the same mapping for every database. */
import type { FeedEvent } from './types.ts'
import { EVENT_COLUMNS, type EventRow, eventFromRow } from './webhook-rows.ts'

/** An event of the log as the live stream's reads select it: with its account and its transaction. */
export interface FeedRow extends EventRow {
  /** PostgreSQL's xid8, as text; 0 on SQLite. */
  tx: string | number
  seq: number
  accountId: number
}

/** The columns of a FeedRow but `tx`, which each store selects its own way. */
export const FEED_COLUMNS = `account_id AS "accountId", ${EVENT_COLUMNS}`

export function feedEventFromRow(row: FeedRow): FeedEvent {
  return { event: eventFromRow(row), accountId: row.accountId, position: { tx: BigInt(row.tx), seq: row.seq } }
}
