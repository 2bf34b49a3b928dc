/**
 * Headless Chromium for the browser tests: Debian's package (/usr/bin/chromium) driven by
 * playwright-core, with a fresh profile per test. When Chromium is missing the tests are skipped
 * locally with a message saying how to install it; under CI (CI=true) they fail instead, since
 * .ci/run installs it.
 */
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { createRequire } from 'node:module'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { TestContext } from 'node:test'
import { type BrowserContext, chromium, type Page } from 'playwright-core'
import { DATABASE } from '../helper.ts'
import { ROOT } from '../processes.ts'

export const CHROMIUM = '/usr/bin/chromium'

/** `skip` for node:test: a reason when the browser tests cannot run here, false when they can. */
export const skipUnlessChromium: string | false =
  existsSync(CHROMIUM) || process.env.CI
    ? false
    : `Chromium is not installed at ${CHROMIUM}: install it with "apt-get update && apt-get install -y chromium" to run the browser tests`

const FLAGS = [
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
]

/** The viewports every page is checked at: a desktop window and a phone (375 CSS px, an iPhone's). */
export const VIEWPORTS = {
  desktop: { width: 1280, height: 900 },
  phone: { width: 375, height: 740 },
} as const
export type ViewportName = keyof typeof VIEWPORTS

export interface Browser {
  context: BrowserContext
  page: Page
  /** Console errors and page errors seen so far (CSP violations show up here). */
  problems: string[]
  /**
   * Saves a full-page screenshot as test-output/browser/<database>/<name>[-phone].png, when
   * TEST_SCREENSHOTS=1 or `always` (a failed check): a tall page costs a second of CPU to encode.
   */
  screenshot(name: string, always?: boolean): Promise<void>
}

export async function launch(
  t: TestContext,
  options: { javaScriptEnabled?: boolean; viewport?: ViewportName } = {},
): Promise<Browser> {
  const viewport = options.viewport ?? 'desktop'
  const profile = mkdtempSync(join(tmpdir(), 'animal-store-chromium-'))
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: FLAGS,
    javaScriptEnabled: options.javaScriptEnabled ?? true,
    viewport: VIEWPORTS[viewport],
  })
  t.after(async () => {
    await context.close()
    rmSync(profile, { recursive: true, force: true })
  })
  const page = context.pages()[0] ?? (await context.newPage())
  const problems: string[] = []
  page.on('console', (message) => {
    if (message.type() === 'error') problems.push(`console: ${message.text()}`)
  })
  page.on('pageerror', (error) => problems.push(`page error: ${error.message}`))
  const folder = join(ROOT, 'test-output', 'browser', DATABASE)
  mkdirSync(folder, { recursive: true })
  return {
    context,
    page,
    problems,
    screenshot: async (name, always = false) => {
      if (!always && process.env.TEST_SCREENSHOTS !== '1') return
      const suffix = viewport === 'desktop' ? '' : `-${viewport}`
      await page.screenshot({ path: join(folder, `${name}${suffix}.png`), fullPage: true })
    },
  }
}

/** Runs axe-core (WCAG 2.x A and AA rules, and best practices) on the page; one line per violation. */
export async function accessibilityViolations(page: Page): Promise<string[]> {
  const axe = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8')
  // Evaluated through the DevTools protocol, which the page's CSP does not govern.
  await page.evaluate(axe)
  // A string, run in the page (the tests are type-checked without the DOM's types).
  return page.evaluate(`axe
    .run({ runOnly: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa', 'best-practice'] })
    .then(({ violations }) => violations.map((v) => v.id + ': ' + v.nodes.map((n) => n.target.join(' ')).join(', ')))`)
}
