/**
 * One measurement: a wrk run against a running target while its memory is sampled, and the probe
 * that proves a target answers each workload before any measuring.
 */
import { readFileSync } from 'node:fs'
import type { Fixtures } from './ceiling.ts'
import { cpuPressureMicros } from './report.ts'
import type { Settings } from './settings.ts'
import type { RunningTarget } from './targets.ts'
import { type Usage, UsageMeter } from './usage.ts'
import type { Workload } from './workloads.ts'
import { runWrk, type WrkResult } from './wrk.ts'

/** Response headers the ceiling repeats: those the routes set. Date, ids and lengths are per response. */
const ROUTE_HEADERS = ['content-type', 'link', 'location', 'deprecation', 'sunset']

/** Sends each workload's probe; fails unless every answer is 2xx. Returns the answers as fixtures. */
export async function probe(target: RunningTarget, workloads: Workload[]): Promise<Partial<Fixtures>> {
  const fixtures: Partial<Fixtures> = {}
  for (const workload of workloads) {
    if (!workload.probe) continue
    const { method, body } = workload.probe
    const response = await fetch(`${target.baseUrl}${workload.path}`, {
      method,
      body,
      headers: { authorization: `Bearer ${target.key}`, ...(body && { 'content-type': 'application/json' }) },
    })
    const text = await response.text()
    if (response.status >= 300) throw new Error(`${method} ${workload.path} answered ${response.status}: ${text}`)
    const headers = Object.fromEntries(
      ROUTE_HEADERS.flatMap((h) => (response.headers.has(h) ? [[h, response.headers.get(h) as string]] : [])),
    )
    fixtures[workload.name as keyof Fixtures] = { status: response.status, headers, body: text }
  }
  return fixtures
}

/** Resident memory of the processes now, in MB (VmRSS, which counts what is in RAM, not reserved). */
export function rssMb(pids: number[]): number {
  return statusMb(pids, 'VmRSS')
}

/** The part of the RSS that maps files (mostly the node executable), shared with other Node processes. */
export function fileBackedMb(pids: number[]): number {
  return statusMb(pids, 'RssFile')
}

function statusMb(pids: number[], field: string): number {
  let kb = 0
  for (const pid of pids) {
    try {
      const status = readFileSync(`/proc/${pid}/status`, 'utf8')
      kb += Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? 0)
    } catch {
      // The process is gone; its memory is not ours to count any more.
    }
  }
  return kb / 1024
}

/**
 * One wrk run, sampling the target's memory (the RSS is the highest sample) and where the CPU
 * went (bench/usage.ts) meanwhile.
 */
export async function measure(
  settings: Settings,
  target: RunningTarget,
  workload: Workload,
  seconds: number,
  pets: number,
): Promise<{ result: WrkResult; rssMb: number; contention: number | null; usage: Usage }> {
  const meter = new UsageMeter(() => target.pids, target.backends ?? null)
  await meter.start()
  const pressure = cpuPressureMicros()
  const startedAt = performance.now()
  let peak = rssMb(target.pids)
  const sampler = setInterval(() => {
    peak = Math.max(peak, rssMb(target.pids))
  }, 250)
  let result: WrkResult
  let usage: Usage
  try {
    result = await runWrk({
      cpu: settings.clientCpu,
      url: `${target.baseUrl}${workload.path}`,
      seconds,
      connections: settings.connections,
      script: workload.script,
      scriptArgs: workload.scriptArgs?.(target.key, pets),
      // Scripted workloads set the key themselves; the others get it as a plain header.
      headers: workload.script ? [] : [`Authorization: Bearer ${target.key}`],
      onSpawn: (pid) => meter.setWrk(pid),
    })
  } finally {
    clearInterval(sampler)
    usage = await meter.stop()
  }
  const after = cpuPressureMicros()
  // Percent of the run during which some task waited for a CPU: high means the numbers are suspect.
  const contention =
    pressure === null || after === null ? null : (after - pressure) / 10 / (performance.now() - startedAt)
  return { result, rssMb: Math.max(peak, rssMb(target.pids)), contention, usage: perRequest(usage, result) }
}

/** CPU microseconds per request: comparable across targets whose rates differ. */
export function perRequest(usage: Usage, result: WrkResult): Usage {
  const micros = (percent: number) =>
    result.requests ? ((percent / 100) * usage.wallSeconds * 1e6) / result.requests : 0
  return {
    ...usage,
    serviceMicrosPerRequest: micros(usage.service),
    databaseMicrosPerRequest: usage.database === null ? null : micros(usage.database),
    wrkMicrosPerRequest: micros(usage.wrk),
  }
}
