/**
 * Every error the API can return, declared once: its `code`, HTTP status and default message.
 * The OpenAPI `Error.code` enum is generated from this list, and the error table of docs/api.md
 * follows it (test/errors.test.ts keeps the two in step). Clients branch on `code`, never on `message`.
 */
// biome-ignore format: one error a line, as the table in docs/api.md reads.
export const ERRORS = {
  bad_request: [400, 'The request is malformed.'],
  invalid_json: [400, 'The request body is not valid JSON.'],
  validation_failed: [400, 'A parameter or body field is missing or invalid; the message names it.'],
  invalid_cursor: [400, 'The cursor is not one this service issued for this query.'],
  invalid_webhook_url: [400, 'The webhook endpoint URL is not one events can be sent to; the message says why.'],
  beta_opt_in_required: [400, 'This operation is in beta: send the Animal-Store-Beta header the message names.'],
  missing_api_key: [401, 'Send your API key as "Authorization: Bearer <API_KEY>".'],
  invalid_api_key: [401, 'The API key is malformed, unknown or for another deployment.'],
  revoked_api_key: [401, 'The API key has been revoked.'],
  expired_api_key: [401, 'The API key has expired.'],
  insufficient_scope: [403, 'This API key lacks the scope the operation needs; see WWW-Authenticate.'],
  not_found: [404, 'No such resource.'],
  pet_not_found: [404, 'No pet with this id.'],
  order_not_found: [404, 'No order with this id for this account.'],
  message_not_found: [404, 'No message with this id for this account.'],
  webhook_endpoint_not_found: [404, 'No webhook endpoint with this id for this account.'],
  delivery_not_found: [404, 'No delivery with this id for this webhook endpoint.'],
  event_not_found: [404, 'No event with this id for this account.'],
  method_not_allowed: [405, 'This method is not allowed on this resource; see the Allow header.'],
  last_event_id_unknown: [410, 'The Last-Event-ID is not in the event log (pruned, or never made): catch up with GET /v1/events, then stream without it.'],
  operation_removed: [410, 'This operation was removed on its Sunset date; see the Link header for its successor.'],
  request_timeout: [408, 'The request took too long to arrive.'],
  pet_not_available: [409, 'The pet is not available: it is pending (an order holds it, or it was added so) or sold.'],
  order_conflict: [409, 'The order is final in another status; see the message.'],
  idempotency_conflict: [409, 'A request with this Idempotency-Key is still being processed; retry later.'],
  pet_held: [409, 'A placed order holds this pet: its status changes only by completing or canceling the order.'],
  pending_by_order_only: [409, 'A pet becomes pending only by being ordered: place an order for it.'],
  webhook_endpoint_limit: [409, 'The account has the most webhook endpoints it may have (16): delete one first.'],
  webhook_endpoint_disabled: [409, 'The webhook endpoint is disabled: enable it before redelivering.'],
  delivery_in_progress: [409, 'The delivery is being attempted right now: send it again once that attempt has ended.'],
  precondition_failed: [412, 'The If-Match or If-None-Match condition does not hold: compare with the current ETag (answers without one match only "*").'],
  payload_too_large: [413, 'The request body is too large.'],
  unsupported_media_type: [415, 'Send the body as application/json (a PATCH also takes application/merge-patch+json).'],
  expectation_failed: [417, 'Only "Expect: 100-continue" is supported.'],
  idempotency_key_reused: [422, 'This Idempotency-Key was already used for a different request.'],
  rate_limited: [429, 'Too many requests; retry after the time in Retry-After.'],
  too_many_streams: [429, 'This API key holds the most event streams it may on this instance: close one first.'],
  headers_too_large: [431, 'The request headers are too large.'],
  internal_error: [500, 'Something went wrong on our side. It has been logged; quote the X-Request-Id if you contact us.'],
  not_implemented: [501, 'This method or Transfer-Encoding is not supported.'],
  service_unavailable: [503, 'The service is temporarily unavailable; retry after the time in Retry-After.'],
  http_version_not_supported: [505, 'Only HTTP/1.1 and HTTP/1.0 are supported.'],
} as const satisfies Record<string, readonly [number, string]>

export type ErrorCode = keyof typeof ERRORS
export const ERROR_CODES = Object.keys(ERRORS) as ErrorCode[]

/** The Error object of the spec: every error response body has exactly this shape. */
export interface ErrorBody {
  code: ErrorCode
  message: string
  status: number
}

/** An error the API means to return. `headers` are sent with the response (e.g. WWW-Authenticate). */
export class ApiError extends Error {
  code: ErrorCode
  statusCode: number
  headers: Record<string, string> | undefined

  constructor(code: ErrorCode, message: string = ERRORS[code][1], headers?: Record<string, string>) {
    // An answer, not a failure: no stack trace, which nobody reads (a failure's own error is what
    // is logged) and whose capture was a tenth of a refused request's CPU (decision 84).
    const limit = Error.stackTraceLimit
    Error.stackTraceLimit = 0
    try {
      super(message)
    } finally {
      Error.stackTraceLimit = limit
    }
    this.name = 'ApiError'
    this.code = code
    this.statusCode = ERRORS[code][0]
    this.headers = headers
  }
}

/** An Error with no stack trace: for a client's mistake, whose stack nobody reads (decision 84). */
export function errorWithoutStack(message: string): Error {
  const limit = Error.stackTraceLimit
  Error.stackTraceLimit = 0
  try {
    return new Error(message)
  } finally {
    Error.stackTraceLimit = limit
  }
}

/** Fastify's own error codes, mapped onto ours, with a message where the code's own says too little. */
const FASTIFY_CODES: Record<string, [ErrorCode, string?]> = {
  FST_ERR_CTP_INVALID_MEDIA_TYPE: ['unsupported_media_type'],
  FST_ERR_CTP_BODY_TOO_LARGE: ['payload_too_large'],
  FST_ERR_CTP_EMPTY_JSON_BODY: [
    'invalid_json',
    'The request body is empty, which is not JSON: send a JSON body, or no Content-Type when there is none.',
  ],
  FST_ERR_CTP_INVALID_JSON_BODY: ['invalid_json'],
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: ['bad_request', 'The Content-Length header does not match the body.'],
  FST_ERR_BAD_URL: [
    'bad_request',
    'The request target is malformed: a path (or an absolute http(s) URL with a valid host), whose "%" escapes encode UTF-8, with no "#".',
  ],
  FST_ERR_VALIDATION: ['validation_failed'],
  // The router's limit (routerOptions.maxParamLength in app.ts): no parameter of ours is that long.
  FST_ERR_MAX_PARAM_LENGTH: ['validation_failed', 'A path parameter must be at most 500 characters long.'],
}

/** Code to use for an error that carries only a 4xx status. */
const STATUS_CODES: Record<number, ErrorCode> = {
  400: 'bad_request',
  404: 'not_found',
  405: 'method_not_allowed',
  408: 'request_timeout',
  413: 'payload_too_large',
  415: 'unsupported_media_type',
  429: 'rate_limited',
  431: 'headers_too_large',
}

/**
 * The database cannot be reached or did not answer in time. Stores throw it instead of a driver
 * error so that the API can answer 503 with Retry-After; the write it interrupted was not applied
 * or, at worst, is applied exactly once and was never acknowledged.
 */
export class DatabaseUnavailableError extends Error {
  override name = 'DatabaseUnavailableError'
}

/** What clients are told to wait before retrying when the database is unreachable. */
export const RETRY_AFTER_SECONDS = 5

/**
 * The one mapper from anything thrown to the ApiError that is sent: our own errors as they are,
 * Fastify's onto our codes, an unreachable database to 503, and anything else to a masked 500.
 */
export function toApiError(err: unknown): ApiError {
  if (err instanceof ApiError) return err
  if (err instanceof DatabaseUnavailableError) {
    return new ApiError('service_unavailable', undefined, { 'retry-after': String(RETRY_AFTER_SECONDS) })
  }
  const e = (err ?? {}) as { code?: unknown; statusCode?: unknown; message?: unknown; validation?: unknown }
  const status = typeof e.statusCode === 'number' ? e.statusCode : 500
  if (e.validation) return new ApiError('validation_failed', String(e.message))
  // The JSON parser raises a plain SyntaxError marked 400 (also for __proto__ keys).
  if (err instanceof SyntaxError && status === 400) return new ApiError('invalid_json')
  const fastify = typeof e.code === 'string' ? FASTIFY_CODES[e.code] : undefined
  if (fastify && status < 500) return new ApiError(...fastify)
  const mapped = STATUS_CODES[status]
  if (mapped && status < 500) return new ApiError(mapped)
  if (status >= 400 && status < 500) return new ApiError('bad_request')
  return new ApiError('internal_error')
}

export function toErrorBody(error: ApiError): ErrorBody {
  return { code: error.code, message: error.message, status: error.statusCode }
}
