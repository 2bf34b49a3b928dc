/**
 * The parts of the README and of the docs pages that tests run: a marked section
 * (`<!-- name:start -->` … `<!-- name:end -->`), its fenced code blocks, and a check that a run
 * printed what the page says it prints.
 */
import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { ROOT } from './processes.ts'

/** The text between `<!-- name:start -->` and `<!-- name:end -->` in `page` (a path from the root: `docs/webhooks.md`). */
export function docSection(page: string, name: string): string {
  const text = readFileSync(join(ROOT, page), 'utf8')
  const section = text.split(`<!-- ${name}:start -->`)[1]?.split(`<!-- ${name}:end -->`)[0]
  assert.ok(section, `${page} has no ${name} section`)
  return section
}

/** The text between `<!-- name:start -->` and `<!-- name:end -->` in the README. */
export function readmeSection(name: string): string {
  return docSection('README.md', name)
}

/** The fenced code blocks of `markdown`, in order: their language and their text. */
export function codeBlocks(markdown: string): { lang: string; body: string }[] {
  return [...markdown.matchAll(/```(\w*)\n([\s\S]*?)```/g)].map(([, lang, body]) => ({
    lang: lang as string,
    body: body as string,
  }))
}

/** `expected` lines must appear in `actual`, in order; `…` matches anything. `what` names the run in the failure. */
export function assertShows(actual: string, expected: string[], what: string, { ignoreCase = false } = {}) {
  const lines = actual.split('\n').map((l) => l.replace(/\r$/, ''))
  let from = 0
  for (const line of expected) {
    const pattern = new RegExp(
      `^${line
        .split('…')
        .map((part) => part.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'))
        .join('.*?')}$`,
      ignoreCase ? 'i' : '',
    )
    const at = lines.findIndex((l, i) => i >= from && pattern.test(l))
    assert.ok(at >= 0, `${what} should print\n  ${line}\nbut printed:\n${actual}`)
    from = at + 1
  }
}
