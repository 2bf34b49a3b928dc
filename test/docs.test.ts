/**
 * The documentation holds together: the README stays a front door (at most 300 lines, none wider
 * than 200 characters, a layout map naming every folder), every relative link of README.md,
 * DEVELOPERS.md and docs/*.md reaches a file (and, into a page, one of its headings or anchors),
 * each docs page opens with its contents, and the decisions index lists every entry.
 */
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { dirname, join, normalize } from 'node:path'
import { describe, it } from 'node:test'
import { ROOT } from './processes.ts'

/** The pages: README.md, DEVELOPERS.md and every docs/*.md, as paths from the root. */
const PAGES = [
  'README.md',
  'DEVELOPERS.md',
  ...readdirSync(join(ROOT, 'docs'))
    .filter((name) => name.endsWith('.md'))
    .map((name) => `docs/${name}`),
]
/** The specification is given to us as it is: it gets no contents of ours. */
const WITHOUT_CONTENTS = ['docs/spec.md']

const read = (page: string) => readFileSync(join(ROOT, page), 'utf8')

/** `markdown` without its fenced code blocks and inline code: what is left is prose, headings and links. */
function prose(markdown: string): string {
  return markdown.replace(/^```[^\n]*\n[\s\S]*?^```$/gm, '').replace(/(`+)[\s\S]*?\1/g, '')
}

/** A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces as hyphens. */
function slug(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/<[^>]*>/g, '')
    .replace(/\[([^\]]*)\]\([^)]*\)/g, '$1')
    .replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, '')
    .replace(/ /g, '-')
}

/** The anchors a page has: its headings' (the second of a name gets `-1`, …) and its `id="…"` elements'. */
function anchors(markdown: string): Set<string> {
  const found = new Set<string>()
  const seen = new Map<string, number>()
  for (const [, heading] of markdown.replace(/^```[^\n]*\n[\s\S]*?^```$/gm, '').matchAll(/^#{1,6} (.+)$/gm)) {
    const base = slug(heading as string)
    const count = seen.get(base) ?? 0
    seen.set(base, count + 1)
    found.add(count === 0 ? base : `${base}-${count}`)
  }
  for (const [, id] of markdown.matchAll(/\bid="([^"]+)"/g)) found.add(id as string)
  return found
}

/** The text of a page's `## heading` section, up to the next `## `; empty when it has none. */
const section = (markdown: string, heading: string) =>
  markdown.split(new RegExp(`^## ${heading}$`, 'm'))[1]?.split(/^## /m)[0] ?? ''

/** The `## ` headings of a page, in order. */
const sections = (markdown: string) =>
  [...prose(markdown).matchAll(/^## (.+)$/gm)].map(([, heading]) => (heading as string).trim())

/** The folders git tracks files in, as paths from the root (`src`, `src/portal/assets`, …). */
function trackedFolders(): string[] {
  const files = execFileSync('git', ['ls-files'], { cwd: ROOT, encoding: 'utf8' }).split('\n').filter(Boolean)
  const folders = new Set<string>()
  for (const file of files) {
    for (let folder = dirname(file); folder !== '.'; folder = dirname(folder)) folders.add(folder)
  }
  return [...folders].filter((folder) => existsSync(join(ROOT, folder))).sort()
}

describe('Documentation: the front door and the pages behind it', () => {
  it('the README is at most 300 lines, none of them over 200 characters', () => {
    const lines = read('README.md').trimEnd().split('\n')
    assert.ok(lines.length <= 300, `README.md has ${lines.length} lines: move reference content to docs/`)
    const wide = lines.map((line, i) => [i + 1, line.length]).filter(([, length]) => (length as number) > 200)
    assert.deepEqual(wide, [], 'README.md lines over 200 characters ([line, length])')
  })

  it('every relative link of README.md, DEVELOPERS.md and docs/*.md reaches a file, and its anchor', () => {
    const broken: string[] = []
    for (const page of PAGES) {
      for (const [, target] of prose(read(page)).matchAll(/\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)) {
        if (/^[a-z][a-z0-9+.-]*:/i.test(target as string)) continue // http:, https:, mailto:
        const [path = '', anchor] = (target as string).split('#')
        const file = path === '' ? page : normalize(join(dirname(page), decodeURI(path)))
        if (!existsSync(join(ROOT, file))) {
          broken.push(`${page}: ${target} (no file ${file})`)
        } else if (anchor !== undefined && file.endsWith('.md') && !anchors(read(file)).has(anchor)) {
          broken.push(`${page}: ${target} (no heading or id "${anchor}" in ${file})`)
        }
      }
    }
    assert.deepEqual(broken, [])
  })

  it('each docs page opens with its contents, linking every one of its sections', () => {
    for (const page of PAGES.filter((p) => p.startsWith('docs/') && !WITHOUT_CONTENTS.includes(p))) {
      const markdown = read(page)
      const [first, ...rest] = sections(markdown)
      assert.equal(first, 'Contents', `${page}: its first section is its contents`)
      const contents = section(markdown, 'Contents')
      for (const heading of rest) {
        assert.ok(contents.includes(`](#${slug(heading)})`), `${page}: the contents link "${heading}"`)
      }
    }
  })

  it('the layout maps name every folder: the README the top ones and those of src/, DEVELOPERS.md all', () => {
    const folders = trackedFolders()
    const readme = section(read('README.md'), 'Layout')
    assert.ok(readme.includes('```'), 'the README has a Layout section with its map')
    for (const folder of folders.filter((f) => !f.includes('/'))) {
      assert.match(readme, new RegExp(`^${folder.replace('.', '\\.')}/ `, 'm'), `the README's layout names ${folder}/`)
    }
    for (const folder of folders.filter((f) => /^src\/[^/]+$/.test(f))) {
      assert.match(readme, new RegExp(`^ {2}${folder.slice(4)}/ `, 'm'), `the README's layout names ${folder}/`)
    }
    const developers = read('DEVELOPERS.md')
    for (const folder of folders.filter((f) => !f.startsWith('test/'))) {
      assert.ok(developers.includes(`${folder}/`), `DEVELOPERS.md names ${folder}/`)
    }
  })

  it('the decisions index links every entry, by its number and title, in the order of the page', () => {
    const markdown = read('docs/decisions.md')
    const index = section(markdown, 'Contents')
    const entries = [...markdown.matchAll(/^(\d+)\. <a id="decision-\1"><\/a>\*\*(.+?)\*\*/gm)].map(
      ([, n, title]) => `[${n}. ${(title as string).replace(/[.:]$/, '')}](#decision-${n})`,
    )
    const numbers = entries.map((entry) => Number(entry.match(/^\[(\d+)/)?.[1])).sort((a, b) => a - b)
    assert.deepEqual(
      numbers,
      numbers.map((_, i) => i + 1),
      'entries are numbered 1 to N, each once',
    )
    const listed = [...index.matchAll(/\[\d+\. .+?\]\(#decision-\d+\)/g)].map(([link]) => link)
    assert.deepEqual(listed, entries)
  })
})
