import { describe, it, layer } from "@effect/vitest"
import { Cause, Effect, Exit, Layer, Option } from "effect"
import { expect } from "vitest"
import { Capability, FixedWindow, Lock, Rate, Redis, TokenBucket } from "wakuwaku"
import { freshNamespace, redisUrl } from "./support/redis.js"

const Other = Capability.entity("Other")

/** What a cast does: hide a missing capability from the compiler. */
const unchecked = <A, E>(effect: Effect.Effect<A, E, unknown>) => effect as Effect.Effect<A, E, Redis.Redis>

const dieMessage = <A, E>(exit: Exit.Exit<A, E>): string => {
  if (Exit.isSuccess(exit)) throw new Error("expected a defect, got a success")
  const defect = Cause.dieOption(exit.cause)
  if (defect._tag === "None") throw new Error(`expected a defect, got ${Cause.pretty(exit.cause)}`)
  return String((defect.value as Error).message)
}

// Registered before the file's layer(), so that no layered grant surrounds these.
describe("grants combined with Layer.merge", () => {
  it.live("a write grant merged with a read-only layer: both count, in either order", () =>
    Effect.gen(function*() {
      const B = TokenBucket.make<string>(freshNamespace(), 5, Rate.perSecond(1))
      const writeThenRead = Layer.merge(
        Capability.layer({ write: [TokenBucket.entity] }),
        Redis.layerReadOnly({ url: redisUrl })
      )
      const readThenWrite = Layer.merge(
        Redis.layerReadOnly({ url: redisUrl }),
        Capability.layer({ write: [TokenBucket.entity] })
      )
      expect(yield* B.acquire("a", 1).pipe(Effect.provide(writeThenRead))).toEqual(
        TokenBucket.Admission.Allowed({ remaining: 4 })
      )
      expect(yield* B.peek("a").pipe(Effect.provide(readThenWrite))).toBe(4)
      expect(yield* B.acquire("a", 1).pipe(Effect.provide(readThenWrite))).toEqual(
        TokenBucket.Admission.Allowed({ remaining: 3 })
      )
    }))

  it.live("a read-only grant merged after a read-write layer takes no write right away", () =>
    Effect.gen(function*() {
      const B = TokenBucket.make<string>(freshNamespace(), 5, Rate.perSecond(1))
      const merged = Layer.mergeAll(Redis.layer({ url: redisUrl }), Capability.ReadOnly)
      expect(yield* B.acquire("a", 2).pipe(Effect.provide(merged))).toEqual(
        TokenBucket.Admission.Allowed({ remaining: 3 })
      )
    }))

  it.live("two sibling write grants in one Layer.merge: both count at run time, as the type says", () =>
    Effect.gen(function*() {
      const B = TokenBucket.make<string>(freshNamespace(), 5, Rate.perSecond(1))
      const L = Lock.make<string>(freshNamespace(), "1 second")
      const grants = Layer.merge(
        Capability.layer({ write: [TokenBucket.entity] }),
        Capability.layer({ write: [Lock.entity] })
      )
      const [admission, token] = yield* Effect.all([B.acquire("x", 1), L.tryLock("y")]).pipe(
        Effect.provide(grants),
        Effect.provide(Redis.layerMemoryReadOnly())
      )
      expect(admission).toEqual(TokenBucket.Admission.Allowed({ remaining: 4 }))
      expect(Option.isSome(token)).toBe(true)
      // A third sibling for another entity takes nothing away either.
      const three = Layer.mergeAll(Redis.layer({ url: redisUrl }), Capability.layer({ write: [Other] }))
      expect(yield* B.acquire("a", 1).pipe(Effect.provide(three))).toEqual(
        TokenBucket.Admission.Allowed({ remaining: 4 })
      )
    }))

  it.live("Layer.provide(self, that) grants self's capabilities alone, at run time as in the type", () =>
    Effect.gen(function*() {
      const B = TokenBucket.make<string>(freshNamespace(), 5, Rate.perSecond(1))
      const onlyLocks = Capability.layer({ write: [Lock.entity] }).pipe(
        Layer.provide(Capability.layer({ write: [TokenBucket.entity] }))
      )
      const exit = yield* Effect.exit(
        unchecked(B.acquire("a", 1)).pipe(Effect.provide(onlyLocks), Effect.provide(Redis.layerMemoryReadOnly()))
      )
      expect(dieMessage(exit)).toContain(
        "needs to write TokenBucket, but the capability in scope does not grant it (granted: Lock)"
      )
    }))
})

/** The defect of a write of `kind` that the grant in scope does not hold. */
const refusedWrite = (kind: string, granted: string) =>
  `wakuwaku: this operation needs to write ${kind}, but the capability in scope does not grant it ` +
  `(granted: ${granted}). The program's type claimed Capability.Write<${kind}> all the same: something the ` +
  `compiler could not check stands in between, such as a cast, an \`any\`, a @ts-ignore, or a grant list ` +
  `changed after its type was fixed.`

// Both backends, read-only: every write right comes from the grant under test. Before the file's layer().
const readOnlyBackends = [
  { name: "Redis", layer: () => Redis.layerReadOnly({ url: redisUrl }) },
  { name: "memory", layer: () => Redis.layerMemoryReadOnly() }
] as const

for (const backend of readOnlyBackends) {
  describe(`grant lists the compiler cannot see exactly, on ${backend.name}`, () => {
    /** Which branch a conditional grant takes, as the compiler sees it: either. */
    const branch = (taken: boolean): boolean => taken

    it.live("a conditional grant, which grants its branches' common part, allows that part in either branch", () =>
      Effect.gen(function*() {
        const B = TokenBucket.make<string>(freshNamespace(), 5, Rate.perSecond(1))
        const W = FixedWindow.make<string>(freshNamespace(), 5, "1 second")
        for (const cond of [true, false]) {
          const grant = Capability.layer({
            write: branch(cond) ? [TokenBucket.entity, FixedWindow.entity] : [TokenBucket.entity]
          })
          expect(yield* B.acquire(`b-${cond}`, 1).pipe(Effect.provide(grant))).toEqual(
            TokenBucket.Admission.Allowed({ remaining: 4 })
          )
          // The window write compiles only through a cast: the type grants it in no branch.
          const window = yield* Effect.exit(unchecked(W.acquire(`w-${cond}`, 1)).pipe(Effect.provide(grant)))
          if (cond) {
            expect(Exit.isSuccess(window) && window.value).toMatchObject({ _tag: "Allowed", remaining: 4 })
          } else expect(dieMessage(window)).toBe(refusedWrite("FixedWindow", "TokenBucket"))
        }
        // The refused write reached nothing.
        expect(yield* W.peek("w-false")).toBe(5)
      }).pipe(Effect.provide(backend.layer())))

    it.live("the issue's program: refused at compile time; forced through, it dies claiming no cast", () =>
      Effect.gen(function*() {
        const WINDOW = FixedWindow.make<string>(freshNamespace(), 5, "1 second")
        const write = branch(false) ? [TokenBucket.entity, FixedWindow.entity] : [TokenBucket.entity]
        const program = WINDOW.acquire("x", 1).pipe(
          // @ts-expect-error a grant list must be a tuple (test/Capability.test-d.ts pins the leftover Write)
          Effect.provide(Capability.layer({ write }))
        )
        const exit = yield* Effect.exit(unchecked(program))
        expect(dieMessage(exit)).toBe(refusedWrite("FixedWindow", "TokenBucket"))
        expect(yield* WINDOW.peek("x")).toBe(5)
      }).pipe(Effect.provide(backend.layer())))

    it.live("a program with no cast at all (a tuple emptied after its type was fixed) dies naming what happened", () =>
      Effect.gen(function*() {
        const WINDOW = FixedWindow.make<string>(freshNamespace(), 5, "1 second")
        const write: [FixedWindow.Entity] = [FixedWindow.entity]
        write.pop()
        const exit = yield* Effect.exit(WINDOW.acquire("x", 1).pipe(Effect.provide(Capability.layer({ write }))))
        expect(dieMessage(exit)).toBe(refusedWrite("FixedWindow", "nothing"))
        expect(yield* WINDOW.peek("x")).toBe(5)
      }).pipe(Effect.provide(backend.layer())))
  })
}

layer(Redis.layerReadOnly({ url: redisUrl }), { excludeTestServices: true })("capabilities at run time", (it) => {
  it.effect("a write forced through a cast under the read-only capability dies, naming what is missing", () =>
    Effect.gen(function*() {
      const B = TokenBucket.make<string>(freshNamespace(), 5, Rate.perSecond(1))
      const exit = yield* Effect.exit(unchecked(B.acquire("a", 1)))
      expect(dieMessage(exit)).toContain("needs to write TokenBucket")
      expect(dieMessage(exit)).toContain("Capability.Write<TokenBucket>")
      // Nothing reached Redis.
      expect(yield* B.peek("a")).toBe(5)
    }))

  it.effect("a custom capability for another entity does not let token buckets be written", () =>
    Effect.gen(function*() {
      const B = TokenBucket.make<string>(freshNamespace(), 5, Rate.perSecond(1))
      const exit = yield* Effect.exit(
        unchecked(B.acquire("a", 1)).pipe(Effect.provide(Capability.layer({ write: [Other] })))
      )
      expect(dieMessage(exit)).toContain("(granted: Other)")
    }))

  it.effect("a custom capability for token buckets lets them be written", () =>
    Effect.gen(function*() {
      const B = TokenBucket.make<string>(freshNamespace(), 5, Rate.perSecond(1))
      const admission = yield* B.acquire("a", 2).pipe(Effect.provide(Capability.layer({ write: [TokenBucket.entity] })))
      expect(admission).toEqual(TokenBucket.Admission.Allowed({ remaining: 3 }))
    }))

  it.effect("a read works with the read-only capability alone", () =>
    Effect.gen(function*() {
      const B = TokenBucket.make<string>(freshNamespace(), 5, Rate.perSecond(1))
      expect(yield* B.peek("a")).toBe(5)
    }))

  it.effect("a narrower capability inside a broader one keeps the broader rights, as the types say", () =>
    Effect.gen(function*() {
      const B = TokenBucket.make<string>(freshNamespace(), 5, Rate.perSecond(1))
      const program = B.acquire("a", 1).pipe(
        Effect.provide(Capability.layer({ write: [Other] })),
        Effect.provide(Capability.ReadWrite)
      )
      expect(yield* program).toEqual(TokenBucket.Admission.Allowed({ remaining: 4 }))
      const reversed = B.acquire("a", 1).pipe(
        Effect.provide(Capability.ReadOnly),
        Effect.provide(Capability.layer({ write: [TokenBucket.entity] }))
      )
      expect(yield* reversed).toEqual(TokenBucket.Admission.Allowed({ remaining: 3 }))
    }))
})
