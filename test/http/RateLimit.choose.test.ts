/**
 * A policy per request on `RateLimit.middleware`: `choose` reads the user an authenticating middleware in
 * front provided and picks the plan's limiter and the user's key. Two plans, two users: each is limited by
 * its own plan, and the fields, the metrics and the span name the plan that was applied.
 */
import type * as HttpApp from "@effect/platform/HttpApp"
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import { expect } from "@effect/vitest"
import { Context, Effect, Metric } from "effect"
import { Rate, TokenBucket } from "wakuwaku"
import { RateLimit } from "wakuwaku/http"
import { forEachBackend } from "../support/backends.js"
import { fields, get, recordingTracer, serve } from "../support/http.js"
import { freshNamespace } from "../support/redis.js"

interface User {
  readonly id: string
  readonly plan: "free" | "paid"
}
class CurrentUser extends Context.Tag("CurrentUser")<CurrentUser, User>() {}

const users: Record<string, User> = {
  "token-ann": { id: "ann", plan: "free" },
  "token-bob": { id: "bob", plan: "paid" }
}

/** The middleware in front: the user of the bearer token, or 401. */
const authenticate = <E, R>(app: HttpApp.Default<E, R>) =>
  Effect.flatMap(HttpServerRequest.HttpServerRequest, (request) => {
    const user = users[(request.headers["authorization"] ?? "").replace(/^Bearer /, "")]
    return user === undefined
      ? Effect.succeed(HttpServerResponse.empty({ status: 401 }))
      : Effect.provideService(app, CurrentUser, user)
  })

const hello = Effect.succeed(HttpServerResponse.text("hello"))

const count = (policy: string, decision: RateLimit.Decision) =>
  Effect.map(
    Metric.value(RateLimit.decisions.pipe(Metric.tagged("policy", policy), Metric.tagged("decision", decision))),
    (state) => state.count
  )

forEachBackend("RateLimit.middleware, choose", (it) => {
  it.scoped("two plans, two users: each user limited by its plan; fields, metrics and spans name the plan", () =>
    Effect.gen(function*() {
      const plans = {
        free: TokenBucket.make<string>(freshNamespace("free"), 3, Rate.make(1, "100 seconds")),
        paid: TokenBucket.make<string>(freshNamespace("paid"), 10, Rate.make(1, "10 seconds"))
      }
      const { spans, tracer } = yield* recordingTracer
      const limited = RateLimit.middleware({
        choose: () => Effect.map(CurrentUser, (user) => ({ limiter: plans[user.plan], key: user.id })),
        onStoreFailure: "fail-closed"
      })(hello)
      const { v4 } = yield* serve(authenticate(limited)).pipe(Effect.withTracer(tracer))
      const as = (token: string) => get(v4, { authorization: `Bearer ${token}` })

      const ann = []
      for (let i = 0; i < 4; i++) ann.push(fields(yield* as("token-ann")))
      const bob = []
      for (let i = 0; i < 4; i++) bob.push(fields(yield* as("token-bob")))
      const free = `"${plans.free.namespace}";q=3;w=300`
      const paid = `"${plans.paid.namespace}";q=10;w=100`
      expect(ann).toEqual([
        { status: 200, policy: free, limit: `"${plans.free.namespace}";r=2;t=100`, retryAfter: undefined },
        { status: 200, policy: free, limit: `"${plans.free.namespace}";r=1;t=200`, retryAfter: undefined },
        { status: 200, policy: free, limit: `"${plans.free.namespace}";r=0;t=300`, retryAfter: undefined },
        { status: 429, policy: free, limit: `"${plans.free.namespace}";r=0;t=100`, retryAfter: "100" }
      ])
      expect(bob).toEqual([1, 2, 3, 4].map((i) => ({
        status: 200,
        policy: paid,
        limit: `"${plans.paid.namespace}";r=${10 - i};t=${10 * i}`,
        retryAfter: undefined
      })))
      // Ann's bucket is keyed by her id: Bob's plan is untouched by her denial, and hers by his calls.
      expect([yield* plans.free.peek("ann"), yield* plans.paid.peek("bob")]).toEqual([0, 6])
      const denied = yield* as("token-ann")
      expect(JSON.parse(denied.body)["violated-policies"]).toEqual([plans.free.namespace])

      expect([yield* count(plans.free.namespace, "allowed"), yield* count(plans.free.namespace, "denied")]).toEqual([
        3,
        2
      ])
      expect([yield* count(plans.paid.namespace, "allowed"), yield* count(plans.paid.namespace, "denied")]).toEqual([
        4,
        0
      ])
      const policies = spans.flatMap((span) => {
        const policy = span.attributes.get("ratelimit.policy")
        return policy === undefined ? [] : [[policy, span.attributes.get("ratelimit.decision")]]
      })
      expect(policies).toEqual([
        ...[1, 2, 3].map(() => [plans.free.namespace, "allowed"]),
        [plans.free.namespace, "denied"],
        ...[1, 2, 3, 4].map(() => [plans.paid.namespace, "allowed"]),
        [plans.free.namespace, "denied"]
      ])
      // Nobody: the authentication's 401, before the limit is asked.
      expect((yield* as("nobody")).status).toBe(401)
    }))

  it.scoped("a choice may be several limiters, and a plain value; each limiter is prepared once", () =>
    Effect.gen(function*() {
      const burst = TokenBucket.make<string>(freshNamespace("burst"), 2, Rate.make(1, "100 seconds"))
      const daily = TokenBucket.make<string>(freshNamespace("daily"), 5, Rate.make(1, "1000 seconds"))
      const limited = RateLimit.middleware({
        choose: (request) =>
          request.headers["x-plan"] === "strict"
            ? { limiter: [burst, daily] as const, key: "k" }
            : { limiter: daily, key: "k" },
        onStoreFailure: "fail-closed"
      })(hello)
      const { v4 } = yield* serve(limited)
      expect(fields(yield* get(v4, { "x-plan": "strict" }))).toEqual({
        status: 200,
        policy: `"${burst.namespace}";q=2;w=200, "${daily.namespace}";q=5;w=5000`,
        limit: `"${burst.namespace}";r=1;t=100`,
        retryAfter: undefined
      })
      expect(fields(yield* get(v4))).toEqual({
        status: 200,
        policy: `"${daily.namespace}";q=5;w=5000`,
        limit: `"${daily.namespace}";r=3;t=2000`,
        retryAfter: undefined
      })
      // A fresh array per request is the same group: its limiters were prepared when first chosen.
      yield* get(v4, { "x-plan": "strict" })
      expect(fields(yield* get(v4, { "x-plan": "strict" }))).toMatchObject({
        status: 429,
        limit: `"${burst.namespace}";r=0;t=100`
      })
      expect(yield* daily.peek("k")).toBe(2)
    }))
})
