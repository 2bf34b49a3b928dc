/**
 * The server's own address, `GET /`: a person who opens it in a browser lands in the portal
 * rather than on a bare JSON 404.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { build, errorBody } from '../helper.ts'
import { FormBrowser, newEmail } from './browser.ts'

describe('The front door: GET /', () => {
  it('redirects to the portal (302, so browsers do not keep it), signed out to sign-in, signed in to the keys', async (t) => {
    const { app } = await build(t)
    for (const method of ['GET', 'HEAD'] as const) {
      const response = await app.inject({ method, url: '/' })
      assert.equal(response.statusCode, 302, method)
      assert.equal(response.headers.location, '/portal', method)
    }
    const browser = new FormBrowser(app)
    assert.equal((await browser.get('/portal')).headers.location, '/portal/sign-in')
    await browser.signUp(newEmail())
    assert.equal((await browser.get('/portal')).headers.location, '/portal/keys')
  })

  it('answers another method on / with 405 and Allow, as the API does for its paths', async (t) => {
    const { app } = await build(t)
    const response = await app.inject({ method: 'POST', url: '/', payload: {} })
    assert.equal(response.statusCode, 405)
    assert.equal(errorBody(response).code, 'method_not_allowed')
    assert.equal(response.headers.allow, 'GET, HEAD')
  })
})
