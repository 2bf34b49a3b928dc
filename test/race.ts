/**
 * The order race of issue 28 (must-do 1): many clients order one available pet at the same moment
 * over real HTTP, spread over the given server processes. Exactly one may win.
 */
import assert from 'node:assert/strict'
import type { ServerProcess } from './processes.ts'
import { sqlRows } from './sql.ts'

export const BETA = { 'animal-store-beta': 'orders' }

export interface RaceCounts {
  pets: number
  requests: number
  created: number
  refused: number
}

/**
 * `pets` times: creates an available pet, sends `clients` placeOrder requests for it at once (the
 * i-th to servers[i % n]), and checks one 201 and 409 pet_not_available for the rest; then that the
 * pet is pending with that one placed order, through the API of every server and with SQL.
 */
export async function orderRaces(
  servers: ServerProcess[],
  key: string,
  databaseUrl: string,
  { pets = 5, clients = 50 } = {},
): Promise<RaceCounts> {
  const headers = { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...BETA }
  const counts: RaceCounts = { pets, requests: 0, created: 0, refused: 0 }
  for (let round = 0; round < pets; round++) {
    const created = await fetch(`${servers[0]?.url}/v1/pets`, {
      method: 'POST',
      headers,
      body: JSON.stringify({ name: `Contested ${round}`, categoryId: 1 }),
    })
    assert.equal(created.status, 201)
    const pet = (await created.json()) as { id: number; status: string }
    assert.equal(pet.status, 'available')
    const body = JSON.stringify({ petId: pet.id })
    // Every request is built and sent before any answer is read: they meet in the database.
    const answers = await Promise.all(
      Array.from({ length: clients }, async (_, i) => {
        const server = servers[i % servers.length] as ServerProcess
        const response = await fetch(`${server.url}/v1/store/orders`, { method: 'POST', headers, body })
        return { server, status: response.status, body: (await response.json()) as Record<string, unknown> }
      }),
    )
    const winners = answers.filter((a) => a.status === 201)
    const losers = answers.filter((a) => a.status === 409)
    counts.requests += answers.length
    counts.created += winners.length
    counts.refused += losers.length
    assert.equal(winners.length, 1, `pet ${pet.id}: ${winners.length} orders placed`)
    assert.equal(losers.length, clients - 1, `statuses: ${answers.map((a) => a.status).join(' ')}`)
    for (const loser of losers) assert.equal(loser.body.code, 'pet_not_available')
    const winner = winners[0] as (typeof answers)[number]
    assert.equal(winner.body.status, 'placed')

    // The instance that placed the order shows the pet pending at once; every instance lists the order.
    const shown = await fetch(`${winner.server.url}/v1/pets/${pet.id}`, { headers })
    assert.equal(((await shown.json()) as { status: string }).status, 'pending')
    for (const server of servers) {
      const listed = await fetch(`${server.url}/v1/store/orders?petId=${pet.id}`, { headers })
      assert.deepEqual(
        ((await listed.json()) as { id: string; status: string }[]).map((o) => [o.id, o.status]),
        [[winner.body.id, 'placed']],
      )
    }
    const rows = await sqlRows<{ id: string; status: string; pet: string }>(
      databaseUrl,
      `SELECT o.id, o.status, p.status AS pet FROM pets p LEFT JOIN orders o ON o.pet_id = p.id WHERE p.id = ${pet.id}`,
    )
    assert.deepEqual(
      rows.map((r) => ({ ...r })),
      [{ id: winner.body.id, status: 'placed', pet: 'pending' }],
    )
  }
  return counts
}
