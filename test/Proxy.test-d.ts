import type * as NodeHttpClient from "@effect/platform-node/NodeHttpClient"
import type * as HttpApp from "@effect/platform/HttpApp"
import type * as HttpServer from "@effect/platform/HttpServer"
import type * as HttpServerError from "@effect/platform/HttpServerError"
import { Effect, Layer } from "effect"
import { describe, expectTypeOf, it } from "vitest"
import { Capability, Rate, Redis, TokenBucket } from "wakuwaku"
import { RateLimit } from "wakuwaku/http"
import * as Proxy from "wakuwaku/Proxy"

const LIMIT = TokenBucket.make<string>("edge", 20, Rate.make(1, "3 seconds"))
const forward = Proxy.make({ upstream: "http://127.0.0.1:3000" })
const limited = RateLimit.middleware({ limiter: LIMIT, onStoreFailure: "fail-closed" })(forward)

describe("Proxy types", () => {
  it("make is an app that needs only the agents it forwards over and never fails", () => {
    expectTypeOf(forward).toEqualTypeOf<HttpApp.Default<never, NodeHttpClient.HttpAgent>>()
  })

  it("serve provides the agents and keeps the limiter's requirements", () => {
    const layer = Proxy.serve(limited, { port: 0 })
    expectTypeOf(layer).toEqualTypeOf<
      Layer.Layer<HttpServer.HttpServer, HttpServerError.ServeError, Redis.Redis | Capability.Write<TokenBucket.Entity>>
    >()
    expectTypeOf(Layer.provide(layer, Redis.layerMemory())).toEqualTypeOf<
      Layer.Layer<HttpServer.HttpServer, HttpServerError.ServeError, never>
    >()
    // Both forms of the duals give the same types.
    expectTypeOf(forward.pipe(RateLimit.middleware({ limiter: LIMIT, onStoreFailure: "fail-closed" }))).toEqualTypeOf(
      RateLimit.middleware(forward, { limiter: LIMIT, onStoreFailure: "fail-closed" })
    )
    expectTypeOf(RateLimit.middleware(forward, { limiter: LIMIT, onStoreFailure: "fail-closed" })).toEqualTypeOf(
      limited
    )
    expectTypeOf(limited.pipe(Proxy.serve({ port: 0 }))).toEqualTypeOf(layer)
    // A read-only replica cannot serve the limiter: the write capability is left over.
    expectTypeOf<Layer.Layer.Context<ReturnType<typeof onReplica>>>().toEqualTypeOf<
      Capability.Write<TokenBucket.Entity>
    >()
  })
})

describe("Proxy.layer types", () => {
  it("keeps the limiter's requirements; an embedded store grants them", () => {
    const layer = Proxy.layer({
      upstream: "http://127.0.0.1:3000",
      port: 0,
      rateLimit: { limiter: LIMIT, onStoreFailure: "fail-closed" }
    })
    expectTypeOf(layer).toEqualTypeOf<
      Layer.Layer<Proxy.Server, Proxy.ListenError, Redis.Redis | Capability.Write<TokenBucket.Entity>>
    >()
    expectTypeOf(Layer.provide(layer, Redis.layerMemory())).toEqualTypeOf<
      Layer.Layer<Proxy.Server, Proxy.ListenError, never>
    >()
    // @ts-expect-error: a read-only replica cannot serve the limiter
    Layer.launch(Layer.provide(layer, Redis.layerReadOnly({ url: "redis://replica:6379" }))).pipe(Effect.runFork)
    expectTypeOf<Layer.Layer.Context<ReturnType<typeof layerOnReplica>>>().toEqualTypeOf<
      Capability.Write<TokenBucket.Entity>
    >()
  })
})

const layerOnReplica = () =>
  Layer.provide(
    Proxy.layer({ upstream: "http://x", port: 0, rateLimit: { limiter: LIMIT, onStoreFailure: "fail-open" } }),
    Redis.layerReadOnly({ url: "redis://replica:6379" })
  )

const onReplica = () =>
  Layer.provide(Proxy.serve(limited, { port: 0 }), Redis.layerReadOnly({ url: "redis://replica:6379" }))
