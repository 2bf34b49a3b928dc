/**
 * The signed-in account's API keys: list, create (the secret shown once, on the page the POST
 * redirects to), revoke.
 */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import Type from 'typebox'
import type { Config } from '../../config.ts'
import { issueApiKey, parseDuration } from '../../domain/accounts.ts'
import { SCOPES } from '../../domain/scopes.ts'
import { accountId, type Portal } from '../context.ts'
import { CsrfOnlyForm, checkedBoxes, fieldError, KeyParams, NewKeyForm, scopeField } from '../forms.ts'
import { html } from '../html.ts'
import { errorPage } from '../views/error.ts'
import { keysPage, newKeyPage, revokePage } from '../views/keys.ts'
import type { PageContext } from '../views/layout.ts'

const KeysQuery = Type.Object({
  revoked: Type.Optional(KeyParams.properties.keyId),
  /** Sent back from the new key's page once its secret was shown (a reload of it, say). */
  notice: Type.Optional(Type.Literal('secret-shown')),
})

const SECRET_SHOWN = {
  kind: 'info' as const,
  text: 'A new key is shown only once, so it is not shown again. If you did not copy it, revoke that key and create another.',
}

/** The scopes whose boxes the form checked, in the fixed order. */
const checked = (body: unknown): string[] => checkedBoxes(body, SCOPES, scopeField)

const keyNotFound = (c: PageContext) =>
  errorPage(c, 'Key not found', 'You have no key with this id. It may belong to another account.')

const keys: FastifyPluginAsyncTypebox<{ portal: Portal; config: Config }> = async (app, { portal, config }) => {
  app.addHook('preHandler', portal.signedIn)

  app.get(
    '/keys',
    { schema: { hide: true, querystring: KeysQuery }, attachValidation: true },
    async (request, reply) => {
      const list = await app.store.listApiKeys(accountId(request))
      const query = request.validationError ? {} : request.query
      const revoked = list.find((k) => k.id === query.revoked)
      const notice = revoked
        ? {
            kind: 'success' as const,
            text: html`Key <strong>${revoked.name}</strong> (<code>${revoked.prefix}…</code>) is revoked: requests with it are refused.`,
          }
        : query.notice === 'secret-shown'
          ? SECRET_SHOWN
          : undefined
      return portal.send(request, reply, 200, (c) => keysPage(c, list, { notice }))
    },
  )

  app.post(
    '/keys',
    { schema: { hide: true, body: NewKeyForm }, attachValidation: true, preValidation: portal.checkCsrf },
    async (request, reply) => {
      if (request.validationError) {
        const list = await app.store.listApiKeys(accountId(request))
        const body = request.body as Record<string, unknown>
        const name = typeof body?.name === 'string' ? body.name : undefined
        const expires = typeof body?.expires === 'string' ? body.expires : undefined
        const error = fieldError(request.validationError.validation)
        return portal.send(request, reply, 400, (c) =>
          keysPage(c, list, { name, expires, scopes: checked(body), error }),
        )
      }
      const { name, expires } = request.body
      const scopes = checked(request.body)
      if (scopes.length === 0) {
        const list = await app.store.listApiKeys(accountId(request))
        const error = { field: 'scopes', message: 'Choose at least one thing the key may do.' }
        return portal.send(request, reply, 400, (c) => keysPage(c, list, { name, expires, scopes, error }))
      }
      const lifetimeMs = expires === 'never' ? undefined : parseDuration(expires)
      const { key, secret } = await issueApiKey(app.store, config.deployment, {
        accountId: accountId(request),
        name,
        lifetimeMs,
        // Every box checked is every scope, those added later included, as a key made without scopes.
        scopes: scopes.length === SCOPES.length ? null : scopes.join(' '),
      })
      // Redirect after POST: a reload shows the page again, and makes no second key.
      portal.flash.put(request, reply, { kind: 'api-key', id: key.id, secret })
      return reply.redirect('/portal/keys/new', 303)
    },
  )

  app.get('/keys/new', { schema: { hide: true } }, async (request, reply) => {
    const flash = portal.flash.take(request, reply, 'api-key')
    const key = flash && (await app.store.listApiKeys(accountId(request))).find((k) => k.id === flash.id)
    if (!flash || !key) return reply.redirect('/portal/keys?notice=secret-shown', 303)
    return portal.send(request, reply, 200, (c) => newKeyPage(c, key, flash.secret))
  })

  app.get('/keys/:keyId/revoke', { schema: { hide: true, params: KeyParams } }, async (request, reply) => {
    const key = (await app.store.listApiKeys(accountId(request))).find((k) => k.id === request.params.keyId)
    if (!key) return portal.send(request, reply, 404, keyNotFound)
    if (key.revokedAt) return reply.redirect('/portal/keys', 303)
    return portal.send(request, reply, 200, (c) => revokePage(c, key))
  })

  app.post(
    '/keys/:keyId/revoke',
    { schema: { hide: true, params: KeyParams, body: CsrfOnlyForm }, preValidation: portal.checkCsrf },
    async (request, reply) => {
      // Scoped to the signed-in account: another account's key id is "not found", and stays valid.
      const key = await app.store.revokeApiKey(request.params.keyId, accountId(request))
      if (!key) return portal.send(request, reply, 404, keyNotFound)
      app.forgetApiKey(key.id)
      return reply.redirect(`/portal/keys?revoked=${key.id}`, 303)
    },
  )
}

export default keys
