/**
 * What is measured: each workload is one wrk invocation against a target (service or ceiling),
 * with a valid key. `target` is the fraction of the ceiling's rate we tune towards (issue text).
 */
import { join } from 'node:path'

const LUA = join(import.meta.dirname, 'lua')

export interface Workload {
  name: string
  description: string
  /** The URL's path; for a static request (no request() in the script) also the path wrk sends. */
  path: string
  /** wrk Lua script, for requests that need a body, a method or a varying URL. */
  script?: string
  /** Arguments after `--`: the key first, then what the script needs. */
  scriptArgs?: (key: string, pets: number) => string[]
  /** Minimum service/ceiling ratio we aim for (none for the mix). */
  target?: number
  /**
   * One request like the workload's, sent before measuring: it proves the key and the route work
   * (a bench of 401s would be fast and useless), and its response becomes the ceiling's answer.
   */
  probe?: { method: 'GET' | 'POST'; body?: string }
}

/** The NewPet the POST workloads send (bench/lua/post.lua and mix.lua carry the same text). */
export const NEW_PET = '{"name":"Biscuit","categoryId":3,"status":"available"}'

export const WORKLOADS: Workload[] = [
  {
    name: 'list20',
    description: 'GET /v1/pets?limit=20',
    path: '/v1/pets?limit=20',
    target: 0.5,
    probe: { method: 'GET' },
  },
  {
    name: 'list100',
    description: 'GET /v1/pets?limit=100&status=available',
    path: '/v1/pets?limit=100&status=available',
    target: 0.3,
    probe: { method: 'GET' },
  },
  {
    name: 'get',
    description: 'GET /v1/pets/{id}, random seeded id',
    path: '/v1/pets/1',
    script: join(LUA, 'get.lua'),
    scriptArgs: (key, pets) => [key, String(pets)],
    target: 0.6,
    probe: { method: 'GET' },
  },
  {
    name: 'post',
    description: 'POST /v1/pets',
    path: '/v1/pets',
    script: join(LUA, 'post.lua'),
    scriptArgs: (key) => [key],
    target: 0.4,
    probe: { method: 'POST', body: NEW_PET },
  },
  {
    name: 'mix',
    description: '90% GET /v1/pets?limit=20, 10% POST /v1/pets',
    path: '/v1/pets',
    script: join(LUA, 'mix.lua'),
    scriptArgs: (key) => [key],
  },
]

/** Latency and memory targets of the issue, checked on the primary service target. */
export const P99_TARGET_MS = 5
export const RSS_TARGET_MB = 150
