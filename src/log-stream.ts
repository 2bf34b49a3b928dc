/**
 * The process's log stream (stdout): lines are encoded into a buffer as they come and written
 * once it holds `chunkBytes`, and at least every `flushMs`. Encoding each line once, into the
 * chunk, costs less than gathering strings to join, measure and encode again per chunk.
 *
 * Writes are synchronous (one write(2) per chunk), but never wait for the reader: on a pipe, the
 * stream writes through its own non-blocking description of it. A reader that stops reading (a
 * stuck log shipper, a paused pipe) would otherwise block the write, and with it every request,
 * health check and shutdown of the process, until it read again. Chunks it has not taken yet are
 * kept, in order, and written as soon as it takes them; past `maxPendingBytes` new lines are
 * dropped, and a line says how many bytes were lost once writing resumes.
 */
import { constants, fstatSync, openSync, writeSync } from 'node:fs'
import type { DestinationStream } from 'pino'

export interface LogStream extends DestinationStream {
  /** Writes what is gathered, waiting up to `exitWaitMs` for a reader that is slow (at shutdown, at exit). */
  flushSync(): void
}

export interface LogStreamLimits {
  /** Bytes kept while the reader does not read; later lines are dropped (and counted). */
  maxPendingBytes?: number
  /** How long `flushSync` waits for a reader that does not take the last lines. */
  exitWaitMs?: number
}

/** UTF-8 takes at most 3 bytes per UTF-16 code unit (a surrogate pair takes 4 for 2 units). */
const MAX_BYTES_PER_UNIT = 3
const MAX_PENDING_BYTES = 16 * 1024 * 1024
const EXIT_WAIT_MS = 1000
const RETRY_SLEEP_MS = 10

/**
 * A pipe's own non-blocking description, opened through /proc (Linux). Setting O_NONBLOCK on the
 * inherited one would change it for every process that shares it (the shell, npm); anything else
 * (a file, a terminal, a socket, another OS) is written as it is.
 */
function nonBlocking(fd: number): number {
  try {
    if (fstatSync(fd).isFIFO()) return openSync(`/proc/self/fd/${fd}`, constants.O_WRONLY | constants.O_NONBLOCK)
  } catch {
    // No /proc, or the pipe has no reader left: write to the descriptor given.
  }
  return fd
}

function sleepSync(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms)
}

export function bufferedLogStream(
  fd: number,
  chunkBytes: number,
  flushMs: number,
  { maxPendingBytes = MAX_PENDING_BYTES, exitWaitMs = EXIT_WAIT_MS }: LogStreamLimits = {},
): LogStream {
  const out = nonBlocking(fd)
  /** Chunks the reader has not taken yet, oldest first (the first may be partly written). */
  const pending: Buffer[] = []
  let pendingBytes = 0
  let droppedBytes = 0
  /** The reader is gone (EPIPE) or the descriptor unusable: nothing can be written any more. */
  let broken = false

  /** Writes what is pending, as far as the reader takes it; true when nothing is left. */
  const drain = (): boolean => {
    while (pending.length > 0) {
      const head = pending[0] as Buffer
      let written: number
      try {
        written = writeSync(out, head)
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code === 'EAGAIN') return false
        broken = true
        pending.length = 0
        pendingBytes = 0
        return true
      }
      pendingBytes -= written
      if (written < head.length) pending[0] = head.subarray(written)
      else pending.shift()
    }
    if (droppedBytes > 0) {
      const notice = `{"level":40,"time":${Date.now()},"pid":${process.pid},"msg":"log lines dropped: standard output was not read","droppedBytes":${droppedBytes}}\n`
      droppedBytes = 0
      send(Buffer.from(notice))
    }
    return true
  }

  const send = (bytes: Buffer) => {
    if (broken) return
    if (pendingBytes + bytes.length > maxPendingBytes) {
      droppedBytes += bytes.length
      return
    }
    pending.push(bytes)
    pendingBytes += bytes.length
    drain()
  }

  // Room for a chunk and the line that completes it, so that chunks are whole lines of about chunkBytes.
  const capacity = 2 * chunkBytes
  let chunk = Buffer.allocUnsafe(capacity)
  let used = 0
  const flush = () => {
    if (used === 0) {
      // Nothing new: try again what the reader did not take last time.
      if (pending.length > 0) drain()
      return
    }
    // A chunk may wait in `pending`: the next lines go into a new one.
    send(chunk.subarray(0, used))
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
        if (most > capacity) return void send(Buffer.from(line))
      }
      used += chunk.write(line, used)
      if (used >= chunkBytes) flush()
    },
    flushSync() {
      flush()
      const deadline = Date.now() + exitWaitMs
      while (!drain() && Date.now() < deadline) sleepSync(RETRY_SLEEP_MS)
    },
  }
}
