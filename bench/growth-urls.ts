/**
 * The distinct URLs the growth bench cycles through, so that no request is answered from the
 * service's page cache (1000 serialized pages, first in first out, keyed by limit, status and
 * cursor): a URL comes round again only after thousands of other pages were stored.
 *
 * - Deep pages: cursors from walking the API (Link: <…>; rel="next"), limit=100 to get near the
 *   end quickly, then limit=1 over the last pets, so that there is a cursor after each of them;
 *   a cursor is not tied to its page size, so each also starts a page of 20.
 * - Rare status: the rare status has 50 pets at every size, far fewer distinct pages than
 *   the cache holds, so its cursors are minted with the service's own secret and codec
 *   (src/pagination.ts): byte for byte what the service issues for a page ending at that id, which
 *   is checked against the cursors of a real walk first.
 * - Page sizes 19, 20 and 21 in turn (mean 20): at 1k there are only 1000 pets, so at most about
 *   1000 distinct pages of 20 exist, no more than the cache holds; three page sizes triple that.
 *   Every start is chosen so that each page is full.
 */
import { RARE_STATUS, rareIds } from './growth-data.ts'
import { random } from './seed.ts'
import { cursorCodec } from './src.ts'

export const LIMITS = [19, 20, 21]
/** Starting ids per query (fewer where the data has fewer): with LIMITS, 6000 distinct URLs. */
export const STARTS = 2000

interface Api {
  baseUrl: string
  key: string
}

/** One page: its ids and the cursor of its `next` link (null on the last page). */
async function page(api: Api, path: string): Promise<{ ids: number[]; cursor: string | null }> {
  const response = await fetch(`${api.baseUrl}${path}`, { headers: { authorization: `Bearer ${api.key}` } })
  const body = await response.text()
  if (response.status !== 200) throw new Error(`GET ${path} answered ${response.status}: ${body}`)
  const next = /<([^>]+)>; rel="next"/.exec(response.headers.get('link') ?? '')?.[1]
  const ids = (JSON.parse(body) as { id: number }[]).map((p) => p.id)
  return { ids, cursor: next ? new URL(next).searchParams.get('cursor') : null }
}

function pagePath(limit: number, cursor: string, status?: string): string {
  const query = new URLSearchParams({ limit: String(limit), ...(status && { status }), cursor })
  return `/v1/pets?${query}`
}

/** Every URL of `cursors` at each page size, in a fixed shuffled order (no run walks the table in id order). */
function spread(cursors: string[], status?: string): string[] {
  const paths = cursors.flatMap((cursor) => LIMITS.map((limit) => pagePath(limit, cursor, status)))
  const next = random(11)
  for (let i = paths.length - 1; i > 0; i--) {
    const j = Math.floor(next() * (i + 1))
    ;[paths[i], paths[j]] = [paths[j] as string, paths[i] as string]
  }
  return paths
}

/**
 * Cursors after each of the last STARTS ids that still start a full page of the largest size,
 * walked; the walk is checked to return ids 1..count in order, and each cursor against the codec.
 */
export async function deepPaths(api: Api, count: number, secret: string): Promise<string[]> {
  const largest = Math.max(...LIMITS)
  const last = count - largest
  const first = Math.max(1, last - STARTS + 1)
  const codec = cursorCodec(secret)
  const cursors: string[] = []
  let afterId = 0
  let cursor: string | null = null
  while (afterId < last) {
    const limit = afterId + 100 < first ? 100 : 1
    const result = await page(api, cursor ? pagePath(limit, cursor) : `/v1/pets?limit=${limit}`)
    if (result.ids[0] !== afterId + 1 || result.ids.length !== limit || !result.cursor) {
      throw new Error(`the walk after id ${afterId} returned ids ${result.ids.slice(0, 3).join(', ')}…`)
    }
    afterId = result.ids.at(-1) as number
    cursor = result.cursor
    if (cursor !== codec.encode(afterId, undefined)) throw new Error(`the cursor after ${afterId} is not the codec's`)
    if (afterId >= first) cursors.push(cursor)
  }
  return spread(cursors)
}

/** Minted cursors of the rare status after STARTS ids spread over the range where every page is full. */
export async function rarePaths(api: Api, count: number, secret: string): Promise<string[]> {
  const codec = cursorCodec(secret)
  const rare = rareIds(count)
  // The walk of the rare status issues exactly the cursors the codec makes (when there is a next page).
  let cursor: string | null = null
  for (let i = 0; i < Math.min(3, rare.length - 1); i++) {
    const result: { ids: number[]; cursor: string | null } = await page(
      api,
      cursor ? pagePath(1, cursor, RARE_STATUS) : `/v1/pets?limit=1&status=${RARE_STATUS}`,
    )
    if (result.ids[0] !== rare[i]) throw new Error(`the rare walk returned id ${result.ids[0]}, not ${rare[i]}`)
    if (result.cursor !== codec.encode(rare[i] as number, RARE_STATUS))
      throw new Error('a rare cursor is not the codec’s')
    cursor = result.cursor
  }
  const largest = Math.max(...LIMITS)
  // RARE_COUNT rare pets: from a start before this one, every page size finds a full page.
  const end = rare[rare.length - largest] as number
  const starts = new Set<number>()
  const wanted = Math.min(STARTS, end - 1)
  for (let j = 0; j < wanted; j++) starts.add(1 + Math.floor((j * (end - 1)) / wanted))
  return spread(
    [...starts].map((id) => codec.encode(id, RARE_STATUS)),
    RARE_STATUS,
  )
}

/** Pets per page, averaged over the first URLs of a set (one of each page size). */
export async function petsPerPage(api: Api, paths: string[]): Promise<number> {
  const sample = paths.slice(0, 30)
  let pets = 0
  for (const path of sample) pets += (await page(api, path)).ids.length
  return pets / sample.length
}
