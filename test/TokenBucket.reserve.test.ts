/**
 * Reservations on a token bucket: debt, the wait that pays it, refunds and `throttle`.
 *
 * - Under `TestClock` on the embedded backend, every value is exact: the memory backend reads Effect's
 *   Clock, so the waits, retry times, TTLs and stored levels asserted are the rules' own numbers.
 * - On every backend (the throwaway server, memory, the cluster), with the server's clock: the rules
 *   that do not depend on exact time, interrupted waiters giving back to the exact stored level, and
 *   bad input.
 */
import { describe, expect, it } from "@effect/vitest"
import { Chunk, Clock, Duration, Effect, Exit, Fiber, Option, Schema, TestClock, TestContext } from "effect"
import { Rate, Redis, TokenBucket } from "wakuwaku"
import { forEachBackend, get, keysMatching, pttl } from "./support/backends.js"
import { freshNamespace } from "./support/redis.js"

const { Granted, Refused } = TokenBucket.Reservation
const { Allowed, Denied } = TokenBucket.Admission
const ms = (n: number) => Duration.millis(n)
/** A Granted: its wait (ms), cost, server time (µs) and the level it left. */
const granted = (wait: number, cost: number, grantedAt: number, level: number) =>
  Granted({ wait: ms(wait), cost, grantedAt, level })
const keyOf = (namespace: string, name: string) => `@@wakuwaku:TokenBucket:${namespace}:${name}`

/** The stored state of a bucket: its tokens and the server time (µs) they were computed at; null: full. */
const state = (namespace: string, name: string) =>
  Effect.map(get(keyOf(namespace, name)), (value) => {
    if (value === null) return null
    const [tokens, ts] = value.split(" ").map(Number)
    return { tokens: tokens!, ts: ts! }
  })

/** How many fibers sleep on the TestClock (the memory backend's sweep among them). */
const sleepers = Effect.map(TestClock.sleeps(), Chunk.size)

/** Yields until `n` more fibers than `before` sleep on the TestClock. */
const sleeping = (n: number, before: number) =>
  Effect.gen(function*() {
    while ((yield* sleepers) < before + n) yield* Effect.yieldNow()
  })

describe("TokenBucket reservations under TestClock, on the embedded backend (exact)", () => {
  // 10 tokens, one every 100 ms: a debt of d tokens is paid in exactly d × 100 ms.
  const TEN = (ns: string) => TokenBucket.make<string>(ns, 10, Rate.make(10, "1 second"))

  it.effect("debt: granted while the tokens left would be ≥ −(rate × maxWait); the wait pays the debt exactly", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const B = TEN(ns)
      expect(yield* B.reserve("a", 10, 0)).toEqual(granted(0, 10, 0, 0))
      // 3 tokens short with 200 ms allowed: −3 < −2, refused; in 100 ms, −2 would do.
      expect(yield* B.reserve("a", 3, "200 millis")).toEqual(Refused({ retryAfter: Option.some(ms(100)) }))
      expect(yield* state(ns, "a")).toEqual({ tokens: 0, ts: 0 })
      // With 300 ms allowed: granted into a debt of 3, paid in 300 ms.
      expect(yield* B.reserve("a", 3, "300 millis")).toEqual(granted(300, 3, 0, -3))
      expect(yield* state(ns, "a")).toEqual({ tokens: -3, ts: 0 })
      // Exactly at the bound: the next waits behind it, 5 tokens of debt.
      expect(yield* B.reserve("a", 2, "500 millis")).toEqual(granted(500, 2, 0, -5))
      expect(yield* state(ns, "a")).toEqual({ tokens: -5, ts: 0 })
      yield* TestClock.adjust("250 millis")
      // −2.5 now: one more token makes −3.5, 350 ms of refill.
      expect(yield* B.reserve("a", 1, "349 millis")).toEqual(Refused({ retryAfter: Option.some(ms(1)) }))
      expect(yield* B.reserve("a", 1, "350 millis")).toEqual(granted(350, 1, 250_000, -3.5))
      expect(yield* state(ns, "a")).toEqual({ tokens: -3.5, ts: 250_000 })
      // Full 10 tokens + 3.5 of debt later: 1350 ms.
      expect(yield* pttl(keyOf(ns, "a"))).toBe(1350)
    }).pipe(Effect.provide(Redis.layerMemory())))

  it.effect("reservations queue in the order made: 6 of 1 on a bucket of 2 wait 0, 0, 100, 200, 300, 400 ms", () =>
    Effect.gen(function*() {
      const B = TokenBucket.make<string>(freshNamespace(), 2, Rate.make(10, "1 second"))
      const waits: Array<TokenBucket.Reservation> = []
      for (let i = 0; i < 6; i++) waits.push(yield* B.reserve("a", 1, "1 second"))
      expect(waits).toEqual([0, 0, 100, 200, 300, 400].map((wait, i) => granted(wait, 1, 0, 1 - i)))
    }).pipe(Effect.provide(Redis.layerMemory())))

  it.effect("a Refused takes nothing, and says when the same reservation would be granted", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const B = TEN(ns)
      expect(yield* B.reserve("a", 8, "1 second")).toEqual(granted(0, 8, 0, 2))
      yield* TestClock.adjust("30 millis")
      // 2.3 tokens; 8 more would leave −5.7, and 100 ms allows −1: 470 ms to go.
      expect(yield* B.reserve("a", 8, "100 millis")).toEqual(Refused({ retryAfter: Option.some(ms(470)) }))
      expect(yield* state(ns, "a")).toEqual({ tokens: 2 + 30_000 * 10 / 1_000_000, ts: 30_000 })
      expect(yield* B.peek("a")).toBe(2)
      yield* TestClock.adjust("469 millis")
      expect((yield* B.reserve("a", 8, "100 millis"))._tag).toBe("Refused")
      yield* TestClock.adjust("1 millis")
      expect(yield* B.reserve("a", 8, "100 millis")).toEqual(granted(100, 8, 500_000, -1))
      // Cost above capacity: never, whatever maxWait, and nothing taken.
      expect(yield* B.reserve("a", 11, "1 hour")).toEqual(Refused({ retryAfter: Option.none() }))
      expect(yield* state(ns, "a")).toEqual({ tokens: -1, ts: 500_000 })
    }).pipe(Effect.provide(Redis.layerMemory())))

  it.effect("in debt: acquire is denied for the debt plus its cost, peek says 0, the TTL is until full", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const B = TEN(ns)
      expect(yield* B.reserve("a", 10, 0)).toEqual(granted(0, 10, 0, 0))
      expect(yield* B.reserve("a", 4, "1 second")).toEqual(granted(400, 4, 0, -4))
      expect(yield* B.acquire("a", 1)).toEqual(Denied({ retryAfter: Option.some(ms(500)) }))
      // Cost 0 asks whether the bucket is out of debt.
      expect(yield* B.acquire("a", 0)).toEqual(Denied({ retryAfter: Option.some(ms(400)) }))
      expect(yield* B.peek("a")).toBe(0)
      expect(yield* pttl(keyOf(ns, "a"))).toBe(1400)
      yield* TestClock.adjust("399 millis")
      expect(yield* B.acquire("a", 0)).toEqual(Denied({ retryAfter: Option.some(ms(1)) }))
      expect(yield* B.peek("a")).toBe(0)
      yield* TestClock.adjust("1 millis")
      expect(yield* B.acquire("a", 0)).toEqual(Allowed({ remaining: 0 }))
      expect(yield* B.acquire("a", 1)).toEqual(Denied({ retryAfter: Option.some(ms(100)) }))
      expect(yield* pttl(keyOf(ns, "a"))).toBe(1000)
      yield* TestClock.adjust("1000 millis")
      expect(yield* B.peek("a")).toBe(10)
      yield* TestClock.adjust("1 millis")
      expect(yield* keysMatching(`*${ns}*`)).toEqual([])
    }).pipe(Effect.provide(Redis.layerMemory())))

  it.effect("the wait is rounded up to the millisecond: 1 token at 3 a second waits 334 ms, not 333", () =>
    Effect.gen(function*() {
      const B = TokenBucket.make<string>(freshNamespace(), 1, Rate.make(3, "1 second"))
      expect(yield* B.reserve("a", 1, 0)).toEqual(granted(0, 1, 0, 0))
      expect(yield* B.reserve("a", 1, "333 millis")).toEqual(Refused({ retryAfter: Option.some(ms(1)) }))
      expect(yield* B.reserve("a", 1, "1 second")).toEqual(granted(334, 1, 0, -1))
      yield* TestClock.adjust("333 millis")
      // 1 token of debt and 999 µs of refill short of paying it.
      expect(yield* B.acquire("a", 0)).toEqual(Denied({ retryAfter: Option.some(ms(1)) }))
      yield* TestClock.adjust("1 millis")
      expect(yield* B.acquire("a", 0)).toEqual(Allowed({ remaining: 0 }))
      // A maxWait under a millisecond allows only what fits in whole milliseconds: here none.
      expect(yield* B.reserve("a", 1, "999 micros")).toEqual(Refused({ retryAfter: Option.some(ms(333)) }))
    }).pipe(Effect.provide(Redis.layerMemory())))

  it.effect("reserve with maxWait 0 is acquire: the same outcomes, retry times and stored levels", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const B = TokenBucket.make<string>(ns, 7, Rate.make(3, "1 second"))
      const costs = [3, 5, 0, 2, 1, 8, 4, 7, 1, 1, 6]
      for (const [i, cost] of costs.entries()) {
        const reserved = yield* B.reserve("r", cost, 0)
        const acquired = yield* B.acquire("a", cost)
        expect(reserved._tag === "Granted", `#${i}`).toBe(acquired._tag === "Allowed")
        if (reserved._tag === "Granted") expect(reserved.wait).toEqual(ms(0))
        if (reserved._tag === "Refused" && acquired._tag === "Denied") {
          expect(reserved.retryAfter).toEqual(acquired.retryAfter)
        }
        expect(yield* state(ns, "r")).toEqual(yield* state(ns, "a"))
        yield* TestClock.adjust(`${(i * 37) % 400} millis`)
      }
    }).pipe(Effect.provide(Redis.layerMemory())))

  it.effect("refund pays the debt first, never fills past capacity, and says the tokens left (0 in debt)", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const B = TEN(ns)
      expect(yield* B.reserve("a", 10, 0)).toEqual(granted(0, 10, 0, 0))
      expect(yield* B.reserve("a", 6, "1 second")).toEqual(granted(600, 6, 0, -6))
      yield* TestClock.adjust("150 millis")
      // −4.5: 2 back leaves −2.5, still in debt.
      expect(yield* B.refund("a", 2)).toBe(0)
      expect(yield* state(ns, "a")).toEqual({ tokens: -2.5, ts: 150_000 })
      expect(yield* B.reserve("a", 1, "1 second")).toEqual(granted(350, 1, 150_000, -3.5))
      expect(yield* B.refund("a", 4)).toBe(0)
      expect(yield* state(ns, "a")).toEqual({ tokens: 0.5, ts: 150_000 })
      expect(yield* pttl(keyOf(ns, "a"))).toBe(950)
      expect(yield* B.refund("a", 7)).toBe(7)
      // Past capacity: full, so the key goes.
      expect(yield* B.refund("a", 100)).toBe(10)
      expect(yield* state(ns, "a")).toBeNull()
      expect(yield* B.refund("fresh", 3)).toBe(10)
      expect(yield* B.refund("a", 0)).toBe(10)
      expect(yield* keysMatching(`*${ns}*`)).toEqual([])
    }).pipe(Effect.provide(Redis.layerMemory())))

  it.effect("throttle: 6 calls on a bucket of 2 start at 0, 0, 100, 200, 300, 400 ms, each at its time exactly", () =>
    Effect.gen(function*() {
      const B = TokenBucket.make<string>(freshNamespace(), 2, Rate.make(10, "1 second"))
      const starts: Array<number> = []
      const call = Effect.flatMap(Clock.currentTimeMillis, (now) => Effect.sync(() => starts.push(now)))
      const fibers: Array<Fiber.RuntimeFiber<unknown, unknown>> = []
      const before = yield* sleepers
      for (let i = 0; i < 6; i++) fibers.push(yield* Effect.fork(TokenBucket.throttle(B, "a")(call)))
      yield* sleeping(4, before)
      expect(starts).toEqual([0, 0])
      yield* TestClock.adjust("99 millis")
      expect(starts).toEqual([0, 0])
      yield* TestClock.adjust("1 millis")
      expect(starts).toEqual([0, 0, 100])
      yield* TestClock.adjust("300 millis")
      expect(starts).toEqual([0, 0, 100, 200, 300, 400])
      yield* Fiber.joinAll(fibers)
    }).pipe(Effect.provide(Redis.layerMemory())))

  it.effect("throttle refused: RateLimited with the retry time, or None when the cost exceeds capacity; nothing runs", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const B = TEN(ns)
      let ran = 0
      const call = Effect.sync(() => ran++)
      yield* TokenBucket.throttle(call, B, "a", { cost: 10 })
      const late = yield* Effect.flip(TokenBucket.throttle(call, B, "a", { cost: 3, maxWait: "250 millis" }))
      expect(late).toEqual(new TokenBucket.RateLimited({ retryAfter: Option.some(ms(50)) }))
      expect(late.message).toBe("rate limited: retry after 50 ms")
      const never = yield* Effect.flip(TokenBucket.throttle(call, B, "a", { cost: 11 }))
      expect(never).toEqual(new TokenBucket.RateLimited({ retryAfter: Option.none() }))
      expect(never._tag).toBe("RateLimited")
      expect(ran).toBe(1)
      expect(yield* state(ns, "a")).toEqual({ tokens: 0, ts: 0 })
    }).pipe(Effect.provide(Redis.layerMemory())))

  it.effect("maxWait is respected: of 60 throttled calls with maxWaits from 0 to 1 s, none sleeps past its own", () =>
    Effect.gen(function*() {
      const B = TokenBucket.make<string>(freshNamespace(), 5, Rate.make(20, "1 second"))
      const outcomes: Array<{ readonly maxWait: number; readonly slept?: number; readonly refused?: boolean }> = []
      const fibers: Array<Fiber.RuntimeFiber<unknown, unknown>> = []
      for (let i = 0; i < 60; i++) {
        const maxWait = (i * 397) % 1000
        const called = yield* Clock.currentTimeMillis
        const call = Effect.flatMap(
          Clock.currentTimeMillis,
          (now) => Effect.sync(() => outcomes.push({ maxWait, slept: now - called }))
        )
        fibers.push(
          yield* Effect.fork(
            TokenBucket.throttle(call, B, "a", { maxWait: ms(maxWait) }).pipe(
              Effect.catchTag("RateLimited", () => Effect.sync(() => outcomes.push({ maxWait, refused: true })))
            )
          )
        )
        if (i % 10 === 9) yield* TestClock.adjust("37 millis")
      }
      yield* TestClock.adjust("2 seconds")
      yield* Fiber.joinAll(fibers)
      expect(outcomes).toHaveLength(60)
      for (const outcome of outcomes) {
        if (outcome.slept !== undefined) expect(outcome.slept).toBeLessThanOrEqual(outcome.maxWait)
      }
      // Some waited, some were refused: the bound was reached.
      expect(outcomes.filter((o) => (o.slept ?? 0) > 0).length).toBeGreaterThan(10)
      expect(outcomes.filter((o) => o.refused).length).toBeGreaterThan(10)
    }).pipe(Effect.provide(Redis.layerMemory())))

  it.effect("throttle is dual, and its waiter interrupted, last in the queue, gives back exactly what it reserved", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const B = TEN(ns)
      expect(yield* TokenBucket.throttle(Effect.succeed("first"), B, "a", { cost: 9 })).toBe("first")
      const before = yield* sleepers
      const waiter = yield* Effect.fork(Effect.succeed("second").pipe(TokenBucket.throttle(B, "a", { cost: 4 })))
      yield* sleeping(1, before)
      expect(yield* state(ns, "a")).toEqual({ tokens: -3, ts: 0 })
      yield* TestClock.adjust("120 millis")
      expect(Exit.isInterrupted(yield* Fiber.interrupt(waiter))).toBe(true)
      expect(yield* state(ns, "a")).toEqual({ tokens: 1 + 120_000 * 10 / 1_000_000, ts: 120_000 })
    }).pipe(Effect.provide(Redis.layerMemory())))

  it("RateLimited is a Schema.TaggedError whose retryAfter survives JSON", () => {
    for (const retryAfter of [Option.some(ms(1234)), Option.none()]) {
      const error = new TokenBucket.RateLimited({ retryAfter })
      const json = JSON.stringify(Schema.encodeSync(TokenBucket.RateLimited)(error))
      const back = Schema.decodeUnknownSync(TokenBucket.RateLimited)(JSON.parse(json))
      expect(back).toBeInstanceOf(TokenBucket.RateLimited)
      expect(back).toEqual(error)
      expect(back.retryAfter).toEqual(retryAfter)
    }
    expect(JSON.stringify(
      Schema.encodeSync(TokenBucket.RateLimited)(
        new TokenBucket.RateLimited({ retryAfter: Option.some(ms(5)) })
      )
    )).toBe(`{"retryAfter":{"_tag":"Some","value":{"_tag":"Millis","millis":5}},"_tag":"RateLimited"}`)
  })
})

// One token every 2^20 µs: every level the scripts compute is a dyadic fraction a double holds exactly,
// so a reservation refunded later leaves exactly the level it would have had (no rounding to forgive).
const DYADIC = Rate.make(1, Duration.micros(2n ** 20n))

forEachBackend("TokenBucket reservations", (it) => {
  it.effect("100 waiters interrupted, the last first, reclaim: the stored level is as if they had never come, exactly", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const B = TokenBucket.make<string>(ns, 500, DYADIC)
      // Drained: 0 tokens at t0. Every waiter goes into debt and sleeps on the TestClock, which never moves.
      expect(yield* B.acquire("a", 500)).toEqual(Allowed({ remaining: 0 }))
      const before = (yield* state(ns, "a"))!
      expect(before.tokens).toBe(0)
      const fibers: Array<Fiber.RuntimeFiber<unknown, unknown>> = []
      const asleep = yield* sleepers
      for (let i = 0; i < 100; i++) {
        fibers.push(yield* Effect.fork(TokenBucket.throttle(Effect.void, B, "a", { cost: 1 + (i % 3) })))
      }
      yield* sleeping(100, asleep)
      const inDebt = (yield* state(ns, "a"))!
      // 100 waiters of 1, 2 and 3 tokens: 199 tokens of debt, less the refill meanwhile.
      expect(inDebt.tokens).toBe(-199 + (inDebt.ts - before.ts) / 2 ** 20)
      // Each gives back at the end of the queue, the one before it next: every one reclaims.
      for (const fiber of fibers.reverse()) yield* Fiber.interrupt(fiber)
      const after = (yield* state(ns, "a"))!
      expect(after.tokens).toBe(before.tokens + (after.ts - before.ts) / 2 ** 20)
      expect(yield* B.peek("a")).toBe(Math.floor(after.tokens))
    }).pipe(Effect.provide(TestContext.TestContext)))

  it.effect("in debt, on the server's clock: acquire is denied for debt + cost, peek says 0, PTTL until full", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      // A token a second: time passing during the test changes no whole count.
      const B = TokenBucket.make<string>(ns, 5, Rate.perSecond(1))
      const started = performance.now()
      expect(yield* B.reserve("a", 5, 0)).toMatchObject({ _tag: "Granted", wait: ms(0), cost: 5, level: 0 })
      const debt = yield* B.reserve("a", 3, "1 hour")
      if (debt._tag !== "Granted") return expect.fail("expected Granted")
      const elapsed = () => Math.ceil(performance.now() - started) + 1
      expect(Duration.toMillis(debt.wait)).toBeLessThanOrEqual(3000)
      expect(Duration.toMillis(debt.wait)).toBeGreaterThanOrEqual(3000 - elapsed())
      const denied = yield* B.acquire("a", 2)
      if (denied._tag !== "Denied") return expect.fail("expected Denied")
      const retry = Duration.toMillis(Option.getOrThrow(denied.retryAfter))
      expect(retry).toBeLessThanOrEqual(5000)
      expect(retry).toBeGreaterThanOrEqual(5000 - elapsed())
      expect(yield* B.peek("a")).toBe(0)
      const ttl = yield* pttl(keyOf(ns, "a"))
      expect(ttl).toBeLessThanOrEqual(8000)
      expect(ttl).toBeGreaterThanOrEqual(8000 - elapsed())
      expect(yield* B.reserve("a", 6, "1 hour")).toEqual(Refused({ retryAfter: Option.none() }))
      expect(yield* B.refund("a", 3)).toBe(0)
      expect(yield* B.refund("a", 100)).toBe(5)
      expect(yield* keysMatching(`*${ns}*`)).toEqual([])
    }))

  it.effect("throttle on the server's clock: 3 calls on a bucket of 1, 60 ms a token, start 60 ms apart", () =>
    Effect.gen(function*() {
      const B = TokenBucket.make<string>(freshNamespace(), 1, Rate.make(1, "60 millis"))
      const starts: Array<number> = []
      const call = Effect.sync(() => starts.push(performance.now()))
      const began = performance.now()
      yield* Effect.all(Array.from({ length: 3 }, () => TokenBucket.throttle(call, B, "a")), { concurrency: 3 })
      const sorted = starts.sort((a, b) => a - b)
      // On the wall clock both stores run on, a timer may fire a millisecond early.
      expect(sorted[1]! - began).toBeGreaterThanOrEqual(59)
      expect(sorted[2]! - began).toBeGreaterThanOrEqual(119)
      expect(sorted[2]! - began).toBeLessThan(1000)
    }))

  it.effect("bad input fails with InvalidInput naming the argument, and writes nothing", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const B = TokenBucket.make<number>(ns, 5, Rate.perSecond(1))
      for (const cost of [-1, 1.5, Number.NaN, 2 ** 53]) {
        expect(yield* Effect.flip(B.reserve(1, cost, 0))).toMatchObject({
          _tag: "InvalidInput",
          operation: `TokenBucket(${ns}).reserve`,
          argument: "cost"
        })
        expect(yield* Effect.flip(B.refund(1, cost))).toMatchObject({
          operation: `TokenBucket(${ns}).refund`,
          argument: "cost"
        })
        expect(yield* Effect.flip(TokenBucket.throttle(Effect.void, B, 1, { cost }))).toMatchObject({
          _tag: "InvalidInput",
          argument: "cost"
        })
      }
      for (const maxWait of [-1, "-5 seconds", Number.NaN, Duration.infinity, "1e12 millis", 1e11 + 1, "garbage"]) {
        const error = yield* Effect.flip(B.reserve(1, 1, maxWait as Duration.DurationInput))
        expect(error).toMatchObject({ _tag: "InvalidInput", argument: "maxWait" })
        expect(error.message).toMatch(/^maxWait must be a duration from 0 to 10\^11 ms \(about 3\.2 years\), got /)
        expect(
          yield* Effect.flip(TokenBucket.throttle(Effect.void, B, 1, { maxWait: maxWait as Duration.DurationInput }))
        )
          .toMatchObject({ argument: "maxWait" })
      }
      expect(yield* Effect.flip(B.reserve(1.5, 1, 0))).toMatchObject({ argument: "name" })
      expect(yield* Effect.flip(B.refund(Number.NaN, 1))).toMatchObject({ argument: "name" })
      expect(yield* keysMatching(`*${ns}*`)).toEqual([])
      // At the bound, 10^11 ms, it is accepted.
      expect(yield* B.reserve(1, 1, 1e11)).toMatchObject({ _tag: "Granted", wait: ms(0), cost: 1, level: 4 })
    }))
})
