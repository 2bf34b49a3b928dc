import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { Validator } from '@seriousme/openapi-schema-validator'
import { ERROR_CODES } from '../../src/errors.ts'
import { build } from '../helper.ts'

async function document(t: Parameters<typeof build>[0], env: Record<string, string> = {}) {
  const { app } = await build(t, env)
  const response = await app.inject({ url: '/v1/openapi.json' })
  assert.equal(response.statusCode, 200)
  assert.match(String(response.headers['content-type']), /^application\/json/)
  return response.json()
}

describe('OpenAPI: GET /v1/openapi.json (point 8)', () => {
  it('serves a valid OpenAPI 3.1 document without a key', async (t) => {
    const doc = await document(t)
    assert.match(doc.openapi, /^3\.1\./)
    const result = await new Validator().validate(doc)
    assert.equal(result.valid, true, JSON.stringify(result.errors, null, 2))
    assert.equal(doc.info.version, '1.0.0')
  })

  it('has the spec operations with their operationIds, paths relative to the /v1 servers', async (t) => {
    const doc = await document(t)
    assert.deepEqual(Object.keys(doc.paths).sort(), ['/messages', '/pets', '/pets/{petId}'])
    assert.equal(doc.paths['/pets'].get.operationId, 'listPets')
    assert.equal(doc.paths['/pets'].post.operationId, 'createPet')
    assert.equal(doc.paths['/pets/{petId}'].get.operationId, 'getPet')
    assert.equal(doc.paths['/messages'].post.operationId, 'sendMessage')
  })

  it('lists production and staging servers from configuration, this deployment first (clients default to it)', async (t) => {
    const urls = { PRODUCTION_URL: 'https://api.pets.test/v1', STAGING_URL: 'https://staging.pets.test/v1' }
    const production = { url: 'https://api.pets.test/v1', description: 'Production' }
    const staging = { url: 'https://staging.pets.test/v1', description: 'Staging' }
    assert.deepEqual((await document(t, { ...urls, DEPLOYMENT: 'staging' })).servers, [staging, production])
    assert.deepEqual((await document(t, { ...urls, DEPLOYMENT: 'production' })).servers, [production, staging])
  })

  it("documents getPet's Deprecation, Sunset and Link headers on its errors too, as it sends them", async (t) => {
    const responses = (await document(t)).paths['/pets/{petId}'].get.responses
    for (const status of ['200', '400', '401', '404', '410', '429', '500', '503']) {
      for (const name of ['Deprecation', 'Sunset', 'Link'])
        assert.ok(responses[status].headers[name], `${status} ${name}`)
    }
  })

  it('declares the bearer scheme and requires it on every operation', async (t) => {
    const doc = await document(t)
    assert.deepEqual(
      {
        type: doc.components.securitySchemes.bearerAuth.type,
        scheme: doc.components.securitySchemes.bearerAuth.scheme,
      },
      { type: 'http', scheme: 'bearer' },
    )
    for (const [path, item] of Object.entries<
      Record<string, { security: unknown; responses: Record<string, unknown> }>
    >(doc.paths)) {
      for (const [method, operation] of Object.entries(item)) {
        assert.deepEqual(operation.security, [{ bearerAuth: [] }], `${method} ${path}`)
        assert.ok(operation.responses['401'], `${method} ${path} documents 401`)
      }
    }
  })

  it('documents every status the POST operations return, 413 and 415 included', async (t) => {
    const doc = await document(t)
    for (const operation of [doc.paths['/pets'].post, doc.paths['/messages'].post]) {
      for (const status of ['400', '401', '409', '413', '415', '422', '429', '500', '503']) {
        assert.ok(operation.responses[status], `${operation.operationId} ${status}`)
      }
    }
  })

  it('every operation documents X-Request-Id on each response, and a default Error response for the rest', async (t) => {
    const doc = await document(t)
    type Response = {
      headers?: Record<string, unknown>
      content: { 'application/json': { schema: { $ref?: string } } }
    }
    type Operation = { responses: Record<string, Response> }
    for (const [path, item] of Object.entries(doc.paths as Record<string, Record<string, Operation>>)) {
      for (const [method, operation] of Object.entries(item)) {
        if (path === '/openapi.json') continue
        const name = `${method.toUpperCase()} ${path}`
        assert.equal(
          operation.responses.default?.content['application/json'].schema.$ref,
          '#/components/schemas/Error',
          name,
        )
        for (const [status, response] of Object.entries(operation.responses)) {
          assert.ok(response.headers?.['X-Request-Id'], `${name} ${status}`)
        }
        // A request with a valid key is counted, whatever its answer (400 included).
        assert.ok(operation.responses['400']?.headers?.RateLimit, name)
      }
    }
  })

  it('marks getPet deprecated and documents its 200, 401 and 404', async (t) => {
    const doc = await document(t)
    const getPet = doc.paths['/pets/{petId}'].get
    assert.equal(getPet.deprecated, true)
    assert.match(getPet.description, /5 December 2030/)
    for (const status of ['200', '401', '404']) assert.ok(getPet.responses[status], status)
    for (const status of ['200', '404']) {
      assert.deepEqual(Object.keys(getPet.responses[status].headers).slice(0, 3), ['Deprecation', 'Sunset', 'Link'])
    }
    const petId = getPet.parameters.find((p: { name: string }) => p.name === 'petId')
    assert.deepEqual(
      { in: petId.in, required: petId.required, type: petId.schema.type, format: petId.schema.format },
      {
        in: 'path',
        required: true,
        type: 'integer',
        format: 'int64',
      },
    )
  })

  it('describes the spec fields: Pet, NewPet, Error, Message, limit 1-100 default 20, status enum', async (t) => {
    const doc = await document(t)
    const { Pet, NewPet, Error: ErrorObject, Message } = doc.components.schemas
    assert.deepEqual(Pet.required.sort(), ['categoryId', 'id', 'name', 'status'])
    assert.deepEqual(NewPet.required.sort(), ['categoryId', 'name'])
    assert.equal(Pet.properties.id.format, 'int64')
    assert.equal(NewPet.properties.categoryId.format, 'int64')
    assert.deepEqual(NewPet.properties.status.enum, ['available', 'pending', 'sold'])
    assert.deepEqual(ErrorObject.required.sort(), ['code', 'message', 'status'])
    for (const code of ERROR_CODES) assert.match(ErrorObject.properties.code.description, new RegExp(code))
    assert.deepEqual(Message.required.sort(), ['createdAt', 'id', 'message', 'status'])
    const list = doc.paths['/pets'].get
    const limit = list.parameters.find((p: { name: string }) => p.name === 'limit')
    assert.deepEqual(
      { required: limit.required, ...limit.schema },
      { required: false, type: 'integer', minimum: 1, maximum: 100, default: 20 },
    )
    const status = list.parameters.find((p: { name: string }) => p.name === 'status')
    assert.deepEqual(status.schema.enum, ['available', 'pending', 'sold'])
    assert.deepEqual(list.responses['200'].content['application/json'].schema.items, {
      $ref: '#/components/schemas/Pet',
    })
    assert.deepEqual(doc.paths['/pets'].post.requestBody.content['application/json'].schema, {
      $ref: '#/components/schemas/NewPet',
    })
    assert.equal(
      doc.paths['/pets'].post.responses['201'].content['application/json'].schema.$ref,
      '#/components/schemas/Pet',
    )
    assert.equal(
      doc.paths['/messages'].post.responses['202'].content['application/json'].schema.$ref,
      '#/components/schemas/Message',
    )
  })

  it('closes request bodies to unknown fields, and leaves responses open to fields added later (decision 20)', async (t) => {
    const { Pet, NewPet, Error: ErrorObject, Message, NewMessage } = (await document(t)).components.schemas
    assert.equal(NewPet.additionalProperties, false)
    assert.equal(NewMessage.additionalProperties, false)
    for (const [name, schema] of Object.entries({ Pet, Error: ErrorObject, Message })) {
      assert.equal(schema.additionalProperties, undefined, name)
    }
  })
})
