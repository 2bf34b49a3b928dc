/**
 * The ceiling: node:http answering with the service's captured responses, checking nothing. Args:
 * fixtures.json (one answer per workload, by name, and `cancel` for any POST …/cancel: a mix's
 * requests get the answers of the workloads they are made of); env: PORT.
 */
import { readFileSync } from 'node:fs'
import { createServer } from 'node:http'

export interface Fixture {
  status: number
  headers: Record<string, string>
  body: string
  /** The Authorization header that gets this answer on GET /v1/pets/{id} instead of the pet (the refusals). */
  authorization?: string
}

const fixtures = JSON.parse(readFileSync(process.argv[2] as string, 'utf8')) as Record<string, Fixture>
const prepare = ({ status, headers, body }: Fixture) => ({
  status,
  headers: { ...headers, 'content-length': Buffer.byteLength(body) },
  body: Buffer.from(body),
})
const answers = Object.fromEntries(Object.entries(fixtures).map(([name, fixture]) => [name, prepare(fixture)]))
const health = prepare({ status: 200, headers: { 'content-type': 'application/json' }, body: '{"status":"ok"}' })
const refusals = new Map(
  Object.entries(fixtures).flatMap(([name, f]) => (f.authorization ? [[f.authorization, answers[name]]] : [])),
)
const { post, get, list100, list20, order, cancel, webhooks } = answers

createServer((request, response) => {
  const url = request.url ?? ''
  // Tell the routes apart by the cheapest test that does; a POST body is left for Node to discard.
  const answer =
    (request.method === 'POST'
      ? url === '/v1/store/orders'
        ? order
        : url.endsWith('/cancel')
          ? cancel
          : url === '/v1/messages'
            ? webhooks
            : post
      : url.startsWith('/v1/pets/')
        ? (refusals.get(request.headers.authorization ?? '') ?? get)
        : url.includes('status=')
          ? list100
          : url.startsWith('/v1/pets')
            ? list20
            : health) ?? health
  response.writeHead(answer.status, answer.headers)
  response.end(answer.body)
}).listen(Number(process.env.PORT), '127.0.0.1')

// Exit through process.exit on SIGTERM, so that a --cpu-prof run writes its profile.
process.on('SIGTERM', () => process.exit(0))
