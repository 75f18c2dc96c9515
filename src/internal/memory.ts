/**
 * @internal The memory backend: the `Redis` service over a store in this process.
 *
 * - `Db` is the keyspace as a script sees it: Redis's commands, with Redis's rules (types, WRONGTYPE,
 *   empty lists and sorted sets removed, TTLs in ms, a key alive until `now > expireAt`), at one time
 *   per call. A script's twin calls it as the Lua calls `redis.call`, line for line.
 * - Time is Effect's `Clock`, read once per call: `TIME` and expiry both use it.
 * - Each call runs synchronously, so nothing interleaves with it: a twin is as atomic as its script.
 * - BLMOVE waits on Effect primitives: the move itself happens only in a synchronous step of the
 *   waiting fiber, so an interrupted wait has moved nothing.
 */
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import type * as Scope from "effect/Scope"
import * as Capability from "../Capability.js"
import * as Redis from "../Redis.js"

/** @internal */
export const StoreTypeId: unique symbol = Symbol.for("wakuwaku/MemoryStore")

/** @internal A reply, as ioredis would hand it over: integers, strings, nil, arrays, and errors inside arrays. */
export type Reply = null | number | string | Error | ReadonlyArray<Reply>

/** @internal A script's twin: the same KEYS and ARGV (0-based here), the same reply. Throws a ReplyError to fail. */
export type Twin = (db: Db, keys: ReadonlyArray<string>, argv: ReadonlyArray<string>) => Reply

/** @internal An error reply, with Redis's own message. */
export class ReplyError extends Error {}

const WRONGTYPE = "WRONGTYPE Operation against a key holding the wrong kind of value"
const NOT_INTEGER = "ERR value is not an integer or out of range"

type Data = string | Array<string> | Map<string, number>

interface Entry {
  data: Data
  /** When the key expires, in ms; alive while `now <= expireAt`, as Redis has it. */
  expireAt: number | undefined
}

const integer = (s: string | number): number => {
  const n = typeof s === "number" ? s : /^-?\d+$/.test(s) ? Number(s) : Number.NaN
  if (!Number.isSafeInteger(n)) throw new ReplyError(NOT_INTEGER)
  return n
}

const index = (i: number, length: number) => (i < 0 ? length + i : i)

/**
 * @internal The keyspace, at the time of the current call (`now`, in µs, and `nowMs`). Methods are
 * Redis commands; a missing or expired key reads as absent.
 */
export class Db {
  readonly entries = new Map<string, Entry>()
  /** At most this many keys: past it, expired keys are swept, then the oldest evicted. */
  maxKeys = Infinity
  private cappedAt = Number.NaN
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
    this.entries.delete(key)
    if (this.entries.size >= this.maxKeys) {
      // A full sweep at most once a millisecond: a flood of new keys pays for it once.
      if (this.cappedAt !== this.nowMs) {
        this.cappedAt = this.nowMs
        this.sweep()
      }
      for (const oldest of this.entries.keys()) {
        if (this.entries.size < this.maxKeys) break
        this.entries.delete(oldest)
      }
    }
    this.entries.set(key, { data, expireAt })
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

  /** Removes every expired key; returns how many. */
  sweep(): number {
    let removed = 0
    for (const [key, entry] of this.entries) {
      if (entry.expireAt !== undefined && this.nowMs > entry.expireAt) {
        this.entries.delete(key)
        removed++
      }
    }
    return removed
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
    return entry === undefined ? "none" : typeof entry.data === "string" ? "string" : Array.isArray(entry.data) ? "list" : "zset"
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
    return [...this.entries.keys()].filter((key) => this.live(key) !== undefined && re.test(key))
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
        re += `[${body.startsWith("^") ? "^" + body.slice(1).replace(/[\\\]]/g, "\\$&") : body.replace(/[\\\]]/g, "\\$&")}]`
        i = end
      }
    } else re += escape(c)
  }
  return new RegExp(re + "$", "u")
}
const escape = (c: string) => c.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&")

// ---------------------------------------------------------------------------------------------------
// Twins

const twins = new WeakMap<Redis.Script, Twin>()

/** @internal Gives `script` its TypeScript twin; returns the script. */
export const twin = (script: Redis.Script, run: Twin): Redis.Script => {
  twins.set(script, run)
  return script
}

/** @internal The twin of a script, if it has one. */
export const twinOf = (script: Redis.Script): Twin | undefined => twins.get(script)

/**
 * @internal The twin of a `many` variant (lua.ts MANY): `run` once per call laid end to end, each
 * protected, an error reply in place of a call that failed.
 */
export const many = (run: Twin, keys: number, args: number): Twin => (db, allKeys, allArgs) => {
  const replies: Array<Reply> = []
  for (let i = 0; i < allKeys.length / keys; i++) {
    try {
      replies.push(run(db, allKeys.slice(i * keys, (i + 1) * keys), allArgs.slice(i * args, (i + 1) * args)))
    } catch (cause) {
      replies.push(cause instanceof Error ? cause : new ReplyError(String(cause)))
    }
  }
  return replies
}

// ---------------------------------------------------------------------------------------------------
// The store and the service

class StoreImpl implements Redis.MemoryStore {
  readonly [StoreTypeId]: typeof StoreTypeId = StoreTypeId
  readonly db = new Db()
  /** Open dedicated connections by id: whether each is closed, and how to wake its blocked BLMOVE. */
  readonly connections = new Map<number, Connection>()
  nextId = 1
  get size() {
    return this.db.entries.size
  }
}

/** @internal */
export const makeStore = (maxKeys?: number): Redis.MemoryStore => {
  const store = new StoreImpl()
  store.db.maxKeys = validMaxKeys(maxKeys)
  return store
}

const validMaxKeys = (maxKeys: number | undefined): number => {
  if (maxKeys === undefined) return Infinity
  if (!Number.isSafeInteger(maxKeys) || maxKeys < 1) {
    throw new RangeError(`wakuwaku: memory store maxKeys must be a positive safe integer, got ${String(maxKeys)}`)
  }
  return maxKeys
}

const failure = (reason: Redis.RedisErrorReason, operation: string, message: string) =>
  new Redis.RedisError({ reason, operation, cause: new ReplyError(message) })

const closedError = (operation: string) => failure("Connection", operation, "Connection is closed.")

const upper = (s: string | number) => String(s).toUpperCase()

/** Runs one plain command at the current time of `db`. Throws ReplyError for an error reply. */
const runCommand = (store: StoreImpl, name: string, args: ReadonlyArray<string | number>): Reply => {
  const db = store.db
  const s = args.map(String)
  const arity = (min: number, max = min) => {
    if (s.length < min || s.length > max) {
      throw new ReplyError(`ERR wrong number of arguments for '${name.toLowerCase()}' command`)
    }
  }
  switch (upper(name)) {
    case "GET":
      arity(1)
      return db.get(s[0]!)
    case "SET": {
      if (s.length < 2) arity(2)
      let px: number | undefined
      let nx = false
      for (let i = 2; i < s.length; i++) {
        const option = upper(s[i]!)
        if (option === "NX") nx = true
        else if (option === "PX" && i + 1 < s.length) px = integer(s[++i]!)
        else if (option === "EX" && i + 1 < s.length) px = integer(s[++i]!) * 1000
        else throw new ReplyError("ERR syntax error")
      }
      return db.set(s[0]!, s[1]!, { ...(px === undefined ? {} : { px }), nx })
    }
    case "DEL":
      arity(1, Infinity)
      return db.del(...s)
    case "EXISTS":
      arity(1, Infinity)
      return db.exists(...s)
    case "TYPE":
      arity(1)
      return db.type(s[0]!)
    case "PTTL":
      arity(1)
      return db.pttl(s[0]!)
    case "PEXPIRE":
      arity(2, 3)
      if (s[2] !== undefined && upper(s[2]) !== "GT") throw new ReplyError("ERR Unsupported option " + s[2])
      return db.pexpire(s[0]!, s[1]!, s[2] !== undefined)
    case "RPUSH":
      arity(2, Infinity)
      return db.rpush(s[0]!, ...s.slice(1))
    case "LPUSH":
      arity(2, Infinity)
      return db.lpush(s[0]!, ...s.slice(1))
    case "LPOP": {
      arity(1, 2)
      if (s[1] !== undefined) return db.lpop(s[0]!, s[1])
      return db.lpop(s[0]!, 1)?.[0] ?? null
    }
    case "LLEN":
      arity(1)
      return db.llen(s[0]!)
    case "LINDEX":
      arity(2)
      return db.lindex(s[0]!, integer(s[1]!))
    case "LRANGE":
      arity(3)
      return db.lrange(s[0]!, integer(s[1]!), integer(s[2]!))
    case "LMOVE":
      arity(4)
      return db.lmove(s[0]!, s[1]!, side(s[2]!), side(s[3]!))
    case "ZADD":
      arity(3)
      return db.zadd(s[0]!, Number(s[1]!), s[2]!)
    case "ZCARD":
      arity(1)
      return db.zcard(s[0]!)
    case "ZSCORE":
      arity(2)
      return db.zscore(s[0]!, s[1]!)
    case "ZRANGE":
      arity(3, 4)
      if (s[3] === undefined) {
        return db.zrangeWithScores(s[0]!, integer(s[1]!), integer(s[2]!)).filter((_, i) => i % 2 === 0)
      }
      if (upper(s[3]) !== "WITHSCORES") throw new ReplyError("ERR syntax error")
      return db.zrangeWithScores(s[0]!, integer(s[1]!), integer(s[2]!))
    case "DBSIZE":
      arity(0)
      return db.entries.size
    case "KEYS":
      arity(1)
      return db.keys(s[0]!)
    case "SCAN": {
      // One pass: every match, and cursor 0.
      let pattern = "*"
      for (let i = 1; i < s.length; i += 2) if (upper(s[i]!) === "MATCH") pattern = s[i + 1] ?? "*"
      return ["0", db.keys(pattern)]
    }
    case "FLUSHALL":
    case "FLUSHDB":
      db.entries.clear()
      return "OK"
    case "TIME":
      arity(0)
      return [String(Math.floor(db.now / 1e6)), String(db.now % 1e6)]
    case "PING":
      return "PONG"
    case "CLIENT": {
      // CLIENT KILL ID <id>: ends that dedicated connection (a blocked BLMOVE fails at once).
      if (upper(s[0] ?? "") === "KILL" && upper(s[1] ?? "") === "ID" && s.length === 3) {
        const id = integer(s[2]!)
        const connection = store.connections.get(id)
        if (connection === undefined) return 0
        close(store, id, connection)
        return 1
      }
      throw new ReplyError(`ERR unknown subcommand '${s[0] ?? ""}' (the memory backend knows CLIENT KILL ID)`)
    }
    default:
      throw new ReplyError(
        `ERR unknown command '${name}' (the memory backend implements the commands the library uses)`
      )
  }
}

const side = (s: string): "LEFT" | "RIGHT" => {
  const u = upper(s)
  if (u !== "LEFT" && u !== "RIGHT") throw new ReplyError("ERR syntax error")
  return u
}

/** Runs `f` at the current time of the fiber's Clock, synchronously. */
const atNow = <A>(store: StoreImpl, operation: string, reason: Redis.RedisErrorReason, f: () => A) =>
  Effect.flatMap(Clock.currentTimeNanos, (nanos) => {
    store.db.at(nanos)
    try {
      return Effect.succeed(f())
    } catch (cause) {
      return Effect.fail(new Redis.RedisError({ reason, operation, cause }))
    }
  })

/** The dedicated connection's BLMOVE: moves at once if it can, else waits for a push, the timeout or a kill. */
const blmove = (connection: Connection, store: StoreImpl, args: ReadonlyArray<string | number>) =>
  Effect.gen(function*() {
    const s = args.map(String)
    if (s.length !== 5) return yield* Effect.fail(failure("Server", "BLMOVE", "ERR wrong number of arguments for 'blmove' command"))
    const [source, destination] = [s[0]!, s[1]!]
    const seconds = Number(s[4])
    if (!(seconds >= 0)) return yield* Effect.fail(failure("Server", "BLMOVE", "ERR timeout is not a float or out of range"))
    const started = yield* Clock.currentTimeMillis
    while (true) {
      if (connection.closed) return yield* Effect.fail(closedError("BLMOVE"))
      const moved = yield* atNow(store, "BLMOVE", "Server", () =>
        store.db.lmove(source, destination, side(s[2]!), side(s[3]!)))
      if (moved !== null) return moved
      const left = seconds === 0 ? Infinity : started + seconds * 1000 - (yield* Clock.currentTimeMillis)
      if (left <= 0) return null
      // Woken by a push on the source or a kill; nothing moves while waiting, so interrupting it loses nothing.
      const woken = Effect.async<void>((resume) => {
        const wake = () => resume(Effect.void)
        let waiting = store.db.waiters.get(source)
        if (waiting === undefined) store.db.waiters.set(source, waiting = new Set())
        waiting.add(wake)
        connection.wake = wake
        // A push or a kill between the attempt above and this registration would find no waiter: look again.
        if (connection.closed || store.db.entries.has(source)) wake()
        return Effect.sync(() => {
          store.db.waiters.get(source)?.delete(wake)
          if (connection.wake === wake) connection.wake = undefined
        })
      })
      yield* left === Infinity ? woken : Effect.timeoutOption(woken, Duration.millis(left))
    }
  })

const dedicated = (store: StoreImpl): Effect.Effect<Redis.Dedicated, never, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.sync(() => {
      const id = store.nextId++
      const connection: Connection = { closed: false, wake: undefined }
      store.connections.set(id, connection)
      return { id, connection }
    }),
    ({ connection, id }) => Effect.sync(() => close(store, id, connection))
  ).pipe(Effect.map(({ connection, id }): Redis.Dedicated => ({
    id,
    command: (name, args) =>
      connection.closed
        ? Effect.fail(closedError(name))
        : upper(name) === "BLMOVE"
        ? blmove(connection, store, args)
        : atNow(store, name, "Server", () => runCommand(store, name, args)),
    close: Effect.sync(() => close(store, id, connection)),
    kill: Effect.sync(() => close(store, id, connection))
  })))

/** A dedicated connection of the memory backend. */
interface Connection {
  closed: boolean
  /** Wakes its blocked BLMOVE, if any. */
  wake: (() => void) | undefined
}

/** Closes a dedicated connection: it is forgotten, and a BLMOVE it has blocked fails at once. */
const close = (store: StoreImpl, id: number, connection: Connection) => {
  connection.closed = true
  store.connections.delete(id)
  connection.wake?.()
}

/** @internal The service over a store. */
export const make = (store: Redis.MemoryStore): Redis.Redis => {
  const impl = store as StoreImpl
  return {
    [Redis.TypeId]: Redis.TypeId,
    script: (script, keys, args) => {
      if (script.variadic ? keys.length === 0 || keys.length % script.keys !== 0 : keys.length !== script.keys) {
        return Effect.dieMessage(
          `wakuwaku: script ${script.name} declares ${script.keys} keys${script.variadic ? " per call" : ""}, ` +
            `got ${keys.length}`
        )
      }
      const run = twins.get(script)
      if (run === undefined) {
        return Effect.fail(failure("Script", `script ${script.name}`, `NOSCRIPT the memory backend has no twin of script ${script.name}`))
      }
      return Effect.mapError(
        atNow(impl, `script ${script.name}`, "Script", () => run(impl.db, keys, args)),
        (error) => new Redis.RedisError({ ...error, cause: scriptCause(script, error.cause) })
      )
    },
    command: (name, args) => atNow(impl, name, "Server", () => runCommand(impl, name, args)),
    dedicated: () => dedicated(impl)
  }
}

/** An error raised inside a twin reads as Redis words one raised inside a script. */
const scriptCause = (script: Redis.Script, cause: unknown) =>
  new ReplyError(`${cause instanceof Error ? cause.message : String(cause)} script: ${script.sha1}, on @user_script (memory twin of ${script.name})`)

/** @internal */
export const layer = <Access extends "ReadWrite" | "ReadOnly">(
  options: Redis.MemoryOptions | undefined,
  access: Access
): Layer.Layer<Access extends "ReadWrite" ? Redis.ReadWrite : Redis.ReadOnly> => {
  const every = Duration.decode(options?.sweepInterval ?? "1 second")
  if (!Duration.isFinite(every) || Duration.toMillis(every) <= 0) {
    throw new RangeError(`wakuwaku: Redis.layerMemory sweepInterval must be a positive finite duration, got ${Duration.format(every)}`)
  }
  validMaxKeys(options?.maxKeys)
  const service = Layer.scoped(
    Redis.Redis,
    Effect.gen(function*() {
      const store = (options?.store ?? makeStore(options?.maxKeys)) as StoreImpl
      if (!(store instanceof StoreImpl)) {
        return yield* Effect.dieMessage("wakuwaku: Redis.layerMemory store must be made by Redis.makeMemoryStore")
      }
      // The sweep frees the memory of expired keys; reads never see them anyway.
      yield* Effect.forkScoped(
        Effect.forever(Effect.zipRight(Effect.sleep(every), atNow(store, "sweep", "Server", () => store.db.sweep())))
      )
      return make(store)
    })
  )
  return Layer.merge(service, access === "ReadWrite" ? Capability.ReadWrite : Capability.ReadOnly) as Layer.Layer<
    never
  > as Layer.Layer<Access extends "ReadWrite" ? Redis.ReadWrite : Redis.ReadOnly>
}
