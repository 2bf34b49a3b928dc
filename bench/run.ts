/**
 * `npm run bench`: the service against the ceiling of Node on one core, on fresh seeded databases
 * (SQLite, and PostgreSQL with one and two instances when it answers).
 * Servers on one core, wrk on the other (taskset); rounds interleaved (A B A B…) so drift on a
 * shared machine hits both sides alike; medians reported; docs/performance.md written (keeping
 * the growth section of `npm run bench:growth`).
 * Settings: bench/settings.ts (BENCH_SECONDS, BENCH_ROUNDS, BENCH_TARGETS, …).
 */
import { writeFileSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { ROOT } from '../scripts/start-command.ts'
import { fsyncCost } from './disk.ts'
import { documentation } from './document.ts'
import { cpuTable, limitSentence, type TargetShape } from './limits.ts'
import { fileBackedMb, measure, probe } from './measure.ts'
import { adminQuery, POSTGRES_URL, postgresProblem } from './postgres.ts'
import { cleaningUp, cleanup, cleanupOnExit, tempDir } from './processes.ts'
import { cpuPressureMicros, failuresLine, type Measurement, machine, summarise, table, targetsLine } from './report.ts'
import { readOrEmpty, section, withSection } from './sections.ts'
import { readSettings, type Settings } from './settings.ts'
import { type BenchContext, type RunningTarget, TARGETS } from './targets.ts'
import { WORKLOADS } from './workloads.ts'
import { ensureTools } from './wrk.ts'

function log(line: string): void {
  process.stderr.write(`${line}\n`)
}

/**
 * Keeps the PostgreSQL targets only when PostgreSQL answers. Chosen with BENCH_TARGETS, a silent
 * PostgreSQL is an error; by default they are skipped with a note (returned for the report too).
 */
async function choosePostgres(settings: Settings): Promise<string> {
  const wanted = settings.targets.filter((t) => TARGETS[t]?.database === 'postgres')
  if (wanted.length === 0) return ''
  const problem = await postgresProblem()
  if (problem === null) return ''
  const where = new URL(POSTGRES_URL).host
  if (settings.targetsChosen) throw new Error(`PostgreSQL at ${where} does not answer (${problem})`)
  settings.targets = settings.targets.filter((t) => !wanted.includes(t))
  const note = `PostgreSQL at ${where} did not answer (${problem}), so ${wanted.join(' and ')} were skipped; set BENCH_POSTGRES_URL to measure them.`
  log(`bench: note: ${note}`)
  return note
}

async function main(): Promise<void> {
  const settings = readSettings()
  ensureTools()
  cleanupOnExit()
  const skipped = await choosePostgres(settings)
  const postgresVersion = settings.targets.some((t) => TARGETS[t]?.database === 'postgres')
    ? `PostgreSQL ${(await adminQuery<{ server_version: string }>('SHOW server_version'))[0]?.server_version}`
    : null
  const started = new Date()
  const host = machine()
  const pressureAtStart = cpuPressureMicros()
  const workloads = WORKLOADS.filter((w) => settings.workloads.includes(w.name))
  const context: BenchContext = {
    serverCpu: settings.serverCpu,
    clusterCpu: settings.clusterCpu,
    postgresCpu: settings.postgresCpu,
    pets: settings.pets,
    dir: tempDir(),
  }
  const disk = fsyncCost(context.dir)
  log(
    `bench: ${host.cpu}, ${host.cores} cores, Node ${host.node}; servers on CPU ${settings.serverCpu} (several instances on ${settings.clusterCpu}), wrk on CPU ${settings.clientCpu}`,
  )
  log(`bench: a 16 KiB write and fsync takes ${disk.wallMicros.toFixed(0)} µs (${disk.cpuMicros.toFixed(0)} µs of CPU)`)

  /**
   * Every target, started afresh on a fresh database for each round: two starts of the same server
   * can differ by 15% in CPU per request for as long as they run (measured side by side: 47 against
   * 39 µs for two identical processes), so one start per run would give its luck to every round.
   */
  const startAll = async (): Promise<Map<string, RunningTarget>> => {
    const running = new Map<string, RunningTarget>()
    for (const name of settings.targets) {
      const target = TARGETS[name]
      if (!target) throw new Error(`unknown target ${name}`)
      if (target.kind === 'ceiling' && !context.fixturesFile) {
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
    return running
  }

  const measurements: Measurement[] = []
  let running = new Map<string, RunningTarget>()
  for (let round = 1; round <= settings.rounds; round++) {
    running = await startAll()
    for (const workload of workloads) {
      for (const [name, live] of running) {
        const { result, rssMb, contention, usage } = await measure(
          settings,
          live,
          workload,
          settings.seconds,
          settings.pets,
        )
        measurements.push({ target: name, workload: workload.name, round, result, rssMb, usage })
        log(
          `round ${round}/${settings.rounds} ${workload.name.padEnd(7)} ${name.padEnd(11)} ${result.requestsPerSecond.toFixed(0).padStart(6)} req/s` +
            `  p50 ${result.p50.toFixed(2)} ms  p99 ${result.p99.toFixed(2)} ms  non-2xx ${result.non2xx}  RSS ${rssMb.toFixed(0)} MB` +
            `  CPU service ${usage.service.toFixed(0)}%${usage.database === null ? '' : ` postgres ${usage.database.toFixed(0)}%`} wrk ${usage.wrk.toFixed(0)}%` +
            (contention === null ? '' : `  CPU wait ${contention.toFixed(0)}%`),
        )
      }
    }
    if (round < settings.rounds) for (const [, live] of running) await live.stop()
  }
  const fileBacked = Object.fromEntries([...running].map(([name, live]) => [name, fileBackedMb(live.pids)]))
  const shapes: Record<string, TargetShape> = Object.fromEntries(
    [...running].map(([name, live]) => [
      name,
      {
        label: TARGETS[name]?.label ?? name,
        cpus: live.cpus,
        poolSize: live.poolSize,
        instances: live.instances ?? 1,
        databaseCpus: live.databaseCpus,
      },
    ]),
  )
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
  const cpu = cpuTable(rows, shapes)
  // The limit of a PostgreSQL target under every workload that reaches PostgreSQL on each request.
  const limits = rows
    .filter((r) => TARGETS[r.target]?.database === 'postgres' && ['list20', 'post'].includes(r.workload))
    .map((r) => {
      const sqlite = rows.find((s) => s.target === 'sqlite' && s.workload === r.workload)
      return limitSentence(
        r,
        shapes[r.target] as TargetShape,
        sqlite && { label: labels.sqlite ?? 'sqlite', row: sqlite },
      )
    })
    .filter(Boolean)
  process.stdout.write(`\n${markdown}\n\n${labels[primary]}: ${verdict}\n\n${cpu}\n\n${limits.join('\n\n')}\n`)
  if (settings.doc) {
    const path = resolve(ROOT, settings.doc)
    const doc = documentation({
      settings,
      started,
      host,
      disk,
      markdown,
      verdict,
      labels,
      workloads,
      measurements,
      contention,
      fileBacked,
      cpu,
      limits,
      skipped,
      postgresVersion,
    })
    // The growth section belongs to `npm run bench:growth`: keep it as it is.
    const growth =
      section(readOrEmpty(path), 'growth') ??
      '## Growth\n\nNot measured yet: run `npm run bench:growth` (bench/growth.ts).'
    writeFileSync(path, withSection(doc, 'growth', growth))
    log(`bench: wrote ${settings.doc}`)
  }
}

try {
  await main()
} catch (error) {
  if (!cleaningUp()) log(`bench: ${error instanceof Error ? error.message : String(error)}`)
  process.exitCode = 1
} finally {
  await cleanup()
}
