/**
 * The denial memory (`rememberDenials`): a store's denial answered again from memory, with no store call,
 * until its `retryAfter`; never a request refused that the store would allow, never an early
 * `Retry-After`; bounded; the same cost only; only a denial the store repeats when asked again (not one made
 * by another request's spend, refunded since); and the documented exception, a `reset` elsewhere.
 */
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import { describe, expect, it as plain } from "@effect/vitest"
import { Effect, Layer, Logger, LogLevel, Metric } from "effect"
import { Rate, Redis, TokenBucket } from "wakuwaku"
import { RateLimit } from "wakuwaku/http"
import * as decision from "../../src/internal/http/decision.js"
import { Denials } from "../../src/internal/http/denials.js"
import type * as limits from "../../src/internal/limits.js"
import { forEachBackend } from "../support/backends.js"
import { fields, get, serve } from "../support/http.js"
import { freshNamespace } from "../support/redis.js"
import { transient } from "../support/transient.js"

const hello = Effect.succeed(HttpServerResponse.text("hello"))

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

forEachBackend("RateLimit.middleware, rememberDenials", (it) => {
  it.scoped("after the store's first denial, further 429s make no store call; the same fields and body", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const limiter = TokenBucket.make<string>(ns, 2, Rate.make(1, "1 minute"))
      const store = yield* counting
      const app = RateLimit.middleware({ limiter, onStoreFailure: "fail-closed", rememberDenials: 100 })(hello)
      const { v4 } = yield* serve(app).pipe(Effect.provide(store.layer))
      const replies = [yield* get(v4), yield* get(v4), yield* get(v4)]
      expect(replies.map((r) => r.status)).toEqual([200, 200, 429])
      // Three decisions, and the denial asked again (Limits.check) before it is remembered.
      expect(store.scripts()).toBe(4)
      const flood = []
      for (let i = 0; i < 20; i++) flood.push(yield* get(v4))
      expect(store.scripts()).toBe(4)
      // Each counted as a hit of the memory (the policy's own counter: the namespace is fresh).
      expect((yield* Metric.value(RateLimit.denialMemoryHits.pipe(Metric.tagged("policy", ns)))).count).toBe(20)
      for (const reply of flood) {
        expect(reply.status).toBe(429)
        expect(reply.body).toBe(replies[2]!.body)
        expect(fields(reply).policy).toBe(`"${ns}";q=2;w=120`)
        // Never earlier than the store's own Retry-After (60), which counts from its decision.
        expect(reply.headers["retry-after"]).toBe("60")
        expect(fields(reply).limit).toBe(`"${ns}";r=0;t=60`)
      }
    }))

  it.scoped("a denial made by another request's spend, refunded since, is not remembered: the next asks the store", () =>
    Effect.gen(function*() {
      const limiter = TokenBucket.make<string>(freshNamespace(), 2, Rate.make(1, "100 seconds"))
      const store = yield* transient
      const app = RateLimit.middleware({ limiter, onStoreFailure: "fail-closed", rememberDenials: 100 })(hello)
      const { v4 } = yield* serve(app).pipe(Effect.provide(store.layer))
      expect((yield* get(v4)).status).toBe(200)
      // The same bucket in another request's group (on a Cluster, a split decision) spends the last token, and is
      // refunded right after this request's decision has read the bucket.
      yield* store.spendElsewhere(limiter as unknown as limits.AnyLimiter, "127.0.0.1", 1)
      const denied = yield* get(v4)
      expect(fields(denied)).toMatchObject({ status: 429, retryAfter: "100" })
      expect(yield* limiter.peek("127.0.0.1")).toBe(1)
      // Nothing remembered: the next request asks the store (one script), which allows.
      const calls = store.calls.length
      expect((yield* get(v4)).status).toBe(200)
      expect(store.calls.length).toBe(calls + 1)
    }))

  it.scoped("without the option every request asks the store", () =>
    Effect.gen(function*() {
      const limiter = TokenBucket.make<string>(freshNamespace(), 1, Rate.make(1, "1 minute"))
      const store = yield* counting
      const { v4 } = yield* serve(RateLimit.middleware({ limiter, onStoreFailure: "fail-closed" })(hello)).pipe(
        Effect.provide(store.layer)
      )
      for (let i = 0; i < 5; i++) yield* get(v4)
      expect(store.scripts()).toBe(5)
    }))

  it.scoped("a remembered denial ends no later than the store's: while it is recalled, the store would deny too", () =>
    Effect.gen(function*() {
      const limiter = TokenBucket.make<string>(freshNamespace(), 1, Rate.make(1, "300 millis"))
      const limit = decision.make({ limiter, onStoreFailure: "fail-closed", rememberDenials: 10 })
      expect((yield* limit.decide("client", 1)).pass).toBe(true)
      expect((yield* limit.decide("client", 1)).status).toBe(429)
      // The store only refills here, so once it would allow (peek ≥ 1), it allows at every later moment:
      // a recall after that peek must find nothing.
      let recalled = 0
      for (;;) {
        const level = yield* limiter.peek("client")
        const remembered = limit.recall("client", 1)
        if (level >= 1) expect(remembered).toBeUndefined()
        if (remembered === undefined) break
        recalled++
        yield* Effect.sleep("2 millis")
      }
      expect(recalled).toBeGreaterThan(10)
      // Once it has ended, the store decides again, and within a few ms it allows.
      let verdict = yield* limit.decide("client", 1)
      for (let i = 0; i < 20 && !verdict.pass; i++) {
        yield* Effect.sleep("1 millis")
        verdict = limit.recall("client", 1) ?? (yield* limit.decide("client", 1))
      }
      expect(verdict.pass).toBe(true)
    }))

  it.effect("a fallback's denials are not remembered: only the store's", () =>
    Effect.gen(function*() {
      const limiter = TokenBucket.make<string>(freshNamespace(), 1, Rate.make(1, "1 minute"))
      const failing: Redis.Service = {
        [Redis.TypeId]: Redis.TypeId,
        script: () => Effect.fail(new Redis.RedisError({ reason: "Connection", operation: "test", cause: "down" })),
        command: () => Effect.fail(new Redis.RedisError({ reason: "Connection", operation: "test", cause: "down" })),
        dedicated: () => Effect.dieMessage("unused")
      }
      const limit = decision.make({
        limiter,
        onStoreFailure: RateLimit.fallback({ maxEntries: 10 }),
        rememberDenials: 10
      })
      const run = (name: string) => limit.decide(name, 1).pipe(Effect.provideService(Redis.Redis, failing))
      expect((yield* run("a")).decision).toBe("fallback-allowed")
      expect((yield* run("a")).decision).toBe("fallback-denied")
      expect(limit.recall("a", 1)).toBeUndefined()
      expect(limit.denials?.size).toBe(0)
    }).pipe(Logger.withMinimumLogLevel(LogLevel.None)))
  it.scoped("a different cost is not recalled: it asks the store", () =>
    Effect.gen(function*() {
      const limiter = TokenBucket.make<string>(freshNamespace(), 5, Rate.make(1, "1 minute"))
      const limit = decision.make({ limiter, onStoreFailure: "fail-closed", rememberDenials: 10 })
      expect((yield* limit.decide("a", 4)).pass).toBe(true)
      expect((yield* limit.decide("a", 3)).status).toBe(429)
      expect(limit.recall("a", 3)?.status).toBe(429)
      expect(limit.recall("a", 1)).toBeUndefined()
      expect(limit.recall("a", 4)).toBeUndefined()
      expect((yield* limit.decide("a", 1)).pass).toBe(true)
    }))

  it.scoped("the documented exception: a reset elsewhere is not seen until the remembered denial ends", () =>
    Effect.gen(function*() {
      const limiter = TokenBucket.make<string>(freshNamespace(), 1, Rate.make(1, "1 minute"))
      const limit = decision.make({ limiter, onStoreFailure: "fail-closed", rememberDenials: 10 })
      yield* limit.decide("a", 1)
      expect((yield* limit.decide("a", 1)).status).toBe(429)
      yield* limiter.reset("a")
      expect(limit.recall("a", 1)?.status).toBe(429)
      expect((yield* limiter.acquire("a", 1))._tag).toBe("Allowed")
    }))
})

describe("the denial memory's bounds", () => {
  plain("holds at most maxEntries names; past it the one remembered longest ago is dropped", () => {
    const memory = new Denials(2)
    memory.remember("a", 1, 1000, 0, 1)
    memory.remember("b", 1, 1000, 0, 1)
    memory.remember("c", 1, 1000, 0, 1)
    expect(memory.size).toBe(2)
    expect(memory.recall("a", 1, 10)).toBeUndefined()
    expect(memory.recall("b", 1, 10)).toBe(991)
    expect(memory.recall("c", 1, 10)).toBe(991)
    // Remembering a name again refreshes it: b is now the newest, c the oldest.
    memory.remember("b", 1, 1000, 20, 21)
    memory.remember("d", 1, 1000, 20, 21)
    expect([memory.recall("b", 1, 30), memory.recall("c", 1, 30), memory.recall("d", 1, 30)]).toEqual([
      991,
      undefined,
      991
    ])
  })

  plain(
    "ends at sentAt + retryAfter - 1 ms; Retry-After counts to receivedAt + retryAfter; expired entries are dropped",
    () => {
      const memory = new Denials(10)
      memory.remember("a", 1, 1000, 100, 140)
      expect(memory.recall("a", 1, 1098)).toBe(42)
      expect(memory.recall("a", 1, 1099)).toBeUndefined()
      expect(memory.size).toBe(0)
    }
  )

  plain("rememberDenials must be 0 or a positive safe integer", () => {
    const limiter = TokenBucket.make<string>("x", 1, Rate.perSecond(1))
    for (const bad of [-1, 1.5, Number.NaN, "10" as unknown as number]) {
      expect(() => RateLimit.middleware({ limiter, onStoreFailure: "fail-open", rememberDenials: bad })).toThrow(
        RangeError
      )
    }
    expect(() => RateLimit.middleware({ limiter, onStoreFailure: "fail-open", rememberDenials: 0 })).not.toThrow()
  })
})
