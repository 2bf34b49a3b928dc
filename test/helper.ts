/**
 * Builds the real app on a real database, the way src/server.ts does, for `app.inject` tests.
 * `build(t)` gives a test an app and a fresh database of its own (see testDatabaseUrl), removed
 * when the test ends; `suiteApp()` gives the tests of a suite one app to share.
 */
import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'
import { mkdtempSync, rmSync } from 'node:fs'
import { connect, type Socket } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import Fastify, { type FastifyInstance, type InjectOptions, type LightMyRequestResponse } from 'fastify'
import fp from 'fastify-plugin'
import pg from 'pg'
import animalStore, { serverOptions } from '../src/app.ts'
import { type Config, loadConfig } from '../src/config.ts'
import { generateApiKey } from '../src/domain/api-keys.ts'
import { type Cleanup, readByServer, suiteCleanup } from './processes.ts'
import { until } from './wait.ts'

export interface TestApp {
  app: FastifyInstance
  config: Config
  logs: Record<string, unknown>[]
  /** A fresh account and a valid key for it. */
  newKey(options?: {
    email?: string
    expiresAt?: string | null
    /** Space-separated scopes as stored; null (the default): every scope. */
    scopes?: string | null
  }): Promise<{ secret: string; keyId: string; accountId: number }>
}

/** Which database this run of the suite uses (scripts/test.ts runs it once for each). */
export const DATABASE: 'sqlite' | 'postgres' = process.env.TEST_DATABASE === 'postgres' ? 'postgres' : 'sqlite'
export const POSTGRES_URL = process.env.TEST_POSTGRES_URL || 'postgres://postgres@127.0.0.1:5432/test'

/**
 * A DATABASE_URL to a fresh, empty database of this run's kind, removed after the test:
 * a SQLite file in a temporary folder, or a PostgreSQL schema of its own (via search_path).
 */
export async function testDatabaseUrl(t: Cleanup): Promise<string> {
  if (DATABASE === 'sqlite') return `sqlite:${join(tempDir(t), 'test.db')}`
  const schema = `test_${randomUUID().replaceAll('-', '')}`
  await postgres(`CREATE SCHEMA ${schema}`)
  schemas.push(schema)
  const url = new URL(POSTGRES_URL)
  url.searchParams.set('options', `-c search_path=${schema}`)
  return url.toString()
}

/**
 * The schemas this file's tests made, dropped once the file is done. Not in each test's own after
 * hooks: those run in the order they were added, so the drop would come before the test's apps and
 * servers had stopped, and deadlock with their writes.
 */
const schemas: string[] = []
after(async () => {
  for (const schema of schemas.splice(0)) await postgres(`DROP SCHEMA IF EXISTS ${schema} CASCADE`)
})

/** Runs one statement on the test PostgreSQL server, outside any app. */
export async function postgres(sql: string, url = POSTGRES_URL): Promise<unknown[]> {
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  try {
    return (await client.query(sql)).rows
  } finally {
    await client.end()
  }
}

export type { Cleanup }

export function tempDir(t: Cleanup): string {
  const dir = mkdtempSync(join(tmpdir(), 'animal-store-test-'))
  t.after(() => rmSync(dir, { recursive: true, force: true }))
  return dir
}

export interface BuildOptions {
  /** Adds test-only routes or hooks before the app starts. */
  setup?: (app: FastifyInstance) => void
  /** Collects the app's JSON log lines (at level info) into `TestApp.logs`. */
  captureLogs?: boolean
}

/** `env` overrides the configuration (as environment variables would). */
export async function build(
  t: Cleanup,
  env: Record<string, string> = {},
  options: BuildOptions = {},
): Promise<TestApp> {
  const logs: Record<string, unknown>[] = []
  const config = loadConfig({
    DATABASE_URL: env.DATABASE_URL ?? (await testDatabaseUrl(t)),
    LOG_LEVEL: options.captureLogs ? 'info' : 'silent',
    ...env,
  })
  const stream = options.captureLogs ? { write: (line: string) => logs.push(JSON.parse(line)) } : undefined
  const app = Fastify(serverOptions(config, stream))
  // fp() exposes the app's decorations (app.store) to the test, as in fastify/demo's helper.
  await app.register(fp(animalStore), { config })
  options.setup?.(app)
  await app.ready()
  t.after(() => app.close())
  let accounts = 0
  return {
    app,
    config,
    logs,
    async newKey({ email = `user${++accounts}-${Date.now()}@example.com`, expiresAt = null, scopes = null } = {}) {
      const account = (await app.store.findAccountByEmail(email)) ?? (await app.store.createAccount(email))
      if (!account) throw new Error('account not created')
      const generated = generateApiKey(config.deployment)
      const key = await app.store.createApiKey({
        accountId: account.id,
        name: 'test',
        prefix: generated.prefix,
        hash: generated.hash,
        expiresAt,
        scopes,
      })
      return { secret: generated.secret, keyId: key.id, accountId: account.id }
    },
  }
}

/**
 * One app for the tests of a suite, for tests that only add what they look at (their own keys,
 * accounts, messages) and so cannot disturb one another: building an app costs more than most
 * tests. Call it in a describe() body; each test awaits the getter. Built at the first call, closed
 * (and its database removed) after the suite's last test.
 */
export function suiteApp(env: Record<string, string> = {}, options: BuildOptions = {}): () => Promise<TestApp> {
  const cleanup = suiteCleanup()
  let app: Promise<TestApp> | undefined
  return () => {
    app ??= build(cleanup, env, options)
    return app
  }
}

export const bearer = (secret: string) => ({ authorization: `Bearer ${secret}` })

/**
 * The log lines of `response`'s request show a database outage as docs/operations.md says: one
 * `database unavailable` line at warn, without a stack, and nothing at error. Returns that line.
 */
export function loggedAsOutage(logs: Record<string, unknown>[], response: LightMyRequestResponse) {
  const logged = logs.filter((line) => line.requestId === response.headers['x-request-id'])
  const warning = logged.find((line) => line.msg === 'database unavailable')
  if (warning?.level !== 40 || warning.err !== undefined) {
    throw new Error(`no warn line 'database unavailable' without a stack: ${JSON.stringify(logged)}`)
  }
  const errors = logged.filter((line) => Number(line.level) >= 50)
  if (errors.length > 0) throw new Error(`logged at error: ${JSON.stringify(errors)}`)
  return warning
}

/** The Error object of the spec, exactly: `{code, message, status}` with status equal to the HTTP status. */
export function errorBody(response: LightMyRequestResponse): { code: string; message: string; status: number } {
  const type = response.headers['content-type']
  if (!String(type).startsWith('application/json')) throw new Error(`error content-type is ${type}`)
  const body = response.json()
  const keys = Object.keys(body).sort().join(',')
  if (keys !== 'code,message,status') throw new Error(`error body has keys ${keys}`)
  if (body.status !== response.statusCode) throw new Error(`body.status ${body.status} ≠ HTTP ${response.statusCode}`)
  if (typeof body.code !== 'string' || typeof body.message !== 'string' || body.message.length === 0) {
    throw new Error(`error body fields have wrong types: ${response.body}`)
  }
  return body
}

/** Asserts that `response` is the error `status` with exactly this `code` and `message`. */
export function assertError(response: LightMyRequestResponse, status: number, code: string, message: string): void {
  assert.equal(response.statusCode, status, message)
  assert.deepEqual(errorBody(response), { code, message, status })
}

/**
 * Asserts that `test`'s configuration does not offer a feature: each of its `requests` is 404
 * `not_found`, and its OpenAPI document has no path starting with `prefix` and no schema `schema`.
 */
export async function assertNotOffered(test: TestApp, requests: InjectOptions[], prefix: string, schema: string) {
  for (const request of requests) {
    const response = await test.app.inject(request)
    assert.equal(response.statusCode, 404, `${request.method ?? 'GET'} ${request.url}`)
    assert.equal(errorBody(response).code, 'not_found')
  }
  const document = (await test.app.inject({ url: '/v1/openapi.json' })).json()
  assert.ok(!Object.keys(document.paths).some((path) => path.startsWith(prefix)))
  assert.equal(document.components.schemas[schema], undefined)
}

/** Store rows may be null-prototype objects; compare them as the JSON a client would see. */
export const plain = <T>(value: T): T => JSON.parse(JSON.stringify(value))

/** A message's fields, sorted: the schema requires each, and every answer has them all. */
export const MESSAGE_FIELDS = ['attempts', 'createdAt', 'deliveredAt', 'id', 'message', 'status', 'statusReason']

/**
 * The OpenAPI document's operations where no experimental feature is offered: path, then method,
 * then operationId (the portal's and the reference's routes are never in it).
 */
export const API_OPERATIONS: Record<string, Record<string, string>> = {
  '/messages': { get: 'listMessages', post: 'sendMessage' },
  '/messages/{messageId}': { get: 'getMessage' },
  '/openapi.json': { get: 'getOpenApiDocument' },
  '/pets': { get: 'listPets', post: 'createPet' },
  '/pets/{petId}': { get: 'getPet', patch: 'updatePet' },
  '/store/inventory': { get: 'getInventory' },
  '/store/orders': { get: 'listOrders', post: 'placeOrder' },
  '/store/orders/{orderId}': { get: 'getOrder' },
  '/store/orders/{orderId}/cancel': { post: 'cancelOrder' },
  '/store/orders/{orderId}/complete': { post: 'completeOrder' },
}

/** What a message was when it was sent: its status, attempts and delivery move on afterwards. */
export const asSent = (message: { id: string; message: string; createdAt: string } | undefined) =>
  message && { id: message.id, message: message.message, createdAt: message.createdAt }

/**
 * Writes `chunks` to a raw socket of the server at `port`, then with `halfClose` ends its side
 * (FIN), and resolves with all it answered, once it closes. Between two chunks it waits `between`:
 * 'read' until the server has read what was sent (so that each chunk is a read of its own), or a
 * number of ms, for a client whose slowness is the subject of the test.
 */
export function rawExchange(
  port: number,
  chunks: (Buffer | string)[],
  between: number | 'read' = 0,
  { halfClose = false } = {},
): Promise<string> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1')
    let received = ''
    socket.on('data', (data) => {
      received += data
    })
    socket.on('close', () => resolve(received))
    socket.on('error', () => resolve(received))
    socket.on('connect', async () => {
      for (const chunk of chunks) {
        if (socket.destroyed) break
        await new Promise((written) => socket.write(chunk, written))
        if (between === 'read') {
          await until('the chunk read by the server', () => socket.destroyed || readByServer(port, socket)).catch(
            () => {},
          )
        } else if (between) await sleep(between) // a slow client, on purpose
      }
      if (halfClose && !socket.destroyed) socket.end()
    })
  })
}

/**
 * The server's side of its connections from now on: how many it has taken from the backlog (kept,
 * or dropped past MAX_CONNECTIONS), how many of those it dropped, and how many it holds open.
 */
export function serverConnections(test: TestApp) {
  let accepted = 0
  let dropped = 0
  let closed = 0
  test.app.server.on('drop', () => dropped++)
  test.app.server.on('connection', (socket: Socket) => {
    accepted++
    socket.once('close', () => closed++)
  })
  return { seen: () => accepted + dropped, dropped: () => dropped, open: () => accepted - closed }
}
