/**
 * The types of metered calls: `TokenBucket.metered` (data-first, data-last and the method) and `Limits.metered`
 * keep the body's A, E and R, add the bucket's requirements (metered writes: it needs
 * `Write<TokenBucket.Entity>`, which a read-only layer does not grant), and type `settle`.
 */
import { Context, Effect } from "effect"
import { describe, expectTypeOf, it } from "vitest"
import { Capability, FixedWindow, Limits, Rate, Redis, TokenBucket } from "wakuwaku"

const TOKENS = TokenBucket.make<string>("llm-tokens", 90_000, Rate.make(90_000, "1 minute"))
const REQUESTS = TokenBucket.make<string>("llm-requests", 60, Rate.make(60, "1 minute"))
const IDS = TokenBucket.make<number>("ids", 10, Rate.perSecond(1))

type R<T> = T extends Effect.Effect<infer _A, infer _E, infer R> ? R : never

class Llm extends Context.Tag("Llm")<Llm, { readonly complete: Effect.Effect<number, LlmDown> }>() {}
class LlmDown {
  readonly _tag = "LlmDown"
}

describe("TokenBucket.metered", () => {
  it("keeps the body's A, E and R and adds the bucket's, in every form", () => {
    const body = (settle: TokenBucket.Settle) => Effect.flatMap(Llm, (llm) => Effect.tap(llm.complete, settle))
    type Expected = Effect.Effect<
      number,
      LlmDown | TokenBucket.AlreadySettled | TokenBucket.RateLimited | Redis.RedisError | Redis.InvalidInput,
      Llm | Redis.Redis | Capability.Write<TokenBucket.Entity>
    >
    expectTypeOf(TokenBucket.metered(TOKENS, "t", { estimate: 10 }, body)).toEqualTypeOf<Expected>()
    expectTypeOf(TokenBucket.metered("t", { estimate: 10, maxWait: "1 second" }, body)(TOKENS)).toEqualTypeOf<
      Expected
    >()
    expectTypeOf(TOKENS.metered("t", { estimate: 10 }, body)).toEqualTypeOf<Expected>()
  })

  it("settle succeeds with the tokens given back, and fails with AlreadySettled, RedisError or InvalidInput", () => {
    expectTypeOf<TokenBucket.Settle>().toEqualTypeOf<
      (actual: number) => Effect.Effect<number, TokenBucket.AlreadySettled | Redis.RedisError | Redis.InvalidInput>
    >()
  })

  it("needs Write<TokenBucket.Entity>: a read-only layer leaves it, and the program does not run", () => {
    const onReplica = TOKENS.metered("t", { estimate: 1 }, () => Effect.void).pipe(
      Effect.provide(Redis.layerReadOnly())
    )
    expectTypeOf<R<typeof onReplica>>().toEqualTypeOf<Capability.Write<TokenBucket.Entity>>()
    // @ts-expect-error Write<Entity<"TokenBucket">> is missing
    Effect.runPromise(onReplica)
    // A grant of another entity's writes is not enough either.
    const elsewhere = TOKENS.metered("t", { estimate: 1 }, () => Effect.void).pipe(
      Effect.provide(Capability.layer({ read: "all", write: [FixedWindow.entity] })),
      Effect.provide(Redis.layerReadOnly())
    )
    expectTypeOf<R<typeof elsewhere>>().toEqualTypeOf<Capability.Write<TokenBucket.Entity>>()
    // With the grant, nothing is left.
    const granted = TOKENS.metered("t", { estimate: 1 }, () => Effect.void).pipe(
      Effect.provide(Capability.layer({ write: [TokenBucket.entity] })),
      Effect.provide(Redis.layerReadOnly())
    )
    expectTypeOf<R<typeof granted>>().toEqualTypeOf<never>()
  })

  it("names are the bucket's", () => {
    // @ts-expect-error a number bucket takes number names
    TokenBucket.metered(IDS, "t", { estimate: 1 }, () => Effect.void)
    // @ts-expect-error the estimate is required
    TOKENS.metered("t", {}, () => Effect.void)
  })
})

describe("Limits.metered", () => {
  it("one estimate and one actual per bucket, typed as the list is", () => {
    const program = Limits.metered([REQUESTS, TOKENS], "t", { estimate: [1, 2_000] }, (settle) => {
      expectTypeOf(settle).parameter(0).toEqualTypeOf<readonly [number, number]>()
      return settle([1, 1_500])
    })
    expectTypeOf(program).toEqualTypeOf<
      Effect.Effect<
        readonly [number, number],
        TokenBucket.AlreadySettled | TokenBucket.RateLimited | Redis.RedisError | Redis.InvalidInput,
        Redis.Redis | Capability.Write<TokenBucket.Entity>
      >
    >()
    // @ts-expect-error one estimate per bucket
    Limits.metered([REQUESTS, TOKENS], "t", { estimate: [1] }, () => Effect.void)
    const WINDOW = FixedWindow.make<string>("w", 5, "1 second")
    // @ts-expect-error token buckets only
    Limits.metered([REQUESTS, WINDOW], "t", { estimate: [1, 1] }, () => Effect.void)
    // @ts-expect-error at least one bucket
    Limits.metered([], "t", { estimate: [] }, () => Effect.void)
  })
})
