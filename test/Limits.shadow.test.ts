/**
 * Shadow limits (issue 27 §1) in `Limits.acquire`: a limit decided in the same store call as the enforced
 * ones, spending its own state when it would allow, never denying.
 *
 * - Exact outcomes on every backend (one Redis, the embedded store, a Cluster with keys in several slots):
 *   a would-be denial is a `WouldDeny`, counted, and spends nothing; an enforced denial spends nothing
 *   anywhere; shadow limits alone always allow; bad lists are `InvalidInput`.
 * - One store call for one enforced limit and one shadow limit.
 * - A differential on twin embedded stores, on a clock the test moves: random requests against [enforced]
 *   and [enforced, shadow] give the same enforced decision, the same admissions and the same stored state.
 */
import { describe, expect, it as plain } from "@effect/vitest"
import keySlot from "cluster-key-slot"
import { Clock, Duration, Effect, Layer, Metric, Option } from "effect"
import fc from "fast-check"
import { FixedWindow, Limits, Rate, Redis, SlidingWindow, TokenBucket } from "wakuwaku"
import type * as limits from "../src/internal/limits.js"
import { command, forEachBackend } from "./support/backends.js"
import { ClusterLive, freshNamespace } from "./support/redis.js"

type Limiter = TokenBucket.TokenBucket<string> | FixedWindow.FixedWindow<string> | SlidingWindow.SlidingWindow<string>

const keyOf = (limiter: Limiter, name: string) =>
  (limiter as unknown as limits.AnyLimiter).keyOf("acquire", name) as string

const wouldDenyCount = (policy: string) =>
  Effect.map(Metric.value(Limits.wouldDenyCounter.pipe(Metric.tagged("policy", policy))), (s) => s.count)

const plainAdmissions = (decision: Limits.Decision) =>
  (decision.admissions as ReadonlyArray<TokenBucket.Admission>).map((a) =>
    a._tag === "Allowed"
      ? ["Allowed", a.remaining] as const
      : ["Denied", Option.match(a.retryAfter, { onNone: () => null, onSome: Duration.toMillis })] as const
  )

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

forEachBackend("Limits.acquire with shadow limits", (it, backend) => {
  it.effect("the enforced limit allows, the shadow would deny: allowed, a WouldDeny counted, the shadow unspent", () =>
    Effect.gen(function*() {
      const enforced = TokenBucket.make<string>(freshNamespace("login"), 10, Rate.make(1, "1000 seconds"))
      const strict = FixedWindow.make<string>(freshNamespace("strict"), 2, "1 hour")
      const list = [enforced, Limits.shadow(strict)] as const
      // Twice within the strict window: both allowed by both, both spent from both.
      for (const left of [1, 0]) {
        const d = yield* Limits.acquire(list, "ann", 1)
        expect(d.allowed).toBe(true)
        expect(d.wouldDeny).toEqual([])
        expect(plainAdmissions(d)).toEqual([["Allowed", 8 + left], ["Allowed", left]])
      }
      const before = yield* wouldDenyCount(strict.namespace)
      const third = yield* Limits.acquire(list, "ann", 1)
      expect(third.allowed).toBe(true)
      expect(plainAdmissions(third)[0]).toEqual(["Allowed", 7])
      expect(third.wouldDeny).toHaveLength(1)
      const [would] = third.wouldDeny
      expect([would!._tag, would!.limit, would!.kind, would!.name]).toEqual([
        "WouldDeny",
        strict.namespace,
        "FixedWindow",
        "ann"
      ])
      // Its retry is the window's end: within the hour.
      const retry = Duration.toMillis(Option.getOrThrow(would!.retryAfter))
      expect(retry).toBeGreaterThan(0)
      expect(retry).toBeLessThanOrEqual(3_600_000)
      expect(yield* wouldDenyCount(strict.namespace)).toBe(before + 1)
      // The shadow spent nothing on the request it would have denied; the enforced one spent.
      expect([yield* enforced.peek("ann"), yield* strict.peek("ann")]).toEqual([7, 0])
      // A cost above the shadow's quota: it would never allow (retry None); the enforced one allows.
      const big = yield* Limits.acquire(list, "bob", 5)
      expect(big.allowed).toBe(true)
      expect(big.wouldDeny.map((w) => [w.limit, Option.isNone(w.retryAfter)])).toEqual([[strict.namespace, true]])
      expect([yield* enforced.peek("bob"), yield* strict.peek("bob")]).toEqual([5, 2])
    }))

  it.effect("a would-be denial is set on the current span: wakuwaku.shadow.would_deny names the policies", () =>
    Effect.gen(function*() {
      const enforced = TokenBucket.make<string>(freshNamespace("e"), 5, Rate.make(1, "1000 seconds"))
      const strict = TokenBucket.make<string>(freshNamespace("s"), 1, Rate.make(1, "1000 seconds"))
      const list = [enforced, Limits.shadow(strict)] as const
      const attribute = <R>(effect: Effect.Effect<unknown, unknown, R>) =>
        Effect.flatMap(effect, () =>
          Effect.map(Effect.currentSpan, (span) =>
            span.attributes.get(
              "wakuwaku.shadow.would_deny"
            ))).pipe(Effect.withSpan("request"))
      expect(yield* attribute(Limits.acquire(list, "n"))).toBeUndefined()
      expect(yield* attribute(Limits.acquire(list, "n"))).toEqual([strict.namespace])
    }))

  it.effect("the enforced limit denies: nothing is spent anywhere, and the shadow says nothing", () =>
    Effect.gen(function*() {
      const enforced = TokenBucket.make<string>(freshNamespace("tight"), 1, Rate.make(1, "1000 seconds"))
      const loose = TokenBucket.make<string>(freshNamespace("loose"), 5, Rate.make(1, "1000 seconds"))
      const list = [Limits.shadow(loose), enforced] as const
      expect((yield* Limits.acquire(list, "n", 1)).allowed).toBe(true)
      const denied = yield* Limits.acquire(list, "n", 1)
      expect(denied.allowed).toBe(false)
      expect(denied.wouldDeny).toEqual([])
      expect(plainAdmissions(denied)[1]![0]).toBe("Denied")
      // The shadow would allow: it tells what it holds, unspent.
      expect(plainAdmissions(denied)[0]).toEqual(["Allowed", 4])
      expect([yield* loose.peek("n"), yield* enforced.peek("n")]).toEqual([4, 0])
    }))

  it.effect("shadow limits alone: every request is allowed; each spends while it would allow", () =>
    Effect.gen(function*() {
      const a = TokenBucket.make<string>(freshNamespace("a"), 2, Rate.make(1, "1000 seconds"))
      const b = SlidingWindow.make<string>(freshNamespace("b"), 1, "1 hour")
      const list = [Limits.shadow(a), Limits.shadow(b)] as const
      const seen = []
      for (let i = 0; i < 3; i++) {
        const d = yield* Limits.acquire(list, "n")
        seen.push([d.allowed, d.wouldDeny.map((w) => w.limit)])
      }
      expect(seen).toEqual([[true, []], [true, [b.namespace]], [true, [a.namespace, b.namespace]]])
      expect([yield* a.peek("n"), yield* b.peek("n")]).toEqual([0, 0])
    }))

  it.effect("bad lists are InvalidInput, before anything is written", () =>
    Effect.gen(function*() {
      const ns = freshNamespace("twin")
      const bucket = TokenBucket.make<string>(ns, 2, Rate.make(1, "1000 seconds"))
      const same = TokenBucket.make<string>(ns, 1, Rate.make(1, "1000 seconds"))
      const twice = yield* Effect.flip(Limits.acquire([bucket, Limits.shadow(same)], "n"))
      expect([twice._tag, (twice as Redis.InvalidInput).argument, twice.message]).toEqual([
        "InvalidInput",
        "limits",
        `wakuwaku: TokenBucket(${ns}) is listed twice among the limits of one request (they would share its keys)`
      ])
      const empty = yield* Effect.flip(Limits.acquire([] as never, "n"))
      expect(empty.message).toBe("limits must be a non-empty list of limiters (and shadow limits)")
      const strange = yield* Effect.flip(Limits.acquire([bucket, { namespace: "x" }] as never, "n"))
      expect(strange.message).toContain("the one at index 1 is not")
      const cost = yield* Effect.flip(
        Limits.acquire([bucket, Limits.shadow(FixedWindow.make("w", 1, "1 hour"))], "n", -1)
      )
      expect([cost._tag, (cost as Redis.InvalidInput).argument]).toEqual(["InvalidInput", "cost"])
      expect(yield* command("EXISTS", keyOf(bucket, "n"))).toBe(0)
      expect(() => Limits.shadow({ namespace: "x" } as never)).toThrow(TypeError)
    }))

  it.effect("one enforced limit and one shadow limit: one store call", () =>
    Effect.gen(function*() {
      const enforced = TokenBucket.make<string>(freshNamespace("e"), 5, Rate.make(1, "1000 seconds"))
      const strict = TokenBucket.make<string>(freshNamespace("s"), 1, Rate.make(1, "1000 seconds"))
      const store = yield* counting
      // On a cluster, one hash tag puts both keys in one slot (without it they are split, per slot).
      const name = backend.name === "cluster" ? "{u}" : "u"
      const run = Limits.acquire([enforced, Limits.shadow(strict)], name).pipe(Effect.provide(store.layer))
      yield* run
      expect((yield* run).wouldDeny).toHaveLength(1)
      expect(store.calls).toEqual(["Limits.acquire", "Limits.acquire"])
    }))
})

describe("Limits.acquire with shadow limits on a Redis Cluster: the per-slot rules", () => {
  plain.effect(
    "keys in several slots: a shadow's group that spent is refunded when the enforced group denies",
    () =>
      Effect.gen(function*() {
        const enforced = TokenBucket.make<string>(freshNamespace("e"), 1, Rate.make(1, "1000 seconds"))
        const strict = FixedWindow.make<string>(freshNamespace("s"), 5, "1 hour")
        let name = "n0"
        for (let i = 0; keySlot(keyOf(enforced, name)) === keySlot(keyOf(strict, name)); i++) name = `n${i}`
        const store = yield* counting
        const run = Limits.acquire([enforced, Limits.shadow(strict)], name).pipe(Effect.provide(store.layer))
        expect((yield* run).allowed).toBe(true)
        expect([yield* enforced.peek(name), yield* strict.peek(name)]).toEqual([0, 4])
        store.calls.length = 0
        const denied = yield* run
        expect(denied.allowed).toBe(false)
        expect(denied.wouldDeny).toEqual([])
        // The shadow's group allowed and spent, then was refunded: nothing is spent anywhere.
        expect(store.calls.sort()).toEqual(["Limits.acquire", "Limits.acquire", "Limits.refund"])
        expect([yield* enforced.peek(name), yield* strict.peek(name)]).toEqual([0, 4])
        expect(plainAdmissions(denied)[1]).toEqual(["Allowed", 4])
      }).pipe(Effect.provide(ClusterLive))
  )

  plain.effect(
    "keys in several slots: a shadow that would deny spends nothing and needs no refund",
    () =>
      Effect.gen(function*() {
        const enforced = TokenBucket.make<string>(freshNamespace("e"), 9, Rate.make(1, "1000 seconds"))
        const strict = TokenBucket.make<string>(freshNamespace("s"), 1, Rate.make(1, "1000 seconds"))
        const blocker = TokenBucket.make<string>(freshNamespace("b"), 1, Rate.make(1, "1000 seconds"))
        let name = "m0"
        for (let i = 0; new Set([enforced, strict, blocker].map((l) => keySlot(keyOf(l, name)))).size < 3; i++) {
          name = `m${i}`
        }
        const store = yield* counting
        const run = Limits.acquire([enforced, Limits.shadow(strict), blocker], name).pipe(Effect.provide(store.layer))
        yield* run
        store.calls.length = 0
        // The blocker denies: the enforced group that spent is refunded; the shadow, which would deny, spent nothing.
        const denied = yield* run
        expect(denied.allowed).toBe(false)
        expect(store.calls.sort()).toEqual(["Limits.acquire", "Limits.acquire", "Limits.acquire", "Limits.refund"])
        expect([yield* enforced.peek(name), yield* strict.peek(name), yield* blocker.peek(name)]).toEqual([8, 0, 0])
      }).pipe(Effect.provide(ClusterLive))
  )
})

/** A clock the test moves (µs). */
const manualClock = () => {
  let nanos = 0n
  const clock: Clock.Clock = {
    [Clock.ClockTypeId]: Clock.ClockTypeId,
    unsafeCurrentTimeMillis: () => Number(nanos / 1_000_000n),
    unsafeCurrentTimeNanos: () => nanos,
    currentTimeMillis: Effect.sync(() => Number(nanos / 1_000_000n)),
    currentTimeNanos: Effect.sync(() => nanos),
    sleep: () => Effect.never
  }
  return { clock, advance: (micros: number) => (nanos += BigInt(micros) * 1000n) }
}

const stored = (key: string) =>
  Effect.flatMap(command("TYPE", key), (type) =>
    type === "list"
      ? command("LRANGE", key, 0, -1)
      : type === "none"
      ? Effect.succeed(null)
      : Effect.zip(command("GET", key), command("PTTL", key)))

describe("Limits.acquire: the enforced decision is what it is without the shadow (differential, twin stores)", () => {
  plain(
    "random requests against [enforced] and [enforced, shadow]: the same decisions, admissions, state",
    async () => {
      const kinds = fc.constantFrom("T", "W", "S")
      const make = (kind: string, ns: string, quota: number): Limiter =>
        kind === "T"
          ? TokenBucket.make<string>(ns, quota, Rate.make(1, "2 seconds"))
          : kind === "W"
          ? FixedWindow.make<string>(ns, quota, "3 seconds")
          : SlidingWindow.make<string>(ns, quota, "3 seconds")
      await fc.assert(
        fc.asyncProperty(
          fc.array(fc.tuple(kinds, fc.integer({ min: 1, max: 4 })), { minLength: 1, maxLength: 2 }),
          fc.tuple(kinds, fc.integer({ min: 1, max: 3 })),
          fc.array(
            fc.record({
              name: fc.constantFrom("a", "b"),
              cost: fc.integer({ min: 0, max: 4 }),
              wait: fc.integer({ min: 0, max: 8 })
            }),
            { minLength: 1, maxLength: 25 }
          ),
          async (enforcedSpecs, [shadowKind, shadowQuota], ops) => {
            const enforced = enforcedSpecs.map(([kind, quota], i) => make(kind, `e${i}`, quota))
            const strict = make(shadowKind, "shadow", shadowQuota)
            const [first, ...rest] = enforced
            const { advance, clock } = manualClock()
            await Effect.gen(function*() {
              const storeA = Redis.layerMemory()
              const storeB = Redis.layerMemory()
              const a = yield* Layer.build(storeA)
              const b = yield* Layer.build(storeB)
              for (const op of ops) {
                advance(op.wait * 250_000)
                const without = yield* Limits.acquire([first!, ...rest], op.name, op.cost).pipe(Effect.provide(a))
                const withShadow = yield* Limits.acquire([first!, ...rest, Limits.shadow(strict)], op.name, op.cost)
                  .pipe(Effect.provide(b))
                expect(withShadow.allowed).toBe(without.allowed)
                expect(plainAdmissions(withShadow).slice(0, enforced.length)).toEqual(plainAdmissions(without))
                if (!withShadow.allowed) expect(withShadow.wouldDeny).toEqual([])
                for (const l of enforced) {
                  for (const name of ["a", "b"]) {
                    expect(yield* stored(keyOf(l, name)).pipe(Effect.provide(b))).toEqual(
                      yield* stored(keyOf(l, name)).pipe(Effect.provide(a))
                    )
                  }
                }
              }
            }).pipe(Effect.scoped, Effect.withClock(clock), Effect.runPromise)
          }
        ),
        { numRuns: 150 }
      )
    }
  )
})
