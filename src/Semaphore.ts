/**
 * Semaphore: at most `permits` permits held per name across replicas, each holder leased, so a crashed
 * holder gives its permits back by itself. "At most 5 exports running at once per tenant." A `Lock` is
 * a semaphore of one.
 *
 * **What lives in Redis.** Per name, keys in one cluster hash slot (`{<namespace>:<name>}`):
 * - `…:holders`, a sorted set: one member per holder, `<n>:<token>` (the permits it holds and its
 *   random token), scored by the end of its lease in server microseconds; and the member `#`, scored
 *   minus the permits held in all (a negative score, so no range of lease ends ever includes it).
 *   It expires with the longest lease, and the last release deletes it;
 * - `…:intent`, while an acquirer of more than one permit waits: its `<n>:<token>`, for one lease;
 * - `…:fence`, the last fence granted, expiring with the lease.
 *
 * **Guarantees.**
 * - The permits held on a name never exceed `permits`, as Redis sees it: every grant is decided
 *   inside one script. Holders whose lease ended (on the server's clock, `TIME` inside the script) do
 *   not count: they are pruned by the next acquire.
 * - Release and extend find the holder by its token inside a script, so a stale permit (its lease
 *   ended) answers `false` and never touches another holder's.
 * - Every grant carries a `fence` that strictly increases per name, even across idle expiry, as a
 *   {@link Lock}'s does (server microseconds, or the last fence plus one).
 * - No starvation of large acquirers: one waiting through {@link withPermits} for n > 1 permits leaves
 *   an intent on each refused attempt. While it stands, others are granted only the permits beyond
 *   those n, so a stream of single-permit acquirers cannot keep it out: it gets in at its first attempt
 *   after the holders that were in when it was refused have released (docs/semaphore.md states the
 *   bound).
 * - {@link withPermits} releases on every exit, renews the lease every third of it, and interrupts its
 *   body with {@link LeaseLost} as soon as the lease is lost, at its end at the latest, as `Lock.withLock` does.
 *
 * **Caveats.** One waiter at a time holds the others back; several large waiters get in in no set
 * order. {@link Semaphore.tryAcquire} never waits and leaves no intent. Leases do not by themselves
 * guarantee the bound against a paused holder: use the fence (docs/locks.md). Declare one semaphore
 * per namespace: two with different `permits` on the same names would each apply their own.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { Redis, Semaphore } from "wakuwaku"
 *
 * // At most 5 exports running at once per tenant, whichever replica runs them.
 * export const EXPORTS = Semaphore.make<string>("export", 5, "1 minute")
 *
 * export const runExport = (tenant: string) =>
 *   Semaphore.withPermits(EXPORTS, tenant, 1)(Effect.log(`exporting for ${tenant}`))
 *
 * // The layer once, at the program's edge, not per call: each provide builds a client.
 * export const main = Effect.all([runExport("tenant-42"), runExport("tenant-7")], { concurrency: 2 }).pipe(
 *   Effect.provide(Redis.layer({ url: "redis://127.0.0.1:6379" }))
 * )
 * ```
 *
 * @since 0.1.0
 */
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import { dual } from "effect/Function"
import type * as Option from "effect/Option"
import type * as Scope from "effect/Scope"
import type * as Capability from "./Capability.js"
import * as internal from "./internal/semaphore.js"
import * as Lock from "./Lock.js"
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
 * Whether a value is a semaphore made by {@link make}.
 *
 * @since 0.2.0
 * @category guards
 */
export const isSemaphore: (u: unknown) => u is Semaphore<never> = internal.isSemaphore

/**
 * @since 0.1.0
 * @category capabilities
 */
export type Entity = Capability.Entity<"Semaphore">

/**
 * @since 0.1.0
 * @category capabilities
 */
export const entity: Entity = internal.entity

/**
 * What an operation needs: `Redis` and the right to write (`Requirements<"write">`, the default) or read
 * semaphores, as every structure's `Requirements` says it. Every operation writes.
 *
 * @since 0.1.0
 * @category capabilities
 */
export type Requirements<Access extends "read" | "write" = "write"> =
  | Redis.Redis
  // Spelled out rather than through the `Entity` alias, so that compile errors name the entity.
  | (Access extends "write" ? Capability.Write<Capability.Entity<"Semaphore">>
    : Capability.Read<Capability.Entity<"Semaphore">>)

/**
 * The proof of holding permits: a {@link Lock.Token} (it releases and extends itself, with this
 * semaphore's capability) with the count it holds. Its secret never appears in `toString`, `inspect` or
 * JSON.
 *
 * @since 0.1.0
 * @category models
 */
export interface Permit extends Lock.Token<Requirements> {
  /** How many permits it holds. */
  readonly permits: number
}

/**
 * A leased semaphore: a plain immutable value, declared once as a module-level constant.
 *
 * @since 0.1.0
 * @category models
 */
export interface Semaphore<in Name extends Redis.KeyName> {
  readonly [TypeId]: TypeId
  /** A one-line description for logs. */
  toString(): string
  readonly namespace: string
  /** How many permits each name has. */
  readonly permits: number
  /** The lease of each holder. */
  readonly ttl: Duration.Duration
  /**
   * Takes `n` permits (default 1) if they are free now, and not held back for a waiting acquirer. Never
   * waits, and leaves no intent. An `n` that is not a positive safe integer at most `permits` fails with
   * `InvalidInput`, and nothing is written.
   */
  readonly tryAcquire: (
    name: Name,
    n?: number
  ) => Effect.Effect<Option.Option<Permit>, Redis.RedisError | Redis.InvalidInput, Requirements>
  /** Gives the permits back: `false` when the lease had already ended (another holder is left alone). */
  readonly release: (permit: Permit) => Effect.Effect<boolean, Redis.RedisError, Requirements>
  /** Restarts the lease: `false` when it had already ended. */
  readonly extend: (permit: Permit) => Effect.Effect<boolean, Redis.RedisError, Requirements>
}

/**
 * Declares a semaphore of `permits` per name, each holder leased for `ttl` (under a millisecond counts
 * as one). `permits` that is not a positive safe integer, or a `ttl` that is not a duration longer than
 * zero and at most 10^11 ms (about 3.2 years), throws a `RangeError`; a namespace that is not a short
 * word a `TypeError`.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = <Name extends Redis.KeyName = string>(
  namespace: string,
  permits: number,
  ttl: Duration.DurationInput
): Semaphore<Name> => internal.make<Name>(namespace, permits, ttl)

/**
 * {@link Semaphore.tryAcquire} as a module function,
 * beside the method `sem.tryAcquire(name, n)`. Dual: `tryAcquire(sem, name, n)` or `tryAcquire(name, n)(sem)`.
 *
 * @since 0.2.0
 * @category operations
 */
export const tryAcquire: {
  <Name extends Redis.KeyName>(
    name: Name,
    n?: number
  ): (sem: Semaphore<Name>) => Effect.Effect<Option.Option<Permit>, Redis.RedisError | Redis.InvalidInput, Requirements>
  <Name extends Redis.KeyName>(
    sem: Semaphore<Name>,
    name: Name,
    n?: number
  ): Effect.Effect<Option.Option<Permit>, Redis.RedisError | Redis.InvalidInput, Requirements>
} = dual(
  (args) => internal.isSemaphore(args[0]),
  <Name extends Redis.KeyName>(
    sem: Semaphore<Name>,
    name: Name,
    n?: number
  ): Effect.Effect<Option.Option<Permit>, Redis.RedisError | Redis.InvalidInput, Requirements> =>
    sem.tryAcquire(name, n)
)

/**
 * {@link Semaphore.release} as a module function (a permit also releases itself: `permit.release`),
 * beside the method `sem.release(permit)`. Dual: `release(sem, permit)` or `release(permit)(sem)`.
 *
 * @since 0.2.0
 * @category operations
 */
export const release: {
  (permit: Permit): <Name extends Redis.KeyName>(
    sem: Semaphore<Name>
  ) => Effect.Effect<boolean, Redis.RedisError, Requirements>
  <Name extends Redis.KeyName>(
    sem: Semaphore<Name>,
    permit: Permit
  ): Effect.Effect<boolean, Redis.RedisError, Requirements>
} = dual(
  (args) => internal.isSemaphore(args[0]),
  <Name extends Redis.KeyName>(
    sem: Semaphore<Name>,
    permit: Permit
  ): Effect.Effect<boolean, Redis.RedisError, Requirements> => sem.release(permit)
)

/**
 * {@link Semaphore.extend} as a module function (a permit also extends itself: `permit.extend`),
 * beside the method `sem.extend(permit)`. Dual: `extend(sem, permit)` or `extend(permit)(sem)`.
 *
 * @since 0.2.0
 * @category operations
 */
export const extend: {
  (permit: Permit): <Name extends Redis.KeyName>(
    sem: Semaphore<Name>
  ) => Effect.Effect<boolean, Redis.RedisError, Requirements>
  <Name extends Redis.KeyName>(
    sem: Semaphore<Name>,
    permit: Permit
  ): Effect.Effect<boolean, Redis.RedisError, Requirements>
} = dual(
  (args) => internal.isSemaphore(args[0]),
  <Name extends Redis.KeyName>(
    sem: Semaphore<Name>,
    permit: Permit
  ): Effect.Effect<boolean, Redis.RedisError, Requirements> => sem.extend(permit)
)

/**
 * What the scoped forms fail with, besides {@link LeaseLost}: {@link Lock.Failure}.
 *
 * @since 0.2.0
 * @category errors
 */
export type Failure = Lock.Failure

/**
 * The permits were held by someone else for as long as the acquisition policy allowed: the class
 * {@link Lock.LeaseUnavailable}, which every leased structure fails with.
 *
 * @since 0.2.0
 * @category errors
 */
export type LeaseUnavailable = Lock.LeaseUnavailable

/**
 * The class {@link Lock.LeaseUnavailable}.
 *
 * @since 0.2.0
 * @category errors
 */
export const LeaseUnavailable: typeof Lock.LeaseUnavailable = Lock.LeaseUnavailable

/**
 * Held permits were lost: the class {@link Lock.LeaseLost}, which every leased structure fails with.
 *
 * @since 0.2.0
 * @category errors
 */
export type LeaseLost = Lock.LeaseLost

/**
 * The class {@link Lock.LeaseLost}.
 *
 * @since 0.2.0
 * @category errors
 */
export const LeaseLost: typeof Lock.LeaseLost = Lock.LeaseLost

/**
 * Holds `n` permits while `effect` runs, as `Lock.withLock` holds a lock: acquires them as
 * `options.acquire` says (`Lock.tryOnce`, or `Lock.wait({...})`, the default), renews the lease in the
 * background, and releases on every exit. If the lease is lost, `effect` is interrupted and the whole
 * fails with {@link LeaseLost}. Waiting for n > 1, it holds newcomers back so that it is not starved. Dual:
 * `withPermits(sem, name, n)(effect)` or `withPermits(effect, sem, name, n)`. Options are checked when
 * it is applied (a `renewEvery` that is not longer than zero and shorter than half the lease throws a
 * `RangeError`).
 *
 * @since 0.1.0
 * @category scoped
 */
export const withPermits: {
  <Name extends Redis.KeyName>(
    sem: Semaphore<Name>,
    name: Name,
    n: number,
    options?: Lock.Options
  ): <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E | LeaseLost | Failure, R | Requirements>
  <A, E, R, Name extends Redis.KeyName>(
    effect: Effect.Effect<A, E, R>,
    sem: Semaphore<Name>,
    name: Name,
    n: number,
    options?: Lock.Options
  ): Effect.Effect<A, E | LeaseLost | Failure, R | Requirements>
} = dual(
  (args) => Effect.isEffect(args[0]),
  <A, E, R, Name extends Redis.KeyName>(
    effect: Effect.Effect<A, E, R>,
    sem: Semaphore<Name>,
    name: Name,
    n: number,
    options?: Lock.Options
  ) => internal.withPermits(sem, name, n, options, effect)
)

/**
 * `n` permits held for the rest of the scope: the permit, and `lost`, which fails with {@link LeaseLost} once
 * the lease is lost (race your work against it; {@link withPermits} does this for you).
 *
 * @since 0.1.0
 * @category scoped
 */
export const scoped = <Name extends Redis.KeyName>(
  sem: Semaphore<Name>,
  name: Name,
  n: number,
  options?: Lock.Options
): Effect.Effect<
  { readonly permit: Permit; readonly lost: Effect.Effect<never, LeaseLost> },
  Failure,
  Requirements | Scope.Scope
> => internal.scoped(sem, name, n, options)
