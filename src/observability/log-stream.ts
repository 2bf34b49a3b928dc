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
 * dropped, and a line in their place says how many bytes were lost.
 */
import { constants, fstatSync, openSync, writeSync } from 'node:fs'
import { hostname } from 'node:os'
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
/**
 * How soon a chunk the reader did not take is tried again. The reader takes a pipe's 64 KiB at a
 * time: tried only as lines come or at the flush interval, a backlog would drain at 64 KiB a second
 * once traffic stops, and what it held at exit would be lost.
 */
const RETRY_MS = 1
const EMPTY = Buffer.alloc(0)

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
  /** Bytes the reader has not taken yet, oldest first: copies of their own size (see keep). */
  const pending: Buffer[] = []
  let pendingBytes = 0
  let droppedBytes = 0
  /** The reader is gone (EPIPE) or there is no stdout (EBADF): nothing can be written any more. */
  let broken = false

  /** How much of `bytes` the reader took: 0 when it took nothing (a full pipe, a full disk: tried again later). */
  const tryWrite = (bytes: Buffer): number => {
    try {
      return writeSync(out, bytes)
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code
      if (code === 'EPIPE' || code === 'EBADF') {
        broken = true
        pending.length = 0
        pendingBytes = 0
        droppedBytes = 0
      }
      return 0
    }
  }

  /** Writes what is pending, as far as the reader takes it; true when nothing is left. */
  const drain = (): boolean => {
    while (pending.length > 0) {
      const head = pending[0] as Buffer
      const written = tryWrite(head)
      if (written === 0) return broken
      pendingBytes -= written
      if (written < head.length) pending[0] = head.subarray(written)
      else pending.shift()
    }
    return true
  }

  const enqueue = (bytes: Buffer) => {
    pending.push(bytes)
    pendingBytes += bytes.length
  }

  /** The line that marks where lines were dropped, in their place. */
  const noteDropped = () => {
    if (droppedBytes === 0) return
    enqueue(
      Buffer.from(
        `{"level":40,"time":${Date.now()},"pid":${process.pid},"hostname":${JSON.stringify(hostname())},"msg":"log lines dropped: standard output was not read","droppedBytes":${droppedBytes}}\n`,
      ),
    )
    droppedBytes = 0
  }

  /**
   * Keeps what the reader did not take, as a copy of its own size: a chunk's buffer is larger than
   * what it holds, and a queue of slices would hold far more memory than it counts. Past the bound
   * whole chunks are dropped; the rest of a chunk written in part is always kept (a line is never cut).
   */
  const keep = (bytes: Buffer, started: boolean) => {
    if (!started && pendingBytes + bytes.length > maxPendingBytes) {
      droppedBytes += bytes.length
      return
    }
    noteDropped()
    enqueue(Buffer.from(bytes))
  }

  let retry: NodeJS.Timeout | null = null
  const retryLater = () => {
    if (retry !== null) return
    retry = setTimeout(() => {
      retry = null
      send(EMPTY)
    }, RETRY_MS).unref()
  }

  /** Writes `bytes` after what is pending, or keeps them until the reader takes them. */
  const send = (bytes: Buffer) => {
    if (broken) return
    // The notice of lines dropped goes out once the reader has taken what was kept before them.
    if (drain()) noteDropped()
    if (!drain()) {
      if (bytes.length > 0) keep(bytes, false)
      return retryLater()
    }
    if (bytes.length === 0) return
    const written = tryWrite(bytes)
    if (broken || written === bytes.length) return
    keep(bytes.subarray(written), written > 0)
    retryLater()
  }

  // Room for a chunk and the line that completes it, so that chunks are whole lines of about chunkBytes.
  const capacity = 2 * chunkBytes
  const chunk = Buffer.allocUnsafe(capacity)
  let used = 0
  const flush = () => {
    // Nothing new: still try again what the reader did not take, and say what was dropped.
    if (used === 0) return send(EMPTY)
    send(chunk.subarray(0, used))
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
      while ((pending.length > 0 || droppedBytes > 0) && !broken && Date.now() < deadline) {
        sleepSync(RETRY_MS)
        send(EMPTY)
      }
    },
  }
}
