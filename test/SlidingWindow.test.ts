import { it as effect } from "@effect/vitest"
import { Duration, Effect, Option, TestClock } from "effect"
import { describe, expect, it as plain } from "vitest"
import { FixedWindow, Limiter, Redis, SlidingWindow } from "wakuwaku"
import * as limits from "../src/internal/limits.js"
import { command, expectTtls, forEachBackend, keysMatching, pttl } from "./support/backends.js"
import { freshNamespace } from "./support/redis.js"

const keyOf = (namespace: string, name: string) => `@@wakuwaku:SlidingWindow:${namespace}:${name}`

const allowed = (admission: SlidingWindow.Admission): number => {
  if (admission._tag !== "Allowed") throw new Error(`expected Allowed, got ${JSON.stringify(admission)}`)
  return admission.remaining
}

/** An allowed acquire's resetAfter in ms: when the quota is whole again. */
const resetAfter = (admission: SlidingWindow.Admission): number | undefined => {
  if (admission._tag !== "Allowed") throw new Error(`expected Allowed, got ${JSON.stringify(admission)}`)
  return admission.resetAfter === undefined ? undefined : Duration.toMillis(admission.resetAfter)
}

/** The retryAfter of a denial in ms; null when it can never succeed. */
const denied = (admission: SlidingWindow.Admission): number | null => {
  if (admission._tag !== "Denied") throw new Error(`expected Denied, got ${JSON.stringify(admission)}`)
  return Option.match(admission.retryAfter, { onNone: () => null, onSome: Duration.toMillis })
}

const list = (key: string) =>
  command("LRANGE", key, 0, -1) as Effect.Effect<ReadonlyArray<string>, Redis.RedisError, Redis.Redis>

/** The store's time (Redis `TIME`, or the memory backend's clock), in µs. */
const serverMicros = Effect.map(command("TIME"), (reply) => {
  const [seconds, micros] = reply as [string, string]
  return Number(seconds) * 1e6 + Number(micros)
})

// Registered before the layered blocks, which must come last in a file (see ../shared/NOTES.md).
describe("SlidingWindow.make", () => {
  plain("throws on a bad namespace, limit or window, naming the limiter; a limit above the maximum is refused", () => {
    expect(() => SlidingWindow.make("bad ns", 1, "1 second")).toThrow(TypeError)
    expect(SlidingWindow.maxLimit).toBe(10_000)
    for (const limit of [-1, 1.5, Number.NaN, Number.POSITIVE_INFINITY, 2 ** 53, 10_001]) {
      expect(() => SlidingWindow.make("w", limit, "1 second")).toThrow(
        new RangeError(
          "wakuwaku: SlidingWindow(w) limit must be a whole number from 0 to 10000 (a name holds an entry per " +
            `unit; a TokenBucket or a FixedWindow has no such bound), got ${String(limit)}`
        )
      )
    }
    expect(SlidingWindow.make("w", 10_000, "1 second").limit).toBe(10_000)
    const windows: ReadonlyArray<Duration.DurationInput> = [
      0,
      "0 millis",
      Number.POSITIVE_INFINITY,
      Duration.nanos(1500n),
      Duration.micros(10n ** 14n + 1n),
      -5
    ]
    for (const window of windows) {
      expect(() => SlidingWindow.make("w", 1, window)).toThrow(
        /SlidingWindow\(w\) window must be a whole number of microseconds/
      )
    }
    expect(String(SlidingWindow.make("w", 10, "1 second"))).toBe("SlidingWindow(w): 10 per 1s, sliding")
    expect(SlidingWindow.isSlidingWindow(SlidingWindow.make("w", 1, "1 second"))).toBe(true)
    expect(SlidingWindow.isSlidingWindow(FixedWindow.make("w", 1, "1 second"))).toBe(false)
  })

  plain("describes itself as every limiter does: q the limit, w the window, t until the quota is whole", () => {
    const W = SlidingWindow.make<string>("w", 10, "90 seconds")
    const described = W[Limiter.TypeId]
    expect(Limiter.isLimiter(W)).toBe(true)
    expect([described.kind, described.quota, Duration.toMillis(described.window)]).toEqual([
      "SlidingWindow",
      10,
      90_000
    ])
    expect(
      Duration.toMillis(described.resetAfter({ _tag: "Allowed", remaining: 3, resetAfter: Duration.millis(1500) }))
    )
      .toBe(1500)
    expect(Duration.toMillis(described.resetAfter({ _tag: "Allowed", remaining: 10 }))).toBe(0)
  })
})

describe("SlidingWindow on the memory backend under TestClock: exact at every instant", () => {
  effect.effect(
    "at most limit in any window; a denial's retryAfter is when the oldest entries free the cost",
    () =>
      Effect.gen(function*() {
        const W = SlidingWindow.make<string>("w", 3, "10 seconds")
        const key = keyOf("w", "a")
        expect(resetAfter(yield* W.acquire("a", 1))).toBe(10_000)
        yield* TestClock.adjust("2 seconds")
        const full = yield* W.acquire("a", 2)
        expect([allowed(full), resetAfter(full)]).toEqual([0, 10_000])
        expect(yield* list(key)).toEqual(["3", "0 1", "2000000 2"])
        expect(yield* pttl(key)).toBe(10_000)
        yield* TestClock.adjust("3 seconds")
        // The entry of t = 0 ends at 10 s: 5 s from now. Nothing written by the denial.
        expect(denied(yield* W.acquire("a", 1))).toBe(5_000)
        // A cost of 2 needs the entry of 2 s to end too: at 12 s.
        expect(denied(yield* W.acquire("a", 2))).toBe(7_000)
        expect(denied(yield* W.acquire("a", 4))).toBeNull()
        expect(yield* list(key)).toEqual(["3", "0 1", "2000000 2"])
        yield* TestClock.adjust("4999 millis")
        expect(denied(yield* W.acquire("a", 1))).toBe(1)
        expect(yield* W.peek("a")).toBe(0)
        yield* TestClock.adjust("1 millis")
        // 10 s: the first entry has ended, the one of 2 s still counts.
        expect(yield* W.peek("a")).toBe(1)
        const again = yield* W.acquire("a", 1)
        expect([allowed(again), resetAfter(again)]).toEqual([0, 10_000])
        expect(yield* list(key)).toEqual(["3", "2000000 2", "10000000 1"])
        expect(allowed(yield* W.acquire("a", 0))).toBe(0)
        yield* TestClock.adjust("2 seconds")
        expect(allowed(yield* W.acquire("a", 2))).toBe(0)
        expect(yield* list(key)).toEqual(["3", "10000000 1", "12000000 2"])
      }).pipe(Effect.provide(Redis.layerMemory()))
  )

  effect.effect(
    "no boundary burst: a fixed window admits 2 × limit across its edge, the sliding window limit",
    () =>
      Effect.gen(function*() {
        const S = SlidingWindow.make<string>("s", 5, "1 second")
        const F = FixedWindow.make<string>("f", 5, "1 second")
        yield* TestClock.adjust("900 millis")
        expect(allowed(yield* S.acquire("a", 5))).toBe(0)
        expect(allowed(yield* F.acquire("a", 5))).toBe(0)
        yield* TestClock.adjust("200 millis")
        expect(allowed(yield* F.acquire("a", 5))).toBe(0)
        expect(denied(yield* S.acquire("a", 1))).toBe(800)
      }).pipe(Effect.provide(Redis.layerMemory()))
  )

  effect.effect(
    "batched acquires are each decided in turn, each allowed one an entry of its own",
    () =>
      Effect.gen(function*() {
        const W = SlidingWindow.make<string>("b", 4, "1 second")
        const batch = yield* Effect.all([W.acquire("a", 1), W.acquire("a", 2), W.acquire("a", 2)], {
          concurrency: "unbounded"
        })
        expect(batch.map((a) => a._tag)).toEqual(["Allowed", "Allowed", "Denied"])
        expect(yield* list(keyOf("b", "a"))).toEqual(["3", "0 1", "0 2"])
      }).pipe(Effect.provide(Redis.layerMemory()))
  )

  effect.effect(
    "in a group: decided all or nothing; a refund gives the spent entry back while it lasts",
    () =>
      Effect.gen(function*() {
        const S = SlidingWindow.make<string>("g", 3, "10 seconds")
        const F = FixedWindow.make<string>("h", 1, "10 seconds")
        const group = [S, F] as unknown as ReadonlyArray<limits.AnyLimiter>
        yield* TestClock.adjust("1 second")
        const first = yield* limits.acquire(group, "a", 1)
        expect(first.allowed).toBe(true)
        expect(first.admissions.map(resetAfter)).toEqual([10_000, 9_000])
        expect(first.starts[0]).toBe(1_000_000)
        // The window denies: the sliding window spends nothing.
        const second = yield* limits.acquire(group, "a", 1)
        expect(second.allowed).toBe(false)
        expect(allowed(second.admissions[0]!)).toBe(2)
        expect(yield* list(keyOf("g", "a"))).toEqual(["1", "1000000 1"])
        expect(yield* limits.check(group, "a", 1)).toEqual([0, 9_000])
        expect(yield* limits.check(group, "a", 3)).toEqual([10_000, -1])
        // A refund (what a cluster's split decision sends for a group that allowed) removes the entry.
        yield* TestClock.adjust("1 second")
        allowed(yield* S.acquire("a", 2))
        const spec = limits.specOfLimiter(S as unknown as limits.AnyLimiter)
        const refund = (cost: number, start: number) =>
          Effect.flatMap(
            Redis.Redis,
            (redis) => redis.script(limits.scripts().refund, [keyOf("g", "a")], [String(cost), spec, String(start)])
          )
        yield* refund(1, 2_000_000)
        expect(yield* list(keyOf("g", "a"))).toEqual(["2", "1000000 1", "2000000 1"])
        yield* refund(1, 1_000_000)
        expect(yield* list(keyOf("g", "a"))).toEqual(["1", "2000000 1"])
        yield* refund(5, 2_000_000)
        expect(yield* keysMatching(keyOf("g", "*"))).toEqual([])
        // An entry that has ended has nothing to give back.
        allowed(yield* S.acquire("a", 1))
        yield* TestClock.adjust("10 seconds")
        yield* refund(1, 2_000_000)
        expect(yield* list(keyOf("g", "a"))).toEqual(["1", "2000000 1"])
      }).pipe(Effect.provide(Redis.layerMemory()))
  )
})

forEachBackend("SlidingWindow", (it) => {
  it.scoped("exact on the store's clock: after every allowed acquire, no window holds more than the limit", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const size = 150_000
      const W = SlidingWindow.make<string>(ns, 7, Duration.micros(BigInt(size)))
      const key = keyOf(ns, "a")
      let [allowedCount, deniedCount] = [0, 0]
      const end = (yield* serverMicros) + 2.5 * size
      for (let i = 0; (yield* serverMicros) < end; i++) {
        const admission = yield* W.acquire("a", 1 + (i % 3))
        if (admission._tag === "Denied") {
          deniedCount++
          continue
        }
        allowedCount++
        const entries = (yield* list(key)).slice(1).map((e) => e.split(" ").map(Number) as [number, number])
        const newest = entries[entries.length - 1]![0]
        // The window that ends just after the newest entry holds the most of any that holds it.
        const inWindow = entries.filter(([t]) => t > newest - size).reduce((sum, [, c]) => sum + c, 0)
        expect(inWindow).toBeLessThanOrEqual(7)
        expect(yield* pttl(key)).toBeLessThanOrEqual(150)
      }
      expect(allowedCount).toBeGreaterThan(7)
      expect(deniedCount).toBeGreaterThan(0)
    }))

  it.scoped("a denial's retryAfter is exact: when the oldest entry ends, rounded up to the ms; then it fits", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const W = SlidingWindow.make<string>(ns, 2, "300 millis")
      const key = keyOf(ns, "a")
      allowed(yield* W.acquire("a", 1))
      allowed(yield* W.acquire("a", 1))
      const [, first] = yield* list(key)
      const t0 = Number(first!.split(" ")[0])
      const before = yield* serverMicros
      const retry = denied(yield* W.acquire("a", 1))!
      const after = yield* serverMicros
      expect(retry).toBeGreaterThanOrEqual(Math.ceil((t0 + 300_000 - after) / 1000))
      expect(retry).toBeLessThanOrEqual(Math.ceil((t0 + 300_000 - before) / 1000))
      yield* Effect.sleep(Duration.millis(retry))
      // The first entry has ended (the second may have too, a few µs later).
      expect([0, 1]).toContain(allowed(yield* W.acquire("a", 1)))
    }))

  it.scoped("cost above the limit is denied with retryAfter None; cost 0 is allowed and writes nothing", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const W = SlidingWindow.make<string>(ns, 5, "1 hour")
      expect(denied(yield* W.acquire("a", 6))).toBeNull()
      expect(allowed(yield* W.acquire("a", 0))).toBe(5)
      expect(yield* keysMatching(`@@wakuwaku:SlidingWindow:${ns}:*`)).toEqual([])
      expect(allowed(yield* W.acquire("a", 5))).toBe(0)
      expect(denied(yield* W.acquire("a", 6))).toBeNull()
      expect(allowed(yield* W.acquire("a", 0))).toBe(0)
      const zero = SlidingWindow.make<string>(freshNamespace(), 0, "1 second")
      expect(denied(yield* zero.acquire("a", 1))).toBeNull()
      expect(allowed(yield* zero.acquire("a", 0))).toBe(0)
    }))

  it.scoped("reset says whether there were entries; names are separate; every key has a TTL of at most the window", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const A = SlidingWindow.make<string>(ns, 3, "1 hour")
      const B = SlidingWindow.make<number>(freshNamespace(), 2, "1 hour")
      expect(yield* A.reset("a")).toBe(false)
      expect(allowed(yield* A.acquire("a", 3))).toBe(0)
      expect(allowed(yield* A.acquire("b", 1))).toBe(2)
      expect(allowed(yield* B.acquire(42, 1))).toBe(1)
      expect(yield* expectTtls(`@@wakuwaku:SlidingWindow:${ns}:*`)).toEqual([])
      for (const key of yield* keysMatching(`@@wakuwaku:SlidingWindow:${ns}:*`)) {
        expect(yield* pttl(key)).toBeLessThanOrEqual(3_600_000)
      }
      expect(yield* A.reset("a")).toBe(true)
      expect(yield* A.peek("a")).toBe(3)
    }))

  it.scoped("bad input fails with InvalidInput and writes nothing", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const S = SlidingWindow.make<string>(ns, 5, "1 second")
      const N = SlidingWindow.make<number>(ns, 5, "1 second")
      for (const cost of [-1, 1.5, Number.NaN, Number.POSITIVE_INFINITY, 2 ** 53]) {
        const error = yield* Effect.flip(S.acquire("a", cost))
        expect(error).toBeInstanceOf(Redis.InvalidInput)
        expect(error).toMatchObject({
          _tag: "InvalidInput",
          argument: "cost",
          operation: `SlidingWindow(${ns}).acquire`
        })
      }
      for (const name of [Number.NaN, 1.5, 2 ** 53]) {
        expect(yield* Effect.flip(N.acquire(name, 1))).toMatchObject({ _tag: "InvalidInput", argument: "name" })
        expect(yield* Effect.flip(N.reset(name))).toMatchObject({ _tag: "InvalidInput", argument: "name" })
        expect(yield* Effect.flip(N.peek(name))).toMatchObject({ _tag: "InvalidInput", argument: "name" })
      }
      expect(yield* keysMatching(`@@wakuwaku:SlidingWindow:${ns}:*`)).toEqual([])
    }))
})
