/**
 * FixedWindow: a rate limiter that counts requests per name in fixed windows of server time: at most
 * `limit` per window, the count starting again at zero when a window ends.
 *
 * This is the algorithm many reverse proxies run on Redis (`INCR RATELIMIT:{ip}:{unix_second}`), done
 * right: the windows are aligned to the Redis server's clock (`TIME`, inside the script), never the
 * client's; they may be any length, not only whole seconds; a denied request takes nothing; and one
 * script reads, checks and counts, so replicas never count past the limit.
 *
 * **Windows.** The window holding server time `now` (in µs since the epoch) starts at
 * `now - now mod window` and ends `window` later: with a 1-second window, windows start on whole
 * seconds, as `{unix_second}` keys do.
 *
 * **What lives in Redis.** One string per name that has counted something in the current window:
 * `@@wakuwaku:FixedWindow:<namespace>:<name>` holding `"<window start µs> <count>"`. It expires when
 * its window ends (rounded up to the millisecond; a count of an earlier window reads as zero). Idle
 * names use no memory.
 *
 * **Guarantees.**
 * - Atomic: however many replicas call at once, a window never counts past `limit`.
 * - One clock: windows follow the server's `TIME`; skew between replicas cannot shift them.
 * - `Denied.retryAfter` is the time until the window ends, rounded up to the millisecond: a retry then
 *   finds a fresh window. `Allowed.resetAfter` names the same end.
 *
 * **Caveats.**
 * - The classic fixed-window edge: a client may spend `limit` at the end of one window and `limit` again
 *   at the start of the next, so up to `2 × limit` in a span of one window. A {@link TokenBucket} has no
 *   such edge.
 * - Under `TestClock` it needs the memory backend (`Redis.layerMemory()`), whose time is Effect's clock.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { FixedWindow, Redis } from "wakuwaku"
 *
 * // 10 requests per client IP per second.
 * export const PER_IP = FixedWindow.make<string>("per-ip", 10, "1 second")
 *
 * export const check = (ip: string) =>
 *   PER_IP.acquire(ip, 1).pipe(Effect.map((admission) => admission._tag === "Allowed"))
 *
 * check("203.0.113.7").pipe(Effect.provide(Redis.layerMemory()), Effect.runPromise)
 * ```
 *
 * @since 0.1.0
 */
import type * as Data from "effect/Data"
import type * as Duration from "effect/Duration"
import type * as Effect from "effect/Effect"
import { dual } from "effect/Function"
import * as Admission_ from "./Admission.js"
import type * as Capability from "./Capability.js"
import * as internal from "./internal/fixedWindow.js"
import type * as Limiter from "./Limiter.js"
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
 * Whether a value is a limiter made by {@link make}.
 *
 * @since 0.1.0
 * @category guards
 */
export const isFixedWindow: (u: unknown) => u is FixedWindow<never> = internal.isFixedWindow

/**
 * The entity that fixed-window operations read and write.
 *
 * @since 0.1.0
 * @category capabilities
 */
export type Entity = Capability.Entity<"FixedWindow">

/**
 * @since 0.1.0
 * @category capabilities
 */
export const entity: Entity = internal.entity

/**
 * What an operation needs: `Redis` and the right to write (`Requirements<"write">`, the default) or read
 * fixed windows, as every structure's `Requirements` says it.
 *
 * @since 0.1.0
 * @category capabilities
 */
export type Requirements<Access extends "read" | "write" = "write"> =
  | Redis.Redis
  // Spelled out rather than through the `Entity` alias, so that compile errors name the entity.
  | (Access extends "write" ? Capability.Write<Capability.Entity<"FixedWindow">>
    : Capability.Read<Capability.Entity<"FixedWindow">>)

/**
 * The outcome of an acquire: the same as a token bucket's (the `Admission` module's).
 * - `Allowed`: counted. `remaining` is what is left in this window, and `resetAfter` the time until it ends
 *   (whole milliseconds, rounded up: the same end a denial's `retryAfter` names).
 * - `Denied`: nothing counted. `retryAfter` is the time until the window ends (whole milliseconds,
 *   rounded up), or `None` when `cost` exceeds `limit`: split the request instead of retrying.
 *
 * @since 0.1.0
 * @category models
 */
export type Admission = Admission_.Admission

/**
 * Constructors and matchers of {@link Admission} (the `Admission` module's, as `TokenBucket.Admission`).
 *
 * @since 0.1.0
 * @category models
 */
export const Admission: Data.TaggedEnum.Constructor<Admission> = Admission_.Admission

/**
 * A fixed-window limiter: a plain immutable value, declared once as a module-level constant.
 *
 * @since 0.1.0
 * @category models
 */
export interface FixedWindow<in Name extends Redis.KeyName> {
  readonly [TypeId]: TypeId
  /** What it says of itself, as every limiter does: its kind and its policy (`Limiter.Description`). */
  readonly [Limiter.TypeId]: Limiter.Description
  /** A one-line description for logs. */
  toString(): string
  /** Keeps this limiter's keys apart from every other's. */
  readonly namespace: string
  /** The most a name may count in one window. */
  readonly limit: number
  /** How long a window lasts. */
  readonly window: Duration.Duration
  /**
   * Counts `cost` (a non-negative safe integer) for `name` in the current window if that stays within
   * `limit`. A denial counts nothing. Bad input fails with `InvalidInput` and sends nothing.
   */
  readonly acquire: (
    name: Name,
    cost: number
  ) => Effect.Effect<Admission, Redis.RedisError | Redis.InvalidInput, Requirements<"write">>
  /** Deletes `name`'s count, so its window starts over. Succeeds with whether it had one. */
  readonly reset: (name: Name) => Effect.Effect<boolean, Redis.RedisError | Redis.InvalidInput, Requirements<"write">>
  /** What is left in `name`'s current window, without counting. Only reads. */
  readonly peek: (name: Name) => Effect.Effect<number, Redis.RedisError | Redis.InvalidInput, Requirements<"read">>
}

/**
 * Declares a limiter. Throws on a namespace that is not a short word, a limit that is not a
 * non-negative safe integer, or a window that is not a whole number of microseconds from 1 µs to
 * 10^14 µs (10^11 ms, about 3.2 years). A limit of 0 lets only cost-0 requests through.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make: <Name extends Redis.KeyName = string>(
  namespace: string,
  limit: number,
  window: Duration.DurationInput
) => FixedWindow<Name> = internal.make

/**
 * {@link FixedWindow.acquire} as a module function,
 * beside the method `window.acquire(name, cost)`. Dual: `acquire(window, name, cost)` or `acquire(name, cost)(window)`.
 *
 * @since 0.2.0
 * @category operations
 */
export const acquire: {
  <Name extends Redis.KeyName>(
    name: Name,
    cost: number
  ): (
    window: FixedWindow<Name>
  ) => Effect.Effect<Admission, Redis.RedisError | Redis.InvalidInput, Requirements<"write">>
  <Name extends Redis.KeyName>(
    window: FixedWindow<Name>,
    name: Name,
    cost: number
  ): Effect.Effect<Admission, Redis.RedisError | Redis.InvalidInput, Requirements<"write">>
} = dual(
  (args) => internal.isFixedWindow(args[0]),
  <Name extends Redis.KeyName>(
    window: FixedWindow<Name>,
    name: Name,
    cost: number
  ): Effect.Effect<Admission, Redis.RedisError | Redis.InvalidInput, Requirements<"write">> =>
    window.acquire(name, cost)
)

/**
 * {@link FixedWindow.reset} as a module function,
 * beside the method `window.reset(name)`. Dual: `reset(window, name)` or `reset(name)(window)`.
 *
 * @since 0.2.0
 * @category operations
 */
export const reset: {
  <Name extends Redis.KeyName>(
    name: Name
  ): (window: FixedWindow<Name>) => Effect.Effect<boolean, Redis.RedisError | Redis.InvalidInput, Requirements<"write">>
  <Name extends Redis.KeyName>(
    window: FixedWindow<Name>,
    name: Name
  ): Effect.Effect<boolean, Redis.RedisError | Redis.InvalidInput, Requirements<"write">>
} = dual(
  (args) => internal.isFixedWindow(args[0]),
  <Name extends Redis.KeyName>(
    window: FixedWindow<Name>,
    name: Name
  ): Effect.Effect<boolean, Redis.RedisError | Redis.InvalidInput, Requirements<"write">> => window.reset(name)
)

/**
 * {@link FixedWindow.peek} as a module function,
 * beside the method `window.peek(name)`. Dual: `peek(window, name)` or `peek(name)(window)`.
 *
 * @since 0.2.0
 * @category operations
 */
export const peek: {
  <Name extends Redis.KeyName>(
    name: Name
  ): (window: FixedWindow<Name>) => Effect.Effect<number, Redis.RedisError | Redis.InvalidInput, Requirements<"read">>
  <Name extends Redis.KeyName>(
    window: FixedWindow<Name>,
    name: Name
  ): Effect.Effect<number, Redis.RedisError | Redis.InvalidInput, Requirements<"read">>
} = dual(
  (args) => internal.isFixedWindow(args[0]),
  <Name extends Redis.KeyName>(
    window: FixedWindow<Name>,
    name: Name
  ): Effect.Effect<number, Redis.RedisError | Redis.InvalidInput, Requirements<"read">> => window.peek(name)
)
