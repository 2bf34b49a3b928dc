/**
 * `npm run bench`: the service against a bare node:http ceiling, rounds interleaved; writes
 * docs/performance.md. Settings: BENCH_* (bench/common.ts readSettings; the "Running it" section of
 * the report). Old and new side by side: BENCH_BASE=<another checkout of this repository, with its
 * node_modules> gives each chosen service target X a twin X@base, measured in the same rounds,
 * whose server, start script, CLI and store (its migrations) all come from that checkout; the report
 * adds each workload's X/X@base rate ratio. Target `peer` (bench/peer.ts) is plain Fastify + SQLite.
 * `streams` in BENCH_WORKLOADS (bench/streams.ts) is the "Streams" section, measured after the
 * others; BENCH_WORKLOADS=streams alone measures only it and rewrites only that section.
 */
import {
  closeSync,
  existsSync,
  fsyncSync,
  openSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
  writeSync,
} from 'node:fs'
import { join, resolve } from 'node:path'
import { ROOT, startCommand } from '../scripts/start-command.ts'
import type { Fixture } from './ceiling.ts'
import {
  commitOf,
  contention,
  ensureTools,
  list,
  log,
  machine,
  main,
  median,
  readSettings,
  readText,
  section,
  tempDir,
  withSection,
} from './common.ts'
import { type Measurement, report } from './document.ts'
import { measure, memoryMb, readEverySeededPet, WORKLOADS, type Workload } from './measure.ts'
import { adminQuery, skipPostgres } from './postgres.ts'
import { stageTable, stageTimes } from './stages.ts'
import { measureStreams, STREAM_TARGETS, STREAMS, streamsSection } from './streams.ts'
import {
  addBaseTargets,
  BASE_SUFFIX,
  CEILING_LIMITED_KEY,
  type Context,
  type RunningTarget,
  serves,
  TARGETS,
  UNKNOWN_KEY,
} from './targets.ts'

/** Response headers the ceiling repeats: those the routes set, and the refusals' challenges. */
const ROUTE_HEADERS = ['content-type', 'link', 'location', 'deprecation', 'sunset', 'www-authenticate', 'retry-after']

/**
 * The probes of each workload (bench/measure.ts), which must get their status (401s where 200s were
 * meant would be fast and useless); their answers are the ceiling's fixtures.
 */
async function probe(target: RunningTarget, workloads: Workload[]): Promise<Record<string, Fixture>> {
  const fixtures: Record<string, Fixture> = {}
  for (const w of workloads) {
    const live = w.key === 'limited' ? (target.limited ?? target) : target
    const authorization = `Bearer ${w.key === 'unknown' ? UNKNOWN_KEY : live.key}`
    let previous = ''
    for (const p of w.probes ?? [{ method: 'GET', status: 200 }]) {
      const { method, status } = p
      const path = typeof p.path === 'function' ? p.path(previous) : (p.path ?? w.path)
      let response: Response | undefined
      for (let tries = 0; tries < 3 && response?.status !== status; tries++) {
        const body = typeof p.body === 'function' ? p.body(live) : p.body
        const headers = {
          authorization,
          ...(body && { 'content-type': 'application/json' }),
          ...(path.startsWith('/v1/store/') && { 'animal-store-beta': 'orders' }),
        }
        response = await fetch(`${live.baseUrl}${path}`, { method, body, headers })
        if (response.status !== status) await response.text()
      }
      const text = (await response?.text()) ?? ''
      if (response?.status !== status)
        throw new Error(`${w.name}: ${method} ${path} answered ${response?.status}, not ${status}: ${text}`)
      const headers = Object.fromEntries(
        ROUTE_HEADERS.flatMap((h) => (response.headers.has(h) ? [[h, `${response.headers.get(h)}`]] : [])),
      )
      // The ceiling tells a refusal by its key, and its ratelimited requests carry a key of its own.
      const asked = w.key === 'limited' ? `Bearer ${CEILING_LIMITED_KEY}` : authorization
      fixtures[p.fixture ?? w.name] = { status, headers, body: text, ...(w.key && { authorization: asked }) }
      previous = text
    }
  }
  return fixtures
}

/**
 * The targets in the order a round measures them: as started, but each service and its BENCH_BASE
 * twin swapped every other round, so that going first or second (after the ceiling, or after the
 * other) favours neither over an even number of rounds.
 */
function inTurn<T>(running: [string, T][], round: number): [string, T][] {
  const order = [...running]
  if (round % 2 === 1) return order
  for (let i = 0; i + 1 < order.length; i++) {
    const [a, b] = [order[i] as [string, T], order[i + 1] as [string, T]]
    if (b[0] === `${a[0]}${BASE_SUFFIX}`) [order[i], order[i + 1]] = [b, a]
  }
  return order
}

/** BENCH_BASE must be a checkout of this repository that can run: its CLI, store, start script and packages. */
function checkBase(root: string): void {
  for (const file of ['package.json', 'bin/animal-store.ts', 'src/store/index.ts', 'src/config.ts', 'node_modules'])
    if (!existsSync(join(root, file)))
      throw new Error(
        `BENCH_BASE=${root} has no ${file}: give a checkout of this repository with its node_modules (e.g. git worktree add /tmp/base <commit> && ln -s "$PWD/node_modules" /tmp/base/node_modules)`,
      )
  startCommand(root)
}

/** µs of a 16 KiB write and its fsync: what each batch of POSTs waits for, which moves the POST's ratio most. */
function fsyncCost(dir: string): { wallMicros: number; cpuMicros: number } {
  const path = join(dir, 'fsync-probe')
  const fd = openSync(path, 'w')
  const page = Buffer.alloc(16 * 1024, 1)
  const walls: number[] = []
  const write = () => {
    writeSync(fd, page, 0, page.length, 0)
    fsyncSync(fd)
  }
  for (let i = 0; i < 20; i++) write()
  const cpu = process.cpuUsage()
  for (let i = 0; i < 200; i++) {
    const start = performance.now()
    write()
    walls.push((performance.now() - start) * 1000)
  }
  const used = process.cpuUsage(cpu)
  closeSync(fd)
  rmSync(path)
  return { wallMicros: median(walls), cpuMicros: (used.user + used.system) / 200 }
}

await main('bench', async () => {
  const settings = readSettings()
  const defaults = ['sqlite', 'sqlite-warn', 'postgres-1', 'postgres-2', 'ceiling']
  let targets = list('BENCH_TARGETS', defaults, Object.keys(TARGETS))
  const head = commitOf(ROOT)
  const base = settings.base ? { root: settings.base, commit: commitOf(settings.base) } : null
  if (base) {
    checkBase(base.root)
    addBaseTargets(base.root, base.commit.split(' ')[0] as string)
    // Each service target's twin runs right after it, in every round.
    targets = targets.flatMap((t) => (TARGETS[t]?.kind === 'service' ? [t, `${t}${BASE_SUFFIX}`] : [t]))
  }
  const names = list(
    'BENCH_WORKLOADS',
    [...WORKLOADS.map((w) => w.name), STREAMS],
    [...WORKLOADS.map((w) => w.name), STREAMS],
  )
  const workloads = WORKLOADS.filter((w) => names.includes(w.name))
  // The streams section runs on the stream targets chosen; alone, it needs no ceiling.
  const streaming = names.includes(STREAMS)
  const onlyStreams = workloads.length === 0
  if (streaming && onlyStreams && !targets.some((t) => STREAM_TARGETS.includes(t)))
    throw new Error(`BENCH_WORKLOADS=${STREAMS} needs ${STREAM_TARGETS.join(' or ')} in BENCH_TARGETS`)
  // The ceiling answers with a service's responses, and the ratios need both.
  const kind = (k: string) => targets.filter((t) => TARGETS[t]?.kind === k)
  if (onlyStreams) targets = targets.filter((t) => STREAM_TARGETS.includes(t))
  else if (!targets.includes('ceiling') || kind('service').length === 0)
    throw new Error('BENCH_TARGETS needs "ceiling" and a service target')
  // The service first (the first one's answers are the ceiling's), then the peer and the floor, the ceiling last.
  else targets = [...kind('service'), ...kind('peer'), ...kind('floor'), 'ceiling']
  ensureTools()
  const postgres = targets.filter((t) => TARGETS[t]?.database === 'postgres')
  const skipped = await skipPostgres(
    postgres.length > 0,
    Boolean(process.env.BENCH_TARGETS?.trim()),
    `${postgres.join(' and ')} were`,
  )
  if (skipped) targets = targets.filter((t) => !postgres.includes(t))
  const postgresVersion = targets.some((t) => TARGETS[t]?.database === 'postgres')
    ? `PostgreSQL ${(await adminQuery<{ server_version: string }>('SHOW server_version'))[0]?.server_version}`
    : null
  const started = new Date()
  const host = machine()
  const waited = contention()
  const ordering = workloads.some((w) => w.orders)
  const context: Context = { ...settings, orderPets: ordering ? settings.orderPets : 0, dir: tempDir() }
  const streamTargets = streaming ? STREAM_TARGETS.filter((t) => targets.includes(t)) : []
  /** The Streams section, measured now; null when not chosen (the document keeps the one it has). */
  const streams = async () => {
    if (!streaming) return null
    if (streamTargets.length === 0) {
      log(`bench: note: ${STREAMS} runs on ${STREAM_TARGETS.join(' or ')}, and BENCH_TARGETS chose neither`)
      return null
    }
    const from = contention()
    const runs = await measureStreams(settings, context, streamTargets)
    return streamsSection({ settings, started, host, head, contention: from(), targets: streamTargets, runs, skipped })
  }
  const writeDoc = (write: (doc: string) => string) => {
    if (!settings.doc) return
    const path = resolve(ROOT, settings.doc)
    writeFileSync(path, write(readText(path)))
    log(`bench: wrote ${settings.doc}`)
  }
  if (onlyStreams) {
    log(
      `bench: ${host.cpu}, ${host.cores} cores, Node ${host.node}; servers on CPU ${settings.serverCpu}, wrk and the stream reader on CPU ${settings.clientCpu}`,
    )
    const section = await streams()
    if (!section) return
    process.stdout.write(`\n${section.summary}\n`)
    writeDoc((doc) => withSection(doc, STREAMS, section.markdown))
    return
  }
  const disk = fsyncCost(context.dir)
  log(
    `bench: ${host.cpu}, ${host.cores} cores, Node ${host.node}; servers on CPU ${settings.serverCpu}, wrk on CPU ${settings.clientCpu}`,
  )
  if (base) log(`bench: this checkout ${head}; base (BENCH_BASE=${base.root}) ${base.commit}`)
  log(`bench: a 16 KiB write and fsync takes ${disk.wallMicros.toFixed(0)} µs (${disk.cpuMicros.toFixed(0)} µs of CPU)`)

  /**
   * Requests each target served in the profiled round beyond those measured (probes, pets read
   * before it, warm-up): its profile holds their CPU too, so the budget per request counts them.
   */
  const unmeasured = new Map<string, number>()
  const served = (name: string, requests: number) => unmeasured.set(name, (unmeasured.get(name) ?? 0) + requests)
  /** Every target afresh each round: two starts of one server can differ by 15% in CPU per request. */
  const startAll = async (measured: boolean) => {
    const running = new Map<string, RunningTarget>()
    for (const name of targets) {
      const target = TARGETS[name]
      if (!target) continue
      if ((target.kind === 'floor' || target.kind === 'ceiling') && !context.fixturesFile) {
        context.fixturesFile = join(context.dir, 'fixtures.json')
        // Every route, not only the selected workloads': the ceiling answers them all.
        const first = running.values().next().value as RunningTarget
        const fixtures = await probe(
          first,
          // Orders only where pets were seeded for them (an order workload was chosen).
          WORKLOADS.filter((w) => (w.key !== 'limited' || first.limited) && (!w.orders || first.orderPets)),
        )
        writeFileSync(context.fixturesFile, JSON.stringify(fixtures))
      }
      log(`bench: starting ${target.label}${target.database ? `, ${settings.pets} pets seeded` : ''}`)
      const profiled = {
        ...context,
        nodeArgs: measured && settings.profileDir ? ['--cpu-prof', '--cpu-prof-dir', resolve(settings.profileDir)] : [],
      }
      const live = await target.start(profiled)
      if (target.kind === 'service' && workloads.some((w) => w.key === 'limited')) {
        live.limited = await target.start({ ...context, orderPets: 0 }, { RATE_LIMIT: '1' })
      }
      await probe(
        live,
        workloads.filter((w) => serves(target, w)),
      )
      if (workloads.some((w) => w.readsSeededPets && serves(target, w))) {
        await readEverySeededPet(live, settings.pets)
        if (measured) served(name, settings.pets)
      }
      running.set(name, live)
    }
    if (settings.warmupSeconds > 0) {
      log(`bench: warming up, ${settings.warmupSeconds} s per workload and target`)
      for (const w of workloads)
        for (const [name, live] of running)
          if (serves(TARGETS[name], w)) {
            const warm = await measure(settings, live, w, settings.warmupSeconds, settings.pets)
            if (measured) served(name, warm.result.requests)
          }
    }
    return running
  }
  const stopAll = async (running: Map<string, RunningTarget>) => {
    for (const live of running.values()) await Promise.all([live.stop(), live.limited?.stop()])
  }

  const measurements: Measurement[] = []
  let running = new Map<string, RunningTarget>()
  for (let round = 1; round <= settings.rounds; round++) {
    running = await startAll(round === settings.rounds)
    for (const w of workloads) {
      for (const [name, live] of inTurn([...running], round)) {
        // The peer serves only some workloads: it skips the others.
        if (!serves(TARGETS[name], w)) continue
        const m = await measure(settings, live, w, settings.seconds, settings.pets)
        const profiled = Boolean(settings.profileDir) && round === settings.rounds
        measurements.push({ target: name, workload: w.name, round, profiled, ...m })
        const { result: r, usage: u } = m
        log(
          `round ${round}/${settings.rounds} ${w.name.padEnd(12)} ${name.padEnd(15)} ${r.requestsPerSecond.toFixed(0).padStart(6)} req/s` +
            `  p50 ${r.p50.toFixed(2)} ms  p99 ${r.p99.toFixed(2)} ms  non-2xx ${r.non2xx}  RSS ${m.rssMb.toFixed(0)} MB` +
            `  CPU service ${u.service.toFixed(0)}%${u.database === null ? '' : ` postgres ${u.database.toFixed(0)}%`} wrk ${u.wrk.toFixed(0)}%` +
            (m.contention === null ? '' : `  CPU wait ${m.contention.toFixed(0)}%`) +
            (m.note ? `  ${m.note}` : ''),
        )
      }
    }
    if (round < settings.rounds) await stopAll(running)
  }
  const fileBacked = Object.fromEntries([...running].map(([name, live]) => [name, memoryMb(live.pids, 'RssFile')]))
  await stopAll(running)
  // After the other workloads, one target at a time: nothing else runs beside the streams.
  const streamed = await streams()
  const { markdown, summary } = report({
    settings,
    targets,
    running,
    started,
    host,
    disk,
    workloads,
    measurements,
    contention: waited(),
    fileBacked,
    skipped,
    postgresVersion,
    head,
    base,
    streamTargets,
  })
  process.stdout.write(`\n${summary}\n`)
  if (streamed) process.stdout.write(`\n${streamed.summary}\n`)
  const budget = settings.profileDir
    ? stageBudget(settings.profileDir, running, measurements, settings.rounds, unmeasured)
    : ''
  if (budget) process.stdout.write(`\n${budget}\n`)
  writeDoc((doc) => {
    // The growth section belongs to `npm run bench:growth`: keep it as it is; the streams section too when not measured.
    const growth =
      section(doc, 'growth') ?? '## Growth\n\nNot measured yet: run `npm run bench:growth` (bench/growth.ts).'
    const streams =
      streamed?.markdown ??
      section(doc, STREAMS) ??
      `## Streams\n\nNot measured yet: run \`BENCH_WORKLOADS=${STREAMS} npm run bench\` (bench/streams.ts).`
    return withSection(withSection(budget ? `${markdown}\n${budget}\n` : markdown, 'growth', growth), STREAMS, streams)
  })
})

/**
 * The CPU budget by stage of each profiled service (BENCH_PROFILE): its main thread's profile of
 * the last round, over the requests it served then (bench/stages.ts).
 */
function stageBudget(
  dir: string,
  running: Map<string, RunningTarget>,
  measurements: Measurement[],
  round: number,
  unmeasured: Map<string, number>,
) {
  const sections: string[] = []
  for (const [name, live] of running) {
    if (!TARGETS[name] || TARGETS[name].kind === 'ceiling') continue
    // CPU.<date>.<time>.<pid>.<thread>.<n>.cpuprofile; thread 0 is the main thread.
    const files = readdirSync(dir).filter((file) => live.pids.some((pid) => file.includes(`.${pid}.0.`)))
    if (files.length === 0) continue
    const times = new Map<string, number>()
    for (const file of files)
      for (const [stage, ms] of stageTimes(JSON.parse(readFileSync(join(dir, file), 'utf8'))))
        times.set(stage, (times.get(stage) ?? 0) + ms)
    const served = measurements.filter((m) => m.target === name && m.round === round)
    const requests = served.reduce((sum, m) => sum + m.result.requests, unmeasured.get(name) ?? 0)
    sections.push(
      `**${TARGETS[name].label}** (${served.map((m) => m.workload).join(', ')}; ${requests} requests):\n\n${stageTable(times, requests)}`,
    )
  }
  return sections.length ? `### CPU budget by stage (BENCH_PROFILE)\n\n${sections.join('\n\n')}` : ''
}
