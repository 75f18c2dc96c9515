/**
 * The algebra of grants, as a property: fast-check builds random compositions of grant layers from a
 * small grammar (a grant of reads and writes, `ReadOnly`, `ReadWrite`, `Layer.merge`, `Layer.mergeAll`,
 * `Layer.provide`, `Layer.provideMerge`, and nested `Effect.provide`s), and for every composition the run
 * time must allow exactly the reads and writes the documented algebra (src/Capability.ts) gives: union
 * for merge, mergeAll, provideMerge and nesting; `self`'s alone for `Layer.provide(self, that)`; `"all"`
 * covers every kind. A refusal must be the exact defect, naming what the scope grants.
 *
 * A grant's lists come in the forms a program writes: `"all"` or a tuple, whose type says exactly what
 * it holds; a conditional (`cond ? [A, B] : [A]`, a union of tuples); an array type; a tuple with
 * entities typed with a union of kinds. At run time each is one concrete list, and the run time grants
 * exactly that list. Its type may grant less (for a conditional, what every branch grants), never more:
 * everything the type grants must be allowed at run time. test/Capability.test-d.ts pins each form's type.
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
/** A grant list as a program writes it: one concrete list at run time, perhaps less to the compiler. */
type List =
  /** `"all"`, or a tuple (inline, or `as const`): its type says exactly what it holds. */
  | { readonly _tag: "Exact"; readonly list: Entities }
  /** An array type (`const list = [A]`, `ReadonlyArray<A>`), which may be empty: its type grants nothing. */
  | { readonly _tag: "Widened"; readonly list: ReadonlyArray<Kind> }
  /** A tuple whose blurred elements are typed with a union of kinds, or `string`: those grant nothing. */
  | { readonly _tag: "Blurred"; readonly list: ReadonlyArray<{ readonly kind: Kind; readonly blurred: boolean }> }
  /** A conditional, `cond ? [A, B] : [A]`: the union of its branches' types; the run time takes one. */
  | { readonly _tag: "OneOf"; readonly options: ReadonlyArray<List>; readonly taken: number }
type Composition =
  | { readonly _tag: "Grant"; readonly read: List; readonly write: List }
  | { readonly _tag: "ReadOnly" }
  | { readonly _tag: "ReadWrite" }
  | { readonly _tag: "Merge"; readonly left: Composition; readonly right: Composition }
  | { readonly _tag: "MergeAll"; readonly parts: ReadonlyArray<Composition> }
  | { readonly _tag: "Provide"; readonly self: Composition; readonly that: Composition }
  | { readonly _tag: "ProvideMerge"; readonly self: Composition; readonly that: Composition }

const exact = (list: Entities): List => ({ _tag: "Exact", list })
const kinds = fc.subarray([...KINDS], { maxLength: 3 })
const entities: fc.Arbitrary<Entities> = fc.oneof(
  { weight: 1, arbitrary: fc.constant("all" as const) },
  { weight: 4, arbitrary: kinds }
)
const plainList: fc.Arbitrary<List> = fc.oneof(
  { weight: 4, arbitrary: fc.record({ _tag: fc.constant("Exact" as const), list: entities }) },
  { weight: 1, arbitrary: fc.record({ _tag: fc.constant("Widened" as const), list: kinds }) },
  {
    weight: 1,
    arbitrary: fc.record({
      _tag: fc.constant("Blurred" as const),
      list: kinds.chain((ks) =>
        fc.tuple(...ks.map((kind) => fc.record({ kind: fc.constant(kind), blurred: fc.boolean() })))
      )
    })
  }
)
const list: fc.Arbitrary<List> = fc.oneof(
  { weight: 3, arbitrary: plainList },
  {
    weight: 2,
    arbitrary: fc.record({
      _tag: fc.constant("OneOf" as const),
      options: fc.array(plainList, { minLength: 2, maxLength: 3 }),
      taken: fc.nat({ max: 2 })
    })
  }
)

const { composition } = fc.letrec<{ composition: Composition }>((tie) => ({
  composition: fc.oneof(
    { depthSize: "small", withCrossShrink: true },
    fc.record({ _tag: fc.constant("Grant" as const), read: list, write: list }),
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

// The documented algebra: what a composition grants, given what each of its lists grants.
type KindSet = "all" | ReadonlySet<Kind>
interface Grants {
  readonly read: KindSet
  readonly write: KindSet
}
const none: Grants = { read: new Set(), write: new Set() }
const unionOf = (a: KindSet, b: KindSet) => (a === "all" || b === "all" ? "all" : new Set([...a, ...b]))
const intersectionOf = (a: KindSet, b: KindSet) =>
  a === "all" ? b : b === "all" ? a : new Set([...a].filter((kind) => b.has(kind)))
const union = (a: Grants, b: Grants): Grants => ({ read: unionOf(a.read, b.read), write: unionOf(a.write, b.write) })
const setOf = (e: Entities) => (e === "all" ? "all" : new Set(e))

/** The list a grant holds at run time: for a conditional, the branch taken. */
const concrete = (l: List): Entities => {
  switch (l._tag) {
    case "Exact":
    case "Widened":
      return l.list
    case "Blurred":
      return l.list.map((e) => e.kind)
    case "OneOf":
      return concrete(l.options[l.taken % l.options.length]!)
  }
}

/** What the list's type grants (src/Capability.ts, `Granted`): what is certain whichever branch runs. */
const typed = (l: List): KindSet => {
  switch (l._tag) {
    case "Exact":
      return setOf(l.list)
    case "Widened":
      return new Set()
    case "Blurred":
      return new Set(l.list.filter((e) => !e.blurred).map((e) => e.kind))
    case "OneOf":
      return l.options.map(typed).reduce(intersectionOf)
  }
}

/** What a composition grants, each list read as `side` says: at run time, or as its type says. */
const model = (c: Composition, side: (l: List) => KindSet): Grants => {
  switch (c._tag) {
    case "Grant":
      return { read: side(c.read), write: side(c.write) }
    case "ReadOnly":
      return { read: "all", write: new Set() }
    case "ReadWrite":
      return { read: "all", write: "all" }
    case "Merge":
      return union(model(c.left, side), model(c.right, side))
    case "MergeAll":
      return c.parts.map((part) => model(part, side)).reduce(union, none)
    case "Provide":
      return model(c.self, side)
    case "ProvideMerge":
      return union(model(c.self, side), model(c.that, side))
  }
}
const atRunTime = (l: List) => setOf(concrete(l))
const grantsOf = (grants: ReadonlyArray<Composition>, side: (l: List) => KindSet) =>
  grants.map((c) => model(c, side)).reduce(union, none)

const allowedBy = (grants: Grants, verb: "read" | "write", kind: Kind) => {
  const set = grants[verb]
  return set === "all" || set.has(kind)
}

// The same compositions, built with the library and Effect's Layer.
type Grant = Layer.Layer<never>
const entitiesOf = (l: List) => {
  const e = concrete(l)
  return e === "all" ? "all" : e.map((kind) => ENTITIES[kind])
}
/** `Capability.layer` on lists built at run time, which its type refuses: the types are the type tests'. */
const layerOf = Capability.layer as (grant: {
  readonly read: Capability.Entities
  readonly write: Capability.Entities
}) => Layer.Layer<unknown>
const build = (c: Composition): Grant => {
  switch (c._tag) {
    case "Grant":
      return layerOf({ read: entitiesOf(c.read), write: entitiesOf(c.write) })
    case "ReadOnly":
      return Capability.ReadOnly
    case "ReadWrite":
      return Capability.ReadWrite
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

/** The defect of a refused operation, naming what the scope grants for its verb. */
const refusal = (verb: "read" | "write", kind: Kind, granted: KindSet) => {
  const listed = granted === "all" ? "all" : granted.size === 0 ? "nothing" : [...granted].sort().join(", ")
  return `wakuwaku: this operation needs to ${verb} ${kind}, but the capability in scope does not grant it ` +
    `(granted: ${listed}). The program's type claimed Capability.${verb === "read" ? "Read" : "Write"}<${kind}> ` +
    `all the same: something the compiler could not check stands in between, such as a cast, an \`any\`, ` +
    `a @ts-ignore, or a grant list changed after its type was fixed.`
}

/** "allowed", "refused" (died with exactly the defect `refused` names), or what else happened. */
const outcome = async (probe: (typeof probes)[number], grants: ReadonlyArray<Composition>, refused: string) => {
  let effect = probe.run()
  for (const c of grants) effect = effect.pipe(Effect.provide(build(c)))
  const exit = await Effect.runPromiseExit(Effect.provide(effect, service))
  if (Exit.isSuccess(exit)) return "allowed"
  const defect = Cause.dieOption(exit.cause)
  if (Option.isSome(defect) && String((defect.value as Error).message) === refused) return "refused"
  return `unexpected: ${Cause.pretty(exit.cause)}`
}

describe("the algebra of grants", () => {
  it(
    "the run time allows exactly what the algebra grants, and all that the types grant, for random compositions",
    async () => {
      await fc.assert(
        fc.asyncProperty(program, async (grants) => {
          const runTime = grantsOf(grants, atRunTime)
          const types = grantsOf(grants, typed)
          for (const probe of probes) {
            const want = allowedBy(runTime, probe.verb, probe.kind) ? "allowed" : "refused"
            const got = await outcome(probe, grants, refusal(probe.verb, probe.kind, runTime[probe.verb]))
            const where = `${probe.verb} ${probe.kind}, for ${JSON.stringify(grants)}`
            if (got !== want) throw new Error(`${where}: expected ${want}, got ${got}`)
            // Soundness: what the program's type grants, the run time allows.
            if (allowedBy(types, probe.verb, probe.kind) && got !== "allowed") {
              throw new Error(`${where}: the type grants it, the run time refused it`)
            }
          }
        }),
        { numRuns: RUNS }
      )
    },
    120_000
  )

  it("the model itself: siblings merge, provide keeps self, all covers custom kinds", () => {
    const tb = { _tag: "Grant", read: exact([]), write: exact(["TokenBucket"]) } as const
    const lock = { _tag: "Grant", read: exact([]), write: exact(["Lock"]) } as const
    const run = (c: Composition) => model(c, atRunTime)
    expect(allowedBy(run({ _tag: "Merge", left: tb, right: lock }), "write", "TokenBucket")).toBe(true)
    expect(allowedBy(run({ _tag: "Provide", self: lock, that: tb }), "write", "TokenBucket")).toBe(false)
    expect(allowedBy(run({ _tag: "ProvideMerge", self: lock, that: tb }), "write", "TokenBucket")).toBe(true)
    expect(allowedBy(run({ _tag: "ReadWrite" }), "write", "Other")).toBe(true)
    expect(allowedBy(run({ _tag: "ReadOnly" }), "write", "Other")).toBe(false)
  })

  it("the model of types: a conditional grants its branches' intersection, arrays and blurred entities nothing", () => {
    const branches = (taken: number, ...options: ReadonlyArray<List>): List => ({ _tag: "OneOf", options, taken })
    const both = exact(["TokenBucket", "FixedWindow"])
    const one = exact(["TokenBucket"])
    expect(typed(branches(0, both, one))).toEqual(new Set(["TokenBucket"]))
    expect(concrete(branches(0, both, one))).toEqual(["TokenBucket", "FixedWindow"])
    expect(concrete(branches(1, both, one))).toEqual(["TokenBucket"])
    expect(typed(branches(0, exact("all"), both))).toEqual(new Set(["TokenBucket", "FixedWindow"]))
    expect(typed(branches(1, exact("all"), exact("all")))).toBe("all")
    expect(typed(branches(0, one, exact(["Lock"])))).toEqual(new Set())
    expect(typed(branches(0, both, { _tag: "Widened", list: ["TokenBucket"] }))).toEqual(new Set())
    expect(typed({ _tag: "Widened", list: ["TokenBucket"] })).toEqual(new Set())
    const blurred: List = {
      _tag: "Blurred",
      list: [{ kind: "TokenBucket", blurred: true }, { kind: "Lock", blurred: false }]
    }
    expect(typed(blurred)).toEqual(new Set(["Lock"]))
    expect(concrete(blurred)).toEqual(["TokenBucket", "Lock"])
  })
})
