/**
 * RateLimiterStore: wakuwaku behind @effect/experimental's RateLimiter.
 *
 * @effect/experimental's own RateLimiter tests (packages/experimental/test/RateLimiter.test.ts in
 * Effect-TS/effect, the four cases of 0.61: fixed window and token bucket, `delay` and `fail`) are
 * ported case for case, with their expected values, and run:
 * - on @effect/experimental's memory store under TestClock (the control: the port expects what the
 *   original expects);
 * - on this store over the embedded backend under TestClock: every value exact;
 * - on this store over real Redis, where TestClock cannot move the server's clock: the original's minute
 *   becomes 2 seconds (every duration scaled by 1/30) and each `TestClock.adjust` a real wait. Values
 *   that do not depend on elapsed time stay exact (every token-bucket figure, every count); a fixed
 *   window's remaining time falls a millisecond per millisecond, so it is checked to lie between the
 *   expected value less the real time the waits overshot, and the expected value.
 */
import { RateLimiter } from "@effect/experimental"
import * as RateLimiterRedis from "@effect/experimental/RateLimiter/Redis"
import { assert, describe, expect, it } from "@effect/vitest"
import { Duration, Effect, Either, Layer, TestClock } from "effect"
import { Capability, Redis } from "wakuwaku"
import * as RateLimiterStore from "wakuwaku/RateLimiterStore"
import { command, expectTtls, forEachBackend, keysMatching, pttl } from "./support/backends.js"
import { freshNamespace, RedisLive, redisUrl } from "./support/redis.js"

/** How a case moves time, and checks a value that depends on it. */
interface Timing {
  /** A duration of the original test, scaled to this run (the identity under TestClock). */
  readonly scale: (d: Duration.DurationInput) => Duration.Duration
  /** Moves the store's clock by a scaled duration: TestClock.adjust, or a real wait. */
  readonly advance: (d: Duration.Duration) => Effect.Effect<void>
  /** A scaled expected value that falls as time passes: equal under TestClock; on Redis within the overshoot. */
  readonly near: (actual: Duration.Duration, expected: Duration.Duration) => Effect.Effect<void>
}

const testClock: Timing = {
  scale: Duration.decode,
  advance: TestClock.adjust,
  near: (actual, expected) => Effect.sync(() => expect(actual).toEqual(expected))
}

/** Real time, the original's minute as `minute` ms; built when the case starts. */
const realTime = (minute: number): Effect.Effect<Timing> =>
  Effect.sync(() => {
    const started = performance.now()
    let advanced = 0
    return {
      scale: (d) => Duration.millis(Duration.toMillis(d) * minute / 60_000),
      // 2 ms more than asked: Node's timers and the server's wall clock need not agree to the millisecond.
      advance: (d) =>
        Effect.sleep(Duration.sum(d, Duration.millis(2))).pipe(
          Effect.tap(() => (advanced += Duration.toMillis(d)))
        ),
      near: (actual, expected) =>
        Effect.sync(() => {
          const overshoot = performance.now() - started - advanced
          expect(Duration.toMillis(actual)).toBeLessThanOrEqual(Duration.toMillis(expected))
          expect(Duration.toMillis(actual)).toBeGreaterThanOrEqual(Duration.toMillis(expected) - overshoot - 1)
        })
    }
  })

// The four cases, as the original writes them, with each duration through `t.scale` and each
// `TestClock.adjust` through `t.advance`.

const fixedWindowDelay = (t: Timing) =>
  Effect.gen(function*() {
    const limiter = yield* RateLimiter.make
    const consume = limiter.consume({
      algorithm: "fixed-window",
      onExceeded: "delay",
      window: t.scale("1 minute"),
      limit: 5,
      tokens: 1,
      key: "a"
    })
    yield* Effect.repeatN(consume, 3) // 1 + 3
    let result = yield* consume // 5
    expect(result.delay).toEqual(Duration.zero)
    result = yield* consume // 6
    yield* t.near(result.delay, t.scale(Duration.minutes(1)))

    yield* Effect.repeatN(consume, 2) // 7,8,9
    result = yield* consume // 10
    yield* t.near(result.delay, t.scale(Duration.minutes(1)))
    result = yield* consume // 11
    yield* t.near(result.delay, t.scale(Duration.minutes(2)))

    yield* t.advance(t.scale(Duration.seconds(30)))

    result = yield* consume // 12
    yield* t.near(result.delay, t.scale(Duration.seconds(90)))

    yield* t.advance(t.scale(Duration.seconds(45)))

    result = yield* consume // 13
    yield* t.near(result.delay, t.scale(Duration.seconds(45)))
  })

const fixedWindowFail = (t: Timing) =>
  Effect.gen(function*() {
    const limiter = yield* RateLimiter.make
    const consume = limiter.consume({
      algorithm: "fixed-window",
      onExceeded: "fail",
      window: t.scale("1 minute"),
      limit: 5,
      tokens: 1,
      key: "a"
    })
    yield* Effect.repeatN(consume, 3)
    let result = yield* consume
    expect(result.delay).toEqual(Duration.zero)
    let error = yield* Effect.flip(consume)
    assert(error.reason === "Exceeded")
    yield* t.near(error.retryAfter, t.scale(Duration.minutes(1)))
    expect(error.remaining).toEqual(0)

    yield* t.advance(t.scale(Duration.seconds(30)))

    error = yield* Effect.flip(consume)
    assert(error.reason === "Exceeded")
    yield* t.near(error.retryAfter, t.scale(Duration.seconds(30)))
    expect(error.remaining).toEqual(0)

    yield* t.advance(t.scale(Duration.seconds(30)))

    result = yield* consume
    expect(result.delay).toEqual(Duration.zero)
    expect(result.remaining).toEqual(4)
  })

const tokenBucketDelay = (t: Timing) =>
  Effect.gen(function*() {
    const limiter = yield* RateLimiter.make
    const consume = limiter.consume({
      algorithm: "token-bucket",
      onExceeded: "delay",
      window: t.scale("1 minute"),
      limit: 5,
      tokens: 1,
      key: "a"
    })
    const refillRate = Duration.unsafeDivide(t.scale(Duration.minutes(1)), 5)
    yield* Effect.repeatN(consume, 3) // 1 + 3
    let result = yield* consume // 5
    expect(result.delay).toEqual(Duration.zero)
    result = yield* consume // 6
    expect(result.delay).toEqual(refillRate)
    result = yield* consume // 7
    expect(result.delay).toEqual(Duration.times(refillRate, 2))

    yield* t.advance(t.scale(Duration.minutes(1))) // 2

    result = yield* consume // 3
    expect(result.delay).toEqual(Duration.zero)
    expect(result.remaining).toEqual(2)
  })

const tokenBucketFail = (t: Timing) =>
  Effect.gen(function*() {
    const limiter = yield* RateLimiter.make
    const consume = limiter.consume({
      algorithm: "token-bucket",
      onExceeded: "fail",
      window: t.scale("1 minute"),
      limit: 5,
      tokens: 1,
      key: "a"
    })
    const refillRate = Duration.unsafeDivide(t.scale(Duration.minutes(1)), 5)
    yield* Effect.repeatN(consume, 3)
    let result = yield* consume
    expect(result.delay).toEqual(Duration.zero)
    const error = yield* Effect.flip(consume)
    assert(error.reason === "Exceeded")
    expect(error.retryAfter).toEqual(t.scale(Duration.seconds(12)))
    expect(error.remaining).toEqual(0)

    yield* t.advance(Duration.times(refillRate, 3))

    result = yield* consume
    expect(result.delay).toEqual(Duration.zero)
    expect(result.remaining).toEqual(2)
  })

const CASES = [
  ["fixed-window onExceeded delay", fixedWindowDelay],
  ["fixed-window onExceeded fail", fixedWindowFail],
  ["token-bucket onExceeded delay", tokenBucketDelay],
  ["token-bucket onExceeded fail", tokenBucketFail]
] as const

/** This store in a namespace of its own, over `backend`. */
const storeOn = (backend: Layer.Layer<Redis.ReadWrite, Redis.RedisError>) =>
  RateLimiterStore.layer({ namespace: freshNamespace() }).pipe(Layer.provide(backend))

describe("@effect/experimental's RateLimiter tests, on its own memory store under TestClock (the control)", () => {
  for (const [title, run] of CASES) {
    it.effect(title, () => run(testClock).pipe(Effect.provide(RateLimiter.layerStoreMemory)))
  }
})

describe("@effect/experimental's RateLimiter tests, on RateLimiterStore over the embedded backend under TestClock", () => {
  for (const [title, run] of CASES) {
    it.effect(title, () => run(testClock).pipe(Effect.provide(storeOn(Redis.layerMemory()))))
  }
})

describe("@effect/experimental's RateLimiter tests, on RateLimiterStore over real Redis (the minute as 2 s, waiting)", () => {
  for (const [title, run] of CASES) {
    it.live(title, () => Effect.flatMap(realTime(2000), run).pipe(Effect.provide(storeOn(RedisLive))))
  }
})

/** A limiter over this store in a namespace of its own, on `backend`; and the namespace. */
const limiterOn = (backend: Layer.Layer<Redis.ReadWrite, Redis.RedisError>) => {
  const namespace = freshNamespace()
  return {
    namespace,
    layer: RateLimiter.layer.pipe(Layer.provide(RateLimiterStore.layer({ namespace })), Layer.provide(backend))
  }
}

describe("RateLimiterStore on the server's clock", () => {
  /** The retryAfter of an `Exceeded` failure, in ms. */
  const retryAfterMs = (error: RateLimiter.RateLimiterError): number => {
    assert(error.reason === "Exceeded")
    return Duration.toMillis(error.retryAfter)
  }
  const drainThenAdjust = Effect.gen(function*() {
    const limiter = yield* RateLimiter.RateLimiter
    const consume = limiter.consume({ algorithm: "token-bucket", window: "1 minute", limit: 5, key: "a" })
    yield* Effect.repeatN(consume, 4)
    const before = yield* Effect.flip(consume)
    yield* TestClock.adjust("1 minute")
    return { before, after: yield* Effect.either(consume) }
  })

  it.effect("on Redis, TestClock moves nothing: a minute later on Effect's clock the bucket is still empty", () =>
    Effect.gen(function*() {
      const { after, before } = yield* drainThenAdjust.pipe(Effect.provide(limiterOn(RedisLive).layer))
      expect(retryAfterMs(before)).toBe(12_000)
      assert(Either.isLeft(after))
      // The server's clock moved by the milliseconds the test took, not by the minute.
      expect(retryAfterMs(after.left)).toBe(12_000)
    }))

  it.effect("(for contrast) @effect/experimental's Redis store refills its bucket on the client's clock", () =>
    Effect.gen(function*() {
      const url = new URL(redisUrl)
      const store = RateLimiterRedis.layerStore({
        host: url.hostname,
        port: Number(url.port),
        prefix: `${freshNamespace()}:`
      })
      const { after, before } = yield* drainThenAdjust.pipe(
        Effect.provide(RateLimiter.layer.pipe(Layer.provide(store)))
      )
      expect(retryAfterMs(before)).toBe(12_000)
      expect(Either.isRight(after)).toBe(true)
    }))

  it.effect("on the embedded backend, Effect's clock is the server's: the minute refills the bucket", () =>
    Effect.gen(function*() {
      const { after } = yield* drainThenAdjust.pipe(Effect.provide(limiterOn(Redis.layerMemory()).layer))
      assert(Either.isRight(after))
      expect(after.right.remaining).toBe(4)
    }))
})

describe("RateLimiterStore.layer", () => {
  it("throws a TypeError on a bad namespace", () => {
    expect(() => RateLimiterStore.layer({ namespace: "bad ns" })).toThrow(
      /RateLimiterStore namespace must be a non-empty string of at most 64 letters/
    )
    expect(() => RateLimiterStore.layer({ namespace: "" })).toThrow(TypeError)
  })

  it.effect("built where a cast hid a missing Write<RateLimiterStore.Entity>, it dies, naming the grant", () =>
    Effect.gen(function*() {
      const hidden = RateLimiterStore.layer() as Layer.Layer<RateLimiter.RateLimiterStore, never, Redis.Redis>
      const exit = yield* Effect.exit(Effect.scoped(Layer.build(Layer.provide(hidden, Redis.layerMemoryReadOnly()))))
      expect(exit._tag).toBe("Failure")
      expect(String(exit)).toContain(
        "wakuwaku: this operation needs to write RateLimiterStore, but the capability in scope does not grant it " +
          "(granted: nothing)"
      )
    }))
})

// Layered blocks last (see /work/shared/NOTES.md: layer() leaks into later describes).

/** The service in context, made to record every call it is asked to send. */
const recording = (calls: Array<string>) =>
  Layer.effect(
    Redis.Redis,
    Effect.map(Redis.Redis, (redis): Redis.Service => ({
      ...redis,
      script: (script, keys, args) => {
        calls.push(`script ${script.name}`)
        return redis.script(script, keys, args)
      },
      command: (name, args) => {
        calls.push(`command ${name}`)
        return redis.command(name, args)
      }
    }))
  )

const storeError = (operation: string, argument: string, message: string) => ({
  _tag: "RateLimiterError",
  reason: "StoreError",
  "~@effect/experimental/RateLimiter/RateLimiterError": "~@effect/experimental/RateLimiter/RateLimiterError",
  message: `RateLimiterStore.${operation}: ${message}`,
  cause: { _tag: "InvalidInput", operation: `RateLimiterStore.${operation}`, argument, message }
})

const OPERATION = { "fixed-window": "fixedWindow", "token-bucket": "tokenBucket" } as const

forEachBackend("RateLimiterStore", (it) => {
  it.scoped("one script call per consume, whichever algorithm and onExceeded, denials included", () =>
    Effect.gen(function*() {
      const calls: Array<string> = []
      const namespace = freshNamespace()
      const context = yield* Layer.build(
        RateLimiter.layer.pipe(
          Layer.provide(RateLimiterStore.layer({ namespace })),
          Layer.provide(Layer.merge(recording(calls), Capability.ReadWrite))
        )
      )
      const limiter = yield* Effect.provide(RateLimiter.RateLimiter, context)
      for (const algorithm of ["fixed-window", "token-bucket"] as const) {
        for (const onExceeded of ["delay", "fail"] as const) {
          for (let i = 0; i < 3; i++) {
            calls.length = 0
            const key = `${algorithm}-${onExceeded}`
            yield* Effect.either(limiter.consume({ algorithm, onExceeded, window: "1 minute", limit: 2, key }))
            expect(calls, `${key} #${i + 1}`).toEqual([`script RateLimiterStore.${OPERATION[algorithm]}`])
          }
        }
      }
      expect(yield* expectTtls(`@@wakuwaku:RateLimiterStore:${namespace}:*`)).toEqual([])
    }))

  it.effect("every key it writes has a TTL: a window's until it ends, a bucket's until it is full again", () =>
    Effect.gen(function*() {
      const namespace = freshNamespace()
      const store = yield* RateLimiterStore.make({ namespace })
      const refillRate = Duration.seconds(12)
      const started = performance.now()
      // A window of 5 × 12 s, and a bucket of 5 in debt by 3 (8 tokens taken, overflow allowed).
      for (let i = 0; i < 5; i++) yield* store.fixedWindow({ key: "a", tokens: 1, refillRate, limit: 5 })
      expect(yield* store.fixedWindow({ key: "a", tokens: 1, refillRate, limit: 5 })).toEqual([6, expect.any(Number)])
      expect(yield* store.tokenBucket({ key: "a", tokens: 8, limit: 5, refillRate, allowOverflow: true })).toBe(-3)
      // Denied without overflow: nothing taken.
      expect(yield* store.tokenBucket({ key: "a", tokens: 1, limit: 5, refillRate, allowOverflow: false })).toBe(-4)
      // A bucket that stays full has no key.
      expect(yield* store.tokenBucket({ key: "full", tokens: 0, limit: 5, refillRate, allowOverflow: false })).toBe(5)
      const prefix = `@@wakuwaku:RateLimiterStore:${namespace}:`
      expect((yield* keysMatching(`${prefix}*`)).sort()).toEqual([`${prefix}fixed-window:a`, `${prefix}token-bucket:a`])
      expect(yield* expectTtls(`${prefix}*`)).toEqual([])
      const windowTtl = yield* pttl(`${prefix}fixed-window:a`)
      // 8 tokens to refill, at 12 s each.
      const bucketTtl = yield* pttl(`${prefix}token-bucket:a`)
      const elapsed = performance.now() - started
      expect(windowTtl).toBeLessThanOrEqual(60_000)
      expect(windowTtl).toBeGreaterThan(60_000 - elapsed - 2)
      expect(bucketTtl).toBeLessThanOrEqual(96_000)
      expect(bucketTtl).toBeGreaterThan(96_000 - elapsed - 2)
    }))

  it.effect("the contract's fixed window: it ends refillRate per token after it opened; a denial writes nothing", () =>
    Effect.gen(function*() {
      const namespace = freshNamespace()
      const store = yield* RateLimiterStore.make({ namespace })
      const refillRate = Duration.seconds(10)
      const key = `@@wakuwaku:RateLimiterStore:${namespace}:fixed-window:k`
      const [count, ttl] = yield* store.fixedWindow({ key: "k", tokens: 3, refillRate, limit: 4 })
      expect(count).toBe(3)
      expect(ttl).toBeLessThanOrEqual(30_000)
      expect(ttl).toBeGreaterThan(29_000)
      const state = (yield* command("GET", key)) as string
      const [denied, deniedTtl] = yield* store.fixedWindow({ key: "k", tokens: 2, refillRate, limit: 4 })
      expect(denied).toBe(5)
      expect(deniedTtl).toBeLessThanOrEqual(ttl)
      expect(yield* command("GET", key)).toBe(state)
      // No limit: counted past it, the window pushed back.
      const [over, overTtl] = yield* store.fixedWindow({ key: "k", tokens: 2, refillRate, limit: undefined })
      expect(over).toBe(5)
      expect(overTtl).toBeGreaterThan(49_000)
      expect(overTtl).toBeLessThanOrEqual(50_000)
      // Nothing counted on a new key: no key at all.
      expect(yield* store.fixedWindow({ key: "none", tokens: 0, refillRate, limit: 1 })).toEqual([0, 0])
      expect(yield* keysMatching(`@@wakuwaku:RateLimiterStore:${namespace}:*none`)).toEqual([])
    }))

  it.effect("bad input fails with RateLimitStoreError (cause InvalidInput) and writes nothing", () =>
    Effect.gen(function*() {
      const namespace = freshNamespace()
      const store = yield* RateLimiterStore.make({ namespace })
      const refillRate = Duration.seconds(1)
      const window = (o: Partial<Parameters<typeof store.fixedWindow>[0]>) =>
        Effect.flip(store.fixedWindow({ key: "a", tokens: 1, refillRate, limit: 5, ...o }))
      const bucket = (o: Partial<Parameters<typeof store.tokenBucket>[0]>) =>
        Effect.flip(store.tokenBucket({ key: "a", tokens: 1, limit: 5, refillRate, allowOverflow: false, ...o }))
      const json = (e: unknown) => JSON.parse(JSON.stringify(e))
      expect(json(yield* window({ tokens: 1.5 }))).toEqual(
        storeError("fixedWindow", "tokens", "tokens must be a non-negative safe integer, got 1.5")
      )
      expect(json(yield* bucket({ tokens: -1 }))).toEqual(
        storeError("tokenBucket", "tokens", "tokens must be a non-negative safe integer, got -1")
      )
      expect(json(yield* window({ limit: -1 }))).toEqual(
        storeError("fixedWindow", "limit", "limit must be a non-negative safe integer, got -1")
      )
      expect(json(yield* bucket({ limit: Number.NaN }))).toEqual(
        storeError("tokenBucket", "limit", "limit must be a non-negative safe integer, got null")
      )
      for (const [refill, shown] of [[Duration.nanos(999n), "999ns"], [Duration.zero, "0"]] as const) {
        expect(json(yield* window({ refillRate: refill }))).toEqual(
          storeError(
            "fixedWindow",
            "refillRate",
            `refillRate must be a duration from 1 µs to 10^11 ms (about 3.2 years), got ${shown}`
          )
        )
      }
      expect(json(yield* bucket({ refillRate: Duration.infinity }))).toEqual(
        storeError(
          "tokenBucket",
          "refillRate",
          "refillRate must be a duration from 1 µs to 10^11 ms (about 3.2 years), got Infinity"
        )
      )
      expect(json(yield* bucket({ limit: 2 ** 40, refillRate: Duration.hours(1) }))).toEqual(
        storeError(
          "tokenBucket",
          "limit",
          "the bucket would take more than 1e14 ms (about 3000 years) to fill: limit 1099511627776, refillRate 1h"
        )
      )
      expect(json(yield* window({ key: "\uD800" }))).toEqual(
        storeError("fixedWindow", "key", "a string name must be well-formed UTF-16 (it has a lone surrogate)")
      )
      // A window may not reach more than 10^11 ms ahead (the bound of every duration kept in Redis).
      const far = yield* window({ tokens: 2, refillRate: Duration.millis(1e11), limit: undefined })
      expect(far.reason).toBe("StoreError")
      expect(far.message).toMatch(/the window would end more than 10\^11 ms \(about 3\.2 years\) from now/)
      expect(yield* keysMatching(`@@wakuwaku:RateLimiterStore:${namespace}:*`)).toEqual([])
      // The bound itself is allowed.
      expect(yield* store.fixedWindow({ key: "a", tokens: 1, refillRate: Duration.millis(1e11), limit: undefined }))
        .toEqual([1, 1e11])
    }))

  it.effect("a failure of Redis is a RateLimitStoreError whose cause is the RedisError", () =>
    Effect.gen(function*() {
      const namespace = freshNamespace()
      const store = yield* RateLimiterStore.make({ namespace })
      yield* command("RPUSH", `@@wakuwaku:RateLimiterStore:${namespace}:token-bucket:a`, "x")
      yield* command("PEXPIRE", `@@wakuwaku:RateLimiterStore:${namespace}:token-bucket:a`, 60_000)
      const error = yield* Effect.flip(
        store.tokenBucket({ key: "a", tokens: 1, limit: 5, refillRate: Duration.seconds(1), allowOverflow: false })
      )
      expect(error.reason).toBe("StoreError")
      expect(error.message).toMatch(/^RateLimiterStore\.tokenBucket: Redis script RateLimiterStore\.tokenBucket failed/)
      expect(error.message).toContain("WRONGTYPE")
      expect(error.cause).toBeInstanceOf(Redis.RedisError)
    }))
})
