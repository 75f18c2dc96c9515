/**
 * The middleware over real sockets, on Redis and on the memory backend: statuses, exact header values
 * (draft-ietf-httpapi-ratelimit-headers-11, read with `structured-headers`), bodies (RFC 9457, validated against
 * its JSON Schema), metrics and span attributes; and in process under `TestClock`, a fixed window's `t`.
 */
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import { expect, it as effect } from "@effect/vitest"
import { Duration, Effect, Metric, TestClock } from "effect"
import fc from "fast-check"
import { describe, it as plain } from "vitest"
import { FixedWindow, Rate, Redis, SlidingWindow, TokenBucket } from "wakuwaku"
import { RateLimit } from "wakuwaku/http"
import { forEachBackend } from "../support/backends.js"
import { expectWindowT, fields, get, recordingTracer, serve } from "../support/http.js"
import { freshNamespace } from "../support/redis.js"
import { problem, sfList } from "../support/standards.js"

const hello = Effect.succeed(HttpServerResponse.text("hello"))

/** The cost of a request: its `x-cost` header, 1 without one. */
const costHeader = (request: HttpServerRequest.HttpServerRequest) => Number(request.headers["x-cost"] ?? "1")

/** The draft's problem type for a 429, with the title it registers (§10.2.1), the same on every occurrence. */
const quotaExceeded = (policy: string) =>
  JSON.stringify({
    type: "https://iana.org/assignments/http-problem-types#quota-exceeded",
    title: "Quota Exceeded",
    status: 429,
    "violated-policies": [policy]
  })

/** The 413's own problem type: a cost above the quota, which no wait cures. */
const costAboveQuota = (cost: number, quota: number, policies: ReadonlyArray<string>) =>
  JSON.stringify({
    type: "tag:wakuwaku,2026:cost-above-quota",
    title: "Cost Above the Quota",
    status: 413,
    detail: `This request costs ${cost} and the policy allows at most ${quota} at once: split it.`,
    cost,
    quota,
    "violated-policies": policies
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

  plain("a sliding window: q is the limit, w the window in seconds, rounded up", () => {
    expect(RateLimit.policy(SlidingWindow.make<string>("any-minute", 100, "1 minute")).field).toBe(
      "\"any-minute\";q=100;w=60"
    )
    expect(RateLimit.policy(SlidingWindow.make<string>("half", 5, "500 millis")).field).toBe("\"half\";q=5;w=1")
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

/** Runs `app` in process on a GET of `/`, keyed by `key`; the response's status, headers and body. */
const call = <E, R>(app: Effect.Effect<HttpServerResponse.HttpServerResponse, E, R>) =>
  Effect.map(
    Effect.provideService(
      app,
      HttpServerRequest.HttpServerRequest,
      HttpServerRequest.fromWeb(new Request("http://local/"))
    ),
    (response) => ({
      status: response.status,
      headers: response.headers,
      body: response.body._tag === "Uint8Array" ? new TextDecoder().decode(response.body.body) : ""
    })
  )

// Registered before the layered blocks, which must come last in a file (see NOTES.md).
describe("a fixed window's t, in process on the memory backend under TestClock", () => {
  effect.effect(
    "the draft's own fixed-window example (appendix B.2.1): 10 s into a window of 60, r=99;t=50",
    () =>
      Effect.gen(function*() {
        const limiter = FixedWindow.make<string>("fixedwindow", 100, "60 seconds")
        const app = RateLimit.middleware({ limiter, key: () => "client", onStoreFailure: "fail-closed" })(hello)
        yield* TestClock.adjust("10 seconds")
        const reply = yield* call(app)
        expect(reply.status).toBe(200)
        expect(reply.headers["ratelimit"]).toBe("\"fixedwindow\";r=99;t=50")
        expect(sfList(reply.headers["ratelimit"])).toEqual([{ name: "fixedwindow", params: { r: 99, t: 50 } }])
        expect(sfList(reply.headers["ratelimit-policy"])).toEqual([{ name: "fixedwindow", params: { q: 100, w: 60 } }])
      }).pipe(Effect.provide(Redis.layerMemory()))
  )

  effect.effect(
    "r=0;t=7 on the last allowed request, then a 429 with t=7 and Retry-After: 7; t rounds up",
    () =>
      Effect.gen(function*() {
        const limiter = FixedWindow.make<string>("w", 2, "10 seconds")
        const app = RateLimit.middleware({ limiter, key: () => "client", onStoreFailure: "fail-closed" })(hello)
        yield* TestClock.adjust("3 seconds")
        expect((yield* call(app)).headers["ratelimit"]).toBe("\"w\";r=1;t=7")
        expect((yield* call(app)).headers["ratelimit"]).toBe("\"w\";r=0;t=7")
        const denied = yield* call(app)
        expect([denied.status, denied.headers["retry-after"], denied.headers["ratelimit"]]).toEqual([
          429,
          "7",
          "\"w\";r=0;t=7"
        ])
        // 2.5 s left: 3 s, never early; a new window: its whole length.
        yield* TestClock.adjust("4500 millis")
        expect((yield* call(app)).headers["ratelimit"]).toBe("\"w\";r=0;t=3")
        yield* TestClock.adjust("2500 millis")
        expect((yield* call(app)).headers["ratelimit"]).toBe("\"w\";r=1;t=10")
      }).pipe(Effect.provide(Redis.layerMemory()))
  )
})

describe("a sliding window's t and Retry-After, in process on the memory backend under TestClock", () => {
  effect.effect(
    "t is until the quota is whole again (the newest request's end); a 429's Retry-After, until the oldest ends",
    () =>
      Effect.gen(function*() {
        const limiter = SlidingWindow.make<string>("s", 2, "10 seconds")
        const app = RateLimit.middleware({ limiter, key: () => "client", onStoreFailure: "fail-closed" })(hello)
        expect((yield* call(app)).headers["ratelimit"]).toBe("\"s\";r=1;t=10")
        yield* TestClock.adjust("3 seconds")
        const last = yield* call(app)
        expect([last.headers["ratelimit-policy"], last.headers["ratelimit"]]).toEqual([
          "\"s\";q=2;w=10",
          "\"s\";r=0;t=10"
        ])
        const denied = yield* call(app)
        expect([denied.status, denied.headers["retry-after"], denied.headers["ratelimit"]]).toEqual([
          429,
          "7",
          "\"s\";r=0;t=7"
        ])
        // 10 s: the first request has left the window, the second has not: no boundary burst.
        yield* TestClock.adjust("7 seconds")
        expect((yield* call(app)).headers["ratelimit"]).toBe("\"s\";r=0;t=10")
        expect((yield* call(app)).headers["retry-after"]).toBe("3")
      }).pipe(Effect.provide(Redis.layerMemory()))
  )
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
      expect(problem(denied.body)).toMatchObject({ title: "Quota Exceeded", status: 429 })

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
      expect(tooLarge.body).toBe(costAboveQuota(4, 3, [ns]))
      expect(problem(tooLarge.body)).toMatchObject({ status: 413 })
      // A denial for lack of tokens is still a 429: the cost fits the capacity.
      expect(fields(yield* get(v4, { "x-cost": "3" }))).toMatchObject({ status: 429, retryAfter: "200" })
      expect(yield* count(ns, "unsplittable")).toBe(1)
      expect(yield* count(ns, "denied")).toBe(1)
    }))

  it.scoped("a fixed window: r is what is left in the window, t the seconds left in it, as a denial's Retry-After", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const limiter = FixedWindow.make<string>(ns, 2, "100 seconds")
      const { v4 } = yield* serve(RateLimit.middleware({ limiter, onStoreFailure: "fail-closed" })(hello))
      const timed = Effect.gen(function*() {
        const before = Date.now()
        const reply = yield* get(v4)
        return { reply, before, after: Date.now() }
      })
      const first = yield* timed
      const second = yield* timed
      const denied = yield* timed
      // Windows are aligned to the store's clock (this machine's): t is what is left of this one.
      for (const { after, before, reply } of [first, second]) {
        expect(sfList(reply.headers["ratelimit-policy"])).toEqual([{ name: ns, params: { q: 2, w: 100 } }])
        const [item] = sfList(reply.headers["ratelimit"])
        expect(item).toMatchObject({ name: ns, params: { r: reply === first.reply ? 1 : 0 } })
        expectWindowT(item!.params["t"], 100, before, after)
      }
      const seconds = Number(denied.reply.headers["retry-after"])
      expectWindowT(seconds, 100, denied.before, denied.after)
      expect(fields(denied.reply)).toEqual({
        status: 429,
        policy: `"${ns}";q=2;w=100`,
        limit: `"${ns}";r=0;t=${seconds}`,
        retryAfter: String(seconds)
      })
      expect(denied.reply.body).toBe(quotaExceeded(ns))
    }))

  it.scoped("stacked middlewares list both policies in each field", () =>
    Effect.gen(function*() {
      const burst = TokenBucket.make<string>(freshNamespace("burst"), 5, Rate.make(1, "10 seconds"))
      const hourly = FixedWindow.make<string>(freshNamespace("hourly"), 100, "1 hour")
      const app = RateLimit.middleware({ limiter: hourly, onStoreFailure: "fail-closed" })(
        RateLimit.middleware({ limiter: burst, onStoreFailure: "fail-closed" })(hello)
      )
      const { v4 } = yield* serve(app)
      const before = Date.now()
      const reply = yield* get(v4)
      const after = Date.now()
      expect(fields(reply)).toMatchObject({
        status: 200,
        policy: `"${burst.namespace}";q=5;w=50, "${hourly.namespace}";q=100;w=3600`,
        retryAfter: undefined
      })
      const [bucket, window] = sfList(reply.headers["ratelimit"])
      expect(bucket).toEqual({ name: burst.namespace, params: { r: 4, t: 10 } })
      expect(window).toMatchObject({ name: hourly.namespace, params: { r: 99 } })
      expectWindowT(window!.params["t"], 3600, before, after)
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

  it.scoped("a client's key the store will not take (5000 bytes) is the client's 400 problem, as in the proxy", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const limiter = TokenBucket.make<string>(ns, 3, Rate.make(1, "100 seconds"))
      const { v4 } = yield* serve(
        RateLimit.middleware({ limiter, key: RateLimit.header("x-api-key"), onStoreFailure: "fail-closed" })(hello)
      )
      const reply = yield* get(v4, { "x-api-key": "k".repeat(5000) })
      expect([reply.status, reply.headers["content-type"]]).toEqual([400, "application/problem+json"])
      // The key is the header's name, "=", then its value: 10 + 5000 bytes.
      expect(problem(reply.body)).toEqual({
        type: "about:blank",
        title: "Bad Request",
        status: 400,
        detail: "a name must encode to at most 4096 bytes, got 5010 (a string)"
      })
      // Nothing was spent, and a key the store takes passes.
      expect(fields(yield* get(v4, { "x-api-key": "k" }))).toMatchObject({ status: 200, limit: `"${ns}";r=2;t=100` })
    }))

  it.scoped("one problem type, one title (RFC 9457 §3.1.3): the 429s and the 413 each keep theirs", () =>
    Effect.gen(function*() {
      const bucket = TokenBucket.make<string>(freshNamespace("bucket"), 1, Rate.make(1, "100 seconds"))
      const window = FixedWindow.make<string>(freshNamespace("window"), 1, "1 hour")
      const served = yield* Effect.all(
        [bucket, window, [bucket, window] as const].map((limiter) =>
          serve(
            RateLimit.middleware({ limiter, cost: costHeader, onStoreFailure: "fail-closed", rememberDenials: 10 })(
              hello
            )
          )
        )
      )
      const bodies: Array<Record<string, unknown>> = []
      for (const { v4 } of served) {
        yield* get(v4)
        for (const cost of ["1", "1", "5"]) {
          const reply = yield* get(v4, { "x-cost": cost })
          expect(reply.headers["content-type"]).toBe("application/problem+json")
          bodies.push(problem(reply.body))
        }
      }
      const titles = new Map<unknown, Set<unknown>>()
      for (const body of bodies) titles.set(body["type"], (titles.get(body["type"]) ?? new Set()).add(body["title"]))
      expect(titles).toEqual(
        new Map([
          ["https://iana.org/assignments/http-problem-types#quota-exceeded", new Set(["Quota Exceeded"])],
          ["tag:wakuwaku,2026:cost-above-quota", new Set(["Cost Above the Quota"])]
        ])
      )
      // The draft registers quota-exceeded for the 429 (§10.2.1); the 413 is its own type.
      expect(new Set(bodies.map((body) => `${String(body["status"])} ${String(body["type"])}`))).toEqual(
        new Set([
          "429 https://iana.org/assignments/http-problem-types#quota-exceeded",
          "413 tag:wakuwaku,2026:cost-above-quota"
        ])
      )
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
