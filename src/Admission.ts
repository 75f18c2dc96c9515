/**
 * Admission: the outcome of a rate limiter's acquire, the same for every limiter (`TokenBucket`,
 * `FixedWindow`).
 *
 * - `Allowed`: the request was counted. `remaining` is what is left: a token bucket's whole tokens, a
 *   fixed window's count left in the current window. A fixed window's also says when that window ends,
 *   `resetAfter` (whole milliseconds, rounded up, so never early: the count starts again then); a token
 *   bucket's has none, since its tokens come back continuously.
 * - `Denied`: nothing was counted. `retryAfter` is how long until the same request would be allowed if
 *   nothing else spends in the meantime (whole milliseconds, rounded up), or `None` when it never can,
 *   because its cost exceeds the limiter's quota: split the request instead of retrying.
 *
 * @since 0.1.0
 */
import * as Data from "effect/Data"
import type * as Duration from "effect/Duration"
import type * as Option from "effect/Option"

/**
 * @since 0.1.0
 * @category models
 */
export type Admission = Data.TaggedEnum<{
  Allowed: { readonly remaining: number; readonly resetAfter?: Duration.Duration }
  Denied: { readonly retryAfter: Option.Option<Duration.Duration> }
}>

/**
 * Constructors and matchers of {@link Admission}: `Admission.Allowed({ remaining })`, `Admission.$is`,
 * `Admission.$match`.
 *
 * @since 0.1.0
 * @category constructors
 */
export const Admission: Data.TaggedEnum.Constructor<Admission> = Data.taggedEnum<Admission>()
