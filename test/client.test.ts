/**
 * The typed client (animal-store/client): generated from the served OpenAPI document and kept
 * current, shown in the README by a quickstart that runs verbatim, and able to walk every page.
 */
import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, it } from 'node:test'
import { AnimalStoreError, allPets, createAnimalStoreClient, nextLink, unwrap } from 'animal-store/client'
import { CLIENT_TYPES_FILE, generateClientTypes } from '../scripts/generate-client.ts'
import { bearer, build, testDatabaseUrl } from './helper.ts'
import { cliKey, ROOT, runNode, startServer } from './processes.ts'
import { assertShows, codeBlocks, readmeSection } from './readme.ts'

/** The README's typed client section: the code it shows and the output it promises. */
function readmeQuickstart(): { code: string; output: string[] } {
  const blocks = codeBlocks(readmeSection('client-quickstart'))
  const code = blocks.find((block) => block.lang === 'ts')?.body
  const output = blocks.find((block) => block.lang === 'text')?.body
  assert.ok(code && output, 'the client quickstart section lacks its code or its output')
  return { code, output: output.trimEnd().split('\n') }
}

describe('Typed client: generated from the served OpenAPI document', () => {
  it(`${CLIENT_TYPES_FILE} is what npm run client:generate produces now (run it after changing the API)`, async () => {
    const checkedIn = readFileSync(join(ROOT, CLIENT_TYPES_FILE), 'utf8')
    assert.ok(checkedIn === (await generateClientTypes()), `${CLIENT_TYPES_FILE} is stale: run npm run client:generate`)
  })
})

describe('Typed client: the README quickstart', () => {
  it('the README shows examples/quickstart.ts verbatim', () => {
    assert.equal(readmeQuickstart().code, readFileSync(join(ROOT, 'examples/quickstart.ts'), 'utf8'))
  })

  it('runs with npx node examples/quickstart.ts against a fresh server and prints what the README says', {
    timeout: 60_000,
  }, async (t) => {
    const databaseUrl = await testDatabaseUrl(t)
    const server = await startServer(t, { DATABASE_URL: databaseUrl })
    const apiKey = await cliKey({ DATABASE_URL: databaseUrl })
    const run = await runNode(['examples/quickstart.ts'], { API_KEY: apiKey, ANIMAL_STORE_URL: `${server.url}/v1` })
    assert.equal(run.code, 0, run.stderr)
    assertShows(run.stdout, readmeQuickstart().output, 'the quickstart')
  })
})

describe('Typed client: the quickstart without a key', () => {
  it('says what to set (API_KEY, from the portal or keys create) and exits 1, without a stack trace', async () => {
    const run = await runNode(['examples/quickstart.ts'], { API_KEY: '', ANIMAL_STORE_URL: 'http://127.0.0.1:9/v1' })
    assert.equal(run.code, 1)
    assert.equal(run.stdout, '')
    assert.equal(
      run.stderr,
      'Set API_KEY to one of your keys, from the portal (http://127.0.0.1:9/portal) or from\n' +
        '"npx animal-store keys create you@example.com": export API_KEY=as_test_…\n',
    )
  })
})

describe('Typed client: calls and pages', () => {
  it('allPets follows Link rel="next" to the end: every animal once, in id order, with the filter kept', async (t) => {
    const test = await build(t)
    const { secret } = await test.newKey()
    const statuses = ['available', 'sold', 'sold', 'pending', 'sold'] as const
    for (const [i, status] of statuses.entries()) {
      const created = await test.app.inject({
        method: 'POST',
        url: '/v1/pets',
        headers: bearer(secret),
        payload: { name: `pet ${i + 1}`, categoryId: 1, status },
      })
      assert.equal(created.statusCode, 201)
    }
    const requests: string[] = []
    const fetch = injectFetch(test.app)
    const client = createAnimalStoreClient({
      baseUrl: 'http://animal-store.test/v1/',
      apiKey: secret,
      fetch: async (input, init) => {
        requests.push(new Request(input, init).url)
        return fetch(input, init)
      },
    })
    const ids = async (query?: Parameters<typeof allPets>[1]) => {
      const seen: number[] = []
      for await (const pet of allPets(client, query)) seen.push(pet.id)
      return seen
    }
    assert.deepEqual(await ids({ limit: 2 }), [1, 2, 3, 4, 5])
    assert.equal(requests.length, 3, 'three pages of two')
    assert.match(requests[1] as string, /^http:\/\/animal-store\.test\/v1\/pets\?limit=2&cursor=/)
    assert.deepEqual(await ids({ status: 'sold', limit: 1 }), [2, 3, 5])
    assert.deepEqual(await ids(), [1, 2, 3, 4, 5])
  })

  it('unwrap throws an AnimalStoreError with the API code, status and request id', async (t) => {
    const test = await build(t)
    const client = createAnimalStoreClient({
      baseUrl: 'http://animal-store.test/v1',
      apiKey: 'as_test_wrong',
      fetch: injectFetch(test.app),
    })
    const result = await client.GET('/pets')
    assert.equal(result.response.status, 401)
    assert.throws(
      () => unwrap(result),
      (error) =>
        error instanceof AnimalStoreError &&
        error.code === 'invalid_api_key' &&
        error.status === 401 &&
        typeof error.requestId === 'string',
    )
  })

  it('PATCH changes an animal; with If-Match from the ETag, a stale version is refused (412)', async (t) => {
    const test = await build(t)
    const { secret } = await test.newKey()
    const client = createAnimalStoreClient({
      baseUrl: 'http://animal-store.test/v1',
      apiKey: secret,
      fetch: injectFetch(test.app),
    })
    const rex = unwrap(await client.POST('/pets', { body: { name: 'Rex', categoryId: 1 } }))
    const read = await client.GET('/pets/{petId}', { params: { path: { petId: rex.id } } })
    const etag = read.response.headers.get('etag') as string
    const path = { petId: rex.id }
    const sold = await client.PATCH('/pets/{petId}', { params: { path }, body: { status: 'sold' } })
    assert.deepEqual(unwrap(sold), { ...rex, status: 'sold' })
    const stale = await client.PATCH('/pets/{petId}', {
      params: { path, header: { 'if-match': etag } },
      body: { name: 'Max' },
    })
    assert.equal(stale.response.status, 412)
    assert.throws(
      () => unwrap(stale),
      (error) => error instanceof AnimalStoreError && error.code === 'precondition_failed',
    )
  })

  it('nextLink reads the rel="next" target among several links, and null when there is none', () => {
    assert.equal(nextLink('<https://a.test/v1/pets?cursor=x>; rel="next"'), 'https://a.test/v1/pets?cursor=x')
    assert.equal(nextLink('<https://a.test/v1/pets>; rel="successor-version"'), null)
    assert.equal(nextLink('<https://a.test/1>; rel="prev", <https://a.test/3>; rel=next'), 'https://a.test/3')
    assert.equal(nextLink(null), null)
  })
})

/** A fetch that answers from the app in-process (app.inject), for client tests without a port. */
function injectFetch(app: Awaited<ReturnType<typeof build>>['app']): typeof fetch {
  return async (input, init) => {
    const request = new Request(input, init)
    const response = await app.inject({
      method: request.method as 'GET',
      url: new URL(request.url).pathname + new URL(request.url).search,
      headers: Object.fromEntries(request.headers),
      ...(request.body && { payload: await request.text() }),
    })
    return new Response(response.body || null, {
      status: response.statusCode,
      headers: response.headers as Record<string, string>,
    })
  }
}
