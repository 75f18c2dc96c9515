/**
 * @internal The rate-limit header fields of draft-ietf-httpapi-ratelimit-headers-11 (Structured Field
 * Lists, RFC 9651): a limiter's policy (`"<name>";q=<quota>;w=<window s>`), the service limit after a
 * decision (`"<name>";r=<remaining>;t=<seconds>`), and whole seconds for `Retry-After`.
 */
import * as Duration from "effect/Duration"
import * as Limiter from "../../Limiter.js"
import type * as RateLimit from "../../RateLimit.js"

/** @internal */
export const DRAFT = "draft-ietf-httpapi-ratelimit-headers-11"

/** @internal An sf-string: quoted, with `\` and `"` escaped (a namespace never holds either). */
export const sfString = (s: string): string => `"${s.replace(/[\\"]/g, (c) => `\\${c}`)}"`

const ceilDiv = (a: bigint, b: bigint): bigint => (a + b - 1n) / b

const NANOS_PER_SECOND = 1_000_000_000n

/** @internal Whole seconds, rounded up, never negative. */
export const ceilSeconds = (duration: Duration.Duration): number => {
  const nanos = Duration.unsafeToNanos(duration)
  return nanos <= 0n ? 0 : Number(ceilDiv(nanos, NANOS_PER_SECOND))
}

/** @internal A policy, and how long after an allowed request the client may spend no more than what is left. */
export interface Described extends RateLimit.Policy {
  /** The limiter's kind, such as `TokenBucket`. */
  readonly kind: string
  /** `t` of an allowed request, from its admission. */
  readonly effectiveWindow: (allowed: Allowed) => number
}

/** @internal An allowed admission. */
export type Allowed = Limiter.Allowed

/**
 * @internal The policy of a limiter, as it describes itself (the shared type id's value, `Limiter.Description`):
 * q = its quota, w = its window in whole seconds rounded up (at least 1). `t` of an allowed request is when
 * the quota is whole again if the client spends nothing more (its `resetAfter`), rounded up: within it the
 * client "can use no more than the available quota" (the draft's §4.1.2) without being denied.
 * - A token bucket: q = capacity, w = the time to refill it from empty; after an allowed request, t = the
 *   time until the bucket is full again.
 * - A fixed window: q = limit, w = the window; after an allowed request t = the seconds left in the current
 *   window, as the draft's own fixed-window example (its appendix B.2.1) reports it; a denial's
 *   `Retry-After` names the same end.
 *
 * Throws a `TypeError` on a value no limiter kind made (the types refuse it too).
 */
export const describe = (limiter: RateLimit.Limiter<unknown>): Described => {
  const value: unknown = limiter
  if (!Limiter.isLimiter(value)) {
    throw new TypeError(
      `wakuwaku/http: ${
        typeof value === "object" && value !== null && "namespace" in value
          ? `the limiter ${String(value.namespace)}`
          : String(value)
      } is no limiter (made by a kind's make, such as TokenBucket.make or FixedWindow.make)`
    )
  }
  const name = limiter.namespace
  const { kind, quota, resetAfter } = limiter[Limiter.TypeId]
  const window = Math.max(1, ceilSeconds(limiter[Limiter.TypeId].window))
  return {
    kind,
    name,
    quota,
    window: Duration.seconds(window),
    field: `${sfString(name)};q=${quota};w=${window}`,
    effectiveWindow: (allowed) => ceilSeconds(resetAfter(allowed))
  }
}

/** @internal The service-limit item of a policy. */
export const limitField = (name: string, remaining: number, seconds: number): string =>
  `${sfString(name)};r=${remaining};t=${seconds}`

/** @internal `field` appended to a list-valued header that may already hold items (of other policies). */
export const appendItem = (existing: string | undefined, item: string): string =>
  existing === undefined || existing === "" ? item : `${existing}, ${item}`
