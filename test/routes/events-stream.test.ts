import assert from 'node:assert/strict'
import { connect, type Socket } from 'node:net'
import { describe, it, type TestContext } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { sharedSealer } from '../../src/domain/pagination.ts'
import { STREAM_POSITIONS_SECRET } from '../../src/store/types.ts'
import { bearer, build, errorBody, suiteApp, type TestApp } from '../helper.ts'
import { type Frame, nextEvent, openStream, startOf } from '../sse.ts'
import { until } from '../wait.ts'

const ON = { EXPERIMENTAL_FEATURES: 'webhooks' }
const BETA = { 'animal-store-beta': 'webhooks, orders' }

/** The app listening on a loopback port (once per app), and a new account's key on it. */
const listening = new WeakMap<TestApp, Promise<string>>()
async function setUp(test: TestApp, scopes: string | null = null) {
  if (!listening.has(test)) listening.set(test, test.app.listen({ port: 0, host: '127.0.0.1' }))
  const base = await (listening.get(test) as Promise<string>)
  const email = `stream${Math.random()}@example.com`
  const { secret, keyId } = await test.newKey({ scopes, email })
  const headers = { ...bearer(secret), ...BETA }
  const open = (query = '', extra: Record<string, string> = {}) =>
    openStream(`${base}/v1/events${query}`, { ...headers, ...extra })
  const send = async (message: string) => {
    const response = await test.app.inject({ method: 'POST', url: '/v1/messages', headers, payload: { message } })
    assert.equal(response.statusCode, 202, response.body)
    return response.json() as { id: string }
  }
  /** The event a message made, as GET /v1/events/{id} returns it. */
  const eventOf = async (messageId: string) => {
    const list = await test.app.inject({ url: '/v1/events?type=message.created', headers })
    return list.json().find((event: { data: { id: string } }) => event.data.id === messageId)
  }
  return { test, base, email, secret, keyId, headers, open, send, eventOf }
}

/**
 * A client that opens a stream on a socket of its own, waits for its answer to begin (until then a
 * stream of the test's could take the key's slot), then reads no more; and the server's side of it.
 */
async function unreadStream(t: TestContext, you: Awaited<ReturnType<typeof setUp>>) {
  const accepted = new Promise<Socket>((resolve) => you.test.app.server.once('connection', resolve))
  const socket = connect(Number(new URL(you.base).port), '127.0.0.1')
  t.after(() => socket.destroy())
  await new Promise((resolve) => socket.once('connect', resolve))
  const serverSide = await accepted
  const headers = Object.entries({ ...you.headers, accept: 'text/event-stream' })
  socket.write(
    `GET /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\n${headers.map(([k, v]) => `${k}: ${v}\r\n`).join('')}\r\n`,
  )
  const head = await new Promise<Buffer>((resolve) => socket.once('data', resolve))
  socket.pause()
  assert.match(head.toString(), /^HTTP\/1\.1 200 /)
  return { socket, serverSide }
}

describe('The live event stream (GET /v1/events, Accept: text/event-stream)', () => {
  const shared = suiteApp({ ...ON, EVENT_STREAM_HEARTBEAT_SECONDS: '1' })

  it("streams the account's new events as they commit, as GET /v1/events/{id} shows them", async () => {
    const test = await shared()
    const you = await setUp(test)
    const other = await setUp(test)
    const stream = await you.open()
    try {
      assert.equal(stream.status, 200)
      assert.match(stream.headers.get('content-type') ?? '', /^text\/event-stream/)
      assert.equal(stream.headers.get('cache-control'), 'no-store')
      assert.equal(stream.headers.get('x-accel-buffering'), 'no')
      assert.deepEqual(await stream.next(), { retry: '2000' })
      const start = await stream.next()
      assert.match(start.id ?? '', /^pos_[\w-]+\.[\w-]+$/)
      assert.deepEqual(start, { id: start.id, event: 'position', data: JSON.stringify({ position: start.id }) })
      await other.send('not yours')
      const sent = await you.send('hello stream')
      const event = await nextEvent(stream)
      const listed = await you.eventOf(sent.id)
      assert.equal(event.event, 'message.created')
      assert.equal(event.id, listed.id)
      assert.deepEqual(event.data, listed)
      assert.equal(event.data.data.message, 'hello stream')
    } finally {
      stream.close()
    }
  })

  it('resumes after Last-Event-ID: every later event in commit order, none twice, then the new ones', async () => {
    const test = await shared()
    const you = await setUp(test)
    const sent = []
    for (let i = 0; i < 5; i++) sent.push(await you.send(`before ${i}`))
    const first = await you.eventOf(sent[0].id)
    const stream = await you.open('', { 'last-event-id': first.id })
    try {
      const seen = []
      for (let i = 1; i < 5; i++) seen.push((await nextEvent(stream)).data.data.message)
      assert.deepEqual(seen, ['before 1', 'before 2', 'before 3', 'before 4'])
      await you.send('after')
      assert.equal((await nextEvent(stream)).data.data.message, 'after')
      // Nothing else came: the replay and the live feed did not both send one.
      await you.send('last')
      assert.equal((await nextEvent(stream)).data.data.message, 'last')
    } finally {
      stream.close()
    }
  })

  it('resumes from where a stream began (its position frame) when the connection was lost before any event', async () => {
    const you = await setUp(await shared())
    const first = await you.open()
    await first.next()
    const start = startOf(await first.next())
    first.close()
    await first.closed
    const away = await you.send('made while away')
    const stream = await you.open('', { 'last-event-id': start as string })
    try {
      // Resumed, it names no new start: its client has one. (A heartbeat may come before the replay.)
      assert.deepEqual(await stream.next(), { retry: '2000' })
      let frame = await stream.next()
      while (frame.comment !== undefined) frame = await stream.next()
      assert.equal(frame.event, 'message.created')
      assert.equal(JSON.parse(frame.data as string).data.id, away.id)
    } finally {
      stream.close()
    }
  })

  it('refuses a position older than the event log keeps, ahead of the log, edited or made up, as an unknown event (410)', async () => {
    const test = await shared()
    const you = await setUp(test)
    const first = await you.open()
    await first.next()
    const start = startOf(await first.next()) as string
    first.close()
    const sealed = await sharedSealer(test.app.store, STREAM_POSITIONS_SECRET, 'stream position')
    const head = await test.app.store.eventFeedHead()
    const days31 = 31 * 86_400_000
    const refused = {
      old: `pos_${sealed.seal(`${head.tx}.${head.seq}.${Date.now() - days31}`)}`,
      // As after a restore from a backup: the events to come would sort behind it (PostgreSQL xids: far ahead).
      ahead: `pos_${sealed.seal(`${head.tx + 1_000_000_000n}.${head.seq}.${Date.now()}`)}`,
      edited: `${start.slice(0, 6)}${start[6] === 'A' ? 'B' : 'A'}${start.slice(7)}`,
      unsealed: `pos_0_1_${Date.now()}`,
    }
    for (const [what, id] of Object.entries(refused)) {
      const stream = await you.open('', { 'last-event-id': id })
      assert.equal(stream.status, 410, what)
      assert.equal(JSON.parse(stream.error).code, 'last_event_id_unknown', what)
    }
    // And at the head, fresh, it is taken.
    const taken = await you.open('', { 'last-event-id': `pos_${sealed.seal(`${head.tx}.${head.seq}.${Date.now()}`)}` })
    assert.equal(taken.status, 200)
    taken.close()
  })

  it('gives a live stream a fresh position with each heartbeat: resumed from it, only what came after comes', async () => {
    const test = await shared()
    const you = await setUp(test)
    const other = await setUp(test)
    await you.send('before the stream')
    const stream = await you.open()
    let fresh: string | undefined
    try {
      await stream.next()
      const start = startOf(await stream.next())
      await other.send('not yours, but the log moves')
      // Where an id stands (each also carries its time, so the ids alone always differ).
      const sealed = await sharedSealer(test.app.store, STREAM_POSITIONS_SECRET, 'stream position')
      const at = (id: string | undefined) =>
        id === undefined ? undefined : sealed.open(id.slice(4))?.split('.').slice(0, 2).join('.')
      // Each heartbeat (every second here) brings a position; one comes past the start once the feed has read the log.
      const frames: Frame[] = []
      for (let i = 0; i < 12 && (fresh === undefined || at(fresh) === at(start)); i++) {
        frames.push(await stream.next(3000))
        fresh = startOf(frames.at(-1) as Frame) ?? fresh
      }
      assert.ok(fresh, `no position with the heartbeats: ${JSON.stringify(frames)}`)
      assert.ok(frames.some((frame) => frame.comment === 'heartbeat'))
      assert.notEqual(at(fresh), at(start), 'the position did not move past the start')
    } finally {
      stream.close()
    }
    const later = await you.send('after')
    const resumed = await you.open('', { 'last-event-id': fresh })
    try {
      assert.equal((await nextEvent(resumed)).data.data.id, later.id)
    } finally {
      resumed.close()
    }
  })

  it('replays a long gap at the pace the client reads, past the backlog that cuts a live stream', async () => {
    const you = await setUp(await shared())
    const big = 'x'.repeat(9_990)
    const { id } = await you.eventOf((await you.send('first')).id)
    // 1.5 MB to replay, more than a live stream may have waiting.
    for (let i = 0; i < 150; i++) await you.send(`${i} ${big}`)
    const stream = await you.open('', { 'last-event-id': id })
    try {
      for (let i = 0; i < 150; i++) assert.ok((await nextEvent(stream)).data.data.message.startsWith(`${i} `))
    } finally {
      stream.close()
    }
  })

  it('refuses a Last-Event-ID no longer in the log (pruned) or never made: 410 last_event_id_unknown', async (t) => {
    // An app of its own: the purge would take the other tests' events too.
    const you = await setUp(await build(t, ON))
    const sent = await you.send('soon pruned')
    const { id } = await you.eventOf(sent.id)
    const unknown = await you.open('', { 'last-event-id': 'evt_never' })
    assert.equal(unknown.status, 410)
    assert.equal(JSON.parse(unknown.error).code, 'last_event_id_unknown')
    await you.test.app.store.purgeExpired(new Date().toISOString(), new Date(Date.now() + 1000).toISOString())
    const pruned = await you.open('', { 'last-event-id': id })
    assert.equal(pruned.status, 410)
    const body = JSON.parse(pruned.error)
    assert.deepEqual([body.code, body.status], ['last_event_id_unknown', 410])
    assert.match(body.message, /EVENT_RETENTION_DAYS/)
  })

  it('a stream opened beside one refused (410) goes live all the same', async (t) => {
    // An app of its own: the race needs no other stream holding the feed.
    const you = await setUp(await build(t, ON))
    const { id } = await you.eventOf((await you.send('before')).id)
    const [refused, stream] = await Promise.all([
      you.open('', { 'last-event-id': 'evt_neverExisted0000' }),
      you.open('', { 'last-event-id': id }),
    ])
    try {
      assert.equal(refused.status, 410)
      assert.equal(stream.status, 200)
      const later = await you.send('after the refusal')
      assert.equal((await nextEvent(stream)).data.data.id, later.id)
    } finally {
      stream.close()
    }
  })

  it('ends the streams of a key once it is revoked, as its requests are refused', async (t) => {
    const test = await build(t, ON)
    const you = await setUp(test)
    const stream = await you.open()
    try {
      assert.equal(stream.status, 200)
      assert.deepEqual(await stream.next(), { retry: '2000' })
      // As the portal revokes a key: in the store, then out of this process's cache.
      assert.ok(await test.app.store.revokeApiKey(you.keyId))
      test.app.forgetApiKey(you.keyId)
      const ended = await Promise.race([stream.closed.then(() => true), sleep(5000, false, { ref: false })])
      assert.ok(ended, 'the stream of a revoked key still open 5 s later')
    } finally {
      stream.close()
    }
  })

  it('filters by type, and sends only the types the key may read', async () => {
    const test = await shared()
    const you = await setUp(test)
    const orders = await you.open('?type=order.*')
    // A key of the same account that may read webhooks but not messages.
    const { secret } = await test.newKey({ email: you.email, scopes: 'webhooks:read' })
    const narrow = (query = '') =>
      openStream(`${you.base}/v1/events${query}`, { ...bearer(secret), 'animal-store-beta': 'webhooks' })
    const unscoped = await narrow()
    try {
      assert.equal(unscoped.status, 200)
      await you.send('skipped by both streams')
      const pet = await test.app.store.createPet({ name: 'rex', categoryId: 1 })
      const placed = await test.app.inject({
        method: 'POST',
        url: '/v1/store/orders',
        headers: you.headers,
        payload: { petId: pet.id },
      })
      assert.equal(placed.statusCode, 201, placed.body)
      assert.equal((await nextEvent(orders)).event, 'order.placed')
      await assert.rejects(nextEvent(unscoped, 600), /no frame within/)
      const refused = await narrow('?type=message.created')
      assert.equal(refused.status, 403)
      assert.equal(JSON.parse(refused.error).code, 'insufficient_scope')
    } finally {
      orders.close()
      unscoped.close()
    }
  })

  it('is a stream only when asked for: text/event-stream with q=0 gets the page; an empty type is said so', async () => {
    const you = await setUp(await shared())
    for (const accept of ['text/event-stream;q=0', 'application/json, text/event-stream; q=0.000']) {
      const page = await you.test.app.inject({ url: '/v1/events', headers: { ...you.headers, accept } })
      assert.equal(page.statusCode, 200, accept)
      assert.match(page.headers['content-type'] as string, /^application\/json/, accept)
    }
    const empty = await you.test.app.inject({ url: '/v1/events?type=', headers: you.headers })
    assert.equal(empty.statusCode, 400)
    assert.match(errorBody(empty).message, /^query\.type \(empty\) is invalid: /)
  })

  it("refuses a page's parameters on a stream: 400 validation_failed naming them", async () => {
    const you = await setUp(await shared())
    const refused = await you.open('?createdAfter=2026-01-01T00:00:00Z&cursor=abc')
    assert.equal(refused.status, 400)
    const body = JSON.parse(refused.error)
    assert.equal(body.code, 'validation_failed')
    assert.match(body.message, /createdAfter, cursor/)
  })

  it('answers hostile stream requests with a JSON error, never a 5xx: odd Last-Event-IDs, unknown types', async () => {
    const you = await setUp(await shared())
    for (const lastEventId of ['x'.repeat(8000), 'evt_é', "evt_' OR 1=1 --", '%00', ' ']) {
      const stream = await you.open('', { 'last-event-id': lastEventId })
      stream.close()
      if (stream.status === 200) continue
      assert.equal(stream.status, 410, lastEventId.slice(0, 20))
      assert.equal(JSON.parse(stream.error).code, 'last_event_id_unknown')
    }
    for (const query of ['?type=order.nope', '?type=', '?type=order.*,,message.created', '?cursor=%FF']) {
      const stream = await you.open(query)
      assert.equal(stream.status, 400, query)
      // A malformed escape is the wire's (bad_request), the rest the schema's.
      assert.equal(JSON.parse(stream.error).code, query.includes('%') ? 'bad_request' : 'validation_failed', query)
    }
  })

  it('keeps an idle stream alive with heartbeat comments', async () => {
    const you = await setUp(await shared())
    const stream = await you.open()
    try {
      await stream.next()
      await stream.next()
      assert.deepEqual(await stream.next(3000), { comment: 'heartbeat' })
    } finally {
      stream.close()
    }
  })
})

describe('Event stream bounds', () => {
  it('bounds the streams of one key (429 too_many_streams), and frees the slot when one closes', async (t) => {
    const test = await build(t, { ...ON, EVENT_STREAMS_PER_KEY: '2' })
    const you = await setUp(test)
    const a = await you.open()
    const b = await you.open()
    const c = await you.open()
    assert.equal(c.status, 429)
    assert.equal(JSON.parse(c.error).code, 'too_many_streams')
    a.close()
    await a.closed
    const d = await until('a slot free again', async () => {
      const attempt = await you.open()
      if (attempt.status === 200) return attempt
      return null
    })
    for (const stream of [b, d]) stream.close()
  })

  it('cuts a stream whose client never reads, so that its backlog stays bounded', async (t) => {
    const test = await build(t, { ...ON, EVENT_STREAMS_PER_KEY: '1' })
    const you = await setUp(test)
    await unreadStream(t, you)
    // Its slot is held while it is open: a second stream of the key is refused.
    assert.equal((await you.open()).status, 429)
    const big = 'x'.repeat(9_990)
    // Sent until the server gives up on it (the slot frees); far more than it may hold for one client.
    let sent = 0
    const free = await until(
      'the unread stream cut',
      async () => {
        for (let i = 0; i < 20; i++, sent++) await you.send(big)
        const attempt = await you.open()
        attempt.close()
        return attempt.status === 200
      },
      { timeoutMs: 60_000, everyMs: 0 },
    )
    assert.ok(free)
    assert.ok(sent * big.length < 64 * 2 ** 20, `cut only after ${sent} messages`)
  })

  it('closes promptly with a stream whose client has stopped reading: its connection is cut', async (t) => {
    // One stream a key: a second one refused shows that the first is still held when the close begins.
    const test = await build(t, { ...ON, EVENT_STREAMS_PER_KEY: '1' })
    const you = await setUp(test)
    const { socket, serverSide } = await unreadStream(t, you)
    // Events until the kernel's buffers are full and the server holds some unsent, by steps of about
    // 200 KB: short of the backlog (1 MiB) that cuts a live stream. Each message is just under the
    // longest a message may be (10,000 characters).
    const big = 'x'.repeat(9_990)
    await until(
      'the server holding unsent data',
      async () => {
        for (let i = 0; i < 20; i++) await you.send(`${i} ${big}`)
        await sleep(300) // the feed's next read (every 200 ms) writes them
        return serverSide.writableLength > 0
      },
      { timeoutMs: 90_000, everyMs: 0 },
    )
    const second = await you.open()
    assert.equal(second.status, 429, 'the stream that stopped reading is still held')
    const closed = await Promise.race([test.app.close().then(() => true), sleep(8000, false, { ref: false })])
    socket.destroy() // else a close that hangs would hang the test's own clean-up too
    assert.ok(closed, 'the app did not close within 8 s')
  })

  it('ends its streams cleanly when the app closes (clients reconnect elsewhere)', async (t) => {
    const test = await build(t, ON)
    const you = await setUp(test)
    const stream = await you.open()
    await stream.next()
    await stream.next()
    await test.app.close()
    await stream.closed
    await assert.rejects(stream.next(100), /the stream ended/)
  })
})
