/**
 * SlidingWindow: a rate limiter that counts requests per name over a window that slides with server time:
 * at most `limit` units of cost in **any** span of `window`, wherever it starts. There is no boundary burst:
 * where a {@link FixedWindow} lets a client spend `limit` at the end of one window and `limit` again at the
 * start of the next, a sliding window never admits more than `limit` in any span of one window.
 *
 * Many "sliding windows" (envoy's, Kong's, upstash's) weigh the previous window's count by how much of it
 * overlaps: an approximation that admits more than the limit in some windows. This one is exact: it keeps an
 * entry per acquire (its server time and its cost) for as long as it counts.
 *
 * **What lives in Redis.** One list per name that has counted something in the last `window`:
 * `@@wakuwaku:SlidingWindow:<namespace>:<name>`. Element 0 is the total cost of the entries; then one entry
 * per allowed acquire of a cost above 0, `"<t µs> <cost>"` (server time from `TIME` inside the script),
 * oldest first. An entry counts from `t` until `t + window`; the next allowed acquire
 * drops the entries that have expired. The list expires when its newest entry does (its TTL is the window,
 * rounded up to the millisecond). Idle names use no memory.
 *
 * **Memory.** Every entry holds at least one unit, so a name holds at most `limit` entries: its memory grows
 * with the limit, about 20 bytes per entry (docs/sliding-window.md measures it). {@link make} refuses a limit
 * above {@link maxLimit} (10,000). For larger limits use a `TokenBucket` (two numbers per name) or a
 * `FixedWindow` (one).
 *
 * **Guarantees.**
 * - Exact: for every server time `T`, the allowed costs of the acquires made in `[T, T + window)` sum to at
 *   most `limit`. Weighted: `acquire(name, cost)` counts `cost` units.
 * - Atomic: one script reads, checks and counts, so replicas never count past the limit together.
 * - One clock: the entries' times are the server's `TIME`; skew between replicas changes nothing.
 * - A denial counts nothing and writes nothing.
 * - `Denied.retryAfter` is exact (rounded up to the millisecond): the earliest server time at which this cost
 *   fits, when enough of the oldest entries have expired (if nothing else is spent meanwhile); `None` when
 *   `cost` exceeds `limit`. `Allowed.resetAfter` is the time until the quota is whole again (the newest
 *   entry expires).
 *
 * **Caveats.**
 * - An acquire reads as many entries as it drops plus, on a denial, as many as free its cost: its work grows
 *   with the cost and with the entries that expired since the last allowed acquire, never with the whole
 *   list at once for a cost of 1.
 * - If the server's clock steps back, a new entry takes the newest entry's time (the list stays in order),
 *   so the step back can only make the limiter stricter.
 * - Under `TestClock` it needs the memory backend (`Redis.layerMemory()`), whose time is Effect's clock.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { Redis, SlidingWindow } from "wakuwaku"
 *
 * // 100 requests per client IP in any minute, never more.
 * export const PER_IP = SlidingWindow.make<string>("per-ip-sliding", 100, "1 minute")
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
import * as Admission_ from "./Admission.js"
import type * as Capability from "./Capability.js"
import * as internal from "./internal/slidingWindow.js"
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
export const isSlidingWindow: (u: unknown) => u is SlidingWindow<never> = internal.isSlidingWindow

/**
 * The largest limit {@link make} accepts: a name holds up to `limit` entries.
 *
 * @since 0.1.0
 * @category constants
 */
export const maxLimit: number = internal.MAX_LIMIT

/**
 * The entity that sliding-window operations read and write.
 *
 * @since 0.1.0
 * @category capabilities
 */
export type Entity = Capability.Entity<"SlidingWindow">

/**
 * @since 0.1.0
 * @category capabilities
 */
export const entity: Entity = internal.entity

/**
 * What an operation needs: `Redis` and the right to write (or read) sliding windows.
 *
 * @since 0.1.0
 * @category capabilities
 */
export type Requirements<Access extends "read" | "write"> =
  | Redis.Redis
  // Spelled out rather than through the `Entity` alias, so that compile errors name the entity.
  | (Access extends "write" ? Capability.Write<Capability.Entity<"SlidingWindow">>
    : Capability.Read<Capability.Entity<"SlidingWindow">>)

/**
 * The outcome of an acquire: the same as every limiter's (the `Admission` module's).
 * - `Allowed`: counted. `remaining` is what the last window leaves now, and `resetAfter` the time until the
 *   quota is whole again (whole milliseconds, rounded up; zero when nothing is counted).
 * - `Denied`: nothing counted. `retryAfter` is the time until this cost fits (whole milliseconds, rounded
 *   up), or `None` when `cost` exceeds `limit`: split the request instead of retrying.
 *
 * @since 0.1.0
 * @category models
 */
export type Admission = Admission_.Admission

/**
 * Constructors and matchers of {@link Admission} (the `Admission` module's).
 *
 * @since 0.1.0
 * @category models
 */
export const Admission: Data.TaggedEnum.Constructor<Admission> = Admission_.Admission

/**
 * A sliding-window limiter: a plain immutable value, declared once as a module-level constant.
 *
 * @since 0.1.0
 * @category models
 */
export interface SlidingWindow<in Name extends Redis.KeyName> {
  readonly [TypeId]: TypeId
  /** What it says of itself, as every limiter does: its kind and its policy (`Limiter.Description`). */
  readonly [Limiter.TypeId]: Limiter.Description
  /** A one-line description for logs. */
  toString(): string
  /** Keeps this limiter's keys apart from every other's. */
  readonly namespace: string
  /** The most a name may count in any span of one window. */
  readonly limit: number
  /** The span. */
  readonly window: Duration.Duration
  /**
   * Counts `cost` (a non-negative safe integer) for `name` if the last window's count plus `cost` stays
   * within `limit`. A denial counts nothing. Bad input fails with `InvalidInput` and sends nothing.
   */
  readonly acquire: (
    name: Name,
    cost: number
  ) => Effect.Effect<Admission, Redis.RedisError | Redis.InvalidInput, Requirements<"write">>
  /** Deletes `name`'s entries, so it starts afresh. Succeeds with whether it had any. */
  readonly reset: (name: Name) => Effect.Effect<boolean, Redis.RedisError | Redis.InvalidInput, Requirements<"write">>
  /** What the last window leaves `name` now, without counting. Only reads. */
  readonly peek: (name: Name) => Effect.Effect<number, Redis.RedisError | Redis.InvalidInput, Requirements<"read">>
}

/**
 * Declares a limiter. Throws a `RangeError` on a namespace that is not a short word, a limit that is not a
 * whole number from 0 to {@link maxLimit}, or a window that is not a whole number of microseconds from 1 µs
 * to 10^14 µs (10^11 ms, about 3.2 years). A limit of 0 lets only cost-0 requests through.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make: <Name extends Redis.KeyName = string>(
  namespace: string,
  limit: number,
  window: Duration.DurationInput
) => SlidingWindow<Name> = internal.make
