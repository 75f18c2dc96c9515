/**
 * Giving reservations back without breaking the throttle's bound: in any window of length T, the turns
 * of the throttled calls that start are at most capacity + rate × T, whatever callers give up.
 *
 * - Under `TestClock` on the embedded backend, exact: the issue's scenario (11 queued on a bucket of 1
 *   at 10 a second, every other one times out, 5 newcomers), `cancel`'s rule (a reservation's tokens come
 *   back only while its turn is the end of the queue), chains from the end, costs above 1, stores in
 *   between, a clock at today's epoch and a rate of 5 M tokens a second.
 * - On every backend (the throwaway server, memory, the cluster) on the server's clock: the issue's
 *   scenario with `throttle` and interrupts, each call's turn read from the reservation it ran under; and
 *   a chain of cancels whose reclaimed turns the newcomers are given, to the microsecond.
 *
 * The same property across OS processes, with random timeouts and interrupts, is
 * test/TokenBucket.cancel.processes.test.ts.
 */
import { describe, expect, it } from "@effect/vitest"
import { Clock, Duration, Effect, Fiber, FiberRef, TestClock } from "effect"
import { Rate, Redis, TokenBucket } from "wakuwaku"
import { forEachBackend, get } from "./support/backends.js"
import { freshNamespace } from "./support/redis.js"
import { lastGrant, recordingGrants, startOf, worstWindow } from "./support/turns.js"

const { Granted } = TokenBucket.Reservation
const granted = (wait: number, cost: number, grantedAt: number, level: number) =>
  Granted({ wait: Duration.millis(wait), cost, grantedAt, level })
const keyOf = (namespace: string, name: string) => `@@wakuwaku:TokenBucket:${namespace}:${name}`

/** The stored state of a bucket: its tokens and the time (µs) they were computed at; null: full. */
const state = (namespace: string, name: string) =>
  Effect.map(get(keyOf(namespace, name)), (value) => {
    if (value === null) return null
    const [tokens, ts] = value.split(" ").map(Number)
    return { tokens: tokens!, ts: ts! }
  })

/** Forks `effect`, and waits until its reservation is stored (the bucket's state changed). */
const queued = <R>(namespace: string, name: string, effect: Effect.Effect<unknown, unknown, R>) =>
  Effect.gen(function*() {
    const before = yield* get(keyOf(namespace, name))
    const fiber = yield* Effect.fork(effect)
    while ((yield* get(keyOf(namespace, name))) === before) yield* Effect.yieldNow()
    return fiber
  })

/** Runs `effect` on the embedded backend with the TestClock at today's epoch (set before the store starts). */
const atEpoch = <A, E>(effect: Effect.Effect<A, E, Redis.ReadWrite>) =>
  Effect.zipRight(TestClock.setTime(1_764_496_804_727), Effect.provide(effect, Redis.layerMemory()))

describe("cancel under TestClock, on the embedded backend (exact)", () => {
  // One token, 10 a second: a token's time is 100 ms.
  const ONE = (ns: string) => TokenBucket.make<string>(ns, 1, Rate.make(10, "1 second"))

  it.effect("the issue's scenario: 11 queued, every other one times out, 5 newcomers start after the last", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const B = ONE(ns)
      const starts: Array<number> = []
      const call = Effect.flatMap(Clock.currentTimeMillis, (now) => Effect.sync(() => starts.push(now)))
      const fibers: Array<Fiber.RuntimeFiber<unknown, unknown>> = []
      for (let i = 0; i < 11; i++) {
        const throttled = TokenBucket.throttle(call, B, "a")
        fibers.push(
          yield* queued(ns, "a", i % 2 === 1 ? Effect.exit(Effect.timeout(throttled, "50 millis")) : throttled)
        )
      }
      expect(yield* state(ns, "a")).toEqual({ tokens: -10, ts: 0 })
      yield* TestClock.adjust("50 millis")
      // The five that timed out were not the end of the queue (the 11th, at 1000 ms, was): nothing
      // reclaimed, nothing written, their turns lapse.
      expect(starts).toEqual([0])
      expect(yield* state(ns, "a")).toEqual({ tokens: -10, ts: 0 })
      for (let i = 0; i < 5; i++) fibers.push(yield* queued(ns, "a", TokenBucket.throttle(call, B, "a")))
      expect(yield* state(ns, "a")).toEqual({ tokens: -14.5, ts: 50_000 })
      yield* TestClock.adjust("2 seconds")
      yield* Fiber.joinAll(fibers)
      expect(starts).toEqual([0, 200, 400, 600, 800, 1000, 1100, 1200, 1300, 1400, 1500])
      expect(worstWindow(starts.map((ms) => ms * 1000), B).excess).toBeLessThanOrEqual(0)
    }).pipe(Effect.provide(Redis.layerMemory())))

  it.effect("a reservation's tokens come back only while its turn is the end of the queue; the last first, each does", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const B = ONE(ns)
      const made: Array<TokenBucket.Granted> = []
      for (let i = 0; i < 11; i++) {
        const reservation = yield* B.reserve("a", 1, "2 seconds")
        if (reservation._tag !== "Granted") return expect.fail("expected Granted")
        made.push(reservation)
      }
      expect(made).toEqual(Array.from({ length: 11 }, (_, i) => granted(i * 100, 1, 0, 0 - i)))
      yield* TestClock.adjust("30 millis")
      // The 9th is held behind by the 10th and 11th: nothing comes back, nothing is written.
      expect(yield* B.cancel("a", made[8]!)).toBe(false)
      expect(yield* state(ns, "a")).toEqual({ tokens: -10, ts: 0 })
      // The 11th is the end: back, and the end is the 10th's turn.
      expect(yield* B.cancel("a", made[10]!)).toBe(true)
      expect(yield* state(ns, "a")).toEqual({ tokens: -10 + 0.3 + 1, ts: 30_000 })
      // Given back already: its turn lies past the end now.
      expect(yield* B.cancel("a", made[10]!)).toBe(false)
      expect(yield* B.cancel("a", made[9]!)).toBe(true)
      // The 9th, refused before, is the end now.
      expect(yield* B.cancel("a", made[8]!)).toBe(true)
      expect(yield* B.cancel("a", made[6]!)).toBe(false)
      let level = -10 + 0.3 + 1 + 1 + 1
      expect(yield* state(ns, "a")).toEqual({ tokens: level, ts: 30_000 })
      // Newcomers get the turns given back (800, 900 and 1000 ms), and no other.
      for (const turn of [800, 900, 1000]) {
        level = level - 1
        expect(yield* B.reserve("a", 1, "2 seconds")).toEqual(granted(turn - 30, 1, 30_000, level))
        expect(level * -100 + 30).toBeCloseTo(turn, 9)
      }
    }).pipe(Effect.provide(Redis.layerMemory())))

  it.effect("costs above 1: each gives back its own cost, from the end; the refill meanwhile stays", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const B = TokenBucket.make<string>(ns, 5, Rate.make(10, "1 second"))
      const take = (cost: number) =>
        Effect.flatMap(
          B.reserve("a", cost, "1 second"),
          (r) => r._tag === "Granted" ? Effect.succeed(r) : Effect.die(r)
        )
      const five = yield* take(5)
      const three = yield* take(3)
      const two = yield* take(2)
      const four = yield* take(4)
      expect([five, three, two, four]).toEqual([
        granted(0, 5, 0, 0),
        granted(300, 3, 0, -3),
        granted(500, 2, 0, -5),
        granted(900, 4, 0, -9)
      ])
      yield* TestClock.adjust("120 millis")
      const level = -9 + 120_000 * 10 / 1_000_000
      expect(yield* B.cancel("a", four)).toBe(true)
      expect(yield* state(ns, "a")).toEqual({ tokens: level + 4, ts: 120_000 })
      expect(yield* B.cancel("a", three)).toBe(false)
      expect(yield* B.cancel("a", two)).toBe(true)
      expect(yield* B.cancel("a", three)).toBe(true)
      expect(yield* state(ns, "a")).toEqual({ tokens: level + 4 + 2 + 3, ts: 120_000 })
      // The first started at once; given back now, it is the end, and its 5 tokens return, capped at 5.
      expect(yield* B.cancel("a", five)).toBe(true)
      expect(yield* state(ns, "a")).toBeNull()
      // A full bucket has nothing of anyone's left to give back.
      expect(yield* B.cancel("a", five)).toBe(false)
    }).pipe(Effect.provide(Redis.layerMemory())))

  it.effect("at today's epoch, with stores in between and a rate of 3 a second, the end is still found", () =>
    atEpoch(Effect.gen(function*() {
      const ns = freshNamespace()
      // A token every 333 333.33… µs: no level after a refill is a round number.
      const B = TokenBucket.make<string>(ns, 2, Rate.make(3, "1 second"))
      const made: Array<TokenBucket.Granted> = []
      for (let i = 0; i < 4; i++) {
        const reservation = yield* B.reserve("a", 1, "1 second")
        if (reservation._tag !== "Granted") return expect.fail("expected Granted")
        made.push(reservation)
        yield* TestClock.adjust(`${7 + i * 13} millis`)
        // A denial stores the refilled level at a new time: the end, recomputed, moves by rounding only.
        expect((yield* B.acquire("a", 2))._tag).toBe("Denied")
      }
      expect(yield* B.cancel("a", made[2]!)).toBe(false)
      expect(yield* B.cancel("a", made[3]!)).toBe(true)
      expect(yield* B.cancel("a", made[2]!)).toBe(true)
      // The next reservation's turn is the one given back last, to well within a µs.
      const next = yield* B.reserve("a", 1, "1 second")
      if (next._tag !== "Granted") return expect.fail("expected Granted")
      expect(Math.abs(startOf(B, next) - startOf(B, made[2]!))).toBeLessThan(1)
    })))

  it.effect("5 M tokens a second (a token every 0.2 µs, less than the epoch's rounding in µs): still exact", () =>
    atEpoch(Effect.gen(function*() {
      const B = TokenBucket.make<string>(freshNamespace(), 1, Rate.make(5_000_000, "1 second"))
      const made: Array<TokenBucket.Granted> = []
      for (let i = 0; i < 3; i++) {
        const reservation = yield* B.reserve("a", 1, "1 millis")
        if (reservation._tag !== "Granted") return expect.fail("expected Granted")
        made.push(reservation)
      }
      expect(made.map((g) => g.level)).toEqual([0, -1, -2])
      expect(yield* B.cancel("a", made[1]!)).toBe(false)
      expect(yield* B.cancel("a", made[2]!)).toBe(true)
      expect(yield* B.cancel("a", made[2]!)).toBe(false)
      expect(yield* B.cancel("a", made[1]!)).toBe(true)
    })))
})

forEachBackend("TokenBucket.cancel", (it) => {
  it.effect("the issue's scenario on the server's clock: the newcomers' turns come after every kept caller's", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      // One token every 50 ms: the callers given up on are interrupted long before their turns.
      const B = TokenBucket.make<string>(ns, 1, Rate.make(1, "50 millis"))
      const turns: Array<{ readonly caller: number; readonly turn: number }> = []
      const call = (caller: number) =>
        Effect.flatMap(FiberRef.get(lastGrant), (g) => Effect.sync(() => turns.push({ caller, turn: startOf(B, g!) })))
      const throttled = (caller: number) => TokenBucket.throttle(call(caller), B, "a")
      const first: Array<Fiber.RuntimeFiber<unknown, unknown>> = []
      for (let i = 0; i < 11; i++) first.push(yield* queued(ns, "a", throttled(i)))
      for (let i = 1; i < 11; i += 2) yield* Fiber.interrupt(first[i]!)
      const newcomers: Array<Fiber.RuntimeFiber<unknown, unknown>> = []
      for (let i = 11; i < 16; i++) newcomers.push(yield* queued(ns, "a", throttled(i)))
      yield* Fiber.joinAll([...first.filter((_, i) => i % 2 === 0), ...newcomers])
      const kept = turns.filter((t) => t.caller < 11).map((t) => t.turn)
      const late = turns.filter((t) => t.caller >= 11).map((t) => t.turn)
      expect(late).toHaveLength(5)
      expect(Math.min(...late)).toBeGreaterThan(Math.max(...kept))
      expect(worstWindow(turns.map((t) => t.turn), B).excess).toBeLessThanOrEqual(0)
    }).pipe(Effect.provide(recordingGrants)))

  it.effect("a chain of cancels from the end: the newcomers are given exactly the turns given back", () =>
    Effect.gen(function*() {
      // A token a second: the turns are far apart, and nothing starts during the test.
      const B = TokenBucket.make<string>(freshNamespace(), 1, Rate.perSecond(1))
      const take = Effect.flatMap(
        B.reserve("a", 1, "1 hour"),
        (r) => r._tag === "Granted" ? Effect.succeed(r) : Effect.die(r)
      )
      const made: Array<TokenBucket.Granted> = []
      for (let i = 0; i < 11; i++) made.push(yield* take)
      expect(made.map((g) => g.cost)).toEqual(Array(11).fill(1))
      expect(yield* B.cancel("a", made[8]!)).toBe(false)
      expect(yield* B.cancel("a", made[10]!)).toBe(true)
      expect(yield* B.cancel("a", made[9]!)).toBe(true)
      expect(yield* B.cancel("a", made[8]!)).toBe(true)
      expect(yield* B.cancel("a", made[6]!)).toBe(false)
      for (const given of [made[8]!, made[9]!, made[10]!]) {
        expect(Math.abs(startOf(B, yield* take) - startOf(B, given))).toBeLessThan(1)
      }
      // And the next is a token's time (10^6 µs) after the last of them.
      expect(Math.abs(startOf(B, yield* take) - startOf(B, made[10]!) - 1_000_000)).toBeLessThan(1)
    }))
})
