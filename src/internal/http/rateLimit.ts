/** @internal The middleware: key, cost, decision, response, and what to do when the store fails. */
import * as HttpApp from "@effect/platform/HttpApp"
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import * as Effect from "effect/Effect"
import * as Metric from "effect/Metric"
import * as Option from "effect/Option"
import * as Tracer from "effect/Tracer"
import type * as ClientIp from "../../ClientIp.js"
import type * as RateLimit from "../../RateLimit.js"
import * as Redis from "../../Redis.js"
import type * as TokenBucket from "../../TokenBucket.js"
import * as memory from "../memory.js"
import * as clientIp from "./clientIp.js"
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

const isFallback = (u: unknown): u is RateLimit.Fallback => typeof u === "object" && u !== null && FallbackTypeId in u

/** @internal */
export const clientIpKey = (options?: ClientIp.Options): RateLimit.Key => clientIp.make(options)

/** @internal */
export const header = <E = never, R = never>(
  name: string,
  options?: { readonly orElse?: RateLimit.Key<E, R> | undefined }
): RateLimit.Key<E, R> => {
  const lower = name.toLowerCase()
  const orElse: RateLimit.Key<E, R> = options?.orElse ?? clientIpKey()
  return (request) => {
    const value = request.headers[lower]
    return value === undefined || value === "" ? orElse(request) : value
  }
}

/**
 * `Effect.annotateCurrentSpan`, without its cost when there is no span (a server with its tracer
 * disabled): that one fails internally with a `NoSuchElementException`, stack trace and all.
 */
const annotate = (attributes: Record<string, unknown>): Effect.Effect<void> =>
  Effect.map(Effect.serviceOption(Tracer.ParentSpan), (span) => {
    if (Option.isNone(span) || span.value._tag !== "Span") return
    for (const name in attributes) span.value.attribute(name, attributes[name])
  })

const evaluate = <A, E, R>(value: A | Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.isEffect(value) ? value : Effect.succeed(value)

const PROBLEM_JSON = "application/problem+json"
const QUOTA_EXCEEDED = "https://iana.org/assignments/http-problem-types#quota-exceeded"

type Outcome =
  | { readonly _tag: "Decided"; readonly admission: TokenBucket.Admission; readonly fallback: boolean }
  | { readonly _tag: "FailOpen" }
  | { readonly _tag: "FailClosed" }

const STORE_FAILED: Record<"fail-open" | "fail-closed" | "fallback", string> = {
  "fail-open": "wakuwaku/http: the rate limiter's store failed; the request passes (fail-open)",
  "fail-closed": "wakuwaku/http: the rate limiter's store failed; the request is refused with 503 (fail-closed)",
  fallback: "wakuwaku/http: the rate limiter's store failed; the local fallback decides"
}

/** @internal */
export const middleware = <LR, KE, KR, CE, CR>(options: RateLimit.Options<LR, KE, KR, CE, CR>) => {
  const { limiter, onStoreFailure } = options
  const policy = fields.describe(limiter)
  if (onStoreFailure !== "fail-open" && onStoreFailure !== "fail-closed" && !isFallback(onStoreFailure)) {
    throw new TypeError(
      `wakuwaku/http: onStoreFailure must be "fail-closed", "fail-open" or RateLimit.fallback(…), got ${
        String(onStoreFailure)
      }`
    )
  }
  const key: RateLimit.Key<KE, KR> = options.key ?? clientIpKey()
  const cost = options.cost
  const policyName = policy.name
  const mode = onStoreFailure === "fail-open" || onStoreFailure === "fail-closed" ? onStoreFailure : "fallback"
  const local = isFallback(onStoreFailure) ? memory.make(onStoreFailure.store) : undefined

  const counters = Object.fromEntries(
    DECISIONS.map((
      decision
    ) => [decision, Metric.tagged(Metric.tagged(decisions, "policy", policyName), "decision", decision)])
  ) as Record<RateLimit.Decision, Metric.Metric.Counter<number>>
  const observe = (decision: RateLimit.Decision, attributes: Record<string, unknown>) =>
    Effect.zipRight(
      Metric.increment(counters[decision]),
      annotate({ "ratelimit.policy": policyName, "ratelimit.decision": decision, ...attributes })
    )

  /** The store failed: count it, log it, and apply the policy. */
  const onFailure = (
    error: Redis.RedisError,
    name: string,
    units: number
  ): Effect.Effect<Outcome, Redis.InvalidInput, LR> =>
    Effect.zipRight(
      Effect.zipRight(
        Metric.increment(Metric.tagged(Metric.tagged(storeFailures, "policy", policyName), "reason", error.reason)),
        Effect.logWarning(STORE_FAILED[mode]).pipe(
          Effect.annotateLogs({
            "ratelimit.policy": policyName,
            "ratelimit.onStoreFailure": mode,
            "ratelimit.storeError": error.message
          })
        )
      ),
      local === undefined
        ? Effect.succeed<Outcome>({ _tag: onStoreFailure === "fail-open" ? "FailOpen" : "FailClosed" })
        : limiter.acquire(name, units).pipe(
          Effect.provideService(Redis.Redis, local),
          Effect.map((admission): Outcome => ({ _tag: "Decided", admission, fallback: true })),
          // The embedded store does not fail for want of a server; if it ever does, refuse.
          Effect.catchTag("RedisError", () => Effect.succeed<Outcome>({ _tag: "FailClosed" }))
        )
    )

  const withFields = (response: HttpServerResponse.HttpServerResponse, limit: string | undefined) => {
    const withPolicy = HttpServerResponse.setHeader(
      response,
      "ratelimit-policy",
      fields.appendItem(response.headers["ratelimit-policy"], policy.field)
    )
    return limit === undefined
      ? withPolicy
      : HttpServerResponse.setHeader(withPolicy, "ratelimit", fields.appendItem(response.headers["ratelimit"], limit))
  }

  const problem = (
    status: number,
    body: Record<string, unknown>,
    limit: string | undefined,
    headers: Record<string, string>
  ) =>
    withFields(
      HttpServerResponse.text(JSON.stringify(body), { status, contentType: PROBLEM_JSON, headers }),
      limit
    )

  return <E, R>(app: HttpApp.Default<E, R>): HttpApp.Default<E | KE | CE | Redis.InvalidInput, R | LR | KR | CR> => {
    /** Runs the app and puts the fields on its response, or on the error response the server makes of its failure. */
    const pass = (limit: string | undefined) =>
      Effect.map(
        Effect.tapErrorCause(
          app,
          () => HttpApp.appendPreResponseHandler((_request, response) => Effect.succeed(withFields(response, limit)))
        ),
        (response) => withFields(response, limit)
      )

    return Effect.gen(function*() {
      const request = yield* HttpServerRequest.HttpServerRequest
      const name = yield* evaluate(key(request))
      const units = cost === undefined ? 1 : yield* evaluate(cost(request))
      const outcome = yield* limiter.acquire(name, units).pipe(
        Effect.map((admission): Outcome => ({ _tag: "Decided", admission, fallback: false })),
        Effect.catchTag("RedisError", (error) => onFailure(error, name, units))
      )
      switch (outcome._tag) {
        case "FailOpen": {
          yield* observe("fail-open", { "ratelimit.cost": units })
          return yield* pass(undefined)
        }
        case "FailClosed": {
          yield* observe("fail-closed", { "ratelimit.cost": units })
          return problem(
            503,
            {
              type: "about:blank",
              title: "Service Unavailable",
              status: 503,
              detail: "The rate limiter's store is unavailable."
            },
            undefined,
            {}
          )
        }
        case "Decided": {
          const { admission, fallback: viaFallback } = outcome
          if (admission._tag === "Allowed") {
            yield* observe(viaFallback ? "fallback-allowed" : "allowed", {
              "ratelimit.cost": units,
              "ratelimit.remaining": admission.remaining
            })
            return yield* pass(
              fields.limitField(policyName, admission.remaining, policy.effectiveWindow(admission.remaining))
            )
          }
          if (Option.isNone(admission.retryAfter)) {
            yield* observe(viaFallback ? "fallback-unsplittable" : "unsplittable", { "ratelimit.cost": units })
            return problem(
              413,
              {
                type: QUOTA_EXCEEDED,
                title: "Request Exceeds the Quota",
                status: 413,
                detail: `This request costs ${units} and the policy allows at most ${policy.quota} at once: split it.`,
                "violated-policies": [policyName]
              },
              undefined,
              {}
            )
          }
          const seconds = fields.ceilSeconds(admission.retryAfter.value)
          yield* observe(viaFallback ? "fallback-denied" : "denied", {
            "ratelimit.cost": units,
            "ratelimit.retry_after": seconds
          })
          return problem(
            429,
            {
              type: QUOTA_EXCEEDED,
              title: "Too Many Requests",
              status: 429,
              "violated-policies": [policyName]
            },
            fields.limitField(policyName, 0, seconds),
            { "retry-after": String(seconds) }
          )
        }
      }
    })
  }
}
