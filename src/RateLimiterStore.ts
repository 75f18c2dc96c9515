/**
 * RateLimiterStore: wakuwaku as the store behind `@effect/experimental`'s `RateLimiter`. Code written
 * against `RateLimiter.consume` (or `makeWithRateLimiter`, `makeSleep`) keeps working as it is; provide
 * `RateLimiter.layer` with {@link layer} in place of the experimental Redis store
 * (`RateLimiter/Redis.layerStore`). Import it from `wakuwaku/RateLimiterStore`; it needs
 * `@effect/experimental` (an optional peer, which the core `wakuwaku` never loads).
 *
 * Both algorithms of the store contract: `fixedWindow` is the contract's own (a window opens at its first
 * count and lasts `refillRate` per token counted, so a full window after `limit` tokens: the arithmetic
 * `consume` computes its delays from), `tokenBucket` is `TokenBucket`'s (continuous refill), with the
 * contract's `allowOverflow`.
 *
 * **What lives in Redis.** One string per key:
 * - `@@wakuwaku:RateLimiterStore:<namespace>:fixed-window:<key>` holding `"<end µs> <count>"`, with a TTL
 *   until the window ends;
 * - `@@wakuwaku:RateLimiterStore:<namespace>:token-bucket:<key>` holding `TokenBucket`'s `"<tokens> <ts>"`,
 *   with a TTL until the bucket is full again; a full bucket has no key.
 *
 * **Guarantees.**
 * - The server's clock: both scripts read Redis `TIME` (Effect's `Clock` on the embedded backend, so
 *   `RateLimiter`'s own tests run under `TestClock` there). The experimental Redis store's token bucket
 *   sends the client's clock instead.
 * - Every key has a TTL, on a Cluster too: each call touches one key, given in `KEYS`.
 * - One script call per `consume`, atomic; `consume`s in flight together on one shape (the same limit
 *   and window) share one call of a batch script, as `TokenBucket.acquire`s do.
 * - The capability is in the layer's type: `Redis | Write<RateLimiterStore.Entity>`, so a layer built
 *   over a read-only replica does not compile.
 * - Bad input (a fractional or negative `tokens` or `limit`, a `refillRate` under 1 µs, a key that
 *   cannot be encoded) fails with `RateLimitStoreError`, its `cause` an `InvalidInput`; nothing is sent.
 *
 * **Where the contract and the server's clock differ** (docs/effect-ratelimiter.md has the details).
 * The contract carries whole tokens and milliseconds, so each figure is rounded in the direction that
 * never sends a caller back too early:
 * - a token-bucket `retryAfter` or `delay` is refillRate × the whole tokens missing, up to one
 *   refillRate longer than the continuously refilling bucket needs;
 * - `refillRate` becomes whole microseconds: up for a window's length, down for a bucket's refill;
 * - a window's remaining time is whole milliseconds, rounded up.
 *
 * @example
 * ```ts
 * import { RateLimiter } from "@effect/experimental"
 * import { Effect, Layer } from "effect"
 * import { Redis } from "wakuwaku"
 * import * as RateLimiterStore from "wakuwaku/RateLimiterStore"
 *
 * // The code that limits is RateLimiter's, unchanged.
 * const program = Effect.gen(function*() {
 *   const limiter = yield* RateLimiter.RateLimiter
 *   return yield* limiter.consume({ key: "user-42", limit: 10, window: "1 minute", algorithm: "token-bucket" })
 * })
 *
 * // Only the store changes: Layer<RateLimiterStore, never, Redis | Write<RateLimiterStore.Entity>>.
 * const Limiter = RateLimiter.layer.pipe(Layer.provide(RateLimiterStore.layer()))
 *
 * export const main = program.pipe(
 *   Effect.provide(Limiter),
 *   Effect.provide(Redis.layer({ url: "redis://127.0.0.1:6379" }))
 * )
 * ```
 *
 * @since 0.1.0
 */
import type * as RateLimiter from "@effect/experimental/RateLimiter"
import type * as Effect from "effect/Effect"
import type * as Layer from "effect/Layer"
import type * as Capability from "./Capability.js"
import * as internal from "./internal/rateLimiterStore.js"
import type * as Redis from "./Redis.js"

/**
 * The entity the store writes: both of its algorithms' keys.
 *
 * @since 0.1.0
 * @category capabilities
 */
export type Entity = Capability.Entity<"RateLimiterStore">

/**
 * @since 0.1.0
 * @category capabilities
 */
export const entity: Entity = internal.entity

/**
 * What an operation needs: `Redis` and the right to write (`Requirements<"write">`, the default) or read
 * the store's keys, as every structure's `Requirements` says it. Every call writes.
 *
 * @since 0.1.0
 * @category capabilities
 */
export type Requirements<Access extends "read" | "write" = "write"> =
  | Redis.Redis
  // Spelled out rather than through the `Entity` alias, so that compile errors name the entity.
  | (Access extends "write" ? Capability.Write<Capability.Entity<"RateLimiterStore">>
    : Capability.Read<Capability.Entity<"RateLimiterStore">>)

/**
 * @since 0.1.0
 * @category models
 */
export interface Options {
  /**
   * The keys' namespace: 1 to 64 letters, digits, `_`, `.` or `-`. Default `ratelimiter` (the
   * experimental Redis store's default prefix, `ratelimiter:`). Stores of different namespaces share
   * no key.
   */
  readonly namespace?: string | undefined
}

/**
 * The store, on the `Redis` service in context (checked to grant writes of {@link Entity} once, here).
 * Throws a `TypeError` on a bad namespace.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make: (options?: Options) => Effect.Effect<RateLimiter.RateLimiterStore["Type"], never, Requirements> =
  internal.make

/**
 * The store as a layer, for `RateLimiter.layer`. Throws a `TypeError` on a bad namespace.
 *
 * @since 0.1.0
 * @category layers
 */
export const layer: (options?: Options) => Layer.Layer<RateLimiter.RateLimiterStore, never, Requirements> =
  internal.layer
