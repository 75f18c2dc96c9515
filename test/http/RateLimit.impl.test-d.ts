/**
 * `RateLimit.middleware`'s declared signature against its implementation's typed forms
 * (src/internal/http/rateLimit.ts: `limited`, `chosen`, `limitedOn`, `chosenOn`, whose types the compiler
 * computes from the code that runs). Each form of the signature, called with options whose key, cost and
 * choice each add an error and a service of their own, gives exactly what its form gives: a signature that
 * drifts from the implementation (an error or a requirement added or dropped) fails here.
 */
import type * as HttpApp from "@effect/platform/HttpApp"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import { Context, Effect } from "effect"
import { describe, expectTypeOf, it } from "vitest"
import { type Capability, FixedWindow, Rate, type Redis, TokenBucket } from "wakuwaku"
import { RateLimit } from "wakuwaku/http"
import * as internal from "../../src/internal/http/rateLimit.js"

type TBWrite = Capability.Write<Capability.Entity<"TokenBucket">>
type FWWrite = Capability.Write<Capability.Entity<"FixedWindow">>

const LOGINS = TokenBucket.make<string>("login", 20, Rate.make(1, "3 seconds"))
const PER_IP = FixedWindow.make<string>("per-ip", 10, "1 second")

class AppService extends Context.Tag("AppService")<AppService, number>() {}
class KeyService extends Context.Tag("KeyService")<KeyService, string>() {}
class CostService extends Context.Tag("CostService")<CostService, number>() {}
class ChoiceService extends Context.Tag("ChoiceService")<ChoiceService, boolean>() {}
class AppError {
  readonly _tag = "AppError"
}
class KeyError {
  readonly _tag = "KeyError"
}
class CostError {
  readonly _tag = "CostError"
}
class ChoiceError {
  readonly _tag = "ChoiceError"
}

const app: HttpApp.Default<AppError, AppService> = Effect.flatMap(
  AppService,
  (n) => n > 0 ? Effect.succeed(HttpServerResponse.text("ok")) : Effect.fail(new AppError())
)

const key = () => Effect.flatMap(KeyService, (k) => k === "" ? Effect.fail(new KeyError()) : Effect.succeed(k))
const cost = () => Effect.flatMap(CostService, (c) => c < 0 ? Effect.fail(new CostError()) : Effect.succeed(c))
const choose = () =>
  Effect.flatMap(
    ChoiceService,
    (big) => big ? Effect.succeed({ limiter: PER_IP, key: "a" }) : Effect.fail(new ChoiceError())
  )

const limitedOptions = { limiter: [LOGINS, PER_IP], key, cost, onStoreFailure: "fail-open" } as const
const chosenOptions = { choose, cost, onStoreFailure: "fail-closed" } as const

describe("RateLimit.middleware is what its implementation gives", () => {
  it("middleware(options)(app), with limiters: the form `limited`", () => {
    expectTypeOf(RateLimit.middleware(limitedOptions)(app)).toEqualTypeOf(internal.limited(limitedOptions)(app))
  })

  it("middleware(options)(app), with choose: the form `chosen`", () => {
    expectTypeOf(RateLimit.middleware(chosenOptions)(app)).toEqualTypeOf(internal.chosen(chosenOptions)(app))
  })

  it("middleware(app, options), with limiters: the form `limitedOn`", () => {
    expectTypeOf(RateLimit.middleware(app, limitedOptions)).toEqualTypeOf(internal.limitedOn(app, limitedOptions))
  })

  it("middleware(app, options), with choose: the form `chosenOn`", () => {
    expectTypeOf(RateLimit.middleware(app, chosenOptions)).toEqualTypeOf(internal.chosenOn(app, chosenOptions))
  })

  it("the forms carry every part's errors and needs (so the comparisons above compare something)", () => {
    expectTypeOf(internal.limitedOn(app, limitedOptions)).toEqualTypeOf<
      HttpApp.Default<
        AppError | KeyError | CostError | Redis.InvalidInput,
        AppService | KeyService | CostService | Redis.Redis | TBWrite | FWWrite
      >
    >()
    expectTypeOf(internal.chosenOn(app, chosenOptions)).toEqualTypeOf<
      HttpApp.Default<
        AppError | ChoiceError | CostError | Redis.InvalidInput,
        AppService | ChoiceService | CostService | Redis.Redis | FWWrite
      >
    >()
  })
})
