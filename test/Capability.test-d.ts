import { Effect, Layer } from "effect"
import type { Context } from "effect"
import { describe, expectTypeOf, it } from "vitest"
import { Capability, FixedWindow, Lock, Rate, Redis, TokenBucket } from "wakuwaku"

const Other = Capability.entity("Other")
type Other = typeof Other
type TB = TokenBucket.Entity

describe("Capability", () => {
  it("Read and Write are covariant in the entity", () => {
    expectTypeOf<Capability.Write<TB>>().toMatchTypeOf<Capability.Write<Capability.AnyEntity>>()
    expectTypeOf<Capability.Write<Capability.AnyEntity>>().not.toMatchTypeOf<Capability.Write<TB>>()
    expectTypeOf<Capability.Read<TB>>().toMatchTypeOf<Capability.Read<Capability.AnyEntity>>()
  })

  it("entities are nominal: two entities never collapse", () => {
    expectTypeOf<Capability.Write<TB>>().not.toMatchTypeOf<Capability.Write<Other>>()
    expectTypeOf<Capability.Write<Other>>().not.toMatchTypeOf<Capability.Write<TB>>()
    expectTypeOf<Capability.Read<TB>>().not.toMatchTypeOf<Capability.Write<TB>>()
  })

  it("providing Write<AnyEntity> removes every Write<E>; providing Write<Other> removes only that one", () => {
    type Needs = Capability.Write<TB> | Capability.Write<Other>
    expectTypeOf<Exclude<Needs, Capability.Write<Capability.AnyEntity>>>().toEqualTypeOf<never>()
    expectTypeOf<Exclude<Needs, Capability.Write<Other>>>().toEqualTypeOf<Capability.Write<TB>>()
  })

  it("layers grant what they say", () => {
    expectTypeOf(Capability.ReadOnly).toEqualTypeOf<Layer.Layer<Capability.Read<Capability.AnyEntity>>>()
    expectTypeOf(Capability.ReadWrite).toEqualTypeOf<
      Layer.Layer<Capability.Read<Capability.AnyEntity> | Capability.Write<Capability.AnyEntity>>
    >()
    expectTypeOf(Capability.layer({ write: [Other] })).toEqualTypeOf<Layer.Layer<Capability.Write<Other>>>()
    expectTypeOf(Capability.layer({ read: "all", write: [Other, TokenBucket.entity] })).toEqualTypeOf<
      Layer.Layer<Capability.Read<Capability.AnyEntity> | Capability.Write<Other> | Capability.Write<TB>>
    >()
    expectTypeOf(Capability.layer({})).toEqualTypeOf<Layer.Layer<never>>()
  })

  it("an entity's kind must be a literal: a string-typed kind would grant everything", () => {
    const kind: string = "Other"
    // @ts-expect-error an entity's kind must be a string literal
    Capability.entity(kind)
    expectTypeOf<Parameters<typeof Capability.entity<string>>[0]>().toEqualTypeOf<
      "an entity's kind must be a string literal"
    >()
    // Even a hand-made Entity<string> grants nothing.
    expectTypeOf<Capability.Granted<"Write", readonly [Capability.Entity<string>]>>().toEqualTypeOf<never>()
    expectTypeOf<Capability.Granted<"Write", "all">>().toEqualTypeOf<Capability.Write<Capability.AnyEntity>>()
  })

  it("Redis layers grant read-write or read-only", () => {
    expectTypeOf<Layer.Layer.Success<ReturnType<typeof Redis.layer>>>().toEqualTypeOf<
      Redis.Redis | Capability.Read<Capability.AnyEntity> | Capability.Write<Capability.AnyEntity>
    >()
    expectTypeOf<Layer.Layer.Success<ReturnType<typeof Redis.layerReadOnly>>>().toEqualTypeOf<
      Redis.Redis | Capability.Read<Capability.AnyEntity>
    >()
    expectTypeOf<Layer.Layer.Error<ReturnType<typeof Redis.layer>>>().toEqualTypeOf<Redis.RedisError>()
  })

  it("the Redis tag is a plain service tag", () => {
    expectTypeOf(Redis.Redis).toMatchTypeOf<Context.Tag<Redis.Redis, Redis.Service>>()
    expectTypeOf<Context.Tag.Service<typeof Redis.Redis>>().toEqualTypeOf<Redis.Service>()
    expectTypeOf<Effect.Effect.Success<ReturnType<Redis.Service["command"]>>>().toEqualTypeOf<unknown>()
  })
})

// The compositions of test/Capability.algebra.test.ts, as types: the grants each one outputs.
type LockE = Lock.Entity
const grantTB = Capability.layer({ write: [TokenBucket.entity] })
const grantLock = Capability.layer({ write: [Lock.entity] })
const readOther = Capability.layer({ read: [Other] })
type Granted<L extends Layer.Layer.Any> = Layer.Layer.Success<L>

describe("Capability compositions", () => {
  it("Layer.merge and Layer.mergeAll of siblings grant the union", () => {
    const merged = Layer.merge(grantTB, grantLock)
    expectTypeOf<Granted<typeof merged>>().toEqualTypeOf<Capability.Write<TB> | Capability.Write<LockE>>()
    const all = Layer.mergeAll(grantTB, grantLock, readOther)
    expectTypeOf<Granted<typeof all>>().toEqualTypeOf<
      Capability.Write<TB> | Capability.Write<LockE> | Capability.Read<Other>
    >()
  })

  it("Layer.provide(self, that) grants self's alone; Layer.provideMerge grants both", () => {
    const provided = grantLock.pipe(Layer.provide(grantTB))
    expectTypeOf<Granted<typeof provided>>().toEqualTypeOf<Capability.Write<LockE>>()
    const merged = grantLock.pipe(Layer.provideMerge(grantTB))
    expectTypeOf<Granted<typeof merged>>().toEqualTypeOf<Capability.Write<LockE> | Capability.Write<TB>>()
  })

  it("\"all\" and read beside write", () => {
    expectTypeOf<Granted<typeof Capability.ReadWrite>>().toEqualTypeOf<
      Capability.Read<Capability.AnyEntity> | Capability.Write<Capability.AnyEntity>
    >()
    expectTypeOf<Granted<ReturnType<typeof Capability.layer<readonly [TB], "all">>>>().toEqualTypeOf<
      Capability.Read<TB> | Capability.Write<Capability.AnyEntity>
    >()
  })

  it("a program's requirements: what the compositions grant is removed, and only that", () => {
    const needsBoth = Effect.all([
      null as unknown as Effect.Effect<void, never, Capability.Write<TB>>,
      null as unknown as Effect.Effect<void, never, Capability.Write<LockE>>
    ])
    // Siblings in one merge: both removed.
    const merged = needsBoth.pipe(Effect.provide(Layer.merge(grantTB, grantLock)))
    expectTypeOf<Effect.Effect.Context<typeof merged>>().toEqualTypeOf<never>()
    // Nested provides: both removed.
    const nested = needsBoth.pipe(Effect.provide(grantTB), Effect.provide(grantLock))
    expectTypeOf<Effect.Effect.Context<typeof nested>>().toEqualTypeOf<never>()
    // Layer.provide(self, that): that's grant does not reach the program.
    const provided = needsBoth.pipe(Effect.provide(grantLock.pipe(Layer.provide(grantTB))))
    expectTypeOf<Effect.Effect.Context<typeof provided>>().toEqualTypeOf<Capability.Write<TB>>()
    // @ts-expect-error Write<TokenBucket> is still required
    Effect.runPromise(provided)
    // Read beside write: a read grant removes no write.
    const read = needsBoth.pipe(Effect.provide(Capability.layer({ read: [TokenBucket.entity, Lock.entity] })))
    expectTypeOf<Effect.Effect.Context<typeof read>>().toEqualTypeOf<Capability.Write<TB> | Capability.Write<LockE>>()
  })
})

// Grant lists whose exact members the compiler cannot see: each grants what every possibility grants.
declare const cond: boolean
type FW = FixedWindow.Entity
const WINDOW = FixedWindow.make<string>("w", 5, "1 second")

describe("grant lists the compiler cannot see exactly", () => {
  it("a conditional list grants what both branches grant", () => {
    expectTypeOf(Capability.layer({ write: cond ? [TokenBucket.entity, FixedWindow.entity] : [TokenBucket.entity] }))
      .toEqualTypeOf<Layer.Layer<Capability.Write<TB>>>()
    expectTypeOf(Capability.layer({ write: cond ? [TokenBucket.entity] : [Lock.entity] }))
      .toEqualTypeOf<Layer.Layer<never>>()
    expectTypeOf(Capability.layer({ read: cond ? [Other] : [], write: cond ? [Other, Lock.entity] : [Lock.entity] }))
      .toEqualTypeOf<Layer.Layer<Capability.Write<LockE>>>()
  })

  it("a union of tuples grants their intersection; \"all\" in the union grants what the rest grant", () => {
    expectTypeOf<Capability.Granted<"Write", readonly [TB, FW] | readonly [FW, LockE] | readonly [LockE, FW, TB]>>()
      .toEqualTypeOf<Capability.Write<FW>>()
    expectTypeOf<Capability.Granted<"Write", readonly [TB] | readonly [LockE]>>().toEqualTypeOf<never>()
    expectTypeOf<Capability.Granted<"Read", "all" | readonly [TB, Other]>>()
      .toEqualTypeOf<Capability.Read<TB> | Capability.Read<Other>>()
    expectTypeOf<Capability.Granted<"Read", "all" | readonly []>>().toEqualTypeOf<never>()
    expectTypeOf(Capability.layer({ read: cond ? "all" : [TokenBucket.entity], write: cond ? "all" : [] }))
      .toEqualTypeOf<Layer.Layer<Capability.Read<TB>>>()
  })

  it("an array that is not a tuple grants nothing, and Capability.layer refuses it", () => {
    expectTypeOf<Capability.Granted<"Write", Array<TB>>>().toEqualTypeOf<never>()
    expectTypeOf<Capability.Granted<"Write", ReadonlyArray<TB | FW>>>().toEqualTypeOf<never>()
    expectTypeOf<Capability.Granted<"Write", readonly [TB] | Array<TB>>>().toEqualTypeOf<never>()
    expectTypeOf<Capability.Granted<"Write", Capability.Entities>>().toEqualTypeOf<never>()
    // A list widened by plain assignment: its type no longer says which entities it holds.
    const write = cond ? [TokenBucket.entity, FixedWindow.entity] : [TokenBucket.entity]
    expectTypeOf(write).toEqualTypeOf<Array<TB | FW>>()
    // @ts-expect-error a grant list must be a tuple
    Capability.layer({ write })
    const listed: ReadonlyArray<TB> = [TokenBucket.entity]
    // @ts-expect-error a grant list must be a tuple
    Capability.layer({ read: listed })
    expectTypeOf<Parameters<typeof Capability.layer<readonly [], Array<TB>>>[0]>().toEqualTypeOf<
      & { readonly read?: readonly [] | undefined; readonly write?: Array<TB> | undefined }
      & {
        readonly write: "a grant list must be a tuple (inline, or `as const`): an array type does not say what it holds"
      }
    >()
    // Fixed elements count, rest and optional elements grant nothing.
    expectTypeOf<Capability.Granted<"Write", readonly [TB, ...Array<FW>]>>().toEqualTypeOf<Capability.Write<TB>>()
    expectTypeOf<Capability.Granted<"Write", readonly [...Array<FW>, TB]>>().toEqualTypeOf<Capability.Write<TB>>()
    expectTypeOf(Capability.layer({ write: [TokenBucket.entity] as const })).toEqualTypeOf<
      Layer.Layer<Capability.Write<TB>>
    >()
  })

  it("an entity whose type is a union of kinds grants nothing, and Capability.entity refuses such a kind", () => {
    // An entity widened by plain assignment.
    const either: Capability.Entity<"TokenBucket" | "FixedWindow"> = TokenBucket.entity
    expectTypeOf(Capability.layer({ write: [either] })).toEqualTypeOf<Layer.Layer<never>>()
    expectTypeOf(Capability.layer({ write: [either, Lock.entity] })).toEqualTypeOf<
      Layer.Layer<Capability.Write<LockE>>
    >()
    const any: Capability.AnyEntity = TokenBucket.entity
    expectTypeOf(Capability.layer({ read: [any, Other] })).toEqualTypeOf<Layer.Layer<Capability.Read<Other>>>()
    expectTypeOf<Capability.Granted<"Write", readonly [Capability.Entity<`Token${string}`>]>>()
      .toEqualTypeOf<never>()
    // @ts-expect-error an entity's kind must be one string literal
    Capability.entity<"A" | "B">("A")
    // @ts-expect-error an entity's kind must be one string literal
    Capability.entity(cond ? "A" : "B")
    expectTypeOf<Parameters<typeof Capability.entity<"A" | "B">>[0]>().toEqualTypeOf<
      "an entity's kind must be one string literal, not a union"
    >()
    expectTypeOf<Parameters<typeof Capability.entity<`Token${string}`>>[0]>().toEqualTypeOf<
      "an entity's kind must be a string literal"
    >()
    expectTypeOf(Capability.entity("A")).toEqualTypeOf<Capability.Entity<"A">>()
  })

  it("a program granted less than it needs does not compile, and its leftover requirement is the write", () => {
    // The list of the issue: `cond ? [...] : [...]` widened by plain assignment.
    const write = cond ? [TokenBucket.entity, FixedWindow.entity] : [TokenBucket.entity]
    const p = WINDOW.acquire("x", 1).pipe(
      // @ts-expect-error a grant list must be a tuple
      Effect.provide(Capability.layer({ write })),
      Effect.provide(Redis.layerMemoryReadOnly())
    )
    expectTypeOf<Effect.Effect.Context<typeof p>>().toEqualTypeOf<Capability.Write<FW>>()
    // @ts-expect-error Write<Entity<"FixedWindow">> is not granted
    Effect.runPromise(p)
    // The same conditional inline, or as two tuples: the branches grant TokenBucket alone.
    const tuples = cond ? [TokenBucket.entity, FixedWindow.entity] as const : [TokenBucket.entity] as const
    const inline = WINDOW.acquire("x", 1).pipe(
      Effect.provide(
        Capability.layer({ write: cond ? [TokenBucket.entity, FixedWindow.entity] : [TokenBucket.entity] })
      ),
      Effect.provide(Redis.layerMemoryReadOnly())
    )
    expectTypeOf<Effect.Effect.Context<typeof inline>>().toEqualTypeOf<Capability.Write<FW>>()
    // @ts-expect-error Write<Entity<"FixedWindow">> is not granted by every branch
    Effect.runPromise(inline)
    const named = WINDOW.acquire("x", 1).pipe(
      Effect.provide(Capability.layer({ write: tuples })),
      Effect.provide(Redis.layerMemoryReadOnly())
    )
    expectTypeOf<Effect.Effect.Context<typeof named>>().toEqualTypeOf<Capability.Write<FW>>()
    // @ts-expect-error Write<Entity<"FixedWindow">> is not granted by every branch
    Effect.runPromise(named)
    // What every branch grants is granted.
    const bucket = TokenBucket.make<string>("b", 5, Rate.perSecond(1)).acquire("x", 1).pipe(
      Effect.provide(Capability.layer({ write: tuples })),
      Effect.provide(Redis.layerMemoryReadOnly())
    )
    expectTypeOf<Effect.Effect.Context<typeof bucket>>().toEqualTypeOf<never>()
    Effect.runPromise(bucket)
  })
})
