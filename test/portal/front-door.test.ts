/**
 * The server's own address, `GET /`: a person who opens it in a browser lands in the portal
 * rather than on a bare JSON 404.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { errorBody, suiteApp } from '../helper.ts'
import { FormBrowser, newAccount, newAddress, newEmail } from './browser.ts'

describe('The front door: GET /', () => {
  const shared = suiteApp()

  it('redirects to the portal (302, so browsers do not keep it), signed out to sign-in, signed in to the keys', async () => {
    const { app } = await shared()
    for (const method of ['GET', 'HEAD'] as const) {
      const response = await app.inject({ method, url: '/' })
      assert.equal(response.statusCode, 302, method)
      assert.equal(response.headers.location, '/portal', method)
    }
    const browser = new FormBrowser(app, {}, { remoteAddress: newAddress() })
    assert.equal((await browser.get('/portal')).headers.location, '/portal/sign-in')
    // An account with a cheap password hash (see browser.ts): a sign-up's real hash is not the point.
    const email = newEmail()
    await newAccount(app, email)
    assert.equal((await browser.signIn(email)).statusCode, 303)
    assert.equal((await browser.get('/portal')).headers.location, '/portal/keys')
  })

  it('answers another method on / with 405 and Allow, as the API does for its paths', async () => {
    const { app } = await shared()
    const response = await app.inject({ method: 'POST', url: '/', payload: {} })
    assert.equal(response.statusCode, 405)
    assert.equal(errorBody(response).code, 'method_not_allowed')
    assert.equal(response.headers.allow, 'GET, HEAD')
  })
})
