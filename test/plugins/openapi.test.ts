import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { Validator } from '@seriousme/openapi-schema-validator'
import { Ajv2020 } from 'ajv/dist/2020.js'
import { ERROR_CODES, ERRORS, type ErrorCode } from '../../src/errors.ts'
import { ALL_EVENT_TYPES, EVENT_TYPES } from '../../src/schemas/webhooks.ts'
import { newWebhookSecret } from '../../src/webhooks/signing.ts'
import { API_OPERATIONS, bearer, build, errorBody, MESSAGE_FIELDS, suiteApp } from '../helper.ts'
import { until } from '../wait.ts'
import { receiver } from '../webhooks/receiver.ts'

// One database: the document is built from the schemas, whatever the store.

/**
 * The document an app of `env` serves, for the tests of a suite (call it in a describe() body): it is
 * the same for each of them, so it is fetched once. Each call parses it anew: a test may change its copy.
 */
function served(env: Record<string, string> = {}) {
  const shared = suiteApp(env)
  let body: Promise<string> | undefined
  return async () => {
    body ??= shared().then(async ({ app }) => {
      const response = await app.inject({ url: '/v1/openapi.json' })
      assert.equal(response.statusCode, 200)
      assert.match(String(response.headers['content-type']), /^application\/json/)
      return response.body
    })
    return JSON.parse(await body)
  }
}

/** The scope each operation needs (decision 77). */
const SCOPE_OF: Record<string, string> = {
  listPets: 'pets:read',
  getPet: 'pets:read',
  createPet: 'pets:write',
  updatePet: 'pets:write',
  sendMessage: 'messages:write',
  listMessages: 'messages:read',
  getMessage: 'messages:read',
  createWebhookEndpoint: 'webhooks:write',
  listWebhookEndpoints: 'webhooks:read',
  getWebhookEndpoint: 'webhooks:read',
  updateWebhookEndpoint: 'webhooks:write',
  deleteWebhookEndpoint: 'webhooks:write',
  rotateWebhookSecret: 'webhooks:write',
  listWebhookDeliveries: 'webhooks:read',
  redeliverWebhook: 'webhooks:write',
  sendWebhookTestEvent: 'webhooks:write',
  recoverWebhookDeliveries: 'webhooks:write',
  listEvents: 'webhooks:read',
  getEvent: 'webhooks:read',
  placeOrder: 'orders:write',
  listOrders: 'orders:read',
  getOrder: 'orders:read',
  completeOrder: 'orders:write',
  cancelOrder: 'orders:write',
  getInventory: 'pets:read',
}

/** The experimental operations offered too: the walks over every operation see them all. */
const WEBHOOKS = { EXPERIMENTAL_FEATURES: 'webhooks' }

describe('OpenAPI: GET /v1/openapi.json (point 8)', () => {
  const urls = { PRODUCTION_URL: 'https://api.pets.test/v1', STAGING_URL: 'https://staging.pets.test/v1' }
  const document = served()
  const withWebhooks = served(WEBHOOKS)
  const onStaging = served({ ...urls, DEPLOYMENT: 'staging' })
  const onProduction = served({ ...urls, DEPLOYMENT: 'production' })
  const withContact = served({ ...WEBHOOKS, PRODUCTION_URL: 'https://api.pets.test/v1', DEPLOYMENT: 'production' })

  it('serves a valid OpenAPI 3.1 document without a key, with or without the experimental operations', async () => {
    for (const doc of [await document(), await withWebhooks()]) {
      assert.match(doc.openapi, /^3\.1\./)
      const result = await new Validator().validate(doc)
      assert.equal(result.valid, true, JSON.stringify(result.errors, null, 2))
      assert.equal(doc.info.version, '1.0.0')
    }
  })

  it('has the spec operations with their operationIds, paths relative to the /v1 servers', async () => {
    const doc = await document()
    assert.deepEqual(Object.keys(doc.paths).sort(), Object.keys(API_OPERATIONS))
    for (const [path, operations] of Object.entries(API_OPERATIONS)) {
      for (const [method, operationId] of Object.entries(operations)) {
        assert.equal(doc.paths[path][method]?.operationId, operationId, `${method} ${path}`)
      }
    }
  })

  it('lists production and staging servers from configuration, this deployment first (clients default to it)', async () => {
    const production = { url: 'https://api.pets.test/v1', description: 'Production' }
    const staging = { url: 'https://staging.pets.test/v1', description: 'Staging' }
    assert.deepEqual((await onStaging()).servers, [staging, production])
    assert.deepEqual((await onProduction()).servers, [production, staging])
  })

  it('documents updatePet: not deprecated, a merge patch in either media type, ETag on 200 and getPet', async () => {
    const doc = await document()
    const updatePet = doc.paths['/pets/{petId}'].patch
    assert.equal(updatePet.operationId, 'updatePet')
    assert.equal(updatePet.deprecated, undefined)
    assert.deepEqual(Object.keys(updatePet.requestBody.content), ['application/merge-patch+json', 'application/json'])
    assert.equal(updatePet.requestBody.content['application/json'].schema.$ref, '#/components/schemas/PetPatch')
    assert.equal(doc.components.schemas.PetPatch.additionalProperties, false)
    assert.ok(updatePet.responses['200'].headers.ETag)
    for (const status of ['404', '409', '412', '415']) assert.ok(updatePet.responses[status], status)
    assert.ok(
      updatePet.parameters.some((p: { in: string; name: string }) => p.in === 'header' && p.name === 'if-match'),
    )
    assert.ok(doc.paths['/pets/{petId}'].get.responses['200'].headers.ETag)
  })

  it("documents getPet's Deprecation, Sunset and Link headers on its errors too, as it sends them", async () => {
    const responses = (await document()).paths['/pets/{petId}'].get.responses
    for (const status of ['200', '400', '401', '404', '410', '429', '500', '503']) {
      for (const name of ['Deprecation', 'Sunset', 'Link'])
        assert.ok(responses[status].headers[name], `${status} ${name}`)
    }
  })

  it('declares the bearer scheme and requires it, with the scope it needs, on every operation but the document', async () => {
    const doc = await withWebhooks()
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
        // The document itself is served without a key, and says so.
        if (path === '/openapi.json') {
          assert.deepEqual(operation.security, [], `${method} ${path}`)
          continue
        }
        const scope = SCOPE_OF[(operation as unknown as { operationId: string }).operationId]
        assert.deepEqual(operation.security, [{ bearerAuth: [scope] }], `${method} ${path}`)
        assert.ok(operation.responses['401'], `${method} ${path} documents 401`)
        assert.ok(operation.responses['403'], `${method} ${path} documents 403`)
      }
    }
  })

  it('documents every status the POST operations return, 413 and 415 included', async () => {
    const doc = await document()
    for (const operation of [doc.paths['/pets'].post, doc.paths['/messages'].post]) {
      for (const status of ['400', '401', '409', '413', '415', '422', '429', '500', '503']) {
        assert.ok(operation.responses[status], `${operation.operationId} ${status}`)
      }
    }
  })

  it('every operation documents X-Request-Id on each response, and a default Error response for the rest', async () => {
    const doc = await withWebhooks()
    type Response = {
      headers?: Record<string, unknown>
      content: { 'application/json': { schema: { $ref?: string } } }
    }
    type Operation = { responses: Record<string, Response> }
    for (const [path, item] of Object.entries(doc.paths as Record<string, Record<string, Operation>>)) {
      for (const [method, operation] of Object.entries(item)) {
        const name = `${method.toUpperCase()} ${path}`
        assert.equal(
          operation.responses.default?.content['application/json'].schema.$ref,
          '#/components/schemas/Error',
          name,
        )
        for (const [status, response] of Object.entries(operation.responses)) {
          assert.ok(response.headers?.['X-Request-Id'], `${name} ${status}`)
        }
        // A request with a valid key is counted, whatever its answer (400 included); the document needs no key.
        if (path !== '/openapi.json') assert.ok(operation.responses['400']?.headers?.RateLimit, name)
      }
    }
  })

  it('marks getPet deprecated and documents its 200, 401 and 404', async () => {
    const doc = await document()
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

  it('describes the spec fields: Pet, NewPet, Error, Message, limit 1-100 default 20, status enum', async () => {
    const doc = await document()
    const { Pet, NewPet, Error: ErrorObject, Message } = doc.components.schemas
    assert.deepEqual(Pet.required.sort(), ['categoryId', 'id', 'name', 'status'])
    assert.deepEqual(NewPet.required.sort(), ['categoryId', 'name'])
    assert.equal(Pet.properties.id.format, 'int64')
    assert.equal(NewPet.properties.categoryId.format, 'int64')
    assert.deepEqual(NewPet.properties.status.enum, ['available', 'pending', 'sold'])
    assert.deepEqual(ErrorObject.required.sort(), ['code', 'message', 'status'])
    for (const code of ERROR_CODES) assert.match(ErrorObject.properties.code.description, new RegExp(code))
    assert.deepEqual(Message.required.sort(), MESSAGE_FIELDS)
    assert.deepEqual(Message.properties.status.enum, ['queued', 'delivered', 'failed', 'undelivered'])
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

  it('closes request bodies to unknown fields, and leaves responses open to fields added later (decision 20)', async () => {
    const { Pet, NewPet, Error: ErrorObject, Message, NewMessage } = (await document()).components.schemas
    assert.equal(NewPet.additionalProperties, false)
    assert.equal(NewMessage.additionalProperties, false)
    for (const [name, schema] of Object.entries({ Pet, Error: ErrorObject, Message })) {
      assert.equal(schema.additionalProperties, undefined, name)
    }
  })

  it('describes every operation, and names a contact (the portal of this deployment) and a license', async () => {
    const doc = await withContact()
    for (const [path, item] of Object.entries<Record<string, { description?: string }>>(doc.paths)) {
      for (const [method, operation] of Object.entries(item)) {
        assert.ok(operation.description?.trim(), `${method} ${path} has no description`)
      }
    }
    assert.deepEqual(doc.info.contact, { name: 'Animal Store developer portal', url: 'https://api.pets.test/portal' })
    assert.deepEqual(doc.info.license, { name: 'MIT', identifier: 'MIT' })
  })

  it('the key dialog says where keys come from: the portal and `animal-store keys create`', async () => {
    const { description } = (await document()).components.securitySchemes.bearerAuth
    assert.match(description, /portal \(\/portal/)
    assert.match(description, /`animal-store keys create/)
  })

  it('gives every field of every schema a readable example that its own schema accepts (no invented strings)', async () => {
    const doc = await document()
    const webhooks = await withWebhooks()
    // Formats are the document's to describe (int64, date-time): only types, patterns and bounds are checked.
    const ajv = new Ajv2020({ strict: false, validateFormats: false })
    const schemas = Object.entries<{ properties: Record<string, { examples?: unknown[] }> }>(
      webhooks.components.schemas,
    )
    // The experimental operations' schemas are published only where those operations exist.
    assert.deepEqual(Object.keys(doc.components.schemas).sort(), [
      'Error',
      'Inventory',
      'Message',
      'NewMessage',
      'NewOrder',
      'NewPet',
      'Order',
      'Pet',
      'PetPatch',
    ])
    assert.deepEqual(schemas.map(([name]) => name).sort(), [
      'CreatedWebhookEndpoint',
      'Delivery',
      'Error',
      'Event',
      'Inventory',
      'Message',
      'MessageCreatedEvent',
      'NewMessage',
      'NewOrder',
      'NewPet',
      'NewWebhookEndpoint',
      'Order',
      'OrderCanceledEvent',
      'OrderCompletedEvent',
      'OrderExpiredEvent',
      'OrderPlacedEvent',
      'Pet',
      'PetPatch',
      'RecoverDeliveries',
      'Recovery',
      'RotatedWebhookEndpoint',
      'WebhookEndpoint',
      'WebhookEndpointPatch',
      'WebhookTestEvent',
    ])
    for (const [name, schema] of schemas) {
      for (const [field, property] of Object.entries(schema.properties)) {
        // An enum's first value is already readable: that is what Swagger UI shows; a referenced
        // schema has its own examples.
        if ('enum' in property || '$ref' in property) continue
        const [example] = property.examples ?? []
        assert.notEqual(example, undefined, `${name}.${field} has no example`)
        assert.ok(ajv.validate(property, example), `${name}.${field}: ${JSON.stringify(example)} is refused`)
      }
    }
    assert.deepEqual(doc.components.schemas.NewPet.properties.name.examples, ['Rex'])
    assert.deepEqual(doc.components.schemas.NewMessage.properties.message.examples, ['Hello from the quickstart'])
  })

  it("shows on each error response the body of a real code of that status, with the code's message", async () => {
    const doc = await withWebhooks()
    let checked = 0
    for (const [path, item] of Object.entries<Record<string, { responses: Record<string, unknown> }>>(doc.paths)) {
      for (const [method, operation] of Object.entries(item)) {
        for (const [status, response] of Object.entries(operation.responses)) {
          const media = (response as { content?: Record<string, { example?: { code: ErrorCode; message: string } }> })
            .content?.['application/json']
          if (status !== 'default' && Number(status) < 400) continue
          const example = media?.example
          assert.ok(example, `${method} ${path} ${status} has no example`)
          const [codeStatus, message] = ERRORS[example.code]
          const where = `${method} ${path} ${status}`
          // A default response covers the statuses not listed: its example's must be one of them.
          if (status === 'default') assert.ok(!(String(codeStatus) in operation.responses), where)
          else assert.equal(codeStatus, Number(status), where)
          assert.equal(
            JSON.stringify(example),
            JSON.stringify({ code: example.code, message: example.message, status: codeStatus }),
          )
          if (example.code !== 'pet_not_found') assert.equal(example.message, message, where)
          checked++
        }
      }
    }
    // 34 today over the four operations: a broken walk of the document would check none.
    assert.ok(checked >= 30, `only ${checked} error responses checked`)
  })
})

type Parameter = { in: string; name: string; required?: boolean; schema: { enum?: string[] }; example?: unknown }
type Operation = {
  operationId: string
  description: string
  'x-stability'?: string
  parameters?: Parameter[]
  requestBody?: { content: Record<string, { schema: { $ref: string } }> }
  responses: Record<
    string,
    {
      description: string
      headers?: Record<string, { required?: boolean }>
      content?: Record<string, { example?: { code: string } }>
    }
  >
}

/** Every operation of a document, with its method and path. */
function operations(doc: { paths: Record<string, Record<string, Operation>> }) {
  return Object.entries(doc.paths).flatMap(([path, item]) =>
    Object.entries(item).map(([method, operation]) => ({ name: `${method.toUpperCase()} ${path}`, operation })),
  )
}

const headerParameter = (operation: Operation, name: string) =>
  operation.parameters?.find((p) => p.in === 'header' && p.name === name)

/** Loopback receivers, deliveries at once: the webhook events are sent, and can be checked against the document. */
const WEBHOOK_DELIVERY = {
  ...WEBHOOKS,
  WEBHOOK_ALLOW_PRIVATE_URLS: 'true',
  WEBHOOK_ALLOW_HTTP: 'true',
  WEBHOOK_RETRY_SCHEDULE: '0.1,0.1,0.1,0.1',
}

describe('OpenAPI: what the document promises, the server keeps (issue 38)', () => {
  const shared = suiteApp(WEBHOOKS)
  const withWebhooks = served(WEBHOOKS)
  const document = served()
  const onProduction = served({ PRODUCTION_URL: 'https://api.pets.test/v1', DEPLOYMENT: 'production' })

  it('describes GET /v1/openapi.json itself: getOpenApiDocument, without a key, answering the document', async () => {
    const doc = await document()
    const operation = doc.paths['/openapi.json'].get
    assert.equal(operation.operationId, 'getOpenApiDocument')
    assert.deepEqual(operation.security, [])
    const schema = operation.responses['200'].content['application/json'].schema
    const ajv = new Ajv2020({ strict: false, validateFormats: false })
    assert.ok(ajv.validate(schema, doc), JSON.stringify(ajv.errors))
    assert.deepEqual(Object.keys(operation.responses).sort(), ['200', '412', 'default'])
    // Its 412 is real: no entity tag matches a document without an ETag.
    const { app } = await shared()
    const refused = await app.inject({ url: '/v1/openapi.json', headers: { 'if-match': '"x"' } })
    assert.equal(refused.statusCode, 412)
    assert.equal(errorBody(refused).code, operation.responses['412'].content['application/json'].example.code)
  })

  it('declares X-Request-Id required on every response, and Location on every 201, as they are always sent', async () => {
    const doc = await withWebhooks()
    let created = 0
    for (const { name, operation } of operations(doc)) {
      for (const [status, response] of Object.entries(operation.responses)) {
        assert.equal(response.headers?.['X-Request-Id']?.required, true, `${name} ${status} X-Request-Id`)
        if (status !== '201') continue
        assert.equal(response.headers?.Location?.required, true, `${name} 201 Location`)
        created++
      }
      // Only those: a header sent on some answers only stays optional.
      assert.equal(operation.responses['200']?.headers?.RateLimit?.required, undefined, name)
    }
    assert.equal(created, 3)
    // Said of the header, not of its schema (where `required` is no boolean).
    const schemas = operations(doc).flatMap(({ operation }) =>
      Object.values(operation.responses).flatMap((response) => Object.values(response.headers ?? {})),
    ) as { schema: { required?: unknown } }[]
    assert.ok(schemas.every((header) => header.schema.required === undefined))
    // And they are sent: a 201 and an error.
    const { app, newKey } = await shared()
    const { secret } = await newKey()
    const createdPet = await app.inject({
      method: 'POST',
      url: '/v1/pets',
      headers: bearer(secret),
      payload: { name: 'Rex', categoryId: 1 },
    })
    assert.equal(createdPet.statusCode, 201)
    assert.ok(createdPet.headers.location && createdPet.headers['x-request-id'])
    assert.ok((await app.inject({ url: '/v1/nowhere' })).headers['x-request-id'])
  })

  it('declares Animal-Store-Beta required, with its feature as the one value, on every beta and experimental operation', async () => {
    const doc = await withWebhooks()
    let optIns = 0
    for (const { name, operation } of operations(doc)) {
      const optIn = headerParameter(operation, 'animal-store-beta')
      if (!operation['x-stability']) {
        assert.equal(optIn, undefined, name)
        continue
      }
      const feature = /Animal-Store-Beta: ([\w-]+)/.exec(operation.description)?.[1]
      assert.ok(feature, name)
      assert.equal(optIn?.required, true, name)
      assert.deepEqual(optIn?.schema.enum, [feature], name)
      optIns++
    }
    assert.equal(optIns, 18)
    // As the server holds it: without the header, 400.
    const { app, newKey } = await shared()
    const { secret } = await newKey()
    const without = await app.inject({ url: '/v1/store/inventory', headers: bearer(secret) })
    assert.equal(errorBody(without).code, 'beta_opt_in_required')
  })

  it("describes each operation's 409 as the conflicts it can have: idempotency only where it takes a key", async () => {
    const doc = await withWebhooks()
    const conflicts = Object.fromEntries(
      operations(doc)
        .filter(({ operation }) => operation.responses['409'])
        .map(({ operation }) => [operation.operationId, operation]),
    )
    assert.deepEqual(Object.keys(conflicts).sort(), [
      'cancelOrder',
      'completeOrder',
      'createPet',
      'createWebhookEndpoint',
      'placeOrder',
      'recoverWebhookDeliveries',
      'redeliverWebhook',
      'sendMessage',
      'sendWebhookTestEvent',
      'updatePet',
    ])
    for (const [operationId, operation] of Object.entries(conflicts)) {
      const takesKey = headerParameter(operation, 'idempotency-key') !== undefined
      const { description } = operation.responses['409'] as { description: string }
      assert.equal(/idempotency/i.test(description), takesKey, `${operationId}: ${description}`)
    }
    const example = (operationId: string) =>
      conflicts[operationId]?.responses['409']?.content?.['application/json']?.example
    assert.equal(example('cancelOrder')?.code, 'order_conflict')
    assert.equal(example('completeOrder')?.code, 'order_conflict')
    assert.equal(example('placeOrder')?.code, 'pet_not_available')
    assert.match(conflicts.placeOrder?.responses['409']?.description ?? '', /`idempotency_conflict`/)

    // The codes the server answers are the ones described: cancel a completed order, order a sold pet.
    const { app, newKey } = await shared()
    const { secret } = await newKey()
    const headers = { ...bearer(secret), 'animal-store-beta': 'orders' }
    const pet = (
      await app.inject({ method: 'POST', url: '/v1/pets', headers, payload: { name: 'Tom', categoryId: 2 } })
    ).json()
    const order = (
      await app.inject({ method: 'POST', url: '/v1/store/orders', headers, payload: { petId: pet.id } })
    ).json()
    const completed = await app.inject({ method: 'POST', url: `/v1/store/orders/${order.id}/complete`, headers })
    assert.equal(completed.statusCode, 200)
    const cancel = await app.inject({ method: 'POST', url: `/v1/store/orders/${order.id}/cancel`, headers })
    const sold = await app.inject({ method: 'POST', url: '/v1/store/orders', headers, payload: { petId: pet.id } })
    for (const [operationId, answer] of [
      ['cancelOrder', cancel],
      ['placeOrder', sold],
    ] as const) {
      assert.equal(answer.statusCode, 409)
      assert.match(
        conflicts[operationId]?.responses['409']?.description ?? '',
        new RegExp(`\`${errorBody(answer).code}\``),
      )
    }
  })

  it('declares If-None-Match on the operations that document a 304, and a 304 is what it gets', async () => {
    const doc = await withWebhooks()
    const conditional = operations(doc).filter(({ operation }) => operation.responses['304'])
    assert.deepEqual(conditional.map(({ operation }) => operation.operationId).sort(), ['getPet', 'listPets'])
    for (const { name, operation } of conditional) assert.ok(headerParameter(operation, 'if-none-match'), name)
    const { app, newKey } = await shared()
    const { secret } = await newKey()
    const pet = (
      await app.inject({
        method: 'POST',
        url: '/v1/pets',
        headers: bearer(secret),
        payload: { name: 'Rex', categoryId: 1 },
      })
    ).json()
    const read = await app.inject({ url: `/v1/pets/${pet.id}`, headers: bearer(secret) })
    for (const url of ['/v1/pets', `/v1/pets/${pet.id}`]) {
      const condition = url === '/v1/pets' ? '*' : String(read.headers.etag)
      const again = await app.inject({ url, headers: { ...bearer(secret), 'if-none-match': condition } })
      assert.equal(again.statusCode, 304, url)
    }
  })

  it('declares Last-Event-ID on listEvents, whose stream it resumes, so that generated clients know it', async () => {
    const doc = await withWebhooks()
    const listEvents = doc.paths['/events'].get as Operation
    const lastEventId = headerParameter(listEvents, 'last-event-id')
    assert.ok(lastEventId, 'listEvents declares Last-Event-ID')
    assert.notEqual(lastEventId.required, true)
  })

  it('gives the webhook event types in the top-level webhooks, each with the body it is sent, only where offered', async () => {
    const doc = await withWebhooks()
    assert.equal((await document()).webhooks, undefined)
    assert.deepEqual(Object.keys(doc.webhooks), [...ALL_EVENT_TYPES])
    for (const type of ALL_EVENT_TYPES) {
      const operation = doc.webhooks[type].post as Operation
      const ref = operation.requestBody?.content['application/json']?.schema.$ref ?? ''
      const schema = doc.components.schemas[ref.replace('#/components/schemas/', '')]
      assert.deepEqual(schema.properties.type.enum, [type], type)
      assert.deepEqual(schema.required.sort(), ['data', 'timestamp', 'type'])
      const data = type === 'message.created' ? 'Message' : type === 'webhook.test' ? 'WebhookEndpoint' : 'Order'
      assert.equal(schema.properties.data.$ref, `#/components/schemas/${data}`, type)
      for (const name of ['webhook-id', 'webhook-timestamp', 'webhook-signature']) {
        assert.equal(headerParameter(operation, name)?.required, true, `${type} ${name}`)
      }
      assert.ok(operation.responses['410'], type)
    }
  })

  it('every event a receiver gets is the body the document gives its type', { timeout: 30_000 }, async (t) => {
    const test = await build(t, WEBHOOK_DELIVERY)
    const doc = (await test.app.inject({ url: '/v1/openapi.json' })).json()
    // The document as one schema, its components reached by their references.
    const ajv = new Ajv2020({ strict: false, validateFormats: false, validateSchema: false })
    ajv.addSchema(doc, 'document')
    const bodyOf = (type: string) =>
      `document${(doc.webhooks[type].post as Operation).requestBody?.content['application/json']?.schema.$ref}`
    const { secret, accountId } = await test.newKey()
    const hook = await receiver(t)
    const endpoint = await test.app.store.createWebhookEndpoint({
      accountId,
      url: hook.url,
      events: [...EVENT_TYPES],
      description: '',
      secret: newWebhookSecret(),
    })
    assert.ok(endpoint)
    const headers = { ...bearer(secret), 'animal-store-beta': 'orders' }
    const call = async (method: 'GET' | 'POST', url: string, payload?: object) =>
      (await test.app.inject({ method, url, headers, ...(payload && { payload }) })).json()
    await call('POST', '/v1/messages', { message: 'hello' })
    const pets = []
    for (const name of ['Rex', 'Tom', 'Kit']) pets.push(await call('POST', '/v1/pets', { name, categoryId: 1 }))
    const orders = []
    for (const pet of pets) orders.push(await call('POST', '/v1/store/orders', { petId: pet.id }))
    await call('POST', `/v1/store/orders/${orders[0].id}/complete`)
    await call('POST', `/v1/store/orders/${orders[1].id}/cancel`)
    await test.app.store.expireOrders(new Date(Date.now() + 86_400_000).toISOString())
    const probe = { ...headers, 'animal-store-beta': 'webhooks' }
    const asked = await test.app.inject({
      method: 'POST',
      url: `/v1/webhook-endpoints/${endpoint.id}/test`,
      headers: probe,
    })
    assert.equal(asked.statusCode, 202, asked.body)
    await until('every event received', () => hook.received.length === 8)
    const types = hook.received.map(({ event }) => event.type).sort()
    assert.deepEqual(new Set(types), new Set(ALL_EVENT_TYPES))
    for (const { event, body } of hook.received) {
      assert.ok(
        ajv.validate({ $ref: bodyOf(event.type) }, JSON.parse(body)),
        `${event.type}: ${JSON.stringify(ajv.errors)}`,
      )
      // And no other type's: a receiver tells them apart by the schema alone.
      for (const other of ALL_EVENT_TYPES.filter((type) => type !== event.type)) {
        assert.equal(ajv.validate({ $ref: bodyOf(other) }, JSON.parse(body)), false, `${event.type} as ${other}`)
      }
    }
  })

  it('introduces the API in a few paragraphs and links the error table instead of listing every code', async () => {
    const { description } = (await onProduction()).info
    const paragraphs = description.split('\n\n')
    assert.ok(paragraphs.length >= 3, description)
    const listed = ERROR_CODES.filter((code) => description.includes(code))
    assert.ok(listed.length <= 2, `codes listed inline: ${listed.join(', ')}`)
    const link = /\[[^\]]+\]\((https:\/\/api\.pets\.test\/docs\/errors)\)/.exec(description)
    assert.ok(link, description)
    // The linked page lists every code, with its status, each row its own anchor.
    const { app } = await shared()
    const page = await app.inject({ url: new URL(link[1] as string).pathname })
    assert.equal(page.statusCode, 200)
    for (const [code, [status]] of Object.entries(ERRORS)) {
      assert.match(
        page.body,
        new RegExp(`<tr id="${code}"><th scope="row"><code>[^<]*(<wbr>[^<]*)*</code></th><td>${status}</td>`),
      )
    }
  })

  it('fills in ids that name nothing, so that executing an example as it stands changes no data', async () => {
    const doc = await document()
    const petId = doc.paths['/pets/{petId}'].patch.parameters.find((p: Parameter) => p.name === 'petId')
    const { NewOrder, PetPatch } = doc.components.schemas
    const example = (schema: { properties: Record<string, { examples?: unknown[]; enum?: unknown[] }> }) =>
      Object.fromEntries(
        Object.entries(schema.properties).map(([field, property]) => [
          field,
          (property.examples ?? property.enum)?.[0],
        ]),
      )
    const { app, newKey } = await shared()
    const { secret } = await newKey()
    const headers = { ...bearer(secret), 'animal-store-beta': 'orders' }
    // Pet 1 of a store, sold: what updatePet's example once turned back to available.
    const pet = (
      await app.inject({
        method: 'POST',
        url: '/v1/pets',
        headers,
        payload: { name: 'Max', categoryId: 3, status: 'sold' },
      })
    ).json()
    const patched = await app.inject({
      method: 'PATCH',
      url: `/v1/pets/${petId.example}`,
      headers,
      payload: example(PetPatch),
    })
    assert.equal(patched.statusCode, 404, patched.body)
    assert.equal(errorBody(patched).code, 'pet_not_found')
    const ordered = await app.inject({ method: 'POST', url: '/v1/store/orders', headers, payload: example(NewOrder) })
    assert.equal(errorBody(ordered).code, 'pet_not_found')
    const after = await app.inject({ url: `/v1/pets?status=sold`, headers })
    assert.ok(after.json().some((p: { id: number }) => p.id === pet.id))
    assert.equal((await app.inject({ url: `/v1/store/orders`, headers })).json().length, 0)
  })
})
