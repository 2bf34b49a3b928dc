/**
 * Turns the measurements into the table: medians over rounds, each service's ratio to the ceiling
 * measured in the same round, and the targets of the issue. Also the machine line, since a number
 * without its machine means little.
 */
import { readFileSync } from 'node:fs'
import { availableParallelism, loadavg, release } from 'node:os'
import type { Usage } from './usage.ts'
import { P99_TARGET_MS, RSS_TARGET_MB, type Workload } from './workloads.ts'
import type { WrkResult } from './wrk.ts'

export interface Measurement {
  target: string
  workload: string
  round: number
  result: WrkResult
  /** Highest resident memory seen during the run, MB, summed over the target's processes. */
  rssMb: number
  /** Where the CPU went during the run. */
  usage?: Usage
}

export interface Row {
  workload: string
  target: string
  requestsPerSecond: number
  ceilingRequestsPerSecond: number | null
  ratio: number | null
  p50: number
  p99: number
  non2xx: number
  socketErrors: number
  rssMb: number
  /** Medians over the rounds of each figure of the runs' CPU usage. */
  usage: Usage | null
}

export function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b)
  const mid = Math.floor(sorted.length / 2)
  return sorted.length % 2 ? (sorted[mid] as number) : ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2
}

/**
 * One row per workload and target. The ratio is the median of per-round ratios: a service run and
 * the ceiling run right after it share the machine's mood of the moment, which the medians of each
 * side alone would not.
 */
export function summarise(measurements: Measurement[], workloads: Workload[], targets: string[]): Row[] {
  const rows: Row[] = []
  for (const workload of workloads) {
    const ceiling = measurements.filter((m) => m.workload === workload.name && m.target === 'ceiling')
    for (const target of targets) {
      const runs = measurements.filter((m) => m.workload === workload.name && m.target === target)
      if (runs.length === 0) continue
      const ratios = runs.flatMap((run) => {
        const pair = ceiling.find((c) => c.round === run.round)
        return pair && target !== 'ceiling' ? [run.result.requestsPerSecond / pair.result.requestsPerSecond] : []
      })
      rows.push({
        workload: workload.name,
        target,
        requestsPerSecond: median(runs.map((r) => r.result.requestsPerSecond)),
        ceilingRequestsPerSecond: ceiling.length ? median(ceiling.map((c) => c.result.requestsPerSecond)) : null,
        ratio: ratios.length ? median(ratios) : null,
        p50: median(runs.map((r) => r.result.p50)),
        p99: median(runs.map((r) => r.result.p99)),
        non2xx: runs.reduce((sum, r) => sum + r.result.non2xx, 0),
        socketErrors: runs.reduce((sum, r) => sum + r.result.socketErrors, 0),
        rssMb: Math.max(...runs.map((r) => r.rssMb)),
        usage: medianUsage(runs.flatMap((r) => (r.usage ? [r.usage] : []))),
      })
    }
  }
  return rows
}

/** Each figure's median over the runs (a core's busy share with that core's). */
export function medianUsage(usages: Usage[]): Usage | null {
  if (usages.length === 0) return null
  const of = (pick: (u: Usage) => number | null | undefined) => {
    const values = usages.flatMap((u) => {
      const value = pick(u)
      return value === null || value === undefined ? [] : [value]
    })
    return values.length ? median(values) : null
  }
  const cores = (usages[0] as Usage).cores.map((_, i) => of((u) => u.cores[i]) ?? 0)
  return {
    wallSeconds: of((u) => u.wallSeconds) ?? 0,
    service: of((u) => u.service) ?? 0,
    database: of((u) => u.database),
    wrk: of((u) => u.wrk) ?? 0,
    cores,
    activeBackends: of((u) => u.activeBackends),
    backends: of((u) => u.backends),
    serviceMicrosPerRequest: of((u) => u.serviceMicrosPerRequest) ?? 0,
    databaseMicrosPerRequest: of((u) => u.databaseMicrosPerRequest),
    wrkMicrosPerRequest: of((u) => u.wrkMicrosPerRequest) ?? 0,
  }
}

const fixed = (n: number, digits: number) => n.toFixed(digits)

/** A markdown table of the rows (service targets with their ratio; the ceiling on its own rows). */
export function table(rows: Row[], labels: Record<string, string>): string {
  const header = [
    'workload',
    'target',
    'req/s',
    'ceiling req/s',
    'ratio',
    'p50 ms',
    'p99 ms',
    'non-2xx',
    'socket errors',
    'RSS MB',
  ]
  const lines = rows.map((r) => [
    r.workload,
    labels[r.target] ?? r.target,
    fixed(r.requestsPerSecond, 0),
    r.target === 'ceiling' || r.ceilingRequestsPerSecond === null ? '' : fixed(r.ceilingRequestsPerSecond, 0),
    r.ratio === null ? '' : `${fixed(r.ratio, 2)}×`,
    fixed(r.p50, 2),
    fixed(r.p99, 2),
    String(r.non2xx),
    String(r.socketErrors),
    fixed(r.rssMb, 0),
  ])
  return markdownTable(header, lines, 2)
}

/** A markdown table whose columns from `firstNumeric` on are right-aligned. */
export function markdownTable(header: string[], lines: string[][], firstNumeric: number): string {
  const widths = header.map((h, i) => Math.max(h.length, ...lines.map((l) => (l[i] as string).length)))
  const numeric = (i: number) => i >= firstNumeric
  const format = (cells: string[]) =>
    `| ${cells.map((c, i) => (numeric(i) ? c.padStart(widths[i] as number) : c.padEnd(widths[i] as number))).join(' | ')} |`
  const rule = `| ${widths.map((w, i) => (numeric(i) ? `${'-'.repeat(w - 1)}:` : '-'.repeat(w))).join(' | ')} |`
  return [format(header), rule, ...lines.map(format)].join('\n')
}

/** Whether the issue's targets are met on `target`, one clause per target, e.g. "list20 ≥ 0.5×: no (0.31×)". */
export function targetsLine(rows: Row[], workloads: Workload[], target: string): string {
  const mine = rows.filter((r) => r.target === target)
  const clauses: string[] = []
  let met = 0
  const check = (ok: boolean, text: string) => {
    if (ok) met++
    clauses.push(`${text}: ${ok ? 'met' : 'not met'}`)
  }
  for (const workload of workloads) {
    const row = mine.find((r) => r.workload === workload.name)
    if (workload.target === undefined || row?.ratio == null) continue
    check(row.ratio >= workload.target, `${workload.name} ≥ ${workload.target}× (${fixed(row.ratio, 2)}×)`)
  }
  if (mine.length) {
    const worst = mine.reduce((a, b) => (b.p99 > a.p99 ? b : a))
    check(worst.p99 <= P99_TARGET_MS, `p99 ≤ ${P99_TARGET_MS} ms (worst ${fixed(worst.p99, 2)} ms, ${worst.workload})`)
    const rss = Math.max(...mine.map((r) => r.rssMb))
    check(rss <= RSS_TARGET_MB, `RSS ≤ ${RSS_TARGET_MB} MB (${fixed(rss, 0)} MB)`)
  }
  return `${met} of ${clauses.length} targets met: ${clauses.join('; ')}.`
}

/** Empty when every response was 2xx; otherwise a warning naming the rows that counted failures. */
export function failuresLine(rows: Row[], labels: Record<string, string>): string {
  const failed = rows.filter((r) => r.non2xx + r.socketErrors > 0)
  if (failed.length === 0) return ''
  const which = failed.map((r) => `${r.workload} on ${labels[r.target] ?? r.target}`).join(', ')
  return `Warning: non-2xx responses or socket errors in ${which}; those rows measure failures, not the service.`
}

export interface Machine {
  cpu: string
  cores: number
  node: string
  os: string
  loadAverage: string
}

export function machine(): Machine {
  const cpuinfo = readText('/proc/cpuinfo')
  const osRelease = readText('/etc/os-release')
  return {
    cpu: /^model name\s*:\s*(.+)$/m.exec(cpuinfo)?.[1]?.trim() ?? 'unknown CPU',
    cores: availableParallelism(),
    node: process.version,
    os: `${/^PRETTY_NAME="?([^"\n]+)"?$/m.exec(osRelease)?.[1] ?? 'Linux'}, kernel ${release()}`,
    loadAverage: loadavg()
      .map((n) => n.toFixed(2))
      .join(' '),
  }
}

/**
 * Microseconds during which some task waited for a CPU since boot (/proc/pressure/cpu), or null
 * without PSI. Over a run, its growth says how much the machine was contended while we measured.
 */
export function cpuPressureMicros(): number | null {
  const total = /^some .*total=(\d+)$/m.exec(readText('/proc/pressure/cpu'))?.[1]
  return total === undefined ? null : Number(total)
}

function readText(path: string): string {
  try {
    return readFileSync(path, 'utf8')
  } catch {
    return ''
  }
}
