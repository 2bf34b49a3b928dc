import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { describe, it } from 'node:test'
import { EnvSchema } from '../src/config.ts'
import { ApiError, ERRORS, toApiError } from '../src/errors.ts'
import { DatabaseUnavailableError } from '../src/store/types.ts'

const page = (name: string) => readFileSync(new URL(`../docs/${name}`, import.meta.url), 'utf8')

describe('Error catalogue: one fixed set of codes, in the code and in docs/api.md (point 2)', () => {
  it('the error table of docs/api.md lists exactly the codes of src/errors.ts, with their statuses', () => {
    const rows = [...page('api.md').matchAll(/^\| `([a-z_]+)` +\| (\d{3}) +\|/gm)].map(([, code, status]) => [
      code,
      Number(status),
    ])
    assert.deepEqual(
      rows,
      Object.entries(ERRORS).map(([code, [status]]) => [code, status]),
    )
  })

  it('docs/configuration.md lists every environment variable in its tables', () => {
    const configuration = page('configuration.md')
    for (const name of Object.keys(EnvSchema.properties)) {
      assert.match(configuration, new RegExp(`^\\| \`${name}\` +\\|`, 'm'), name)
    }
  })

  it('maps our errors, Fastify errors and unknown failures onto {code, message, status}', () => {
    const body = (e: unknown) => {
      const { code, message, statusCode } = toApiError(e)
      return { code, message, status: statusCode }
    }
    assert.deepEqual(body(new ApiError('pet_not_found', 'No pet with id 7.')), {
      code: 'pet_not_found',
      message: 'No pet with id 7.',
      status: 404,
    })
    const fastify = (code: string, statusCode: number) => Object.assign(new Error('x'), { code, statusCode })
    assert.equal(body(fastify('FST_ERR_CTP_INVALID_MEDIA_TYPE', 415)).code, 'unsupported_media_type')
    assert.equal(body(fastify('FST_ERR_CTP_BODY_TOO_LARGE', 413)).code, 'payload_too_large')
    assert.equal(body(fastify('SOMETHING_NEW', 418)).code, 'bad_request')
    assert.deepEqual(body(new Error('secret internals')), {
      code: 'internal_error',
      message: ERRORS.internal_error[1],
      status: 500,
    })
    assert.equal(body(undefined).status, 500)
    assert.equal(body(new SyntaxError('Unexpected token')).status, 500)
    assert.equal(body(Object.assign(new SyntaxError('Unexpected token'), { statusCode: 400 })).code, 'invalid_json')
    const unavailable = toApiError(new DatabaseUnavailableError('connect ECONNREFUSED'))
    assert.equal(unavailable.statusCode, 503)
    assert.equal(unavailable.code, 'service_unavailable')
    assert.deepEqual(unavailable.headers, { 'retry-after': '5' })
    assert.equal(body(fastify('FST_WHATEVER', 503)).code, 'internal_error')
  })
})
