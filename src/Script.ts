/**
 * Script: a Lua script run on Redis, defined once with everything each backend needs: the Lua that
 * Redis runs, the TypeScript twin that the embedded backend (`Redis.layerMemory`) runs in its place, and
 * the decoder of its reply. Every structure of the library is built from such definitions, and so can
 * yours: a script made with {@link make} runs on a server and, when it has a twin, on the embedded
 * backend too.
 *
 * **Running it.** {@link run} sends the script by EVALSHA (EVAL once when the server answers
 * NOSCRIPT), or runs its twin on the embedded backend, then decodes the reply. A reply the decoder
 * rejects fails with `RedisError` (reason `Reply`), naming the script, the reply and what was
 * expected. A script with a `batch` variant may be sent together with other calls of it in flight
 * (see `Redis`).
 *
 * **The rules a definition keeps** (test/scripts.test.ts checks the library's own):
 * - every key the script touches arrives through `KEYS`, exactly `KEYS[1..keys]`, never built inside
 *   the Lua (a Redis Cluster routes the call by its keys);
 * - time that matters is the server's `TIME`, read inside the script, never an argument;
 * - the twin does what the Lua does, on the {@link Keyspace}: the same `KEYS` and `ARGV` (0-based), the
 *   same reply, the same errors (throw a {@link ReplyError} with Redis's words). It runs atomically:
 *   nothing else runs on the store while it does, as nothing else runs on Redis during a script.
 *
 * @example
 * ```ts
 * import { Effect, Either } from "effect"
 * import { Redis, Script } from "wakuwaku"
 *
 * // Sets KEYS[1] to ARGV[1] unless it holds a larger number; replies with the value kept.
 * const SET_MAX = Script.make({
 *   name: "myapp.setMax",
 *   keys: 1,
 *   lua: `local v = tonumber(redis.call('GET', KEYS[1]) or '-inf')
 * if tonumber(ARGV[1]) > v then redis.call('SET', KEYS[1], ARGV[1], 'PX', 60000) return ARGV[1] end
 * return tostring(v)`,
 *   twin: (db, [key], [value]) => {
 *     const v = Number(db.get(key!) ?? -Infinity)
 *     if (Number(value) > v) {
 *       db.set(key!, value!, { px: 60000 })
 *       return value!
 *     }
 *     return String(v)
 *   },
 *   decode: (reply) => typeof reply === "string" ? Either.right(Number(reply)) : Either.left("a number as a string")
 * })
 *
 * export const program = Script.run(SET_MAX, ["myapp:max"], ["42"]).pipe(Effect.provide(Redis.layerMemory()))
 * ```
 *
 * @since 0.1.0
 */
import type * as Effect from "effect/Effect"
import type * as Either from "effect/Either"
import * as internal from "./internal/script.js"
import type * as Redis from "./Redis.js"

/**
 * @since 0.1.0
 * @category type ids
 */
export const TypeId: unique symbol = internal.TypeId

/**
 * @since 0.1.0
 * @category type ids
 */
export type TypeId = typeof TypeId

/**
 * A reply, as ioredis hands it over and as a twin returns it: integers, strings, nil, arrays, and error
 * replies inside arrays.
 *
 * @since 0.1.0
 * @category models
 */
export type Reply = null | number | string | Error | ReadonlyArray<Reply>

/**
 * An error reply with Redis's own words (`WRONGTYPE …`, `ERR …`): what a twin throws where the Lua's
 * `redis.call` would raise, or where the Lua calls `redis.error_reply`.
 *
 * @since 0.1.0
 * @category models
 */
export interface ReplyError extends Error {}

/**
 * The class of {@link ReplyError}: `throw new Script.ReplyError("WRONGTYPE …")`.
 *
 * @since 0.1.0
 * @category models
 */
export const ReplyError: new(message?: string) => ReplyError = internal.ReplyError

/**
 * The keyspace as a twin sees it: Redis's commands with Redis's rules (types and `WRONGTYPE`, empty
 * lists and sorted sets removed, TTLs in milliseconds), all at one time per call, `now`.
 *
 * @since 0.1.0
 * @category models
 */
export interface Keyspace {
  /** The store's time for this call, in whole microseconds since the epoch (what `TIME` gives). */
  readonly now: number
  /** `now` in whole milliseconds. */
  readonly nowMs: number
  readonly exists: (...keys: ReadonlyArray<string>) => number
  readonly del: (...keys: ReadonlyArray<string>) => number
  readonly type: (key: string) => string
  /** PEXPIRE, with GT when `gt` (only a later expiry; no expiry counts as infinite). A TTL ≤ 0 deletes the key. */
  readonly pexpire: (key: string, ms: number | string, gt?: boolean) => number
  readonly pttl: (key: string) => number
  readonly get: (key: string) => string | null
  /** SET with PX and NX: "OK", or null when NX finds the key. */
  readonly set: (
    key: string,
    value: string,
    options?: { readonly px?: number | string; readonly nx?: boolean }
  ) => "OK" | null
  readonly rpush: (key: string, ...values: ReadonlyArray<string>) => number
  readonly lpush: (key: string, ...values: ReadonlyArray<string>) => number
  /** LPOP with a count: the popped elements, or null when the list does not exist. */
  readonly lpop: (key: string, count: number | string) => Array<string> | null
  readonly llen: (key: string) => number
  readonly lindex: (key: string, index: number) => string | null
  readonly lrange: (key: string, start: number, stop: number) => Array<string>
  readonly lset: (key: string, index: number, value: string) => "OK"
  readonly ltrim: (key: string, start: number, stop: number) => "OK"
  readonly lmove: (source: string, destination: string, from: "LEFT" | "RIGHT", to: "LEFT" | "RIGHT") => string | null
  /** ZADD [XX] score member: how many members were added. */
  readonly zadd: (key: string, score: number, member: string, xx?: boolean) => number
  readonly zrem: (key: string, member: string) => number
  /** ZREMRANGEBYSCORE key -inf max. */
  readonly zremrangebyscore: (key: string, max: number) => number
  readonly zcard: (key: string) => number
  readonly zscore: (key: string, member: string) => string | null
  /** ZRANGE key start stop WITHSCORES, as a flat [member, score, …], ordered by score then member. */
  readonly zrangeWithScores: (key: string, start: number, stop: number) => Array<string>
}

/**
 * A script's twin: the same `KEYS` and `ARGV` (0-based here), the same reply. Throws a {@link ReplyError}
 * to fail.
 *
 * @since 0.1.0
 * @category models
 */
export type Twin = (keyspace: Keyspace, keys: ReadonlyArray<string>, argv: ReadonlyArray<string>) => Reply

/**
 * A script, defined once. Make it with {@link make}; run it with {@link run}.
 *
 * @since 0.1.0
 * @category models
 */
export interface Script<A = unknown> {
  readonly [TypeId]: TypeId
  /** A short name, used in errors. */
  readonly name: string
  /** The Lua source. */
  readonly lua: string
  /** How many KEYS the script declares (per call, when `variadic`); the rest of its arguments are ARGV. */
  readonly keys: number
  /** The SHA1 of `lua`, as EVALSHA wants it. */
  readonly sha1: string
  /** It only reads: it runs as EVALSHA_RO, which a read-only replica serves. */
  readonly readOnly: boolean
  /** What the embedded backend runs in place of the Lua; none: the script fails there (reason `Script`). */
  readonly twin: Twin | undefined
  /** The reply as `A`, or what was expected instead. */
  readonly decode: (reply: unknown) => Either.Either<A, string>
  /**
   * The variant that runs many calls in one: its KEYS and ARGV are the calls' KEYS and ARGV one after
   * another (every call with `keys` KEYS), and it replies with an array of their replies (or error
   * replies), in order, each decoded by `decode`. When it is set, calls made together may be sent together.
   */
  readonly many: Script<unknown> | undefined
  /**
   * KEYS and ARGV of several calls (a `many` variant), or of several items decided together, laid end to
   * end: its key count is per call or item.
   */
  readonly variadic: boolean
  /**
   * (A `variadic` script.) How many leading ARGV the calls or items it runs have in common: they come once,
   * first, then each one's own ARGV. Only calls whose leading ARGV are equal are sent together. 0 otherwise.
   */
  readonly shared: number
}

/**
 * What {@link make} takes.
 *
 * @since 0.1.0
 * @category models
 */
export interface Options<A> {
  readonly name: string
  readonly lua: string
  readonly keys: number
  readonly twin?: Twin | undefined
  /** Default: the reply as it is (`A` = `unknown`). */
  readonly decode?: ((reply: unknown) => Either.Either<A, string>) | undefined
  readonly readOnly?: boolean | undefined
  /**
   * A variant running many calls in one (see {@link Script.many}): its Lua and its twin. Build both
   * from one function of a call with {@link manyLua} and {@link manyTwin}.
   */
  readonly many?: {
    readonly lua: string
    readonly twin?: Twin | undefined
    /** How many leading ARGV every call batched together has in common, sent once (default 0). */
    readonly shared?: number | undefined
  } | undefined
}

/**
 * Defines a script; its SHA1 is computed once, here. Throws a `TypeError` on a name that is not a
 * non-empty string, or a key count that is not a non-negative integer.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make: <A = unknown>(options: Options<A>) => Script<A> = internal.make

/**
 * Runs a script: EVALSHA (EVAL on NOSCRIPT) on a server, the twin on the embedded backend, and decodes
 * the reply. `keys.length` must equal `script.keys`.
 *
 * @since 0.1.0
 * @category running
 */
export const run: <A>(
  script: Script<A>,
  keys: ReadonlyArray<string>,
  args: ReadonlyArray<string>
) => Effect.Effect<A, Redis.RedisError, Redis.Redis> = internal.run

/**
 * The Lua of a batch variant: calls the Lua function `fn` once per call laid end to end in KEYS and
 * ARGV (`keys` KEYS and `args` ARGV each, after the `shared` ARGV that every call has in common), each
 * protected by `pcall`, so one that fails fails alone. `fn` gets a call's KEYS, then the shared ARGV,
 * then the call's own ARGV: the single script's order. Replies with one reply (or error reply) per
 * call, in order. Prefix it with the Lua that defines `fn`; `fn` must not return nil.
 *
 * @since 0.1.0
 * @category batching
 */
export const manyLua: (fn: string, keys: number, args: number, shared?: number) => string = internal.manyLua

/**
 * The twin of a {@link manyLua} variant: `twin` once per call (after the `shared` ARGV, which each call
 * gets first), each protected, an error reply in place of a call that failed.
 *
 * @since 0.1.0
 * @category batching
 */
export const manyTwin: (twin: Twin, keys: number, args: number, shared?: number) => Twin = internal.manyTwin

/**
 * Whether a value is a script made by {@link make}.
 *
 * @since 0.1.0
 * @category guards
 */
export const isScript: (u: unknown) => u is Script<unknown> = internal.isScript
