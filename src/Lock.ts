/**
 * Lock: a leased exclusive lock across replicas. At most one holder per name; a lease keeps a crashed
 * holder from blocking everyone.
 *
 * **What lives in Redis.** Per name, two keys in one cluster hash slot:
 * - `@@wakuwaku:Lock:{<namespace>:<name>}:owner`, the holder's random token, written with `SET NX PX`
 *   and expiring when the lease runs out;
 * - `@@wakuwaku:Lock:{<namespace>:<name>}:fence`, the last fence granted, expiring with the lease.
 *
 * **Guarantees.**
 * - At most one token holds a name at a time, as Redis sees it: the lease is Redis's own key expiry,
 *   on the server's clock.
 * - Release and extend compare the token inside a script, so a stale holder can never delete or
 *   extend someone else's lock: they answer `false`.
 * - Every grant carries a `fence` that strictly increases per name, even across idle expiry: it is the
 *   server time in microseconds, or the last fence plus one if that is larger. This assumes the server
 *   clock does not step backwards by more than a lease.
 * - {@link withLock} releases on every exit, renews the lease every third of it, and interrupts its
 *   body with {@link LeaseLost} as soon as the lease is lost, and at the latest at the lease's end as the
 *   client counts it (from when the grant or the last confirmed renewal was sent) if no renewal was
 *   confirmed by then: before Redis can grant the name to anyone else.
 *
 * **Caveats.** A lease cannot by itself guarantee mutual exclusion: a holder paused longer than its
 * lease (a GC pause, a stopped VM) resumes believing it holds a lock that someone else now holds. Pass
 * the fence to the resource you protect and have it refuse older fences (docs/locks.md).
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { Lock, Redis } from "wakuwaku"
 *
 * export const JOBS = Lock.make<string>("job", "30 seconds")
 *
 * export const runOnce = (job: string) => Lock.withLock(JOBS, job)(Effect.log(`running ${job}`))
 *
 * // The layer once, at the program's edge, not per call: each provide builds a client.
 * export const main = runOnce("nightly").pipe(Effect.provide(Redis.layer({ url: "redis://127.0.0.1:6379" })))
 * ```
 *
 * @since 0.1.0
 */
import type * as Cause from "effect/Cause"
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import { dual } from "effect/Function"
import type * as Inspectable from "effect/Inspectable"
import type * as Option from "effect/Option"
import type * as Schedule from "effect/Schedule"
import type * as Schema from "effect/Schema"
import type * as Scope from "effect/Scope"
import type * as Capability from "./Capability.js"
import * as lease from "./internal/lease.js"
import * as internal from "./internal/lock.js"
import type * as Redis from "./Redis.js"

/**
 * @since 0.2.0
 * @category type ids
 */
export const TypeId: unique symbol = internal.TypeId

/**
 * @since 0.2.0
 * @category type ids
 */
export type TypeId = typeof TypeId

/**
 * Whether a value is a lock made by {@link make}.
 *
 * @since 0.2.0
 * @category guards
 */
export const isLock: (u: unknown) => u is Lock<never> = internal.isLock

/**
 * @since 0.1.0
 * @category capabilities
 */
export type Entity = Capability.Entity<"Lock">

/**
 * @since 0.1.0
 * @category capabilities
 */
export const entity: Entity = internal.entity

/**
 * What an operation needs: `Redis` and the right to write (`Requirements<"write">`, the default) or read
 * locks, as every structure's `Requirements` says it. Every lock operation writes.
 *
 * @since 0.1.0
 * @category capabilities
 */
export type Requirements<Access extends "read" | "write" = "write"> =
  | Redis.Redis
  // Spelled out rather than through the `Entity` alias, so that compile errors name the entity.
  | (Access extends "write" ? Capability.Write<Capability.Entity<"Lock">>
    : Capability.Read<Capability.Entity<"Lock">>)

/**
 * The proof of holding a lease with a fence: a Lock's grant, an RwLock's write grant, and (with its
 * count) a Semaphore's permit. It releases and extends itself; its operations need `R`, the structure's
 * {@link Requirements}. Its secret never appears in `toString`, `inspect` or JSON.
 *
 * @since 0.2.0
 * @category models
 */
export interface Token<R> extends Inspectable.Inspectable {
  /** The structure's namespace. */
  readonly namespace: string
  /** The name, as encoded into the key. */
  readonly name: string
  /** Strictly increases with every grant of this name: pass it to what the lease protects. */
  readonly fence: bigint
  /** Ends the lease: `false` when it had already run out (someone else's hold is left alone). */
  readonly release: Effect.Effect<boolean, Redis.RedisError, R>
  /** Restarts the lease: `false` when it had already run out. */
  readonly extend: Effect.Effect<boolean, Redis.RedisError, R>
}

/**
 * The proof of holding a lock: a {@link Token} whose operations need this module's {@link Requirements}.
 *
 * @since 0.1.0
 * @category models
 */
export type LockToken = Token<Requirements>

/**
 * A leased lock: a plain immutable value, declared once as a module-level constant.
 *
 * @since 0.1.0
 * @category models
 */
export interface Lock<in Name extends Redis.KeyName> {
  readonly [TypeId]: TypeId
  /** A one-line description for logs. */
  toString(): string
  readonly namespace: string
  /** The lease. */
  readonly ttl: Duration.Duration
  /** Takes the lock if nobody holds it. Never waits. */
  readonly tryLock: (
    name: Name
  ) => Effect.Effect<Option.Option<LockToken>, Redis.RedisError | Redis.InvalidInput, Requirements>
}

/**
 * Declares a lock with a lease of `ttl` (a TTL under a millisecond counts as one). A `ttl` that is
 * not a duration longer than zero and at most 10^11 ms (about 3.2 years) throws a `RangeError` here,
 * and a namespace that is not a short word a `TypeError`: declare locks as module-level constants, so
 * a bad one fails at start-up.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = <Name extends Redis.KeyName = string>(namespace: string, ttl: Duration.DurationInput): Lock<Name> =>
  internal.make<Name>(namespace, ttl)

/**
 * {@link Lock.tryLock} as a module function,
 * beside the method `lock.tryLock(name)`. Dual: `tryLock(lock, name)` or `tryLock(name)(lock)`.
 *
 * @since 0.2.0
 * @category operations
 */
export const tryLock: {
  <Name extends Redis.KeyName>(
    name: Name
  ): (lock: Lock<Name>) => Effect.Effect<Option.Option<LockToken>, Redis.RedisError | Redis.InvalidInput, Requirements>
  <Name extends Redis.KeyName>(
    lock: Lock<Name>,
    name: Name
  ): Effect.Effect<Option.Option<LockToken>, Redis.RedisError | Redis.InvalidInput, Requirements>
} = dual(
  (args) => internal.isLock(args[0]),
  <Name extends Redis.KeyName>(
    lock: Lock<Name>,
    name: Name
  ): Effect.Effect<Option.Option<LockToken>, Redis.RedisError | Redis.InvalidInput, Requirements> => lock.tryLock(name)
)

/**
 * How a scoped lock is acquired: once ({@link tryOnce}), or by waiting ({@link wait}).
 *
 * @since 0.1.0
 * @category models
 */
export type Acquire =
  | { readonly _tag: "Try" }
  | {
    readonly _tag: "Wait"
    /** Between attempts; default: jittered exponential backoff from 10 ms, at most 200 ms a pause. */
    readonly schedule?: Schedule.Schedule<unknown> | undefined
    /** Give up after this long; default: the lease. */
    readonly deadline?: Duration.DurationInput | undefined
  }

/**
 * Try once; fail with {@link LeaseUnavailable} if the lock is held.
 *
 * @since 0.1.0
 * @category acquisition
 */
export const tryOnce: Acquire = { _tag: "Try" }

/**
 * Retry following `schedule` until `deadline`, then fail with {@link LeaseUnavailable}. A `deadline` that
 * is not a duration longer than zero throws a `RangeError` here.
 *
 * @since 0.1.0
 * @category acquisition
 */
export const wait = (options: {
  readonly schedule?: Schedule.Schedule<unknown> | undefined
  readonly deadline?: Duration.DurationInput | undefined
} = {}): Acquire => internal.wait(options)

/**
 * Options of the scoped forms.
 *
 * @since 0.1.0
 * @category models
 */
export interface Options {
  /** How to acquire; default {@link wait}(). */
  readonly acquire?: Acquire | undefined
  /**
   * How often the lease is renewed while held; default a third of the lease. It must be longer than zero
   * and shorter than half the lease, so that a renewal that fails can be tried again before the lease
   * ends; any other value throws a `RangeError` naming both durations when the scoped form is applied.
   */
  readonly renewEvery?: Duration.DurationInput | undefined
}

/**
 * A lease (of a Lock, of an RwLock's read or write side, of a Semaphore's permits) was held by someone
 * else for as long as the acquisition policy allowed. The same class as `RwLock.LeaseUnavailable` and
 * `Semaphore.LeaseUnavailable`; {@link LockUnavailable} is another name of it.
 *
 * @since 0.2.0
 * @category errors
 */
export interface LeaseUnavailable extends Cause.YieldableError {
  readonly _tag: "LeaseUnavailable"
  /** Such as `Lock(job)`, `RwLock(doc).write` or `Semaphore(pool)`. */
  readonly lock: string
  /** The name, as encoded into the key. */
  readonly name: string
}

/**
 * The class of {@link LeaseUnavailable}, and its schema.
 *
 * @since 0.2.0
 * @category errors
 */
export const LeaseUnavailable: Schema.TaggedErrorClass<LeaseUnavailable, "LeaseUnavailable", {
  readonly _tag: Schema.tag<"LeaseUnavailable">
  readonly lock: typeof Schema.String
  readonly name: typeof Schema.String
}> = lease.LeaseUnavailable

/**
 * The type of the schema {@link LeaseLostReason}.
 *
 * @since 0.2.0
 * @category errors
 */
export type LeaseLostReasonSchema = Schema.Literal<["Expired", "Unconfirmed"]>

/**
 * Why a lease was lost: see {@link LeaseLost}.
 *
 * @since 0.2.0
 * @category errors
 */
export type LeaseLostReason = LeaseLostReasonSchema["Type"]

/**
 * The schema of {@link LeaseLostReason}.
 *
 * @since 0.2.0
 * @category errors
 */
export const LeaseLostReason: LeaseLostReasonSchema = lease.LeaseLostReason

/**
 * The lease was lost while held: a renewal found it had run out (`Expired`: the key was deleted, or
 * renewals came too late), or its end came with no renewal confirmed (`Unconfirmed`: Redis stalled,
 * refused or answered too late; the end is counted from when the grant or the last confirmed renewal
 * was sent). The protected effect has been interrupted, at that end at the latest; if the grant itself
 * was answered after its end, the effect never started. The same class for every leased structure;
 * {@link LockLost} is another name of it.
 *
 * @since 0.2.0
 * @category errors
 */
export interface LeaseLost extends Cause.YieldableError {
  readonly _tag: "LeaseLost"
  /** Such as `Lock(job)`, `RwLock(doc).write` or `Semaphore(pool)`. */
  readonly lock: string
  /** The name, as encoded into the key. */
  readonly name: string
  /** The fence of the grant that was lost (none for a read lease); a decimal string in JSON. */
  readonly fence: bigint | undefined
  readonly reason: LeaseLostReason
}

/**
 * The class of {@link LeaseLost}, and its schema.
 *
 * @since 0.2.0
 * @category errors
 */
export const LeaseLost: Schema.TaggedErrorClass<LeaseLost, "LeaseLost", {
  readonly _tag: Schema.tag<"LeaseLost">
  readonly lock: typeof Schema.String
  readonly name: typeof Schema.String
  readonly fence: Schema.UndefinedOr<typeof Schema.BigInt>
  readonly reason: LeaseLostReasonSchema
}> = lease.LeaseLost

/**
 * The lock was held by someone else for as long as the acquisition policy allowed: another name of
 * {@link LeaseUnavailable} (the same class; its `_tag` is `"LeaseUnavailable"`).
 *
 * @since 0.1.0
 * @category errors
 */
export type LockUnavailable = LeaseUnavailable

/**
 * Another name of {@link LeaseUnavailable}: the same class.
 *
 * @since 0.1.0
 * @category errors
 */
export const LockUnavailable: typeof LeaseUnavailable = LeaseUnavailable

/**
 * The lease was lost while held: another name of {@link LeaseLost} (the same class; its `_tag` is
 * `"LeaseLost"`).
 *
 * @since 0.1.0
 * @category errors
 */
export type LockLost = LeaseLost

/**
 * Another name of {@link LeaseLost}: the same class.
 *
 * @since 0.1.0
 * @category errors
 */
export const LockLost: typeof LeaseLost = LeaseLost

/**
 * What a leased structure's operations fail with, besides losing a held lease: the lease was
 * unavailable, Redis failed, or an argument was refused.
 *
 * @since 0.2.0
 * @category errors
 */
export type Failure = LeaseUnavailable | Redis.RedisError | Redis.InvalidInput

/**
 * Holds the lock while `effect` runs: acquires it as `options.acquire` says, renews the lease in the
 * background, and releases it on every exit (success, failure, interruption). If the lease is lost,
 * `effect` is interrupted and the whole fails with {@link LeaseLost}. Dual: `withLock(lock, name)(effect)`
 * or `withLock(effect, lock, name)`. Options are checked when it is applied (a `renewEvery` that is not
 * longer than zero and shorter than half the lease throws a `RangeError`).
 *
 * @since 0.1.0
 * @category scoped
 */
export const withLock: {
  <Name extends Redis.KeyName>(
    lock: Lock<Name>,
    name: Name,
    options?: Options
  ): <A, E, R>(
    effect: Effect.Effect<A, E, R>
  ) => Effect.Effect<A, E | LeaseLost | Failure, R | Requirements>
  <A, E, R, Name extends Redis.KeyName>(
    effect: Effect.Effect<A, E, R>,
    lock: Lock<Name>,
    name: Name,
    options?: Options
  ): Effect.Effect<A, E | LeaseLost | Failure, R | Requirements>
} = dual(
  (args) => Effect.isEffect(args[0]),
  <A, E, R, Name extends Redis.KeyName>(
    effect: Effect.Effect<A, E, R>,
    lock: Lock<Name>,
    name: Name,
    options?: Options
  ) => internal.withLock(lock, name, options, effect)
)

/**
 * The lock held for the rest of the scope: the token, and `lost`, which fails with {@link LeaseLost}
 * once the lease is lost (race your work against it; {@link withLock} does this for you).
 *
 * @since 0.1.0
 * @category scoped
 */
export const scoped = <Name extends Redis.KeyName>(
  lock: Lock<Name>,
  name: Name,
  options?: Options
): Effect.Effect<
  { readonly token: LockToken; readonly lost: Effect.Effect<never, LeaseLost> },
  Failure,
  Requirements | Scope.Scope
> => internal.scoped(lock, name, options)
