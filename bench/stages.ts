/**
 * Where a service's CPU went, by stage of a request, from a --cpu-prof profile of its main thread
 * (BENCH_PROFILE): `node bench/stages.ts <file.cpuprofile>… [--requests N]`, also run by bench/run.ts
 * on the profiles it leaves. Each sample is charged to the innermost frame that belongs to a stage,
 * so a hook's own work is its stage's and the framework keeps only what it does between hooks.
 */
import { readFileSync } from 'node:fs'
import { parseArgs } from 'node:util'

interface ProfileNode {
  id: number
  callFrame: { functionName: string; url: string }
  children?: number[]
}
interface Profile {
  nodes: ProfileNode[]
  samples: number[]
  timeDeltas: number[]
}

/** The stages, in a request's order, and the source files (or packages) whose code each one is. */
const STAGES: [stage: string, test: RegExp][] = [
  ['wire guards (src/http)', /\/src\/http\//],
  ['auth', /\/src\/plugins\/auth\.ts|\/src\/domain\/api-keys\.ts/],
  ['rate limit', /\/src\/plugins\/rate-limit/],
  ['scopes', /\/src\/plugins\/scopes\.ts|\/src\/domain\/scopes\.ts/],
  ['preconditions (ETag)', /\/src\/plugins\/preconditions\.ts/],
  ['cache', /\/src\/store\/pet-cache\.ts|\/src\/plugins\/store\.ts/],
  ['store', /\/src\/store\//],
  ['route handler', /\/src\/routes\//],
  ['headers (stability, errors)', /\/src\/plugins\/(stability|error-handler|unrouted)\.ts/],
  ['other plugins', /\/src\/plugins\//],
  ['serialization', /fast-json-stringify|\/src\/schemas\//],
  ['log', /\/pino|\/src\/observability\/(request-log|log-stream)\.ts/],
  ['metrics and traces', /@opentelemetry|\/src\/observability\/|\/src\/plugins\/tracing\.ts/],
  ['framework (Fastify)', /\/node_modules\/(fastify|@fastify|find-my-way|avvio|light-my-request)\//],
  [
    'node:http and the socket (the ceiling does this too)',
    /^node:(_http|net|internal\/(streams|stream_base|http|url))/,
  ],
  ['startup (module loading)', /^node:internal\/(modules|bootstrap)/],
]

const OTHER_STAGES = ['garbage collection', 'other (Node, V8)']

/**
 * Milliseconds of CPU per stage in `profile` (idle left out), between the first and the last sample
 * in Fastify's routeHandler: the time it served requests, without its start and its stop.
 */
export function stageTimes(profile: Profile): Map<string, number> {
  const byId = new Map(profile.nodes.map((node) => [node.id, node]))
  const parent = new Map<number, number>()
  for (const node of profile.nodes) for (const child of node.children ?? []) parent.set(child, node.id)
  const stageOf = new Map<number, string>()
  const classify = (id: number): string => {
    const known = stageOf.get(id)
    if (known) return known
    const node = byId.get(id) as ProfileNode
    const { functionName, url } = node.callFrame
    let stage = STAGES.find(([, test]) => url && test.test(url))?.[0]
    if (!stage) {
      const up = parent.get(id)
      if (functionName === '(garbage collector)') stage = 'garbage collection'
      else if (up === undefined || functionName === '(program)') stage = 'other (Node, V8)'
      else stage = classify(up)
    }
    stageOf.set(id, stage)
    return stage
  }
  const inRoute = new Map<number, boolean>()
  const routed = (id: number): boolean => {
    const known = inRoute.get(id)
    if (known !== undefined) return known
    const up = parent.get(id)
    const { functionName, url } = (byId.get(id) as ProfileNode).callFrame
    const yes = (functionName === 'routeHandler' && url.includes('/fastify/')) || (up !== undefined && routed(up))
    inRoute.set(id, yes)
    return yes
  }
  const first = profile.samples.findIndex(routed)
  const last = profile.samples.findLastIndex(routed)
  const times = new Map<string, number>()
  profile.samples.forEach((id, i) => {
    if (i < first || i > last) return
    const node = byId.get(id) as ProfileNode
    if (node.callFrame.functionName === '(idle)') return
    const stage = classify(id)
    times.set(stage, (times.get(stage) ?? 0) + (profile.timeDeltas[i] ?? 0) / 1000)
  })
  return times
}

/** A Markdown table of the stages' shares of the busy CPU and, given the requests served, µs per request. */
export function stageTable(times: Map<string, number>, requests?: number): string {
  const busy = [...times].filter(([stage]) => !stage.startsWith('startup')).reduce((sum, [, ms]) => sum + ms, 0)
  const rows = [...STAGES.map(([stage]) => stage), ...OTHER_STAGES]
    .filter((stage) => times.has(stage) && !stage.startsWith('startup'))
    .map((stage) => {
      const ms = times.get(stage) as number
      const perRequest = requests ? `${((ms * 1000) / requests).toFixed(1)}` : ''
      return `| ${stage} | ${((100 * ms) / busy).toFixed(1)} % | ${perRequest} |`
    })
  return ['| stage | share of the busy CPU | µs per request |', '| --- | ---: | ---: |', ...rows].join('\n')
}

if (import.meta.main) {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: { requests: { type: 'string' } },
  })
  const requests = values.requests ? Number(values.requests) : undefined
  const total = new Map<string, number>()
  for (const file of positionals) {
    for (const [stage, ms] of stageTimes(JSON.parse(readFileSync(file, 'utf8')))) {
      total.set(stage, (total.get(stage) ?? 0) + ms)
    }
  }
  console.log(stageTable(total, requests))
}
