/**
 * Secrets: after a run of real traffic (keys used right and wrong, in headers, URLs and bodies,
 * revoked, expired), neither the database nor the logs hold any key in plain text.
 */
import assert from 'node:assert/strict'
import { existsSync, readFileSync } from 'node:fs'
import { describe, it } from 'node:test'
import { hashApiKey } from '../src/domain/api-keys.ts'
import { sqlitePath } from '../src/store/sqlite.ts'
import { DATABASE, postgres, testDatabaseUrl } from './helper.ts'
import { cli, cliKey, startServer } from './processes.ts'

/** Every byte of the database, as text: the SQLite files, or every row of every table. */
async function databaseDump(url: string): Promise<string> {
  if (url.startsWith('sqlite:')) {
    const path = sqlitePath(url)
    return [path, `${path}-wal`]
      .filter((file) => existsSync(file))
      .map((file) => readFileSync(file).toString('latin1'))
      .join('\n')
  }
  const schema = new URL(url).searchParams.get('options')?.split('=')[1] as string
  const tables = (await postgres(
    `SELECT table_name FROM information_schema.tables WHERE table_schema = '${schema}'`,
  )) as {
    table_name: string
  }[]
  const rows = await Promise.all(
    tables.map((t) => postgres(`SELECT row_to_json(r) AS row FROM ${schema}.${t.table_name} r`)),
  )
  return JSON.stringify(rows)
}

describe(`Secrets: no key in plain text in the database or the logs (${DATABASE})`, () => {
  it('after real traffic, the database holds only key hashes and the logs hold no key', {
    timeout: 60_000,
  }, async (t) => {
    const env = { DATABASE_URL: await testDatabaseUrl(t), LOG_LEVEL: 'debug', API_KEY_CACHE_SECONDS: '0' }
    const keys = [await cliKey(env, 'a@example.com'), await cliKey(env, 'b@example.com')]
    const expiring = (await cli(['keys', 'create', 'a@example.com', '--expires-in', '1s'], env)).stdout
      .trimEnd()
      .split('\n')
      .at(-1) as string
    keys.push(expiring)
    const server = await startServer(t, env)
    const send = (path: string, init: RequestInit = {}) => fetch(`${server.url}${path}`, init).then((r) => r.text())
    for (const key of keys) {
      const auth = { authorization: `Bearer ${key}`, 'content-type': 'application/json' }
      await send('/v1/pets', { method: 'POST', headers: auth, body: JSON.stringify({ name: 'Rex', categoryId: 1 }) })
      await send('/v1/messages', {
        method: 'POST',
        headers: auth,
        body: JSON.stringify({ message: `my key is ${key}` }),
      })
      await send(`/v1/pets?api_key=${key}`, { headers: auth })
      await send(`/v1/pets/${key}`, { headers: auth })
      await send('/v1/pets', { method: 'POST', headers: auth, body: JSON.stringify({ [key]: 1 }) })
      await send('/v1/pets', { method: 'POST', headers: auth, body: `{"name": "${key}` })
      await send('/v1/pets', { headers: { authorization: `Bearer ${key}x` } })
      await send('/v1/pets', { headers: { authorization: `Basic ${key}` } })
      await send(`/nowhere/${key}`)
    }
    const listed = await cli(['keys', 'list', 'b@example.com'], env)
    await cli(['keys', 'revoke', /key_\w{16}/.exec(listed.stdout)?.[0] as string], env)
    // The expiring key lapses. Real time: the server that checks it is another process, with its own clock.
    await new Promise((resolve) => setTimeout(resolve, 1100))
    for (const key of keys) await send('/v1/pets', { headers: { authorization: `Bearer ${key}` } })
    assert.equal(await server.stop('SIGTERM'), 0)

    const logs = server.output()
    const database = await databaseDump(env.DATABASE_URL)
    // At least a line a request (30 were sent), refusals and their details included.
    assert.ok(logs.split('\n').length > 30, 'the run produced logs')
    for (const key of keys) {
      const secretPart = key.slice(8, 40)
      // The message text "my key is …" is the client's own data, stored as sent: strip it first.
      const withoutMessages = database.replaceAll(`my key is ${key}`, '')
      assert.ok(!withoutMessages.includes(secretPart), 'a key is stored in plain text')
      assert.ok(database.includes(hashApiKey(key)), 'the dump is searchable (the hash is there)')
      assert.ok(!logs.includes(secretPart), 'a key reached the logs')
    }
    assert.doesNotMatch(logs, /"authorization"\s*:/i, 'the Authorization header was logged')
    t.diagnostic(
      `${DATABASE}: keys=${keys.length} log lines=${logs.split('\n').length} database bytes=${database.length}, plain keys found=0`,
    )
  })
})
