/**
 * @internal The embedded store's keys: a map from key to entry that knows the order keys were last
 * written in, and does what a cap needs at a cost that does not grow with the store: find the least
 * recently written key, and sweep expired keys a bounded number at a time.
 *
 * - The keys are split by a seeded hash into {@link SHARDS} Maps. V8 rebuilds a whole Map at once when it
 *   grows or when the slots of deleted keys fill it, and that one insert's pause grows with the Map
 *   (docs/performance.md, "Figures behind design choices"). The seed is random per store, so
 *   names chosen by a client cannot be aimed at one Map.
 * - The entries are linked in the order they were written, least recently first: a write moves its entry
 *   to the end of the list, and the least recently written key is its head. A key written again keeps its
 *   slot in its Map (moving it there, a delete and an insert per write, filled the Map with deleted slots
 *   for V8 to rebuild it: docs/performance.md, "Figures behind design choices").
 * - The sweep's iterator is kept between calls: a fresh Map iterator would step again over every slot
 *   deleted at the front, which V8 keeps until the Map is rebuilt.
 */
import { randomBytes } from "node:crypto"

/** @internal How many Maps the keys are split into. */
export const SHARDS = 64

/**
 * @internal What the store keeps per key: its expiry, and its place in the order of writes, which
 * {@link Keys.set} sets (an entry starts with `key: ""` and no neighbours).
 */
export interface Written {
  /** When the key expires, in ms; alive while `now <= expireAt`, as Redis has it. */
  expireAt: number | undefined
  key: string
  /** The entry written just before it, and just after (none: it is the least recently written, or the most). */
  older: Written | undefined
  newer: Written | undefined
}

/** @internal */
export class Keys<V extends Written> {
  private readonly maps: Array<Map<string, V>> = Array.from({ length: SHARDS }, () => new Map<string, V>())
  private readonly seed = randomBytes(4).readUInt32LE(0)
  private count = 0
  /** The ends of the list of writes. */
  private oldest: V | undefined
  private newest: V | undefined
  private sweepMap = SHARDS - 1
  private sweeping: Iterator<[string, V]> | undefined

  private map(key: string): Map<string, V> {
    // FNV-1a, from a random offset basis.
    let h = this.seed
    for (let i = 0; i < key.length; i++) h = Math.imul(h ^ key.charCodeAt(i), 16777619)
    return this.maps[(h >>> 0) % SHARDS]!
  }
  /** Takes `entry` out of the list of writes. */
  private unlink(entry: V): void {
    const { newer, older } = entry
    if (older === undefined) this.oldest = newer as V | undefined
    else older.newer = newer
    if (newer === undefined) this.newest = older as V | undefined
    else newer.older = older
  }

  get size(): number {
    return this.count
  }
  get(key: string): V | undefined {
    return this.map(key).get(key)
  }
  has(key: string): boolean {
    return this.map(key).has(key)
  }
  /** Writes `key`: it becomes the most recently written, wherever it was. */
  set(key: string, value: V): void {
    const map = this.map(key)
    const old = map.get(key)
    if (old === undefined) this.count++
    else this.unlink(old)
    value.key = key
    value.older = this.newest
    value.newer = undefined
    if (this.newest === undefined) this.oldest = value
    else this.newest.newer = value
    this.newest = value
    map.set(key, value)
  }
  delete(key: string): boolean {
    const map = this.map(key)
    const entry = map.get(key)
    if (entry === undefined) return false
    map.delete(key)
    this.unlink(entry)
    this.count--
    return true
  }
  clear(): void {
    for (const map of this.maps) map.clear()
    this.oldest = this.newest = undefined
    this.count = 0
  }
  /** Every key, least recently written first. */
  keys(): Array<string> {
    const keys: Array<string> = []
    for (let entry = this.oldest; entry !== undefined; entry = entry.newer as V | undefined) keys.push(entry.key)
    return keys
  }

  /** Deletes the least recently written key, if any. */
  evictOldest(): void {
    if (this.oldest !== undefined) this.delete(this.oldest.key)
  }

  /**
   * Steps the sweep's round over the next `budget` entries (going on to the next Map at the end of one,
   * for at most one whole round per call) and deletes those that expired before `nowMs`; returns how many
   * it stepped on: fewer than `budget` when it went all the way round.
   */
  sweep(budget: number, nowMs: number): number {
    let seen = 0
    let started = 0
    while (seen < budget) {
      const next = this.sweeping?.next()
      if (next === undefined || next.done === true) {
        if (started === SHARDS) break
        started++
        this.sweepMap = (this.sweepMap + 1) % SHARDS
        this.sweeping = this.maps[this.sweepMap]!.entries()
        continue
      }
      seen++
      const [key, value] = next.value
      if (value.expireAt !== undefined && nowMs > value.expireAt) this.delete(key)
    }
    return seen
  }
}
