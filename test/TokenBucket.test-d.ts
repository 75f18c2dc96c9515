import { Context, Duration, Effect } from "effect"
import { describe, expectTypeOf, it } from "vitest"
import { Capability, Rate, Redis, TokenBucket } from "wakuwaku"

const LOGINS = TokenBucket.make<string>("login", 20, Rate.make(1, "3 seconds"))
const EXPORT_ROWS = TokenBucket.make<number>("export-rows", 10_000, Rate.perSecond(50))
const Other = Capability.entity("Other")
type Other = typeof Other

type R<T> = T extends Effect.Effect<infer _A, infer _E, infer R> ? R : never

describe("TokenBucket requirements", () => {
  it("acquire and reset need Redis | Write<TokenBucket.Entity>, peek needs Read", () => {
    expectTypeOf<R<ReturnType<typeof LOGINS.acquire>>>().toEqualTypeOf<
      Redis.Redis | Capability.Write<TokenBucket.Entity>
    >()
    expectTypeOf<R<ReturnType<typeof LOGINS.reset>>>().toEqualTypeOf<
      Redis.Redis | Capability.Write<TokenBucket.Entity>
    >()
    expectTypeOf<R<ReturnType<typeof LOGINS.peek>>>().toEqualTypeOf<
      Redis.Redis | Capability.Read<TokenBucket.Entity>
    >()
  })

  it("results and errors are typed", () => {
    expectTypeOf(LOGINS.acquire("a", 1)).toEqualTypeOf<
      Effect.Effect<
        TokenBucket.Admission,
        Redis.RedisError | Redis.InvalidInput,
        Redis.Redis | Capability.Write<TokenBucket.Entity>
      >
    >()
    expectTypeOf<Effect.Effect.Success<ReturnType<typeof LOGINS.reset>>>().toEqualTypeOf<boolean>()
    expectTypeOf<Effect.Effect.Success<ReturnType<typeof LOGINS.peek>>>().toEqualTypeOf<number>()
  })

  it("with only the read-only capability, acquire leaves Write<TokenBucket.Entity> and does not run", () => {
    const program = LOGINS.acquire("203.0.113.7", 1).pipe(Effect.provide(Redis.layerReadOnly()))
    expectTypeOf<R<typeof program>>().toEqualTypeOf<Capability.Write<TokenBucket.Entity>>()
    // @ts-expect-error Write<Entity<"TokenBucket">> is missing
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

  it("a custom capability that writes another entity but not token buckets leaves Write<TokenBucket.Entity>", () => {
    const program = EXPORT_ROWS.acquire(7, 100).pipe(
      Effect.provide(Capability.layer({ read: "all", write: [Other] })),
      Effect.provide(Redis.layerReadOnly())
    )
    expectTypeOf<R<typeof program>>().toEqualTypeOf<Capability.Write<TokenBucket.Entity>>()
    // @ts-expect-error Write<Entity<"TokenBucket">> is missing
    Effect.runPromise(program)
  })

  it("a custom capability that writes token buckets satisfies acquire", () => {
    const program = EXPORT_ROWS.acquire(7, 100).pipe(
      Effect.provide(Capability.layer({ write: [TokenBucket.entity] })),
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
    // @ts-expect-error a string bucket takes string names
    LOGINS.acquire(5, 1)
    expectTypeOf(EXPORT_ROWS.acquire).parameter(0).toEqualTypeOf<number>()
    // @ts-expect-error a number bucket takes number names
    EXPORT_ROWS.acquire("tenant", 1)
    const BYTES = TokenBucket.make<Uint8Array>("bytes", 1, Rate.perSecond(1))
    expectTypeOf(BYTES.acquire).parameter(0).toEqualTypeOf<Uint8Array>()
    const BIG = TokenBucket.make<bigint>("big", 1, Rate.perSecond(1))
    expectTypeOf(BIG.acquire).parameter(0).toEqualTypeOf<bigint>()
  })

  it("reserve and refund need Redis | Write<TokenBucket.Entity>, and are typed", () => {
    expectTypeOf(LOGINS.reserve("a", 1, "2 seconds")).toEqualTypeOf<
      Effect.Effect<
        TokenBucket.Reservation,
        Redis.RedisError | Redis.InvalidInput,
        Redis.Redis | Capability.Write<TokenBucket.Entity>
      >
    >()
    expectTypeOf(LOGINS.refund("a", 1)).toEqualTypeOf<
      Effect.Effect<number, Redis.RedisError | Redis.InvalidInput, Redis.Redis | Capability.Write<TokenBucket.Entity>>
    >()
    expectTypeOf(LOGINS.reserve).parameter(2).toEqualTypeOf<Duration.DurationInput>()
    // @ts-expect-error a string bucket takes string names
    LOGINS.reserve(5, 1, 0)
    // @ts-expect-error a number bucket takes number names
    EXPORT_ROWS.refund("tenant", 1)
  })

  it("cancel takes a Granted reservation, needs Redis | Write<TokenBucket.Entity>, and says whether it reclaimed", () => {
    const granted = TokenBucket.Reservation.Granted({ wait: Duration.zero, cost: 1, grantedAt: 0, level: 0 })
    expectTypeOf(granted).toEqualTypeOf<TokenBucket.Granted>()
    expectTypeOf(LOGINS.cancel("a", granted)).toEqualTypeOf<
      Effect.Effect<boolean, Redis.RedisError | Redis.InvalidInput, Redis.Redis | Capability.Write<TokenBucket.Entity>>
    >()
    const reservation = LOGINS.reserve("a", 1, "1 second")
    // A reservation may have been refused: only a Granted one goes back.
    Effect.flatMap(reservation, (r) => r._tag === "Granted" ? LOGINS.cancel("a", r) : Effect.succeed(false))
    // @ts-expect-error a Refused reservation has nothing to give back
    Effect.flatMap(reservation, (r) => LOGINS.cancel("a", r))
    // @ts-expect-error a cost is not a reservation: refund gives tokens back by their number
    LOGINS.cancel("a", 1)
    const onReplica = LOGINS.cancel("a", granted).pipe(Effect.provide(Redis.layerReadOnly()))
    expectTypeOf<R<typeof onReplica>>().toEqualTypeOf<Capability.Write<TokenBucket.Entity>>()
  })

  it("with only the read-only capability, reserve and refund leave Write<TokenBucket.Entity> and do not run", () => {
    const reserve = LOGINS.reserve("a", 1, "1 second").pipe(Effect.provide(Redis.layerReadOnly()))
    expectTypeOf<R<typeof reserve>>().toEqualTypeOf<Capability.Write<TokenBucket.Entity>>()
    // @ts-expect-error Write<Entity<"TokenBucket">> is missing
    Effect.runPromise(reserve)
    const refund = LOGINS.refund("a", 1).pipe(Effect.provide(Redis.layerReadOnly()))
    expectTypeOf<R<typeof refund>>().toEqualTypeOf<Capability.Write<TokenBucket.Entity>>()
    // @ts-expect-error Write<Entity<"TokenBucket">> is missing
    Effect.runPromise(refund)
  })

  it("throttle keeps the effect's A, E and R and adds the bucket's requirements, in both forms", () => {
    class Partner extends Context.Tag("Partner")<Partner, { readonly call: Effect.Effect<string, PartnerDown> }>() {}
    class PartnerDown {
      readonly _tag = "PartnerDown"
    }
    const call = Effect.flatMap(Partner, (partner) => partner.call)
    type Expected = Effect.Effect<
      string,
      PartnerDown | TokenBucket.RateLimited | Redis.RedisError | Redis.InvalidInput,
      Partner | Redis.Redis | Capability.Write<TokenBucket.Entity>
    >
    expectTypeOf(TokenBucket.throttle(LOGINS, "a")(call)).toEqualTypeOf<Expected>()
    expectTypeOf(call.pipe(TokenBucket.throttle(LOGINS, "a", { cost: 2, maxWait: "5 seconds" }))).toEqualTypeOf<
      Expected
    >()
    expectTypeOf(TokenBucket.throttle(call, LOGINS, "a", { maxWait: Duration.seconds(5) })).toEqualTypeOf<Expected>()
    // Read-only access leaves the write, and the effect's own service, unprovided.
    const onReplica = TokenBucket.throttle(call, LOGINS, "a").pipe(Effect.provide(Redis.layerReadOnly()))
    expectTypeOf<R<typeof onReplica>>().toEqualTypeOf<Partner | Capability.Write<TokenBucket.Entity>>()
    const provided = onReplica.pipe(Effect.provideService(Partner, { call: Effect.succeed("ok") }))
    expectTypeOf<R<typeof provided>>().toEqualTypeOf<Capability.Write<TokenBucket.Entity>>()
    // @ts-expect-error Write<Entity<"TokenBucket">> is missing
    Effect.runPromise(provided)
    // @ts-expect-error a string bucket takes string names
    TokenBucket.throttle(call, LOGINS, 5)
  })
})
