import type { Context, Effect, Layer } from "effect"
import { describe, expectTypeOf, it } from "vitest"
import { Capability, Redis, TokenBucket } from "wakuwaku"

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
    expectTypeOf(Redis.Redis).toEqualTypeOf<Context.Tag<Redis.Redis, Redis.Redis>>()
    expectTypeOf<Effect.Effect.Success<ReturnType<Redis.Redis["command"]>>>().toEqualTypeOf<unknown>()
  })
})
