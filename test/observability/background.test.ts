import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import type { FastifyBaseLogger } from 'fastify'
import { pino } from 'pino'
import { DatabaseUnavailableError } from '../../src/errors.ts'
import { backgroundJob } from '../../src/observability/background.ts'

/** A real pino logger writing its lines into `lines`. */
function capture(): { log: FastifyBaseLogger; lines: Record<string, unknown>[] } {
  const lines: Record<string, unknown>[] = []
  const log = pino({ level: 'info' }, { write: (line: string) => void lines.push(JSON.parse(line)) })
  return { log: log as unknown as FastifyBaseLogger, lines }
}

describe('Background jobs', () => {
  it('log a failure once, not at every turn, and once more when they work again', () => {
    const { log, lines } = capture()
    const job = backgroundJob(log, 'order expiry sweep')
    job.worked()
    for (let i = 0; i < 5; i++) job.failed(new DatabaseUnavailableError('PostgreSQL is unreachable'))
    job.worked()
    job.worked()
    job.failed(new Error('boom'))
    assert.deepEqual(
      lines.map((line) => [line.level, line.msg]),
      [
        [40, 'order expiry sweep failed; trying again at every turn'],
        [30, 'order expiry sweep works again'],
        [40, 'order expiry sweep failed; trying again at every turn'],
      ],
    )
    // An outage in one line, as a request's: what is down, no stack. Anything else keeps its stack.
    assert.equal(lines[0]?.detail, 'PostgreSQL is unreachable')
    assert.equal(lines[0]?.err, undefined)
    assert.match(String((lines[2]?.err as { stack?: string })?.stack), /boom/)
  })
})
