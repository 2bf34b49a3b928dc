/**
 * Exactly one winner (issue 28, must-do 1): N clients order one pet at once over real HTTP, on one
 * server process and on WORKERS=2 processes sharing the database. Three instances: test/postgres/.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { DATABASE, testDatabaseUrl } from './helper.ts'
import { cliKey, type LogLine, startServer } from './processes.ts'
import { orderRaces } from './race.ts'

describe(`Order races over HTTP (${DATABASE})`, () => {
  it('50 clients ordering one pet on one instance: one 201, 49 × 409, the pet pending with one placed order', async (t) => {
    const env = { DATABASE_URL: await testDatabaseUrl(t), RATE_LIMIT: '0' }
    const key = await cliKey(env)
    const server = await startServer(t, env)
    const counts = await orderRaces([server], key, env.DATABASE_URL)
    t.diagnostic(`${DATABASE}, 1 instance: ${JSON.stringify(counts)}`)
  })

  it('50 clients ordering one pet on WORKERS=2 processes: one winner, whichever process serves', async (t) => {
    const env = { DATABASE_URL: await testDatabaseUrl(t), RATE_LIMIT: '0', WORKERS: '2', LOG_LEVEL: 'info' }
    const key = await cliKey(env)
    const server = await startServer(t, env)
    // /healthz answered once one worker listens: wait for the other, or one process would serve all.
    const listening = (line: LogLine) => String(line.msg).startsWith('Server listening')
    const first = await server.waitForLog(listening, 10_000)
    await server.waitForLog((line) => listening(line) && line.pid !== first.pid, 10_000)
    const counts = await orderRaces([server], key, env.DATABASE_URL)
    assert.equal(await server.stop('SIGTERM'), 0)
    const servedBy = new Set(
      server
        .logs()
        .filter(
          (line) =>
            line.msg === 'request completed' &&
            String((line.req as { url?: string } | undefined)?.url).includes('/store/orders'),
        )
        .map((line) => line.pid),
    )
    assert.equal(servedBy.size, 2, 'both processes served orders')
    t.diagnostic(`${DATABASE}, WORKERS=2: ${JSON.stringify(counts)}`)
  })
})
