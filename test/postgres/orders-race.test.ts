/** Exactly one winner across instances (issue 28, must-do 1): three processes on one PostgreSQL database. */
import { describe, it } from 'node:test'
import { testDatabaseUrl } from '../helper.ts'
import { cliKey, type ServerProcess, startServer } from '../processes.ts'
import { orderRaces } from '../race.ts'

const INSTANCES = 3

describe(`Order races over ${INSTANCES} instances on one PostgreSQL database`, () => {
  it('50 clients spread over the instances ordering one pet: one 201, 49 × 409, one placed order', async (t) => {
    const env = { DATABASE_URL: await testDatabaseUrl(t), RATE_LIMIT: '0' }
    const key = await cliKey(env)
    const servers: ServerProcess[] = []
    for (let i = 0; i < INSTANCES; i++) servers.push(await startServer(t, env))
    const counts = await orderRaces(servers, key, env.DATABASE_URL)
    t.diagnostic(`postgres, ${INSTANCES} instances: ${JSON.stringify(counts)}`)
  })
})
