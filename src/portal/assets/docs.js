// The API reference: Swagger UI on the document the API serves, with this server listed first, so
// that "Try it out" sends requests here (the document itself names the public deployments).
;(async () => {
  const target = document.getElementById('reference')
  try {
    const response = await fetch(target.dataset.spec)
    if (!response.ok) throw new Error(`HTTP ${response.status}`)
    const spec = await response.json()
    const here = `${window.location.origin}/v1`
    const others = (spec.servers ?? []).filter((server) => server.url !== here)
    spec.servers = [{ url: here, description: 'This server' }, ...others]
    window.SwaggerUIBundle({
      spec,
      domNode: target,
      deepLinking: true,
      tryItOutEnabled: true,
      displayRequestDuration: true,
      // Keys stay in this tab's memory, never in localStorage; no third-party validator badge.
      persistAuthorization: false,
      validatorUrl: null,
    })
  } catch (error) {
    target.textContent = `The reference could not be loaded (${error.message}). The OpenAPI document is at /v1/openapi.json.`
  }
})()
