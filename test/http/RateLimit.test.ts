/**
 * The middleware over real sockets, on Redis and on the memory backend: statuses, exact header values
 * (draft-ietf-httpapi-ratelimit-headers-11), bodies, metrics and span attributes.
 */
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import { expect } from "@effect/vitest"
import { Duration, Effect, Metric } from "effect"
import fc from "fast-check"
import { describe, it as plain } from "vitest"
import { FixedWindow, Rate, TokenBucket } from "wakuwaku"
import { RateLimit } from "wakuwaku/http"
import { forEachBackend } from "../support/backends.js"
import { fields, get, recordingTracer, serve } from "../support/http.js"
import { freshNamespace } from "../support/redis.js"

const hello = Effect.succeed(HttpServerResponse.text("hello"))

/** The cost of a request: its `x-cost` header, 1 without one. */
const costHeader = (request: HttpServerRequest.HttpServerRequest) => Number(request.headers["x-cost"] ?? "1")

const quotaExceeded = (policy: string) =>
  JSON.stringify({
    type: "https://iana.org/assignments/http-problem-types#quota-exceeded",
    title: "Too Many Requests",
    status: 429,
    "violated-policies": [policy]
  })

const count = (policy: string, decision: RateLimit.Decision) =>
  Effect.map(
    Metric.value(RateLimit.decisions.pipe(Metric.tagged("policy", policy), Metric.tagged("decision", decision))),
    (state) => state.count
  )

describe("RateLimit.policy", () => {
  plain("a token bucket: q is the capacity, w the seconds to refill it from empty, rounded up", () => {
    const bucket = TokenBucket.make<string>("login", 20, Rate.make(1, "3 seconds"))
    const policy = RateLimit.policy(bucket)
    expect(policy.name).toBe("login")
    expect(policy.quota).toBe(20)
    expect(Duration.toSeconds(policy.window)).toBe(60)
    expect(policy.field).toBe("\"login\";q=20;w=60")
    expect(RateLimit.policy(TokenBucket.make<string>("b", 10, Rate.make(3, "1 second"))).field).toBe("\"b\";q=10;w=4")
    expect(RateLimit.policy(TokenBucket.make<string>("z", 0, Rate.perSecond(1))).field).toBe("\"z\";q=0;w=1")
  })

  plain("a fixed window: q is the limit, w the window in seconds, rounded up", () => {
    expect(RateLimit.policy(FixedWindow.make<string>("per-ip", 10, "1 second")).field).toBe("\"per-ip\";q=10;w=1")
    expect(RateLimit.policy(FixedWindow.make<string>("hourly", 1000, "1 hour")).field).toBe("\"hourly\";q=1000;w=3600")
    expect(RateLimit.policy(FixedWindow.make<string>("half", 5, "500 millis")).field).toBe("\"half\";q=5;w=1")
  })

  plain("the draft implemented", () => {
    expect(RateLimit.draft).toBe("draft-ietf-httpapi-ratelimit-headers-11")
  })

  plain("options are checked when the middleware is made", () => {
    const bucket = TokenBucket.make<string>("x", 1, Rate.perSecond(1))
    expect(() => RateLimit.middleware({ limiter: bucket, onStoreFailure: "fail-sideways" as "fail-open" })).toThrow(
      TypeError
    )
    expect(() => RateLimit.fallback({ maxEntries: 0 })).toThrow(RangeError)
    expect(() => RateLimit.middleware({ limiter: { namespace: "x" } as typeof bucket, onStoreFailure: "fail-open" }))
      .toThrow(TypeError)
    // Several limiters: a non-empty list of distinct ones.
    expect(() => RateLimit.middleware({ limiter: [] as never, onStoreFailure: "fail-open" })).toThrow(
      "wakuwaku/http: a list of limiters must not be empty"
    )
    const again = TokenBucket.make<string>("x", 9, Rate.perSecond(2))
    expect(() => RateLimit.middleware({ limiter: [bucket, again], onStoreFailure: "fail-open" })).toThrow(
      "wakuwaku: TokenBucket(x) is listed twice among the limits of one request (they would share its keys)"
    )
    expect(() =>
      RateLimit.middleware({ limiter: [bucket, { namespace: "y" } as typeof bucket], onStoreFailure: "fail-open" })
    )
      .toThrow(TypeError)
    expect(() => RateLimit.middleware({ choose: "plan" as never, onStoreFailure: "fail-open" })).toThrow(
      "wakuwaku/http: choose must be a function of the request, got plan"
    )
    expect(() => RateLimit.middleware({ choose: () => ({ limiter: bucket, key: "k" }), onStoreFailure: "x" as never }))
      .toThrow(TypeError)
  })
})

forEachBackend("RateLimit.middleware", (it) => {
  it.scoped("a token bucket: allowed with the policy and the remaining quota, then 429 with Retry-After", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const limiter = TokenBucket.make<string>(ns, 3, Rate.make(1, "100 seconds"))
      const { v4 } = yield* serve(RateLimit.middleware({ limiter, onStoreFailure: "fail-closed" })(hello))
      const policy = `"${ns}";q=3;w=300`

      const replies = [yield* get(v4), yield* get(v4), yield* get(v4)]
      expect(replies.map(fields)).toEqual([
        { status: 200, policy, limit: `"${ns}";r=2;t=100`, retryAfter: undefined },
        { status: 200, policy, limit: `"${ns}";r=1;t=200`, retryAfter: undefined },
        { status: 200, policy, limit: `"${ns}";r=0;t=300`, retryAfter: undefined }
      ])
      expect(replies.map((reply) => reply.body)).toEqual(["hello", "hello", "hello"])

      const denied = yield* get(v4)
      expect(fields(denied)).toEqual({ status: 429, policy, limit: `"${ns}";r=0;t=100`, retryAfter: "100" })
      expect(denied.headers["content-type"]).toBe("application/problem+json")
      expect(denied.body).toBe(quotaExceeded(ns))

      expect(yield* count(ns, "allowed")).toBe(3)
      expect(yield* count(ns, "denied")).toBe(1)
    }))

  it.scoped("a weighted request spends its cost; one above the capacity is 413 with no Retry-After", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const limiter = TokenBucket.make<string>(ns, 3, Rate.make(1, "100 seconds"))
      const { v4 } = yield* serve(
        RateLimit.middleware({ limiter, cost: costHeader, onStoreFailure: "fail-closed" })(hello)
      )
      const policy = `"${ns}";q=3;w=300`

      expect(fields(yield* get(v4, { "x-cost": "2" }))).toEqual({
        status: 200,
        policy,
        limit: `"${ns}";r=1;t=200`,
        retryAfter: undefined
      })
      const tooLarge = yield* get(v4, { "x-cost": "4" })
      expect(fields(tooLarge)).toEqual({ status: 413, policy, limit: undefined, retryAfter: undefined })
      expect(tooLarge.headers["content-type"]).toBe("application/problem+json")
      expect(tooLarge.body).toBe(JSON.stringify({
        type: "https://iana.org/assignments/http-problem-types#quota-exceeded",
        title: "Request Exceeds the Quota",
        status: 413,
        detail: "This request costs 4 and the policy allows at most 3 at once: split it.",
        "violated-policies": [ns]
      }))
      // A denial for lack of tokens is still a 429: the cost fits the capacity.
      expect(fields(yield* get(v4, { "x-cost": "3" }))).toMatchObject({ status: 429, retryAfter: "200" })
      expect(yield* count(ns, "unsplittable")).toBe(1)
      expect(yield* count(ns, "denied")).toBe(1)
    }))

  it.scoped("a fixed window: r is what is left in the window, t the window; a denial waits for the window's end", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const limiter = FixedWindow.make<string>(ns, 2, "100 seconds")
      const { v4 } = yield* serve(RateLimit.middleware({ limiter, onStoreFailure: "fail-closed" })(hello))
      const policy = `"${ns}";q=2;w=100`

      expect(fields(yield* get(v4))).toEqual({ status: 200, policy, limit: `"${ns}";r=1;t=100`, retryAfter: undefined })
      expect(fields(yield* get(v4))).toEqual({ status: 200, policy, limit: `"${ns}";r=0;t=100`, retryAfter: undefined })
      const denied = yield* get(v4)
      const seconds = Number(denied.headers["retry-after"])
      // Windows are aligned to server time, so the wait is whatever is left of this one.
      expect(Number.isInteger(seconds) && seconds >= 1 && seconds <= 100).toBe(true)
      expect(fields(denied)).toEqual({
        status: 429,
        policy,
        limit: `"${ns}";r=0;t=${seconds}`,
        retryAfter: String(seconds)
      })
      expect(denied.body).toBe(quotaExceeded(ns))
    }))

  it.scoped("stacked middlewares list both policies in each field", () =>
    Effect.gen(function*() {
      const burst = TokenBucket.make<string>(freshNamespace("burst"), 5, Rate.make(1, "10 seconds"))
      const hourly = FixedWindow.make<string>(freshNamespace("hourly"), 100, "1 hour")
      const app = RateLimit.middleware({ limiter: hourly, onStoreFailure: "fail-closed" })(
        RateLimit.middleware({ limiter: burst, onStoreFailure: "fail-closed" })(hello)
      )
      const { v4 } = yield* serve(app)
      expect(fields(yield* get(v4))).toEqual({
        status: 200,
        policy: `"${burst.namespace}";q=5;w=50, "${hourly.namespace}";q=100;w=3600`,
        limit: `"${burst.namespace}";r=4;t=10, "${hourly.namespace}";r=99;t=3600`,
        retryAfter: undefined
      })
    }))

  it.scoped("a failing app's error response still carries the fields", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const limiter = TokenBucket.make<string>(ns, 3, Rate.make(1, "100 seconds"))
      const { v4 } = yield* serve(RateLimit.middleware({ limiter, onStoreFailure: "fail-closed" })(Effect.fail("boom")))
      expect(fields(yield* get(v4))).toEqual({
        status: 500,
        policy: `"${ns}";q=3;w=300`,
        limit: `"${ns}";r=2;t=100`,
        retryAfter: undefined
      })
    }))

  it.scoped("a cost that is not a non-negative integer fails the request (500) with InvalidInput, spending nothing", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const limiter = TokenBucket.make<string>(ns, 3, Rate.make(1, "100 seconds"))
      const { v4 } = yield* serve(
        RateLimit.middleware({ limiter, cost: costHeader, onStoreFailure: "fail-closed" })(hello).pipe(
          Effect.catchTag("InvalidInput", (error) => HttpServerResponse.text(error.message, { status: 500 }))
        )
      )
      const reply = yield* get(v4, { "x-cost": "-1" })
      expect(reply.status).toBe(500)
      expect(reply.body).toBe("cost must be a non-negative safe integer, got -1")
      expect(fields(yield* get(v4))).toMatchObject({ status: 200, limit: `"${ns}";r=2;t=100` })
    }))

  it.scoped("every decision is a span attribute of the request's span", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const limiter = TokenBucket.make<string>(ns, 1, Rate.make(1, "100 seconds"))
      const { spans, tracer } = yield* recordingTracer
      const { v4 } = yield* serve(RateLimit.middleware({ limiter, onStoreFailure: "fail-closed" })(hello)).pipe(
        Effect.withTracer(tracer)
      )
      yield* get(v4)
      yield* get(v4)
      const attributes = spans
        .filter((span) => span.attributes.get("ratelimit.policy") === ns)
        .map((span) => Object.fromEntries([...span.attributes].filter(([key]) => key.startsWith("ratelimit."))))
      expect(attributes).toEqual([
        { "ratelimit.policy": ns, "ratelimit.decision": "allowed", "ratelimit.cost": 1, "ratelimit.remaining": 0 },
        { "ratelimit.policy": ns, "ratelimit.decision": "denied", "ratelimit.cost": 1, "ratelimit.retry_after": 100 }
      ])
    }))
})

describe("the token bucket's w, exact in doubles and in BigInt alike", () => {
  plain("w = ceil(capacity × period / tokens) seconds, for small and huge buckets", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 1_000_000_000 }),
        fc.integer({ min: 1, max: 1_000_000 }),
        fc.integer({ min: 1, max: 100_000_000 }),
        (capacity, tokens, periodMs) => {
          fc.pre((capacity * periodMs) / tokens <= 1e13)
          const bucket = TokenBucket.make<string>("w", capacity, Rate.make(tokens, Duration.millis(periodMs)))
          const micros = BigInt(periodMs) * 1000n
          const perSecond = BigInt(tokens) * 1_000_000n
          const exact = (BigInt(capacity) * micros + perSecond - 1n) / perSecond
          expect(RateLimit.policy(bucket).field).toBe(`"w";q=${capacity};w=${exact > 0n ? exact : 1n}`)
        }
      ),
      { numRuns: 300 }
    )
  })
})
