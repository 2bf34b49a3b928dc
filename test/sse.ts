/**
 * The live event stream as a test reads it: Server-Sent Events parsed into frames by hand, so that
 * the tests see the wire exactly as the server writes it.
 */
const STREAM = { accept: 'text/event-stream' }

export interface Frame {
  id?: string
  event?: string
  data?: string
  retry?: string
  comment?: string
}

/** A live stream read as frames: `next()` resolves with the next one, `closed` when the server ends it. */
export interface EventStream {
  status: number
  headers: Headers
  /** The body of a refusal (JSON), or '' for a stream. */
  error: string
  next(ms?: number): Promise<Frame>
  closed: Promise<void>
  close(): void
}

function parseFrame(text: string): Frame {
  const frame: Frame = {}
  for (const line of text.split('\n')) {
    if (line.startsWith(':')) frame.comment = line.slice(1).trim()
    else {
      const at = line.indexOf(':')
      const field = line.slice(0, at) as keyof Frame
      frame[field] = `${frame[field] === undefined ? '' : `${frame[field]}\n`}${line.slice(at + 2)}`
    }
  }
  return frame
}

export async function openStream(url: string, headers: Record<string, string>): Promise<EventStream> {
  const abort = new AbortController()
  const response = await fetch(url, { headers: { ...STREAM, ...headers }, signal: abort.signal })
  const frames: Frame[] = []
  const waiting: Array<() => void> = []
  let ended = false
  let error = ''
  const closed = (async () => {
    if (!response.ok) {
      error = await response.text()
      return
    }
    let buffer = ''
    try {
      for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>) {
        buffer += Buffer.from(chunk).toString()
        let end = buffer.indexOf('\n\n')
        while (end !== -1) {
          frames.push(parseFrame(buffer.slice(0, end)))
          buffer = buffer.slice(end + 2)
          end = buffer.indexOf('\n\n')
        }
        for (const wake of waiting.splice(0)) wake()
      }
    } catch {
      // Aborted by close(), or cut by the server: either way, the stream is over.
    } finally {
      ended = true
      for (const wake of waiting.splice(0)) wake()
    }
  })()
  if (!response.ok) await closed
  return {
    status: response.status,
    headers: response.headers,
    get error() {
      return error
    },
    async next(ms = 5000) {
      const deadline = Date.now() + ms
      while (frames.length === 0) {
        if (ended) throw new Error('the stream ended')
        if (Date.now() > deadline) throw new Error(`no frame within ${ms} ms`)
        await new Promise<void>((resolve) => {
          waiting.push(resolve)
          setTimeout(resolve, 50)
        })
      }
      return frames.shift() as Frame
    },
    closed,
    close: () => abort.abort(),
  }
}

/** The `position` frame a stream opened without Last-Event-ID starts with: where it began, as its `id`. */
export const startOf = (frame: Frame) => (frame.event === 'position' ? frame.id : undefined)

/** The next event of the stream, skipping heartbeats and its start; its data parsed. */
export async function nextEvent(stream: EventStream, ms?: number) {
  for (;;) {
    const frame = await stream.next(ms)
    if (frame.data !== undefined && startOf(frame) === undefined)
      return { id: frame.id, event: frame.event, data: JSON.parse(frame.data) }
  }
}
