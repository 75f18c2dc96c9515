/**
 * @internal The embedded store's keys: a map from key to entry that knows the order keys were last
 * written in, and does what a cap needs at a cost that does not grow with the store: find the least
 * recently written key, and sweep expired keys a bounded number at a time.
 *
 * - The keys are split by a seeded hash into {@link SHARDS} Maps. V8 rebuilds a whole Map at once when it
 *   grows or when the slots of deleted keys fill it, and that one insert's pause grows with the Map
 *   (docs/performance.md, "Figures behind design choices"). The seed is random per store, so
 *   names chosen by a client cannot be aimed at one Map.
 * - Each write numbers its entry (`seq`); each Map keeps its keys in write order, so the least recently
 *   written key is the head of one of them: the one with the lowest `seq`.
 * - Iterators are kept between calls, one per Map for eviction and one for the sweep's round: a fresh
 *   Map iterator would step again over every slot deleted at the front, which V8 keeps until the Map is
 *   rebuilt.
 */
import { randomBytes } from "node:crypto"

/** @internal How many Maps the keys are split into. */
export const SHARDS = 64

/** @internal What the store keeps per key: its expiry, and the number of the write that made it. */
export interface Written {
  /** When the key expires, in ms; alive while `now <= expireAt`, as Redis has it. */
  expireAt: number | undefined
  /** Set by {@link Keys.set}. */
  seq: number
}

/** @internal */
export class Keys<V extends Written> {
  private readonly maps: Array<Map<string, V>> = Array.from({ length: SHARDS }, () => new Map<string, V>())
  private readonly seed = randomBytes(4).readUInt32LE(0)
  private count = 0
  private written = 0
  /** Per Map: its eviction iterator, and the entry it stands at (maybe deleted or rewritten since). */
  private readonly evicting: Array<Iterator<[string, V]> | undefined> = Array.from({ length: SHARDS })
  private readonly heads: Array<[string, V] | undefined> = Array.from({ length: SHARDS })
  private sweepMap = SHARDS - 1
  private sweeping: Iterator<[string, V]> | undefined
  /** How many entries the sweep and the eviction have stepped on: their work, for tests and benchmarks. */
  visited = 0

  private map(key: string): Map<string, V> {
    // FNV-1a, from a random offset basis.
    let h = this.seed
    for (let i = 0; i < key.length; i++) h = Math.imul(h ^ key.charCodeAt(i), 16777619)
    return this.maps[(h >>> 0) % SHARDS]!
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
    if (!map.delete(key)) this.count++
    value.seq = this.written++
    map.set(key, value)
  }
  delete(key: string): boolean {
    const deleted = this.map(key).delete(key)
    if (deleted) this.count--
    return deleted
  }
  clear(): void {
    for (const map of this.maps) map.clear()
    this.count = 0
  }
  /** Every key, least recently written first. */
  keys(): Array<string> {
    return this.maps.flatMap((map) => [...map]).sort(([, a], [, b]) => a.seq - b.seq).map(([key]) => key)
  }

  /** Deletes the least recently written key, if any. */
  evictOldest(): void {
    while (true) {
      let oldest: number | undefined
      for (let i = 0; i < SHARDS; i++) {
        const head = this.heads[i] ?? (this.maps[i]!.size === 0 ? undefined : this.advance(i))
        if (head !== undefined && (oldest === undefined || head[1].seq < this.heads[oldest]![1].seq)) oldest = i
      }
      if (oldest === undefined) return
      const [key, value] = this.heads[oldest]!
      this.heads[oldest] = undefined
      // A head deleted or written again since is passed over; a Map's later keys were all written later.
      if (this.maps[oldest]!.get(key) === value) {
        this.delete(key)
        return
      }
    }
  }
  private advance(i: number): [string, V] | undefined {
    let next = this.evicting[i]?.next()
    if (next === undefined || next.done === true) next = (this.evicting[i] = this.maps[i]!.entries()).next()
    if (next.done === true) return undefined
    this.visited++
    return (this.heads[i] = next.value)
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
    this.visited += seen
    return seen
  }
}
