/**
 * Reads a service's database directly, beside the running servers: what a test checks about the
 * stored state must not come only through the code under test. Both dialects take the same SQL.
 */
import { DatabaseSync } from 'node:sqlite'
import pg from 'pg'

export async function sqlRows<T>(databaseUrl: string, sql: string): Promise<T[]> {
  if (databaseUrl.startsWith('sqlite:')) {
    const db = new DatabaseSync(databaseUrl.slice('sqlite:'.length))
    try {
      return db.prepare(sql).all() as T[]
    } finally {
      db.close()
    }
  }
  const client = new pg.Client({ connectionString: databaseUrl })
  await client.connect()
  try {
    return (await client.query(sql)).rows as T[]
  } finally {
    await client.end()
  }
}

export interface OrderInvariant {
  /** Placed orders whose pet is not `pending`. */
  placedNotPending: unknown[]
  /** Pets with more than one placed order. */
  twicePlaced: unknown[]
  /** `pending` pets with no placed order (a pet created `pending` is one of these by right). */
  pendingUnheld: number[]
}

/** The order invariant of issue 28, read with SQL: what must hold after anything, a crash included. */
export async function orderInvariant(databaseUrl: string): Promise<OrderInvariant> {
  const [placedNotPending, twicePlaced, pendingUnheld] = await Promise.all([
    sqlRows(
      databaseUrl,
      `SELECT o.id, o.pet_id AS "petId", p.status FROM orders o JOIN pets p ON p.id = o.pet_id
       WHERE o.status = 'placed' AND p.status <> 'pending'`,
    ),
    sqlRows(
      databaseUrl,
      `SELECT pet_id AS "petId", count(*) AS placed FROM orders WHERE status = 'placed'
       GROUP BY pet_id HAVING count(*) > 1`,
    ),
    sqlRows<{ id: number | string }>(
      databaseUrl,
      `SELECT p.id FROM pets p WHERE p.status = 'pending'
       AND NOT EXISTS (SELECT 1 FROM orders o WHERE o.pet_id = p.id AND o.status = 'placed')`,
    ),
  ])
  return { placedNotPending, twicePlaced, pendingUnheld: pendingUnheld.map((row) => Number(row.id)) }
}

/**
 * A PostgreSQL transaction that writes the account's event `evt_slow` and stays open until
 * `commit()`: its xid is older than any later write's, so it commits out of order (decision 113).
 */
export async function slowEvent(
  t: { after(fn: () => unknown): void },
  databaseUrl: string,
  accountId: number,
): Promise<{ commit(): Promise<void> }> {
  const client = new pg.Client({ connectionString: databaseUrl })
  await client.connect()
  t.after(() => client.end())
  await client.query('BEGIN')
  await client.query(
    `INSERT INTO event_log (id, account_id, type, data, created_at) VALUES ('evt_slow', $1, 'message.created', '{}', now())`,
    [accountId],
  )
  return { commit: async () => void (await client.query('COMMIT')) }
}
