/**
 * Static files of the portal and the reference page, read once at start (they are few and small,
 * except Swagger UI's bundle) and served with an ETag, so browsers revalidate instead of
 * downloading them again.
 */
import { hash } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { extname } from 'node:path'
import type { FastifyInstance } from 'fastify'
import Type from 'typebox'

const TYPES: Record<string, string> = {
  '.css': 'text/css; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.svg': 'image/svg+xml',
}

interface Asset {
  body: Buffer
  type: string
  etag: string
}

/** A file of an npm package, e.g. packageFile('swagger-ui-dist/swagger-ui.css'). */
export const packageFile = (path: string) => createRequire(import.meta.url).resolve(path)

/** A file next to this module, in assets/. */
export const ownFile = (name: string) => new URL(`assets/${name}`, import.meta.url).pathname

/**
 * Serves `files` at GET <prefix>/assets/<name>: public name → path on disk, or several paths
 * served as one file, joined in order (so that rules both sites use are written once).
 */
export function serveAssets(app: FastifyInstance, files: Record<string, string | string[]>): void {
  const assets = new Map<string, Asset>()
  for (const [name, paths] of Object.entries(files)) {
    const body = Buffer.concat([paths].flat().map((path) => readFileSync(path)))
    assets.set(name, { body, type: TYPES[extname(name)] as string, etag: `"${hash('sha256', body, 'base64url')}"` })
  }
  app.get(
    '/assets/:name',
    { schema: { hide: true, params: Type.Object({ name: Type.String({ maxLength: 100 }) }) } },
    async (request, reply) => {
      const asset = assets.get((request.params as { name: string }).name)
      if (!asset) return reply.callNotFound()
      // A revalidation (If-None-Match) is answered 304 by src/plugins/preconditions.ts.
      reply.header('cache-control', 'no-cache').header('etag', asset.etag)
      return reply.type(asset.type).send(asset.body)
    },
  )
}
