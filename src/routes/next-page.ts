/**
 * The cursor pages of the newest-first lists (orders, messages, events): a cursor is signed with the
 * list's filter, so that it only continues the same query, and the next page is linked with
 * `Link: <…>; rel="next"` (decision 16), the filter and `limit` repeated.
 */
import type { FastifyReply, FastifyRequest } from 'fastify'
import type { TSchema } from 'typebox'
import type { CursorCodec } from '../domain/pagination.ts'
import { requestOrigin } from '../http/host.ts'
import { jsonResponse, pageHeaders } from '../schemas/common.ts'

/** The documented 200 of such a list of the account's `items` at `path` (under /v1). */
export function pageResponse<T extends TSchema>(items: string, schema: T, path: string) {
  return jsonResponse(`A page of the account's ${items}, newest first.`, schema, pageHeaders(path, items))
}

export function cursorPage(cursors: CursorCodec, filter: URLSearchParams, cursor: string | undefined) {
  const filterText = filter.size > 0 ? filter.toString() : undefined
  return {
    /** Where the page starts: before the item the cursor names (undefined: from the newest). */
    before: cursor === undefined ? undefined : cursors.decode(cursor, filterText),
    /**
     * The page's `items`, to answer with, once the page after them (`next`: the store's, null on the
     * last page) is linked at `path`.
     */
    linkNext<T>(
      request: FastifyRequest,
      reply: FastifyReply,
      path: string,
      limit: number,
      next: number | null,
      items: T,
    ) {
      if (next === null) return items
      const query = new URLSearchParams({ limit: String(limit), ...Object.fromEntries(filter) })
      query.set('cursor', cursors.encode(next, filterText))
      reply.header('link', `<${requestOrigin(request)}${path}?${query}>; rel="next"`)
      return items
    },
  }
}
