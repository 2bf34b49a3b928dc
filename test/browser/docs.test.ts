/**
 * The API reference at /docs in a real browser (headless Chromium) against a real server process:
 * it passes axe with operations open, trying one out is a choice the reader makes, its examples
 * change no data when executed as they stand, and the error table its description links to is a
 * page of this server. Screenshots go to test-output/browser/<database>/.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import type { Locator } from 'playwright-core'
import { ERROR_CODES } from '../../src/errors.ts'
import { MAX_EXACT_INTEGER } from '../../src/schemas/common.ts'
import { testDatabaseUrl } from '../helper.ts'
import { cliKey, startServer } from '../processes.ts'
import { accessibilityViolations, launch, skipUnlessChromium, VIEWPORTS, type ViewportName } from './chromium.ts'

// One database: the reference page is the same on both; test/routes/ runs what it calls on each.

/** A state of a page passes when axe finds nothing and the page does not scroll sideways. */
async function checkPage(browser: Awaited<ReturnType<typeof launch>>, name: string) {
  try {
    assert.deepEqual(await accessibilityViolations(browser.page), [], `${name}: accessibility`)
    const overflow = await browser.page.evaluate(
      'document.documentElement.scrollWidth - document.documentElement.clientWidth',
    )
    assert.equal(overflow, 0, `${name}: scrolls sideways`)
  } catch (error) {
    await browser.screenshot(name, true)
    throw error
  }
  await browser.screenshot(name)
}

/** The three operations opened together: a write that once overwrote pet 1, a create, and a read. */
const OPEN = ['pets-updatePet', 'pets-createPet', 'pets-getPet']

/** The status of the last request an operation executed, once it has one. */
async function executedStatus(operation: Locator): Promise<string> {
  const status = operation.locator('.live-responses-table tbody .response-col_status').first()
  await status.waitFor()
  return (await status.textContent())?.trim() ?? ''
}

describe('Browser: the API reference at /docs', () => {
  for (const viewport of Object.keys(VIEWPORTS) as ViewportName[])
    it(`passes axe with three operations open, tries one out only when chosen, and its examples change nothing (${viewport})`, {
      timeout: 120_000,
      skip: skipUnlessChromium,
    }, async (t) => {
      const databaseUrl = await testDatabaseUrl(t)
      // The experimental operations too: the reference shows them where they are offered.
      const server = await startServer(t, { DATABASE_URL: databaseUrl, EXPERIMENTAL_FEATURES: 'webhooks' })
      const key = await cliKey({ DATABASE_URL: databaseUrl })
      type Pet = { id: number; status: string }
      const api = async <T>(method: string, path: string, body?: object): Promise<T> => {
        const response = await fetch(`${server.url}/v1${path}`, {
          method,
          headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
          ...(body && { body: JSON.stringify(body) }),
        })
        return (await response.json()) as T
      }
      // Pet 1, sold: what updatePet's example once turned back to available with one click.
      const sold = await api<Pet>('POST', '/pets', { name: 'Rex', categoryId: 1, status: 'sold' })
      assert.equal(sold.id, 1)

      const browser = await launch(t, { viewport })
      const { page } = browser
      await page.goto(`${server.url}/docs`)
      await page.locator('.opblock').first().waitFor()
      for (const [id, method, path] of [
        ['pets-listPets', 'GET', '/pets'],
        ['pets-createPet', 'POST', '/pets'],
        ['pets-getPet', 'GET', '/pets/{petId}'],
        ['messages-sendMessage', 'POST', '/messages'],
        ['reference-getOpenApiDocument', 'GET', '/openapi.json'],
      ]) {
        const operation = page.locator(`#operations-${id}`)
        assert.equal(await operation.locator('.opblock-summary-method').textContent(), method, id)
        const shown = await operation.locator('.opblock-summary-path, .opblock-summary-path__deprecated').textContent()
        assert.equal(shown?.replace(/\u200b/g, ''), path, id)
      }
      // Requests go to this server, listed first.
      assert.match(await page.locator('.servers select').inputValue(), new RegExp(`^${server.url}/v1$`))
      await checkPage(browser, '40-reference')

      // The description: a few paragraphs, and the error codes a link away, not listed.
      const description = page.locator('.info .description')
      assert.ok((await description.locator('p').count()) >= 4)
      assert.doesNotMatch((await description.textContent()) ?? '', /http_version_not_supported/)
      const errorsLink = description.getByRole('link', { name: 'table of error codes' })
      assert.equal(new URL((await errorsLink.getAttribute('href')) ?? '').pathname, '/docs/errors')

      // Opened, an operation shows its parameters and examples, and nothing to send yet.
      for (const id of OPEN) await page.locator(`#operations-${id} .opblock-summary`).click()
      await page.locator(`#operations-${OPEN[0]} .opblock-body`).waitFor()
      assert.equal(await page.getByRole('button', { name: 'Execute' }).count(), 0)
      assert.equal(await page.getByRole('button', { name: 'Try it out' }).count(), OPEN.length)
      await checkPage(browser, '41-reference-open')

      // Trying one out is chosen, per operation; the forms it shows are named.
      for (const id of OPEN) await page.locator(`#operations-${id}`).getByRole('button', { name: 'Try it out' }).click()
      const updatePet = page.locator('#operations-pets-updatePet')
      const body = page.getByRole('textbox', { name: 'Request body of PATCH /pets/{petId}' })
      await body.waitFor()
      for (const id of ['pets-updatePet', 'pets-getPet']) {
        const petId = page.locator(`#operations-${id} tr[data-param-name="petId"] input`)
        // An id no animal has: executed as it stands, the example finds nothing to change.
        assert.equal(await petId.inputValue(), String(MAX_EXACT_INTEGER), id)
      }
      await checkPage(browser, '42-reference-try-it-out')

      // Authorize with the key, then execute updatePet as prefilled: 404, and pet 1 is still sold.
      await page
        .getByRole('button', { name: /Authorize/ })
        .first()
        .click()
      await page.getByLabel('auth-bearer-value').fill(key)
      await page.getByRole('button', { name: 'Apply credentials' }).click()
      await page.locator('.auth-btn-wrapper').getByRole('button', { name: 'Close' }).click()
      const seen = browser.problems.length
      await updatePet.getByRole('button', { name: 'Execute' }).click()
      assert.equal(await executedStatus(updatePet), '404')
      // Chromium logs the 404 of the request the reference sent; taken off here.
      assert.deepEqual(browser.problems.splice(seen), [
        'console: Failed to load resource: the server responded with a status of 404 (Not Found)',
      ])
      assert.deepEqual(await api<Pet[]>('GET', '/pets'), [sold])

      // createPet's body is the schema's readable example, not a string invented from the name's
      // pattern; executed, it adds Rex (a new animal, no other changed).
      const createPet = page.locator('#operations-pets-createPet')
      const newPet = createPet.getByRole('textbox', { name: 'Request body of POST /pets' })
      assert.deepEqual(JSON.parse(await newPet.inputValue()), { name: 'Rex', categoryId: 1, status: 'available' })
      await createPet.getByRole('button', { name: 'Execute' }).click()
      assert.equal(await executedStatus(createPet), '201')
      await checkPage(browser, '43-reference-executed')

      // The error table the description links to, on this server.
      await page.goto(`${server.url}/docs/errors`)
      await page.getByRole('heading', { name: 'Error codes' }).waitFor()
      assert.equal(await page.locator('tbody tr').count(), ERROR_CODES.length)
      await checkPage(browser, '44-error-codes')
      assert.deepEqual(browser.problems, [], 'console errors (CSP violations included)')
    })
})
