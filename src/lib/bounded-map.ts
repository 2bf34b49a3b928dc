/**
 * A Map that forgets its oldest entries (in insertion order) beyond `max`: for caches and
 * per-client state that must not grow without bound, whatever clients send.
 */
export class BoundedMap<K, V> extends Map<K, V> {
  readonly max: number

  constructor(max: number) {
    super()
    this.max = max
  }

  override set(key: K, value: V): this {
    if (this.size >= this.max && !this.has(key)) this.delete(this.keys().next().value as K)
    return super.set(key, value)
  }
}
