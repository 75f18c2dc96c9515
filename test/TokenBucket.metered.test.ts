/**
 * Budgets settled with the actual cost (issue 27 §3): `TokenBucket.metered` and `Limits.metered`.
 *
 * - Under `TestClock` on the embedded backend, exact levels: a settle above the estimate takes the difference at
 *   once (into debt, which later callers wait for); below it, the difference comes back only while the call's
 *   turn is the end of the queue (as `cancel`), else it lapses; a second settle is a typed error and writes
 *   nothing; a call that succeeds without settling keeps its estimate; one that fails gives its reservation
 *   back.
 * - Interrupted at every step (while it waits, with the reserve in flight, inside the body, during settle, after
 *   settle): what was reserved and not settled comes back, once.
 * - Bad input is a typed error, and nothing is written.
 * - Several buckets as one (`Limits.metered`): all or nothing, settled in one store call.
 * - On every backend: one store call per reservation and one per settlement.
 *
 * Several OS processes metering one budget: test/TokenBucket.metered.processes.test.ts.
 */
import { describe, expect, it } from "@effect/vitest"
import { Clock, Deferred, Duration, Effect, Exit, Fiber, Layer, Option, TestClock } from "effect"
import { Limits, Rate, Redis, TokenBucket } from "wakuwaku"
import { forEachBackend, get } from "./support/backends.js"
import { freshNamespace } from "./support/redis.js"
import { worstWindow } from "./support/turns.js"

const keyOf = (namespace: string, name: string) => `@@wakuwaku:TokenBucket:${namespace}:${name}`

/** The stored state of a bucket: its tokens and the time (µs) they were computed at; null: full. */
const state = (namespace: string, name: string) =>
  Effect.map(get(keyOf(namespace, name)), (value) => {
    if (value === null) return null
    const [tokens, ts] = value.split(" ").map(Number)
    return { tokens: tokens!, ts: ts! }
  })

/** The scripts the service in context ran, by name, as they were sent. */
const counting = (seen: Array<string>): Layer.Layer<Redis.Redis, never, Redis.Redis> =>
  Layer.effect(
    Redis.Redis,
    Effect.map(Redis.Redis, (redis): Redis.Service => ({
      ...redis,
      script: (script, keys, args) => Effect.suspend(() => (seen.push(script.name), redis.script(script, keys, args)))
    }))
  )

/** The service in context, interrupting the calling fiber (as another fiber would) when `name` is sent. */
const interruptingAt = (name: string): Layer.Layer<Redis.Redis, never, Redis.Redis> =>
  Layer.effect(
    Redis.Redis,
    Effect.map(Redis.Redis, (redis): Redis.Service => ({
      ...redis,
      script: (script, keys, args) =>
        script.name === name
          ? Effect.zipRight(
            Effect.withFiberRuntime<void>((fiber) => {
              fiber.unsafeInterruptAsFork(fiber.id())
              return Effect.void
            }),
            redis.script(script, keys, args)
          )
          : redis.script(script, keys, args)
    }))
  )

class Boom extends Error {}

// Ten tokens, ten a second: a token's time is 100 ms.
const TEN = (ns: string) => TokenBucket.make<string>(ns, 10, Rate.make(10, "1 second"))

describe("TokenBucket.metered under TestClock, on the embedded backend (exact)", () => {
  it.effect("above the estimate: the difference is taken at once, into debt, and the next caller waits for it", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const B = TEN(ns)
      const given = yield* TokenBucket.metered(B, "a", { estimate: 4 }, (settle) => settle(13))
      expect(given).toBe(0)
      expect(yield* state(ns, "a")).toEqual({ tokens: -3, ts: 0 })
      // The next call of 2 waits for the debt and its own share: 500 ms.
      const started: Array<number> = []
      const next = yield* Effect.fork(
        B.metered(
          "a",
          { estimate: 2 },
          () => Effect.flatMap(Clock.currentTimeMillis, (now) => Effect.sync(() => started.push(now)))
        )
      )
      yield* TestClock.adjust("499 millis")
      expect(started).toEqual([])
      expect(yield* state(ns, "a")).toEqual({ tokens: -5, ts: 0 })
      yield* TestClock.adjust("1 millis")
      yield* Fiber.join(next)
      expect(started).toEqual([500])
      // It kept its estimate (it never settled).
      expect(yield* state(ns, "a")).toEqual({ tokens: -5, ts: 0 })
    }).pipe(Effect.provide(Redis.layerMemory())))

  it.effect("below the estimate: the difference comes back while the call is the end of the queue", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const B = TEN(ns)
      yield* TestClock.adjust("1 second")
      const given = yield* B.metered(
        "a",
        { estimate: 6 },
        (settle) => Effect.zipRight(TestClock.adjust("100 millis"), settle(2))
      )
      expect(given).toBe(4)
      // 10 − 6, one token of refill, + 4 back.
      expect(yield* state(ns, "a")).toEqual({ tokens: 9, ts: 1_100_000 })
    }).pipe(Effect.provide(Redis.layerMemory())))

  it.effect("below the estimate, with others queued behind since: the unused tokens lapse, nothing written", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const B = TEN(ns)
      const given = yield* B.metered("a", { estimate: 6 }, (settle) =>
        Effect.gen(function*() {
          yield* B.reserve("a", 3, "1 second")
          expect(yield* state(ns, "a")).toEqual({ tokens: 1, ts: 0 })
          return yield* settle(1)
        }))
      expect(given).toBe(0)
      expect(yield* state(ns, "a")).toEqual({ tokens: 1, ts: 0 })
    }).pipe(Effect.provide(Redis.layerMemory())))

  it.effect("a call behind it that gave up before it started gave all back: the call is the end again", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const B = TEN(ns)
      const given = yield* B.metered("a", { estimate: 5 }, (settle) =>
        Effect.gen(function*() {
          const behind = yield* Effect.fork(B.metered("a", { estimate: 8 }, () => Effect.void))
          yield* Effect.yieldNow()
          expect(yield* state(ns, "a")).toEqual({ tokens: -3, ts: 0 })
          yield* Fiber.interrupt(behind)
          expect(yield* state(ns, "a")).toEqual({ tokens: 5, ts: 0 })
          return yield* settle(1)
        }))
      expect(given).toBe(4)
      expect(yield* state(ns, "a")).toEqual({ tokens: 9, ts: 0 })
    }).pipe(Effect.provide(Redis.layerMemory())))

  it.effect("a call that started keeps its turn: settled at 0, it still costs one token", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const B = TEN(ns)
      expect(yield* B.metered("a", { estimate: 4 }, (settle) => settle(0))).toBe(3)
      expect(yield* state(ns, "a")).toEqual({ tokens: 9, ts: 0 })
      expect(yield* B.metered("a", { estimate: 1 }, (settle) => settle(0))).toBe(0)
      expect(yield* state(ns, "a")).toEqual({ tokens: 8, ts: 0 })
      // An estimate of 0 has no turn to keep.
      expect(yield* B.metered("a", { estimate: 0 }, (settle) => settle(0))).toBe(0)
      expect(yield* state(ns, "a")).toEqual({ tokens: 8, ts: 0 })
    }).pipe(Effect.provide(Redis.layerMemory())))

  it.effect("equal to the estimate, or no settle at all on success: the estimate stands, nothing more is sent", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const seen: Array<string> = []
      const B = TEN(ns)
      const calls = Effect.gen(function*() {
        expect(yield* B.metered("a", { estimate: 4 }, (settle) => settle(4))).toBe(0)
        expect(yield* B.metered("a", { estimate: 3 }, () => Effect.succeed("done"))).toBe("done")
      })
      yield* Effect.provide(calls, counting(seen))
      expect(yield* state(ns, "a")).toEqual({ tokens: 3, ts: 0 })
      expect(seen).toEqual(["TokenBucket.reserve", "TokenBucket.reserve"])
    }).pipe(Effect.provide(Redis.layerMemory())))

  it.effect("a second settle fails with AlreadySettled and writes nothing; so does a settle kept past the call", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const B = TEN(ns)
      let kept: TokenBucket.Settle | undefined
      const twice = yield* Effect.flip(B.metered("a", { estimate: 4 }, (settle) =>
        Effect.gen(function*() {
          kept = settle
          expect(yield* settle(6)).toBe(0)
          return yield* settle(1)
        })))
      expect(twice).toEqual(new TokenBucket.AlreadySettled({ settled: [6], actual: [1] }))
      expect(twice.message).toBe("already settled with 6: a call settles once (refused: 1)")
      expect(yield* state(ns, "a")).toEqual({ tokens: 4, ts: 0 })
      const late = yield* Effect.flip(kept!(0))
      expect(late).toEqual(new TokenBucket.AlreadySettled({ settled: [6], actual: [0] }))
      expect(yield* state(ns, "a")).toEqual({ tokens: 4, ts: 0 })
    }).pipe(Effect.provide(Redis.layerMemory())))

  it.effect("a body that fails before settling gives back all but its turn; after settling, nothing more", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const B = TEN(ns)
      yield* B.acquire("a", 2)
      const failed = yield* Effect.exit(B.metered("a", { estimate: 5 }, () => Effect.fail(new Boom())))
      expect(Exit.isFailure(failed)).toBe(true)
      expect(yield* state(ns, "a")).toEqual({ tokens: 7, ts: 0 })
      const late = yield* Effect.exit(
        B.metered("a", { estimate: 5 }, (settle) => Effect.zipRight(settle(7), Effect.fail(new Boom())))
      )
      expect(Exit.isFailure(late)).toBe(true)
      expect(yield* state(ns, "a")).toEqual({ tokens: 0, ts: 0 })
    }).pipe(Effect.provide(Redis.layerMemory())))
})

describe("TokenBucket.metered keeps throttle's start bound, whatever the calls settle with (TestClock)", () => {
  it.effect("a call that started and settles at 0 keeps its turn: no third start at once on a bucket of 2", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const B = TokenBucket.make<string>(ns, 2, Rate.make(10, "1 second"))
      const starts: Array<number> = []
      const started = Effect.flatMap(Clock.currentTimeMillis, (now) => Effect.sync(() => starts.push(now)))
      yield* B.metered("a", { estimate: 1 }, () => started)
      // The second starts at once too, and settles at 0: were its token given back, a third would start now.
      yield* B.metered("a", { estimate: 1 }, (settle) => Effect.zipRight(started, settle(0)))
      const third = yield* Effect.fork(B.metered("a", { estimate: 1 }, () => started))
      yield* TestClock.adjust("100 millis")
      yield* Fiber.join(third)
      expect(starts).toEqual([0, 0, 100])
    }).pipe(Effect.provide(Redis.layerMemory())))

  it.effect("60 calls arriving at random, settling at random above and below, some timing out: every window", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      // Two tokens, ten a second.
      const B = TokenBucket.make<string>(ns, 2, Rate.make(10, "1 second"))
      let seed = 7
      const random = () => (seed = (seed * 16807) % 2147483647) / 2147483647
      const starts: Array<number> = []
      const fibers: Array<Fiber.RuntimeFiber<unknown, unknown>> = []
      for (let i = 0; i < 60; i++) {
        const estimate = 1 + Math.floor(random() * 2)
        const actual = Math.floor(random() * 4)
        const call = B.metered("a", { estimate }, (settle) =>
          Effect.zipRight(
            Effect.flatMap(Clock.currentTimeMillis, (now) => Effect.sync(() => starts.push(now * 1000))),
            settle(actual)
          ))
        fibers.push(
          yield* Effect.fork(
            random() < 0.3
              ? Effect.exit(Effect.timeout(call, `${Math.floor(random() * 300)} millis`))
              : Effect.exit(call)
          )
        )
        yield* Effect.yieldNow()
        yield* TestClock.adjust(`${Math.floor(random() * 120)} millis`)
      }
      yield* TestClock.adjust("1 minute")
      yield* Fiber.joinAll(fibers)
      expect(starts.length).toBeGreaterThan(30)
      expect(worstWindow(starts, B).excess).toBeLessThanOrEqual(0)
    }).pipe(Effect.provide(Redis.layerMemory())))
})

describe("TokenBucket.metered interrupted at every step (embedded backend, TestClock)", () => {
  it.effect("while it waits its turn: given back (it is the end)", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const B = TEN(ns)
      yield* B.acquire("a", 10)
      let ran = false
      const fiber = yield* Effect.fork(B.metered("a", { estimate: 3 }, () => Effect.sync(() => (ran = true))))
      yield* TestClock.adjust("100 millis")
      expect(yield* state(ns, "a")).toEqual({ tokens: -3, ts: 0 })
      yield* Fiber.interrupt(fiber)
      expect(ran).toBe(false)
      expect(yield* state(ns, "a")).toEqual({ tokens: 1, ts: 100_000 })
    }).pipe(Effect.provide(Redis.layerMemory())))

  it.effect("with its reservation in flight (the interrupt lands after the grant, before the body): given back", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const B = TEN(ns)
      let ran = false
      // On a fiber of its own: the interrupt is that fiber's.
      const exit = yield* Fiber.await(
        yield* Effect.fork(
          B.metered("a", { estimate: 3 }, () => Effect.sync(() => (ran = true))).pipe(
            Effect.provide(interruptingAt("TokenBucket.reserve"))
          )
        )
      )
      expect(Exit.isInterrupted(exit)).toBe(true)
      expect(ran).toBe(false)
      expect(yield* state(ns, "a")).toBeNull()
    }).pipe(Effect.provide(Redis.layerMemory())))

  it.effect("inside the body, before it settles: given back, all but its turn", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const B = TEN(ns)
      yield* B.acquire("a", 1)
      const inside = yield* Deferred.make<void>()
      const fiber = yield* Effect.fork(
        B.metered("a", { estimate: 3 }, () => Effect.zipRight(Deferred.succeed(inside, undefined), Effect.never))
      )
      yield* Deferred.await(inside)
      expect(yield* state(ns, "a")).toEqual({ tokens: 6, ts: 0 })
      yield* Fiber.interrupt(fiber)
      expect(yield* state(ns, "a")).toEqual({ tokens: 8, ts: 0 })
    }).pipe(Effect.provide(Redis.layerMemory())))

  it.effect("during settle: the settle lands, and nothing is given back after it", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const B = TEN(ns)
      let after = false
      const exit = yield* Fiber.await(
        yield* Effect.fork(
          B.metered("a", { estimate: 3 }, (settle) => Effect.zipRight(settle(5), Effect.sync(() => (after = true))))
            .pipe(
              Effect.provide(interruptingAt("TokenBucket.settle"))
            )
        )
      )
      expect(Exit.isInterrupted(exit)).toBe(true)
      expect(after).toBe(false)
      expect(yield* state(ns, "a")).toEqual({ tokens: 5, ts: 0 })
    }).pipe(Effect.provide(Redis.layerMemory())))

  it.effect("after settle, below the estimate: the settlement stands, nothing more comes back", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const B = TEN(ns)
      const settled = yield* Deferred.make<number>()
      const fiber = yield* Effect.fork(
        B.metered("a", { estimate: 6 }, (settle) =>
          Effect.zipRight(
            Effect.flatMap(settle(2), (n) => Deferred.succeed(settled, n)),
            Effect.never
          ))
      )
      expect(yield* Deferred.await(settled)).toBe(4)
      yield* Fiber.interrupt(fiber)
      expect(yield* state(ns, "a")).toEqual({ tokens: 8, ts: 0 })
    }).pipe(Effect.provide(Redis.layerMemory())))

  it.effect("a timeout around the call, behind others: its turn lapses, those behind keep theirs", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const B = TEN(ns)
      yield* B.acquire("a", 10)
      const first = yield* Effect.fork(
        Effect.timeout(B.metered("a", { estimate: 2 }, () => Effect.void), "50 millis")
      )
      yield* Effect.yieldNow()
      const second = yield* Effect.fork(B.metered("a", { estimate: 1 }, () => Effect.void))
      yield* Effect.yieldNow()
      expect(yield* state(ns, "a")).toEqual({ tokens: -3, ts: 0 })
      yield* TestClock.adjust("50 millis")
      expect(Exit.isFailure(yield* Fiber.await(first))).toBe(true)
      expect(yield* state(ns, "a")).toEqual({ tokens: -3, ts: 0 })
      yield* TestClock.adjust("250 millis")
      yield* Fiber.join(second)
    }).pipe(Effect.provide(Redis.layerMemory())))
})

describe("TokenBucket.metered: bad input is a typed error, and nothing is written", () => {
  const cases: ReadonlyArray<readonly [string, number, string]> = [
    ["a negative estimate", -1, "estimate must be a non-negative safe integer, got -1"],
    ["a fractional estimate", 1.5, "estimate must be a non-negative safe integer, got 1.5"],
    [
      "an estimate above capacity",
      11,
      "estimate 11 is above the bucket's capacity 10: it could never be granted (split the call)"
    ]
  ]
  for (const [what, estimate, message] of cases) {
    it.effect(what, () =>
      Effect.gen(function*() {
        const ns = freshNamespace()
        const seen: Array<string> = []
        let ran = false
        const error = yield* Effect.flip(
          TEN(ns).metered("a", { estimate }, () => Effect.sync(() => (ran = true))).pipe(
            Effect.provide(counting(seen))
          )
        )
        expect(error).toEqual(
          new Redis.InvalidInput({ operation: `TokenBucket(${ns}).metered`, argument: "estimate", message })
        )
        expect([ran, seen]).toEqual([false, []])
      }).pipe(Effect.provide(Redis.layerMemory())))
  }

  for (const actual of [-1, 2.5, Number.NaN]) {
    it.effect(`an actual cost of ${actual}: InvalidInput, nothing written, and the call may still settle`, () =>
      Effect.gen(function*() {
        const ns = freshNamespace()
        const B = TEN(ns)
        const given = yield* B.metered("a", { estimate: 4 }, (settle) =>
          Effect.gen(function*() {
            const error = yield* Effect.flip(settle(actual))
            expect(error).toEqual(
              new Redis.InvalidInput({
                operation: `TokenBucket(${ns}).settle`,
                argument: "actual",
                message: `actual must be a non-negative safe integer, got ${actual}`
              })
            )
            expect(yield* state(ns, "a")).toEqual({ tokens: 6, ts: 0 })
            return yield* settle(3)
          }))
        expect(given).toBe(1)
      }).pipe(Effect.provide(Redis.layerMemory())))
  }

  it.effect("a maxWait out of range: InvalidInput, nothing sent", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const error = yield* Effect.flip(TEN(ns).metered("a", { estimate: 1, maxWait: "-1 second" }, () => Effect.void))
      expect(error._tag).toBe("InvalidInput")
      expect((error as Redis.InvalidInput).argument).toBe("maxWait")
      expect(yield* state(ns, "a")).toBeNull()
    }).pipe(Effect.provide(Redis.layerMemory())))

  it.effect("refused beyond maxWait: RateLimited with the retry, nothing taken", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const B = TEN(ns)
      yield* B.acquire("a", 10)
      const error = yield* Effect.flip(B.metered("a", { estimate: 3, maxWait: "100 millis" }, () => Effect.void))
      expect(error).toEqual(new TokenBucket.RateLimited({ retryAfter: Option.some(Duration.millis(200)) }))
      expect(yield* state(ns, "a")).toEqual({ tokens: 0, ts: 0 })
    }).pipe(Effect.provide(Redis.layerMemory())))
})

describe("Limits.metered: several budgets as one, under TestClock (embedded backend)", () => {
  it.effect("all or nothing: one budget short refuses the call and takes from none", () =>
    Effect.gen(function*() {
      const [a, b] = [freshNamespace(), freshNamespace()]
      const REQUESTS = TokenBucket.make<string>(a, 10, Rate.make(10, "1 second"))
      const TOKENS = TokenBucket.make<string>(b, 1000, Rate.make(1000, "1 second"))
      yield* TOKENS.acquire("t", 1000)
      const error = yield* Effect.flip(
        Limits.metered([REQUESTS, TOKENS], "t", { estimate: [1, 300], maxWait: "100 millis" }, () => Effect.void)
      )
      expect(error).toEqual(new TokenBucket.RateLimited({ retryAfter: Option.some(Duration.millis(200)) }))
      expect([yield* state(a, "t"), yield* state(b, "t")]).toEqual([null, { tokens: 0, ts: 0 }])
    }).pipe(Effect.provide(Redis.layerMemory())))

  it.effect("granted together, it waits for the latest turn, and settles every budget in one call", () =>
    Effect.gen(function*() {
      const [a, b, c] = [freshNamespace(), freshNamespace(), freshNamespace()]
      const REQUESTS = TokenBucket.make<string>(a, 10, Rate.make(10, "1 second"))
      const TOKENS = TokenBucket.make<string>(b, 1000, Rate.make(1000, "1 second"))
      const CENTS = TokenBucket.make<string>(c, 500, Rate.make(500, "1 hour"))
      const seen: Array<string> = []
      yield* TOKENS.acquire("t", 900).pipe(Effect.provide(counting([])))
      const started: Array<number> = []
      const fiber = yield* Effect.fork(
        Limits.metered([REQUESTS, TOKENS, CENTS], "t", { estimate: [1, 300, 20] }, (settle) =>
          Effect.zipRight(
            Effect.flatMap(Clock.currentTimeMillis, (now) => Effect.sync(() => started.push(now))),
            settle([1, 120, 45])
          )).pipe(Effect.provide(counting(seen)))
      )
      yield* TestClock.adjust("199 millis")
      expect(started).toEqual([])
      yield* TestClock.adjust("1 millis")
      // The end of each queue (nobody came since): 180 tokens back; 25 cents more taken.
      expect(yield* Fiber.join(fiber)).toEqual([0, 180, 0])
      expect(started).toEqual([200])
      expect(seen).toEqual(["Limits.reserve", "Limits.settle"])
      // REQUESTS settled at its estimate (not written), full again (its key expired); TOKENS refilled to 0,
      // then 180 back; CENTS refilled a little, then 25 more taken.
      expect([yield* state(a, "t"), yield* state(b, "t"), yield* state(c, "t")]).toEqual([
        null,
        { tokens: 180, ts: 200_000 },
        { tokens: 480 + 200_000 * 500 / 3_600_000_000 - 25, ts: 200_000 }
      ])
    }).pipe(Effect.provide(Redis.layerMemory())))

  it.effect("interrupted before it settles: every budget given back but its turn, in one call", () =>
    Effect.gen(function*() {
      const [a, b] = [freshNamespace(), freshNamespace()]
      const REQUESTS = TokenBucket.make<string>(a, 10, Rate.make(10, "1 second"))
      const TOKENS = TokenBucket.make<string>(b, 1000, Rate.make(1000, "1 second"))
      const inside = yield* Deferred.make<void>()
      const seen: Array<string> = []
      const fiber = yield* Effect.fork(
        Limits.metered(
          [REQUESTS, TOKENS],
          "t",
          { estimate: [1, 300] },
          () => Effect.zipRight(Deferred.succeed(inside, undefined), Effect.never)
        ).pipe(Effect.provide(counting(seen)))
      )
      yield* Deferred.await(inside)
      expect([yield* state(a, "t"), yield* state(b, "t")]).toEqual([{ tokens: 9, ts: 0 }, { tokens: 700, ts: 0 }])
      yield* Fiber.interrupt(fiber)
      expect([yield* state(a, "t"), yield* state(b, "t")]).toEqual([{ tokens: 9, ts: 0 }, { tokens: 999, ts: 0 }])
      expect(seen).toEqual(["Limits.reserve", "Limits.settle"])
    }).pipe(Effect.provide(Redis.layerMemory())))

  it.effect("bad input: one estimate per budget, each within its capacity; nothing written", () =>
    Effect.gen(function*() {
      const [a, b] = [freshNamespace(), freshNamespace()]
      const REQUESTS = TokenBucket.make<string>(a, 10, Rate.make(10, "1 second"))
      const TOKENS = TokenBucket.make<string>(b, 1000, Rate.make(1000, "1 second"))
      const over = yield* Effect.flip(
        Limits.metered([REQUESTS, TOKENS], "t", { estimate: [1, 1001] }, () => Effect.void)
      )
      expect(over).toEqual(
        new Redis.InvalidInput({
          operation: `TokenBucket(${a}) + TokenBucket(${b}).metered`,
          argument: "estimate",
          message: "estimate 1001 is above the bucket's capacity 1000: it could never be granted (split the call)"
        })
      )
      expect([yield* state(a, "t"), yield* state(b, "t")]).toEqual([null, null])
    }).pipe(Effect.provide(Redis.layerMemory())))
})

forEachBackend("TokenBucket.metered", (it) => {
  it.effect("one store call to reserve, one to settle; the levels as on the embedded backend, on the server's clock", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      // Slow: the refill during the test is below a millionth of a token.
      const B = TokenBucket.make<string>(ns, 1000, Rate.make(1, "1 day"))
      const seen: Array<string> = []
      const given = yield* B.metered("a", { estimate: 300 }, (settle) => settle(120)).pipe(
        Effect.provide(counting(seen))
      )
      expect(given).toBe(180)
      expect(seen).toEqual(["TokenBucket.reserve", "TokenBucket.settle"])
      expect(Math.round((yield* state(ns, "a"))!.tokens)).toBe(880)
      expect(yield* B.metered("a", { estimate: 10 }, (settle) => settle(900))).toBe(0)
      expect(Math.round((yield* state(ns, "a"))!.tokens)).toBe(-20)
    }))
})
