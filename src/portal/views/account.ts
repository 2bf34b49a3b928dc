import { PASSWORD_MAX_LENGTH, PASSWORD_MIN_LENGTH } from '../../domain/accounts.ts'
import type { FieldError } from '../forms.ts'
import { type Html, html } from '../html.ts'
import { csrfInput, field, formErrors, layout, type Notice, type PageContext } from './layout.ts'

export function signUpPage(context: PageContext, form: { email?: string; error?: FieldError } = {}): Html {
  const { beside: errors, notice } = formErrors(form.error, ['email', 'password', 'confirm'])
  return layout(
    context,
    'Create an account',
    html`<p>An account holds your API keys. Already have one? <a href="/portal/sign-in">Sign in</a>.</p>
    <form method="post" action="/portal/sign-up" novalidate>
      ${csrfInput(context)}
      ${field({ name: 'email', label: 'Email', type: 'email', value: form.email, autocomplete: 'email', maxlength: 254, error: errors.email })}
      ${field({
        name: 'password',
        label: 'Password',
        type: 'password',
        autocomplete: 'new-password',
        hint: `${PASSWORD_MIN_LENGTH} to ${PASSWORD_MAX_LENGTH} characters. A few unrelated words make a strong password.`,
        maxlength: PASSWORD_MAX_LENGTH,
        error: errors.password,
      })}
      ${field({ name: 'confirm', label: 'Password again', type: 'password', autocomplete: 'new-password', maxlength: PASSWORD_MAX_LENGTH, error: errors.confirm })}
      <button type="submit">Create account</button>
    </form>`,
    notice,
  )
}

export function signInPage(context: PageContext, form: { email?: string; notice?: Notice } = {}): Html {
  return layout(
    context,
    'Sign in',
    html`<p>New here? <a href="/portal/sign-up">Create an account</a>.</p>
    <form method="post" action="/portal/sign-in" novalidate>
      ${csrfInput(context)}
      ${field({ name: 'email', label: 'Email', type: 'email', value: form.email, autocomplete: 'username', maxlength: 254 })}
      ${field({ name: 'password', label: 'Password', type: 'password', autocomplete: 'current-password', maxlength: PASSWORD_MAX_LENGTH })}
      <button type="submit">Sign in</button>
    </form>`,
    form.notice,
  )
}
