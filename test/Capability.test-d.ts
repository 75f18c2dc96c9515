import { Effect, Layer } from "effect"
import type { Context } from "effect"
import { describe, expectTypeOf, it } from "vitest"
import { Capability, Lock, Redis, TokenBucket } from "wakuwaku"

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
