/**
 * The process's log stream (stdout): lines are encoded into a buffer as they come and written
 * once it holds `chunkBytes`, and at least every `flushMs`, through sonic-boom (pino's writer:
 * synchronous writes, retried when the pipe is full). Encoding each line once, into the chunk,
 * costs less than gathering strings to join, measure and encode again per chunk, and much less
 * than sonic-boom's own buffering (its `minLength`), which measures the whole pending string on
 * every line.
 */
import pino, { type DestinationStream } from 'pino'

export interface LogStream extends DestinationStream {
  /** Writes what is gathered, and waits until it is written (at shutdown, at exit). */
  flushSync(): void
}

/** UTF-8 takes at most 3 bytes per UTF-16 code unit (a surrogate pair takes 4 for 2 units). */
const MAX_BYTES_PER_UNIT = 3

export function bufferedLogStream(fd: number, chunkBytes: number, flushMs: number): LogStream {
  const out = pino.destination({ dest: fd, sync: true, contentMode: 'buffer' })
  // Room for a chunk and the line that completes it, so that chunks are whole lines of about chunkBytes.
  const capacity = 2 * chunkBytes
  let chunk = Buffer.allocUnsafe(capacity)
  let used = 0
  const flush = () => {
    if (used === 0) return
    // sonic-boom may keep the buffer until the write succeeds: the next lines go into a new one.
    out.write(chunk.subarray(0, used) as unknown as string)
    chunk = Buffer.allocUnsafe(capacity)
    used = 0
  }
  setInterval(flush, flushMs).unref()
  return {
    write(line: string) {
      const most = line.length * MAX_BYTES_PER_UNIT
      if (most > capacity - used) {
        flush()
        // A line longer than a chunk goes alone, as it is.
        if (most > capacity) return void out.write(Buffer.from(line) as unknown as string)
      }
      used += chunk.write(line, used)
      if (used >= chunkBytes) flush()
    },
    flushSync() {
      flush()
      out.flushSync()
    },
  }
}
