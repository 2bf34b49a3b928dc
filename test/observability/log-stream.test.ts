import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { closeSync, constants, mkdtempSync, openSync, readFileSync, readSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, it } from 'node:test'
import { bufferedLogStream } from '../../src/observability/log-stream.ts'
import { until } from '../wait.ts'

function logFile() {
  const path = join(mkdtempSync(join(tmpdir(), 'log-stream-')), 'out.log')
  return { fd: openSync(path, 'w'), read: () => readFileSync(path, 'utf8') }
}

const DROPPED = 'log lines dropped: standard output was not read'

/** A named pipe: the stream writes to its end as a shell's pipe (blocking); the test reads when it chooses. */
function pipe() {
  const path = join(mkdtempSync(join(tmpdir(), 'log-pipe-')), 'stdout')
  execFileSync('mkfifo', [path])
  const reader = openSync(path, constants.O_RDONLY | constants.O_NONBLOCK)
  const writer = openSync(path, constants.O_WRONLY)
  const chunks: Buffer[] = []
  /** Everything the pipe holds now. */
  const read = () => {
    const buffer = Buffer.alloc(65_536)
    for (;;) {
      try {
        const n = readSync(reader, buffer)
        if (n === 0) return
        chunks.push(Buffer.from(buffer.subarray(0, n)))
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code === 'EAGAIN') return
        throw error
      }
    }
  }
  const text = () => Buffer.concat(chunks).toString()
  /** What was read, as JSON lines. */
  const entries = () =>
    text()
      .trimEnd()
      .split('\n')
      .map((line) => JSON.parse(line))
  return { reader, writer, read, text, entries }
}

describe('bufferedLogStream', () => {
  it('a reader that stops reading stops nothing: writes return, and every line arrives, in order, once it reads again', {
    timeout: 10_000,
  }, () => {
    const out = pipe()
    const stream = bufferedLogStream(out.writer, 4096, 60_000, { exitWaitMs: 50 })
    // About 230 KB: more than a pipe holds (64 KiB). A blocking write would wait here for ever.
    const lines = Array.from({ length: 2000 }, (_, i) => `{"n":${i},"pad":"${'x'.repeat(100)}"}\n`)
    for (const line of lines) stream.write(line)
    stream.flushSync()
    out.read()
    assert.ok(out.text().length < lines.join('').length, 'the pipe took it all: nothing was tested')
    for (let i = 0; i < 50 && out.text().length < lines.join('').length; i++) {
      stream.flushSync()
      out.read()
    }
    assert.equal(out.text(), lines.join(''))
  })

  it('past its bound, drops lines while the reader does not read, and says how many bytes once it does', {
    timeout: 10_000,
  }, () => {
    const out = pipe()
    const stream = bufferedLogStream(out.writer, 1024, 60_000, { maxPendingBytes: 10_000, exitWaitMs: 20 })
    const lines = Array.from({ length: 1000 }, (_, i) => `{"n":${i},"pad":"${'x'.repeat(100)}"}\n`)
    for (const line of lines) stream.write(line)
    for (let i = 0; i < 50; i++) {
      stream.flushSync()
      out.read()
    }
    const received = out.entries()
    const notices = received.filter((entry) => entry.msg === DROPPED)
    assert.equal(notices.length, 1)
    const [notice] = notices
    assert.equal(notice.level, 40)
    // In the place of the lines dropped: those before it and after it are each in order, and none missing around it.
    const at = received.indexOf(notice)
    assert.ok(at > 0, 'the notice came before any line')
    const kept = received.filter((line) => line !== notice).map((line) => line.n as number)
    assert.deepEqual(
      kept,
      [...kept].sort((a, b) => a - b),
      'lines reordered',
    )
    assert.ok(kept.length < lines.length && kept.length > 500, `kept ${kept.length}`)
    // Whole chunks are dropped, and counted to the byte.
    const keptBytes = kept.reduce((sum, n) => sum + Buffer.byteLength(lines[n] as string), 0)
    assert.equal(notice.droppedBytes, Buffer.byteLength(lines.join('')) - keptBytes)
    // The lines dropped are exactly those between the ones around the notice.
    const before = received[at - 1].n as number
    const after = (received[at + 1]?.n as number | undefined) ?? lines.length
    const gapBytes = lines.slice(before + 1, after).reduce((sum, line) => sum + Buffer.byteLength(line), 0)
    assert.equal(notice.droppedBytes, gapBytes)
  })

  it('after dropping, resumes as soon as the reader reads, with lines still coming (no pause, no flushSync needed)', {
    timeout: 10_000,
  }, () => {
    const out = pipe()
    const stream = bufferedLogStream(out.writer, 4096, 60_000, { maxPendingBytes: 100_000 })
    const line = (phase: number, i: number) => `{"phase":${phase},"n":${i},"pad":"${'x'.repeat(100)}"}\n`
    // The reader does not read: the pipe fills, then the bound, then lines are dropped.
    for (let i = 0; i < 2000; i++) stream.write(line(1, i))
    // It reads again, after every line, while lines keep coming.
    for (let i = 0; i < 5000; i++) {
      stream.write(line(2, i))
      out.read()
    }
    const received = out.entries()
    const notice = received.find((entry) => entry.msg === DROPPED)
    assert.ok(notice?.droppedBytes > 0, 'no notice of the dropped lines')
    const resumed = received.filter((entry) => entry.phase === 2).map((entry) => entry.n as number)
    // All but the last chunk, still gathering, of the lines written while it reads again.
    assert.ok(resumed.length > 4900, `only ${resumed.length} of the 5000 lines after the reader resumed`)
    assert.deepEqual(
      resumed,
      [...resumed].sort((a, b) => a - b),
      'lines reordered',
    )
    // The notice stands where the lines were dropped: after the kept phase-1 lines, before phase 2's.
    const at = received.indexOf(notice)
    assert.ok(received.slice(0, at).every((entry) => entry.phase === 1))
  })

  it('once the reader reads again, what it left drains by itself: no new lines, no flush interval, no flushSync', {
    timeout: 10_000,
  }, async () => {
    const out = pipe()
    const stream = bufferedLogStream(out.writer, 4096, 60_000)
    // About 1.2 MB, 18 times what the pipe holds, written while nobody reads.
    const lines = Array.from({ length: 10_000 }, (_, i) => `{"n":${i},"pad":"${'x'.repeat(100)}"}\n`)
    for (const line of lines) stream.write(line)
    const kept = lines.join('').length - 4096 * 2
    // The pipe says nothing when there is room again: read it as a reader would, until drained.
    await until(
      'drained',
      () => {
        out.read()
        return out.text().length >= kept
      },
      { timeoutMs: 8000, everyMs: 5 },
    ).catch(() => {}) // the assertion below says how far it got
    // All but the last chunk, still gathering for the flush interval.
    assert.ok(out.text().length >= kept, `${out.text().length} of ${kept} bytes drained`)
    assert.ok(lines.join('').startsWith(out.text()), 'lines reordered or cut')
  })

  it('a reader that has gone (EPIPE): lines are thrown away without an error, and flushSync returns', () => {
    const out = pipe()
    closeSync(out.reader)
    const stream = bufferedLogStream(out.writer, 1024, 60_000)
    for (let i = 0; i < 100; i++) stream.write(`{"n":${i}}\n`)
    stream.flushSync()
  })

  it('writes lines in whole chunks once they reach the chunk size, in order', () => {
    const file = logFile()
    const stream = bufferedLogStream(file.fd, 100, 60_000)
    const lines = Array.from({ length: 12 }, (_, i) => `{"n":${i},"pad":"${'x'.repeat(10)}"}\n`)
    for (const line of lines.slice(0, 3)) stream.write(line)
    assert.equal(file.read(), '', 'written before a chunk was full')
    for (const line of lines.slice(3)) stream.write(line)
    const written = file.read()
    assert.ok(written.length >= 100 && written.endsWith('\n'), `not whole chunks: ${JSON.stringify(written)}`)
    assert.ok(lines.join('').startsWith(written), 'lines reordered or cut')
    stream.flushSync()
    assert.equal(file.read(), lines.join(''))
  })

  it('writes what is gathered at least every flush interval', (t) => {
    t.mock.timers.enable({ apis: ['setInterval', 'setTimeout'] }) // time itself is the subject
    const file = logFile()
    const stream = bufferedLogStream(file.fd, 4096, 50)
    stream.write('{"msg":"alone"}\n')
    t.mock.timers.tick(49)
    assert.equal(file.read(), '', 'written before the flush interval')
    t.mock.timers.tick(1)
    assert.equal(file.read(), '{"msg":"alone"}\n')
  })

  it('keeps characters beyond ASCII whole, also where a chunk ends', () => {
    const file = logFile()
    const stream = bufferedLogStream(file.fd, 64, 60_000)
    const lines = Array.from({ length: 20 }, (_, i) => `{"n":${i},"name":"Café 🐶 ${'é'.repeat(i)}"}\n`)
    for (const line of lines) stream.write(line)
    stream.flushSync()
    assert.equal(file.read(), lines.join(''))
  })

  it('writes a line longer than a chunk whole, after the lines gathered before it', () => {
    const file = logFile()
    const stream = bufferedLogStream(file.fd, 100, 60_000)
    const long = `{"stack":"${'x'.repeat(1000)}"}\n`
    stream.write('{"n":1}\n')
    stream.write(long)
    assert.equal(file.read(), `{"n":1}\n${long}`)
    stream.write('{"n":2}\n')
    stream.flushSync()
    assert.equal(file.read(), `{"n":1}\n${long}{"n":2}\n`)
  })
})
