import Type from 'typebox'

/**
 * C0 and C1 control characters and DEL, as the body of a regular-expression class. Refused in
 * names and addresses: printed to a terminal they could recolour it, retitle it or forge a line.
 */
export const CONTROL_CHARACTERS = '\\u0000-\\u001f\\u007f-\\u009f'

/** An email address as accounts use it: one @, no spaces or control characters, a dot in the domain, at most 254 characters. */
export const EMAIL_DESCRIPTION = 'an email address such as alice@example.com (no spaces or control characters)'

export const EmailSchema = Type.String({
  minLength: 3,
  maxLength: 254,
  pattern: `^[^\\s@${CONTROL_CHARACTERS}]+@[^\\s@${CONTROL_CHARACTERS}]+\\.[^\\s@${CONTROL_CHARACTERS}]+$`,
  description: EMAIL_DESCRIPTION,
})
