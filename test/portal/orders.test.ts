/**
 * Portal orders: the signed-in account's orders, newest first, a page at a time, escaped and never
 * another account's; Cancel on a placed order asks first, then frees its animal at once (the API
 * sees it), only with the page's CSRF token, only for the owner, and says so when the order has
 * moved on.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import type { FastifyInstance } from 'fastify'
import { bearer, suiteApp } from '../helper.ts'
import { csrfOf, FormBrowser, heading, navigateTo, signedInBrowser, tableRows } from './browser.ts'

const BETA = { 'animal-store-beta': 'orders' }

/** The API, as a client of the account with this key uses it. */
function api(app: FastifyInstance, secret: string) {
  const call = async (method: 'GET' | 'POST', url: string, payload?: object) => {
    const response = await app.inject({ method, url, headers: { ...bearer(secret), ...BETA }, payload })
    return { status: response.statusCode, body: response.json() }
  }
  return {
    call,
    async pet(name: string, status = 'available'): Promise<number> {
      const created = await call('POST', '/v1/pets', { name, categoryId: 1, status })
      assert.equal(created.status, 201)
      return created.body.id
    },
    async order(petId: number): Promise<string> {
      const placed = await call('POST', '/v1/store/orders', { petId })
      assert.equal(placed.status, 201, JSON.stringify(placed.body))
      return placed.body.id
    },
    async petStatus(petId: number): Promise<string> {
      // getPet is served through the pet cache: what a client of this instance reads.
      return (await call('GET', `/v1/pets/${petId}`)).body.status
    },
  }
}

// Each test looks only at its own account's orders, and at the animals it made (by id): one app
// serves the file. (No test here lists every animal, which would see the others'.)
const shared = suiteApp()

/** A browser signed in to a new account (with a cheap password hash: see browser.ts), and its key. */
async function signedIn() {
  const test = await shared()
  const { browser } = await signedInBrowser(test.app)
  const secret = await browser.createKey('laptop')
  return { ...test, browser, api: api(test.app, secret) }
}

describe('Portal: orders', () => {
  it('is linked from the navigation; with no orders it says how to place one', async () => {
    const { browser } = await signedIn()
    const page = await navigateTo(browser, '/portal/orders', 'Orders')
    assert.match(page.body, /No orders yet\. Place one with <code>POST \/v1\/store\/orders<\/code>/)
    assert.match(page.body, /Animal-Store-Beta: orders/)
  })

  it("lists the account's orders newest first (id, animal, status, placed, hold ends, last change), never another's", async () => {
    const { app, browser, api: mine } = await signedIn()
    const [rex, tom, kit] = [await mine.pet('Rex'), await mine.pet('Tom'), await mine.pet('Kit')]
    const first = await mine.order(rex)
    assert.equal((await mine.call('POST', `/v1/store/orders/${first}/complete`)).status, 200)
    const second = await mine.order(tom)
    const { browser: stranger } = await signedInBrowser(app)
    const theirs = await api(app, await stranger.createKey('theirs')).order(kit)

    const page = await browser.get('/portal/orders')
    assert.equal(page.statusCode, 200)
    assert.ok(!page.body.includes(theirs), "another account's order is listed")
    const [newest, oldest] = tableRows(page.body)
    assert.deepEqual(newest?.slice(0, 3), [second, `Tom (#${tom})`, 'Placed'])
    assert.deepEqual(oldest?.slice(0, 3), [first, `Rex (#${rex})`, 'Completed'])
    // Placed, hold ends (a placed order only), last change: each a <time> with the exact value.
    const orders = (await mine.call('GET', '/v1/store/orders')).body as Record<string, string>[]
    for (const order of orders) assert.match(page.body, new RegExp(`<time datetime="${order.createdAt}">`))
    const held = orders.find((o) => o.id === second) as Record<string, string>
    assert.match(page.body, new RegExp(`<time datetime="${held.expiresAt}">`))
    assert.equal(oldest?.[4], '—', 'a completed order has no hold')
    // Cancel is offered for the placed order alone, as a link to the page that asks first.
    assert.match(
      page.body,
      new RegExp(
        `<a href="/portal/orders/${second}/cancel">Cancel<span class="visually-hidden"> the order for Tom</span></a>`,
      ),
    )
    assert.ok(!page.body.includes(`/portal/orders/${first}/cancel`))
    assert.ok(!page.body.includes('method="post" action="/portal/orders/'), 'the list cancels without asking')
  })

  it('escapes animal names: markup in a name is shown as text', async () => {
    const { browser, api: mine } = await signedIn()
    await mine.order(await mine.pet('<img src=x onerror=alert(1)>'))
    const page = await browser.get('/portal/orders')
    assert.ok(!page.body.includes('<img src=x'), 'markup in a name reached the page')
    assert.match(page.body, /&lt;img src=x onerror=alert\(1\)&gt;/)
  })

  it('shows 20 orders a page: Older orders leads to the rest, Newest orders back', async () => {
    const { browser, api: mine } = await signedIn()
    const ids: string[] = []
    for (let i = 1; i <= 21; i++) ids.push(await mine.order(await mine.pet(`pet ${i}`)))
    const page = await browser.get('/portal/orders')
    assert.deepEqual(
      tableRows(page.body).map((row) => row[0]),
      ids.slice(1).reverse(),
    )
    const older = /<a href="(\/portal\/orders\?before=\d+)">Older orders<\/a>/.exec(page.body)?.[1]
    assert.ok(older, 'no link to older orders')
    assert.ok(!page.body.includes('Newest orders'))
    const next = await browser.get(older)
    assert.equal(next.statusCode, 200)
    assert.deepEqual(
      tableRows(next.body).map((row) => row[0]),
      [ids[0]],
    )
    assert.match(next.body, /<a href="\/portal\/orders">Newest orders<\/a>/)
    assert.ok(!next.body.includes('Older orders'))
    // A hand-edited query is ignored: the newest orders.
    const edited = await browser.get('/portal/orders?before=abc&canceled=<b>')
    assert.equal(edited.statusCode, 200)
    assert.equal(tableRows(edited.body)[0]?.[0], ids[20])
  })
})

describe('Portal: cancel an order', () => {
  it('asks first, as Revoke does: a page naming the order, with Cancel order and a way back; nothing changes yet', async () => {
    const { browser, api: mine } = await signedIn()
    const rex = await mine.pet('Rex')
    const order = await mine.order(rex)
    const action = `/portal/orders/${order}/cancel`
    const confirm = await browser.get(action)
    assert.equal(confirm.statusCode, 200)
    assert.equal(heading(confirm.body), 'Cancel an order')
    assert.match(
      confirm.body,
      new RegExp(`Cancel your order for <strong>Rex</strong> \\(#${rex}\\) \\(<code>${order}</code>`),
    )
    assert.match(confirm.body, /<button type="submit" class="danger">Cancel order<\/button>/)
    assert.match(confirm.body, /<a href="\/portal\/orders">Keep the order<\/a>/)
    assert.ok(csrfOf(confirm.body, action))
    assert.equal((await mine.call('GET', `/v1/store/orders/${order}`)).body.status, 'placed')
    assert.equal(await mine.petStatus(rex), 'pending')
  })

  it("the page that asks: an order no longer placed leads back to the list; another account's is 404", async () => {
    const { app, api: mine, browser } = await signedIn()
    const done = await mine.order(await mine.pet('Rex'))
    assert.equal((await mine.call('POST', `/v1/store/orders/${done}/complete`)).status, 200)
    const moved = await browser.get(`/portal/orders/${done}/cancel`)
    assert.equal(moved.statusCode, 303)
    assert.equal(moved.headers.location, '/portal/orders')
    const placed = await mine.order(await mine.pet('Tom'))
    const { browser: stranger } = await signedInBrowser(app)
    const theirs = await stranger.get(`/portal/orders/${placed}/cancel`)
    assert.equal(theirs.statusCode, 404)
    assert.equal(heading(theirs.body), 'Order not found')
    assert.ok(!theirs.body.includes('Tom'))
    assert.equal((await browser.get('/portal/orders/not-an-order/cancel')).statusCode, 400)
  })

  it('cancels a placed order: 303 to the list with a notice, and the API sees the animal available at once', async () => {
    const { browser, api: mine } = await signedIn()
    const rex = await mine.pet('Rex')
    const order = await mine.order(rex)
    // Read once through the API, so that this instance's pet cache holds it as pending.
    assert.equal(await mine.petStatus(rex), 'pending')
    const action = `/portal/orders/${order}/cancel`
    const page = await browser.get(action)
    const response = await browser.post(action, { _csrf: csrfOf(page.body, action) })
    assert.equal(response.statusCode, 303)
    assert.equal(response.headers.location, `/portal/orders?canceled=${order}`)

    assert.equal((await mine.call('GET', `/v1/store/orders/${order}`)).body.status, 'canceled')
    assert.equal(await mine.petStatus(rex), 'available')
    const list = await browser.get(response.headers.location as string)
    assert.match(
      list.body,
      new RegExp(`Your order for <strong>Rex</strong> \\(#${rex}\\) \\(<code>${order}</code>\\) is canceled`),
    )
    assert.equal(tableRows(list.body)[0]?.[2], 'Canceled')
    assert.ok(!list.body.includes(action), 'a canceled order still offers Cancel')
    // The animal can be ordered again.
    await mine.order(rex)
  })

  it('a second Cancel of the same order (a double submit) leads to the same list, and changes nothing more', async () => {
    const { browser, api: mine } = await signedIn()
    const rex = await mine.pet('Rex')
    const order = await mine.order(rex)
    const action = `/portal/orders/${order}/cancel`
    const page = await browser.get(action)
    const _csrf = csrfOf(page.body, action)
    assert.equal((await browser.post(action, { _csrf })).statusCode, 303)
    const again = await mine.order(rex)
    const repeated = await browser.post(action, { _csrf })
    assert.equal(repeated.statusCode, 303)
    assert.equal(repeated.headers.location, `/portal/orders?canceled=${order}`)
    assert.equal((await mine.call('GET', `/v1/store/orders/${again}`)).body.status, 'placed')
    assert.equal(await mine.petStatus(rex), 'pending')
  })

  it('an order completed since the page was shown: 409, the page says so, and it stays completed', async () => {
    const { browser, api: mine } = await signedIn()
    const rex = await mine.pet('Rex')
    const order = await mine.order(rex)
    const action = `/portal/orders/${order}/cancel`
    const page = await browser.get(action)
    assert.equal((await mine.call('POST', `/v1/store/orders/${order}/complete`)).status, 200)
    const response = await browser.post(action, { _csrf: csrfOf(page.body, action) })
    assert.equal(response.statusCode, 409)
    assert.equal(heading(response.body), 'Orders')
    assert.match(response.body, new RegExp(`Order <code>${order}</code> is completed: it can no longer be canceled\\.`))
    assert.equal(tableRows(response.body)[0]?.[2], 'Completed')
    assert.equal((await mine.call('GET', `/v1/store/orders/${order}`)).body.status, 'completed')
    assert.equal(await mine.petStatus(rex), 'sold')
  })

  it('without the CSRF token: 403, and the order stays placed', async () => {
    const { browser, api: mine } = await signedIn()
    const rex = await mine.pet('Rex')
    const order = await mine.order(rex)
    for (const form of [{}, { _csrf: 'forged' }] as Record<string, string>[]) {
      const response = await browser.post(`/portal/orders/${order}/cancel`, form)
      assert.equal(response.statusCode, 403)
      assert.match(response.body, /This form has expired/)
    }
    assert.equal((await mine.call('GET', `/v1/store/orders/${order}`)).body.status, 'placed')
    assert.equal(await mine.petStatus(rex), 'pending')
  })

  it("cannot cancel another account's order: 404, and it stays placed", async () => {
    const { app, api: victim } = await signedIn()
    const rex = await victim.pet('Rex')
    const order = await victim.order(rex)
    const { browser: attacker } = await signedInBrowser(app)
    const _csrf = csrfOf((await attacker.get('/portal/orders')).body, '/portal/sign-out')
    const response = await attacker.post(`/portal/orders/${order}/cancel`, { _csrf })
    assert.equal(response.statusCode, 404)
    assert.match(response.headers['content-type'] as string, /^text\/html/)
    assert.equal(heading(response.body), 'Order not found')
    assert.equal((await victim.call('GET', `/v1/store/orders/${order}`)).body.status, 'placed')
    // Nor does its notice reveal it.
    const notice = await attacker.get(`/portal/orders?canceled=${order}`)
    assert.ok(!notice.body.includes(order))
  })

  it('signed out: the list and the form lead to sign-in and nothing changes; a malformed order id is 400', async () => {
    const { app, browser, api: mine } = await signedIn()
    const order = await mine.order(await mine.pet('Rex'))
    const stranger = new FormBrowser(app)
    const list = await stranger.get('/portal/orders')
    assert.equal(list.statusCode, 303)
    assert.equal(list.headers.location, '/portal/sign-in')
    // A valid token of a signed-out browser (from the sign-in page) gets no further.
    const _csrf = csrfOf((await stranger.get('/portal/sign-in')).body, '/portal/sign-in')
    const posted = await stranger.post(`/portal/orders/${order}/cancel`, { _csrf })
    assert.equal(posted.statusCode, 303)
    assert.equal(posted.headers.location, '/portal/sign-in')
    assert.equal((await mine.call('GET', `/v1/store/orders/${order}`)).body.status, 'placed')

    const own = csrfOf((await browser.get('/portal/orders')).body, '/portal/sign-out')
    assert.equal((await browser.post('/portal/orders/not-an-order/cancel', { _csrf: own })).statusCode, 400)
  })
})
