/** Signing up, in and out. */
import { randomBytes } from 'node:crypto'
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import Type from 'typebox'
import { createAccount, hashPassword, verifyPassword } from '../../domain/accounts.ts'
import type { Portal } from '../context.ts'
import { CsrfOnlyForm, fieldError, SignInForm, SignUpForm } from '../forms.ts'
import { signInWait, signUpWait, waitText } from '../limits.ts'
import { endSession, startSession } from '../session.ts'
import { signInPage, signUpPage } from '../views/account.ts'
import type { Notice } from '../views/layout.ts'

const NOTICES: Record<string, Notice> = {
  'signed-out': { kind: 'success', text: 'You are signed out.' },
  expired: { kind: 'info', text: 'Your session has ended. Please sign in again.' },
}
const SignInQuery = Type.Object({ notice: Type.Optional(Type.String({ maxLength: 20 })) })

const account: FastifyPluginAsyncTypebox<{ portal: Portal }> = async (app, { portal }) => {
  // Checked when the email is unknown or has no password, so that a wrong email costs as much time
  // as a wrong password and the timing does not tell which accounts exist.
  let decoy: Promise<string> | undefined
  const decoyHash = () => {
    decoy ??= hashPassword(randomBytes(16).toString('base64url'))
    return decoy
  }

  app.get('/', { schema: { hide: true }, preHandler: portal.withSession }, async (request, reply) =>
    reply.redirect(request.portalSession ? '/portal/keys' : '/portal/sign-in', 303),
  )

  app.get('/sign-up', { schema: { hide: true }, preHandler: portal.withSession }, async (request, reply) => {
    if (request.portalSession) return reply.redirect('/portal/keys', 303)
    return portal.send(request, reply, 200, (c) => signUpPage(c))
  })

  app.post(
    '/sign-up',
    { schema: { hide: true, body: SignUpForm }, attachValidation: true, preValidation: portal.checkCsrf },
    async (request, reply) => {
      const email = typeof request.body?.email === 'string' ? request.body.email : undefined
      const refuse = (field: string, message: string, status = 400) =>
        portal.send(request, reply, status, (c) => signUpPage(c, { email, error: { field, message } }))
      if (request.validationError) {
        const error = fieldError(request.validationError.validation)
        return refuse(error.field, error.message)
      }
      const { password, confirm } = request.body
      if (confirm !== password) return refuse('confirm', 'The two passwords differ: type the same password twice.')
      const wait = await signUpWait(app.rateCounter, request.ip)
      if (wait !== null) {
        reply.header('retry-after', String(wait))
        return refuse('', `Too many accounts were created from your address. Try again in ${waitText(wait)}.`, 429)
      }
      const created = await createAccount(app.store, request.body.email, password)
      if (!created) return refuse('email', 'An account with this email already exists. Sign in instead.')
      await startSession(app, request, reply, created)
      return reply.redirect('/portal/keys', 303)
    },
  )

  app.get(
    '/sign-in',
    { schema: { hide: true, querystring: SignInQuery }, attachValidation: true, preHandler: portal.withSession },
    async (request, reply) => {
      if (request.portalSession) return reply.redirect('/portal/keys', 303)
      const notice = request.validationError ? undefined : NOTICES[request.query.notice ?? '']
      return portal.send(request, reply, 200, (c) => signInPage(c, { notice }))
    },
  )

  app.post(
    '/sign-in',
    { schema: { hide: true, body: SignInForm }, attachValidation: true, preValidation: portal.checkCsrf },
    async (request, reply) => {
      const email = typeof request.body?.email === 'string' ? request.body.email : undefined
      const refuse = (text: string, status = 400) =>
        portal.send(request, reply, status, (c) => signInPage(c, { email, notice: { kind: 'error', text } }))
      if (request.validationError) return refuse('Enter your email and your password.')
      const wait = await signInWait(app.rateCounter, request.body.email, request.ip)
      if (wait !== null) {
        reply.header('retry-after', String(wait))
        return refuse(`Too many sign-in attempts. Try again in ${waitText(wait)}.`, 429)
      }
      const login = await app.store.findAccountLogin(request.body.email)
      const matches = await verifyPassword(request.body.password, login?.passwordHash ?? (await decoyHash()))
      if (!login?.passwordHash || !matches) {
        return refuse('The email or the password is wrong.')
      }
      // A password set since it was checked: this one no longer signs in.
      if (!(await startSession(app, request, reply, { id: login.account.id, passwordHash: login.passwordHash }))) {
        return refuse('The email or the password is wrong.')
      }
      return reply.redirect('/portal/keys', 303)
    },
  )

  app.post(
    '/sign-out',
    { schema: { hide: true, body: CsrfOnlyForm }, preValidation: portal.checkCsrf },
    async (request, reply) => {
      await endSession(app, request, reply)
      return reply.redirect('/portal/sign-in?notice=signed-out', 303)
    },
  )
}

export default account
