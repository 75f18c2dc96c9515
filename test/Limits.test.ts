/**
 * Several limiters decided as one (src/internal/limits.ts), the rule of docs/http.md ("Several limits, one
 * decision"): all or nothing.
 *
 * - Exact outcomes on every backend: a request any limiter denies spends from none; a cost above one
 *   quota is never allowed; bad input is refused before anything is sent; every key keeps a TTL; the right
 *   to write every limiter's entity is needed.
 * - A property test against a model of the rule on the embedded backend, on a clock the test moves (exact), and
 *   the same on Redis (real time, slow rates: the model is exact but for the retries, bounded by the time
 *   the run took).
 * - On a Cluster: keys in one slot go in one script; keys in several are split per slot, and a group that
 *   allowed is refunded when another denies.
 * - `Limits.check`, the read-only question "when would each allow?": the model's answer, exact, on the
 *   embedded backend; nothing written; per slot on a Cluster.
 */
import { describe, expect, it as plain } from "@effect/vitest"
import keySlot from "cluster-key-slot"
import { Clock, Duration, Effect, Exit, Layer, Option } from "effect"
import fc from "fast-check"
import { Capability, FixedWindow, Limiter as Limiter_, Rate, Redis, SlidingWindow, TokenBucket } from "wakuwaku"
import * as limits from "../src/internal/limits.js"
import { command, expectTtls, forEachBackend } from "./support/backends.js"
import { ClusterLive, freshNamespace, RedisLive } from "./support/redis.js"

type Limiter =
  | TokenBucket.TokenBucket<string>
  | FixedWindow.FixedWindow<string>
  | SlidingWindow.SlidingWindow<string>

const group = (...limiters: ReadonlyArray<Limiter>) => limiters as unknown as ReadonlyArray<limits.AnyLimiter>

/** An outcome as plain values: allowed, and per limiter ["Allowed", remaining] or ["Denied", retry ms | null]. */
const plainOutcome = (outcome: limits.Outcome) => ({
  allowed: outcome.allowed,
  admissions: outcome.admissions.map((a) =>
    a._tag === "Allowed"
      ? ["Allowed", a.remaining] as const
      : ["Denied", Option.match(a.retryAfter, { onNone: () => null, onSome: Duration.toMillis })] as const
  )
})

const decide = (limiters: ReadonlyArray<Limiter>, name: string, cost: number) =>
  Effect.map(limits.acquire(group(...limiters), name, cost), plainOutcome)

describe("Limits: what is refused when the group is made or run", () => {
  plain("a limiter listed twice (by kind and namespace) would share its keys: refused", () => {
    const a = TokenBucket.make<string>("twice", 5, Rate.perSecond(1))
    const b = TokenBucket.make<string>("twice", 9, Rate.perSecond(3))
    const w = FixedWindow.make<string>("twice", 5, "1 second")
    expect(limits.checkGroup(group(a, b))).toBe(
      "wakuwaku: TokenBucket(twice) is listed twice among the limits of one request (they would share its keys)"
    )
    // A bucket and a window of one namespace have keys of their own.
    expect(limits.checkGroup(group(a, w))).toBeUndefined()
  })

  plain.effect(
    "the right to write every limiter's entity is needed: one missing is a defect naming it",
    () =>
      Effect.gen(function*() {
        const bucket = TokenBucket.make<string>(freshNamespace(), 5, Rate.perSecond(1))
        const window = FixedWindow.make<string>(freshNamespace(), 5, "1 second")
        const exit = yield* Effect.exit(limits.acquire(group(bucket, window), "n", 1)).pipe(
          Effect.provide(Capability.layer({ write: [TokenBucket.entity] })),
          // The store alone, without the memory layer's grant of everything.
          Effect.provide(Layer.effect(Redis.Redis, Redis.Redis).pipe(Layer.provide(Redis.layerMemory())))
        )
        expect(Exit.isFailure(exit) && exit.cause._tag === "Die").toBe(true)
        expect(String(Exit.isFailure(exit) && exit.cause._tag === "Die" ? exit.cause.defect : "")).toContain(
          "this operation needs to write FixedWindow"
        )
      })
  )
})

// The model of the rule: each limiter alone, as its own acquire decides; the group allows iff each allows,
// and then every one spends; otherwise none does.

interface BucketModel {
  readonly kind: "T"
  readonly capacity: number
  /** One token per periodUs. */
  readonly periodUs: number
}
interface WindowModel {
  readonly kind: "W"
  readonly limit: number
  readonly sizeUs: number
}
type LimiterModel = BucketModel | WindowModel

type Verdict = readonly ["Allowed", number] | readonly ["Denied", number | null]

/**
 * The model's state per limiter and name: a bucket's tokens in sixteenths (every level the tests reach is
 * a whole number of sixteenths, so doubles hold it exactly) and when; a window's start and count.
 */
class Model {
  private readonly buckets = new Map<string, { sixteenths: number; at: number }>()
  private readonly windows = new Map<string, { start: number; count: number }>()
  constructor(readonly limiters: ReadonlyArray<LimiterModel>) {}

  private level16(i: number, b: BucketModel, name: string, now: number) {
    const s = this.buckets.get(`${i}:${name}`)
    return s === undefined ? b.capacity * 16 : Math.min(b.capacity * 16, s.sixteenths + (now - s.at) * 16 / b.periodUs)
  }

  /** Every limiter's own verdict now, and the group's; applies the spend when the group allows. */
  acquire(name: string, cost: number, now: number): { allowed: boolean; admissions: Array<Verdict> } {
    const own = this.own(name, cost, now)
    const allowed = own.every((o) => o.fits)
    if (allowed) own.forEach((o) => o.spend())
    return { allowed, admissions: own.map((o) => allowed ? ["Allowed", o.after] as const : o.verdict) }
  }

  /** What `Limits.check` replies: per limiter 0 when it would allow now, else its own denial's retry (-1: never). */
  waits(name: string, cost: number, now: number): Array<number> {
    return this.own(name, cost, now).map((o) => o.fits ? 0 : (o.verdict[1] ?? -1))
  }

  private own(name: string, cost: number, now: number) {
    return this.limiters.map((l, i): { fits: boolean; verdict: Verdict; spend: () => void; after: number } => {
      if (l.kind === "T") {
        const level = this.level16(i, l, name, now)
        if (cost > l.capacity) return { fits: false, verdict: ["Denied", null], spend: () => {}, after: 0 }
        if (level >= cost * 16) {
          return {
            fits: true,
            verdict: ["Allowed", Math.floor(level / 16)],
            after: Math.floor((level - cost * 16) / 16),
            spend: () => this.buckets.set(`${i}:${name}`, { sixteenths: level - cost * 16, at: now })
          }
        }
        return {
          fits: false,
          verdict: ["Denied", Math.ceil((cost * 16 - level) * l.periodUs / 16 / 1000)],
          spend: () => {},
          after: 0
        }
      }
      const start = now - now % l.sizeUs
      const s = this.windows.get(`${i}:${name}`)
      const count = s !== undefined && s.start === start ? s.count : 0
      const remaining = Math.max(0, l.limit - count)
      if (cost > l.limit) return { fits: false, verdict: ["Denied", null], spend: () => {}, after: 0 }
      if (cost > remaining) {
        return {
          fits: false,
          verdict: ["Denied", Math.ceil((start + l.sizeUs - now) / 1000)],
          spend: () => {},
          after: 0
        }
      }
      return {
        fits: true,
        verdict: ["Allowed", remaining],
        after: remaining - cost,
        spend: () => this.windows.set(`${i}:${name}`, { start, count: count + cost })
      }
    })
  }
}

const limiterOf = (model: LimiterModel): Limiter =>
  model.kind === "T"
    ? TokenBucket.make<string>(freshNamespace(), model.capacity, Rate.make(1, Duration.micros(BigInt(model.periodUs))))
    : FixedWindow.make<string>(freshNamespace(), model.limit, Duration.micros(BigInt(model.sizeUs)))

/** 1 to 3 limiters of either kind; periods and steps such that every bucket level is whole sixteenths. */
const limiterModels = (windowSizes: ReadonlyArray<number>, periods: ReadonlyArray<number>) =>
  fc.array(
    fc.oneof(
      fc.record({
        kind: fc.constant("T" as const),
        capacity: fc.integer({ min: 0, max: 6 }),
        periodUs: fc.constantFrom(...periods)
      }),
      fc.record({
        kind: fc.constant("W" as const),
        limit: fc.integer({ min: 0, max: 6 }),
        sizeUs: fc.constantFrom(...windowSizes)
      })
    ),
    { minLength: 1, maxLength: 3 }
  )

const requests = (steps: number) =>
  fc.array(
    fc.record({
      name: fc.constantFrom("a", "b"),
      cost: fc.integer({ min: 0, max: 4 }),
      /** How many 25 ms steps pass before the request. */
      wait: fc.integer({ min: 0, max: steps })
    }),
    { minLength: 1, maxLength: 40 }
  )

/** A clock that moves only when told (the memory backend reads Effect's Clock): exact, and cheaper than TestClock. */
const manualClock = () => {
  let nanos = 0n
  const clock: Clock.Clock = {
    [Clock.ClockTypeId]: Clock.ClockTypeId,
    unsafeCurrentTimeMillis: () => Number(nanos / 1_000_000n),
    unsafeCurrentTimeNanos: () => nanos,
    currentTimeMillis: Effect.sync(() => Number(nanos / 1_000_000n)),
    currentTimeNanos: Effect.sync(() => nanos),
    // Only the memory store's sweep sleeps; reads never see expired keys anyway.
    sleep: () => Effect.never
  }
  return { clock, advance: (micros: number) => (nanos += BigInt(micros) * 1000n) }
}

describe("Limits against a model of the rule, on the embedded backend (exact, on a clock the test moves)", () => {
  plain(
    "every outcome is the model's: the decision, each limiter's verdict, remaining and retry; and every check",
    async () => {
      await fc.assert(
        fc.asyncProperty(
          limiterModels([100_000, 300_000, 1_000_000], [100_000, 200_000, 400_000]),
          requests(12),
          async (models, ops) => {
            const model = new Model(models)
            const limiters = models.map(limiterOf)
            const { advance, clock } = manualClock()
            await Effect.gen(function*() {
              let now = 0
              for (const op of ops) {
                now += op.wait * 25_000
                advance(op.wait * 25_000)
                // The check first: it writes nothing, so the decision after it is the model's still.
                expect(yield* limits.check(group(...limiters), op.name, op.cost)).toEqual(
                  model.waits(op.name, op.cost, now)
                )
                const expected = model.acquire(op.name, op.cost, now)
                expect(yield* decide(limiters, op.name, op.cost)).toEqual(expected)
              }
            }).pipe(Effect.provide(Redis.layerMemory()), Effect.withClock(clock), Effect.runPromise)
          }
        ),
        { numRuns: 300 }
      )
    }
  )
})

describe("Limits against the model on Redis (real time, slow rates)", () => {
  plain("decisions and remaining are the model's; retries are, less the time the run took", async () => {
    // Fixed windows of 10^6 s: their windows start at multiples of it, and a run lasts seconds. One that would
    // end within the next minute is not used (none of 1e6 + 7, 1e6 + 11 s can: they differ by more).
    const seconds = await Effect.runPromise(
      Effect.map(
        command("TIME").pipe(Effect.provide(RedisLive)),
        (reply) => Number((reply as [string, string])[0])
      )
    )
    const size = [1_000_000, 1_000_007, 1_000_011].find((s) => s - (seconds % s) > 60)! * 1_000_000
    await fc.assert(
      fc.asyncProperty(limiterModels([size], [1_000_000_000]), requests(0), async (models, ops) => {
        const model = new Model(models)
        const limiters = models.map(limiterOf)
        const started = performance.now()
        await Effect.gen(function*() {
          for (const op of ops) {
            const expected = model.acquire(op.name, op.cost, 0)
            const actual = yield* decide(limiters, op.name, op.cost)
            expect(actual.allowed).toBe(expected.allowed)
            const elapsed = Math.ceil(performance.now() - started) + 1
            actual.admissions.forEach((verdict, i) => {
              const wanted = expected.admissions[i]!
              expect(verdict[0]).toBe(wanted[0])
              const l = models[i]!
              if (verdict[0] === "Allowed" || verdict[1] === null || wanted[1] === null) {
                expect(verdict).toEqual(wanted)
              } else if (l.kind === "T") {
                // The bucket refilled a little since the run began: its retry is at most that much sooner.
                expect(verdict[1]).toBeLessThanOrEqual(wanted[1])
                expect(verdict[1]).toBeGreaterThanOrEqual(wanted[1] - elapsed)
              } else {
                // Until the window's end: within the next 10^6 s, more than a minute away.
                expect(verdict[1]).toBeGreaterThan(60_000)
                expect(verdict[1]).toBeLessThanOrEqual(l.sizeUs / 1000)
              }
            })
          }
        }).pipe(Effect.provide(RedisLive), Effect.runPromise)
      }),
      { numRuns: 40 }
    )
  })
})

/** The store in context, counting the scripts it runs by name. */
const counting = Effect.gen(function*() {
  const redis = yield* Redis.Redis
  const calls: Array<string> = []
  const service: Redis.Service = {
    ...redis,
    script: (script, keys, args) => {
      calls.push(script.name)
      return redis.script(script, keys, args)
    }
  }
  return { layer: Layer.succeed(Redis.Redis, service), calls }
})

describe("Limits on a Redis Cluster", () => {
  plain.effect(
    "keys in one slot (a name with a hash tag) are decided by one script, atomically",
    () =>
      Effect.gen(function*() {
        const bucket = TokenBucket.make<string>(freshNamespace(), 2, Rate.make(1, "1000 seconds"))
        const window = FixedWindow.make<string>(freshNamespace(), 5, "1 hour")
        const store = yield* counting
        const name = "{user-42}"
        expect(keySlot(`@@wakuwaku:TokenBucket:${bucket.namespace}:${name}`)).toBe(
          keySlot(`@@wakuwaku:FixedWindow:${window.namespace}:${name}`)
        )
        const run = decide([bucket, window], name, 1).pipe(Effect.provide(store.layer))
        expect((yield* run).allowed).toBe(true)
        expect((yield* run).allowed).toBe(true)
        expect((yield* run).allowed).toBe(false)
        expect(store.calls).toEqual(["Limits.acquire", "Limits.acquire", "Limits.acquire"])
        expect([yield* bucket.peek(name), yield* window.peek(name)]).toEqual([0, 3])
      }).pipe(Effect.provide(ClusterLive))
  )

  plain.effect(
    "keys in several slots: split per slot; a group that allowed is refunded when another denies",
    () =>
      Effect.gen(function*() {
        const bucket = TokenBucket.make<string>(freshNamespace(), 1, Rate.make(1, "1000 seconds"))
        const window = FixedWindow.make<string>(freshNamespace(), 5, "1 hour")
        const other = TokenBucket.make<string>(freshNamespace(), 9, Rate.make(1, "1000 seconds"))
        // Find a name whose three keys lie in three slots.
        let name = "n0"
        for (let i = 0; new Set([bucket, window, other].map((l) => keySlot(keyOf(l, name)))).size < 3; i++) {
          name = `n${i}`
        }
        const store = yield* counting
        const run = decide([bucket, window, other], name, 1).pipe(Effect.provide(store.layer))
        expect(yield* run).toEqual({ allowed: true, admissions: [["Allowed", 0], ["Allowed", 4], ["Allowed", 8]] })
        // The first cross-slot call learns from CROSSSLOT (nothing spent) that this is a cluster.
        expect(store.calls).toEqual(["Limits.acquire", "Limits.acquire", "Limits.acquire", "Limits.acquire"])
        store.calls.length = 0
        const denied = yield* run
        expect(denied.allowed).toBe(false)
        expect(denied.admissions[0]![0]).toBe("Denied")
        // The window and the other bucket allowed and were spent from, then refunded: they report what they hold.
        expect(denied.admissions.slice(1)).toEqual([["Allowed", 4], ["Allowed", 8]])
        expect(store.calls.sort()).toEqual([
          "Limits.acquire",
          "Limits.acquire",
          "Limits.acquire",
          "Limits.refund",
          "Limits.refund"
        ])
        expect([yield* bucket.peek(name), yield* window.peek(name), yield* other.peek(name)]).toEqual([0, 4, 8])
      }).pipe(Effect.provide(ClusterLive))
  )
})

describe("Limits on a Redis Cluster: one cost per limiter", () => {
  plain.effect(
    "keys in several slots: each group spends its limiters' own costs, and a refund gives each its own back",
    () =>
      Effect.gen(function*() {
        const bucket = TokenBucket.make<string>(freshNamespace(), 1, Rate.make(1, "1000 seconds"))
        const window = FixedWindow.make<string>(freshNamespace(), 5, "1 hour")
        const other = TokenBucket.make<string>(freshNamespace(), 9, Rate.make(1, "1000 seconds"))
        let name = "n0"
        for (let i = 0; new Set([bucket, window, other].map((l) => keySlot(keyOf(l, name)))).size < 3; i++) {
          name = `n${i}`
        }
        const store = yield* counting
        const run = Effect.map(limits.acquire(group(bucket, window, other), name, [1, 2, 3]), plainOutcome).pipe(
          Effect.provide(store.layer)
        )
        expect(yield* run).toEqual({ allowed: true, admissions: [["Allowed", 0], ["Allowed", 3], ["Allowed", 6]] })
        store.calls.length = 0
        const denied = yield* run
        expect(denied.allowed).toBe(false)
        expect(denied.admissions[0]![0]).toBe("Denied")
        expect(denied.admissions.slice(1)).toEqual([["Allowed", 3], ["Allowed", 6]])
        expect(store.calls.filter((call) => call === "Limits.refund").length).toBe(2)
        expect([yield* bucket.peek(name), yield* window.peek(name), yield* other.peek(name)]).toEqual([0, 3, 6])
      }).pipe(Effect.provide(ClusterLive))
  )
})

describe("Limits on a Redis Cluster: a sliding window among them", () => {
  plain.effect(
    "keys in several slots: the sliding window's spent entry is refunded when another group denies",
    () =>
      Effect.gen(function*() {
        const bucket = TokenBucket.make<string>(freshNamespace(), 1, Rate.make(1, "1000 seconds"))
        const sliding = SlidingWindow.make<string>(freshNamespace(), 5, "1 hour")
        let name = "n0"
        for (let i = 0; new Set([bucket, sliding].map((l) => keySlot(keyOf(l, name)))).size < 2; i++) {
          name = `n${i}`
        }
        const store = yield* counting
        const run = decide([bucket, sliding], name, 1).pipe(Effect.provide(store.layer))
        expect(yield* run).toEqual({ allowed: true, admissions: [["Allowed", 0], ["Allowed", 4]] })
        store.calls.length = 0
        const denied = yield* run
        expect(denied.allowed).toBe(false)
        expect(denied.admissions[1]).toEqual(["Allowed", 4])
        expect(store.calls.sort()).toEqual(["Limits.acquire", "Limits.acquire", "Limits.refund"])
        expect(yield* sliding.peek(name)).toBe(4)
        // One entry left: the first request's; the refunded one is gone.
        const entries = (yield* command("LRANGE", keyOf(sliding, name), 0, -1)) as Array<string>
        expect(entries.length).toBe(2)
        expect(entries[0]).toBe("1")
      }).pipe(Effect.provide(ClusterLive))
  )
})

describe("Limits.check on a Redis Cluster", () => {
  plain.effect(
    "keys in several slots: one read-only call per slot, the waits in the limiters' order",
    () =>
      Effect.gen(function*() {
        const bucket = TokenBucket.make<string>(freshNamespace(), 1, Rate.make(1, "1000 seconds"))
        const window = FixedWindow.make<string>(freshNamespace(), 5, "1 hour")
        const other = TokenBucket.make<string>(freshNamespace(), 9, Rate.make(1, "1000 seconds"))
        let name = "n0"
        for (let i = 0; new Set([bucket, window, other].map((l) => keySlot(keyOf(l, name)))).size < 3; i++) {
          name = `n${i}`
        }
        yield* bucket.acquire(name, 1)
        const store = yield* counting
        const waits = yield* limits.check(group(bucket, window, other), name, 6).pipe(Effect.provide(store.layer))
        // The first call learns from CROSSSLOT that this is a cluster; then one call per slot.
        expect(store.calls).toEqual(["Limits.check", "Limits.check", "Limits.check", "Limits.check"])
        expect(waits[0]).toBe(-1)
        expect(waits[1]).toBe(-1)
        // Six tokens of nine: none spent, it would allow now.
        expect(waits[2]).toBe(0)
        store.calls.length = 0
        const again = yield* limits.check(group(bucket, window, other), name, 1).pipe(Effect.provide(store.layer))
        expect(store.calls).toEqual(["Limits.check", "Limits.check", "Limits.check"])
        expect(again[0]).toBeGreaterThan(990_000)
        expect(again[0]).toBeLessThanOrEqual(1_000_000)
        expect(again.slice(1)).toEqual([0, 0])
      }).pipe(Effect.provide(ClusterLive))
  )
})

const keyOf = (limiter: Limiter, name: string) =>
  `@@wakuwaku:${limiter[Limiter_.TypeId].kind}:${limiter.namespace}:${name}`

// The layered suites last: @effect/vitest's layer() would otherwise run the blocks after it inside its layer.
forEachBackend("Limits.acquire: several limiters, all or nothing", (it) => {
  it.effect("a request any limiter denies spends from none; the others report what they hold", () =>
    Effect.gen(function*() {
      const bucket = TokenBucket.make<string>(freshNamespace(), 3, Rate.make(1, "1000 seconds"))
      const window = FixedWindow.make<string>(freshNamespace(), 2, "1 hour")
      expect(yield* decide([bucket, window], "n", 1)).toEqual({
        allowed: true,
        admissions: [["Allowed", 2], ["Allowed", 1]]
      })
      expect(yield* decide([bucket, window], "n", 1)).toEqual({
        allowed: true,
        admissions: [["Allowed", 1], ["Allowed", 0]]
      })
      const denied = yield* decide([bucket, window], "n", 1)
      expect(denied.allowed).toBe(false)
      // The bucket would allow, and says what it holds; the window denies until it ends.
      expect(denied.admissions[0]).toEqual(["Allowed", 1])
      expect(denied.admissions[1]![0]).toBe("Denied")
      expect(denied.admissions[1]![1]).toBeGreaterThan(0)
      expect(denied.admissions[1]![1]).toBeLessThanOrEqual(3_600_000)
      expect([yield* bucket.peek("n"), yield* window.peek("n")]).toEqual([1, 0])
    }))

  it.effect("a sliding window decides with the others: all or nothing, and its denial names when it fits", () =>
    Effect.gen(function*() {
      const bucket = TokenBucket.make<string>(freshNamespace(), 3, Rate.make(1, "1000 seconds"))
      const fixed = FixedWindow.make<string>(freshNamespace(), 10, "1 hour")
      const sliding = SlidingWindow.make<string>(freshNamespace(), 2, "1 hour")
      const all = [bucket, fixed, sliding]
      expect(yield* decide(all, "n", 1)).toEqual({
        allowed: true,
        admissions: [["Allowed", 2], ["Allowed", 9], ["Allowed", 1]]
      })
      expect(yield* decide(all, "n", 1)).toEqual({
        allowed: true,
        admissions: [["Allowed", 1], ["Allowed", 8], ["Allowed", 0]]
      })
      const denied = yield* decide(all, "n", 1)
      expect(denied.allowed).toBe(false)
      expect(denied.admissions.slice(0, 2)).toEqual([["Allowed", 1], ["Allowed", 8]])
      expect(denied.admissions[2]![0]).toBe("Denied")
      expect(denied.admissions[2]![1]).toBeGreaterThan(3_590_000)
      expect(denied.admissions[2]![1]).toBeLessThanOrEqual(3_600_000)
      expect([yield* bucket.peek("n"), yield* fixed.peek("n"), yield* sliding.peek("n")]).toEqual([1, 8, 0])
      // The sliding window's quota is never above its limit: a cost of 3 can never pass.
      expect((yield* decide([bucket, sliding], "m", 3)).admissions[1]).toEqual(["Denied", null])
      expect(yield* expectTtls(`@@wakuwaku:SlidingWindow:${sliding.namespace}:*`)).toEqual([])
    }))

  it.effect("the other way round: the bucket denies, the window is not counted", () =>
    Effect.gen(function*() {
      const bucket = TokenBucket.make<string>(freshNamespace(), 1, Rate.make(1, "1000 seconds"))
      const window = FixedWindow.make<string>(freshNamespace(), 10, "1 hour")
      expect((yield* decide([window, bucket], "n", 1)).allowed).toBe(true)
      const denied = yield* decide([window, bucket], "n", 1)
      expect(denied.allowed).toBe(false)
      expect(denied.admissions[0]).toEqual(["Allowed", 9])
      // One token in 1000 s: a retry just under 1000 s.
      expect(denied.admissions[1]![0]).toBe("Denied")
      expect(denied.admissions[1]![1]).toBeGreaterThan(990_000)
      expect(denied.admissions[1]![1]).toBeLessThanOrEqual(1_000_000)
      expect([yield* window.peek("n"), yield* bucket.peek("n")]).toEqual([9, 0])
    }))

  it.effect("a cost above one limiter's quota can never pass: that one says never, nothing is spent", () =>
    Effect.gen(function*() {
      const bucket = TokenBucket.make<string>(freshNamespace(), 5, Rate.make(1, "1000 seconds"))
      const window = FixedWindow.make<string>(freshNamespace(), 3, "1 hour")
      expect(yield* decide([bucket, window], "n", 4)).toEqual({
        allowed: false,
        admissions: [["Allowed", 5], ["Denied", null]]
      })
      expect([yield* bucket.peek("n"), yield* window.peek("n")]).toEqual([5, 3])
      // A cost of 0 passes and spends nothing.
      expect(yield* decide([bucket, window], "n", 0)).toEqual({
        allowed: true,
        admissions: [["Allowed", 5], ["Allowed", 3]]
      })
    }))

  it.effect("a bad cost or name is InvalidInput, before anything is written", () =>
    Effect.gen(function*() {
      const bucket = TokenBucket.make<string>(freshNamespace(), 5, Rate.make(1, "1000 seconds"))
      const window = FixedWindow.make<string>(freshNamespace(), 3, "1 hour")
      const bad = yield* Effect.flip(limits.acquire(group(bucket, window), "n", 1.5))
      expect(bad).toEqual(
        new Redis.InvalidInput({
          operation: `TokenBucket(${bucket.namespace}) + FixedWindow(${window.namespace}).acquire`,
          argument: "cost",
          message: "cost must be a non-negative safe integer, got 1.5"
        })
      )
      const long = yield* Effect.flip(limits.acquire(group(bucket, window), "x".repeat(5000), 1))
      expect(long).toMatchObject({ _tag: "InvalidInput", argument: "name" })
      expect(yield* command("EXISTS", `@@wakuwaku:TokenBucket:${bucket.namespace}:n`)).toBe(0)
      expect(yield* command("EXISTS", `@@wakuwaku:FixedWindow:${window.namespace}:n`)).toBe(0)
    }))

  it.effect("Limits.check says when each would allow, writing nothing; a bad cost is InvalidInput", () =>
    Effect.gen(function*() {
      const bucket = TokenBucket.make<string>(freshNamespace(), 1, Rate.make(1, "1000 seconds"))
      const window = FixedWindow.make<string>(freshNamespace(), 1, "1 hour")
      const check = (name: string, cost: number) => limits.check(group(bucket, window), name, cost)
      const bucketKey = `@@wakuwaku:TokenBucket:${bucket.namespace}:n`
      const windowKey = `@@wakuwaku:FixedWindow:${window.namespace}:n`
      // Nothing held yet: both would allow, and the check creates no key.
      expect(yield* check("n", 1)).toEqual([0, 0])
      expect([yield* command("EXISTS", bucketKey), yield* command("EXISTS", windowKey)]).toEqual([0, 0])
      expect((yield* decide([bucket, window], "n", 1)).allowed).toBe(true)
      const before = [yield* command("GET", bucketKey), yield* command("GET", windowKey)]
      const [bucketWait, windowWait] = yield* check("n", 1)
      // One token in 1000 s: just under 1000 s; the window: until it ends, within the hour.
      expect(bucketWait).toBeGreaterThan(990_000)
      expect(bucketWait).toBeLessThanOrEqual(1_000_000)
      expect(windowWait).toBeGreaterThan(0)
      expect(windowWait).toBeLessThanOrEqual(3_600_000)
      // A cost above a quota: never.
      expect(yield* check("n", 2)).toEqual([-1, -1])
      expect([yield* command("GET", bucketKey), yield* command("GET", windowKey)]).toEqual(before)
      const bad = yield* Effect.flip(check("n", -1))
      expect(bad).toEqual(
        new Redis.InvalidInput({
          operation: `TokenBucket(${bucket.namespace}) + FixedWindow(${window.namespace}).check`,
          argument: "cost",
          message: "cost must be a non-negative safe integer, got -1"
        })
      )
    }))

  it.effect("one name and one cost per limiter: each keyed and spent its own way, still all or nothing", () =>
    Effect.gen(function*() {
      const bucket = TokenBucket.make<string>(freshNamespace(), 10, Rate.make(1, "1000 seconds"))
      const window = FixedWindow.make<string>(freshNamespace(), 3, "1 hour")
      const run = (names: ReadonlyArray<string>, costs: ReadonlyArray<number>) =>
        Effect.map(limits.acquire(group(bucket, window), names, costs), plainOutcome)
      expect(yield* run(["a", "k"], [4, 1])).toEqual({ allowed: true, admissions: [["Allowed", 6], ["Allowed", 2]] })
      expect(yield* run(["b", "k"], [4, 1])).toEqual({ allowed: true, admissions: [["Allowed", 6], ["Allowed", 1]] })
      // The window of "k" holds 1: a cost of 2 there is denied, and the bucket of "a" is not spent.
      const denied = yield* run(["a", "k"], [4, 2])
      expect(denied.allowed).toBe(false)
      expect(denied.admissions[0]).toEqual(["Allowed", 6])
      expect(denied.admissions[1]![0]).toBe("Denied")
      expect([yield* bucket.peek("a"), yield* bucket.peek("b"), yield* window.peek("k")]).toEqual([6, 6, 1])
      // Equal costs travel as one; check takes names and costs the same way.
      expect(yield* run(["a", "k"], [1, 1])).toEqual({ allowed: true, admissions: [["Allowed", 5], ["Allowed", 0]] })
      const [bucketWait, windowWait] = yield* limits.check(group(bucket, window), ["a", "k"], [6, 1])
      expect(bucketWait).toBeGreaterThan(990_000)
      expect(windowWait).toBeGreaterThan(0)
      expect(yield* limits.check(group(bucket, window), ["a", "x"], [5, 3])).toEqual([0, 0])
      const operation = `TokenBucket(${bucket.namespace}) + FixedWindow(${window.namespace}).acquire`
      expect(yield* Effect.flip(limits.acquire(group(bucket, window), ["a"], 1))).toEqual(
        new Redis.InvalidInput({ operation, argument: "name", message: "one name per limiter expected (2), got 1" })
      )
      expect(yield* Effect.flip(limits.acquire(group(bucket, window), "a", [1]))).toEqual(
        new Redis.InvalidInput({ operation, argument: "cost", message: "one cost per limiter expected (2), got 1" })
      )
      expect(yield* Effect.flip(limits.acquire(group(bucket, window), "a", [1, -1]))).toEqual(
        new Redis.InvalidInput({
          operation,
          argument: "cost",
          message: "cost must be a non-negative safe integer, got -1"
        })
      )
    }))

  it.effect("every key written has a TTL", () =>
    Effect.gen(function*() {
      const bucket = TokenBucket.make<string>(freshNamespace(), 2, Rate.make(1, "10 seconds"))
      const window = FixedWindow.make<string>(freshNamespace(), 2, "1 minute")
      for (let i = 0; i < 4; i++) yield* decide([bucket, window], `n${i % 2}`, 1)
      expect(yield* expectTtls(`@@wakuwaku:*:${bucket.namespace}:*`)).toEqual([])
      expect(yield* expectTtls(`@@wakuwaku:*:${window.namespace}:*`)).toEqual([])
    }))
})
