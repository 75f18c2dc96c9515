/**
 * Several limits in one decision on `RateLimit.middleware` (draft-ietf-httpapi-ratelimit-headers-11, its
 * "Use with multiple windows" example): every policy in `RateLimit-Policy`, the most restrictive (the one
 * closest to being exhausted) in `RateLimit`; a denial spends from none, names every policy that denied and
 * the longest retry; a cost above one quota is a 413; denial memory and store failures with several; a
 * denial caused by another request's spend, refunded since (a Cluster's split decision), is not remembered.
 */
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import { expect } from "@effect/vitest"
import keySlot from "cluster-key-slot"
import { Effect, Layer, Logger, LogLevel, Metric } from "effect"
import { Capability, FixedWindow, Rate, Redis, TokenBucket } from "wakuwaku"
import { RateLimit } from "wakuwaku/http"
import * as limits from "../../src/internal/limits.js"
import { forEachBackend } from "../support/backends.js"
import { expectWindowT, fields, get, serve } from "../support/http.js"
import { freshNamespace } from "../support/redis.js"
import { problem, sfList } from "../support/standards.js"
import { transient } from "../support/transient.js"

const hello = Effect.succeed(HttpServerResponse.text("hello"))

const group = (...limiters: ReadonlyArray<TokenBucket.TokenBucket<string> | FixedWindow.FixedWindow<string>>) =>
  limiters as unknown as ReadonlyArray<limits.AnyLimiter>

const keyOf = (limiter: TokenBucket.TokenBucket<string> | FixedWindow.FixedWindow<string>, name: string) =>
  group(limiter)[0]!.keyOf("acquire", name) as string

const count = (policy: string, decision: RateLimit.Decision) =>
  Effect.map(
    Metric.value(RateLimit.decisions.pipe(Metric.tagged("policy", policy), Metric.tagged("decision", decision))),
    (state) => state.count
  )

/**
 * A window of about 10^6 s whose current window (windows start at multiples of it) ends more than an hour
 * from now, so that its retry is the longest of any here.
 */
const longWindow = () => {
  const now = Math.floor(Date.now() / 1000)
  return [1_000_000, 1_000_007, 1_000_011, 1_000_013].find((s) => s - (now % s) > 7200)!
}

/** The store in context, counting the scripts it runs. */
const counting = Effect.gen(function*() {
  const redis = yield* Redis.Redis
  let scripts = 0
  const service: Redis.Service = {
    ...redis,
    script: (script, keys, args) => {
      scripts++
      return redis.script(script, keys, args)
    }
  }
  return { layer: Layer.succeed(Redis.Redis, service), scripts: () => scripts }
})

const failing: Redis.Service = {
  [Redis.TypeId]: Redis.TypeId,
  script: () => Effect.fail(new Redis.RedisError({ reason: "Connection", operation: "test", cause: "down" })),
  command: () => Effect.fail(new Redis.RedisError({ reason: "Connection", operation: "test", cause: "down" })),
  dedicated: () => Effect.dieMessage("unused")
}

forEachBackend("RateLimit.middleware, several limiters as one", (it, backend) => {
  it.scoped(
    "denial memory keeps only what the store repeats: not a denial by another request's spend, refunded since; " +
      "the limit that truly denied, with its retry",
    () =>
      Effect.gen(function*() {
        const client = "127.0.0.1"
        // On a cluster, two limiters whose keys lie in two slots: the decision is split, as in the issue.
        let short: TokenBucket.TokenBucket<string>
        let long: FixedWindow.FixedWindow<string>
        const windowSeconds = longWindow()
        do {
          short = TokenBucket.make<string>(freshNamespace("short"), 1, Rate.make(1, "1 second"))
          long = FixedWindow.make<string>(freshNamespace("long"), 2, `${windowSeconds} seconds`)
        } while (keySlot(keyOf(short, client)) === keySlot(keyOf(long, client)))
        const store = yield* transient
        const { v4 } = yield* serve(
          RateLimit.middleware({ limiter: [short, long], onStoreFailure: "fail-closed", rememberDenials: 10 })(hello)
        ).pipe(Effect.provide(store.layer))
        expect((yield* get(v4)).status).toBe(200)
        // Another request's group spends the last unit of the long window, and is refunded right after this
        // request's decision on the window has read it: this request is denied by the short bucket (truly: it is
        // empty) and by the window (only while the other spend lasted).
        yield* store.spendElsewhere(group(long)[0]!, client, 1)
        store.calls.length = 0
        const denied = yield* get(v4)
        const seconds = Number(denied.headers["retry-after"])
        expect(seconds).toBeGreaterThan(7200)
        expect(JSON.parse(denied.body)["violated-policies"]).toEqual([short.namespace, long.namespace])
        const decided = [...store.calls]
        expect(yield* long.peek(client)).toBe(1)
        // Remembered: the short bucket's denial alone, with its retry, answered with no store call.
        const calls = store.calls.length
        const recalled = yield* get(v4)
        expect(fields(recalled)).toEqual({
          status: 429,
          policy: `"${short.namespace}";q=1;w=1, "${long.namespace}";q=2;w=${windowSeconds}`,
          limit: `"${short.namespace}";r=0;t=1`,
          retryAfter: "1"
        })
        expect(JSON.parse(recalled.body)["violated-policies"]).toEqual([short.namespace])
        expect(store.calls.length).toBe(calls)
        // The denial was checked again, after its decision: one read per slot of the limiters that denied.
        expect(decided.filter((name) => name === "Limits.check")).toHaveLength(backend.name === "cluster" ? 2 : 1)
        // Once the bucket has refilled, the store decides, and allows: the window had one unit left all along.
        yield* Effect.sleep("1 second")
        expect((yield* get(v4)).status).toBe(200)
        expect(store.calls.length).toBeGreaterThan(calls)
        expect([yield* short.peek(client), yield* long.peek(client)]).toEqual([0, 0])
      })
  )

  it.scoped("the header test: every policy in RateLimit-Policy, the closest to exhaustion in RateLimit", () =>
    Effect.gen(function*() {
      const perSecond = TokenBucket.make<string>(freshNamespace("second"), 10, Rate.perSecond(10))
      const hourly = FixedWindow.make<string>(freshNamespace("hour"), 4, "1 hour")
      const { v4 } = yield* serve(
        RateLimit.middleware({ limiter: [perSecond, hourly], onStoreFailure: "fail-closed" })(hello)
      )
      const policy = `"${perSecond.namespace}";q=10;w=1, "${hourly.namespace}";q=4;w=3600`
      // perSecond keeps 9 (t=1), hourly 3 (t: what is left of its hour): hourly is closer to exhaustion.
      const before = Date.now()
      const reply = yield* get(v4)
      const after = Date.now()
      expect(fields(reply)).toMatchObject({ status: 200, policy, retryAfter: undefined })
      const [item, ...more] = sfList(reply.headers["ratelimit"])
      expect([item!.name, item!.params["r"], more]).toEqual([hourly.namespace, 3, []])
      expectWindowT(item!.params["t"], 3600, before, after)
    }))

  it.scoped("on a tie in r, the longer t is the more restrictive; then the first listed", () =>
    Effect.gen(function*() {
      const a = TokenBucket.make<string>(freshNamespace("a"), 3, Rate.make(1, "10 seconds"))
      const b = TokenBucket.make<string>(freshNamespace("b"), 3, Rate.make(1, "20 seconds"))
      const c = TokenBucket.make<string>(freshNamespace("c"), 3, Rate.make(1, "20 seconds"))
      const { v4 } = yield* serve(RateLimit.middleware({ limiter: [a, b, c], onStoreFailure: "fail-closed" })(hello))
      // r=2 everywhere; t = 10, 20, 20: b, the first of the two longest.
      expect(fields(yield* get(v4)).limit).toBe(`"${b.namespace}";r=2;t=20`)
    }))

  it.scoped("a denial spends from none; it names every policy that denied and the longest retry", () =>
    Effect.gen(function*() {
      const burst = TokenBucket.make<string>(freshNamespace("burst"), 2, Rate.make(1, "100 seconds"))
      const windowSeconds = longWindow()
      const window = FixedWindow.make<string>(freshNamespace("window"), 2, `${windowSeconds} seconds`)
      const spare = TokenBucket.make<string>(freshNamespace("spare"), 50, Rate.make(1, "100 seconds"))
      const { v4 } = yield* serve(
        RateLimit.middleware({ limiter: [burst, window, spare], onStoreFailure: "fail-closed" })(hello)
      )
      yield* get(v4)
      yield* get(v4)
      const denied = yield* get(v4)
      const seconds = Number(denied.headers["retry-after"])
      // The window's retry, until its end (more than two hours away), is longer than the bucket's 100 s.
      expect(seconds).toBeGreaterThan(7200)
      expect(seconds).toBeLessThanOrEqual(windowSeconds)
      expect(fields(denied)).toEqual({
        status: 429,
        policy: `"${burst.namespace}";q=2;w=200, "${window.namespace}";q=2;w=${windowSeconds}, ` +
          `"${spare.namespace}";q=50;w=5000`,
        limit: `"${window.namespace}";r=0;t=${seconds}`,
        retryAfter: String(seconds)
      })
      expect(JSON.parse(denied.body)).toEqual({
        type: "https://iana.org/assignments/http-problem-types#quota-exceeded",
        title: "Quota Exceeded",
        status: 429,
        "violated-policies": [burst.namespace, window.namespace]
      })
      // The spare bucket allowed every time but was spent from only by the two that passed.
      expect(yield* spare.peek("127.0.0.1")).toBe(48)
      expect([yield* count(burst.namespace, "denied"), yield* count(window.namespace, "denied")]).toEqual([1, 1])
      expect([yield* count(spare.namespace, "allowed"), yield* count(spare.namespace, "denied")]).toEqual([2, 0])
    }))

  it.scoped("one denies, the other allows: 429 from the one, nothing spent from the other", () =>
    Effect.gen(function*() {
      const burst = TokenBucket.make<string>(freshNamespace("burst"), 1, Rate.make(1, "100 seconds"))
      const hourly = FixedWindow.make<string>(freshNamespace("hourly"), 10, "1 hour")
      const { v4 } = yield* serve(
        RateLimit.middleware({ limiter: [burst, hourly], onStoreFailure: "fail-closed" })(hello)
      )
      yield* get(v4)
      const denied = yield* get(v4)
      expect(fields(denied)).toMatchObject({
        status: 429,
        limit: `"${burst.namespace}";r=0;t=100`,
        retryAfter: "100"
      })
      expect(JSON.parse(denied.body)["violated-policies"]).toEqual([burst.namespace])
      expect(yield* hourly.peek("127.0.0.1")).toBe(9)
    }))

  it.scoped("a cost above one quota is a 413 naming it and its quota; nothing is spent", () =>
    Effect.gen(function*() {
      const small = TokenBucket.make<string>(freshNamespace("small"), 2, Rate.make(1, "100 seconds"))
      const large = FixedWindow.make<string>(freshNamespace("large"), 10, "1 hour")
      const { v4 } = yield* serve(
        RateLimit.middleware({
          limiter: [large, small],
          cost: (request) => Number(request.headers["x-cost"] ?? "1"),
          onStoreFailure: "fail-closed"
        })(hello)
      )
      const reply = yield* get(v4, { "x-cost": "3" })
      expect(fields(reply)).toEqual({
        status: 413,
        policy: `"${large.namespace}";q=10;w=3600, "${small.namespace}";q=2;w=200`,
        limit: undefined,
        retryAfter: undefined
      })
      expect(problem(reply.body)).toEqual({
        type: "tag:wakuwaku,2026:cost-above-quota",
        title: "Cost Above the Quota",
        status: 413,
        detail: "This request costs 3 and the policy allows at most 2 at once: split it.",
        cost: 3,
        quota: 2,
        "violated-policies": [small.namespace]
      })
      expect([yield* large.peek("127.0.0.1"), yield* small.peek("127.0.0.1")]).toEqual([10, 2])
    }))

  it.scoped("denial memory: a group's denial is answered from memory, with no store call", () =>
    Effect.gen(function*() {
      const burst = TokenBucket.make<string>(freshNamespace("burst"), 1, Rate.make(1, "100 seconds"))
      const hourly = FixedWindow.make<string>(freshNamespace("hourly"), 10, "1 hour")
      const store = yield* counting
      const { v4 } = yield* serve(
        RateLimit.middleware({ limiter: [burst, hourly], onStoreFailure: "fail-closed", rememberDenials: 10 })(hello)
      ).pipe(Effect.provide(store.layer))
      yield* get(v4)
      const first = yield* get(v4)
      expect(first.status).toBe(429)
      // Two calls on one server; on a cluster, a split and its refunds per request.
      const calls = store.scripts()
      for (let i = 0; i < 5; i++) {
        const again = yield* get(v4)
        expect(fields(again)).toEqual(fields(first))
        expect(again.body).toBe(first.body)
      }
      expect(store.scripts()).toBe(calls)
    }))

  it.scoped("the store fails: fail-open lists every policy; the fallback decides the group locally", () =>
    Effect.gen(function*() {
      const burst = TokenBucket.make<string>(freshNamespace("burst"), 1, Rate.make(1, "100 seconds"))
      const hourly = FixedWindow.make<string>(freshNamespace("hourly"), 10, "1 hour")
      const down = Layer.merge(Layer.succeed(Redis.Redis, failing), Capability.ReadWrite)
      const open = yield* serve(RateLimit.middleware({ limiter: [burst, hourly], onStoreFailure: "fail-open" })(hello))
        .pipe(Effect.provide(down))
      expect(fields(yield* get(open.v4))).toEqual({
        status: 200,
        policy: `"${burst.namespace}";q=1;w=100, "${hourly.namespace}";q=10;w=3600`,
        limit: undefined,
        retryAfter: undefined
      })
      const local = yield* serve(
        RateLimit.middleware({
          limiter: [burst, hourly],
          onStoreFailure: RateLimit.fallback({ maxEntries: 100 })
        })(hello)
      ).pipe(Effect.provide(down))
      expect(fields(yield* get(local.v4))).toMatchObject({ status: 200, limit: `"${burst.namespace}";r=0;t=100` })
      expect(fields(yield* get(local.v4))).toMatchObject({ status: 429, retryAfter: "100" })
      expect(yield* count(burst.namespace, "fallback-denied")).toBe(1)
      expect(yield* count(hourly.namespace, "fallback-allowed")).toBe(1)
    }).pipe(Logger.withMinimumLogLevel(LogLevel.None)))
})
