// The API reference: Swagger UI on the document the API serves, with this server listed first, so
// that "Try it out" sends requests here (the document itself names the public deployments).

/**
 * Swagger UI's markup, mended for assistive technology as it renders (it offers no option for
 * these): a name for the servers list, named regions for what stands outside its <main>, its headings
 * one level up (it jumps from its h1 to h3), and no link inside an operation's toggle button.
 */
function mend(root) {
  for (const select of root.querySelectorAll('select#servers:not([aria-label])')) {
    select.setAttribute('aria-label', 'Server')
  }
  // Its <main> holds the operations; the title and the servers stand outside it, in no landmark.
  for (const [selector, label] of [
    ['.information-container', 'About the API'],
    ['.scheme-container', 'Servers and authorization'],
  ]) {
    for (const part of root.querySelectorAll(`${selector}:not([role])`)) {
      part.setAttribute('role', 'region')
      part.setAttribute('aria-label', label)
    }
  }
  for (const heading of root.querySelectorAll('h3, h4, h5, h6')) {
    if (!heading.hasAttribute('aria-level')) heading.setAttribute('aria-level', String(Number(heading.tagName[1]) - 1))
  }
  // The button itself opens the operation and sets the address: the link adds only a nested control.
  for (const link of root.querySelectorAll('.opblock-summary-control a[href]')) link.removeAttribute('href')
  // Each open operation's responses table is a region: named after its operation, so that two
  // open at once are told apart; and the request body's textarea is named (it has no label).
  for (const table of root.querySelectorAll('.responses-table[role="region"]:not([aria-label])')) {
    table.setAttribute('aria-label', `Responses of ${operationName(table)}`)
  }
  for (const body of root.querySelectorAll('textarea.body-param__text:not([aria-label])')) {
    body.setAttribute('aria-label', `Request body of ${operationName(body)}`)
  }
  // A parameter with a list of values (Animal-Store-Beta, a status filter) is a select with no name.
  for (const row of root.querySelectorAll('tr[data-param-name]')) {
    for (const field of row.querySelectorAll('select:not([aria-label]), textarea:not([aria-label])')) {
      field.setAttribute('aria-label', `${row.dataset.paramName} (${row.dataset.paramIn})`)
    }
  }
  // What Execute shows (the curl command, the answer) scrolls sideways on a phone: by keyboard too.
  for (const output of root.querySelectorAll(
    '.curl-command pre:not([tabindex]), .live-responses-table pre:not([tabindex])',
  )) {
    output.setAttribute('tabindex', '0')
  }
}

/** The operation an element is part of, as its summary shows it: `POST /pets`. */
function operationName(element) {
  const operation = element.closest('.opblock')
  const method = operation?.querySelector('.opblock-summary-method')?.textContent ?? ''
  const path = operation?.querySelector('.opblock-summary-path, .opblock-summary-path__deprecated')
  return `${method} ${(path?.textContent ?? '').replace(/\u200b/g, '')}`.trim()
}

;(async () => {
  const target = document.getElementById('reference')
  try {
    const response = await fetch(target.dataset.spec)
    if (!response.ok) throw new Error(`HTTP ${response.status}`)
    const spec = await response.json()
    const here = `${window.location.origin}/v1`
    const others = (spec.servers ?? []).filter((server) => server.url !== here)
    spec.servers = [{ url: here, description: 'This server' }, ...others]
    new MutationObserver(() => mend(document.body)).observe(document.body, { childList: true, subtree: true })
    window.SwaggerUIBundle({
      spec,
      domNode: target,
      deepLinking: true,
      tryItOutEnabled: false,
      displayRequestDuration: true,
      // Keys stay in this tab's memory, never in localStorage; no third-party validator badge.
      persistAuthorization: false,
      validatorUrl: null,
      // Agate, the default theme, writes numbers in a red of 3.4:1 on its grey; Obsidian passes 4.5:1 throughout.
      syntaxHighlight: { theme: 'obsidian' },
    })
  } catch (error) {
    target.textContent = `The reference could not be loaded (${error.message}). The OpenAPI document is at /v1/openapi.json.`
  }
})()
