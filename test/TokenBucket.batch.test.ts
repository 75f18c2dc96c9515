/**
 * Acquires made together on one connection are sent as one script call, and each still gets its own exact
 * Admission.
 */
import { layer } from "@effect/vitest"
import { Duration, Effect, Either, Option } from "effect"
import { expect } from "vitest"
import { Rate, Redis, TokenBucket } from "wakuwaku"
import { RedisServer } from "wakuwaku/testing"

/** EVALSHA calls the server has run so far. */
const evalshaCalls = Effect.flatMap(Redis.Redis, (redis) => redis.command("INFO", ["commandstats"])).pipe(
  Effect.map((info) => Number(/cmdstat_evalsha:calls=(\d+)/.exec(String(info))?.[1] ?? 0))
)

// A server of its own, so that the call count is this file's alone.
layer(RedisServer.layer(), { excludeTestServices: true })("TokenBucket batching", (it) => {
  it.effect("30 acquires at once on one bucket of 10: exactly 10 allowed, remaining 9..0 once each, in 2 calls", () =>
    Effect.gen(function*() {
      const B = TokenBucket.make<string>("batch-one", 10, Rate.make(1, "1 hour"))
      const before = yield* evalshaCalls
      const admissions = yield* Effect.all(Array.from({ length: 30 }, () => B.acquire("a", 1)), {
        concurrency: "unbounded"
      })
      const calls = (yield* evalshaCalls) - before
      const remaining = admissions.flatMap((a) => a._tag === "Allowed" ? [a.remaining] : []).sort((a, b) => a - b)
      expect(remaining).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9])
      const waits = admissions.flatMap((a) =>
        a._tag === "Denied" ? [Duration.toMillis(Option.getOrThrow(a.retryAfter))] : []
      )
      expect(waits).toHaveLength(20)
      for (const wait of waits) {
        expect(wait).toBeGreaterThan(3_590_000)
        expect(wait).toBeLessThanOrEqual(3_600_000)
      }
      // The first goes alone on an idle connection; the 29 made while it is in flight go as one call.
      expect(calls).toBe(2)
    }))

  it.effect("one batch mixes buckets, names and costs, and each call gets its own exact answer", () =>
    Effect.gen(function*() {
      const SMALL = TokenBucket.make<string>("batch-small", 3, Rate.make(1, "1 hour"))
      const BIG = TokenBucket.make<number>("batch-big", 1000, Rate.perSecond(10))
      const admissions = yield* Effect.all(
        [
          SMALL.acquire("x", 2),
          BIG.acquire(1, 600),
          SMALL.acquire("y", 3),
          SMALL.acquire("x", 2),
          BIG.acquire(1, 400),
          SMALL.acquire("x", 4),
          BIG.acquire(2, 0),
          SMALL.acquire("x", 1)
        ],
        { concurrency: "unbounded" }
      )
      expect(
        admissions.map((a) =>
          a._tag === "Allowed" ? a.remaining : Option.getOrNull(a.retryAfter) === null ? "never" : "wait"
        )
      )
        .toEqual([1, 400, 0, "wait", 0, "never", 1000, 0])
    }))

  it.effect("a call that fails inside a batch fails alone and takes nothing; the others are answered", () =>
    Effect.gen(function*() {
      const B = TokenBucket.make<string>("batch-fail", 5, Rate.make(1, "1 hour"))
      const redis = yield* Redis.Redis
      // A key of the wrong type where a bucket should be.
      yield* redis.command("HSET", ["@@wakuwaku:TokenBucket:batch-fail:broken", "f", "v"])
      yield* redis.command("PEXPIRE", ["@@wakuwaku:TokenBucket:batch-fail:broken", 60_000])
      const before = yield* evalshaCalls
      const [first, broken, last] = yield* Effect.all(
        [B.acquire("x", 2), B.acquire("broken", 1), B.acquire("y", 3)].map(Effect.either),
        { concurrency: "unbounded" }
      )
      expect(first).toEqual(Either.right(TokenBucket.Admission.Allowed({ remaining: 3 })))
      expect(last).toEqual(Either.right(TokenBucket.Admission.Allowed({ remaining: 2 })))
      const error = Either.getOrThrow(Either.flip(broken!))
      expect(error).toMatchObject({ _tag: "RedisError", reason: "Script", operation: "script TokenBucket.acquire" })
      expect(String(error.cause)).toContain("WRONGTYPE")
      expect((yield* evalshaCalls) - before).toBe(2)
      // Each of the others took its tokens exactly once.
      expect(yield* B.peek("x")).toBe(3)
      expect(yield* B.peek("y")).toBe(2)
    }))
})
