import Type from 'typebox'

/** An email address as accounts use it: one @, no spaces, a dot in the domain, at most 254 characters. */
export const EMAIL_DESCRIPTION = 'an email address such as alice@example.com'

export const EmailSchema = Type.String({
  minLength: 3,
  maxLength: 254,
  pattern: '^[^\\s@\\u0000]+@[^\\s@\\u0000]+\\.[^\\s@\\u0000]+$',
  description: EMAIL_DESCRIPTION,
})
