/**
 * The live stream on PostgreSQL, where an event's transaction may commit after one that began later
 * (decision 113): a client starting or reconnecting then must not put its cursor past the first.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { createAnimalStoreClient, type Event, streamEvents, unwrap } from '../../src/client/index.ts'
import { build, testDatabaseUrl } from '../helper.ts'
import { slowEvent } from '../sql.ts'
import { until } from '../wait.ts'

describe('Event stream on PostgreSQL: transactions that commit out of order', () => {
  it('streamEvents started while an older transaction is open yields its event once it commits', async (t) => {
    const url = await testDatabaseUrl(t)
    const test = await build(t, { DATABASE_URL: url, EXPERIMENTAL_FEATURES: 'webhooks' })
    const api = await test.app.listen({ port: 0, host: '127.0.0.1' })
    const { secret, accountId } = await test.newKey()
    const client = createAnimalStoreClient({ baseUrl: `${api}/v1`, apiKey: secret })
    // A transaction that writes its event first and commits last.
    const slow = await slowEvent(t, url, accountId)
    // Committed before the stream starts, by a transaction that began after the slow one: listed
    // as the account's latest event, a cursor after it would be past the slow one for good.
    unwrap(await client.POST('/messages', { body: { message: 'committed first' } }))
    const stop = new AbortController()
    const seen: Event[] = []
    let open: () => void = () => {}
    const opened = new Promise<void>((resolve) => {
      open = resolve
    })
    const reading = (async () => {
      for await (const event of streamEvents(client, { signal: stop.signal, onOpen: () => open() })) seen.push(event)
    })()
    try {
      await opened
      await slow.commit()
      await until('the slow event', () => seen.some((event) => event.id === 'evt_slow'), { timeoutMs: 5000 })
    } finally {
      stop.abort()
      await reading
    }
    assert.equal(new Set(seen.map((event) => event.id)).size, seen.length, 'none twice')
  })
})
