import { RateLimiter } from "@effect/experimental"
import { Effect, Layer } from "effect"
import { describe, expectTypeOf, it } from "vitest"
import { Capability, Redis, TokenBucket } from "wakuwaku"
import * as RateLimiterStore from "wakuwaku/RateLimiterStore"

type R<T> = T extends Effect.Effect<infer _A, infer _E, infer R> ? R : never

const consume = Effect.flatMap(
  RateLimiter.RateLimiter,
  (limiter) => limiter.consume({ key: "user-42", limit: 10, window: "1 minute" })
)
const Limiter = RateLimiter.layer.pipe(Layer.provide(RateLimiterStore.layer()))

describe("RateLimiterStore requirements", () => {
  it("the layer needs Redis | Write<RateLimiterStore.Entity>, and can fail with nothing", () => {
    expectTypeOf(RateLimiterStore.layer()).toEqualTypeOf<
      Layer.Layer<
        RateLimiter.RateLimiterStore,
        never,
        Redis.Redis | Capability.Write<Capability.Entity<"RateLimiterStore">>
      >
    >()
    expectTypeOf<RateLimiterStore.Requirements>().toEqualTypeOf<
      Redis.Redis | Capability.Write<RateLimiterStore.Entity>
    >()
    expectTypeOf(RateLimiterStore.make()).toEqualTypeOf<
      Effect.Effect<RateLimiter.RateLimiterStore["Type"], never, RateLimiterStore.Requirements>
    >()
  })

  it("RateLimiter over it passes the requirement on to the program", () => {
    const program = consume.pipe(Effect.provide(Limiter))
    expectTypeOf<R<typeof program>>().toEqualTypeOf<RateLimiterStore.Requirements>()
    expectTypeOf<Effect.Effect.Error<typeof program>>().toEqualTypeOf<RateLimiter.RateLimiterError>()
  })

  it("on a primary it compiles", () => {
    const program = consume.pipe(Effect.provide(Limiter), Effect.provide(Redis.layer()))
    expectTypeOf<R<typeof program>>().toEqualTypeOf<never>()
    Effect.runPromise(program)
  })

  it("on a read-only replica it leaves Write<RateLimiterStore.Entity> and does not run", () => {
    const program = consume.pipe(Effect.provide(Limiter), Effect.provide(Redis.layerReadOnly()))
    expectTypeOf<R<typeof program>>().toEqualTypeOf<Capability.Write<RateLimiterStore.Entity>>()
    // @ts-expect-error Write<Entity<"RateLimiterStore">> is missing
    Effect.runPromise(program)
  })

  it("a grant of another entity's writes leaves it too; a grant of its own compiles", () => {
    const other = consume.pipe(
      Effect.provide(Limiter),
      Effect.provide(Capability.layer({ write: [TokenBucket.entity] })),
      Effect.provide(Redis.layerReadOnly())
    )
    expectTypeOf<R<typeof other>>().toEqualTypeOf<Capability.Write<RateLimiterStore.Entity>>()
    const own = consume.pipe(
      Effect.provide(Limiter),
      Effect.provide(Capability.layer({ write: [RateLimiterStore.entity] })),
      Effect.provide(Redis.layerReadOnly())
    )
    expectTypeOf<R<typeof own>>().toEqualTypeOf<never>()
  })
})
