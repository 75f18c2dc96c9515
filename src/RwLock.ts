/**
 * RwLock: a leased reader-writer lock across replicas. One writer or any number of readers per name;
 * a lease keeps a crashed holder from blocking everyone.
 *
 * **What lives in Redis.** Per name, keys in one cluster hash slot (`{<namespace>:<name>}`):
 * - `…:writer`, the writer's token, expiring with its lease;
 * - `…:readers`, a sorted set of reader tokens scored by the end of their lease in server
 *   microseconds, expiring with the longest lease;
 * - `…:intent`, while a writer waits: its token, for at most one lease;
 * - `…:fence`, the last writer fence, expiring with the lease.
 *
 * **Guarantees.**
 * - A read is granted when there is no writer (and no writer waiting); a write when there is no
 *   writer and no live reader. Expired readers are pruned on every operation, on the server's clock,
 *   so a crashed reader never blocks a writer for longer than its lease.
 * - Every write grant carries a strictly increasing `fence`, as {@link Lock} does.
 * - No writer starvation: a writer waiting through {@link withWrite} leaves an intent on each refused
 *   attempt, which holds new readers back until it gets in (or gives up, or a lease passes).
 *
 * **Caveats.** The try-only {@link RwLock.tryWrite} leaves no intent, so a steady stream of readers can
 * starve it: that is the trade-off of never waiting. Leases do not by themselves guarantee exclusion
 * against a paused holder; use the fence (docs/locks.md).
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { Redis, RwLock } from "wakuwaku"
 *
 * export const DOCS = RwLock.make<string>("doc", "10 seconds")
 *
 * export const edit = (doc: string) => RwLock.withWrite(DOCS, doc)(Effect.log(`editing ${doc}`))
 *
 * // The layer once, at the program's edge, not per call: each provide builds a client.
 * export const main = edit("readme").pipe(Effect.provide(Redis.layer({ url: "redis://127.0.0.1:6379" })))
 * ```
 *
 * @since 0.1.0
 */
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import { dual } from "effect/Function"
import type * as Inspectable from "effect/Inspectable"
import type * as Option from "effect/Option"
import type * as Scope from "effect/Scope"
import type * as Capability from "./Capability.js"
import * as internal from "./internal/rwLock.js"
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
 * Whether a value is a reader-writer lock made by {@link make}.
 *
 * @since 0.2.0
 * @category guards
 */
export const isRwLock: (u: unknown) => u is RwLock<never> = internal.isRwLock

/**
 * @since 0.1.0
 * @category capabilities
 */
export type Entity = Capability.Entity<"RwLock">

/**
 * @since 0.1.0
 * @category capabilities
 */
export const entity: Entity = internal.entity

/**
 * What an operation needs: `Redis` and the right to write (`Requirements<"write">`, the default) or read
 * reader-writer locks, as every structure's `Requirements` says it. Every operation writes, `tryRead` included.
 *
 * @since 0.1.0
 * @category capabilities
 */
export type Requirements<Access extends "read" | "write" = "write"> =
  | Redis.Redis
  // Spelled out rather than through the `Entity` alias, so that compile errors name the entity.
  | (Access extends "write" ? Capability.Write<Capability.Entity<"RwLock">>
    : Capability.Read<Capability.Entity<"RwLock">>)

/**
 * The proof of a read lease. Its secret never appears in `toString`, `inspect` or JSON.
 *
 * @since 0.1.0
 * @category models
 */
export interface ReadToken extends Inspectable.Inspectable {
  readonly namespace: string
  /** The name, as encoded into the key. */
  readonly name: string
  /** Ends the read lease: `false` when it had already run out. */
  readonly release: Effect.Effect<boolean, Redis.RedisError, Requirements>
  /** Restarts the read lease: `false` when it had already run out. */
  readonly extend: Effect.Effect<boolean, Redis.RedisError, Requirements>
}

/**
 * The write side's token: a {@link Lock.Token} whose operations need this lock's capability.
 *
 * @since 0.1.0
 * @category models
 */
export type WriteToken = Lock.Token<Requirements>

/**
 * A leased reader-writer lock: a plain immutable value, declared once as a module-level constant.
 *
 * @since 0.1.0
 * @category models
 */
export interface RwLock<in Name extends Redis.KeyName> {
  readonly [TypeId]: TypeId
  /** A one-line description for logs. */
  toString(): string
  readonly namespace: string
  /** The lease of each reader and of the writer. */
  readonly ttl: Duration.Duration
  /** A read lease, if there is no writer and no writer waiting. Never waits. */
  readonly tryRead: (
    name: Name
  ) => Effect.Effect<Option.Option<ReadToken>, Redis.RedisError | Redis.InvalidInput, Requirements>
  /** The write lease, if there is no writer and no live reader. Never waits, and leaves no intent. */
  readonly tryWrite: (
    name: Name
  ) => Effect.Effect<Option.Option<WriteToken>, Redis.RedisError | Redis.InvalidInput, Requirements>
}

/**
 * Declares a reader-writer lock with a lease of `ttl` (under a millisecond counts as one). A `ttl`
 * that is not a duration longer than zero and at most 10^11 ms (about 3.2 years) throws a
 * `RangeError`, and a namespace that is not a short word a `TypeError`.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = <Name extends Redis.KeyName = string>(
  namespace: string,
  ttl: Duration.DurationInput
): RwLock<Name> => internal.make<Name>(namespace, ttl)

/**
 * {@link RwLock.tryRead} as a module function,
 * beside the method `rw.tryRead(name)`. Dual: `tryRead(rw, name)` or `tryRead(name)(rw)`.
 *
 * @since 0.2.0
 * @category operations
 */
export const tryRead: {
  <Name extends Redis.KeyName>(
    name: Name
  ): (rw: RwLock<Name>) => Effect.Effect<Option.Option<ReadToken>, Redis.RedisError | Redis.InvalidInput, Requirements>
  <Name extends Redis.KeyName>(
    rw: RwLock<Name>,
    name: Name
  ): Effect.Effect<Option.Option<ReadToken>, Redis.RedisError | Redis.InvalidInput, Requirements>
} = dual(
  (args) => internal.isRwLock(args[0]),
  <Name extends Redis.KeyName>(
    rw: RwLock<Name>,
    name: Name
  ): Effect.Effect<Option.Option<ReadToken>, Redis.RedisError | Redis.InvalidInput, Requirements> => rw.tryRead(name)
)

/**
 * {@link RwLock.tryWrite} as a module function,
 * beside the method `rw.tryWrite(name)`. Dual: `tryWrite(rw, name)` or `tryWrite(name)(rw)`.
 *
 * @since 0.2.0
 * @category operations
 */
export const tryWrite: {
  <Name extends Redis.KeyName>(
    name: Name
  ): (rw: RwLock<Name>) => Effect.Effect<Option.Option<WriteToken>, Redis.RedisError | Redis.InvalidInput, Requirements>
  <Name extends Redis.KeyName>(
    rw: RwLock<Name>,
    name: Name
  ): Effect.Effect<Option.Option<WriteToken>, Redis.RedisError | Redis.InvalidInput, Requirements>
} = dual(
  (args) => internal.isRwLock(args[0]),
  <Name extends Redis.KeyName>(
    rw: RwLock<Name>,
    name: Name
  ): Effect.Effect<Option.Option<WriteToken>, Redis.RedisError | Redis.InvalidInput, Requirements> => rw.tryWrite(name)
)

/**
 * What the scoped forms fail with, besides {@link LeaseLost}: {@link Lock.Failure}.
 *
 * @since 0.2.0
 * @category errors
 */
export type Failure = Lock.Failure

/**
 * The read or write lease was held by someone else for as long as the acquisition policy allowed: the
 * class {@link Lock.LeaseUnavailable}, which every leased structure fails with.
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
 * A held read or write lease was lost: the class {@link Lock.LeaseLost}, which every leased structure
 * fails with.
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
 * Holds a read lease while `effect` runs, as {@link Lock.withLock} does. Dual: `withRead(rw, name)(effect)`
 * or `withRead(effect, rw, name)`.
 *
 * @since 0.1.0
 * @category scoped
 */
export const withRead: {
  <Name extends Redis.KeyName>(
    rw: RwLock<Name>,
    name: Name,
    options?: Lock.Options
  ): <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E | LeaseLost | Failure, R | Requirements>
  <A, E, R, Name extends Redis.KeyName>(
    effect: Effect.Effect<A, E, R>,
    rw: RwLock<Name>,
    name: Name,
    options?: Lock.Options
  ): Effect.Effect<A, E | LeaseLost | Failure, R | Requirements>
} = dual(
  (args) => Effect.isEffect(args[0]),
  <A, E, R, Name extends Redis.KeyName>(
    effect: Effect.Effect<A, E, R>,
    rw: RwLock<Name>,
    name: Name,
    options?: Lock.Options
  ) => internal.withRead(rw, name, options, effect)
)

/**
 * Holds the write lease while `effect` runs, as {@link Lock.withLock} does. While it waits, new
 * readers are held back, so it is not starved. Dual, as {@link withRead}.
 *
 * @since 0.1.0
 * @category scoped
 */
export const withWrite: {
  <Name extends Redis.KeyName>(
    rw: RwLock<Name>,
    name: Name,
    options?: Lock.Options
  ): <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E | LeaseLost | Failure, R | Requirements>
  <A, E, R, Name extends Redis.KeyName>(
    effect: Effect.Effect<A, E, R>,
    rw: RwLock<Name>,
    name: Name,
    options?: Lock.Options
  ): Effect.Effect<A, E | LeaseLost | Failure, R | Requirements>
} = dual(
  (args) => Effect.isEffect(args[0]),
  <A, E, R, Name extends Redis.KeyName>(
    effect: Effect.Effect<A, E, R>,
    rw: RwLock<Name>,
    name: Name,
    options?: Lock.Options
  ) => internal.withWrite(rw, name, options, effect)
)

/**
 * A read lease held for the rest of the scope, with `lost`, as {@link Lock.scoped}.
 *
 * @since 0.1.0
 * @category scoped
 */
export const scopedRead = <Name extends Redis.KeyName>(
  rw: RwLock<Name>,
  name: Name,
  options?: Lock.Options
): Effect.Effect<
  { readonly token: ReadToken; readonly lost: Effect.Effect<never, LeaseLost> },
  Failure,
  Requirements | Scope.Scope
> => internal.scopedRead(rw, name, options)

/**
 * The write lease held for the rest of the scope, with `lost`, as {@link Lock.scoped}.
 *
 * @since 0.1.0
 * @category scoped
 */
export const scopedWrite = <Name extends Redis.KeyName>(
  rw: RwLock<Name>,
  name: Name,
  options?: Lock.Options
): Effect.Effect<
  { readonly token: WriteToken; readonly lost: Effect.Effect<never, LeaseLost> },
  Failure,
  Requirements | Scope.Scope
> => internal.scopedWrite(rw, name, options)
