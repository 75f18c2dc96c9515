/**
 * Acquires made together on one connection are sent as one script call, and each still gets its own exact
 * Admission.
 */
import { layer } from "@effect/vitest"
import { Duration, Effect, Either, Exit, Fiber, Option, Random, type Scheduler } from "effect"
import { Redis as IORedis } from "ioredis"
import { expect } from "vitest"
import { Rate, Redis, TokenBucket } from "wakuwaku"
import { RedisServer } from "wakuwaku/testing"

const { Allowed } = TokenBucket.Admission

/**
 * A scheduler that runs each task at once: an interruption reaches the fiber in the same step as
 * `Fiber.interrupt`, so a test can interrupt a call while its batch is still waiting for the end of the
 * turn.
 */
const immediate: Scheduler.Scheduler = { scheduleTask: (task) => task(), shouldYield: () => false }

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

  it.effect("an acquire interrupted before its batch is sent is never sent; the rest of its batch is", () =>
    Effect.gen(function*() {
      const B = TokenBucket.make<string>("batch-interrupted", 1, Rate.make(1, "1 hour"))
      const before = yield* evalshaCalls
      yield* Effect.gen(function*() {
        // On an idle connection: sent at once, alone.
        const busy = yield* Effect.fork(B.acquire("busy", 1))
        // While it is in flight: both wait in one batch for the end of the turn.
        const victim = yield* Effect.fork(B.acquire("victim", 1))
        const kept = yield* Effect.fork(B.acquire("kept", 1))
        expect(yield* Fiber.interrupt(victim)).toSatisfy(Exit.isInterrupted)
        expect(yield* Fiber.join(kept)).toEqual(Allowed({ remaining: 0 }))
        expect(yield* Fiber.join(busy)).toEqual(Allowed({ remaining: 0 }))
      }).pipe(Effect.withScheduler(immediate))
      // The busy call, then the batch without its interrupted call (a batch of one goes as the script).
      expect((yield* evalshaCalls) - before).toBe(2)
      expect(yield* B.peek("victim")).toBe(1)
      const redis = yield* Redis.Redis
      expect(yield* redis.command("EXISTS", ["@@wakuwaku:TokenBucket:batch-interrupted:victim"])).toBe(0)
    }))

  it.effect("interrupted at random points under load: the bucket holds exactly the acquires that were sent", () =>
    Effect.gen(function*() {
      const server = yield* RedisServer.RedisServer
      const ns = "batch-chaos"
      const B = TokenBucket.make<string>(ns, 1, Rate.make(1, "1 hour"))
      const keyOf = (i: number) => `@@wakuwaku:TokenBucket:${ns}:n${i}`
      // Every EVALSHA the library sends, in order: which keys, at which step.
      let step = 0
      const sentAt = new Map<string, Array<number>>()
      const client = new IORedis(server.url)
      const evalsha = client.evalsha.bind(client) as (...args: Array<string | number>) => Promise<unknown>
      ;(client as unknown as { evalsha: typeof evalsha }).evalsha = (...args) => {
        const count = Number(args[1])
        for (const key of args.slice(2, 2 + count)) sentAt.set(String(key), [...(sentAt.get(String(key)) ?? []), step])
        step++
        return evalsha(...args)
      }
      const N = 2000
      const interruptedAt = new Map<number, number>()
      const allowed = new Set<number>()
      const attempt = (i: number) =>
        Effect.gen(function*() {
          const fiber = yield* Effect.fork(B.acquire(`n${i}`, 1))
          // Interrupt about half, at once, after a yield, or after a short sleep: before, while or after
          // their batch is sent.
          const roll = yield* Random.nextIntBetween(0, 8)
          if (roll >= 4) {
            const exit = yield* Fiber.await(fiber)
            if (Exit.isSuccess(exit) && exit.value._tag === "Allowed") allowed.add(i)
            return
          }
          if (roll === 1) yield* Effect.yieldNow()
          if (roll === 2) yield* Effect.sleep("1 millis")
          const exit = yield* Fiber.interrupt(fiber)
          if (Exit.isSuccess(exit) && exit.value._tag === "Allowed") allowed.add(i)
          else interruptedAt.set(i, step)
        })
      // Half the run on Effect's own scheduler, half on one that delivers interruptions at once (which reach
      // calls still waiting for their batch to be sent).
      const run = (from: number, to: number) =>
        Effect.forEach(Array.from({ length: to - from }, (_, i) => from + i), attempt, {
          concurrency: 64,
          discard: true
        })
      yield* run(0, N / 2).pipe(Effect.provide(Redis.layerClient(client)))
      yield* run(N / 2, N).pipe(Effect.withScheduler(immediate), Effect.provide(Redis.layerClient(client)))
      const redis = yield* Redis.Redis
      let unsent = 0
      for (let i = 0; i < N; i++) {
        const sends = sentAt.get(keyOf(i)) ?? []
        // Never sent twice; taken exactly when sent.
        expect(sends.length, `n${i}`).toBeLessThanOrEqual(1)
        expect(yield* redis.command("EXISTS", [keyOf(i)]), `n${i}`).toBe(sends.length)
        if (allowed.has(i)) expect(sends.length, `n${i} was allowed`).toBe(1)
        const at = interruptedAt.get(i)
        if (at !== undefined) {
          // Once its interruption is over, an acquire is never sent.
          if (sends.length === 1) expect(sends[0]!, `n${i}`).toBeLessThan(at)
          else unsent++
        }
      }
      expect(allowed.size + interruptedAt.size).toBe(N)
      console.log(
        `batch chaos: ${N} acquires, ${allowed.size} allowed, ${interruptedAt.size} interrupted ` +
          `(${unsent} of them never sent, ${interruptedAt.size - unsent} sent before their interruption ended), ` +
          `${step} EVALSHA`
      )
      // The run reached both sides: interrupted before sending, and after.
      expect(unsent).toBeGreaterThan(0)
      expect(interruptedAt.size - unsent).toBeGreaterThan(0)
      yield* Effect.promise(() => client.quit())
    }))
})
