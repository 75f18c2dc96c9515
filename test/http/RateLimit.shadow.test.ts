/**
 * Shadow limits on `RateLimit.middleware` (issue 27 §1): a limit decided in the same store call, never
 * denying, named nowhere in the response, counted and set on the span when it would deny.
 *
 * - A differential on twin embedded stores, on a clock the test moves: random requests and costs against a
 *   limit of [enforced] and one of [enforced, shadow], with denial memory, give the same verdicts, the same
 *   header fields and problem bodies, the same recalls from memory, and the same stored state.
 * - The middleware on every backend: the fields list the enforced policies only; a would-be denial is a
 *   `WouldDeny` on the span and in the counter; shadow limits alone never deny.
 */
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import { describe, expect, it as plain } from "@effect/vitest"
import { Clock, Effect, Layer, Metric } from "effect"
import fc from "fast-check"
import { FixedWindow, Limits, Rate, Redis, SlidingWindow, TokenBucket } from "wakuwaku"
import { RateLimit } from "wakuwaku/http"
import * as decision from "../../src/internal/http/decision.js"
import * as render from "../../src/internal/http/render.js"
import type * as limits from "../../src/internal/limits.js"
import { command, forEachBackend } from "../support/backends.js"
import { fields, get, serve } from "../support/http.js"
import { freshNamespace } from "../support/redis.js"

const hello = Effect.succeed(HttpServerResponse.text("hello"))

type Limiter = TokenBucket.TokenBucket<string> | FixedWindow.FixedWindow<string> | SlidingWindow.SlidingWindow<string>

const keyOf = (limiter: Limiter, name: string) =>
  (limiter as unknown as limits.AnyLimiter).keyOf("acquire", name) as string

const wouldDeny = (policy: string) =>
  Effect.map(Metric.value(Limits.wouldDenyCounter.pipe(Metric.tagged("policy", policy))), (s) => s.count)

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

/** A verdict as the wire sees it: what the front ends render, all but `wouldDeny`. */
const wire = (field: string, verdict: decision.Verdict) => {
  const { wouldDeny: _, ...rest } = verdict
  return { field, rest, refusal: verdict.pass ? undefined : render.refusal(field, verdict) }
}

describe("RateLimit: the enforced verdict is what it is without the shadow (differential, twin stores)", () => {
  plain(
    "random requests and costs against [enforced] and [enforced, shadow]: the same verdicts, fields, state",
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
              cost: fc.integer({ min: 0, max: 5 }),
              wait: fc.integer({ min: 0, max: 8 })
            }),
            { minLength: 1, maxLength: 25 }
          ),
          async (enforcedSpecs, [shadowKind, shadowQuota], ops) => {
            const enforced = enforcedSpecs.map(([kind, quota], i) => make(kind, `e${i}`, quota))
            const strict = make(shadowKind, "shadow", shadowQuota)
            const one = (enforced.length === 1 ? enforced[0]! : enforced) as RateLimit.Limiters
            const without = decision.make<unknown>({ limiter: one, onStoreFailure: "fail-closed", rememberDenials: 8 })
            const withShadow = decision.make<unknown>({
              limiter: [
                ...enforced,
                RateLimit.shadow(strict as RateLimit.Limiter<unknown>)
              ] as unknown as RateLimit.Limiters,
              onStoreFailure: "fail-closed",
              rememberDenials: 8
            })
            const { advance, clock } = manualClock()
            await Effect.gen(function*() {
              const a = yield* Layer.build(Redis.layerMemory())
              const b = yield* Layer.build(Redis.layerMemory())
              for (const op of ops) {
                advance(op.wait * 250_000)
                const recalledA = without.recall(op.name, op.cost)
                const recalledB = withShadow.recall(op.name, op.cost)
                expect(recalledB === undefined).toBe(recalledA === undefined)
                if (recalledA !== undefined) {
                  expect(wire(withShadow.field, recalledB!)).toEqual(wire(without.field, recalledA))
                  continue
                }
                const va = yield* without.decide(op.name, op.cost).pipe(Effect.provide(a))
                const vb = yield* withShadow.decide(op.name, op.cost).pipe(Effect.provide(b))
                expect(wire(withShadow.field, vb)).toEqual(wire(without.field, va))
                if (!vb.pass) expect(vb.wouldDeny).toEqual([])
                for (const l of enforced) {
                  for (const name of ["a", "b"]) {
                    expect(yield* stored(keyOf(l, name)).pipe(Effect.provide(b))).toEqual(
                      yield* stored(keyOf(l, name)).pipe(Effect.provide(a))
                    )
                  }
                }
              }
              // The shadow's denials never entered the memory: only the enforced limiters have one.
              expect(withShadow.denials?.size ?? 0).toBe(without.denials?.size ?? 0)
            }).pipe(
              Effect.scoped,
              Effect.withClock(clock),
              Effect.runPromise as (e: Effect.Effect<void, unknown, unknown>) => Promise<void>
            )
          }
        ),
        { numRuns: 150 }
      )
    }
  )
})

forEachBackend("RateLimit.middleware with a shadow limit", (it) => {
  it.scoped("the fields name the enforced policy only; the shadow never denies and is counted when it would", () =>
    Effect.gen(function*() {
      const logins = TokenBucket.make<string>(freshNamespace("login"), 3, Rate.make(1, "1000 seconds"))
      const strict = FixedWindow.make<string>(freshNamespace("strict"), 1, "1 hour")
      const { v4 } = yield* serve(
        RateLimit.middleware({
          limiter: [logins, RateLimit.shadow(strict)],
          onStoreFailure: "fail-closed",
          rememberDenials: 10
        })(hello)
      )
      const before = yield* wouldDeny(strict.namespace)
      const policy = `"${logins.namespace}";q=3;w=3000`
      const replies = []
      for (let i = 0; i < 4; i++) replies.push(fields(yield* get(v4)))
      expect(replies.map((r) => [r.status, r.policy, r.limit])).toEqual([
        [200, policy, `"${logins.namespace}";r=2;t=1000`],
        [200, policy, `"${logins.namespace}";r=1;t=2000`],
        [200, policy, `"${logins.namespace}";r=0;t=3000`],
        [429, policy, `"${logins.namespace}";r=0;t=1000`]
      ])
      // The 2nd and 3rd requests would have been denied by the strict window; the 4th was denied anyway.
      expect(yield* wouldDeny(strict.namespace)).toBe(before + 2)
      expect([yield* logins.peek("127.0.0.1"), yield* strict.peek("127.0.0.1")]).toEqual([0, 0])
    }))

  it.scoped("shadow limits alone: every request passes, with no fields", () =>
    Effect.gen(function*() {
      const strict = TokenBucket.make<string>(freshNamespace("strict"), 1, Rate.make(1, "1000 seconds"))
      const { v4 } = yield* serve(
        RateLimit.middleware({ limiter: RateLimit.shadow(strict), onStoreFailure: "fail-closed" })(hello)
      )
      const before = yield* wouldDeny(strict.namespace)
      for (let i = 0; i < 3; i++) {
        expect(fields(yield* get(v4))).toEqual({
          status: 200,
          policy: undefined,
          limit: undefined,
          retryAfter: undefined
        })
      }
      expect(yield* wouldDeny(strict.namespace)).toBe(before + 2)
    }))

  it.scoped("with choose: a shadow limit in the chosen list", () =>
    Effect.gen(function*() {
      const plan = TokenBucket.make<string>(freshNamespace("plan"), 5, Rate.make(1, "1000 seconds"))
      const strict = TokenBucket.make<string>(freshNamespace("strict"), 1, Rate.make(1, "1000 seconds"))
      const chosen = [plan, RateLimit.shadow(strict)] as const
      const { v4 } = yield* serve(
        RateLimit.middleware({ choose: () => ({ limiter: chosen, key: "u1" }), onStoreFailure: "fail-closed" })(hello)
      )
      const before = yield* wouldDeny(strict.namespace)
      expect(fields(yield* get(v4)).limit).toBe(`"${plan.namespace}";r=4;t=1000`)
      expect(fields(yield* get(v4)).limit).toBe(`"${plan.namespace}";r=3;t=2000`)
      expect(yield* wouldDeny(strict.namespace)).toBe(before + 1)
    }))
})
