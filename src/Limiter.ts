/**
 * Limiter: what every kind of rate limiter shares (`TokenBucket`, `FixedWindow`, …), so that the layers
 * above the structures (several limits decided as one, `RateLimit.middleware`, `apiMiddleware`, the IETF
 * header fields, `wakuwaku proxy`) take any kind without knowing it.
 *
 * A limiter carries the shared type id, {@link TypeId}, whose value is its {@link Description}: the
 * policy it states in the header fields (`q`, `w`) and, after an allowed request, how long until its
 * quota is whole again (the fields' `t`). A value without it is no limiter: passing one to the middleware
 * is a compile error.
 *
 * @example
 * ```ts
 * import { FixedWindow, Limiter } from "wakuwaku"
 *
 * const PER_IP = FixedWindow.make<string>("per-ip", 10, "1 second")
 * // { kind: "FixedWindow", quota: 10, window: 1 second, … }
 * export const described: Limiter.Description = PER_IP[Limiter.TypeId]
 * ```
 *
 * @since 0.1.0
 */
import type * as Duration from "effect/Duration"
import type * as Effect from "effect/Effect"
import type * as Admission from "./Admission.js"
import * as internal from "./internal/limiter.js"
import type * as Redis from "./Redis.js"

/**
 * The type id every limiter carries, whichever its kind.
 *
 * @since 0.1.0
 * @category type ids
 */
export const TypeId: unique symbol = internal.LimiterTypeId

/**
 * @since 0.1.0
 * @category type ids
 */
export type TypeId = typeof TypeId

/**
 * An allowed admission.
 *
 * @since 0.1.0
 * @category models
 */
export type Allowed = Extract<Admission.Admission, { readonly _tag: "Allowed" }>

/**
 * What a limiter says of itself.
 *
 * @since 0.1.0
 * @category models
 */
export interface Description {
  /** Its kind, such as `"TokenBucket"`: the structure that made it. */
  readonly kind: string
  /** `q`: the most a client may spend at once (a bucket's capacity, a window's limit). */
  readonly quota: number
  /**
   * `w`: the span over which a client that spends at most `quota` is never denied (the time to refill a
   * bucket from empty, a window's length). The header fields round it up to whole seconds, at least 1.
   */
  readonly window: Duration.Duration
  /**
   * After `allowed`: how long until the quota is whole again if the client spends nothing more, so that
   * within it the client can spend no more than `allowed.remaining` without being denied (the fields' `t`,
   * rounded up to whole seconds).
   */
  readonly resetAfter: (allowed: Allowed) => Duration.Duration
}

/**
 * A limiter keyed by `Name`, whose acquire needs `R`: any kind's. Its {@link TypeId} tells it apart from
 * an object of the same shape that no kind made.
 *
 * @since 0.1.0
 * @category models
 */
export interface Limiter<in Name extends Redis.KeyName, out R> {
  readonly [TypeId]: Description
  /** Keeps this limiter's keys apart from every other's; names its policy in the header fields. */
  readonly namespace: string
  /** Spends `cost` (a non-negative safe integer) for `name` if the limiter allows it. A denial spends nothing. */
  readonly acquire: (
    name: Name,
    cost: number
  ) => Effect.Effect<Admission.Admission, Redis.RedisError | Redis.InvalidInput, R>
}

/**
 * Whether a value is a limiter, of any kind.
 *
 * @since 0.1.0
 * @category guards
 */
export const isLimiter: (u: unknown) => u is Limiter<never, unknown> = internal.isLimiter
