/**
 * The ceiling: a bare node:http server answering the benchmarked routes with responses captured
 * from the real service before the run (same bodies, same route headers), checking nothing.
 * It is what one Node process on one core can do with HTTP alone; the service's rate divided by
 * this one is the share left after routing, auth, validation, the database, serialization and logs.
 *
 * Run as: node bench/ceiling.ts <fixtures.json>, with PORT in the environment.
 */
import { readFileSync } from 'node:fs'
import { createServer } from 'node:http'

export interface Fixture {
  status: number
  headers: Record<string, string>
  body: string
}

export type Fixtures = Record<'list20' | 'list100' | 'get' | 'post', Fixture>

interface Prepared {
  status: number
  headers: Record<string, string | number>
  body: Buffer
}

function prepare({ status, headers, body }: Fixture): Prepared {
  const bytes = Buffer.from(body)
  return { status, headers: { ...headers, 'content-length': bytes.length }, body: bytes }
}

const fixtures = JSON.parse(readFileSync(process.argv[2] as string, 'utf8')) as Fixtures
const list20 = prepare(fixtures.list20)
const list100 = prepare(fixtures.list100)
const get = prepare(fixtures.get)
const post = prepare(fixtures.post)
const health = prepare({ status: 200, headers: { 'content-type': 'application/json' }, body: '{"status":"ok"}' })

createServer((request, response) => {
  const url = request.url ?? ''
  // Tell the routes apart by the cheapest test that does; a POST body is left for Node to discard.
  const answer =
    request.method === 'POST'
      ? post
      : url.startsWith('/v1/pets/')
        ? get
        : url.includes('status=')
          ? list100
          : url.startsWith('/v1/pets')
            ? list20
            : health
  response.writeHead(answer.status, answer.headers)
  response.end(answer.body)
}).listen(Number(process.env.PORT), '127.0.0.1')

// Exit through process.exit on SIGTERM, so that a --cpu-prof run writes its profile.
process.on('SIGTERM', () => process.exit(0))
