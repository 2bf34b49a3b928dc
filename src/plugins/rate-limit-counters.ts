/**
 * Fixed-window counters for rate limits, in memory (one instance) or in Redis (shared by every
 * instance). A window starts at a key's first hit and lasts `windowMs`; the count resets after it.
 *
 * Redis failing open: when Redis does not answer within its timeout the hit is allowed (and the
 * failure logged), so an outage of the limiter never becomes an outage of the API.
 */
export interface Hit {
  /** Hits in the current window, this one included. */
  count: number
  /** Milliseconds until the window ends. */
  resetMs: number
}

export interface Counter {
  /** Counts a hit; the memory counter answers at once, Redis with a promise. */
  hit(key: string, windowMs: number): Hit | Promise<Hit>
  close(): Promise<void>
}

/** Most keys tracked at once in memory; expired windows are swept first, then the oldest dropped. */
const MEMORY_KEYS = 100_000

export function memoryCounter(): Counter {
  const windows = new Map<string, { count: number; endsAt: number }>()
  return {
    hit(key, windowMs) {
      const now = Date.now()
      let window = windows.get(key)
      if (!window || window.endsAt <= now) {
        if (windows.size >= MEMORY_KEYS) sweep(windows, now)
        window = { count: 0, endsAt: now + windowMs }
        windows.set(key, window)
      }
      window.count++
      return { count: window.count, resetMs: window.endsAt - now }
    },
    async close() {},
  }
}

function sweep(windows: Map<string, { endsAt: number }>, now: number): void {
  for (const [key, window] of windows) if (window.endsAt <= now) windows.delete(key)
  for (const key of windows.keys()) {
    if (windows.size < MEMORY_KEYS) break
    windows.delete(key)
  }
}

// INCR and set the expiry on the first hit, atomically; returns the count and the time left.
const HIT_SCRIPT = `
local count = redis.call('INCR', KEYS[1])
if count == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
return {count, redis.call('PTTL', KEYS[1])}`

export async function redisCounter(
  url: string,
  timeoutMs: number,
  onError: (error: unknown) => void,
): Promise<Counter> {
  const { Redis } = await import('ioredis').catch(() => {
    throw new Error("REDIS_URL is set, which needs the optional dependency 'ioredis': npm install ioredis")
  })
  const redis = new Redis(url, {
    commandTimeout: timeoutMs,
    connectTimeout: timeoutMs,
    // Fail fast instead of queueing commands while disconnected; reconnect in the background.
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
  })
  redis.on('error', onError)
  return {
    async hit(key, windowMs) {
      try {
        const [count, ttl] = (await redis.eval(HIT_SCRIPT, 1, `animal-store:rate:${key}`, windowMs)) as [number, number]
        return { count, resetMs: ttl > 0 ? ttl : windowMs }
      } catch (error) {
        onError(error)
        return { count: 0, resetMs: windowMs } // fail open
      }
    },
    async close() {
      redis.disconnect()
    },
  }
}

/**
 * The client a per-address limit counts: an IPv4 address itself; an IPv6 address its /64, since one
 * host usually holds a whole /64 and could otherwise take a new address for every attempt.
 */
export function clientNetwork(address: string): string {
  if (!address.includes(':')) return address
  const ip = address.replace(/%.*$/, '').toLowerCase() // no zone (fe80::1%eth0)
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/.exec(ip)
  if (mapped) return mapped[1] as string
  // Groups of the address written out (an IPv4 tail counts as two), "::" filled with zeros.
  const groups = (part: string) => (part ? part.split(':').flatMap((g) => (g.includes('.') ? ['0', '0'] : [g])) : [])
  const [head = '', tail] = ip.split('::')
  const written = groups(head)
  const rest = tail === undefined ? [] : groups(tail)
  const all = [...written, ...Array(Math.max(0, 8 - written.length - rest.length)).fill('0'), ...rest]
  return `${all
    .slice(0, 4)
    .map((g) => (Number.parseInt(g, 16) || 0).toString(16))
    .join(':')}::/64`
}
