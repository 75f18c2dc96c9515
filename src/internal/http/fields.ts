/**
 * @internal The rate-limit header fields of draft-ietf-httpapi-ratelimit-headers-11 (Structured Field
 * Lists, RFC 9651): a limiter's policy (`"<name>";q=<quota>;w=<window s>`), the service limit after a
 * decision (`"<name>";r=<remaining>;t=<seconds>`), and whole seconds for `Retry-After`.
 */
import * as Duration from "effect/Duration"
import * as FixedWindow from "../../FixedWindow.js"
import type * as RateLimit from "../../RateLimit.js"
import * as TokenBucket from "../../TokenBucket.js"

/** @internal */
export const DRAFT = "draft-ietf-httpapi-ratelimit-headers-11"

/** @internal An sf-string: quoted, with `\` and `"` escaped (a namespace never holds either). */
export const sfString = (s: string): string => `"${s.replace(/[\\"]/g, (c) => `\\${c}`)}"`

const ceilDiv = (a: bigint, b: bigint): bigint => (a + b - 1n) / b

const NANOS_PER_SECOND = 1_000_000_000n
const MICROS_PER_SECOND = 1_000_000n

/** @internal Whole seconds, rounded up, never negative. */
export const ceilSeconds = (duration: Duration.Duration): number => {
  const nanos = Duration.unsafeToNanos(duration)
  return nanos <= 0n ? 0 : Number(ceilDiv(nanos, NANOS_PER_SECOND))
}

/** @internal A policy, and how long after an allowed request the client may spend no more than what is left. */
export interface Described extends RateLimit.Policy {
  readonly kind: "TokenBucket" | "FixedWindow"
  /** `t` of an allowed request, from its admission. */
  readonly effectiveWindow: (allowed: Allowed) => number
}

/** @internal An allowed admission. */
export type Allowed = Extract<TokenBucket.Admission, { readonly _tag: "Allowed" }>

const isTokenBucket = (limiter: RateLimit.Limiter<unknown>): limiter is RateLimit.TokenBucketLimiter<unknown> =>
  TokenBucket.isTokenBucket(limiter)

const isFixedWindow = (limiter: RateLimit.Limiter<unknown>): limiter is RateLimit.FixedWindowLimiter<unknown> =>
  FixedWindow.isFixedWindow(limiter)

/**
 * @internal The policy of a limiter. `t` of an allowed request is when the quota is whole again if the client
 * spends nothing more, rounded up: within it the client "can use no more than the available quota" (the
 * draft's §4.1.2) without being denied.
 * - A token bucket: q = capacity, w = the time to refill it from empty, in whole seconds rounded up
 *   (at least 1); a client that spends at most q in every w seconds is never denied. After an allowed
 *   request, t = the time until the bucket is full again: (capacity - remaining) tokens, rounded up.
 *   `remaining` is the floor of the fractional level, so t is never early.
 * - A fixed window: q = limit, w = the window in whole seconds rounded up (at least 1). After an
 *   allowed request t = the seconds left in the current window (the store's `resetAfter`, rounded up),
 *   as the draft's own fixed-window example (its appendix B.2.1) reports it; a denial's `Retry-After` names
 *   the same end.
 */
export const describe = (limiter: RateLimit.Limiter<unknown>): Described => {
  const name = limiter.namespace
  if (typeof name !== "string") {
    throw new TypeError("wakuwaku/http: a limiter needs a namespace (a TokenBucket or a FixedWindow)")
  }
  if (isTokenBucket(limiter)) {
    const { capacity, rate } = limiter
    const period = BigInt(rate.periodMicros)
    const tokens = BigInt(rate.tokens) * MICROS_PER_SECOND
    const secondsFor = (count: number) => Number(ceilDiv(BigInt(Math.max(0, count)) * period, tokens))
    const window = Math.max(1, secondsFor(capacity))
    return {
      kind: "TokenBucket",
      name,
      quota: capacity,
      window: Duration.seconds(window),
      field: `${sfString(name)};q=${capacity};w=${window}`,
      effectiveWindow: (allowed) => secondsFor(capacity - allowed.remaining)
    }
  }
  if (isFixedWindow(limiter)) {
    const window = Math.max(1, ceilSeconds(limiter.window))
    return {
      kind: "FixedWindow",
      name,
      quota: limiter.limit,
      window: Duration.seconds(window),
      field: `${sfString(name)};q=${limiter.limit};w=${window}`,
      // An admission always says when its window ends; one made otherwise reads as the whole window.
      effectiveWindow: (allowed) => allowed.resetAfter === undefined ? window : ceilSeconds(allowed.resetAfter)
    }
  }
  throw new TypeError(
    `wakuwaku/http: the limiter ${name} is neither a TokenBucket (TokenBucket.make) nor a FixedWindow (FixedWindow.make)`
  )
}

/** @internal The service-limit item of a policy. */
export const limitField = (name: string, remaining: number, seconds: number): string =>
  `${sfString(name)};r=${remaining};t=${seconds}`

/** @internal `field` appended to a list-valued header that may already hold items (of other policies). */
export const appendItem = (existing: string | undefined, item: string): string =>
  existing === undefined || existing === "" ? item : `${existing}, ${item}`
