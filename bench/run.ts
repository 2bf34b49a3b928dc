/**
 * `npm run bench`: the service against the ceiling of Node on one core, on a fresh seeded database.
 * Servers on one core, wrk on the other (taskset); rounds interleaved (A B A B…) so drift on a
 * shared machine hits both sides alike; medians reported; docs/performance.md written.
 * Settings: bench/settings.ts (BENCH_SECONDS, BENCH_ROUNDS, BENCH_TARGETS, …).
 */
import { writeFileSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { documentation } from './document.ts'
import { fileBackedMb, measure, probe } from './measure.ts'
import { cleanup, cleanupOnExit, tempDir } from './processes.ts'
import { cpuPressureMicros, failuresLine, type Measurement, machine, summarise, table, targetsLine } from './report.ts'
import { readSettings } from './settings.ts'
import { type BenchContext, type RunningTarget, TARGETS } from './targets.ts'
import { WORKLOADS } from './workloads.ts'
import { ensureTools } from './wrk.ts'

const ROOT = join(import.meta.dirname, '..')

function log(line: string): void {
  process.stderr.write(`${line}\n`)
}

async function main(): Promise<void> {
  const settings = readSettings()
  ensureTools()
  cleanupOnExit()
  const started = new Date()
  const host = machine()
  const pressureAtStart = cpuPressureMicros()
  const workloads = WORKLOADS.filter((w) => settings.workloads.includes(w.name))
  const context: BenchContext = { serverCpu: settings.serverCpu, pets: settings.pets, dir: tempDir() }
  log(
    `bench: ${host.cpu}, ${host.cores} cores, Node ${host.node}; servers on CPU ${settings.serverCpu}, wrk on CPU ${settings.clientCpu}`,
  )

  const running = new Map<string, RunningTarget>()
  for (const name of settings.targets) {
    const target = TARGETS[name]
    if (!target) throw new Error(`unknown target ${name}`)
    if (target.kind === 'ceiling') {
      context.fixturesFile = join(context.dir, 'fixtures.json')
      const first = running.values().next().value as RunningTarget
      // Every route, not only the selected workloads': the ceiling answers them all.
      writeFileSync(context.fixturesFile, JSON.stringify(await probe(first, WORKLOADS)))
    }
    log(`bench: starting ${target.label}${target.kind === 'service' ? `, ${settings.pets} pets seeded` : ''}`)
    const live = await target.start(context)
    await probe(live, workloads)
    running.set(name, live)
  }

  if (settings.warmupSeconds > 0) {
    log(`bench: warming up, ${settings.warmupSeconds} s per workload and target`)
    for (const workload of workloads)
      for (const [, live] of running) await measure(settings, live, workload, settings.warmupSeconds, settings.pets)
  }

  const measurements: Measurement[] = []
  for (let round = 1; round <= settings.rounds; round++) {
    for (const workload of workloads) {
      for (const [name, live] of running) {
        const { result, rssMb, contention } = await measure(settings, live, workload, settings.seconds, settings.pets)
        measurements.push({ target: name, workload: workload.name, round, result, rssMb })
        log(
          `round ${round}/${settings.rounds} ${workload.name.padEnd(7)} ${name.padEnd(11)} ${result.requestsPerSecond.toFixed(0).padStart(6)} req/s` +
            `  p50 ${result.p50.toFixed(2)} ms  p99 ${result.p99.toFixed(2)} ms  non-2xx ${result.non2xx}  RSS ${rssMb.toFixed(0)} MB` +
            (contention === null ? '' : `  CPU wait ${contention.toFixed(0)}%`),
        )
      }
    }
  }
  const fileBacked = Object.fromEntries([...running].map(([name, live]) => [name, fileBackedMb(live.pids)]))
  for (const [, live] of running) await live.stop()
  const pressureAtEnd = cpuPressureMicros()
  const contention =
    pressureAtStart === null || pressureAtEnd === null
      ? null
      : (pressureAtEnd - pressureAtStart) / 10 / (Date.now() - started.getTime())

  const labels = Object.fromEntries(settings.targets.map((name) => [name, TARGETS[name]?.label ?? name]))
  const rows = summarise(measurements, workloads, settings.targets)
  const primary = settings.targets[0] as string
  const markdown = table(rows, labels)
  const failures = failuresLine(rows, labels)
  const verdict = `${failures ? `${failures} ` : ''}${targetsLine(rows, workloads, primary)}`
  process.stdout.write(`\n${markdown}\n\n${labels[primary]}: ${verdict}\n`)
  if (settings.doc) {
    writeFileSync(
      resolve(ROOT, settings.doc),
      documentation({
        settings,
        started,
        host,
        markdown,
        verdict,
        labels,
        workloads,
        measurements,
        contention,
        fileBacked,
      }),
    )
    log(`bench: wrote ${settings.doc}`)
  }
}

try {
  await main()
} catch (error) {
  log(`bench: ${error instanceof Error ? error.message : String(error)}`)
  process.exitCode = 1
} finally {
  await cleanup()
}
