/**
 * A node:test reporter (scripts/test.ts adds it to the whole suite's run): the seconds each file's
 * tests took, slowest first, so that whoever makes the suite slower sees where
 * (coverage/<database>.times).
 */
import { relative } from 'node:path'
import type { TestEvent } from 'node:test/reporters'

export default async function* fileTimes(source: AsyncIterable<TestEvent>): AsyncGenerator<string> {
  const seconds = new Map<string, number>()
  for await (const event of source) {
    if (event.type !== 'test:pass' && event.type !== 'test:fail') continue
    const { file, nesting, details } = event.data
    // Top-level tests and suites only: their durations hold their children's.
    if (file && nesting === 0) seconds.set(file, (seconds.get(file) ?? 0) + details.duration_ms / 1000)
  }
  const rows = [...seconds].sort((a, b) => b[1] - a[1])
  for (const [file, s] of rows) yield `${s.toFixed(1).padStart(7)} s  ${relative('.', file)}\n`
  const total = rows.reduce((sum, [, s]) => sum + s, 0)
  yield `${total.toFixed(1).padStart(7)} s  in all (files run side by side)\n`
}
