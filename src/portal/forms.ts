/**
 * The portal's forms as TypeBox schemas, validated by the app's own validator like any API body
 * (strict: no unknown fields, every value a single string), and the sentence shown next to a
 * field when its value is refused.
 */
import type { FastifySchemaValidationError } from 'fastify'
import Type, { type TSchema } from 'typebox'
import { KeyNameSchema, PASSWORD_MAX_LENGTH, PASSWORD_MIN_LENGTH, PasswordSchema } from '../domain/accounts.ts'
import { SCOPES } from '../domain/scopes.ts'
import { CONTROL_CHARACTERS, EmailSchema } from '../schemas/accounts.ts'
import { EVENT_TYPES, WEBHOOK_DESCRIPTION_MAX_LENGTH } from '../schemas/webhooks.ts'
import { MAX_WEBHOOK_URL_LENGTH } from '../webhooks/url-policy.ts'
import { CSRF_FIELD } from './csrf.ts'

const form = <P extends Record<string, TSchema>>(fields: P) =>
  Type.Object({ [CSRF_FIELD]: Type.String({ maxLength: 200 }), ...fields }, { additionalProperties: false })

export const SignUpForm = form({
  email: EmailSchema,
  password: PasswordSchema,
  confirm: Type.String({ maxLength: PASSWORD_MAX_LENGTH }),
})

// Signing in checks only sizes: the password rules are for new passwords.
export const SignInForm = form({
  email: Type.String({ minLength: 1, maxLength: 254 }),
  password: Type.String({ minLength: 1, maxLength: PASSWORD_MAX_LENGTH }),
})

/** Key lifetimes offered by the form, in the CLI's `--expires-in` syntax; `never` is no expiry. */
export const EXPIRY_CHOICES = [
  ['never', 'Never'],
  ['7d', '7 days'],
  ['30d', '30 days'],
  ['90d', '90 days'],
  ['365d', '1 year'],
] as const

/** A key's scopes as form fields: one checkbox each, named `scope-pets-read` for `pets:read`. */
export const scopeField = (scope: string) => `scope-${scope.replace(':', '-')}`

export const NewKeyForm = form({
  name: KeyNameSchema,
  expires: Type.Enum(EXPIRY_CHOICES.map(([value]) => value)),
  ...Object.fromEntries(SCOPES.map((scope) => [scopeField(scope), Type.Optional(Type.Literal('on'))])),
})

export const CsrfOnlyForm = form({})

export const KeyParams = Type.Object({ keyId: Type.String({ pattern: '^key_[0-9A-Za-z]{1,64}$' }) })

export const OrderParams = Type.Object({ orderId: Type.String({ pattern: '^ord_[0-9A-Za-z]{1,64}$' }) })

/** An endpoint's event types as form fields: one checkbox each, named `event-order-placed` for `order.placed`. */
export const eventField = (type: string) => `event-${type.replace('.', '-')}`

export const NewWebhookForm = form({
  // Room past the policy's limit, so that webhookUrlProblem says what is wrong with a long one.
  url: Type.String({ maxLength: MAX_WEBHOOK_URL_LENGTH * 4 }),
  description: Type.String({
    maxLength: WEBHOOK_DESCRIPTION_MAX_LENGTH,
    pattern: `^[^${CONTROL_CHARACTERS}\\ufffd]*$`,
  }),
  ...Object.fromEntries(EVENT_TYPES.map((type) => [eventField(type), Type.Optional(Type.Literal('on'))])),
})

export const WebhookParams = Type.Object({ endpointId: Type.String({ pattern: '^we_[0-9A-Za-z]{1,64}$' }) })

/** As a `datetime-local` input sends it (seconds optional), or as the portal shows a time (a space for the T): UTC. */
export const RecoverForm = form({
  since: Type.String({ maxLength: 40, pattern: '^\\d{4}-\\d{2}-\\d{2}[T ]\\d{2}:\\d{2}(:\\d{2})?$' }),
})

export const DeliveryParams = Type.Object({
  ...WebhookParams.properties,
  deliveryId: Type.String({ pattern: '^dlv_[0-9A-Za-z]{1,64}$' }),
})

export const FIELD_MESSAGES: Record<string, string> = {
  email: 'Enter an email address such as alice@example.com.',
  password: `Choose a password of ${PASSWORD_MIN_LENGTH} to ${PASSWORD_MAX_LENGTH} characters (a few unrelated words work well).`,
  confirm: 'Type the same password again.',
  name: 'Give the key a name of 1 to 100 characters, without control characters, e.g. laptop or ci.',
  expires: 'Choose one of the offered expiry times.',
  url: 'Enter the address to send events to, such as https://example.com/webhooks.',
  description: `Keep the description to ${WEBHOOK_DESCRIPTION_MAX_LENGTH} characters, without control characters.`,
  since: 'Enter a date and time in UTC, such as 2026-11-22 12:00.',
}

/** The options whose boxes a form checked, in the options' order. */
export function checkedBoxes<T extends string>(
  body: unknown,
  options: readonly T[],
  field: (option: T) => string,
): T[] {
  const fields = (body ?? {}) as Record<string, unknown>
  return options.filter((option) => fields[field(option)] === 'on')
}

export interface FieldError {
  field: string
  message: string
}

/** The first refused field of a form and what to tell the person about it. */
export function fieldError(errors: FastifySchemaValidationError[] | undefined): FieldError {
  const error = errors?.[0]
  const missing = (error?.params as { missingProperty?: string } | undefined)?.missingProperty
  const field = missing ?? error?.instancePath.split('/')[1] ?? ''
  return { field, message: FIELD_MESSAGES[field] ?? 'The form was not filled in as expected; please try again.' }
}
