/**
 * How a background job (a sweep, a poll) reports failing: once when it starts failing, and once
 * when it works again, not at every turn. A database outage is one line without a stack, as a
 * request's is (src/plugins/error-handler.ts); anything else keeps its stack.
 */
import type { FastifyBaseLogger } from 'fastify'
import { DatabaseUnavailableError } from '../errors.ts'

export interface BackgroundJob {
  /** Reports a failed turn: logged when the previous turn did not fail. */
  failed(err: unknown): void
  /** Reports a turn that worked: logged when the previous one failed. */
  worked(): void
}

export function backgroundJob(log: FastifyBaseLogger, what: string): BackgroundJob {
  let failing = false
  return {
    failed(err) {
      if (failing) return
      failing = true
      const detail = err instanceof DatabaseUnavailableError ? { detail: err.message } : { err }
      log.warn(detail, `${what} failed; trying again at every turn`)
    },
    worked() {
      if (!failing) return
      failing = false
      log.info(`${what} works again`)
    },
  }
}
