import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as HttpApi from "@effect/platform/HttpApi"
import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import * as HttpApiEndpoint from "@effect/platform/HttpApiEndpoint"
import * as HttpApiGroup from "@effect/platform/HttpApiGroup"
import * as HttpApiMiddleware from "@effect/platform/HttpApiMiddleware"
import { Context, Effect, Layer, Schema } from "effect"
import { createServer } from "node:http"
import { describe, expectTypeOf, it } from "vitest"
import { Capability, FixedWindow, Rate, Redis, TokenBucket } from "wakuwaku"
import { RateLimit } from "wakuwaku/http"

const LOGINS = TokenBucket.make<string>("login", 20, Rate.make(1, "3 seconds"))
const HOURLY = FixedWindow.make<string>("hourly", 1000, "1 hour")

class LoginLimit extends HttpApiMiddleware.Tag<LoginLimit>()("LoginLimit", {
  failure: RateLimit.RateLimitExceeded
}) {}

class CurrentUser extends Context.Tag("CurrentUser")<CurrentUser, { readonly id: string; readonly paid: boolean }>() {}
class Plans extends Context.Tag("Plans")<Plans, { readonly of: (id: string) => Effect.Effect<boolean> }>() {}

type TBWrite = Capability.Write<Capability.Entity<"TokenBucket">>
type FWWrite = Capability.Write<Capability.Entity<"FixedWindow">>
type Needs<T> = T extends Effect.Effect<infer _A, infer _E, infer R> ? R : never

const api = HttpApi.make("api").add(
  HttpApiGroup.make("accounts").add(HttpApiEndpoint.post("login", "/login").addSuccess(Schema.String)).middleware(
    LoginLimit
  )
)
const handlers = HttpApiBuilder.group(api, "accounts", (h) => h.handle("login", () => Effect.succeed("welcome")))

describe("RateLimit.apiMiddleware keeps the limiters' requirements in the layer", () => {
  it("a token bucket: Layer<LoginLimit, never, Redis | Write<TokenBucket.Entity>>", () => {
    const LoginLimitLive = RateLimit.apiMiddleware(LoginLimit, {
      limiter: LOGINS,
      key: RateLimit.clientIp(),
      onStoreFailure: "fail-closed"
    })
    expectTypeOf(LoginLimitLive).toEqualTypeOf<Layer.Layer<LoginLimit, never, Redis.Redis | TBWrite>>()
  })

  it("several limiters: the union of their requirements", () => {
    const layer = RateLimit.apiMiddleware(LoginLimit, { limiter: [LOGINS, HOURLY], onStoreFailure: "fail-open" })
    expectTypeOf(layer).toEqualTypeOf<Layer.Layer<LoginLimit, never, Redis.Redis | TBWrite | FWWrite>>()
  })

  it("choose: every limiter it may choose, its own services; those read from the request are not asked", () => {
    const fromRequest = RateLimit.apiMiddleware(LoginLimit, {
      choose: () => Effect.map(CurrentUser, (user) => ({ limiter: user.paid ? HOURLY : LOGINS, key: user.id })),
      fromRequest: [CurrentUser],
      onStoreFailure: "fail-closed"
    })
    expectTypeOf(fromRequest).toEqualTypeOf<Layer.Layer<LoginLimit, never, Redis.Redis | TBWrite | FWWrite>>()
    // Without fromRequest, the layer would need the user when it is built: it says so.
    const built = RateLimit.apiMiddleware(LoginLimit, {
      choose: () => Effect.map(CurrentUser, (user) => ({ limiter: LOGINS, key: user.id })),
      onStoreFailure: "fail-closed"
    })
    expectTypeOf<Layer.Layer.Context<typeof built>>().toEqualTypeOf<CurrentUser | Redis.Redis | TBWrite>()
    // A service of the layer's own stays asked of it.
    const plans = RateLimit.apiMiddleware(LoginLimit, {
      choose: (request) =>
        Effect.flatMap(Plans, (p) => p.of(request.url)).pipe(
          Effect.map((paid) => ({ limiter: paid ? [LOGINS, HOURLY] as const : LOGINS, key: request.url }))
        ),
      onStoreFailure: "fail-closed"
    })
    expectTypeOf<Layer.Layer.Context<typeof plans>>().toEqualTypeOf<Plans | Redis.Redis | TBWrite | FWWrite>()
  })

  it("a key, a cost or a choice that can fail does not fit: the middleware fails with RateLimitExceeded only", () => {
    RateLimit.apiMiddleware(LoginLimit, {
      limiter: LOGINS,
      // @ts-expect-error the key's failure has nowhere to go
      key: () => Effect.fail("no key"),
      onStoreFailure: "fail-closed"
    })
    // @ts-expect-error the choice's failure has nowhere to go
    RateLimit.apiMiddleware(LoginLimit, {
      choose: () => Effect.fail("no plan"),
      onStoreFailure: "fail-closed"
    })
  })

  it("a middleware whose failure is not RateLimitExceeded does not fit", () => {
    class Other extends HttpApiMiddleware.Tag<Other>()("Other", { failure: Schema.String }) {}
    // @ts-expect-error Other fails with a string
    RateLimit.apiMiddleware(Other, { limiter: LOGINS, onStoreFailure: "fail-closed" })
  })
})

describe("a server built with the layer", () => {
  const LoginLimitLive = RateLimit.apiMiddleware(LoginLimit, { limiter: LOGINS, onStoreFailure: "fail-closed" })
  const server = HttpApiBuilder.serve().pipe(
    Layer.provide(HttpApiBuilder.api(api).pipe(Layer.provide(handlers), Layer.provide(LoginLimitLive))),
    Layer.provide(NodeHttpServer.layer(() => createServer(), { port: 0 }))
  )

  it("needs Redis and Write<TokenBucket.Entity>", () => {
    expectTypeOf<Layer.Layer.Context<typeof server>>().toEqualTypeOf<Redis.Redis | TBWrite>()
  })

  it("does not compile with only Redis.layerReadOnly: Write<TokenBucket.Entity> is left", () => {
    const onReplica = Layer.launch(server.pipe(Layer.provide(Redis.layerReadOnly({ url: "redis://replica:6379" }))))
    expectTypeOf<Needs<typeof onReplica>>().toEqualTypeOf<TBWrite>()
    // @ts-expect-error Write<Entity<"TokenBucket">> is missing
    NodeRuntime.runMain(onReplica)
  })

  it("does not compile with only Redis.layerMemoryReadOnly either", () => {
    const onMemory = Layer.launch(server.pipe(Layer.provide(Redis.layerMemoryReadOnly())))
    expectTypeOf<Needs<typeof onMemory>>().toEqualTypeOf<TBWrite>()
    // @ts-expect-error Write<Entity<"TokenBucket">> is missing
    NodeRuntime.runMain(onMemory)
  })

  it("launches with a primary, or with the right to write token buckets only", () => {
    const onPrimary = Layer.launch(server.pipe(Layer.provide(Redis.layer({ url: "redis://primary:6379" }))))
    expectTypeOf<Needs<typeof onPrimary>>().toEqualTypeOf<never>()
    const limiterOnly = Layer.launch(
      server.pipe(
        Layer.provide(Capability.layer({ write: [TokenBucket.entity] })),
        Layer.provide(Redis.layerMemoryReadOnly())
      )
    )
    expectTypeOf<Needs<typeof limiterOnly>>().toEqualTypeOf<never>()
  })
})
