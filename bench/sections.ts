/**
 * Generated sections of a markdown file that another script owns: `npm run bench` rewrites
 * docs/performance.md but keeps the growth section written by `npm run bench:growth`, and the
 * growth bench replaces only its own section. Each section sits between marker comments.
 */
import { readFileSync } from 'node:fs'

const markers = (name: string) => [`<!-- ${name}:start -->`, `<!-- ${name}:end -->`] as const

/** The section's text with its markers, or null when `doc` has none. */
export function section(doc: string, name: string): string | null {
  const [start, end] = markers(name)
  const from = doc.indexOf(start)
  const to = doc.indexOf(end, from)
  return from === -1 || to === -1 ? null : doc.slice(from, to + end.length)
}

/** `doc` with the section replaced by `content` (markers added), or with it appended when absent. */
export function withSection(doc: string, name: string, content: string): string {
  const [start, end] = markers(name)
  const block = content.startsWith(start) ? content : `${start}\n${content.trim()}\n${end}`
  const current = section(doc, name)
  return current === null ? `${doc.trimEnd()}\n\n${block}\n` : doc.replace(current, () => block)
}

/** The file's text, or '' when it does not exist yet. */
export function readOrEmpty(path: string): string {
  try {
    return readFileSync(path, 'utf8')
  } catch {
    return ''
  }
}
