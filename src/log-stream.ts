/**
 * The process's log stream (stdout): lines are gathered in memory and written 4 KiB at a time,
 * and at least every second, through sonic-boom (pino's writer: synchronous writes, retried when
 * the pipe is full). sonic-boom's own buffering (its `minLength`) measures the whole pending
 * buffer on every line, a Buffer.byteLength of a growing string; an array joined once per chunk
 * does not, and made the request log's line cost several times less.
 */
import pino, { type DestinationStream } from 'pino'

export interface LogStream extends DestinationStream {
  /** Writes what is gathered, and waits until it is written (at shutdown, at exit). */
  flushSync(): void
}

export function bufferedLogStream(fd: number, chunkBytes: number, flushMs: number): LogStream {
  const out = pino.destination({ dest: fd, sync: true })
  let lines: string[] = []
  let length = 0
  const flush = () => {
    if (lines.length === 0) return
    const chunk = lines.join('')
    lines = []
    length = 0
    out.write(chunk)
  }
  setInterval(flush, flushMs).unref()
  return {
    write(line: string) {
      lines.push(line)
      length += line.length
      if (length >= chunkBytes) flush()
    },
    flushSync() {
      flush()
      out.flushSync()
    },
  }
}
