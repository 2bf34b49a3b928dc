/**
 * The cursor pages of the newest-first lists (orders, messages, events): a cursor is signed with the
 * list's filter, so that it only continues the same query, and the next page is linked with
 * `Link: <…>; rel="next"` (decision 16), the filter and `limit` repeated.
 */
import type { FastifyReply, FastifyRequest } from 'fastify'
import type { CursorCodec } from '../domain/pagination.ts'
import { requestOrigin } from '../http/host.ts'

export function cursorPage(cursors: CursorCodec, filter: URLSearchParams, cursor: string | undefined) {
  const filterText = filter.size > 0 ? filter.toString() : undefined
  return {
    /** Where the page starts: before the item the cursor names (undefined: from the newest). */
    before: cursor === undefined ? undefined : cursors.decode(cursor, filterText),
    /** Links the page after `next` (the store's, null on the last page) at `path`. */
    linkNext(request: FastifyRequest, reply: FastifyReply, path: string, limit: number, next: number | null) {
      if (next === null) return
      const query = new URLSearchParams({ limit: String(limit), ...Object.fromEntries(filter) })
      query.set('cursor', cursors.encode(next, filterText))
      reply.header('link', `<${requestOrigin(request)}${path}?${query}>; rel="next"`)
    },
  }
}
