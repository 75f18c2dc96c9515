import { Duration, Effect, Option } from "effect"
import { expect, vi } from "vitest"
import { Rate, Redis, TokenBucket } from "wakuwaku"
import { exists, forEachBackend, keysMatching, pttl } from "./support/backends.js"
import { freshNamespace } from "./support/redis.js"

const keyOf = (namespace: string, name: string) => `@@wakuwaku:TokenBucket:${namespace}:${name}`

const allowed = (admission: TokenBucket.Admission): number => {
  if (admission._tag !== "Allowed") throw new Error(`expected Allowed, got ${JSON.stringify(admission)}`)
  return admission.remaining
}

/** The retryAfter of a denial in ms; null when it can never succeed. */
const denied = (admission: TokenBucket.Admission): number | null => {
  if (admission._tag !== "Denied") throw new Error(`expected Denied, got ${JSON.stringify(admission)}`)
  return Option.match(admission.retryAfter, { onNone: () => null, onSome: Duration.toMillis })
}

const keysOf = (namespace: string) => keysMatching(`@@wakuwaku:*:${namespace}:*`)

/** The spec's example: 20 back-to-back, then the 21st. */
const burst = (bucket: TokenBucket.TokenBucket<string>, name: string) =>
  Effect.gen(function*() {
    const started = performance.now()
    const remaining: Array<number> = []
    for (let i = 0; i < 20; i++) remaining.push(allowed(yield* bucket.acquire(name, 1)))
    const retry = denied(yield* bucket.acquire(name, 1))
    return { remaining, retry, elapsed: performance.now() - started }
  })

forEachBackend("TokenBucket", (it) => {
  it.scoped("capacity 20, 1 per 3 s: 20 allowed with remaining 19..0, the 21st denied for 3000 ms less the burst", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const LOGINS = TokenBucket.make<string>(ns, 20, Rate.make(1, "3 seconds"))
      const started = performance.now()
      const { elapsed, remaining, retry } = yield* burst(LOGINS, "203.0.113.7")
      expect(remaining).toEqual([19, 18, 17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0])
      expect(retry).not.toBeNull()
      expect(retry).toBeLessThanOrEqual(3000)
      expect(retry).toBeGreaterThanOrEqual(3000 - Math.ceil(elapsed) - 1)
      // Full again 60 s after the burst began, when the key has expired: idle names use no memory.
      const ttl = yield* pttl(keyOf(ns, "203.0.113.7"))
      expect(ttl).toBeLessThanOrEqual(60_000)
      expect(ttl).toBeGreaterThanOrEqual(60_000 - Math.ceil(performance.now() - started) - 1)
    }))

  it.scoped("the example scaled down: left alone until full, the key is gone and the whole burst is back", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const FAST = TokenBucket.make<string>(ns, 20, Rate.make(1, "15 millis"))
      expect(allowed(yield* FAST.acquire("a", 20))).toBe(0)
      const ttl = yield* pttl(keyOf(ns, "a"))
      expect(ttl).toBeGreaterThan(0)
      expect(ttl).toBeLessThanOrEqual(300)
      yield* Effect.sleep(Duration.millis(ttl + 1))
      expect(yield* exists(keyOf(ns, "a"))).toBe(0)
      expect(yield* keysOf(ns)).toEqual([])
      expect(allowed(yield* FAST.acquire("a", 20))).toBe(0)
    }))

  it.scoped("refill is smooth: half a period after draining, retryAfter is about half the period", () =>
    Effect.gen(function*() {
      const SLOW = TokenBucket.make<string>(freshNamespace(), 1, Rate.make(1, "1 second"))
      const started = performance.now()
      expect(allowed(yield* SLOW.acquire("a", 1))).toBe(0)
      // On the wall clock that both stores' time runs on (a timer may fire a millisecond early): the
      // drain happened before `drained` + 1 (the store counts µs, Date.now whole ms), the next acquire
      // after `again`.
      const drained = Date.now()
      yield* Effect.sleep("500 millis")
      const again = Date.now()
      const retry = denied(yield* SLOW.acquire("a", 1))
      const elapsed = performance.now() - started
      // Half a token came back: the wait is the other half, less whatever else passed (about 500 ms).
      expect(retry).toBeLessThanOrEqual(1000 - (again - drained - 1))
      expect(retry).toBeGreaterThanOrEqual(1000 - Math.ceil(elapsed) - 1)
      expect(yield* SLOW.peek("a")).toBe(0)
    }))

  it.scoped("a retry exactly at retryAfter succeeds", () =>
    Effect.gen(function*() {
      // 500 ms a token: slow enough that a busy machine cannot refill a whole token unseen.
      const B = TokenBucket.make<string>(freshNamespace(), 2, Rate.make(2, "1 second"))
      for (const cost of [1, 2]) {
        const name = `cost-${cost}`
        expect(allowed(yield* B.acquire(name, 2))).toBe(0)
        const retry = denied(yield* B.acquire(name, cost))
        expect(retry).toBeGreaterThan(0)
        expect(retry).toBeLessThanOrEqual(cost * 500)
        yield* Effect.sleep(Duration.millis(retry!))
        expect((yield* B.acquire(name, cost))._tag).toBe("Allowed")
      }
    }))

  it.scoped("the key's PTTL is the time until the bucket is full, never -1", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const B = TokenBucket.make<string>(ns, 10, Rate.perSecond(10))
      const started = performance.now()
      expect(allowed(yield* B.acquire("a", 4))).toBe(6)
      const ttl = yield* pttl(keyOf(ns, "a"))
      // 4 tokens at 10 a second: full 400 ms after the acquire.
      expect(ttl).toBeLessThanOrEqual(400)
      expect(ttl).toBeGreaterThanOrEqual(400 - Math.ceil(performance.now() - started) - 1)
      // A denial stores too, and keeps a TTL.
      expect(denied(yield* B.acquire("a", 9))).toBeLessThanOrEqual(300)
      const after = yield* pttl(keyOf(ns, "a"))
      expect(after).toBeGreaterThan(0)
      expect(after).toBeLessThanOrEqual(400)
    }))

  it.scoped("a denial takes nothing", () =>
    Effect.gen(function*() {
      const B = TokenBucket.make<string>(freshNamespace(), 5, Rate.make(1, "1 hour"))
      expect(allowed(yield* B.acquire("a", 3))).toBe(2)
      const retry = denied(yield* B.acquire("a", 4))
      expect(retry).toBeGreaterThan(7_190_000)
      expect(retry).toBeLessThanOrEqual(7_200_000)
      expect(yield* B.peek("a")).toBe(2)
      expect(allowed(yield* B.acquire("a", 2))).toBe(0)
    }))

  it.scoped("cost above capacity is denied with retryAfter None and takes nothing", () =>
    Effect.gen(function*() {
      const B = TokenBucket.make<string>(freshNamespace(), 5, Rate.make(1, "1 hour"))
      expect(denied(yield* B.acquire("a", 6))).toBeNull()
      expect(allowed(yield* B.acquire("a", 5))).toBe(0)
      expect(denied(yield* B.acquire("a", 6))).toBeNull()
    }))

  it.scoped("capacity 0 lets only cost 0 through", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const B = TokenBucket.make<string>(ns, 0, Rate.perSecond(1))
      expect(denied(yield* B.acquire("a", 1))).toBeNull()
      expect(denied(yield* B.acquire("a", 1_000))).toBeNull()
      expect(allowed(yield* B.acquire("a", 0))).toBe(0)
      expect(yield* keysOf(ns)).toEqual([])
    }))

  it.scoped("cost 0 is always allowed, and takes nothing", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const B = TokenBucket.make<string>(ns, 2, Rate.make(1, "1 hour"))
      expect(allowed(yield* B.acquire("full", 0))).toBe(2)
      expect(yield* keysOf(ns)).toEqual([])
      expect(allowed(yield* B.acquire("a", 2))).toBe(0)
      expect(allowed(yield* B.acquire("a", 0))).toBe(0)
      expect(denied(yield* B.acquire("a", 1))).toBeGreaterThan(3_590_000)
    }))

  it.scoped("weighted cost: a quota in units rather than calls", () =>
    Effect.gen(function*() {
      // 50 a minute, so that the assertions do not depend on how fast the machine is.
      const EXPORT_ROWS = TokenBucket.make<number>(freshNamespace(), 10_000, Rate.make(50, "1 minute"))
      expect(allowed(yield* EXPORT_ROWS.acquire(42, 7_000))).toBe(3_000)
      const retry = denied(yield* EXPORT_ROWS.acquire(42, 4_000))
      // 1000 rows short at 50 a minute: 20 minutes.
      expect(retry).toBeGreaterThan(1_199_000)
      expect(retry).toBeLessThanOrEqual(1_200_000)
      expect(allowed(yield* EXPORT_ROWS.acquire(42, 3_000))).toBe(0)
      expect(allowed(yield* EXPORT_ROWS.acquire(43, 10_000))).toBe(0)
    }))

  it.scoped("reset says whether the bucket existed, and the next acquire sees it full", () =>
    Effect.gen(function*() {
      const B = TokenBucket.make<string>(freshNamespace(), 3, Rate.make(1, "1 hour"))
      expect(yield* B.reset("a")).toBe(false)
      expect(allowed(yield* B.acquire("a", 3))).toBe(0)
      expect(yield* B.reset("a")).toBe(true)
      expect(yield* B.peek("a")).toBe(3)
      expect(allowed(yield* B.acquire("a", 1))).toBe(2)
      expect(yield* B.reset("a")).toBe(true)
      expect(yield* B.reset("a")).toBe(false)
    }))

  it.scoped("peek reads the level without taking", () =>
    Effect.gen(function*() {
      const B = TokenBucket.make<string>(freshNamespace(), 7, Rate.make(1, "1 hour"))
      expect(yield* B.peek("a")).toBe(7)
      expect(allowed(yield* B.acquire("a", 3))).toBe(4)
      expect(yield* B.peek("a")).toBe(4)
      expect(yield* B.peek("a")).toBe(4)
    }))

  it.scoped("every name type encodes canonically into the key", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const rate = Rate.make(1, "1 hour")
      yield* TokenBucket.make<string>(ns, 2, rate).acquire("user:1 é", 1)
      yield* TokenBucket.make<number>(ns, 2, rate).acquire(42, 1)
      yield* TokenBucket.make<number>(ns, 2, rate).acquire(-0, 1)
      yield* TokenBucket.make<number>(ns, 2, rate).acquire(-7, 1)
      yield* TokenBucket.make<bigint>(ns, 2, rate).acquire(2n ** 70n, 1)
      yield* TokenBucket.make<Uint8Array>(ns, 2, rate).acquire(new Uint8Array([0xde, 0xad, 0x01]), 1)
      const keys = (yield* keysOf(ns)).sort()
      expect(keys).toEqual(
        ["-7", "0", "1180591620717411303424", "42", "dead01", "user:1 é"].map((name) => keyOf(ns, name)).sort()
      )
      // The same integer as a number and as a bigint is the same bucket.
      expect(allowed(yield* TokenBucket.make<bigint>(ns, 2, rate).acquire(42n, 1))).toBe(0)
    }))

  it.scoped("namespaces are isolated", () =>
    Effect.gen(function*() {
      const A = TokenBucket.make<string>(freshNamespace(), 2, Rate.make(1, "1 hour"))
      const B = TokenBucket.make<string>(freshNamespace(), 2, Rate.make(1, "1 hour"))
      expect(allowed(yield* A.acquire("x", 2))).toBe(0)
      expect(allowed(yield* B.acquire("x", 1))).toBe(1)
      expect(denied(yield* A.acquire("x", 1))).toBeGreaterThan(0)
    }))

  it.scoped("bad input fails with InvalidInput and writes nothing", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const S = TokenBucket.make<string>(ns, 5, Rate.perSecond(1))
      const N = TokenBucket.make<number>(ns, 5, Rate.perSecond(1))
      for (const cost of [-1, 1.5, Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY, 2 ** 53]) {
        const error = yield* Effect.flip(S.acquire("a", cost))
        expect(error).toBeInstanceOf(Redis.InvalidInput)
        expect(error._tag).toBe("InvalidInput")
        expect(error).toMatchObject({ argument: "cost", operation: `TokenBucket(${ns}).acquire` })
      }
      for (const name of [Number.NaN, 1.5, 2 ** 53, Number.POSITIVE_INFINITY]) {
        const error = yield* Effect.flip(N.acquire(name, 1))
        expect(error).toMatchObject({ _tag: "InvalidInput", argument: "name" })
        expect(yield* Effect.flip(N.reset(name))).toMatchObject({ _tag: "InvalidInput", argument: "name" })
        expect(yield* Effect.flip(N.peek(name))).toMatchObject({ _tag: "InvalidInput", argument: "name" })
      }
      const lone = yield* Effect.flip(S.acquire("bad \uD800 name", 1))
      expect(lone).toMatchObject({ _tag: "InvalidInput", argument: "name" })
      expect(lone.message).toContain("lone surrogate")
      expect(yield* keysOf(ns)).toEqual([])
    }))

  // Redis reads its own clock; the memory backend reads Effect's Clock, whose nanosecond time (what it
  // uses) is process.hrtime from an origin taken when effect loaded, so a faked Date reaches neither.
  it.scoped("the client's clock does not matter: skewed by +1 h or -1 h, the same admissions", () =>
    Effect.gen(function*() {
      for (const skew of [3_600_000, -3_600_000]) {
        vi.useFakeTimers({ toFake: ["Date"] })
        try {
          vi.setSystemTime(Date.now() + skew)
          const { elapsed, remaining, retry } = yield* burst(
            TokenBucket.make<string>(freshNamespace(), 20, Rate.make(1, "3 seconds")),
            "a"
          )
          expect(remaining).toEqual([19, 18, 17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0])
          expect(retry).toBeLessThanOrEqual(3000)
          expect(retry).toBeGreaterThanOrEqual(3000 - Math.ceil(elapsed) - 1)
        } finally {
          vi.useRealTimers()
        }
      }
    }))
})
