/**
 * HTML by tagged template: every interpolated value is escaped unless it is itself `html`
 * (a fragment built the same way), so markup cannot come from data by accident.
 */
export class Html {
  readonly text: string
  constructor(text: string) {
    this.text = text
  }
  toString(): string {
    return this.text
  }
}

type Value = Html | string | number | null | undefined | false | readonly Value[]

// NUL is not allowed in HTML text (browsers show U+FFFD for it): a refused value echoed back says so.
const ESCAPES: Record<string, string> = {
  '&': '&amp;',
  '<': '&lt;',
  '>': '&gt;',
  '"': '&quot;',
  "'": '&#39;',
  '\0': '\ufffd',
}

export function escapeHtml(text: string): string {
  return text.replace(/[&<>"'\0]/g, (c) => ESCAPES[c] as string)
}

function render(value: Value): string {
  if (value === null || value === undefined || value === false) return ''
  if (value instanceof Html) return value.text
  if (Array.isArray(value)) return value.map(render).join('')
  return escapeHtml(String(value))
}

export function html(strings: TemplateStringsArray, ...values: Value[]): Html {
  let out = strings[0] as string
  values.forEach((value, i) => {
    out += render(value) + strings[i + 1]
  })
  return new Html(out)
}
