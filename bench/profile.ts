/**
 * Where the service's time goes under one workload: runs the SQLite service (LOG_LEVEL=info, stdout
 * to /dev/null, as in the bench) with --cpu-prof, loads it with wrk, and prints self time by group
 * (routing, validation, auth, sqlite, serialization, logging, HTTP…) and the top functions, for the
 * main thread and for the SQLite writer thread.
 *
 *   npx node bench/profile.ts [workload] [seconds] [sqlite|postgres|ceiling]   e.g. npx node bench/profile.ts list20 15
 *   npx node bench/profile.ts <file.cpuprofile>        summarise a profile taken before
 *
 * The .cpuprofiles (one per thread) are kept in the system temp folder, to open in Chrome DevTools or speedscope.
 */
import { copyFileSync, readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { measure, probe } from './measure.ts'
import { cleanup, cleanupOnExit, tempDir } from './processes.ts'
import { readSettings } from './settings.ts'
import { type BenchContext, ceiling, postgresService, type RunningTarget, sqliteService } from './targets.ts'
import { WORKLOADS } from './workloads.ts'
import { ensureTools } from './wrk.ts'

interface ProfileNode {
  id: number
  callFrame: { functionName: string; url: string; lineNumber: number }
  hitCount?: number
  children?: number[]
}

/**
 * First matching rule names the group of a frame, tested against "url functionName". A frame no
 * rule names (native code, code generated at run time, node:fs, node:buffer…) takes its caller's
 * group: a write() called by sonic-boom is logging, a generated function called by Fastify's
 * serializer is serialization.
 */
const GROUPS: [string, RegExp][] = [
  ['idle', /^ \((idle|program)\)$/],
  ['garbage collection', /^ \(garbage collector\)$/],
  [
    'logging (pino, our request log)',
    /\/(pino|pino-std-serializers|sonic-boom|fast-redact)\/|fastify\/lib\/logger|src\/app\.ts|src\/api-keys\.ts redactApiKeys/,
  ],
  ['serialization (fast-json-stringify)', /fast-json-stringify|fastify\/lib\/reply\.js serialize$/],
  ['validation (ajv)', /\/ajv\/|src\/validation\.ts|fastify\/lib\/validation/],
  ['routing (find-my-way)', /\/find-my-way\//],
  ['auth (our hook, SHA-256 of the key)', /src\/plugins\/auth\.ts|src\/api-keys\.ts/],
  ['pagination cursor (HMAC, URLSearchParams)', /src\/pagination\.ts|URLSearchParams/],
  ['sqlite (store, node:sqlite)', /src\/store\//],
  ['rate limit (ours)', /src\/plugins\/rate-limit\.ts|src\/rate-limit\.ts/],
  ['our routes', /src\/routes\//],
  ['our other plugins', /src\/plugins\//],
  ['fastify core (hooks, request, reply)', /\/fastify\/|\/avvio\/|\/fastify-plugin\//],
  ['HTTP parsing and writing (node:http)', /node:_http|internal\/http|node:http/],
  ['net, streams, socket writes', /node:net|node:stream|internal\/streams|internal\/stream_base/],
  ['event loop, timers, promises', /internal\/timers|internal\/process\/task_queues| runMicrotasks$/],
]

function ownGroup(frame: ProfileNode['callFrame']): string | undefined {
  const key = `${frame.url} ${frame.functionName}`
  return GROUPS.find(([, pattern]) => pattern.test(key))?.[0]
}

/** Prints self time by group and the top functions; returns nothing, the profile file stays. */
export function summarise(file: string, top = 25): void {
  const profile = JSON.parse(readFileSync(file, 'utf8')) as { nodes: ProfileNode[]; startTime: number; endTime: number }
  const total = profile.nodes.reduce((sum, n) => sum + (n.hitCount ?? 0), 0)
  const busy = profile.nodes.filter((n) => !/^\((idle|program)\)$/.test(n.callFrame.functionName))
  const busyTotal = busy.reduce((sum, n) => sum + (n.hitCount ?? 0), 0)
  const parent = new Map<number, ProfileNode>()
  for (const node of profile.nodes) for (const child of node.children ?? []) parent.set(child, node)
  const groups = new Map<number, string>()
  const group = (node: ProfileNode): string => {
    let found = groups.get(node.id)
    if (found === undefined) {
      const caller = parent.get(node.id)
      found = ownGroup(node.callFrame) ?? (caller ? group(caller) : 'other')
      groups.set(node.id, found)
    }
    return found
  }
  const byGroup = new Map<string, number>()
  const byFunction = new Map<string, number>()
  for (const node of profile.nodes) {
    const hits = node.hitCount ?? 0
    byGroup.set(group(node), (byGroup.get(group(node)) ?? 0) + hits)
    const { functionName, url, lineNumber } = node.callFrame
    const where = url
      ? `${url.replace(/^.*\/node_modules\//, '').replace(/^file:\/\/.*\/(src|bench)\//, '$1/')}:${lineNumber + 1}`
      : ''
    const name = `${functionName || '(anonymous)'} ${where}`.trim()
    byFunction.set(name, (byFunction.get(name) ?? 0) + hits)
  }
  const percent = (hits: number, of: number) => `${((100 * hits) / of).toFixed(1).padStart(5)}%`
  console.log(`\n${total} samples; ${percent(busyTotal, total)} busy. Self time by group (share of busy time):`)
  for (const [name, hits] of [...byGroup].sort((a, b) => b[1] - a[1])) {
    if (name !== 'idle') console.log(`  ${percent(hits, busyTotal)}  ${name}`)
  }
  console.log(`\nTop ${top} functions by self time (share of busy time):`)
  const functions = [...byFunction].filter(([name]) => !/^\((idle|program)\)/.test(name)).sort((a, b) => b[1] - a[1])
  for (const [name, hits] of functions.slice(0, top)) console.log(`  ${percent(hits, busyTotal)}  ${name}`)
}

async function main(): Promise<void> {
  if (process.argv[2]?.endsWith('.cpuprofile')) return summarise(process.argv[2])
  const settings = readSettings()
  const workload = WORKLOADS.find((w) => w.name === (process.argv[2] ?? 'list20'))
  if (!workload)
    throw new Error(`unknown workload ${process.argv[2]} (known: ${WORKLOADS.map((w) => w.name).join(', ')})`)
  const seconds = Number(process.argv[3] ?? 15)
  ensureTools()
  cleanupOnExit()
  const dir = tempDir()
  const profiles = join(dir, 'profiles')
  const context: BenchContext = {
    serverCpu: settings.serverCpu,
    clusterCpu: settings.clusterCpu,
    postgresCpu: settings.postgresCpu,
    pets: settings.pets,
    dir,
  }
  const profiled = { ...context, nodeArgs: ['--cpu-prof', '--cpu-prof-dir', profiles] }
  let target: RunningTarget
  if (process.argv[4] === 'ceiling') {
    // The ceiling answers with a service's responses: take them from an unprofiled one.
    const service = await sqliteService('sqlite', 'info').start(context)
    profiled.fixturesFile = join(dir, 'fixtures.json')
    writeFileSync(profiled.fixturesFile, JSON.stringify(await probe(service, WORKLOADS)))
    await service.stop()
    target = await ceiling.start(profiled)
  } else if (process.argv[4] === 'postgres') {
    target = await postgresService('postgres-1', 1).start(profiled)
  } else {
    target = await sqliteService('sqlite', 'info').start(profiled)
  }
  await probe(target, [workload])
  // Warm up before the profile matters less than for rates (the JIT's work shows as such), but keep it short.
  await measure(settings, target, workload, 2, settings.pets)
  const { result } = await measure(settings, target, workload, seconds, settings.pets)
  console.log(
    `${workload.name}: ${result.requestsPerSecond.toFixed(0)} req/s, p50 ${result.p50} ms, p99 ${result.p99} ms`,
  )
  // A graceful stop: Node writes the profile as the process exits.
  await target.stop()
  // One profile per thread, named CPU.<date>.<time>.<pid>.<thread id>.<seq>.cpuprofile: thread 0 is
  // the main thread; the service's only other thread that runs JavaScript is the SQLite writer.
  const thread = (file: string) => Number(file.split('.')[4])
  const written = readdirSync(profiles)
    .filter((f) => f.endsWith('.cpuprofile'))
    .sort((a, b) => thread(a) - thread(b))
  if (written.length === 0) throw new Error('the server wrote no profile')
  const name = `animal-store-${workload.name}${process.argv[4] ? `-${process.argv[4]}` : ''}`
  for (const file of written) {
    const main = thread(file) === 0
    const kept = join(tmpdir(), `${name}${main ? '' : `-thread${thread(file)}`}.cpuprofile`)
    copyFileSync(join(profiles, file), kept)
    console.log(`\n${main ? 'main thread' : `worker thread ${thread(file)} (the SQLite writer)`}: ${kept}`)
    summarise(kept, main ? 25 : 12)
  }
}

try {
  await main()
} catch (error) {
  console.error(`profile: ${error instanceof Error ? error.message : String(error)}`)
  process.exitCode = 1
} finally {
  await cleanup()
}
