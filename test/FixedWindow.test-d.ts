import { Effect } from "effect"
import { describe, expectTypeOf, it } from "vitest"
import { Capability, FixedWindow, Redis } from "wakuwaku"

const LOGINS = FixedWindow.make<string>("login", 20, "3 seconds")
const EXPORT_ROWS = FixedWindow.make<number>("export-rows", 10_000, "1 minute")
const Other = Capability.entity("Other")
type Other = typeof Other

type R<T> = T extends Effect.Effect<infer _A, infer _E, infer R> ? R : never

describe("FixedWindow requirements", () => {
  it("acquire and reset need Redis | Write<FixedWindow.Entity>, peek needs Read", () => {
    expectTypeOf<R<ReturnType<typeof LOGINS.acquire>>>().toEqualTypeOf<
      Redis.Redis | Capability.Write<FixedWindow.Entity>
    >()
    expectTypeOf<R<ReturnType<typeof LOGINS.reset>>>().toEqualTypeOf<
      Redis.Redis | Capability.Write<FixedWindow.Entity>
    >()
    expectTypeOf<R<ReturnType<typeof LOGINS.peek>>>().toEqualTypeOf<
      Redis.Redis | Capability.Read<FixedWindow.Entity>
    >()
  })

  it("results and errors are typed", () => {
    expectTypeOf(LOGINS.acquire("a", 1)).toEqualTypeOf<
      Effect.Effect<
        FixedWindow.Admission,
        Redis.RedisError | Redis.InvalidInput,
        Redis.Redis | Capability.Write<FixedWindow.Entity>
      >
    >()
    expectTypeOf<Effect.Effect.Success<ReturnType<typeof LOGINS.reset>>>().toEqualTypeOf<boolean>()
    expectTypeOf<Effect.Effect.Success<ReturnType<typeof LOGINS.peek>>>().toEqualTypeOf<number>()
  })

  it("with only the read-only capability, acquire leaves Write<FixedWindow.Entity> and does not run", () => {
    const program = LOGINS.acquire("203.0.113.7", 1).pipe(Effect.provide(Redis.layerReadOnly()))
    expectTypeOf<R<typeof program>>().toEqualTypeOf<Capability.Write<FixedWindow.Entity>>()
    // @ts-expect-error Write<Entity<"FixedWindow">> is missing
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

  it("a custom capability that writes another entity but not fixed windows leaves Write<FixedWindow.Entity>", () => {
    const program = EXPORT_ROWS.acquire(7, 100).pipe(
      Effect.provide(Capability.layer({ read: "all", write: [Other] })),
      Effect.provide(Redis.layerReadOnly())
    )
    expectTypeOf<R<typeof program>>().toEqualTypeOf<Capability.Write<FixedWindow.Entity>>()
    // @ts-expect-error Write<Entity<"FixedWindow">> is missing
    Effect.runPromise(program)
  })

  it("a custom capability that writes fixed windows satisfies acquire", () => {
    const program = EXPORT_ROWS.acquire(7, 100).pipe(
      Effect.provide(Capability.layer({ write: [FixedWindow.entity] })),
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

  it("names are typed", () => {
    expectTypeOf(LOGINS.acquire).parameter(0).toEqualTypeOf<string>()
    // @ts-expect-error a string limiter takes string names
    LOGINS.acquire(5, 1)
    expectTypeOf(EXPORT_ROWS.acquire).parameter(0).toEqualTypeOf<number>()
    // @ts-expect-error a number limiter takes number names
    EXPORT_ROWS.acquire("tenant", 1)
    const BYTES = FixedWindow.make<Uint8Array>("bytes", 1, "1 second")
    expectTypeOf(BYTES.acquire).parameter(0).toEqualTypeOf<Uint8Array>()
    const BIG = FixedWindow.make<bigint>("big", 1, "1 second")
    expectTypeOf(BIG.acquire).parameter(0).toEqualTypeOf<bigint>()
  })
})
