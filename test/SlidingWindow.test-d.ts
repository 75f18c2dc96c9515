import { Effect } from "effect"
import { describe, expectTypeOf, it } from "vitest"
import { Capability, FixedWindow, Limiter, Redis, SlidingWindow } from "wakuwaku"

const LOGINS = SlidingWindow.make<string>("login", 20, "3 seconds")
const EXPORT_ROWS = SlidingWindow.make<number>("export-rows", 10_000, "1 minute")
const Other = Capability.entity("Other")
type Other = typeof Other

type R<T> = T extends Effect.Effect<infer _A, infer _E, infer R> ? R : never

describe("SlidingWindow requirements", () => {
  it("acquire and reset need Redis | Write<SlidingWindow.Entity>, peek needs Read", () => {
    expectTypeOf<R<ReturnType<typeof LOGINS.acquire>>>().toEqualTypeOf<
      Redis.Redis | Capability.Write<SlidingWindow.Entity>
    >()
    expectTypeOf<R<ReturnType<typeof LOGINS.reset>>>().toEqualTypeOf<
      Redis.Redis | Capability.Write<SlidingWindow.Entity>
    >()
    expectTypeOf<R<ReturnType<typeof LOGINS.peek>>>().toEqualTypeOf<
      Redis.Redis | Capability.Read<SlidingWindow.Entity>
    >()
  })

  it("results and errors are typed", () => {
    expectTypeOf(LOGINS.acquire("a", 1)).toEqualTypeOf<
      Effect.Effect<
        SlidingWindow.Admission,
        Redis.RedisError | Redis.InvalidInput,
        Redis.Redis | Capability.Write<SlidingWindow.Entity>
      >
    >()
    expectTypeOf<Effect.Effect.Success<ReturnType<typeof LOGINS.reset>>>().toEqualTypeOf<boolean>()
    expectTypeOf<Effect.Effect.Success<ReturnType<typeof LOGINS.peek>>>().toEqualTypeOf<number>()
  })

  it("with only the read-only capability, acquire leaves Write<SlidingWindow.Entity> and does not run", () => {
    const program = LOGINS.acquire("203.0.113.7", 1).pipe(Effect.provide(Redis.layerReadOnly()))
    expectTypeOf<R<typeof program>>().toEqualTypeOf<Capability.Write<SlidingWindow.Entity>>()
    // @ts-expect-error Write<Entity<"SlidingWindow">> is missing
    Effect.runPromise(program)
  })

  it("with read-write, acquire compiles", () => {
    const program = LOGINS.acquire("203.0.113.7", 1).pipe(Effect.provide(Redis.layer()))
    expectTypeOf<R<typeof program>>().toEqualTypeOf<never>()
    Effect.runPromise(program)
  })

  it("with only the read-only capability, peek compiles", () => {
    const program = LOGINS.peek("203.0.113.7").pipe(Effect.provide(Redis.layerReadOnly()))
    expectTypeOf<R<typeof program>>().toEqualTypeOf<never>()
  })

  it("a custom capability that writes another entity but not sliding windows leaves Write<SlidingWindow.Entity>", () => {
    const program = EXPORT_ROWS.acquire(7, 100).pipe(
      Effect.provide(Capability.layer({ read: "all", write: [Other] })),
      Effect.provide(Redis.layerReadOnly())
    )
    expectTypeOf<R<typeof program>>().toEqualTypeOf<Capability.Write<SlidingWindow.Entity>>()
    // @ts-expect-error Write<Entity<"SlidingWindow">> is missing
    Effect.runPromise(program)
  })

  it("a custom capability that writes sliding windows satisfies acquire", () => {
    const program = EXPORT_ROWS.acquire(7, 100).pipe(
      Effect.provide(Capability.layer({ write: [SlidingWindow.entity] })),
      Effect.provide(Redis.layerReadOnly())
    )
    expectTypeOf<R<typeof program>>().toEqualTypeOf<never>()
  })

  it("a narrower capability inside a broader one: the broader still satisfies the rest", () => {
    const program = LOGINS.acquire("a", 1).pipe(
      Effect.provide(Capability.layer({ write: [Other] })),
      Effect.provide(Redis.layer())
    )
    expectTypeOf<R<typeof program>>().toEqualTypeOf<never>()
  })

  it("a limiter of any kind: it fits where RateLimit.Limiter and Limiter.Limiter do, and mixes with the others", () => {
    const limiter: Limiter.Limiter<string, Redis.Redis | Capability.Write<SlidingWindow.Entity>> = LOGINS
    expectTypeOf(limiter[Limiter.TypeId]).toEqualTypeOf<Limiter.Description>()
    const FIXED = FixedWindow.make<string>("fixed", 10, "1 second")
    const both: ReadonlyArray<Limiter.Limiter<string, Redis.Redis | Capability.Write<Capability.AnyEntity>>> = [
      LOGINS,
      FIXED
    ]
    expectTypeOf(both).not.toBeAny()
  })

  it("names are typed", () => {
    expectTypeOf(LOGINS.acquire).parameter(0).toEqualTypeOf<string>()
    // @ts-expect-error a string limiter takes string names
    LOGINS.acquire(5, 1)
    expectTypeOf(EXPORT_ROWS.acquire).parameter(0).toEqualTypeOf<number>()
    // @ts-expect-error a number limiter takes number names
    EXPORT_ROWS.acquire("tenant", 1)
    const BYTES = SlidingWindow.make<Uint8Array>("bytes", 1, "1 second")
    expectTypeOf(BYTES.acquire).parameter(0).toEqualTypeOf<Uint8Array>()
    const BIG = SlidingWindow.make<bigint>("big", 1, "1 second")
    expectTypeOf(BIG.acquire).parameter(0).toEqualTypeOf<bigint>()
  })
})
