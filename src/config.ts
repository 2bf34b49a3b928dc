/**
 * Configuration: read from the environment once, validated, and passed in.
 * Nothing else in src/ reads process.env (enforced by Biome's noProcessEnv).
 */
import { isIP } from 'node:net'
import { Ajv } from 'ajv'
import Type from 'typebox'

export const DEPLOYMENTS = ['production', 'staging'] as const
export type Deployment = (typeof DEPLOYMENTS)[number]

const Seconds = (fallback: number, max = 86_400, min = 0) =>
  Type.Integer({
    minimum: min,
    maximum: max,
    default: fallback,
    description: `a whole number of seconds from ${min} to ${max}`,
  })

const BaseUrl = (fallback: string) =>
  Type.String({
    pattern: '^https?://[^\\s/?#]+(/[^\\s?#]*)?/v1$',
    default: fallback,
    description: 'an http(s) URL whose path ends in /v1',
  })

/** pino's numbers for LOG_LEVEL's names (`silent` is none: nothing is at or above it). */
export const LOG_LEVEL_VALUES: Record<string, number> = {
  trace: 10,
  debug: 20,
  info: 30,
  warn: 40,
  error: 50,
  fatal: 60,
}

/** The experimental features an operator can turn on (src/plugins/stability.ts refuses a route naming another). */
export const EXPERIMENTAL_FEATURE_NAMES = ['webhooks']

/** Each variable, its default and, as `description`, what a valid value looks like (used in start-up errors). */
export const EnvSchema = Type.Object({
  PORT: Type.Integer({ minimum: 0, maximum: 65_535, default: 8080, description: 'an integer from 0 to 65535' }),
  HOST: Type.String({ minLength: 1, default: '127.0.0.1', description: 'a host name or IP address to listen on' }),
  DATABASE_URL: Type.String({
    // A PostgreSQL URL must name its database: without one, pg takes the user's name for it.
    // SQLite would read `file:…` as a URI, whose parameters can make the database live in memory
    // (`?mode=memory`: every acknowledged write lost at the next start) or turn its locking off.
    pattern: '^(sqlite:(?!(//)?file:).+|postgres(ql)?://[^/?#]*/[^/?#]+([?].*)?)$',
    default: 'sqlite:data/animal-store.db',
    description: 'sqlite:<path> (a file path, not a file: URI) or postgres://user@host:port/database',
  }),
  DATABASE_POOL_SIZE: Type.Integer({
    minimum: 1,
    maximum: 1000,
    default: 10,
    description: 'an integer from 1 to 1000',
  }),
  DATABASE_TIMEOUT_SECONDS: Type.Integer({
    minimum: 1,
    maximum: 300,
    default: 5,
    description: 'a whole number of seconds from 1 to 300',
  }),
  DEPLOYMENT: Type.Enum(DEPLOYMENTS, { default: 'staging', description: 'production or staging' }),
  PRODUCTION_URL: BaseUrl('https://api.animal-store.example/v1'),
  STAGING_URL: BaseUrl('https://staging-api.animal-store.example/v1'),
  LOG_LEVEL: Type.Enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'], {
    default: 'info',
    description: 'one of fatal, error, warn, info, debug, trace, silent',
  }),
  TRUST_PROXY: Type.String({
    pattern:
      '^(false|true|(loopback|linklocal|uniquelocal|[0-9A-Fa-f:.]+(/[0-9]{1,3})?)( *, *(loopback|linklocal|uniquelocal|[0-9A-Fa-f:.]+(/[0-9]{1,3})?))*)$',
    default: 'false',
    description:
      'false, the addresses or CIDR ranges of your proxies separated by commas (or loopback, linklocal, uniquelocal), or true (trust every hop)',
  }),
  BODY_LIMIT: Type.Integer({
    minimum: 1024,
    maximum: 10_485_760,
    default: 131_072,
    description: 'a number of bytes from 1024 to 10485760',
  }),
  API_KEY_CACHE_SECONDS: Seconds(5, 300),
  // At least 1: Fastify and Node read 0 as "no timeout" (headers) or as their own default (keep-alive, 72 s).
  HEADERS_TIMEOUT_SECONDS: Seconds(10, 300, 1),
  REQUEST_TIMEOUT_SECONDS: Seconds(30, 3600),
  KEEP_ALIVE_TIMEOUT_SECONDS: Seconds(5, 300, 1),
  // At least 1: with 0, every shutdown would be cut short by its own timeout.
  SHUTDOWN_TIMEOUT_SECONDS: Seconds(10, 300, 1),
  RATE_LIMIT: Type.Integer({
    minimum: 0,
    maximum: 1_000_000_000,
    default: 6000,
    description: 'a number of requests per window per API key (0 turns the limit off)',
  }),
  RATE_LIMIT_WINDOW_SECONDS: Type.Integer({
    minimum: 1,
    maximum: 86_400,
    default: 60,
    description: 'a whole number of seconds from 1 to 86400',
  }),
  AUTH_FAILURE_LIMIT: Type.Integer({
    minimum: 0,
    maximum: 1_000_000,
    default: 30,
    description: 'a number of failed authentications per window per client address (0 turns it off)',
  }),
  REDIS_URL: Type.String({
    pattern: '^(rediss?://.+)?$',
    default: '',
    description: 'empty, or redis://host:port (rediss:// for TLS)',
  }),
  // Its own listener, never the API's: empty (the default) serves no metrics at all.
  METRICS_PORT: Type.Optional(
    Type.Integer({ minimum: 0, maximum: 65_535, description: 'empty, or an integer from 0 to 65535' }),
  ),
  METRICS_HOST: Type.String({
    minLength: 1,
    default: '127.0.0.1',
    description: 'a host name or IP address to serve /metrics on',
  }),
  WORKERS: Type.Integer({
    minimum: 1,
    maximum: 64,
    default: 1,
    description: 'an integer from 1 to 64',
  }),
  MAX_CONNECTIONS: Type.Integer({
    minimum: 1,
    maximum: 1_000_000,
    default: 10_000,
    description: 'an integer from 1 to 1000000',
  }),
  // A connection closed while a body is still arriving reads on for this long (decision 74): as long
  // as a request may take, and nginx's lingering_time.
  LINGERING_TIME_SECONDS: Seconds(30, 300, 1),
  // nginx's lingering_timeout: a client that stopped sending is not waited for longer.
  LINGERING_TIMEOUT_SECONDS: Seconds(5, 300, 1),
  LINGERING_BYTES: Type.Integer({
    minimum: 0,
    maximum: 1_073_741_824,
    // 64 MiB: far more than a client sends past a refused body of any size it would try, far less
    // than an endless uploader sends on a fast link in LINGERING_TIME_SECONDS.
    default: 67_108_864,
    description: 'a number of bytes from 0 to 1073741824',
  }),
  ORDER_HOLD_SECONDS: Seconds(1800, 30 * 86_400, 1),
  EXPERIMENTAL_FEATURES: Type.String({
    // A name that is none of them would start a service without the feature the operator meant.
    pattern: `^((${EXPERIMENTAL_FEATURE_NAMES.join('|')})(,(${EXPERIMENTAL_FEATURE_NAMES.join('|')}))*)?$`,
    default: '',
    description: `empty, or a comma-separated list of experimental features, of: ${EXPERIMENTAL_FEATURE_NAMES.join(', ')}`,
  }),
  // Webhook endpoints on private or loopback addresses, and over plain http: for development only
  // (a receiver on this machine); in production they would let customers probe our network.
  WEBHOOK_ALLOW_PRIVATE_URLS: Type.Boolean({ default: false, description: 'true or false' }),
  WEBHOOK_ALLOW_HTTP: Type.Boolean({ default: false, description: 'true or false' }),
  WEBHOOK_TIMEOUT_SECONDS: Seconds(15, 300, 1),
  // After the first, immediate attempt: Standard Webhooks' 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h.
  WEBHOOK_RETRY_SCHEDULE: Type.String({
    pattern: '^[0-9]+([.][0-9]+)?( *, *[0-9]+([.][0-9]+)?){0,19}$',
    default: '5,300,1800,7200,18000,36000,36000',
    description: 'a comma-separated list of 1 to 20 delays in seconds, each from 0 to 86400 (e.g. 5,300,1800)',
  }),
  EVENT_RETENTION_DAYS: Type.Integer({
    minimum: 1,
    maximum: 3650,
    default: 30,
    description: 'a whole number of days from 1 to 3650',
  }),
  // The live stream of GET /v1/events (decision 116).
  EVENT_STREAMS_PER_KEY: Type.Integer({
    minimum: 1,
    maximum: 100,
    default: 5,
    description: 'a whole number from 1 to 100',
  }),
  EVENT_STREAM_HEARTBEAT_SECONDS: Seconds(15, 300, 1),
  // OpenTelemetry's own names, so that an operator's usual settings apply. The SDK reads the other
  // OTEL_* variables (sampler, queue size, headers) itself; these four are the ones the app decides on.
  // Of the exporters OpenTelemetry names, those this service has: zipkin's is not installed.
  OTEL_TRACES_EXPORTER: Type.Enum(['otlp', 'console', 'none'], {
    default: 'otlp',
    description: 'otlp, console or none',
  }),
  OTEL_EXPORTER_OTLP_ENDPOINT: Type.String({
    pattern: '^(https?://[^\\s/?#]+(/[^\\s?#]*)?)?$',
    default: '',
    description: 'empty, or the http(s) base URL of an OTLP/HTTP collector (e.g. http://127.0.0.1:4318)',
  }),
  OTEL_SERVICE_NAME: Type.String({
    pattern: '^[^\\s]+$',
    default: 'animal-store',
    description: 'a service name without spaces',
  }),
  // 128, not the SDK's 512: a span then leaves the heap before the young generation is collected,
  // instead of being copied and promoted (decision 125).
  OTEL_BSP_MAX_EXPORT_BATCH_SIZE: Type.Integer({
    minimum: 1,
    maximum: 2048,
    default: 128,
    description: 'a whole number from 1 to 2048',
  }),
})
type Env = Type.Static<typeof EnvSchema>

export interface Config {
  port: number
  host: string
  databaseUrl: string
  /** PostgreSQL: most connections per process. */
  databasePoolSize: number
  /** PostgreSQL: deadline to get a connection and for each statement (503 after). */
  databaseTimeoutMs: number
  deployment: Deployment
  /** Public base URLs (each ending in /v1) of the two deployments, for the OpenAPI `servers`. */
  servers: Record<Deployment, string>
  logLevel: string
  /**
   * Which X-Forwarded-* hops to believe (Fastify's trustProxy): none, those added by these
   * addresses (the client is the first hop from the right not among them), or all of them.
   */
  trustProxy: boolean | string[]
  bodyLimit: number
  /** How long a verified API key is trusted without asking the database again (bounds revocation delay). */
  apiKeyCacheMs: number
  headersTimeoutMs: number
  requestTimeoutMs: number
  keepAliveTimeoutMs: number
  shutdownTimeoutMs: number
  maxConnections: number
  /** A connection closed while a body is still arriving is read, and what comes thrown away, within these. */
  lingeringTimeMs: number
  lingeringTimeoutMs: number
  lingeringBytes: number
  /** Where Prometheus scrapes /metrics (src/observability/metrics.ts); null: nowhere. */
  metricsPort: number | null
  metricsHost: string
  /** Processes serving the port (node:cluster); 1 means no cluster. */
  workers: number
  /** Requests per API key per window; 0 means no limit. */
  rateLimit: number
  rateLimitWindowMs: number
  /** Failed authentications per client address per window before it gets 429; 0 means no limit. */
  authFailureLimit: number
  /** Shared counters for several instances; null keeps them in this process's memory. */
  redisUrl: string | null
  /** How long a placed order holds its pet. */
  orderHoldMs: number
  /** Experimental features the operator has turned on (clients must still opt in). */
  experimentalFeatures: string[]
  /** Webhook endpoints may be on private, loopback and other non-public addresses (development only). */
  webhookAllowPrivate: boolean
  /** Webhook endpoints may be plain http:// (development only). */
  webhookAllowHttp: boolean
  /** Bounds one delivery attempt: connecting, sending, the response. */
  webhookTimeoutMs: number
  /** The waits after the 1st, 2nd, … failed attempt; once they are used up, the delivery is given up. */
  webhookRetryScheduleMs: number[]
  /** How long the event log keeps an event (GET /v1/events); the housekeeping sweep deletes older ones. */
  eventRetentionMs: number
  /** How many live streams of GET /v1/events one API key may hold open on one instance. */
  eventStreamsPerKey: number
  /** How often an idle stream gets a comment line, so that proxies do not close it. */
  eventStreamHeartbeatMs: number
  /**
   * Where traces go: `otlp` (to otelTracesUrl), `console` (each span a line on stderr, for
   * development); null, no tracing at all.
   */
  otelTracesExporter: 'otlp' | 'console' | null
  /** The OTLP/HTTP collector's `/v1/traces` (JSON), when the exporter is `otlp`; else null. */
  otelTracesUrl: string | null
  otelServiceName: string
  /** Spans per OTLP export: the batch the SDK's BatchSpanProcessor sends once it is full. */
  otelExportBatchSize: number
}

export class ConfigError extends Error {
  override name = 'ConfigError'
}

/** Reads and validates the environment; throws a one-line ConfigError naming the first bad variable. */
export function loadConfig(env: Record<string, string | undefined> = process.env): Config {
  const raw: Record<string, string> = {}
  for (const name of Object.keys(EnvSchema.properties)) {
    const value = env[name]
    // An empty variable means "not set": `PORT= npm start` uses the default.
    if (value !== undefined && value.trim() !== '') raw[name] = value.trim()
  }
  // Ajv would take `1e3`, `0x10`, `+80` or `80.0` for integers: only plain decimals are.
  for (const [name, schema] of Object.entries(EnvSchema.properties)) {
    const value = raw[name]
    if ((schema as { type?: string }).type === 'integer' && value !== undefined && !/^[0-9]+$/.test(value)) {
      throw new ConfigError(invalid(name as keyof Env, value))
    }
  }
  const e: Record<string, unknown> = { ...raw }
  if (!validateEnv(e)) {
    const name = validateEnv.errors?.[0]?.instancePath.slice(1) as keyof Env
    throw new ConfigError(invalid(name, raw[name]))
  }
  // The patterns check the shape; the URL parser, the rest (a port past 65535, a bad IPv6 address).
  for (const name of ['DATABASE_URL', 'REDIS_URL', 'OTEL_EXPORTER_OTLP_ENDPOINT'] as const) {
    const value = String(e[name])
    if (/^[a-z]+:\/\//.test(value) && !URL.canParse(value)) throw new ConfigError(invalid(name, raw[name]))
  }
  const trustProxy = parseTrustProxy(String(e.TRUST_PROXY))
  if (trustProxy === null) throw new ConfigError(invalid('TRUST_PROXY', raw.TRUST_PROXY))
  const retrySchedule = parseRetrySchedule(String(e.WEBHOOK_RETRY_SCHEDULE))
  if (retrySchedule === null) throw new ConfigError(invalid('WEBHOOK_RETRY_SCHEDULE', raw.WEBHOOK_RETRY_SCHEDULE))
  // Workers share their listening ports (node:cluster): each scrape would reach one worker at random,
  // and each worker's numbers are its own.
  if (e.METRICS_PORT !== undefined && Number(e.WORKERS) > 1) {
    throw new ConfigError(
      'Invalid configuration: METRICS_PORT cannot be used with WORKERS above 1 (see docs/configuration.md)',
    )
  }
  return toConfig(e as Env, trustProxy, retrySchedule)
}

function invalid(name: keyof Env, value: string | undefined): string {
  const { description } = EnvSchema.properties[name] as unknown as { description: string }
  return `Invalid configuration: ${name} must be ${description} (got ${JSON.stringify(withoutPassword(value))})`
}

/**
 * A URL's passwords are not echoed into start-up errors or logs: the user information's (up to
 * the last "@", as URL parsers read it) and the query parameters pg reads (`password`, `sslpassword`).
 */
export function withoutPassword(value: string | undefined): string | undefined {
  return value
    ?.replace(/^([a-z][a-z0-9+.-]*:\/\/[^:@/?#]*:)[^/?#]*@/i, '$1***@')
    .replace(/([?&](?:ssl)?password=)[^&#]*/gi, '$1***')
}

/** TRUST_PROXY as Fastify takes it, or null when an address in the list is not one. */
function parseTrustProxy(text: string): Config['trustProxy'] | null {
  if (text === 'false') return false
  if (text === 'true') return true
  const entries = text.split(',').map((entry) => entry.trim())
  const valid = entries.every((entry) => {
    if (['loopback', 'linklocal', 'uniquelocal'].includes(entry)) return true
    const [address = '', bits, ...rest] = entry.split('/')
    const version = isIP(address)
    if (version === 0 || rest.length > 0) return false
    return bits === undefined || Number(bits) <= (version === 4 ? 32 : 128)
  })
  return valid ? entries : null
}

/** WEBHOOK_RETRY_SCHEDULE in milliseconds, or null when a delay is past a day. */
function parseRetrySchedule(text: string): number[] | null {
  const seconds = text.split(',').map(Number)
  return seconds.every((s) => s <= 86_400) ? seconds.map((s) => Math.round(s * 1000)) : null
}

// Environment values are text: Ajv turns "8080" into 8080 and "true" into true, and refuses "80.5" for an integer.
const validateEnv = new Ajv({ coerceTypes: true, useDefaults: true, allErrors: false }).compile(EnvSchema)

function toConfig(e: Env, trustProxy: Config['trustProxy'], webhookRetryScheduleMs: number[]): Config {
  return {
    port: e.PORT,
    host: e.HOST,
    databaseUrl: e.DATABASE_URL,
    databasePoolSize: e.DATABASE_POOL_SIZE,
    databaseTimeoutMs: e.DATABASE_TIMEOUT_SECONDS * 1000,
    deployment: e.DEPLOYMENT,
    servers: { production: e.PRODUCTION_URL, staging: e.STAGING_URL },
    logLevel: e.LOG_LEVEL,
    trustProxy,
    bodyLimit: e.BODY_LIMIT,
    apiKeyCacheMs: e.API_KEY_CACHE_SECONDS * 1000,
    headersTimeoutMs: e.HEADERS_TIMEOUT_SECONDS * 1000,
    requestTimeoutMs: e.REQUEST_TIMEOUT_SECONDS * 1000,
    keepAliveTimeoutMs: e.KEEP_ALIVE_TIMEOUT_SECONDS * 1000,
    shutdownTimeoutMs: e.SHUTDOWN_TIMEOUT_SECONDS * 1000,
    maxConnections: e.MAX_CONNECTIONS,
    lingeringTimeMs: e.LINGERING_TIME_SECONDS * 1000,
    lingeringTimeoutMs: e.LINGERING_TIMEOUT_SECONDS * 1000,
    lingeringBytes: e.LINGERING_BYTES,
    metricsPort: e.METRICS_PORT ?? null,
    metricsHost: e.METRICS_HOST,
    workers: e.WORKERS,
    rateLimit: e.RATE_LIMIT,
    rateLimitWindowMs: e.RATE_LIMIT_WINDOW_SECONDS * 1000,
    authFailureLimit: e.AUTH_FAILURE_LIMIT,
    redisUrl: e.REDIS_URL || null,
    orderHoldMs: e.ORDER_HOLD_SECONDS * 1000,
    experimentalFeatures: e.EXPERIMENTAL_FEATURES ? e.EXPERIMENTAL_FEATURES.split(',') : [],
    webhookAllowPrivate: e.WEBHOOK_ALLOW_PRIVATE_URLS,
    webhookAllowHttp: e.WEBHOOK_ALLOW_HTTP,
    webhookTimeoutMs: e.WEBHOOK_TIMEOUT_SECONDS * 1000,
    webhookRetryScheduleMs,
    eventRetentionMs: e.EVENT_RETENTION_DAYS * 86_400_000,
    eventStreamsPerKey: e.EVENT_STREAMS_PER_KEY,
    eventStreamHeartbeatMs: e.EVENT_STREAM_HEARTBEAT_SECONDS * 1000,
    // OTLP, the default exporter, traces nothing until an endpoint is set: tracing stays opt-in.
    otelTracesExporter:
      e.OTEL_TRACES_EXPORTER === 'console'
        ? 'console'
        : e.OTEL_TRACES_EXPORTER === 'otlp' && e.OTEL_EXPORTER_OTLP_ENDPOINT
          ? 'otlp'
          : null,
    // The base endpoint variable names the collector; signals go to paths under it (OTLP/HTTP spec).
    otelTracesUrl:
      e.OTEL_TRACES_EXPORTER === 'otlp' && e.OTEL_EXPORTER_OTLP_ENDPOINT
        ? `${e.OTEL_EXPORTER_OTLP_ENDPOINT.replace(/\/+$/, '')}/v1/traces`
        : null,
    otelServiceName: e.OTEL_SERVICE_NAME,
    otelExportBatchSize: e.OTEL_BSP_MAX_EXPORT_BATCH_SIZE,
  }
}

/**
 * The API key `animal-store listen` sends when its command line names none: API_KEY, the variable
 * the quickstart exports. A client's setting, not the server's: not in EnvSchema.
 */
export function clientApiKey(env: Record<string, string | undefined> = process.env): string | undefined {
  return env.API_KEY?.trim() || undefined
}

/**
 * The API address `animal-store listen` uses when its command line names none: ANIMAL_STORE_URL,
 * the variable the typed client's examples read. A client's setting too.
 */
export function clientApiUrl(env: Record<string, string | undefined> = process.env): string | undefined {
  return env.ANIMAL_STORE_URL?.trim() || undefined
}
