/**
 * The live stream of GET /v1/events (decision 116): Server-Sent Events of an account's events as
 * they commit, on whichever instance. While a stream is open, one feed per instance reads every
 * account's new events from the store in commit order (FeedPosition) and hands each to the streams
 * of its account. A stream that resumes from a Last-Event-ID first replays from the store, up to
 * where the feed stands, then joins it: no event twice, none skipped.
 */
import { PassThrough } from 'node:stream'
import type { FastifyReply, FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import type { Config } from '../config.ts'
import type { AnyEventType } from '../domain/events.ts'
import { type Sealer, sharedSealer } from '../domain/pagination.ts'
import { ApiError } from '../errors.ts'
import { backgroundJob } from '../observability/background.ts'
import { type FeedEvent, type FeedPosition, STREAM_POSITIONS_SECRET } from '../store/types.ts'

/** How often the feed reads the store: an event reaches every instance's streams within this and a read. */
const POLL_MS = 200
const FEED_PAGE = 500
const REPLAY_PAGE = 200
/** How long a client waits before it reconnects, told once at the start of the stream. */
const RETRY_MS = 2000
/** A client that does not read: past this much unsent, its stream is cut, and it resumes by Last-Event-ID. */
const MAX_BACKLOG_BYTES = 1 << 20
/**
 * How often each stream's key is checked (decision 120): a revoked one ends its streams within this
 * on the instance that revoked it, and within API_KEY_CACHE_SECONDS more on the others.
 */
const KEY_CHECK_MS = 1000
/** At a shutdown, how long a stream has to take its end before its connection is cut. */
const END_GRACE_MS = 1000

declare module 'fastify' {
  interface FastifyInstance {
    eventStreams: EventStreams
  }
}

export interface EventStreams {
  /** Answers the request with a stream of the caller's account's events (of `types`, or of all). */
  open(request: FastifyRequest, reply: FastifyReply, types: readonly AnyEventType[] | null): Promise<FastifyReply>
}

interface Stream {
  accountId: number
  types: ReadonlySet<AnyEventType> | null
  body: PassThrough
  /** The last event written, or where the stream started. */
  position: FeedPosition
  /** The position of the last id the client was sent (an event's, or a position frame's). */
  announced: FeedPosition
  /** Following the feed; until then, replaying from the store. */
  live: boolean
  /** Ends it at once, with its connection. */
  cut(): void
  /** The request's Authorization header: a key revoked or expired since ends the stream. */
  authorization: string | undefined
  /** A look-up of its key is under way (the key was not cached): none other is started meanwhile. */
  checking: boolean
}

/** Whether the client asks for the stream (an EventSource sends `Accept: text/event-stream`). */
export function wantsEventStream(accept: string | undefined): boolean {
  if (accept === undefined) return false
  return accept.split(',').some((range) => {
    const [type = '', ...params] = range.split(';')
    if (type.trim().toLowerCase() !== 'text/event-stream') return false
    // q=0: "not acceptable" (RFC 9110 §12.4.2).
    const q = params.map((param) => param.trim().toLowerCase()).find((param) => param.startsWith('q='))
    return q === undefined || Number(q.slice(2)) > 0
  })
}

function isAfter(a: FeedPosition, b: FeedPosition): boolean {
  return a.tx > b.tx || (a.tx === b.tx && a.seq > b.seq)
}

/**
 * A position of the feed as an id its client sends back as Last-Event-ID (decision 121): where the
 * stream began, or, later, where it stands. Sealed, as cursors are: a position is a sequence every
 * account shares, and the id carries when it was given, so that one older than the log keeps is refused.
 */
function positionIds(sealed: Sealer) {
  return {
    // At a fixed width, as cursors: the id's length tells nothing of the position either.
    make: (position: FeedPosition) =>
      `pos_${sealed.seal(`${String(position.tx).padStart(20, '0')}.${String(position.seq).padStart(16, '0')}.${Date.now()}`)}`,
    read(id: string): { position: FeedPosition; at: number } | null {
      const payload = id.startsWith('pos_') ? sealed.open(id.slice(4)) : null
      const [tx = '', seq = '', at = ''] = payload?.split('.') ?? []
      return payload === null ? null : { position: { tx: BigInt(tx), seq: Number(seq) }, at: Number(at) }
    },
  }
}

/**
 * A position as a frame: its `id:`, with data (parsers pass on no frame without), of its own type,
 * which an EventSource's onmessage does not get (yet it keeps the id, to resume with).
 */
function positionFrame(id: string): string {
  return `id: ${id}\nevent: position\ndata: ${JSON.stringify({ position: id })}\n\n`
}

/** One event as the stream sends it: its id (what Last-Event-ID names), its type, the event as GET returns it. */
function frame({ event }: FeedEvent): string {
  return `id: ${event.id}\nevent: ${event.type}\ndata: ${JSON.stringify(event)}\n\n`
}

export default fp<{ config: Config }>(
  async (app, { config }) => {
    const { store } = app
    const streams = new Set<Stream>()
    /** The open streams of each account: the feed hands an event only to its account's. */
    const byAccount = new Map<number, Set<Stream>>()
    const perKey = new Map<string, number>()
    // Streams open and opening: the feed stops when none is left. Not `streams.size`: a stream still
    // opening counts, or a refusal beside it would stop the feed it has just joined (and it would
    // never go live).
    let holders = 0
    // From preClose on: a stream still opening then is ended as soon as it opens.
    let closing = false
    // Where the feed stands: every event at or before it was handed to the live streams. Null while no stream is open.
    let position: FeedPosition | null = null
    let reading = false
    // An outage is logged once, when the feed first fails, not at every poll.
    const feed = backgroundJob(app.log, 'event stream: reading the feed')
    let timers: NodeJS.Timeout[] = []
    /** Position ids, sealed with a key every instance shares: made at the first stream (a read of the store). */
    let ids: ReturnType<typeof positionIds> | null = null

    /** Writes; a live stream whose client has stopped reading is cut instead (it resumes where it got to). */
    function write(stream: Stream, text: string): void {
      if (stream.body.destroyed) return
      stream.body.write(text)
      if (stream.live && stream.body.writableLength + stream.body.readableLength > MAX_BACKLOG_BYTES) {
        stream.body.destroy()
      }
    }

    function send(stream: Stream, event: FeedEvent, text = frame(event)): void {
      stream.position = event.position
      if (stream.types !== null && !stream.types.has(event.event.type)) return
      stream.announced = event.position
      write(stream, text)
    }

    /**
     * Keeps the connection alive and, on a live stream, gives its client a fresh id to resume from:
     * where the log stands, or the last id it was sent when that is further on (a resume from another
     * instance's event). Every heartbeat, whether or not the log moved: one that came only when it
     * moved would tell an account when others write, and a quiet log's id would age out (410).
     */
    function heartbeat(stream: Stream, made: Map<FeedPosition, string>): void {
      let text = ': heartbeat\n\n'
      if (stream.live && position !== null && ids !== null) {
        if (isAfter(position, stream.announced)) stream.announced = position
        const at = stream.announced
        const id = made.get(at) ?? ids.make(at)
        made.set(at, id)
        text += positionFrame(id)
      }
      write(stream, text)
    }

    /** A replay goes at the client's pace: the next page is read once this one has been taken. */
    function drained(body: PassThrough): Promise<void> {
      if (!body.writableNeedDrain || body.destroyed) return Promise.resolve()
      return new Promise((resolve) => {
        const done = () => {
          body.off('drain', done).off('close', done)
          resolve()
        }
        body.on('drain', done).on('close', done)
      })
    }

    async function readFeed(): Promise<void> {
      for (;;) {
        if (position === null) return
        const page = await store.eventFeed(position, FEED_PAGE)
        if (position === null) return
        // One write per stream and read, however many events: a write is most of a stream's cost.
        const batches = new Map<Stream, string[]>()
        for (const event of page.events) {
          let text: string | undefined
          for (const stream of byAccount.get(event.accountId) ?? []) {
            if (!stream.live || !isAfter(event.position, stream.position)) continue
            stream.position = event.position
            if (stream.types !== null && !stream.types.has(event.event.type)) continue
            stream.announced = event.position
            text ??= frame(event)
            const batch = batches.get(stream)
            if (batch) batch.push(text)
            else batches.set(stream, [text])
          }
        }
        for (const [stream, texts] of batches) write(stream, texts.join(''))
        position = page.position
        if (page.events.length < FEED_PAGE) return
      }
    }

    function poll(): void {
      if (reading) return
      reading = true
      readFeed()
        .then(feed.worked, feed.failed)
        .finally(() => {
          reading = false
        })
    }

    /** Starts the feed at the store's head when the first stream opens; where it stands. */
    async function join(): Promise<FeedPosition> {
      if (position === null) {
        const head = await store.eventFeedHead()
        if (position === null) {
          position = head
          timers = [
            setInterval(poll, POLL_MS).unref(),
            setInterval(() => {
              // One id per position and beat, whatever the number of streams at it.
              const made = new Map<FeedPosition, string>()
              for (const stream of streams) heartbeat(stream, made)
            }, config.eventStreamHeartbeatMs).unref(),
            setInterval(endRefused, KEY_CHECK_MS).unref(),
          ]
        }
      }
      return position
    }

    /** Ends the streams whose key would be refused now (revoked, expired), as its requests are. */
    function endRefused(): void {
      for (const stream of streams) {
        if (stream.checking) continue
        const admitted = app.admits(stream.authorization)
        if (admitted === false) stream.cut()
        else if (admitted !== true) {
          stream.checking = true
          // A failed look-up (the database away) leaves the stream open: its key was good, and the next check tries again.
          admitted
            .then(
              (ok) => ok || stream.cut(),
              () => {},
            )
            .finally(() => {
              stream.checking = false
            })
        }
      }
    }

    function stopFeed(): void {
      for (const timer of timers) clearInterval(timer)
      timers = []
      position = null
    }

    /** Replays from the store up to where the feed stands, then follows the feed (without a turn in between). */
    async function catchUp(stream: Stream): Promise<void> {
      const types = stream.types && [...stream.types]
      for (;;) {
        const upto = position
        if (upto === null || stream.body.destroyed) return
        if (!isAfter(upto, stream.position)) {
          stream.live = true
          return
        }
        const options = { accountId: stream.accountId, after: stream.position, upto, limit: REPLAY_PAGE }
        const events = await store.accountEvents(types ? { ...options, types } : options)
        for (const event of events) send(stream, event)
        await drained(stream.body)
        if (events.length < REPLAY_PAGE && isAfter(upto, stream.position)) stream.position = upto
      }
    }

    /** Where a new stream starts: where the feed stands, or after the event or position a reconnecting client names. */
    async function startAt(accountId: number, lastEventId: string | null): Promise<FeedPosition> {
      ids ??= positionIds(await sharedSealer(store, STREAM_POSITIONS_SECRET, 'stream position'))
      const head = await join()
      if (lastEventId === null) return head
      const given = ids.read(lastEventId)
      // Older than the log keeps, events after it may be gone; ahead of the log (a database restored
      // from a backup since), the events to come would sort behind it: either way, a gap, refused.
      const usable =
        given !== null &&
        Date.now() - given.at < config.eventRetentionMs &&
        // The store's head only when past this instance's feed (one read per resume after a deploy is many).
        (!isAfter(given.position, head) || !isAfter(given.position, await store.eventFeedHead()))
      if (usable) return given.position
      const found = given === null ? await store.eventPosition(accountId, lastEventId) : null
      if (found !== null) return found
      throw new ApiError(
        'last_event_id_unknown',
        `Last-Event-ID ${JSON.stringify(lastEventId.slice(0, 100))} is not in this account's event log: it was pruned (events are kept EVENT_RETENTION_DAYS) or never existed. Catch up with GET /v1/events?createdAfter=…, then open a stream without Last-Event-ID.`,
      )
    }

    async function open(request: FastifyRequest, reply: FastifyReply, types: readonly AnyEventType[] | null) {
      const { accountId, keyId } = request.caller
      const held = perKey.get(keyId) ?? 0
      if (held >= config.eventStreamsPerKey) {
        throw new ApiError(
          'too_many_streams',
          `This API key already holds ${held} event streams on this instance, the most it may (EVENT_STREAMS_PER_KEY): close one first.`,
        )
      }
      // The slot is taken before the first wait, so that streams opened at once cannot pass the bound together.
      perKey.set(keyId, held + 1)
      holders++
      const release = () => {
        const left = (perKey.get(keyId) ?? 1) - 1
        if (left === 0) perKey.delete(keyId)
        else perKey.set(keyId, left)
        if (--holders === 0) stopFeed()
      }
      const header = request.headers['last-event-id']
      const lastEventId = typeof header === 'string' && header !== '' ? header : null
      let start: FeedPosition
      try {
        start = await startAt(accountId, lastEventId)
      } catch (error) {
        release()
        throw error
      }
      const { socket } = request.raw
      const body = new PassThrough()
      const mine = byAccount.get(accountId) ?? new Set<Stream>()
      const done = () => {
        socket.off('end', cut)
        if (!streams.delete(stream)) return
        mine.delete(stream)
        if (mine.size === 0 && byAccount.get(accountId) === mine) byAccount.delete(accountId)
        release()
      }
      const cut = () => {
        body.destroy()
        reply.raw.destroy()
        done()
      }
      const stream: Stream = {
        accountId,
        types: types && new Set(types),
        body,
        position: start,
        announced: start,
        live: false,
        cut,
        authorization: request.headers.authorization,
        checking: false,
      }
      streams.add(stream)
      byAccount.set(accountId, mine.add(stream))
      reply.raw.once('close', cut)
      body.once('close', done)
      // A client that goes away half-closes: the server's side stays open (HTTP's allowHalfOpen) until a write fails.
      socket.once('end', cut)
      // The heartbeat keeps the connection alive: the idle timeout is for requests, not for streams.
      socket.setTimeout(0)
      // A fresh stream says where it starts, so that a connection lost before its first event resumes from there.
      const begun = lastEventId !== null || ids === null ? '' : positionFrame(ids.make(start))
      body.write(`retry: ${RETRY_MS}\n\n${begun}`)
      // Opened while the instance began to stop: ended at once, as the others were.
      if (closing) {
        body.end()
      } else {
        catchUp(stream).catch((err) => {
          request.log.warn({ err }, 'event stream: replay failed')
          body.destroy()
        })
      }
      return (
        reply
          .header('content-type', 'text/event-stream; charset=utf-8')
          .header('cache-control', 'no-store')
          // nginx passes it on as it comes, whatever its proxy_buffering.
          .header('x-accel-buffering', 'no')
          .send(stream.body)
      )
    }

    app.decorate('eventStreams', { open })
    // Streams end cleanly when the instance stops: clients reconnect, elsewhere, with Last-Event-ID.
    // One whose client has stopped reading would never finish, and hold the close up: cut after a while.
    app.addHook('preClose', (done) => {
      closing = true
      const ending = [...streams]
      for (const stream of ending) stream.body.end()
      if (ending.length > 0) {
        setTimeout(() => {
          for (const stream of ending) if (streams.has(stream)) stream.cut()
        }, END_GRACE_MS).unref()
      }
      stopFeed()
      done()
    })
  },
  { name: 'event-stream', dependencies: ['store', 'auth'] },
)
