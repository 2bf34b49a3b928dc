// Progressive enhancement only: every page works without this file.
// The "Copy to clipboard" button of a new key appears only when it can work.
for (const button of document.querySelectorAll('button[data-copy]')) {
  const field = document.getElementById(button.dataset.copy)
  const status = document.getElementById(button.dataset.status)
  button.hidden = false
  button.addEventListener('click', async () => {
    try {
      await navigator.clipboard.writeText(field.value)
      status.textContent = 'Copied to the clipboard.'
    } catch {
      field.select()
      status.textContent = 'Selected: press Ctrl+C (or ⌘C) to copy.'
    }
  })
}
