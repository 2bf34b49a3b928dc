/**
 * The peer: the pets API as a competent engineer would write it with plain Fastify 5 and node:sqlite,
 * without this project's features (no cache, no writer thread or group commit, no rate limits,
 * idempotency, ETags or deprecation headers). The reference the issue compares against: "a competent
 * Fastify + SQLite server with no cache". Same routes and answer shapes as the service for
 * GET /v1/pets (limit, status; the next page by `afterId` rather than an opaque cursor),
 * GET /v1/pets/{id} and POST /v1/pets; a bearer key checked against a table of key hashes; JSON
 * schemas validating requests and serializing answers; WAL with synchronous=FULL, as the service
 * ships; prepared statements. One JSON log line per answer, as the service logs.
 *
 * Run: node bench/peer.ts, env PORT, HOST (127.0.0.1), PEER_DATABASE (a file seeded by seedPeer),
 * LOG_LEVEL (info). The bench (bench/targets.ts) seeds it with the service's pets and key.
 */
import { hash } from 'node:crypto'
import { DatabaseSync } from 'node:sqlite'
import Fastify, { type FastifyReply, LogController } from 'fastify'

const SCHEMA = `
CREATE TABLE IF NOT EXISTS pets (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  name TEXT NOT NULL,
  category_id INTEGER NOT NULL,
  status TEXT NOT NULL CHECK (status = 'available' OR status = 'pending' OR status = 'sold')
) STRICT;
CREATE INDEX IF NOT EXISTS pets_status_id ON pets (status, id);
CREATE TABLE IF NOT EXISTS api_keys (
  hash TEXT PRIMARY KEY,
  owner TEXT NOT NULL
) STRICT, WITHOUT ROWID;
`

/** The database at `path`, set up as the service sets up its own. */
export function openPeerDatabase(path: string): DatabaseSync {
  const db = new DatabaseSync(path)
  db.exec('PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; PRAGMA busy_timeout = 5000; PRAGMA foreign_keys = ON')
  db.exec(SCHEMA)
  return db
}

/** A key's stored form: its SHA-256, as the service stores keys (a high-entropy key needs no slow hash). */
export const hashKey = (secret: string) => hash('sha256', secret, 'base64url')

/** The pets, in order, and one key, in one transaction. */
export function seedPeer(
  path: string,
  pets: Iterable<{ name: string; categoryId: number; status?: string }>,
  secret: string,
): void {
  const db = openPeerDatabase(path)
  try {
    const insert = db.prepare('INSERT INTO pets (name, category_id, status) VALUES (?, ?, ?)')
    db.exec('BEGIN')
    for (const pet of pets) insert.run(pet.name, pet.categoryId, pet.status ?? 'available')
    db.prepare('INSERT INTO api_keys (hash, owner) VALUES (?, ?)').run(hashKey(secret), 'bench@example.com')
    db.exec('COMMIT')
  } finally {
    db.close()
  }
}

const STATUSES = ['available', 'pending', 'sold']
const ERROR = {
  type: 'object',
  properties: { code: { type: 'string' }, message: { type: 'string' }, status: { type: 'integer' } },
}
const PET = {
  type: 'object',
  properties: {
    id: { type: 'integer' },
    name: { type: 'string' },
    categoryId: { type: 'integer' },
    status: { type: 'string' },
  },
}
const NEW_PET = {
  type: 'object',
  required: ['name', 'categoryId'],
  additionalProperties: false,
  properties: {
    name: { type: 'string', minLength: 1, maxLength: 200 },
    categoryId: { type: 'integer', minimum: 1, maximum: Number.MAX_SAFE_INTEGER },
    status: { type: 'string', enum: STATUSES, default: 'available' },
  },
}
const LIST_QUERY = {
  type: 'object',
  additionalProperties: false,
  properties: {
    limit: { type: 'integer', minimum: 1, maximum: 100, default: 20 },
    status: { type: 'string', enum: STATUSES },
    afterId: { type: 'integer', minimum: 0 },
  },
}
const PET_PARAMS = {
  type: 'object',
  properties: { petId: { type: 'integer', minimum: 1, maximum: Number.MAX_SAFE_INTEGER } },
}
const errors = { 400: ERROR, 401: ERROR, 404: ERROR, 500: ERROR }

interface Pet {
  id: number
  name: string
  categoryId: number
  status: string
}

const fail = (reply: FastifyReply, status: number, code: string, message: string) =>
  reply.code(status).send({ code, message, status })

/** Fastify's "request completed" line, without its "incoming request" line: one per answer, as the service. */
class OneLinePerRequest extends LogController {
  override incomingRequest(): void {}
}

async function serve(): Promise<void> {
  const db = openPeerDatabase(process.env.PEER_DATABASE as string)
  const columns = 'id, name, category_id AS categoryId, status'
  const statements = {
    key: db.prepare('SELECT owner FROM api_keys WHERE hash = ?'),
    page: db.prepare(`SELECT ${columns} FROM pets WHERE id > ? ORDER BY id LIMIT ?`),
    pageOf: db.prepare(`SELECT ${columns} FROM pets WHERE status = ? AND id > ? ORDER BY id LIMIT ?`),
    pet: db.prepare(`SELECT ${columns} FROM pets WHERE id = ?`),
    insert: db.prepare(`INSERT INTO pets (name, category_id, status) VALUES (?, ?, ?) RETURNING ${columns}`),
  }

  const app = Fastify({ logger: { level: process.env.LOG_LEVEL ?? 'info' }, logController: new OneLinePerRequest() })
  app.setErrorHandler((error: { validation?: unknown; statusCode?: number; message: string }, request, reply) => {
    if (error.validation) return fail(reply, 400, 'validation_failed', error.message)
    if (error.statusCode && error.statusCode < 500) return fail(reply, error.statusCode, 'bad_request', error.message)
    request.log.error(error)
    return fail(reply, 500, 'internal_error', 'Unexpected failure.')
  })
  app.setNotFoundHandler((_request, reply) => fail(reply, 404, 'not_found', 'Not found.'))

  app.get('/healthz', () => ({ status: 'ok' }))

  app.register(
    async (api) => {
      api.addHook('onRequest', (request, reply, done) => {
        const header = request.headers.authorization
        const secret = header?.startsWith('Bearer ') ? header.slice(7) : ''
        if (secret && statements.key.get(hashKey(secret))) return done()
        reply.header('www-authenticate', 'Bearer realm="animal-store"')
        fail(reply, 401, secret ? 'invalid_api_key' : 'missing_api_key', 'Send a valid API key.')
      })

      api.get<{ Querystring: { limit: number; status?: string; afterId?: number } }>(
        '/pets',
        { schema: { querystring: LIST_QUERY, response: { 200: { type: 'array', items: PET }, ...errors } } },
        (request, reply) => {
          const { limit, status, afterId = 0 } = request.query
          // One more than asked tells whether a next page exists.
          const rows = (status
            ? statements.pageOf.all(status, afterId, limit + 1)
            : statements.page.all(afterId, limit + 1)) as unknown as Pet[]
          if (rows.length > limit) {
            rows.length = limit
            const next = `/v1/pets?limit=${limit}${status ? `&status=${status}` : ''}&afterId=${rows.at(-1)?.id}`
            reply.header('link', `<${request.protocol}://${request.host}${next}>; rel="next"`)
          }
          return rows
        },
      )

      api.get<{ Params: { petId: number } }>(
        '/pets/:petId',
        { schema: { params: PET_PARAMS, response: { 200: PET, ...errors } } },
        (request, reply) => {
          const pet = statements.pet.get(request.params.petId)
          if (pet) return pet
          fail(reply, 404, 'pet_not_found', `No pet with id ${request.params.petId}.`)
        },
      )

      api.post<{ Body: { name: string; categoryId: number; status: string } }>(
        '/pets',
        { schema: { body: NEW_PET, response: { 201: PET, ...errors } } },
        (request, reply) => {
          const { name, categoryId, status } = request.body
          const pet = statements.insert.get(name, categoryId, status) as unknown as Pet
          reply.code(201).header('location', `${request.protocol}://${request.host}/v1/pets/${pet.id}`)
          return pet
        },
      )
    },
    { prefix: '/v1' },
  )

  await app.listen({ port: Number(process.env.PORT), host: process.env.HOST ?? '127.0.0.1' })
  process.once('SIGTERM', () => {
    void app.close().then(() => {
      db.close()
      // Through process.exit, so that a --cpu-prof run writes its profile.
      process.exit(0)
    })
  })
}

if (import.meta.main) await serve()
