import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { ConfigError, loadConfig } from '../../src/config.ts'
import { bearer, build, DATABASE, type TestApp } from '../helper.ts'

interface Sample {
  name: string
  labels: Record<string, string>
  value: number
}

/** The samples of a Prometheus text exposition (enough of the format for prom-client's output). */
function parse(text: string): Sample[] {
  const samples: Sample[] = []
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line)
    assert.ok(match, `not a sample line: ${line}`)
    const labels: Record<string, string> = {}
    for (const [, key, value] of (match[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) {
      labels[key as string] = value as string
    }
    samples.push({ name: match[1] as string, labels, value: Number(match[3]) })
  }
  return samples
}

/** The value of the one sample with this name and exactly these labels (undefined: none). */
function value(samples: Sample[], name: string, labels: Record<string, string> = {}): number | undefined {
  const wanted = JSON.stringify(Object.entries(labels).sort())
  return samples.find((s) => s.name === name && JSON.stringify(Object.entries(s.labels).sort()) === wanted)?.value
}

async function scrape(t: TestApp): Promise<{ samples: Sample[]; response: Response; text: string }> {
  const address = t.app.metricsAddress
  assert.ok(address, 'no metrics listener')
  const response = await fetch(`http://127.0.0.1:${address.port}/metrics`)
  const text = await response.text()
  assert.equal(response.status, 200, text)
  return { samples: parse(text), response, text }
}

describe('Prometheus metrics on METRICS_PORT', () => {
  it('counts a known set of requests by operation, method and status class', async (t) => {
    const app = await build(t, { METRICS_PORT: '0' })
    const { secret } = await app.newKey()
    const get = (url: string, headers: Record<string, string> = bearer(secret)) =>
      app.app.inject({ method: 'GET', url, headers })
    for (let i = 0; i < 3; i++) assert.equal((await get('/v1/pets')).statusCode, 200)
    assert.equal((await get('/v1/pets/987654')).statusCode, 404)
    assert.equal((await get('/v1/pets', {})).statusCode, 401)
    assert.equal((await get('/v1/pets', bearer('as_test_notakey'))).statusCode, 401)
    assert.equal((await get('/v1/no-such-thing')).statusCode, 404)
    assert.equal((await get('/healthz', {})).statusCode, 200)
    const created = await app.app.inject({
      method: 'POST',
      url: '/v1/pets',
      headers: bearer(secret),
      payload: { name: 'Rex', categoryId: 1 },
    })
    assert.equal(created.statusCode, 201)

    const { samples, response, text } = await scrape(app)
    assert.match(String(response.headers.get('content-type')), /^text\/plain; version=0\.0\.4/)
    const requests = (operation: string, method: string, statusClass: string) =>
      value(samples, 'http_requests_total', { operation, method, status_class: statusClass })
    assert.equal(requests('listPets', 'GET', '2xx'), 3)
    assert.equal(requests('listPets', 'GET', '4xx'), 2)
    assert.equal(requests('getPet', 'GET', '4xx'), 1)
    assert.equal(requests('createPet', 'POST', '2xx'), 1)
    assert.equal(requests('unrouted', 'GET', '4xx'), 1)
    assert.equal(requests('health', 'GET', '2xx'), 1)
    // Nothing else was asked.
    const total = samples.filter((s) => s.name === 'http_requests_total').reduce((sum, s) => sum + s.value, 0)
    assert.equal(total, 9)
    const histogram = { operation: 'listPets', method: 'GET', status_class: '2xx' }
    assert.equal(value(samples, 'http_request_duration_seconds_count', histogram), 3)
    assert.equal(value(samples, 'http_request_duration_seconds_bucket', { ...histogram, le: '+Inf' }), 3)
    assert.ok((value(samples, 'http_request_duration_seconds_sum', histogram) ?? 0) > 0)
    assert.equal(value(samples, 'http_requests_in_flight'), 0)

    // Bounded labels: no id, no path, no key, anywhere.
    for (const sample of samples) {
      for (const label of Object.values(sample.labels)) {
        assert.doesNotMatch(label, /987654|\/v1\/|no-such-thing|as_test_|notakey/, `${sample.name} ${label}`)
      }
    }
    assert.ok(!text.includes(secret))

    // What the database holds.
    const inventory = await app.app.store.inventory()
    for (const status of ['available', 'pending', 'sold'] as const) {
      assert.equal(value(samples, 'animal_store_pets', { status }), inventory[status], status)
    }
    assert.equal(value(samples, 'animal_store_pets', { status: 'available' }), 1)
    for (const status of ['placed', 'completed', 'canceled', 'expired']) {
      assert.equal(value(samples, 'animal_store_orders', { status }), 0, status)
    }
    assert.equal(value(samples, 'animal_store_webhook_outbox_depth'), 0)
    assert.equal(value(samples, 'animal_store_webhook_outbox_oldest_age_seconds'), 0)
    for (const outcome of ['delivered', 'retry', 'failed', 'lease_lost']) {
      assert.equal(value(samples, 'animal_store_webhook_deliveries_total', { outcome }), 0, outcome)
    }
    // Prometheus' naming guide: the application's own have its prefix; HTTP's and Node's are the usual.
    const unprefixed = [...new Set(samples.map((s) => s.name))].filter(
      (name) => !/^(animal_store|http|process|nodejs)_/.test(name),
    )
    assert.deepEqual(unprefixed, [])
    // The process's own.
    assert.ok(value(samples, 'process_cpu_user_seconds_total') !== undefined)
    assert.ok(samples.some((s) => s.name === 'nodejs_eventloop_lag_seconds'))

    // The database's own.
    if (DATABASE === 'postgres') {
      assert.ok((value(samples, 'animal_store_db_pool_connections', { state: 'total' }) ?? 0) >= 1)
      assert.equal(typeof value(samples, 'animal_store_db_pool_connections', { state: 'idle' }), 'number')
      assert.equal(value(samples, 'animal_store_db_pool_connections', { state: 'waiting' }), 0)
      assert.equal(typeof value(samples, 'animal_store_db_query_errors_total'), 'number')
      assert.equal(value(samples, 'animal_store_sqlite_writer_batch_size_count'), undefined)
    } else {
      // The account, the key and the pet were written at least.
      assert.ok((value(samples, 'animal_store_sqlite_writer_batch_size_count') ?? 0) >= 1)
      assert.ok((value(samples, 'animal_store_sqlite_writer_batch_size_sum') ?? 0) >= 3)
      assert.equal(
        value(samples, 'animal_store_sqlite_commit_seconds_count'),
        value(samples, 'animal_store_sqlite_writer_batch_size_count'),
      )
      assert.equal(value(samples, 'animal_store_db_pool_connections', { state: 'total' }), undefined)
    }
  })

  it('counts 429s by limiter', async (t) => {
    const app = await build(t, { METRICS_PORT: '0', RATE_LIMIT: '1', AUTH_FAILURE_LIMIT: '1' })
    const { secret } = await app.newKey()
    const get = (headers: Record<string, string>) => app.app.inject({ method: 'GET', url: '/v1/pets', headers })
    assert.equal((await get(bearer(secret))).statusCode, 200)
    assert.equal((await get(bearer(secret))).statusCode, 429)
    assert.equal((await get(bearer(secret))).statusCode, 429)
    assert.equal((await get(bearer('as_test_bad'))).statusCode, 401)
    assert.equal((await get(bearer('as_test_bad'))).statusCode, 429)
    const { samples } = await scrape(app)
    assert.equal(value(samples, 'animal_store_rate_limit_refusals_total', { reason: 'api_key' }), 2)
    assert.equal(value(samples, 'animal_store_rate_limit_refusals_total', { reason: 'auth_failures' }), 1)
    assert.equal(
      value(samples, 'http_requests_total', { operation: 'listPets', method: 'GET', status_class: '4xx' }),
      4,
    )
  })

  it('serves only GET /metrics, and never on the API port', async (t) => {
    const app = await build(t, { METRICS_PORT: '0' })
    const onApi = await app.app.inject({ method: 'GET', url: '/metrics' })
    assert.equal(onApi.statusCode, 404)
    assert.doesNotMatch(onApi.body, /http_requests_total/)
    const port = app.app.metricsAddress?.port
    assert.equal((await fetch(`http://127.0.0.1:${port}/`)).status, 404)
    const posted = await fetch(`http://127.0.0.1:${port}/metrics`, { method: 'POST' })
    assert.equal(posted.status, 405)
    assert.equal(posted.headers.get('allow'), 'GET, HEAD')
    assert.equal(app.app.metricsAddress?.address, '127.0.0.1')
  })

  it('has no listener, hooks or metrics without METRICS_PORT', async (t) => {
    const app = await build(t)
    assert.equal(app.app.metrics, null)
    assert.equal(app.app.metricsAddress, null)
  })

  it('METRICS_PORT is off by default, a port when set, and refused with WORKERS above 1', () => {
    assert.equal(loadConfig({}).metricsPort, null)
    assert.equal(loadConfig({ METRICS_PORT: '' }).metricsPort, null)
    assert.deepEqual(
      [loadConfig({ METRICS_PORT: '9464' }).metricsPort, loadConfig({ METRICS_PORT: '9464' }).metricsHost],
      [9464, '127.0.0.1'],
    )
    assert.throws(() => loadConfig({ METRICS_PORT: '65536' }), /METRICS_PORT must be empty, or an integer/)
    assert.throws(() => loadConfig({ METRICS_PORT: '9464', WORKERS: '2' }), ConfigError)
    assert.equal(loadConfig({ WORKERS: '2' }).metricsPort, null)
  })

  it('closes its listener with the app', async (t) => {
    const app = await build(t, { METRICS_PORT: '0' })
    const port = app.app.metricsAddress?.port
    await app.app.close()
    await assert.rejects(fetch(`http://127.0.0.1:${port}/metrics`))
  })
})
