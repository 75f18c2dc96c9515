import { it as effect } from "@effect/vitest"
import { Duration, Effect, Option, TestClock } from "effect"
import { describe, expect, it as plain } from "vitest"
import { FixedWindow, Redis } from "wakuwaku"
import * as limits from "../src/internal/limits.js"
import { command, expectTtls, forEachBackend, get, keysMatching, pttl } from "./support/backends.js"
import { freshNamespace } from "./support/redis.js"

const keyOf = (namespace: string, name: string) => `@@wakuwaku:FixedWindow:${namespace}:${name}`

const allowed = (admission: FixedWindow.Admission): number => {
  if (admission._tag !== "Allowed") throw new Error(`expected Allowed, got ${JSON.stringify(admission)}`)
  return admission.remaining
}

/** An allowed acquire's resetAfter in ms: when its window ends. */
const resetAfter = (admission: FixedWindow.Admission): number | undefined => {
  if (admission._tag !== "Allowed") throw new Error(`expected Allowed, got ${JSON.stringify(admission)}`)
  return admission.resetAfter === undefined ? undefined : Duration.toMillis(admission.resetAfter)
}

/** The retryAfter of a denial in ms; null when it can never succeed. */
const denied = (admission: FixedWindow.Admission): number | null => {
  if (admission._tag !== "Denied") throw new Error(`expected Denied, got ${JSON.stringify(admission)}`)
  return Option.match(admission.retryAfter, { onNone: () => null, onSome: Duration.toMillis })
}

/** The store's time (Redis `TIME`, or the memory backend's clock), in µs. */
const serverMicros = Effect.map(command("TIME"), (reply) => {
  const [seconds, micros] = reply as [string, string]
  return Number(seconds) * 1e6 + Number(micros)
})

/**
 * Runs `body` between two readings of the store's time that fall in one window of `size` µs, retrying
 * (at most 5 times) when a window ended in between. Returns the result and the window's bounds. A body
 * that failed (its checks throw) while a window ended is retried too: a new window explains the failure;
 * in one window, the failure is the test's.
 */
const inOneWindow = <A, E, R>(size: number, body: Effect.Effect<A, E, R>) =>
  Effect.gen(function*() {
    for (let attempt = 0; attempt < 5; attempt++) {
      const before = yield* serverMicros
      const exit = yield* Effect.exit(body)
      const after = yield* serverMicros
      const start = before - before % size
      if (after < start + size) {
        const result = yield* exit
        return { result, before, after, start, end: start + size }
      }
    }
    return yield* Effect.dieMessage("five windows ended during five short runs")
  })

// Registered before the layered blocks, which must come last in a file (see ../shared/NOTES.md).
describe("FixedWindow.make", () => {
  plain("throws on a bad namespace, limit or window, naming the limiter", () => {
    expect(() => FixedWindow.make("bad ns", 1, "1 second")).toThrow(TypeError)
    for (const limit of [-1, 1.5, Number.NaN, Number.POSITIVE_INFINITY, 2 ** 53]) {
      expect(() => FixedWindow.make("w", limit, "1 second")).toThrow(
        /FixedWindow\(w\) limit must be a non-negative safe integer/
      )
    }
    const windows: ReadonlyArray<Duration.DurationInput> = [
      0,
      "0 millis",
      Number.POSITIVE_INFINITY,
      Duration.nanos(1500n),
      Duration.micros(10n ** 14n + 1n),
      -5
    ]
    for (const window of windows) {
      expect(() => FixedWindow.make("w", 1, window)).toThrow(
        /FixedWindow\(w\) window must be a whole number of microseconds/
      )
    }
    expect(FixedWindow.make("w", 1, Duration.micros(1n)).window).toEqual(Duration.micros(1n))
    expect(String(FixedWindow.make("w", 10, "1 second"))).toBe("FixedWindow(w): 10 per 1s")
  })
})

describe("FixedWindow on the memory backend under TestClock", () => {
  effect.effect(
    "an allowed acquire says when its window ends (resetAfter): alone, batched, and decided with others",
    () =>
      Effect.gen(function*() {
        const W = FixedWindow.make<string>("w", 10, "10 seconds")
        const V = FixedWindow.make<string>("v", 10, "4 seconds")
        yield* TestClock.adjust("3 seconds")
        expect(resetAfter(yield* W.acquire("a", 1))).toBe(7000)
        // Calls made together go to the store as one batch.
        const batch = yield* Effect.all([W.acquire("b", 1), W.acquire("c", 2)], { concurrency: "unbounded" })
        expect(batch.map(resetAfter)).toEqual([7000, 7000])
        // Several limits decided as one: each window its own end (the 4 s windows: 3 s in, 1 s left).
        const outcome = yield* limits.acquire([W, V] as unknown as ReadonlyArray<limits.AnyLimiter>, "d", 1)
        expect(outcome.admissions.map(resetAfter)).toEqual([7000, 1000])
        // A denial's retryAfter is the same end; a new window starts whole.
        yield* TestClock.adjust("2500 millis")
        expect(allowed(yield* W.acquire("a", 9))).toBe(0)
        expect(denied(yield* W.acquire("a", 1))).toBe(4500)
        expect(resetAfter(yield* W.acquire("a", 0))).toBe(4500)
        yield* TestClock.adjust("4500 millis")
        expect(resetAfter(yield* W.acquire("a", 1))).toBe(10_000)
      }).pipe(Effect.provide(Redis.layerMemory()))
  )
})

forEachBackend("FixedWindow", (it) => {
  it.scoped("10 per second: 10 allowed with remaining 9..0, the 11th denied until the window ends", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const PER_IP = FixedWindow.make<string>(ns, 10, "1 second")
      const { after, before, end, result, start } = yield* inOneWindow(
        1e6,
        Effect.gen(function*() {
          yield* PER_IP.reset("203.0.113.7")
          const remaining: Array<number> = []
          for (let i = 0; i < 10; i++) remaining.push(allowed(yield* PER_IP.acquire("203.0.113.7", 1)))
          const retry = denied(yield* PER_IP.acquire("203.0.113.7", 1))
          return {
            remaining,
            retry,
            ttl: yield* pttl(keyOf(ns, "203.0.113.7")),
            state: yield* get(keyOf(ns, "203.0.113.7"))
          }
        })
      )
      expect(result.remaining).toEqual([9, 8, 7, 6, 5, 4, 3, 2, 1, 0])
      // Until the window (aligned to whole seconds of server time) ends, rounded up to the ms.
      expect(result.retry).toBeGreaterThanOrEqual(Math.ceil((end - after) / 1000))
      expect(result.retry).toBeLessThanOrEqual(Math.ceil((end - before) / 1000))
      // One string: the window's start and the count; it expires when the window ends.
      expect(result.state).toBe(`${start} 10`)
      expect(start % 1e6).toBe(0)
      expect(result.ttl).toBeGreaterThan(0)
      expect(result.ttl).toBeLessThanOrEqual(Math.ceil((end - before) / 1000))
    }))

  it.scoped("an allowed acquire's resetAfter is the time left in its window, rounded up to the ms, batched or not", () =>
    Effect.gen(function*() {
      const W = FixedWindow.make<string>(freshNamespace(), 10, "100 seconds")
      const { after, before, end, result } = yield* inOneWindow(
        100e6,
        Effect.gen(function*() {
          const one = yield* W.acquire("a", 1)
          const batch = yield* Effect.all([W.acquire("b", 1), W.acquire("b", 1), W.acquire("c", 3)], {
            concurrency: "unbounded"
          })
          const full = yield* W.acquire("a", 9)
          return { one, batch, full, retry: denied(yield* W.acquire("a", 1)) }
        })
      )
      const [early, late] = [Math.ceil((end - before) / 1000), Math.ceil((end - after) / 1000)]
      for (const admission of [result.one, ...result.batch, result.full]) {
        const ms = resetAfter(admission)!
        expect(ms).toBeGreaterThanOrEqual(late)
        expect(ms).toBeLessThanOrEqual(early)
      }
      // Later calls, the same end: never more left.
      expect(result.retry).toBeLessThanOrEqual(resetAfter(result.full)!)
      expect(result.retry).toBeGreaterThanOrEqual(late)
    }))

  it.scoped("a denial counts nothing; the next window starts from zero", () =>
    Effect.gen(function*() {
      const W = FixedWindow.make<string>(freshNamespace(), 3, "300 millis")
      const { result } = yield* inOneWindow(
        300_000,
        Effect.gen(function*() {
          yield* W.reset("a")
          const first = allowed(yield* W.acquire("a", 2))
          const tooMany = denied(yield* W.acquire("a", 2))
          const fits = allowed(yield* W.acquire("a", 1))
          const none = denied(yield* W.acquire("a", 1))
          return { first, tooMany, fits, none, left: yield* W.peek("a") }
        })
      )
      expect(result.first).toBe(1)
      expect(result.tooMany).toBeGreaterThan(0)
      expect(result.tooMany).toBeLessThanOrEqual(300)
      expect(result.fits).toBe(0)
      expect(result.left).toBe(0)
      // Wait out the window: the next one is fresh, and the old key is gone.
      yield* Effect.sleep(Duration.millis(result.none! + 1))
      expect(allowed(yield* W.acquire("a", 3))).toBe(0)
    }))

  it.scoped("windows of any length are aligned to the store's clock: 250 ms windows start on multiples of 250 ms", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const W = FixedWindow.make<string>(ns, 5, "250 millis")
      const { result, start } = yield* inOneWindow(
        250_000,
        Effect.gen(function*() {
          yield* W.reset("a")
          allowed(yield* W.acquire("a", 2))
          return yield* get(keyOf(ns, "a"))
        })
      )
      expect(start % 250_000).toBe(0)
      expect(result).toBe(`${start} 2`)
    }))

  it.scoped("cost above the limit is denied with retryAfter None and counts nothing; cost 0 is allowed and writes nothing", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const W = FixedWindow.make<string>(ns, 5, "1 hour")
      expect(denied(yield* W.acquire("a", 6))).toBeNull()
      expect(allowed(yield* W.acquire("a", 0))).toBe(5)
      expect(yield* keysMatching(`@@wakuwaku:FixedWindow:${ns}:*`)).toEqual([])
      expect(allowed(yield* W.acquire("a", 5))).toBe(0)
      expect(denied(yield* W.acquire("a", 6))).toBeNull()
      expect(allowed(yield* W.acquire("a", 0))).toBe(0)
    }))

  it.scoped("limit 0 lets only cost 0 through", () =>
    Effect.gen(function*() {
      const W = FixedWindow.make<string>(freshNamespace(), 0, "1 second")
      expect(denied(yield* W.acquire("a", 1))).toBeNull()
      expect(allowed(yield* W.acquire("a", 0))).toBe(0)
    }))

  it.scoped("reset says whether there was a count, and the window starts over", () =>
    Effect.gen(function*() {
      const W = FixedWindow.make<string>(freshNamespace(), 3, "1 hour")
      expect(yield* W.reset("a")).toBe(false)
      expect(allowed(yield* W.acquire("a", 3))).toBe(0)
      expect(yield* W.reset("a")).toBe(true)
      expect(yield* W.peek("a")).toBe(3)
      expect(allowed(yield* W.acquire("a", 1))).toBe(2)
    }))

  it.scoped("names and namespaces are separate counts, and every key has a TTL no longer than its window", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const A = FixedWindow.make<string>(ns, 2, "1 hour")
      const B = FixedWindow.make<number>(freshNamespace(), 2, "1 hour")
      expect(allowed(yield* A.acquire("x", 2))).toBe(0)
      expect(allowed(yield* A.acquire("y", 1))).toBe(1)
      expect(allowed(yield* B.acquire(42, 1))).toBe(1)
      expect(denied(yield* A.acquire("x", 1))).toBeGreaterThan(0)
      expect(yield* expectTtls(`@@wakuwaku:FixedWindow:${ns}:*`)).toEqual([])
      for (const key of yield* keysMatching(`@@wakuwaku:FixedWindow:${ns}:*`)) {
        expect(yield* pttl(key)).toBeLessThanOrEqual(3_600_000)
      }
    }))

  it.scoped("bad input fails with InvalidInput and writes nothing", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const S = FixedWindow.make<string>(ns, 5, "1 second")
      const N = FixedWindow.make<number>(ns, 5, "1 second")
      for (const cost of [-1, 1.5, Number.NaN, Number.POSITIVE_INFINITY, 2 ** 53]) {
        const error = yield* Effect.flip(S.acquire("a", cost))
        expect(error).toBeInstanceOf(Redis.InvalidInput)
        expect(error).toMatchObject({ _tag: "InvalidInput", argument: "cost", operation: `FixedWindow(${ns}).acquire` })
      }
      for (const name of [Number.NaN, 1.5, 2 ** 53]) {
        expect(yield* Effect.flip(N.acquire(name, 1))).toMatchObject({ _tag: "InvalidInput", argument: "name" })
        expect(yield* Effect.flip(N.reset(name))).toMatchObject({ _tag: "InvalidInput", argument: "name" })
        expect(yield* Effect.flip(N.peek(name))).toMatchObject({ _tag: "InvalidInput", argument: "name" })
      }
      expect(yield* Effect.flip(S.acquire("bad \uD800 name", 1))).toMatchObject({
        _tag: "InvalidInput",
        argument: "name"
      })
      expect(yield* keysMatching(`@@wakuwaku:FixedWindow:${ns}:*`)).toEqual([])
    }))
})
