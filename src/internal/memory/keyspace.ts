/**
 * @internal The embedded backend's keyspace: Redis's commands with Redis's rules (types and WRONGTYPE,
 * empty lists and sorted sets removed, TTLs in ms, a key alive until `now > expireAt`), at one time per
 * call. A script's twin calls it as the Lua calls `redis.call`, line for line (`Script.Keyspace`).
 */
import type * as Script from "../../Script.js"
import { ReplyError } from "../script.js"
import { Keys, type Written } from "./keys.js"

const WRONGTYPE = "WRONGTYPE Operation against a key holding the wrong kind of value"
const NOT_INTEGER = "ERR value is not an integer or out of range"

type Data = string | Array<string> | Map<string, number>

interface Entry extends Written {
  data: Data
}

/** @internal An integer argument, as Redis parses it. */
export const integer = (s: string | number): number => {
  const n = typeof s === "number" ? s : /^-?\d+$/.test(s) ? Number(s) : Number.NaN
  if (!Number.isSafeInteger(n)) throw new ReplyError(NOT_INTEGER)
  return n
}

const index = (i: number, length: number) => (i < 0 ? length + i : i)

/** @internal How many keys a new key at the cap lets the sweep look at before the oldest is evicted. */
export const SWEEP_AT_CAP = 16

/**
 * @internal The keyspace, at the time of the current call (`now`, in µs, and `nowMs`). Methods are
 * Redis commands; a missing or expired key reads as absent. A key is written (created, or SET) in
 * `entries`, which knows the order of writes (memory/keys.ts); other changes leave its place.
 */
export class Db implements Script.Keyspace {
  readonly entries = new Keys<Entry>()
  /**
   * At most this many keys. A new key at the cap lets the sweep look at the next {@link SWEEP_AT_CAP}
   * keys of its round (removing the expired ones), then evicts the least recently written keys until
   * there is room: the same cost whatever the store's size.
   */
  maxKeys = Infinity
  /** Lists that a blocked BLMOVE waits on, and who to wake when they get elements. */
  readonly waiters = new Map<string, Set<() => void>>()
  now = 0
  nowMs = 0

  at(nanos: bigint) {
    this.now = Number(nanos / 1000n)
    this.nowMs = Math.floor(this.now / 1000)
  }

  private live(key: string): Entry | undefined {
    const entry = this.entries.get(key)
    if (entry === undefined) return undefined
    if (entry.expireAt !== undefined && this.nowMs > entry.expireAt) {
      this.entries.delete(key)
      return undefined
    }
    return entry
  }
  private string(key: string): string | undefined {
    const entry = this.live(key)
    if (entry === undefined) return undefined
    if (typeof entry.data !== "string") throw new ReplyError(WRONGTYPE)
    return entry.data
  }
  private list(key: string): Array<string> | undefined {
    const entry = this.live(key)
    if (entry === undefined) return undefined
    if (!Array.isArray(entry.data)) throw new ReplyError(WRONGTYPE)
    return entry.data
  }
  private zset(key: string): Map<string, number> | undefined {
    const entry = this.live(key)
    if (entry === undefined) return undefined
    if (!(entry.data instanceof Map)) throw new ReplyError(WRONGTYPE)
    return entry.data
  }
  /** Stores a new key, within the cap. */
  private create(key: string, data: Data, expireAt: number | undefined) {
    if (this.entries.size >= this.maxKeys && !this.entries.has(key)) {
      this.sweep(SWEEP_AT_CAP)
      while (this.entries.size >= this.maxKeys) this.entries.evictOldest()
    }
    this.entries.set(key, { data, expireAt, key: "", older: undefined, newer: undefined })
  }
  /** Removes an emptied list or sorted set, as Redis does. */
  private tidy(key: string, data: Array<string> | Map<string, number>) {
    if ((Array.isArray(data) ? data.length : data.size) === 0) this.entries.delete(key)
  }
  private wake(key: string) {
    const waiting = this.waiters.get(key)
    if (waiting === undefined) return
    this.waiters.delete(key)
    for (const wake of waiting) wake()
  }

  /**
   * Looks at the next `budget` keys of the sweep's round over the store and removes the expired ones;
   * returns how many it looked at: fewer than `budget` when it went all the way round.
   */
  sweep(budget: number): number {
    return this.entries.sweep(budget, this.nowMs)
  }

  // Keys

  exists(...keys: ReadonlyArray<string>): number {
    return keys.filter((key) => this.live(key) !== undefined).length
  }
  del(...keys: ReadonlyArray<string>): number {
    return keys.filter((key) => this.live(key) !== undefined && this.entries.delete(key)).length
  }
  type(key: string): string {
    const entry = this.live(key)
    return entry === undefined
      ? "none"
      : typeof entry.data === "string"
      ? "string"
      : Array.isArray(entry.data)
      ? "list"
      : "zset"
  }
  /** PEXPIRE, with GT: only a later expiry (no expiry counts as infinite). A TTL ≤ 0 deletes the key. */
  pexpire(key: string, ms: number | string, gt = false): number {
    const entry = this.live(key)
    const ttl = integer(ms)
    if (entry === undefined) return 0
    const expireAt = this.nowMs + ttl
    if (gt && (entry.expireAt === undefined || expireAt <= entry.expireAt)) return 0
    if (ttl <= 0) this.entries.delete(key)
    else entry.expireAt = expireAt
    return 1
  }
  pttl(key: string): number {
    const entry = this.live(key)
    if (entry === undefined) return -2
    return entry.expireAt === undefined ? -1 : Math.max(0, entry.expireAt - this.nowMs)
  }

  // Strings

  get(key: string): string | null {
    return this.string(key) ?? null
  }
  /** SET, with PX and NX as the library uses them; "OK", or null when NX finds the key. */
  set(key: string, value: string, options?: { readonly px?: number | string; readonly nx?: boolean }): "OK" | null {
    const px = options?.px === undefined ? undefined : integer(options.px)
    if (px !== undefined && px <= 0) throw new ReplyError("ERR invalid expire time in 'set' command")
    if (options?.nx === true && this.live(key) !== undefined) return null
    this.create(key, value, px === undefined ? undefined : this.nowMs + px)
    return "OK"
  }

  // Lists

  rpush(key: string, ...values: ReadonlyArray<string>): number {
    const list = this.list(key)
    if (list === undefined) this.create(key, [...values], undefined)
    else list.push(...values)
    this.wake(key)
    return (list?.length ?? values.length)
  }
  lpush(key: string, ...values: ReadonlyArray<string>): number {
    let list = this.list(key)
    if (list === undefined) this.create(key, list = [], undefined)
    for (const value of values) list.unshift(value)
    this.wake(key)
    return list.length
  }
  /** LPOP with a count: the popped elements, or null when the list does not exist. */
  lpop(key: string, count: number | string): Array<string> | null {
    const list = this.list(key)
    const n = integer(count)
    if (n < 0) throw new ReplyError("ERR value is out of range, must be positive")
    if (list === undefined) return null
    const popped = list.splice(0, n)
    this.tidy(key, list)
    return popped
  }
  llen(key: string): number {
    return this.list(key)?.length ?? 0
  }
  lindex(key: string, i: number): string | null {
    const list = this.list(key)
    return list?.[index(i, list.length)] ?? null
  }
  lrange(key: string, start: number, stop: number): Array<string> {
    const list = this.list(key) ?? []
    const from = Math.max(0, index(start, list.length))
    const to = Math.min(list.length - 1, index(stop, list.length))
    return from > to ? [] : list.slice(from, to + 1)
  }
  lset(key: string, i: number, value: string): "OK" {
    const list = this.list(key)
    if (list === undefined) throw new ReplyError("ERR no such key")
    const at = index(i, list.length)
    if (at < 0 || at >= list.length) throw new ReplyError("ERR index out of range")
    list[at] = value
    return "OK"
  }
  ltrim(key: string, start: number, stop: number): "OK" {
    const list = this.list(key)
    if (list === undefined) return "OK"
    const kept = this.lrange(key, start, stop)
    list.splice(0, list.length, ...kept)
    this.tidy(key, list)
    return "OK"
  }
  /** LMOVE source destination LEFT|RIGHT LEFT|RIGHT: the element moved, or null. */
  lmove(source: string, destination: string, from: "LEFT" | "RIGHT", to: "LEFT" | "RIGHT"): string | null {
    const list = this.list(source)
    this.list(destination)
    if (list === undefined) return null
    const element = from === "LEFT" ? list.shift()! : list.pop()!
    // The same list: a rotation, which keeps the key (and its TTL) even with one element.
    if (source === destination) {
      if (to === "LEFT") list.unshift(element)
      else list.push(element)
      return element
    }
    this.tidy(source, list)
    if (to === "LEFT") this.lpush(destination, element)
    else this.rpush(destination, element)
    return element
  }

  // Sorted sets

  /** ZADD [XX] score member: how many members were added. */
  zadd(key: string, score: number, member: string, xx = false): number {
    let zset = this.zset(key)
    if (zset === undefined) {
      if (xx) return 0
      this.create(key, zset = new Map(), undefined)
    }
    if (xx && !zset.has(member)) return 0
    const added = zset.has(member) ? 0 : 1
    zset.set(member, score)
    return added
  }
  zrem(key: string, member: string): number {
    const zset = this.zset(key)
    if (zset === undefined || !zset.delete(member)) return 0
    this.tidy(key, zset)
    return 1
  }
  /** ZREMRANGEBYSCORE key -inf max: members scored at most `max`. */
  zremrangebyscore(key: string, max: number): number {
    const zset = this.zset(key)
    if (zset === undefined) return 0
    let removed = 0
    for (const [member, score] of zset) {
      if (score <= max) {
        zset.delete(member)
        removed++
      }
    }
    this.tidy(key, zset)
    return removed
  }
  zcard(key: string): number {
    return this.zset(key)?.size ?? 0
  }
  zscore(key: string, member: string): string | null {
    const score = this.zset(key)?.get(member)
    return score === undefined ? null : formatScore(score)
  }
  /** ZRANGE key start stop WITHSCORES, as a flat [member, score, …], ordered by score then member. */
  zrangeWithScores(key: string, start: number, stop: number): Array<string> {
    const zset = this.zset(key)
    if (zset === undefined) return []
    const sorted = [...zset].sort(([a, x], [b, y]) => (x - y) || (a < b ? -1 : a > b ? 1 : 0))
    const from = Math.max(0, index(start, sorted.length))
    const to = Math.min(sorted.length - 1, index(stop, sorted.length))
    return from > to ? [] : sorted.slice(from, to + 1).flatMap(([member, score]) => [member, formatScore(score)])
  }

  /** The keys matching a glob pattern (`*`, `?`, `[…]`, `\`). */
  keys(pattern: string): Array<string> {
    const re = globToRegExp(pattern)
    return this.entries.keys().filter((key) => this.live(key) !== undefined && re.test(key))
  }
}

/** A score as Redis replies with it: integers in decimal, other doubles with 17 significant digits. */
const formatScore = (score: number): string =>
  Number.isInteger(score) && Math.abs(score) < 1e17 ? String(score) : String(Number(score.toPrecision(17)))

const globToRegExp = (pattern: string): RegExp => {
  let re = "^"
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i]!
    if (c === "*") re += "[\\s\\S]*"
    else if (c === "?") re += "[\\s\\S]"
    else if (c === "\\" && i + 1 < pattern.length) re += escape(pattern[++i]!)
    else if (c === "[") {
      const end = pattern.indexOf("]", i + 1)
      if (end < 0) re += escape(c)
      else {
        const body = pattern.slice(i + 1, end)
        re += `[${
          body.startsWith("^") ? "^" + body.slice(1).replace(/[\\\]]/g, "\\$&") : body.replace(/[\\\]]/g, "\\$&")
        }]`
        i = end
      }
    } else re += escape(c)
  }
  return new RegExp(re + "$", "u")
}
const escape = (c: string) => c.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&")
