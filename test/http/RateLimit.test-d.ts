import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import type * as HttpApp from "@effect/platform/HttpApp"
import * as HttpServer from "@effect/platform/HttpServer"
import type * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import { Context, Effect, Layer } from "effect"
import { createServer } from "node:http"
import { describe, expectTypeOf, it } from "vitest"
import { Capability, FixedWindow, Limiter, Rate, Redis, TokenBucket } from "wakuwaku"
import { RateLimit } from "wakuwaku/http"

const LOGINS = TokenBucket.make<string>("login", 20, Rate.make(1, "3 seconds"))
const PER_IP = FixedWindow.make<string>("per-ip", 10, "1 second")
const hello = Effect.succeed(HttpServerResponse.text("hello"))

class Users extends Context.Tag("Users")<Users, { readonly find: (id: string) => Effect.Effect<string> }>() {}
class Tenants extends Context.Tag("Tenants")<Tenants, { readonly of: (key: string) => Effect.Effect<string> }>() {}
class Unauthorised {
  readonly _tag = "Unauthorised"
}

/** An app that needs a service of its own and can fail. */
const app: HttpApp.Default<Unauthorised, Users> = Effect.flatMap(Users, (users) => users.find("me")).pipe(
  Effect.flatMap((name) =>
    name === "" ? Effect.fail(new Unauthorised()) : Effect.succeed(HttpServerResponse.text(name))
  )
)

type TBWrite = Capability.Write<Capability.Entity<"TokenBucket">>
type FWWrite = Capability.Write<Capability.Entity<"FixedWindow">>
type Needs<T> = T extends Effect.Effect<infer _A, infer _E, infer R> ? R : never
type Failure<T> = T extends Effect.Effect<infer _A, infer E, infer _R> ? E : never

describe("RateLimit.middleware keeps requirements and errors", () => {
  it("adds the limiter's requirements to the app's, and InvalidInput to its errors", () => {
    const limited = RateLimit.middleware({ limiter: LOGINS, onStoreFailure: "fail-closed" })(app)
    expectTypeOf<Needs<typeof limited>>().toEqualTypeOf<
      Users | Redis.Redis | TBWrite | HttpServerRequest.HttpServerRequest
    >()
    expectTypeOf<Failure<typeof limited>>().toEqualTypeOf<Unauthorised | Redis.InvalidInput>()
    expectTypeOf(limited).toEqualTypeOf<
      HttpApp.Default<Unauthorised | Redis.InvalidInput, Users | Redis.Redis | TBWrite>
    >()
  })

  it("a fixed window needs Write<FixedWindow.Entity>", () => {
    const limited = RateLimit.middleware({ limiter: PER_IP, onStoreFailure: RateLimit.fallback({ maxEntries: 100 }) })(
      hello
    )
    expectTypeOf<Needs<typeof limited>>().toEqualTypeOf<
      Redis.Redis | FWWrite | HttpServerRequest.HttpServerRequest
    >()
  })

  it("a key or a cost that needs a service or can fail adds to R and E; plain functions add nothing", () => {
    class NoTenant {
      readonly _tag = "NoTenant"
    }
    const limited = RateLimit.middleware({
      limiter: LOGINS,
      key: (request) =>
        Effect.flatMap(Tenants, (tenants) => tenants.of(request.headers["x-api-key"] ?? "")).pipe(
          Effect.filterOrFail((tenant) => tenant !== "", () => new NoTenant())
        ),
      cost: (request) => Number(request.headers["x-rows"] ?? "1"),
      onStoreFailure: "fail-open"
    })(hello)
    expectTypeOf<Needs<typeof limited>>().toEqualTypeOf<
      Tenants | Redis.Redis | TBWrite | HttpServerRequest.HttpServerRequest
    >()
    expectTypeOf<Failure<typeof limited>>().toEqualTypeOf<NoTenant | Redis.InvalidInput>()
    const plain = RateLimit.middleware({
      limiter: LOGINS,
      key: RateLimit.header("x-api-key"),
      onStoreFailure: "fail-open"
    })(hello)
    expectTypeOf<Failure<typeof plain>>().toEqualTypeOf<Redis.InvalidInput>()
  })

  it("a limiter keyed by something other than strings does not fit", () => {
    const byNumber = TokenBucket.make<number>("tenant", 10, Rate.perSecond(1))
    // @ts-expect-error the middleware keys by string
    RateLimit.middleware({ limiter: byNumber, onStoreFailure: "fail-open" })
  })

  it("a value that no limiter kind made does not fit: it lacks the shared type id", () => {
    const lookalike = { namespace: "login", acquire: LOGINS.acquire }
    // @ts-expect-error Limiter.TypeId is missing
    RateLimit.middleware({ limiter: lookalike, onStoreFailure: "fail-open" })
    // @ts-expect-error Limiter.TypeId is missing
    RateLimit.middleware({ limiter: [LOGINS, lookalike], onStoreFailure: "fail-open" })
    const limiter: RateLimit.Limiter<TBWrite | Redis.Redis> = LOGINS
    expectTypeOf(limiter[Limiter.TypeId]).toEqualTypeOf<Limiter.Description>()
  })

  it("onStoreFailure is required and closed", () => {
    // @ts-expect-error onStoreFailure is missing
    RateLimit.middleware({ limiter: LOGINS })
    // @ts-expect-error not a policy
    RateLimit.middleware({ limiter: LOGINS, onStoreFailure: "ignore" })
  })
})

describe("RateLimit.middleware with several limiters, or a policy per request", () => {
  it("several limiters: the union of their requirements", () => {
    const limited = RateLimit.middleware({ limiter: [LOGINS, PER_IP], onStoreFailure: "fail-closed" })(app)
    expectTypeOf(limited).toEqualTypeOf<
      HttpApp.Default<Unauthorised | Redis.InvalidInput, Users | Redis.Redis | TBWrite | FWWrite>
    >()
  })

  it("choose: the union of every limiter it may choose, with its own services and errors", () => {
    class NoPlan {
      readonly _tag = "NoPlan"
    }
    const limited = RateLimit.middleware({
      choose: (request) =>
        Effect.flatMap(Tenants, (tenants) => tenants.of(request.headers["x-api-key"] ?? "")).pipe(
          Effect.filterOrFail((tenant) => tenant !== "", () => new NoPlan()),
          Effect.map((tenant) => ({ limiter: tenant === "big" ? PER_IP : LOGINS, key: tenant }))
        ),
      onStoreFailure: "fail-closed"
    })(hello)
    expectTypeOf(limited).toEqualTypeOf<
      HttpApp.Default<NoPlan | Redis.InvalidInput, Tenants | Redis.Redis | TBWrite | FWWrite>
    >()
    // A plain choice, in two branches of which one is several limiters.
    const plain = RateLimit.middleware({
      choose: (request) =>
        request.headers["x-paid"] === "1"
          ? { limiter: [LOGINS, PER_IP] as const, key: "paid" }
          : { limiter: LOGINS, key: "free" },
      onStoreFailure: "fail-open"
    })(hello)
    expectTypeOf(plain).toEqualTypeOf<HttpApp.Default<Redis.InvalidInput, Redis.Redis | TBWrite | FWWrite>>()
  })

  it("an empty list, a limiter with choose, or a key with choose does not compile", () => {
    // @ts-expect-error at least one limiter
    RateLimit.middleware({ limiter: [], onStoreFailure: "fail-open" })
    // @ts-expect-error either a limiter or choose
    RateLimit.middleware({
      limiter: LOGINS,
      choose: () => ({ limiter: LOGINS, key: "k" }),
      onStoreFailure: "fail-open"
    })
    // @ts-expect-error choose picks the key
    RateLimit.middleware({ choose: () => ({ limiter: LOGINS, key: "k" }), key: () => "k", onStoreFailure: "fail-open" })
  })
})

describe("the server built with the middleware", () => {
  const limited = RateLimit.middleware({ limiter: LOGINS, onStoreFailure: "fail-closed" })(hello)
  const server = HttpServer.serve(limited).pipe(Layer.provide(NodeHttpServer.layer(() => createServer(), { port: 0 })))

  it("needs Redis and Write<TokenBucket.Entity>", () => {
    expectTypeOf<Layer.Layer.Context<typeof server>>().toEqualTypeOf<Redis.Redis | TBWrite>()
  })

  it("cannot be launched with only a read-only capability: Write<TokenBucket.Entity> is left", () => {
    const onReplica = Layer.launch(server.pipe(Layer.provide(Redis.layerReadOnly({ url: "redis://replica:6379" }))))
    expectTypeOf<Needs<typeof onReplica>>().toEqualTypeOf<TBWrite>()
    // @ts-expect-error Write<Entity<"TokenBucket">> is missing
    NodeRuntime.runMain(onReplica)
    const withReadOnlyCapability = Layer.launch(
      server.pipe(Layer.provide(Capability.ReadOnly), Layer.provide(Redis.layerMemoryReadOnly()))
    )
    expectTypeOf<Needs<typeof withReadOnlyCapability>>().toEqualTypeOf<TBWrite>()
  })

  it("launches with a primary, or with the right to write token buckets only", () => {
    const onPrimary = Layer.launch(server.pipe(Layer.provide(Redis.layer({ url: "redis://primary:6379" }))))
    expectTypeOf<Needs<typeof onPrimary>>().toEqualTypeOf<never>()
    NodeRuntime.runMain(onPrimary)
    const limiterOnly = Layer.launch(
      server.pipe(
        Layer.provide(Capability.layer({ write: [TokenBucket.entity] })),
        Layer.provide(Redis.layerReadOnly({ url: "redis://replica:6379" }))
      )
    )
    expectTypeOf<Needs<typeof limiterOnly>>().toEqualTypeOf<never>()
  })

  it("as HttpServer.serve's middleware argument, it keeps R", () => {
    const served = HttpServer.serve(hello, RateLimit.middleware({ limiter: PER_IP, onStoreFailure: "fail-closed" }))
    expectTypeOf<Layer.Layer.Context<typeof served>>().toEqualTypeOf<HttpServer.HttpServer | Redis.Redis | FWWrite>()
  })
})
