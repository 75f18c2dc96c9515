/**
 * The bound on every duration a structure keeps in Redis (src/internal/duration.ts): a lock's, a
 * reader's or a semaphore holder's lease, a pipe's TTL, a window. Past 10^11 ms (10^14 µs) `make`
 * throws a `RangeError` naming the bound; at the bound, every script and twin handles it exactly, on
 * every backend: the reader's and the holder's score, the TTLs and the fences are what they should
 * be, and the backends agree. A reservation's maxWait has the same bound (past it: InvalidInput,
 * test/TokenBucket.reserve.test.ts).
 */
import { Duration, Effect, Option, Schema, Stream } from "effect"
import { describe, expect, it } from "vitest"
import { FixedWindow, Lock, Pipe, Rate, type Redis, RwLock, Semaphore, SlidingWindow, TokenBucket } from "wakuwaku"
import { command, forEachBackend, pttl } from "./support/backends.js"
import { freshNamespace } from "./support/redis.js"

const MAX_MS = 1e11
const BOUND = "must be at most 10^11 ms (about 3.2 years)"

/** The server's time (on memory, the store's clock) in whole microseconds. */
const serverMicros = Effect.map(
  command("TIME") as Effect.Effect<[string, string], Redis.RedisError, Redis.Redis>,
  ([seconds, micros]) => Number(seconds) * 1_000_000 + Number(micros)
)

describe("durations past the bound", () => {
  const past: ReadonlyArray<Duration.DurationInput> = [
    MAX_MS + 1,
    1e16,
    1e19,
    1e22,
    2 ** 62,
    Duration.days(1e6),
    "200 weeks"
  ]

  it("Lock, RwLock, Semaphore and Pipe refuse a ttl past 10^11 ms at make, with a RangeError naming the bound", () => {
    for (const ttl of past) {
      expect(() => Lock.make("bound", ttl)).toThrow(RangeError)
      expect(() => Lock.make("bound", ttl)).toThrow(`wakuwaku: Lock(bound) ttl ${BOUND}, got `)
      expect(() => RwLock.make("bound", ttl)).toThrow(RangeError)
      expect(() => RwLock.make("bound", ttl)).toThrow(`wakuwaku: RwLock(bound) ttl ${BOUND}, got `)
      expect(() => Semaphore.make("bound", 2, ttl)).toThrow(RangeError)
      expect(() => Semaphore.make("bound", 2, ttl)).toThrow(`wakuwaku: Semaphore(bound) ttl ${BOUND}, got `)
      expect(() => Pipe.make("bound", Schema.String, ttl)).toThrow(RangeError)
      expect(() => Pipe.make("bound", Schema.String, ttl)).toThrow(`wakuwaku: Pipe(bound) ttl ${BOUND}, got `)
    }
    expect(() => Lock.make("bound", 1e16)).toThrow(
      "wakuwaku: Lock(bound) ttl must be at most 10^11 ms (about 3.2 years), got 115740740d 17h 46m 40s"
    )
  })

  it("a FixedWindow refuses a window past the same bound", () => {
    for (const window of [MAX_MS + 1, 1e16, 2 ** 62]) {
      expect(() => FixedWindow.make("bound", 1, window)).toThrow(RangeError)
      expect(() => FixedWindow.make("bound", 1, window)).toThrow(
        "wakuwaku: FixedWindow(bound) window must be a whole number of microseconds from 1 µs to 10^11 ms (about 3.2 years)"
      )
    }
  })

  it("a SlidingWindow refuses a window past the same bound, and takes one at it", () => {
    for (const window of [MAX_MS + 1, 1e16, 2 ** 62]) {
      expect(() => SlidingWindow.make("bound", 1, window)).toThrow(
        new RangeError(
          "wakuwaku: SlidingWindow(bound) window must be a whole number of microseconds from 1 µs to 10^11 ms " +
            `(about 3.2 years), got ${Duration.format(Duration.millis(window))}`
        )
      )
    }
    expect(Duration.toMillis(SlidingWindow.make("bound", 1, MAX_MS).window)).toBe(MAX_MS)
  })

  it("input that is no duration at all is a RangeError too, never a plain Error", () => {
    expect(() => Rate.make(1, "garbage" as "1 second")).toThrow(RangeError)
    expect(() => Rate.make(1, "garbage" as "1 second")).toThrow(
      `wakuwaku: a rate's period must be a duration (milliseconds, "<n> <unit>" such as "30 seconds", or a Duration), got "garbage"`
    )
    expect(() => Lock.make("bound", "soon" as Duration.DurationInput)).toThrow(RangeError)
    expect(() => RwLock.make("bound", "3 fortnights" as Duration.DurationInput)).toThrow(RangeError)
    expect(() => Pipe.make("bound", Schema.String, {} as Duration.DurationInput)).toThrow(RangeError)
    expect(() => Lock.make("bound", NaN)).toThrow("wakuwaku: Lock(bound) ttl must be longer than zero, got NaN ms")
  })
})

forEachBackend("durations at the bound", (it) => {
  it.scoped("RwLock: a reader with a lease of 10^11 ms is in the reader set, scored exactly, and keeps writers out", () =>
    Effect.gen(function*() {
      const ns = freshNamespace("bound")
      const DOCS = RwLock.make<string>(ns, MAX_MS)
      const readers = `@@wakuwaku:RwLock:{${ns}:doc}:readers`
      const before = yield* serverMicros
      const read = yield* DOCS.tryRead("doc")
      const after = yield* serverMicros
      expect(Option.isSome(read)).toBe(true)
      expect(yield* command("ZCARD", readers)).toBe(1)
      const [, score] = (yield* command("ZRANGE", readers, 0, -1, "WITHSCORES")) as [string, string]
      // The lease's end in server µs: the grant's time plus exactly 10^14 µs.
      expect(Number(score) - MAX_MS * 1000).toBeGreaterThanOrEqual(before)
      expect(Number(score) - MAX_MS * 1000).toBeLessThanOrEqual(after)
      const ttl = yield* pttl(readers)
      expect(ttl).toBeGreaterThan(MAX_MS - 5_000)
      expect(ttl).toBeLessThanOrEqual(MAX_MS)
      expect(yield* DOCS.tryWrite("doc")).toEqual(Option.none())
      expect(yield* Option.getOrThrow(read).release).toBe(true)
      expect(Option.isSome(yield* DOCS.tryWrite("doc"))).toBe(true)
      yield* command("DEL", `@@wakuwaku:RwLock:{${ns}:doc}:writer`, `@@wakuwaku:RwLock:{${ns}:doc}:fence`)
    }))

  it.scoped("Semaphore: a holder with a lease of 10^11 ms is scored exactly, its keys live that long, and it counts", () =>
    Effect.gen(function*() {
      const ns = freshNamespace("bound")
      const EXPORTS = Semaphore.make<string>(ns, 2, MAX_MS)
      const holders = `@@wakuwaku:Semaphore:{${ns}:t}:holders`
      const before = yield* serverMicros
      const permit = Option.getOrThrow(yield* EXPORTS.tryAcquire("t", 2))
      const after = yield* serverMicros
      const [, , , score] = (yield* command("ZRANGE", holders, 0, -1, "WITHSCORES")) as [string, string, string, string]
      expect(Number(score) - MAX_MS * 1000).toBeGreaterThanOrEqual(before)
      expect(Number(score) - MAX_MS * 1000).toBeLessThanOrEqual(after)
      for (const suffix of ["holders", "fence"]) {
        const ttl = yield* pttl(`@@wakuwaku:Semaphore:{${ns}:t}:${suffix}`)
        expect(ttl).toBeGreaterThan(MAX_MS - 5_000)
        expect(ttl).toBeLessThanOrEqual(MAX_MS)
      }
      expect(yield* EXPORTS.tryAcquire("t")).toEqual(Option.none())
      expect(yield* EXPORTS.extend(permit)).toBe(true)
      expect(yield* EXPORTS.release(permit)).toBe(true)
      yield* command("DEL", `@@wakuwaku:Semaphore:{${ns}:t}:fence`)
    }))

  it.scoped("Lock: the owner and the fence live 10^11 ms", () =>
    Effect.gen(function*() {
      const ns = freshNamespace("bound")
      const JOBS = Lock.make<string>(ns, MAX_MS)
      const token = Option.getOrThrow(yield* JOBS.tryLock("job"))
      for (const suffix of ["owner", "fence"]) {
        const ttl = yield* pttl(`@@wakuwaku:Lock:{${ns}:job}:${suffix}`)
        expect(ttl).toBeGreaterThan(MAX_MS - 5_000)
        expect(ttl).toBeLessThanOrEqual(MAX_MS)
      }
      expect(yield* token.extend).toBe(true)
      expect(yield* token.release).toBe(true)
      yield* command("DEL", `@@wakuwaku:Lock:{${ns}:job}:fence`)
    }))

  it.scoped("TokenBucket: a reservation with maxWait 10^11 ms goes 10^8 tokens into debt and waits up to it", () =>
    Effect.gen(function*() {
      const ns = freshNamespace("bound")
      // A token a second, 10^8 of them: 10^11 ms to fill, and as long to pay a debt of as many.
      const B = TokenBucket.make<string>(ns, 1e8, Rate.perSecond(1))
      const started = performance.now()
      expect(yield* B.acquire("a", 1e8)).toEqual(TokenBucket.Admission.Allowed({ remaining: 0 }))
      const granted = yield* B.reserve("a", 1e8, MAX_MS)
      const elapsed = Math.ceil(performance.now() - started) + 1
      if (granted._tag !== "Granted") return expect.fail("expected Granted")
      expect(Duration.toMillis(granted.wait)).toBeLessThanOrEqual(MAX_MS)
      expect(Duration.toMillis(granted.wait)).toBeGreaterThanOrEqual(MAX_MS - elapsed)
      // Full again after the debt and the whole capacity: 2 × 10^11 ms.
      const ttl = yield* pttl(`@@wakuwaku:TokenBucket:${ns}:a`)
      expect(ttl).toBeGreaterThan(2 * MAX_MS - 5_000)
      expect(ttl).toBeLessThanOrEqual(2 * MAX_MS)
      // One token more is a second past the bound: refused for about that second.
      const refused = yield* B.reserve("a", 1, MAX_MS)
      if (refused._tag !== "Refused") return expect.fail("expected Refused")
      const retry = Duration.toMillis(Option.getOrThrow(refused.retryAfter))
      expect(retry).toBeLessThanOrEqual(1000)
      expect(retry).toBeGreaterThanOrEqual(1000 - Math.ceil(performance.now() - started) - 1)
      expect(yield* B.reset("a")).toBe(true)
    }))

  it.scoped("Pipe: a message sent with a TTL of 10^11 ms lives that long and is received", () =>
    Effect.gen(function*() {
      const ns = freshNamespace("bound")
      const P = Pipe.make<string, string>(ns, Schema.String, MAX_MS)
      yield* P.send("p", "hello")
      const ttl = yield* pttl(`@@wakuwaku:Pipe:{${ns}:p}:messages`)
      expect(ttl).toBeGreaterThan(MAX_MS - 5_000)
      expect(ttl).toBeLessThanOrEqual(MAX_MS)
      yield* P.close("p")
      expect(yield* Stream.runCollect(P.receive("p"))).toEqual(expect.objectContaining({ length: 1 }))
      yield* command("DEL", `@@wakuwaku:Pipe:{${ns}:p}:closed`)
    }))
})
