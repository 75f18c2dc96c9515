/**
 * @internal The per-request decision of a rate limit, free of any HTTP server: the limiter, the
 * store-failure policy, the denial memory, the metrics and the IETF fields. Every front end (the
 * `RateLimit` middleware, the proxy's node:http server) keys and costs a request its own way, then asks a
 * {@link Limit} for a {@link Verdict} and renders it.
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Metric from "effect/Metric"
import * as MetricLabel from "effect/MetricLabel"
import * as Option from "effect/Option"
import type * as RateLimit from "../../RateLimit.js"
import * as Redis from "../../Redis.js"
import type * as TokenBucket from "../../TokenBucket.js"
import * as memory from "../memory.js"
import * as denials from "./denials.js"
import * as fields from "./fields.js"

/** @internal */
export const decisions = Metric.counter("wakuwaku_ratelimit_decisions", {
  description: "Rate-limit decisions of wakuwaku/http, by policy and decision",
  incremental: true
})

/** @internal */
export const storeFailures = Metric.counter("wakuwaku_ratelimit_store_failures", {
  description: "Failures of the rate limiter's store seen by wakuwaku/http, by policy and RedisError reason",
  incremental: true
})

const DECISIONS: ReadonlyArray<RateLimit.Decision> = [
  "allowed",
  "denied",
  "unsplittable",
  "fallback-allowed",
  "fallback-denied",
  "fallback-unsplittable",
  "fail-open",
  "fail-closed"
]

/** @internal */
export const FallbackTypeId: RateLimit.FallbackTypeId = Symbol.for(
  "wakuwaku/http/RateLimit/Fallback"
) as RateLimit.FallbackTypeId

/** @internal */
export const isFallback = (u: unknown): u is RateLimit.Fallback =>
  typeof u === "object" && u !== null && FallbackTypeId in u

/** @internal */
export const fallback = (options: { readonly maxEntries: number }): RateLimit.Fallback => {
  const { maxEntries } = options
  if (!Number.isSafeInteger(maxEntries) || maxEntries < 1) {
    throw new RangeError(
      `wakuwaku/http: a fallback's maxEntries must be a positive safe integer, got ${String(maxEntries)}`
    )
  }
  const value: RateLimit.Fallback = {
    _tag: "Fallback",
    [FallbackTypeId]: FallbackTypeId,
    maxEntries,
    store: Redis.makeMemoryStore({ maxKeys: maxEntries })
  }
  return Object.freeze(value)
}

/**
 * @internal What to answer. `pass`: the request goes on, and its response gets `RateLimit-Policy` and, when
 * decided, the `RateLimit` item. Otherwise `status` (429, 413 or 503), `body` (a problem document), and for
 * a 429 `retryAfter` (whole seconds).
 */
export interface Verdict {
  readonly decision: RateLimit.Decision
  readonly pass: boolean
  readonly status: number
  /** The `RateLimit` item, when there is one. */
  readonly limit: string | undefined
  readonly retryAfter: number | undefined
  readonly body: string | undefined
  /** The remaining quota of an allowed request. */
  readonly remaining: number | undefined
}

/** @internal The options a {@link Limit} is made of. */
export interface LimitOptions<LR> {
  readonly limiter: RateLimit.Limiter<LR>
  readonly onStoreFailure: RateLimit.OnStoreFailure
  /** The most names whose denial is remembered; 0 or none: no memory. */
  readonly rememberDenials?: number | undefined
}

/** @internal A rate limit made ready for requests. */
export interface Limit<LR> {
  readonly policy: fields.Described
  /** The denial memory, if any. */
  readonly denials: denials.Denials | undefined
  /** A remembered denial of `name` at `units`, decided now without the store; undefined if none. */
  readonly recall: (name: string, units: number) => Verdict | undefined
  /** Asks the store (or the store-failure policy) and remembers a denial. */
  readonly decide: (name: string, units: number) => Effect.Effect<Verdict, Redis.InvalidInput, LR>
}

export const PROBLEM_JSON = "application/problem+json"
const QUOTA_EXCEEDED = "https://iana.org/assignments/http-problem-types#quota-exceeded"

const STORE_FAILED: Record<"fail-open" | "fail-closed" | "fallback", string> = {
  "fail-open": "wakuwaku/http: the rate limiter's store failed; the request passes (fail-open)",
  "fail-closed": "wakuwaku/http: the rate limiter's store failed; the request is refused with 503 (fail-closed)",
  fallback: "wakuwaku/http: the rate limiter's store failed; the local fallback decides"
}

const UNAVAILABLE = JSON.stringify({
  type: "about:blank",
  title: "Service Unavailable",
  status: 503,
  detail: "The rate limiter's store is unavailable."
})

/** @internal Checks `onStoreFailure`: one of the three, else a `TypeError`. */
export const validPolicy = (onStoreFailure: unknown): RateLimit.OnStoreFailure => {
  if (onStoreFailure !== "fail-open" && onStoreFailure !== "fail-closed" && !isFallback(onStoreFailure)) {
    throw new TypeError(
      `wakuwaku/http: onStoreFailure must be "fail-closed", "fail-open" or RateLimit.fallback(…), got ${
        String(onStoreFailure)
      }`
    )
  }
  return onStoreFailure
}

/** @internal Prepares a limit: checks the options (a `TypeError` or `RangeError` now), counters, bodies. */
export const make = <LR>(options: LimitOptions<LR>): Limit<LR> => {
  const { limiter } = options
  const policy = fields.describe(limiter)
  const onStoreFailure = validPolicy(options.onStoreFailure)
  const remember = denials.validMaxEntries(options.rememberDenials ?? 0, "wakuwaku/http: rememberDenials")
  const memo = remember > 0 ? new denials.Denials(remember) : undefined
  const name = policy.name
  const mode = onStoreFailure === "fail-open" || onStoreFailure === "fail-closed" ? onStoreFailure : "fallback"
  const local = isFallback(onStoreFailure) ? memory.make(onStoreFailure.store) : undefined

  // One label array per decision, kept: the metric caches its hook by the array's identity, so an update is a
  // lookup, not a new tagged key hashed in the registry per request.
  const policyLabel = MetricLabel.make("policy", name)
  const labels = Object.fromEntries(
    DECISIONS.map((decision) => [decision, [policyLabel, MetricLabel.make("decision", decision)]])
  ) as unknown as Record<RateLimit.Decision, ReadonlyArray<MetricLabel.MetricLabel>>
  const count = (decision: RateLimit.Decision) => decisions.unsafeUpdate(1, labels[decision])

  const quoted = fields.sfString(name)
  const denied429 = JSON.stringify({
    type: QUOTA_EXCEEDED,
    title: "Too Many Requests",
    status: 429,
    "violated-policies": [name]
  })
  const denied = (decision: RateLimit.Decision, seconds: number): Verdict => {
    count(decision)
    return {
      decision,
      pass: false,
      status: 429,
      limit: `${quoted};r=0;t=${seconds}`,
      retryAfter: seconds,
      body: denied429,
      remaining: undefined
    }
  }
  const passing = (decision: RateLimit.Decision, limit: string | undefined, remaining?: number): Verdict => {
    count(decision)
    return { decision, pass: true, status: 0, limit, retryAfter: undefined, body: undefined, remaining }
  }
  const refused = (decision: RateLimit.Decision, status: number, body: string): Verdict => {
    count(decision)
    return { decision, pass: false, status, limit: undefined, retryAfter: undefined, body, remaining: undefined }
  }

  /** A limiter's admission as a verdict; a store denial is remembered. */
  const admitted = (
    admission: TokenBucket.Admission,
    units: number,
    viaFallback: boolean,
    key: string,
    sentAt: number
  ): Verdict => {
    if (admission._tag === "Allowed") {
      return passing(
        viaFallback ? "fallback-allowed" : "allowed",
        `${quoted};r=${admission.remaining};t=${policy.effectiveWindow(admission.remaining)}`,
        admission.remaining
      )
    }
    if (Option.isNone(admission.retryAfter)) {
      return refused(
        viaFallback ? "fallback-unsplittable" : "unsplittable",
        413,
        JSON.stringify({
          type: QUOTA_EXCEEDED,
          title: "Request Exceeds the Quota",
          status: 413,
          detail: `This request costs ${units} and the policy allows at most ${policy.quota} at once: split it.`,
          "violated-policies": [name]
        })
      )
    }
    const retryAfter = admission.retryAfter.value
    if (memo !== undefined && !viaFallback) {
      memo.remember(key, units, Duration.toMillis(retryAfter), sentAt, denials.now())
    }
    return denied(viaFallback ? "fallback-denied" : "denied", fields.ceilSeconds(retryAfter))
  }

  /** The store failed: count it, log it, and apply the policy. */
  const onFailure = (
    error: Redis.RedisError,
    key: string,
    units: number
  ): Effect.Effect<Verdict, Redis.InvalidInput, LR> => {
    storeFailures.unsafeUpdate(1, [policyLabel, MetricLabel.make("reason", error.reason)])
    const logged = Effect.logWarning(STORE_FAILED[mode]).pipe(
      Effect.annotateLogs({
        "ratelimit.policy": name,
        "ratelimit.onStoreFailure": mode,
        "ratelimit.storeError": error.message
      })
    )
    if (local === undefined) {
      return Effect.as(
        logged,
        onStoreFailure === "fail-open" ? passing("fail-open", undefined) : refused("fail-closed", 503, UNAVAILABLE)
      )
    }
    return Effect.zipRight(
      logged,
      limiter.acquire(key, units).pipe(
        Effect.provideService(Redis.Redis, local),
        Effect.map((admission) => admitted(admission, units, true, key, 0)),
        // The embedded store does not fail for want of a server; if it ever does, refuse.
        Effect.catchTag("RedisError", () => Effect.sync(() => refused("fail-closed", 503, UNAVAILABLE)))
      )
    )
  }

  return {
    policy,
    denials: memo,
    recall: (key, units) => {
      if (memo === undefined) return undefined
      const ms = memo.recall(key, units)
      return ms === undefined ? undefined : denied("denied", Math.max(1, Math.ceil(ms / 1000)))
    },
    decide: (key, units) =>
      Effect.suspend(() => {
        const sentAt = memo === undefined ? 0 : denials.now()
        return limiter.acquire(key, units).pipe(
          Effect.map((admission) => admitted(admission, units, false, key, sentAt)),
          Effect.catchTag("RedisError", (error) => onFailure(error, key, units))
        )
      })
  }
}
