/**
 * The algebra of grants, as a property: fast-check builds random compositions of grant layers from a
 * small grammar (a grant of reads and writes, `ReadOnly`, `ReadWrite`, `Layer.merge`, `Layer.mergeAll`,
 * `Layer.provide`, `Layer.provideMerge`, and nested `Effect.provide`s), and for every composition the run
 * time must allow exactly the reads and writes the documented algebra (src/Capability.ts) gives: union
 * for merge, mergeAll, provideMerge and nesting; `self`'s alone for `Layer.provide(self, that)`; `"all"`
 * covers every kind.
 *
 * The probes are the structures' own operations (a cast erases their requirements, as only a cast can),
 * run against the throwaway server through `Redis.make`, a service that grants nothing by itself; the
 * custom entity `Other` has no operation, so it is probed through the check every operation runs. An
 * operation is allowed when it succeeds, refused when it dies naming exactly what it needed; anything
 * else fails the property. test/Capability.test-d.ts checks the same compositions' types.
 */
import { Cause, Effect, Exit, Layer, Option, Schema } from "effect"
import fc from "fast-check"
import { Redis as IORedis } from "ioredis"
import { afterAll, describe, expect, it } from "vitest"
import { Capability, FixedWindow, Lock, Pipe, Rate, Redis, RwLock, Semaphore, TokenBucket } from "wakuwaku"
import * as access from "../src/internal/redis.js"
import { freshNamespace, redisUrl } from "./support/redis.js"

const RUNS = Number(process.env["WAKUWAKU_ALGEBRA_RUNS"] ?? 150)

const Other = Capability.entity("Other")
const ENTITIES = {
  TokenBucket: TokenBucket.entity,
  FixedWindow: FixedWindow.entity,
  Lock: Lock.entity,
  RwLock: RwLock.entity,
  Semaphore: Semaphore.entity,
  Pipe: Pipe.entity,
  Other
} as const
type Kind = keyof typeof ENTITIES
const KINDS = Object.keys(ENTITIES) as ReadonlyArray<Kind>

// The grammar.
type Entities = "all" | ReadonlyArray<Kind>
type Composition =
  | { readonly _tag: "Grant"; readonly read: Entities; readonly write: Entities }
  | { readonly _tag: "ReadOnly" }
  | { readonly _tag: "ReadWrite" }
  | { readonly _tag: "Merge"; readonly left: Composition; readonly right: Composition }
  | { readonly _tag: "MergeAll"; readonly parts: ReadonlyArray<Composition> }
  | { readonly _tag: "Provide"; readonly self: Composition; readonly that: Composition }
  | { readonly _tag: "ProvideMerge"; readonly self: Composition; readonly that: Composition }

const entities: fc.Arbitrary<Entities> = fc.oneof(
  { weight: 1, arbitrary: fc.constant("all" as const) },
  { weight: 4, arbitrary: fc.subarray([...KINDS], { maxLength: 3 }) }
)

const { composition } = fc.letrec<{ composition: Composition }>((tie) => ({
  composition: fc.oneof(
    { depthSize: "small", withCrossShrink: true },
    fc.record({ _tag: fc.constant("Grant" as const), read: entities, write: entities }),
    fc.constant({ _tag: "ReadOnly" as const }),
    fc.constant({ _tag: "ReadWrite" as const }),
    fc.record({ _tag: fc.constant("Merge" as const), left: tie("composition"), right: tie("composition") }),
    fc.record({
      _tag: fc.constant("MergeAll" as const),
      parts: fc.array(tie("composition"), { minLength: 1, maxLength: 3 })
    }),
    fc.record({ _tag: fc.constant("Provide" as const), self: tie("composition"), that: tie("composition") }),
    fc.record({ _tag: fc.constant("ProvideMerge" as const), self: tie("composition"), that: tie("composition") })
  )
}))

/** A program's grants: the compositions provided to it, innermost first. */
const program = fc.array(composition, { minLength: 1, maxLength: 3 })

// The documented algebra: what a composition grants.
interface Grants {
  readonly read: "all" | ReadonlySet<Kind>
  readonly write: "all" | ReadonlySet<Kind>
}
const none: Grants = { read: new Set(), write: new Set() }
const unionOf = (a: "all" | ReadonlySet<Kind>, b: "all" | ReadonlySet<Kind>) =>
  a === "all" || b === "all" ? "all" : new Set([...a, ...b])
const union = (a: Grants, b: Grants): Grants => ({ read: unionOf(a.read, b.read), write: unionOf(a.write, b.write) })
const setOf = (e: Entities) => (e === "all" ? "all" : new Set(e))

const model = (c: Composition): Grants => {
  switch (c._tag) {
    case "Grant":
      return { read: setOf(c.read), write: setOf(c.write) }
    case "ReadOnly":
      return { read: "all", write: new Set() }
    case "ReadWrite":
      return { read: "all", write: "all" }
    case "Merge":
      return union(model(c.left), model(c.right))
    case "MergeAll":
      return c.parts.map(model).reduce(union, none)
    case "Provide":
      return model(c.self)
    case "ProvideMerge":
      return union(model(c.self), model(c.that))
  }
}

const allowedBy = (grants: Grants, verb: "read" | "write", kind: Kind) => {
  const set = grants[verb]
  return set === "all" || set.has(kind)
}

// The same compositions, built with the library and Effect's Layer.
type Grant = Layer.Layer<never>
const entitiesOf = (e: Entities) => (e === "all" ? "all" : e.map((kind) => ENTITIES[kind]))
const build = (c: Composition): Grant => {
  switch (c._tag) {
    case "Grant":
      return Capability.layer({ read: entitiesOf(c.read), write: entitiesOf(c.write) }) as Layer.Layer<unknown> as Grant
    case "ReadOnly":
      return Capability.ReadOnly as Layer.Layer<unknown> as Grant
    case "ReadWrite":
      return Capability.ReadWrite as Layer.Layer<unknown> as Grant
    case "Merge":
      return Layer.merge(build(c.left), build(c.right))
    case "MergeAll":
      return Layer.mergeAll(...(c.parts.map(build) as [Grant, ...Array<Grant>]))
    case "Provide":
      return build(c.self).pipe(Layer.provide(build(c.that)))
    case "ProvideMerge":
      return build(c.self).pipe(Layer.provideMerge(build(c.that)))
  }
}

// The probes: each operation, its requirements erased by a cast.
const namespace = freshNamespace("alg")
const BUCKET = TokenBucket.make<string>(namespace, 5, Rate.perSecond(1))
const WINDOW = FixedWindow.make<string>(namespace, 5, "1 second")
const LOCK = Lock.make<string>(namespace, "1 second")
const RW = RwLock.make<string>(namespace, "1 second")
const SEM = Semaphore.make<string>(namespace, 2, "1 second")
const PIPE = Pipe.make<string, string>(namespace, Schema.String, "1 second")

type Probe = Effect.Effect<unknown, unknown, Redis.Redis>
const erase = (effect: Effect.Effect<unknown, unknown, unknown>) => effect as Probe
let n = 0
const fresh = () => `p${n++}`
const probes: ReadonlyArray<{ readonly verb: "read" | "write"; readonly kind: Kind; readonly run: () => Probe }> = [
  { verb: "read", kind: "TokenBucket", run: () => erase(BUCKET.peek(fresh())) },
  { verb: "write", kind: "TokenBucket", run: () => erase(BUCKET.acquire(fresh(), 1)) },
  { verb: "read", kind: "FixedWindow", run: () => erase(WINDOW.peek(fresh())) },
  { verb: "write", kind: "FixedWindow", run: () => erase(WINDOW.acquire(fresh(), 1)) },
  {
    verb: "write",
    kind: "Lock",
    run: () =>
      erase(
        Effect.flatMap(LOCK.tryLock(fresh()), Option.match({ onNone: () => Effect.void, onSome: (t) => t.release }))
      )
  },
  {
    verb: "write",
    kind: "RwLock",
    run: () =>
      erase(Effect.flatMap(RW.tryRead(fresh()), Option.match({ onNone: () => Effect.void, onSome: (t) => t.release })))
  },
  {
    verb: "write",
    kind: "Semaphore",
    run: () =>
      erase(
        Effect.flatMap(SEM.tryAcquire(fresh()), Option.match({ onNone: () => Effect.void, onSome: SEM.release }))
      )
  },
  { verb: "write", kind: "Pipe", run: () => erase(PIPE.send(fresh(), "m")) },
  { verb: "read", kind: "Other", run: () => erase(access.read(Other, () => Effect.void)) },
  { verb: "write", kind: "Other", run: () => erase(access.write(Other, () => Effect.void)) }
]

const client = new IORedis(redisUrl, { lazyConnect: false })
/** The service alone: it grants nothing. */
const service = Layer.succeed(Redis.Redis, Redis.make(client))
afterAll(() => client.quit())

/** "allowed", "refused" (died naming exactly what was needed), or what else happened. */
const outcome = async (probe: (typeof probes)[number], grants: ReadonlyArray<Composition>) => {
  let effect = probe.run()
  for (const c of grants) effect = effect.pipe(Effect.provide(build(c)))
  const exit = await Effect.runPromiseExit(Effect.provide(effect, service))
  if (Exit.isSuccess(exit)) return "allowed"
  const defect = Cause.dieOption(exit.cause)
  const needed = `needs to ${probe.verb} ${probe.kind}, but the capability in scope does not grant it`
  if (Option.isSome(defect) && String((defect.value as Error).message).includes(needed)) return "refused"
  return `unexpected: ${Cause.pretty(exit.cause)}`
}

describe("the algebra of grants", () => {
  it("the run time allows exactly what the algebra grants, for random compositions", async () => {
    await fc.assert(
      fc.asyncProperty(program, async (grants) => {
        const expected = grants.map(model).reduce(union, none)
        for (const probe of probes) {
          const want = allowedBy(expected, probe.verb, probe.kind) ? "allowed" : "refused"
          const got = await outcome(probe, grants)
          if (got !== want) {
            throw new Error(`${probe.verb} ${probe.kind}: expected ${want}, got ${got}, for ${JSON.stringify(grants)}`)
          }
        }
      }),
      { numRuns: RUNS }
    )
  }, 120_000)

  it("the model itself: siblings merge, provide keeps self, all covers custom kinds", () => {
    const tb = { _tag: "Grant", read: [], write: ["TokenBucket"] } as const
    const lock = { _tag: "Grant", read: [], write: ["Lock"] } as const
    expect(allowedBy(model({ _tag: "Merge", left: tb, right: lock }), "write", "TokenBucket")).toBe(true)
    expect(allowedBy(model({ _tag: "Provide", self: lock, that: tb }), "write", "TokenBucket")).toBe(false)
    expect(allowedBy(model({ _tag: "ProvideMerge", self: lock, that: tb }), "write", "TokenBucket")).toBe(true)
    expect(allowedBy(model({ _tag: "ReadWrite" }), "write", "Other")).toBe(true)
    expect(allowedBy(model({ _tag: "ReadOnly" }), "write", "Other")).toBe(false)
  })
})
