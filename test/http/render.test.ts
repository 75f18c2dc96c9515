/**
 * The one verdict renderer (src/internal/http/render.ts) that the middlewares and the proxy both emit: a
 * refusal's exact status, header lines and problem body, for real verdicts of a limit on the embedded store
 * (429, 413) and on a failing one (503 under fail-closed).
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Logger, LogLevel } from "effect"
import { Rate, Redis, TokenBucket } from "wakuwaku"
import * as decision from "../../src/internal/http/decision.js"
import * as render from "../../src/internal/http/render.js"
import { freshNamespace } from "../support/redis.js"

const down: Redis.Service = {
  [Redis.TypeId]: Redis.TypeId,
  script: () => Effect.fail(new Redis.RedisError({ reason: "Connection", operation: "test", cause: "down" })),
  command: () => Effect.fail(new Redis.RedisError({ reason: "Connection", operation: "test", cause: "down" })),
  dedicated: () => Effect.dieMessage("unused")
}

describe("render.refusal: a verdict as it goes on the wire", () => {
  it.effect("a 429: Retry-After, both fields, the quota-exceeded problem naming the policy", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const limiter = TokenBucket.make<string>(ns, 1, Rate.make(1, "1 minute"))
      const limit = decision.make({ limiter, onStoreFailure: "fail-closed" })
      expect((yield* limit.decide("client", 1)).pass).toBe(true)
      const verdict = yield* limit.decide("client", 1)
      expect(render.refusal(limit.field, verdict)).toStrictEqual({
        status: 429,
        headers: {
          "content-type": "application/problem+json",
          "ratelimit-policy": `"${ns}";q=1;w=60`,
          "ratelimit": `"${ns}";r=0;t=60`,
          "retry-after": "60"
        },
        body: JSON.stringify({
          type: "https://iana.org/assignments/http-problem-types#quota-exceeded",
          title: "Quota Exceeded",
          status: 429,
          "violated-policies": [ns]
        })
      })
    }).pipe(Effect.provide(Redis.layerMemory())))

  it.effect("a 413: no Retry-After nor RateLimit item, the cost-above-quota problem with the cost and the quota", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const limiter = TokenBucket.make<string>(ns, 3, Rate.make(1, "1 minute"))
      const limit = decision.make({ limiter, onStoreFailure: "fail-closed" })
      const verdict = yield* limit.decide("client", 5)
      expect(render.refusal(limit.field, verdict)).toStrictEqual({
        status: 413,
        headers: { "content-type": "application/problem+json", "ratelimit-policy": `"${ns}";q=3;w=180` },
        body: JSON.stringify({
          type: "tag:wakuwaku,2026:cost-above-quota",
          title: "Cost Above the Quota",
          status: 413,
          detail: "This request costs 5 and the policy allows at most 3 at once: split it.",
          cost: 5,
          quota: 3,
          "violated-policies": [ns]
        })
      })
    }).pipe(Effect.provide(Redis.layerMemory())))

  it.effect("a 503 under fail-closed: the policy field only, the generic problem", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const limiter = TokenBucket.make<string>(ns, 2, Rate.make(1, "1 second"))
      const limit = decision.make({ limiter, onStoreFailure: "fail-closed" })
      const verdict = yield* limit.decide("client", 1).pipe(Effect.provideService(Redis.Redis, down))
      expect(verdict.decision).toBe("fail-closed")
      expect(render.refusal(limit.field, verdict)).toStrictEqual({
        status: 503,
        headers: { "content-type": "application/problem+json", "ratelimit-policy": `"${ns}";q=2;w=2` },
        body: JSON.stringify({
          type: "about:blank",
          title: "Service Unavailable",
          status: 503,
          detail: "The rate limiter's store is unavailable."
        })
      })
    }).pipe(Effect.provide(Redis.layerMemory()), Logger.withMinimumLogLevel(LogLevel.None)))

  it("each refusal has headers of its own, which a front end may add to", () => {
    const verdict = {
      decision: "denied",
      pass: false,
      status: 429,
      limit: "\"a\";r=0;t=3",
      retryAfter: 3,
      body: "{}",
      remaining: undefined,
      policy: "a",
      violated: ["a"],
      wouldDeny: []
    } as const
    const one = render.refusal("\"a\";q=1;w=3", verdict)
    const two = render.refusal("\"a\";q=1;w=3", verdict)
    expect(one.headers).not.toBe(two.headers)
    one.headers["proxy-status"] = "wakuwaku; error=http_request_error"
    expect(two.headers).toStrictEqual({
      "content-type": "application/problem+json",
      "ratelimit-policy": "\"a\";q=1;w=3",
      "ratelimit": "\"a\";r=0;t=3",
      "retry-after": "3"
    })
  })
})
