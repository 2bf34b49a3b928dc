import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { ConfigError, loadConfig, withoutPassword } from '../src/config.ts'

describe('Configuration: read and validated once (point 9)', () => {
  it('has working defaults: 127.0.0.1:8080, SQLite under ./data, staging, /v1 servers', () => {
    const config = loadConfig({})
    assert.equal(config.port, 8080)
    assert.equal(config.host, '127.0.0.1')
    assert.equal(config.databaseUrl, 'sqlite:data/animal-store.db')
    assert.equal(config.deployment, 'staging')
    assert.match(config.servers.production, /^https:\/\/.+\/v1$/)
    assert.match(config.servers.staging, /^https:\/\/.+\/v1$/)
    assert.equal(config.apiKeyCacheMs, 5000)
  })

  it('reads every variable', () => {
    const config = loadConfig({
      PORT: '9000',
      HOST: '0.0.0.0',
      DATABASE_URL: 'sqlite:/var/lib/animal-store/db.sqlite',
      DEPLOYMENT: 'production',
      PRODUCTION_URL: 'https://api.pets.test/v1',
      STAGING_URL: 'http://localhost:8080/v1',
      LOG_LEVEL: 'warn',
      TRUST_PROXY: 'true',
      BODY_LIMIT: '4096',
      API_KEY_CACHE_SECONDS: '0',
    })
    assert.deepEqual(
      {
        port: config.port,
        host: config.host,
        databaseUrl: config.databaseUrl,
        deployment: config.deployment,
        servers: config.servers,
        logLevel: config.logLevel,
        trustProxy: config.trustProxy,
        bodyLimit: config.bodyLimit,
        apiKeyCacheMs: config.apiKeyCacheMs,
      },
      {
        port: 9000,
        host: '0.0.0.0',
        databaseUrl: 'sqlite:/var/lib/animal-store/db.sqlite',
        deployment: 'production',
        servers: { production: 'https://api.pets.test/v1', staging: 'http://localhost:8080/v1' },
        logLevel: 'warn',
        trustProxy: true,
        bodyLimit: 4096,
        apiKeyCacheMs: 0,
      },
    )
  })

  it("TRUST_PROXY takes the proxies' addresses and ranges, or true or false", () => {
    assert.deepEqual(loadConfig({ TRUST_PROXY: '10.0.0.0/8, ::1,loopback' }).trustProxy, [
      '10.0.0.0/8',
      '::1',
      'loopback',
    ])
    assert.equal(loadConfig({ TRUST_PROXY: 'false' }).trustProxy, false)
    assert.equal(loadConfig({}).trustProxy, false)
  })

  /** What the environment `env` makes of the webhook settings: private URLs, http, the timeout, the schedule. */
  const webhookSettings = (env: Record<string, string>) => {
    const config = loadConfig(env)
    return [config.webhookAllowPrivate, config.webhookAllowHttp, config.webhookTimeoutMs, config.webhookRetryScheduleMs]
  }

  it('webhooks: private and http endpoints off, 15 s per attempt, the Standard Webhooks schedule', () => {
    assert.deepEqual(webhookSettings({}), [
      false,
      false,
      15_000,
      [5_000, 300_000, 1_800_000, 7_200_000, 18_000_000, 36_000_000, 36_000_000],
    ])
  })

  it('EVENT_RETENTION_DAYS: 30 days unless set, 1 to 3650 whole days', () => {
    assert.equal(loadConfig({}).eventRetentionMs, 30 * 86_400_000)
    assert.equal(loadConfig({ EVENT_RETENTION_DAYS: '1' }).eventRetentionMs, 86_400_000)
    for (const value of ['0', '3651', '1.5', '7d']) {
      assert.throws(
        () => loadConfig({ EVENT_RETENTION_DAYS: value }),
        /EVENT_RETENTION_DAYS must be a whole number of days from 1 to 3650/,
        value,
      )
    }
  })

  it('reads the webhook variables: booleans as true or false, the schedule in (decimal) seconds', () => {
    const env = {
      WEBHOOK_ALLOW_PRIVATE_URLS: 'true',
      WEBHOOK_ALLOW_HTTP: 'true',
      WEBHOOK_TIMEOUT_SECONDS: '2',
      WEBHOOK_RETRY_SCHEDULE: '0.2, 0.5,0,86400',
    }
    assert.deepEqual(webhookSettings(env), [true, true, 2000, [200, 500, 0, 86_400_000]])
    assert.equal(loadConfig({ WEBHOOK_ALLOW_PRIVATE_URLS: 'false' }).webhookAllowPrivate, false)
    assert.deepEqual(loadConfig({ WEBHOOK_RETRY_SCHEDULE: '30' }).webhookRetryScheduleMs, [30_000])
    assert.equal(
      loadConfig({ WEBHOOK_RETRY_SCHEDULE: Array(20).fill('1').join(',') }).webhookRetryScheduleMs.length,
      20,
    )
  })

  it('tracing: off unless OTEL_EXPORTER_OTLP_ENDPOINT is set; spans go to its /v1/traces', () => {
    assert.deepEqual([loadConfig({}).otelTracesUrl, loadConfig({}).otelServiceName], [null, 'animal-store'])
    const config = loadConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'https://collector:4318/', OTEL_SERVICE_NAME: 'store-eu' })
    assert.deepEqual([config.otelTracesUrl, config.otelServiceName], ['https://collector:4318/v1/traces', 'store-eu'])
    assert.equal(loadConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://h/otlp' }).otelTracesUrl, 'http://h/otlp/v1/traces')
    // 128 spans an export unless OTEL_BSP_MAX_EXPORT_BATCH_SIZE says otherwise (decision 125).
    assert.equal(loadConfig({}).otelExportBatchSize, 128)
    assert.equal(loadConfig({ OTEL_BSP_MAX_EXPORT_BATCH_SIZE: '512' }).otelExportBatchSize, 512)
  })

  it('tracing: OTEL_TRACES_EXPORTER=console traces with no collector; none turns an endpoint off', () => {
    const traces = (env: Record<string, string>) => {
      const config = loadConfig(env)
      return [config.otelTracesExporter, config.otelTracesUrl]
    }
    const endpoint = 'http://collector:4318'
    assert.deepEqual(traces({}), [null, null])
    assert.deepEqual(traces({ OTEL_EXPORTER_OTLP_ENDPOINT: endpoint }), ['otlp', `${endpoint}/v1/traces`])
    assert.deepEqual(traces({ OTEL_TRACES_EXPORTER: 'otlp' }), [null, null])
    assert.deepEqual(traces({ OTEL_TRACES_EXPORTER: 'console' }), ['console', null])
    assert.deepEqual(traces({ OTEL_TRACES_EXPORTER: 'console', OTEL_EXPORTER_OTLP_ENDPOINT: endpoint }), [
      'console',
      null,
    ])
    assert.deepEqual(traces({ OTEL_TRACES_EXPORTER: 'none', OTEL_EXPORTER_OTLP_ENDPOINT: endpoint }), [null, null])
  })

  it('treats an empty variable as unset', () => {
    assert.equal(loadConfig({ PORT: '', DEPLOYMENT: ' ' }).port, 8080)
  })

  const bad: [string, string][] = [
    // A feature that does not exist: a typo would start the service without the one meant.
    ['EXPERIMENTAL_FEATURES', 'webhook'],
    ['EXPERIMENTAL_FEATURES', 'webhooks,orders'],
    ['EXPERIMENTAL_FEATURES', 'Webhooks'],
    ['PORT', 'abc'],
    ['PORT', '70000'],
    ['PORT', '80.5'],
    ['DATABASE_URL', 'mysql://localhost/db'],
    ['DATABASE_URL', 'data.db'],
    ['DEPLOYMENT', 'prod'],
    ['PRODUCTION_URL', 'https://api.pets.test'],
    ['STAGING_URL', 'ftp://staging.pets.test/v1'],
    ['LOG_LEVEL', 'loud'],
    ['TRUST_PROXY', 'maybe'],
    ['TRUST_PROXY', '1'],
    ['TRUST_PROXY', '10.0.0.0/33'],
    ['TRUST_PROXY', '10.0.0.1, proxy.internal'],
    ['BODY_LIMIT', '10'],
    ['API_KEY_CACHE_SECONDS', '-1'],
    // Number forms other than plain decimals (Ajv's coercion would take them).
    ['PORT', '0b1'],
    ['PORT', '1e3'],
    ['PORT', '0x1196'],
    ['PORT', '+4502'],
    ['PORT', '4502.0'],
    ['BODY_LIMIT', '1e5'],
    ['WORKERS', '0x2'],
    ['RATE_LIMIT', '1e3'],
    // pg would take the user's name for a database left out.
    ['DATABASE_URL', 'postgres://postgres@127.0.0.1:5432'],
    ['DATABASE_URL', 'postgres://postgres@127.0.0.1:5432/'],
    // The right shape, but not a URL.
    ['DATABASE_URL', 'postgres://postgres@127.0.0.1:99999/db'],
    ['DATABASE_URL', 'postgres://postgres@[::1/db'],
    ['REDIS_URL', 'redis://[zz'],
    ['REDIS_URL', 'redis://127.0.0.1:99999'],
    // Every shutdown would be cut short by its own timeout.
    ['SHUTDOWN_TIMEOUT_SECONDS', '0'],
    // No timeout at all for headers; Fastify's own 72 s for keep-alive.
    ['HEADERS_TIMEOUT_SECONDS', '0'],
    ['KEEP_ALIVE_TIMEOUT_SECONDS', '0'],
    // SQLite URIs: `?mode=memory` would keep every acknowledged write in memory only.
    ['DATABASE_URL', 'sqlite:file:/tmp/x.db?mode=memory&cache=shared'],
    ['DATABASE_URL', 'sqlite://file::memory:?cache=shared'],
    ['WEBHOOK_ALLOW_PRIVATE_URLS', 'yes'],
    ['WEBHOOK_ALLOW_PRIVATE_URLS', '1'],
    ['WEBHOOK_ALLOW_HTTP', 'TRUE'],
    ['WEBHOOK_TIMEOUT_SECONDS', '0'],
    ['WEBHOOK_TIMEOUT_SECONDS', '301'],
    ['WEBHOOK_TIMEOUT_SECONDS', '1.5'],
    ['OTEL_EXPORTER_OTLP_ENDPOINT', 'collector:4318'],
    ['OTEL_EXPORTER_OTLP_ENDPOINT', 'grpc://collector:4317'],
    ['OTEL_EXPORTER_OTLP_ENDPOINT', 'http://collector:99999'],
    ['OTEL_EXPORTER_OTLP_ENDPOINT', 'http://collector/?x=1'],
    ['OTEL_SERVICE_NAME', 'animal store'],
    ['OTEL_BSP_MAX_EXPORT_BATCH_SIZE', '0'],
    ['OTEL_BSP_MAX_EXPORT_BATCH_SIZE', '2049'],
    ['OTEL_BSP_MAX_EXPORT_BATCH_SIZE', 'many'],
    // Not installed; nor are lists of several.
    ['OTEL_TRACES_EXPORTER', 'zipkin'],
    ['OTEL_TRACES_EXPORTER', 'otlp,console'],
    ['WEBHOOK_RETRY_SCHEDULE', '5,,300'],
    ['WEBHOOK_RETRY_SCHEDULE', '5s,300'],
    ['WEBHOOK_RETRY_SCHEDULE', '-5'],
    ['WEBHOOK_RETRY_SCHEDULE', '1e3'],
    ['WEBHOOK_RETRY_SCHEDULE', '.5'],
    ['WEBHOOK_RETRY_SCHEDULE', '5,86400.5'],
    ['WEBHOOK_RETRY_SCHEDULE', Array(21).fill('1').join(',')],
  ]
  it("masks a URL's passwords, in the user information (up to its last @) and in pg's query parameters", () => {
    for (const [url, masked] of [
      ['postgres://app:s3cret@db:5432/x', 'postgres://app:***@db:5432/x'],
      ['postgres://app:p@ss@db/x', 'postgres://app:***@db/x'],
      ['postgres://app@db/x?password=s3cret&sslmode=require', 'postgres://app@db/x?password=***&sslmode=require'],
      ['postgres://app@db/x?sslmode=require&SSLPASSWORD=s3cret', 'postgres://app@db/x?sslmode=require&SSLPASSWORD=***'],
      ['sqlite:data/animal-store.db', 'sqlite:data/animal-store.db'],
    ]) {
      assert.equal(withoutPassword(url), masked)
    }
  })

  it("does not echo a URL's password in the error", () => {
    assert.throws(
      () => loadConfig({ DATABASE_URL: 'postgres://app:s3cret@db.internal:5432' }),
      (error: Error) => {
        assert.ok(!error.message.includes('s3cret'), error.message)
        assert.ok(error.message.includes('postgres://app:***@db.internal:5432'), error.message)
        return true
      },
    )
  })

  for (const [name, value] of bad) {
    it(`refuses ${name}=${value} with a one-line error naming it`, () => {
      assert.throws(
        () => loadConfig({ [name]: value }),
        (error: Error) => {
          assert.ok(error instanceof ConfigError)
          assert.ok(error.message.startsWith(`Invalid configuration: ${name} must be `), error.message)
          assert.ok(error.message.includes(JSON.stringify(value)))
          assert.ok(!error.message.includes('\n'))
          return true
        },
      )
    })
  }
})
