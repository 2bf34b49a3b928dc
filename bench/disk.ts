/**
 * What one fsync costs on this machine's disk, where the run's SQLite databases are. A durable
 * POST waits for one fsync per batch of writes, and the writer thread that makes it shares the
 * service's core: from one machine to another, this cost moves the POST's ratio to the ceiling
 * more than anything in the service does, so the report says what it was.
 */
import { closeSync, fsyncSync, openSync, rmSync, writeSync } from 'node:fs'
import { join } from 'node:path'
import { median } from './report.ts'

export interface FsyncCost {
  /** Median wall time of a write and its fsync, in µs. */
  wallMicros: number
  /** CPU time of this process per write and fsync (user and kernel), in µs. */
  cpuMicros: number
}

/** About what a batch of writes adds to SQLite's WAL: a few pages. */
const WRITE_BYTES = 16 * 1024
const TIMES = 200
const WARM_UP = 20

/** Writes 16 KiB at the start of a file in `dir` and fsyncs it, 200 times. */
export function fsyncCost(dir: string): FsyncCost {
  const path = join(dir, 'fsync-probe')
  const fd = openSync(path, 'w')
  const page = Buffer.alloc(WRITE_BYTES, 1)
  const walls: number[] = []
  try {
    for (let i = 0; i < WARM_UP; i++) {
      writeSync(fd, page, 0, page.length, 0)
      fsyncSync(fd)
    }
    const cpu = process.cpuUsage()
    for (let i = 0; i < TIMES; i++) {
      const start = process.hrtime.bigint()
      writeSync(fd, page, 0, page.length, 0)
      fsyncSync(fd)
      walls.push(Number(process.hrtime.bigint() - start) / 1000)
    }
    const used = process.cpuUsage(cpu)
    return { wallMicros: median(walls), cpuMicros: (used.user + used.system) / TIMES }
  } finally {
    closeSync(fd)
    rmSync(path, { force: true })
  }
}
