/**
 * The client developer's path in a real browser (headless Chromium) against a real server process,
 * following the portal walkthrough of docs/accounts.md: sign up, create a key and see it once, use it with the
 * typed client, see the message and the orders in the portal (and cancel one), revoke the key and
 * see the API refuse it (the API reference at /docs: test/browser/docs.test.ts). Every page is checked
 * at a desktop's width and a phone's: axe, nothing off-screen, and a reload after a form repeats
 * nothing. A page that fails a check is saved as a screenshot (every page with TEST_SCREENSHOTS=1).
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { AnimalStoreError, allPets, createAnimalStoreClient, unwrap } from 'animal-store/client'
import type { Page } from 'playwright-core'
import { testDatabaseUrl } from '../helper.ts'
import { startServer } from '../processes.ts'
import { accessibilityViolations, launch, skipUnlessChromium, VIEWPORTS, type ViewportName } from './chromium.ts'

// One database: the pages and their scripts are the same on both; test/portal/ runs their routes on each.

const EMAIL = 'browser@example.com'
const PASSWORD = 'correct horse battery staple'

async function serve(t: Parameters<typeof launch>[0]) {
  return startServer(t, { DATABASE_URL: await testDatabaseUrl(t), API_KEY_CACHE_SECONDS: '5' })
}

/** How far the page scrolls sideways: 0 when everything fits the viewport's width. */
async function horizontalOverflow(page: Page): Promise<number> {
  return page.evaluate('document.documentElement.scrollWidth - document.documentElement.clientWidth')
}

/**
 * What the width hides, one line each: a table that scrolls sideways in its box, a link, button or
 * field of the page's content not wholly on the screen, an id or other code in a table or a list of
 * details broken over lines (a URL may wrap), and a cell whose caption on a phone (data-label) is
 * not its column's header.
 */
async function layoutProblems(page: Page): Promise<string[]> {
  return page.evaluate(`(() => {
    const problems = []
    const width = document.documentElement.clientWidth
    const text = (element) => element.textContent.trim().replace(/\\s+/g, ' ')
    for (const wrap of document.querySelectorAll('.table-wrap'))
      if (wrap.scrollWidth > wrap.clientWidth)
        problems.push('scrolls sideways in its box: ' + wrap.getAttribute('aria-label'))
    for (const control of document.querySelectorAll('main a, main button, main input, main select')) {
      const box = control.getBoundingClientRect()
      if (box.width === 0 && box.height === 0) continue
      if (box.left < 0 || box.right > width)
        problems.push('off-screen (' + Math.round(box.left) + ' to ' + Math.round(box.right) + ' px): ' + (text(control) || control.name))
    }
    for (const code of document.querySelectorAll('td code, th code, dd code:not(.url)'))
      if (code.getClientRects().length > 1) problems.push('broken over lines: ' + text(code))
    for (const table of document.querySelectorAll('table')) {
      const headers = [...table.querySelectorAll('thead th')].map(text)
      for (const row of table.querySelectorAll('tbody tr'))
        [...row.children].forEach((cell, i) => {
          if (cell.dataset.label !== undefined && cell.dataset.label !== headers[i])
            problems.push('captioned ' + cell.dataset.label + ' under ' + headers[i])
        })
    }
    return problems
  })()`)
}

/** The table cells as Chromium gives them to screen readers (its accessibility tree): role and name. */
async function accessibleCells(browser: Awaited<ReturnType<typeof launch>>): Promise<string[]> {
  const cdp = await browser.context.newCDPSession(browser.page)
  const { nodes } = await cdp.send('Accessibility.getFullAXTree')
  await cdp.detach()
  return nodes
    .filter((node) => !node.ignored && ['columnheader', 'rowheader', 'cell'].includes(node.role?.value as string))
    .map((node) => `${node.role?.value}: ${node.name?.value}`)
}

/** A page passes when axe finds nothing, it does not scroll sideways, and its width hides nothing. */
async function checkPage(browser: Awaited<ReturnType<typeof launch>>, name: string) {
  try {
    assert.deepEqual(await accessibilityViolations(browser.page), [], `${name}: accessibility`)
    assert.equal(await horizontalOverflow(browser.page), 0, `${name}: scrolls sideways`)
    assert.deepEqual(await layoutProblems(browser.page), [], `${name}: layout`)
  } catch (error) {
    await browser.screenshot(name, true)
    throw error
  }
  await browser.screenshot(name)
}

const viewports = Object.keys(VIEWPORTS) as ViewportName[]

describe('Browser: the portal walkthrough of docs/accounts.md', () => {
  for (const viewport of viewports)
    it(`sign up, create a key, see it once, use it, revoke it, and the API refuses it (${viewport})`, {
      timeout: 120_000,
      skip: skipUnlessChromium,
    }, async (t) => {
      const server = await serve(t)
      const browser = await launch(t, { viewport })
      const { page } = browser
      await browser.context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: server.url })
      // A long email, as the header must fit it on a phone too.
      const email = `a-rather-long-address-for-a-phone-${viewport}@subdomain.example.com`

      // 1. Open /portal: signed out, it shows the sign-in page.
      await page.goto(`${server.url}/portal`)
      assert.equal(new URL(page.url()).pathname, '/portal/sign-in')
      await checkPage(browser, '01-sign-in')

      // 2. Choose "Create an account", fill in email and password twice.
      await page.getByRole('link', { name: 'Create an account' }).first().click()
      await page.getByRole('heading', { name: 'Create an account' }).waitFor()
      await checkPage(browser, '02-sign-up')
      await page.getByLabel('Email').fill(email)
      await page.getByLabel('Password', { exact: true }).fill(PASSWORD)
      await page.getByLabel('Password again').fill(PASSWORD)
      await page.getByRole('button', { name: 'Create account' }).click()

      // 3. The keys page: no keys yet. Name a key, choose an expiry, "Create key".
      await page.getByRole('heading', { name: 'API keys' }).waitFor()
      assert.match((await page.locator('main').textContent()) ?? '', /You have no keys yet/)
      await checkPage(browser, '03-keys-empty')
      await page.getByLabel('Name').fill('a-rather-long-key-name-for-the-laptop')
      await page.getByLabel('Expires after').selectOption({ label: '90 days' })
      await page.getByRole('button', { name: 'Create key' }).click()

      // 4. The key, shown once, with a copy button.
      await page.getByRole('heading', { name: 'Your new API key' }).waitFor()
      const secret = await page.getByLabel('API key').inputValue()
      assert.match(secret, /^as_test_[0-9A-Za-z]{38}$/)
      await page.getByRole('button', { name: 'Copy to clipboard' }).click()
      await page.getByText('Copied to the clipboard.').waitFor()
      assert.equal(await page.evaluate('navigator.clipboard.readText()'), secret)
      await checkPage(browser, '04-new-key')

      // 4b. A reload makes no second key, and no longer shows this one: the list says why.
      await page.reload()
      await page.getByRole('heading', { name: 'API keys' }).waitFor()
      assert.match((await page.locator('main').textContent()) ?? '', /A new key is shown only once/)
      assert.ok(!(await page.content()).includes(secret), 'the secret is shown again')
      assert.equal(await page.locator('tbody tr').count(), 1)
      await checkPage(browser, '04b-new-key-reloaded')
      await page.goBack()
      await page.getByRole('heading', { name: 'API keys' }).waitFor()
      assert.ok(!(await page.content()).includes(secret), 'Back shows the secret again')
      assert.equal(await page.locator('tbody tr').count(), 1)

      // 5. The list: the key is there by prefix, never in full.
      await page.getByRole('link', { name: 'API keys' }).click()
      await page.getByRole('heading', { name: 'API keys' }).waitFor()
      const listed = await page.content()
      assert.ok(!listed.includes(secret), 'the secret is shown again')
      assert.ok(listed.includes(`${secret.slice(0, 12)}…`))
      await checkPage(browser, '05-keys')
      // A table still to screen readers on a phone, its cells without their captions (read as headers).
      const cells = await accessibleCells(browser)
      for (const cell of [
        'columnheader: Prefix',
        'rowheader: a-rather-long-key-name-for-the-laptop',
        `cell: ${secret.slice(0, 12)}…`,
        'cell: Revoke a-rather-long-key-name-for-the-laptop',
      ])
        assert.ok(cells.includes(cell), `${cell} in ${cells.join(', ')}`)

      // 6. The typed client, with that key, against the same server.
      const client = createAnimalStoreClient({ baseUrl: `${server.url}/v1`, apiKey: secret })
      const rex = unwrap(await client.POST('/pets', { body: { name: 'Rex', categoryId: 1 } }))
      assert.deepEqual(rex, { id: 1, name: 'Rex', categoryId: 1, status: 'available' })
      unwrap(await client.POST('/messages', { body: { message: 'Hello from the browser test' } }))
      const all = []
      for await (const pet of allPets(client, { limit: 1 })) all.push(pet)
      assert.deepEqual(all, [rex])

      // 7. The message is on the Messages page.
      await page.getByRole('link', { name: 'Messages' }).click()
      await page.getByRole('heading', { name: 'Messages' }).waitFor()
      assert.match((await page.locator('table').textContent()) ?? '', /Hello from the browser test/)
      await checkPage(browser, '06-messages')

      // A page that is not there keeps the signed-in menu (Chromium logs its 404, taken off below).
      const seen = browser.problems.length
      await page.goto(`${server.url}/portal/nowhere`)
      await page.getByRole('heading', { name: 'Page not found' }).waitFor()
      assert.match((await page.locator('header').textContent()) ?? '', /Signed in as/)
      await checkPage(browser, '06b-not-found')
      assert.deepEqual(browser.problems.splice(seen), [
        'console: Failed to load resource: the server responded with a status of 404 (Not Found)',
      ])

      // 7b. Orders, through the typed client (it opts in to the beta): Rex held, Tom sold.
      const held = unwrap(await client.POST('/store/orders', { body: { petId: rex.id } }))
      const tom = unwrap(await client.POST('/pets', { body: { name: 'Tom', categoryId: 2 } }))
      const sold = unwrap(await client.POST('/store/orders', { body: { petId: tom.id } }))
      unwrap(await client.POST('/store/orders/{orderId}/complete', { params: { path: { orderId: sold.id } } }))

      // 7c. The Orders page lists them newest first; Cancel in Rex's row frees him.
      await page.getByRole('link', { name: 'Orders' }).click()
      await page.getByRole('heading', { name: 'Orders' }).waitFor()
      const orderRows = await page.locator('tbody tr').allTextContents()
      assert.equal(orderRows.length, 2)
      assert.match(orderRows[0] ?? '', new RegExp(`${sold.id}\\s*Tom \\(#${tom.id}\\)\\s*Completed`))
      assert.match(orderRows[1] ?? '', new RegExp(`${held.id}\\s*Rex \\(#${rex.id}\\)\\s*Placed`))
      await checkPage(browser, '06c-orders')
      // Asked first, as Revoke is: Keep the order changes nothing.
      await page.getByRole('link', { name: 'Cancel the order for Rex' }).click()
      await page.getByRole('heading', { name: 'Cancel an order' }).waitFor()
      await checkPage(browser, '06d-cancel-order')
      await page.getByRole('link', { name: 'Keep the order' }).click()
      await page.getByRole('heading', { name: 'Orders' }).waitFor()
      assert.equal(
        unwrap(await client.GET('/store/orders/{orderId}', { params: { path: { orderId: held.id } } })).status,
        'placed',
      )
      await page.getByRole('link', { name: 'Cancel the order for Rex' }).click()
      await page.getByRole('button', { name: 'Cancel order' }).click()
      await page.getByText('is canceled: it no longer holds the animal.').waitFor()
      assert.equal(await page.getByRole('link', { name: /^Cancel/ }).count(), 0)
      await checkPage(browser, '06e-order-canceled')
      // A reload cancels nothing more: an order placed again for Rex stays placed.
      const again = unwrap(await client.POST('/store/orders', { body: { petId: rex.id } }))
      await page.reload()
      await page.getByText('is canceled: it no longer holds the animal.').waitFor()
      const kept = unwrap(await client.GET('/store/orders/{orderId}', { params: { path: { orderId: again.id } } }))
      assert.equal(kept.status, 'placed')
      unwrap(await client.POST('/store/orders/{orderId}/cancel', { params: { path: { orderId: again.id } } }))
      const canceled = unwrap(await client.GET('/store/orders/{orderId}', { params: { path: { orderId: held.id } } }))
      assert.equal(canceled.status, 'canceled')
      assert.deepEqual(unwrap(await client.GET('/store/inventory')), { available: 1, pending: 0, sold: 1 })

      // 8. Revoke: the link in the key's row, then confirm.
      await page.getByRole('link', { name: 'API keys' }).click()
      await page.getByRole('link', { name: 'Revoke a-rather-long-key-name-for-the-laptop' }).click()
      await page.getByRole('heading', { name: 'Revoke a key' }).waitFor()
      await checkPage(browser, '07-revoke')
      await page.getByRole('button', { name: 'Revoke key' }).click()
      await page.getByText('is revoked: requests with it are refused.').waitFor()
      assert.match((await page.locator('tbody').textContent()) ?? '', /Revoked/)
      await checkPage(browser, '08-revoked')
      await page.reload()
      await page.getByText('is revoked: requests with it are refused.').waitFor()

      // 9. The API refuses the key at once.
      const refused = await client.GET('/pets')
      assert.equal(refused.response.status, 401)
      assert.throws(
        () => unwrap(refused),
        (e) => e instanceof AnimalStoreError && e.code === 'revoked_api_key',
      )

      // 10. Sign out.
      await page.getByRole('button', { name: 'Sign out' }).click()
      await page.getByText('You are signed out.').waitFor()
      await checkPage(browser, '09-signed-out')
      assert.deepEqual(browser.problems, [], 'console errors (CSP violations included)')
    })

  it('works without JavaScript: sign up, create a key and see it (the copy button stays hidden)', {
    timeout: 60_000,
    skip: skipUnlessChromium,
  }, async (t) => {
    const server = await serve(t)
    const browser = await launch(t, { javaScriptEnabled: false })
    const { page } = browser
    await page.goto(`${server.url}/portal/sign-up`)
    await page.getByLabel('Email').fill(EMAIL)
    await page.getByLabel('Password', { exact: true }).fill(PASSWORD)
    await page.getByLabel('Password again').fill('a different password')
    await page.getByRole('button', { name: 'Create account' }).click()
    // Refused with the reason next to the field, and focus on it.
    await page.getByText('The two passwords differ').waitFor()
    await browser.screenshot('10-no-js-sign-up-refused')
    await page.getByLabel('Password', { exact: true }).fill(PASSWORD)
    await page.getByLabel('Password again').fill(PASSWORD)
    await page.getByRole('button', { name: 'Create account' }).click()
    await page.getByLabel('Name').fill('no-js')
    await page.getByRole('button', { name: 'Create key' }).click()
    assert.match(await page.getByLabel('API key').inputValue(), /^as_test_/)
    assert.equal(await page.getByRole('button', { name: 'Copy to clipboard' }).count(), 0)
    await browser.screenshot('11-no-js-new-key')
  })

  it('keyboard users meet the form fields in reading order after the skip link', {
    timeout: 60_000,
    skip: skipUnlessChromium,
  }, async (t) => {
    const server = await serve(t)
    const { page } = await launch(t)
    await page.goto(`${server.url}/portal/sign-up`)
    const order: string[] = []
    for (let i = 0; i < 9; i++) {
      await page.keyboard.press('Tab')
      // The focused element's text, or its name for a form field.
      order.push(await page.evaluate('document.activeElement.name || document.activeElement.textContent.trim()'))
    }
    assert.deepEqual(order, [
      'Skip to content',
      'Animal Store',
      'Sign in',
      'Create an account',
      'API reference',
      'Sign in',
      'email',
      'password',
      'confirm',
    ])
  })
})

describe('Browser: the webhooks pages (experimental)', () => {
  for (const viewport of viewports)
    it(`add an endpoint, see its secret once, and its deliveries (${viewport})`, {
      timeout: 120_000,
      skip: skipUnlessChromium,
    }, async (t) => {
      const server = await startServer(t, { DATABASE_URL: await testDatabaseUrl(t), EXPERIMENTAL_FEATURES: 'webhooks' })
      const browser = await launch(t, { viewport })
      const { page } = browser
      /** A read of the webhooks API with the key made below. */
      // biome-ignore lint/suspicious/noExplicitAny: a JSON body, read field by field
      const api = async (path: string): Promise<any> => {
        const response = await fetch(`${server.url}${path}`, {
          headers: { authorization: `Bearer ${key}`, 'animal-store-beta': 'webhooks' },
        })
        assert.equal(response.status, 200, path)
        return response.json()
      }
      await page.goto(`${server.url}/portal/sign-up`)
      await page.getByLabel('Email').fill(`webhooks-${viewport}@example.com`)
      await page.getByLabel('Password', { exact: true }).fill(PASSWORD)
      await page.getByLabel('Password again').fill(PASSWORD)
      await page.getByRole('button', { name: 'Create account' }).click()
      await page.getByLabel('Name').fill('webhooks')
      await page.getByRole('button', { name: 'Create key' }).click()
      const key = await page.getByLabel('API key').inputValue()

      await page.getByRole('link', { name: 'Webhooks' }).click()
      await page.getByRole('heading', { name: 'Webhooks' }).waitFor()
      await checkPage(browser, '30-webhooks-empty')
      // A long URL without spaces, as the pages must wrap it on a phone.
      const url = `https://hooks.example.com/${'a-rather-long-path-segment/'.repeat(4)}animal-store`
      await page.getByLabel('URL').fill(url)
      await page.getByLabel('Description (optional)').fill('Order sync')
      await page.getByRole('button', { name: 'Add endpoint' }).click()
      await page.getByRole('heading', { name: 'Your new webhook endpoint' }).waitFor()
      const secret = await page.getByLabel('Signing secret').inputValue()
      assert.match(secret, /^whsec_/)
      await checkPage(browser, '31-new-webhook')
      // A reload adds no second endpoint, and no longer shows the secret: the endpoint's page says why.
      await page.reload()
      await page.getByRole('heading', { name: 'Webhook endpoint' }).waitFor()
      await page.getByText('A signing secret is shown only once').waitFor()
      assert.ok(!(await page.content()).includes(secret), 'the secret is shown again')
      await checkPage(browser, '31b-new-webhook-reloaded')
      const endpoints = await api('/v1/webhook-endpoints')
      assert.equal(endpoints.length, 1)
      const endpointId = endpoints[0].id as string
      await page.goBack()
      await page.getByRole('heading', { name: 'Webhooks' }).waitFor()
      assert.equal((await api('/v1/webhook-endpoints')).length, 1)

      const sent = await fetch(`${server.url}/v1/messages`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ message: 'Hello, webhooks' }),
      })
      assert.equal(sent.status, 202)
      await page.getByRole('link', { name: 'Webhooks', exact: true }).click()
      await page.getByRole('heading', { name: 'Webhooks' }).waitFor()
      assert.ok(!(await page.content()).includes(secret), 'the secret is shown again')
      await checkPage(browser, '32-webhooks')
      await page.getByRole('link', { name: url }).click()
      await page.getByRole('heading', { name: 'Webhook endpoint' }).waitFor()
      assert.match((await page.locator('tbody').textContent()) ?? '', /message\.created/)
      await checkPage(browser, '33-webhook')

      // Rotate: the new secret shown once; a reload rotates nothing more.
      await page.getByRole('button', { name: 'Rotate secret' }).click()
      await page.getByRole('heading', { name: 'Your new signing secret' }).waitFor()
      const rotated = await page.getByLabel('Signing secret').inputValue()
      assert.match(rotated, /^whsec_/)
      assert.notEqual(rotated, secret)
      await checkPage(browser, '34-rotated-secret')
      const { secretRotatedAt } = await api(`/v1/webhook-endpoints/${endpointId}`)
      assert.ok(secretRotatedAt)
      await page.reload()
      await page.getByText('A signing secret is shown only once').waitFor()
      assert.ok(!(await page.content()).includes(rotated), 'the secret is shown again')
      assert.equal((await api(`/v1/webhook-endpoints/${endpointId}`)).secretRotatedAt, secretRotatedAt)

      // Delete, once confirmed.
      await page.getByRole('link', { name: 'Delete this endpoint' }).click()
      await page.getByRole('heading', { name: 'Delete an endpoint' }).waitFor()
      await checkPage(browser, '35-delete-webhook')
      await page.getByRole('button', { name: 'Delete endpoint' }).click()
      await page.getByText('is deleted: nothing more is sent to it.').waitFor()
      await checkPage(browser, '36-webhook-deleted')
      assert.deepEqual(await api('/v1/webhook-endpoints'), [])

      // The account's events, each payload opened: nothing scrolls sideways, on a phone too.
      await page.getByRole('link', { name: 'Events', exact: true }).click()
      await page.getByRole('heading', { name: 'Events' }).waitFor()
      for (const summary of await page.getByText('Show', { exact: true }).all()) await summary.click()
      assert.match((await page.locator('tbody').textContent()) ?? '', /Hello, webhooks/)
      await checkPage(browser, '37-events')
    })
})
