import assert from 'node:assert/strict'
import { mkdtempSync, openSync, readFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, it } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { bufferedLogStream } from '../src/log-stream.ts'

function logFile() {
  const path = join(mkdtempSync(join(tmpdir(), 'log-stream-')), 'out.log')
  return { fd: openSync(path, 'w'), read: () => readFileSync(path, 'utf8') }
}

describe('bufferedLogStream', () => {
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

  it('writes what is gathered at least every flush interval', async () => {
    const file = logFile()
    const stream = bufferedLogStream(file.fd, 4096, 50)
    stream.write('{"msg":"alone"}\n')
    for (let i = 0; i < 40 && file.read() === ''; i++) await sleep(25)
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
