/**
 * The framework's floor: Fastify 5 answering with the service's captured responses, as the ceiling
 * does with node:http (bench/ceiling.ts), through routes of the service's shapes (a path parameter,
 * a query string, a parsed JSON body) and nothing else: no hooks, schemas, log or store. What it
 * spends beyond the ceiling is what any Fastify app spends per request; the service's own stages
 * come on top of it. Args: fixtures.json; env: PORT.
 */
import { readFileSync } from 'node:fs'
import Fastify, { type FastifyReply } from 'fastify'
import type { Fixture } from './ceiling.ts'

const fixtures = JSON.parse(readFileSync(process.argv[2] as string, 'utf8')) as Record<string, Fixture>
const health: Fixture = { status: 200, headers: { 'content-type': 'application/json' }, body: '{"status":"ok"}' }
const answer = (name: string) => {
  const { status, headers, body } = fixtures[name] ?? health
  return (_: unknown, reply: FastifyReply) => reply.code(status).headers(headers).send(body)
}

const app = Fastify({ logger: false })
const [list20, list100] = [answer('list20'), answer('list100')]
app.get('/v1/pets', (request, reply) =>
  ((request.query as Record<string, string>).status ? list100 : list20)(request, reply),
)
app.get('/v1/pets/:id', answer('get'))
app.post('/v1/pets', answer('post'))
app.post('/v1/store/orders', answer('order'))
app.post('/v1/store/orders/:id/cancel', answer('cancel'))
app.post('/v1/messages', answer('webhooks'))
app.get('/healthz', answer('health'))
await app.listen({ port: Number(process.env.PORT), host: '127.0.0.1' })

// Exit through process.exit on SIGTERM, so that a --cpu-prof run writes its profile.
process.on('SIGTERM', () => process.exit(0))
