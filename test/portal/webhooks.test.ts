/**
 * Portal webhooks (experimental): the pages exist only with EXPERIMENTAL_FEATURES=webhooks. With
 * it, the account adds endpoints (the API's URL policy and limit, the secret shown once), disables
 * and enables them, rotates the secret (the old one signs 24 hours more), deletes them, sends a
 * test event, sends the failed deliveries since a time again, and sees each one's recent deliveries
 * with Send again; only with the page's CSRF token, never another account's endpoint, every value
 * escaped.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import type { FastifyInstance } from 'fastify'
import { type BuildOptions, bearer, build, type Cleanup, suiteApp, type TestApp } from '../helper.ts'
import { givenUp } from '../store/contract-webhooks.ts'
import { until } from '../wait.ts'
import { csrfOf, type FormBrowser, heading, navigateTo, signedInBrowser, tableRows } from './browser.ts'

const FEATURE = { EXPERIMENTAL_FEATURES: 'webhooks' }
const URL_1 = 'https://hooks.example.com/animal-store'

/** Build options that count the nudges the pages give the delivery loop; and the count so far. */
function countingNudges(): { options: BuildOptions; nudges: () => number } {
  let nudges = 0
  const setup = (app: FastifyInstance) => {
    const { nudge } = app.webhookDeliveries
    app.webhookDeliveries.nudge = () => {
      nudges++
      nudge()
    }
  }
  return { options: { setup }, nudges: () => nudges }
}

type Counted = { test: TestApp; nudges: () => number }

/** An app of the test's own: for another configuration, or a test that cannot share one. */
async function ownApp(t: Cleanup, env: Record<string, string> = FEATURE): Promise<Counted> {
  const counter = countingNudges()
  return { test: await build(t, env, counter.options), nudges: counter.nudges }
}

// The tests that look only at their own account's endpoints and deliveries share one app (with the
// feature). A test that reads the nudges of the shared app counts those made since it began.
const counting = countingNudges()
const sharedApp = suiteApp(FEATURE, counting.options)
const shared = async (): Promise<Counted> => ({ test: await sharedApp(), nudges: counting.nudges })

/** A browser signed in to a new account (with a cheap password hash: see browser.ts) of `app`. */
async function signedIn(app: Counted | Promise<Counted>) {
  const { test, nudges } = await app
  const { browser, accountId } = await signedInBrowser(test.app)
  return { ...test, browser, accountId, nudges }
}

/** Submits the add form of the webhooks page: every event box checked unless `events` says otherwise. */
function add(browser: FormBrowser, url: string, options: { events?: string[]; description?: string } = {}) {
  const events = options.events ?? [
    'message.created',
    'order.placed',
    'order.completed',
    'order.canceled',
    'order.expired',
  ]
  const boxes = Object.fromEntries(events.map((type) => [`event-${type.replace('.', '-')}`, 'on']))
  return browser.submit('/portal/webhooks', '/portal/webhooks', {
    url,
    description: options.description ?? '',
    ...boxes,
  })
}

/** Adds an endpoint, following the redirect to the page that shows its secret once; returns its id and that secret. */
async function added(browser: FormBrowser, url = URL_1, options: { events?: string[]; description?: string } = {}) {
  const posted = await add(browser, url, options)
  assert.equal(posted.statusCode, 303, posted.body)
  assert.match(posted.headers.location as string, /^\/portal\/webhooks\/we_[0-9A-Za-z]+\/secret$/)
  const response = await browser.follow(posted)
  assert.equal(response.statusCode, 200)
  const secret = /id="secret"[^>]*value="(whsec_[A-Za-z0-9+/=]+)"/.exec(response.body)?.[1]
  const id = /href="\/portal\/webhooks\/(we_[0-9A-Za-z]+)"/.exec(response.body)?.[1]
  assert.ok(secret && id, 'the new endpoint page shows no secret or no link')
  return { id, secret, page: response.body }
}

/** Posts a form of `page` (an endpoint's page, by default) with that page's CSRF token. */
async function press(browser: FormBrowser, action: string, page: string) {
  const opened = await browser.get(page)
  return browser.post(action, { _csrf: csrfOf(opened.body, action) })
}

async function sendMessage(app: FastifyInstance, secret: string, message: string) {
  const response = await app.inject({
    method: 'POST',
    url: '/v1/messages',
    headers: bearer(secret),
    payload: { message },
  })
  assert.equal(response.statusCode, 202)
}

describe('Portal: webhooks without the experimental feature', () => {
  it('has no link and no pages: 404 as any unknown portal page', async (t) => {
    const { browser } = await signedIn(ownApp(t, {}))
    const keys = await browser.get('/portal/keys')
    assert.ok(!keys.body.includes('/portal/webhooks'), 'the navigation links webhooks')
    assert.ok(!keys.body.includes('/portal/events'), 'the navigation links events')
    const _csrf = csrfOf(keys.body, '/portal/sign-out')
    for (const response of [
      await browser.get('/portal/webhooks'),
      await browser.post('/portal/webhooks', { _csrf, url: URL_1, description: '' }),
      await browser.get('/portal/webhooks/we_abc'),
      await browser.get('/portal/events'),
    ]) {
      assert.equal(response.statusCode, 404)
      assert.equal(heading(response.body), 'Page not found')
    }
  })
})

describe('Portal: webhook endpoints', () => {
  it('is linked from the navigation; adds an endpoint and shows its secret once, with how to verify', async () => {
    const { app, browser, accountId } = await signedIn(shared())
    const empty = await navigateTo(browser, '/portal/webhooks', 'Webhooks')
    assert.match(empty.body, /You have no endpoints yet/)
    // Every event type is offered, checked.
    for (const type of ['message-created', 'order-placed', 'order-completed', 'order-canceled', 'order-expired'])
      assert.match(empty.body, new RegExp(`name="event-${type}" checked`))

    const { id, secret, page } = await added(browser, URL_1, {
      events: ['order.placed', 'order.canceled'],
      description: 'Order sync',
    })
    assert.match(page, /standardwebhooks/)
    assert.match(page, /shown only this once/)
    assert.equal(heading(page), 'Your new webhook endpoint')
    const [stored] = await app.store.listWebhookEndpoints(accountId)
    assert.equal(stored?.id, id)
    assert.equal(stored?.secret, secret)
    assert.deepEqual(stored?.events, ['order.placed', 'order.canceled'])
    assert.equal(stored?.description, 'Order sync')

    const list = await browser.get('/portal/webhooks')
    assert.ok(!list.body.includes(secret), 'the list shows the secret')
    const [row] = tableRows(list.body)
    assert.deepEqual(row?.slice(0, 3), [`${URL_1} Order sync`, 'order.placed , order.canceled', 'Enabled'])
    assert.match(list.body, new RegExp(`<time datetime="${stored?.createdAt}">`))
    const detail = await browser.get(`/portal/webhooks/${id}`)
    assert.equal(detail.statusCode, 200)
    assert.ok(!detail.body.includes(secret), "the endpoint's page shows the secret")
    assert.match(detail.body, /No deliveries yet/)
  })

  it('a reload of the new endpoint page adds no second endpoint and shows the secret no more', async () => {
    const { app, browser, accountId } = await signedIn(shared())
    const { id, secret } = await added(browser)
    const reloaded = await browser.get(`/portal/webhooks/${id}/secret`)
    assert.equal(reloaded.statusCode, 303)
    assert.equal(reloaded.headers.location, `/portal/webhooks/${id}?notice=secret-shown`)
    const detail = await browser.follow(reloaded)
    assert.ok(!detail.body.includes(secret), 'the secret is shown again')
    assert.match(detail.body, /A signing secret is shown only once, so it is not shown again\./)
    assert.equal((await app.store.listWebhookEndpoints(accountId)).length, 1)
  })

  it('the hint under URL says what this server accepts (WEBHOOK_ALLOW_HTTP, WEBHOOK_ALLOW_PRIVATE_URLS)', async (t) => {
    const hint = async (env: Record<string, string>) => {
      const { browser } = await signedIn(ownApp(t, { ...FEATURE, ...env }))
      const page = await browser.get('/portal/webhooks')
      return /<p class="hint" id="url-hint">([^<]*)<\/p>/.exec(page.body)?.[1]
    }
    assert.equal(await hint({}), 'Where to POST the events: an https:// address on the public internet.')
    assert.equal(
      await hint({ WEBHOOK_ALLOW_HTTP: 'true' }),
      'Where to POST the events: an https:// or http:// address on the public internet.',
    )
    assert.equal(
      await hint({ WEBHOOK_ALLOW_PRIVATE_URLS: 'true' }),
      'Where to POST the events: an https:// address on the public internet, a private network or this machine, such as https://127.0.0.1:3000/webhooks.',
    )
    assert.equal(
      await hint({ WEBHOOK_ALLOW_HTTP: 'true', WEBHOOK_ALLOW_PRIVATE_URLS: 'true' }),
      'Where to POST the events: an https:// or http:// address on the public internet, a private network or this machine, such as http://127.0.0.1:3000/webhooks.',
    )
  })

  it('refuses a URL against the policy with its reason, keeping what was typed; and no event, or a bad description', async () => {
    const { app, browser, accountId } = await signedIn(shared())
    const cases: [string, RegExp][] = [
      ['http://hooks.example.com/x', /The URL must start with https:\/\/\./],
      [
        'https://127.0.0.1/hook',
        /The URL&#39;s host 127\.0\.0\.1 is a loopback address; webhooks are sent to public addresses only\./,
      ],
      ['not a url', /The URL is not an absolute URL/],
      ['https://user:pw@hooks.example.com/', /must not contain a username or password/],
    ]
    for (const [url, reason] of cases) {
      const response = await add(browser, url)
      assert.equal(response.statusCode, 400, url)
      assert.match(response.body, reason)
      assert.match(response.body, /id="url-error"/)
      assert.ok(response.body.includes(`value="${url.replaceAll('&', '&amp;')}"`), 'the URL typed is kept')
    }
    const none = await add(browser, URL_1, { events: [] })
    assert.equal(none.statusCode, 400)
    assert.match(none.body, /Choose at least one event to send\./)
    const control = await add(browser, URL_1, { description: 'a\u0007b' })
    assert.equal(control.statusCode, 400)
    assert.match(control.body, /Keep the description to 200 characters/)
    // The API's limit: the form keeps nothing the API would refuse to take back (PATCH).
    const long = await add(browser, URL_1, { description: 'd'.repeat(201) })
    assert.equal(long.statusCode, 400)
    assert.match(long.body, /Keep the description to 200 characters/)
    // Markup typed into the form comes back as text.
    const markup = await add(browser, 'http://x.example.com/"><script>alert(1)</script>')
    assert.equal(markup.statusCode, 400)
    assert.ok(!markup.body.includes('<script>alert(1)'), 'markup reached the page')
    assert.deepEqual(await app.store.listWebhookEndpoints(accountId), [])
  })

  it('follows the deployment: plain http and private addresses where the operator allows them', async (t) => {
    const { browser } = await signedIn(
      ownApp(t, {
        ...FEATURE,
        WEBHOOK_ALLOW_HTTP: 'true',
        WEBHOOK_ALLOW_PRIVATE_URLS: 'true',
      }),
    )
    await added(browser, 'http://127.0.0.1:8080/hook')
  })

  it('escapes the URL and description in the list and on the endpoint page', async () => {
    const { browser } = await signedIn(shared())
    const { id } = await added(browser, 'https://hooks.example.com/?q=<b>', {
      description: '<img src=x onerror=alert(1)>',
    })
    for (const page of [await browser.get('/portal/webhooks'), await browser.get(`/portal/webhooks/${id}`)]) {
      assert.ok(!page.body.includes('<img src=x'), 'markup in a description reached the page')
      assert.ok(!page.body.includes('q=<b>'))
      assert.match(page.body, /&lt;img src=x onerror=alert\(1\)&gt;/)
    }
  })

  it('allows 16 endpoints per account, as the API does', async () => {
    const { app, browser, accountId } = await signedIn(shared())
    for (let i = 0; i < 16; i++)
      await app.store.createWebhookEndpoint({
        accountId,
        url: `https://hooks.example.com/${i}`,
        events: ['order.placed'],
        description: '',
        secret: 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw',
      })
    const list = await browser.get('/portal/webhooks')
    assert.match(list.body, /You have 16 endpoints, the most an account may have/)
    const _csrf = csrfOf(list.body, '/portal/sign-out')
    const response = await browser.post('/portal/webhooks', {
      _csrf,
      url: URL_1,
      description: '',
      'event-order-placed': 'on',
    })
    assert.equal(response.statusCode, 409)
    assert.match(response.body, /the most an account may have/)
    assert.equal((await app.store.listWebhookEndpoints(accountId)).length, 16)
  })

  it('needs the CSRF token of the page for every form', async () => {
    const { app, browser, accountId } = await signedIn(shared())
    const { id } = await added(browser)
    for (const action of [
      '/portal/webhooks',
      `/portal/webhooks/${id}/disable`,
      `/portal/webhooks/${id}/rotate`,
      `/portal/webhooks/${id}/delete`,
      `/portal/webhooks/${id}/test`,
      `/portal/webhooks/${id}/recover`,
    ]) {
      const response = await browser.post(action, { _csrf: 'forged', url: URL_1, description: '' })
      assert.equal(response.statusCode, 403, action)
    }
    const [endpoint] = await app.store.listWebhookEndpoints(accountId)
    assert.equal(endpoint?.status, 'enabled')
    assert.equal(endpoint?.secretRotatedAt, null)
    assert.equal((await app.store.listWebhookEndpoints(accountId)).length, 1)
    assert.deepEqual((await app.store.listEvents({ accountId, limit: 10 })).events, [])
  })
})

describe('Portal: manage an endpoint', () => {
  it('disables it (with the reason shown) and enables it again', async () => {
    const { app, browser, accountId } = await signedIn(shared())
    const { id } = await added(browser)
    const page = `/portal/webhooks/${id}`
    const disabled = await press(browser, `${page}/disable`, page)
    assert.equal(disabled.statusCode, 303)
    assert.equal(disabled.headers.location, `${page}?changed=disabled`)
    assert.equal((await app.store.getWebhookEndpoint(accountId, id))?.status, 'disabled')
    const after = await browser.get(disabled.headers.location as string)
    assert.match(after.body, /The endpoint is disabled/)
    assert.match(after.body, /Disabled: disabled by the account/)
    assert.ok(csrfOf(after.body, `${page}/enable`))
    assert.match(
      tableRows((await browser.get('/portal/webhooks')).body)[0]?.[2] ?? '',
      /^Disabled: disabled by the account$/,
    )

    const enabled = await press(browser, `${page}/enable`, page)
    assert.equal(enabled.statusCode, 303)
    assert.equal((await app.store.getWebhookEndpoint(accountId, id))?.status, 'enabled')
    assert.match((await browser.get(enabled.headers.location as string)).body, /The endpoint is enabled/)
  })

  it('rotates the secret: the new one shown once, the old one signing 24 hours more', async () => {
    const { app, browser, accountId } = await signedIn(shared())
    const { id, secret: old } = await added(browser)
    const page = `/portal/webhooks/${id}`
    const before = Date.now()
    const posted = await press(browser, `${page}/rotate`, page)
    assert.equal(posted.statusCode, 303)
    assert.equal(posted.headers.location, `${page}/secret`)
    const response = await browser.follow(posted)
    assert.equal(response.statusCode, 200)
    assert.equal(heading(response.body), 'Your new signing secret')
    const secret = /id="secret"[^>]*value="(whsec_[A-Za-z0-9+/=]+)"/.exec(response.body)?.[1]
    assert.ok(secret && secret !== old)
    assert.match(response.body, /24 hours/)
    const until = /Until <time datetime="([^"]+)"/.exec(response.body)?.[1]
    const day = 24 * 60 * 60_000
    assert.ok(until && Date.parse(until) >= before + day && Date.parse(until) <= Date.now() + day)
    const stored = await app.store.getWebhookEndpoint(accountId, id)
    assert.equal(stored?.secret, secret)
    assert.ok(stored?.secretRotatedAt)
    const detail = await browser.get(page)
    assert.ok(!detail.body.includes(secret) && !detail.body.includes(old), 'a secret is shown again')
    // A reload of the secret's page rotates nothing more, and shows the secret no more.
    const reloaded = await browser.follow(await browser.get(`${page}/secret`))
    assert.equal(heading(reloaded.body), 'Webhook endpoint')
    assert.ok(!reloaded.body.includes(secret), 'the secret is shown again')
    const after = await app.store.getWebhookEndpoint(accountId, id)
    assert.deepEqual([after?.secret, after?.secretRotatedAt], [secret, stored?.secretRotatedAt])
  })

  it('deletes it after a confirmation', async () => {
    const { app, browser, accountId } = await signedIn(shared())
    const { id } = await added(browser)
    const detail = await browser.get(`/portal/webhooks/${id}`)
    assert.match(detail.body, new RegExp(`href="/portal/webhooks/${id}/delete"`))
    const confirm = await browser.get(`/portal/webhooks/${id}/delete`)
    assert.equal(confirm.statusCode, 200)
    assert.equal(heading(confirm.body), 'Delete an endpoint')
    const response = await browser.post(`/portal/webhooks/${id}/delete`, {
      _csrf: csrfOf(confirm.body, `/portal/webhooks/${id}/delete`),
    })
    assert.equal(response.statusCode, 303)
    assert.equal(response.headers.location, `/portal/webhooks?deleted=${id}`)
    assert.deepEqual(await app.store.listWebhookEndpoints(accountId), [])
    const list = await browser.get(response.headers.location as string)
    assert.match(list.body, new RegExp(`Endpoint <code>${id}</code> is deleted`))
    assert.equal((await browser.get(`/portal/webhooks/${id}`)).statusCode, 404)
  })

  it("cannot see or change another account's endpoint: 404, and it stays as it is", async () => {
    const { app, browser, accountId } = await signedIn(shared())
    const { id } = await added(browser)
    await sendMessage(app, await browser.createKey('laptop'), 'hello')
    const [delivery] = (await app.store.listDeliveries(accountId, id, 20)) ?? []
    assert.ok(delivery)
    const { browser: stranger } = await signedInBrowser(app)
    const _csrf = csrfOf((await stranger.get('/portal/webhooks')).body, '/portal/webhooks')
    for (const url of [`/portal/webhooks/${id}`, `/portal/webhooks/${id}/delete`]) {
      const response = await stranger.get(url)
      assert.equal(response.statusCode, 404, url)
      assert.equal(heading(response.body), 'Endpoint not found')
    }
    for (const action of ['disable', 'rotate', 'delete', 'test', 'recover', `deliveries/${delivery.id}/redeliver`]) {
      const fields: Record<string, string> = action === 'recover' ? { _csrf, since: '2026-01-01T00:00' } : { _csrf }
      const response = await stranger.post(`/portal/webhooks/${id}/${action}`, fields)
      assert.equal(response.statusCode, 404, action)
      assert.match(response.headers['content-type'] as string, /^text\/html/)
    }
    assert.ok(!(await stranger.get('/portal/webhooks')).body.includes(id))
    const endpoint = await app.store.getWebhookEndpoint(accountId, id)
    assert.equal(endpoint?.status, 'enabled')
    assert.equal(endpoint?.secretRotatedAt, null)
  })
})

describe('Portal: test event and recovery', () => {
  it('Send test event queues a webhook.test event to this endpoint alone, and the page says so', async () => {
    const { app, browser, accountId, nudges } = await signedIn(shared())
    const { id } = await added(browser, URL_1, { events: ['order.placed'] })
    const { id: other } = await added(browser, 'https://other.example.com/hook')
    const page = `/portal/webhooks/${id}`
    const nudged = nudges()
    const response = await press(browser, `${page}/test`, page)
    assert.equal(response.statusCode, 303)
    const [event] = (await app.store.listEvents({ accountId, limit: 10 })).events
    assert.equal(event?.type, 'webhook.test')
    assert.equal(event?.data.id, id)
    assert.equal(response.headers.location, `${page}?tested=${event?.id}`)
    assert.equal(nudges(), nudged + 1)
    const after = await browser.get(response.headers.location as string)
    assert.match(after.body, new RegExp(`Test event <code>${event?.id}</code> is queued`))
    assert.equal(tableRows(after.body)[0]?.[0], `webhook.test ${event?.id}`)
    assert.deepEqual(await app.store.listDeliveries(accountId, other, 20), [])
    // A disabled endpoint: refused, saying why; nothing queued.
    assert.equal((await press(browser, `${page}/disable`, page)).statusCode, 303)
    const refused = await press(browser, `${page}/test`, page)
    assert.equal(refused.statusCode, 409)
    assert.match(refused.body, /This endpoint is disabled: nothing is sent to it\. Enable it, then send a test event\./)
    assert.equal((await app.store.listEvents({ accountId, limit: 10 })).events.length, 1)
  })

  it('Send failed deliveries again sends those failed since the time given (UTC), and says how many', async (t) => {
    // It claims the first due deliveries of the store, whoever's, and counts every nudge: an app of its own.
    const { app, browser, accountId, nudges } = await signedIn(ownApp(t))
    const { id } = await added(browser, URL_1, { events: ['message.created'] })
    const key = await browser.createKey('laptop')
    const page = `/portal/webhooks/${id}`
    const form = await browser.get(page)
    // Filled in with 24 hours ago, as the field shows a time: to the minute, in UTC.
    const filled = /<input id="since" name="since" type="datetime-local" value="([^"]+)"/.exec(form.body)?.[1] ?? ''
    assert.match(filled, /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}$/)
    assert.ok(Math.abs(Date.parse(`${filled}Z`) - (Date.now() - 86_400_000)) < 120_000, filled)
    for (const text of ['one', 'two']) await sendMessage(app, key, text)
    // Each attempt answered 500, with no retry left: the deliveries fail. (The app's own loop may claim
    // one first, fail to reach the host and schedule a retry: then the claim comes later.)
    const failed = new Set<string>()
    await until(
      'both failed',
      async () => {
        for (const claimed of await app.store.claimDeliveries(10, 60_000)) {
          if (await app.store.recordDelivery(givenUp(claimed))) failed.add(claimed.id)
        }
        return failed.size === 2
      },
      { timeoutMs: 40_000 },
    )
    const recover = (since: string) => browser.submit(page, `${page}/recover`, { since })
    const nudged = nudges()
    const response = await recover(filled)
    assert.equal(response.statusCode, 303)
    assert.equal(response.headers.location, `${page}?recovered=2`)
    assert.equal(nudges(), nudged + 1)
    const after = await browser.get(response.headers.location as string)
    assert.match(after.body, /2 failed deliveries are queued to be sent again now\./)
    const deliveries = (await app.store.listDeliveries(accountId, id, 20)) ?? []
    assert.deepEqual(
      deliveries.map((d) => d.status),
      ['pending', 'pending'],
    )
    // Nothing failed since a later time; a time that is none is refused beside the field, as typed.
    const none = await recover('9999-12-31 23:59')
    assert.equal(none.headers.location, `${page}?recovered=0`)
    assert.match((await browser.follow(none)).body, /No delivery failed since then: nothing was sent again\./)
    for (const since of ['yesterday', '2026-02-30T10:00', '']) {
      const refused = await recover(since)
      assert.equal(refused.statusCode, 400, since)
      assert.match(refused.body, /<p class="field-error" id="since-error">Enter a date and time in UTC/)
      assert.match(refused.body, new RegExp(`name="since" type="datetime-local" value="${since}"`))
    }
    assert.equal((await press(browser, `${page}/disable`, page)).statusCode, 303)
    const disabled = await recover(filled)
    assert.equal(disabled.statusCode, 409)
    assert.match(disabled.body, /This endpoint is disabled: nothing is sent to it\. Enable it, then send them again\./)
  })
})

describe('Portal: recent deliveries', () => {
  it('lists a delivery once a message is sent; Send again makes a failed one pending and wakes the deliverer', async (t) => {
    // It claims the first due delivery of the store, whoever's, and counts every nudge: an app of its own.
    const { app, browser, accountId, nudges } = await signedIn(ownApp(t))
    const { id } = await added(browser)
    await sendMessage(app, await browser.createKey('laptop'), 'hello')
    // One attempt, answered 500, with no retry left: the delivery fails. (The app's own delivery loop
    // may claim it first, fail to reach the host and schedule a retry: then the claim comes later.)
    const claimed = await until('a delivery claimed', async () => (await app.store.claimDeliveries(10, 60_000))[0], {
      timeoutMs: 40_000,
    })
    const recorded = await app.store.recordDelivery(givenUp(claimed))
    assert.equal(recorded, 'failed')

    const page = `/portal/webhooks/${id}`
    const detail = await browser.get(page)
    const [row] = tableRows(detail.body)
    assert.equal(row?.[0], `message.created ${claimed.eventId}`)
    assert.deepEqual(row?.slice(1, 4), ['Failed', String(claimed.attempts), 'HTTP 500'])
    const action = `${page}/deliveries/${claimed.id}/redeliver`
    const response = await browser.post(action, { _csrf: csrfOf(detail.body, action) })
    assert.equal(response.statusCode, 303)
    assert.equal(response.headers.location, `${page}?resent=${claimed.id}`)
    assert.equal(nudges(), 1)
    const [delivery] = (await app.store.listDeliveries(accountId, id, 20)) ?? []
    assert.equal(delivery?.status, 'pending')
    const after = await browser.get(response.headers.location as string)
    assert.match(after.body, new RegExp(`Delivery <code>${claimed.id}</code> is queued to be sent again`))
    assert.equal(tableRows(after.body)[0]?.[1], 'Pending')
  })

  it('shows the 20 most recent deliveries', async () => {
    const { app, browser, accountId } = await signedIn(shared())
    const { id } = await added(browser, URL_1, { events: ['message.created'] })
    const key = await browser.createKey('laptop')
    for (let i = 0; i < 21; i++) await sendMessage(app, key, `hello ${i}`)
    const all = (await app.store.listDeliveries(accountId, id, 100)) ?? []
    assert.equal(all.length, 21)
    const shown = tableRows((await browser.get(`/portal/webhooks/${id}`)).body)
    assert.equal(shown.length, 20)
    assert.ok(!shown.some((row) => row[0]?.includes(all[20]?.eventId as string)), 'the oldest is shown')
  })

  it('refuses Send again while the endpoint is disabled, saying so; and a delivery of another endpoint', async () => {
    const { app, browser, accountId, nudges } = await signedIn(shared())
    const nudged = nudges()
    const { id } = await added(browser)
    const { id: other } = await added(browser, 'https://other.example.com/hook')
    await sendMessage(app, await browser.createKey('laptop'), 'hello')
    const [delivery] = (await app.store.listDeliveries(accountId, id, 20)) ?? []
    assert.ok(delivery)
    const page = `/portal/webhooks/${id}`
    const detail = await browser.get(page)
    const _csrf = csrfOf(detail.body, `${page}/deliveries/${delivery.id}/redeliver`)
    const elsewhere = await browser.post(`/portal/webhooks/${other}/deliveries/${delivery.id}/redeliver`, { _csrf })
    assert.equal(elsewhere.statusCode, 404)
    assert.equal(heading(elsewhere.body), 'Delivery not found')

    assert.equal((await press(browser, `${page}/disable`, page)).statusCode, 303)
    // Disabling failed the pending delivery; Send again would make it pending for nobody.
    const response = await browser.post(`${page}/deliveries/${delivery.id}/redeliver`, { _csrf })
    assert.equal(response.statusCode, 409)
    assert.match(
      response.body,
      /This endpoint is disabled: nothing is sent to it\. Enable it, then send the delivery again\./,
    )
    assert.equal((await app.store.listDeliveries(accountId, id, 20))?.[0]?.status, 'failed')
    assert.equal(nudges(), nudged)
  })
})

describe('Portal: events (experimental)', () => {
  it("lists the account's recent events, newest first, with what each carried, escaped; none of another account", async () => {
    const { app, browser } = await signedIn(shared())
    const keys = await browser.get('/portal/keys')
    assert.match(keys.body, /href="\/portal\/events"/)
    const empty = await browser.get('/portal/events')
    assert.equal(empty.statusCode, 200)
    assert.match(empty.body, /No events yet/)
    const secret = await browser.createKey('laptop')
    await sendMessage(app, secret, 'first <b>hello</b>')
    await sendMessage(app, secret, 'second')
    const other = await signedIn(shared())
    await sendMessage(app, await other.browser.createKey('theirs'), 'not yours')

    const page = await browser.get('/portal/events')
    assert.equal(page.statusCode, 200)
    assert.equal(heading(page.body), 'Events')
    const rows = tableRows(page.body)
    assert.equal(rows.length, 2)
    assert.ok(rows.every((row) => row.includes('message.created')))
    // Newest first; the payload is the message as the API returned it, its text escaped.
    assert.ok(page.body.indexOf('second') < page.body.indexOf('first &lt;b&gt;hello&lt;/b&gt;'))
    assert.ok(!page.body.includes('<b>hello</b>'), 'the payload is not escaped')
    assert.ok(!page.body.includes('not yours'), "another account's event is shown")
    const listed = await app.inject({
      url: '/v1/events',
      headers: { ...bearer(secret), 'animal-store-beta': 'webhooks' },
    })
    for (const event of listed.json() as { id: string }[]) assert.ok(page.body.includes(event.id), event.id)
  })
})
