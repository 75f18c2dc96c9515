/**
 * The load test's own target, when it is given none: a local upstream and, in front of it in this
 * process, the rate-limiting reverse proxy of `wakuwaku proxy`, limiting by client IP with the
 * configured policy, on the embedded memory store or on Redis (the Redis at REDIS_URL, else a
 * throwaway `redis-server`).
 */
import { Context, Duration, Effect, Layer } from "effect"
import type { Scope } from "effect"
import { randomBytes } from "node:crypto"
import { FixedWindow, Rate, Redis, TokenBucket } from "wakuwaku"
import { RateLimit } from "wakuwaku/http"
import * as Proxy from "wakuwaku/Proxy"
import { RedisServer } from "wakuwaku/testing"
import type { Policy } from "./theory.js"
import { startUpstream } from "./upstream.js"

export type Store = "memory" | "redis"

export interface TargetOptions {
  readonly policy: Policy
  readonly store: Store
  /** For `store: "redis"`: this server instead of a throwaway one. */
  readonly redisUrl?: string | undefined
}

export interface Target {
  /** Where to send the attack. */
  readonly url: string
  /** One line: what answers there. */
  readonly description: string
}

/** The limiter for a policy, in a namespace of its own (so runs on one Redis never share counts). */
export const limiterOf = (policy: Policy, namespace: string) =>
  policy.algorithm === "fixed-window"
    ? FixedWindow.make<string>(namespace, policy.limit, Duration.millis(policy.windowMs))
    : TokenBucket.make<string>(
      namespace,
      policy.capacity,
      Rate.make(policy.refillTokens, Duration.millis(policy.refillPeriodMs))
    )

export const describePolicy = (policy: Policy): string =>
  policy.algorithm === "fixed-window"
    ? `fixed window, ${policy.limit} per ${Duration.format(Duration.millis(policy.windowMs))}`
    : `token bucket, capacity ${policy.capacity}, refill ${policy.refillTokens} per ${
      Duration.format(Duration.millis(policy.refillPeriodMs))
    }`

/** The store's layer and a line saying which store it is. */
const storeOf = (options: TargetOptions) =>
  Effect.gen(function*() {
    if (options.store === "memory") {
      return { layer: Redis.layerMemory(), description: "the embedded memory store" }
    }
    const fromEnv = options.redisUrl ?? process.env["REDIS_URL"]
    if (fromEnv !== undefined && fromEnv !== "") {
      return { layer: Redis.layer({ url: fromEnv }), description: `the Redis at ${fromEnv}` }
    }
    const server = yield* RedisServer.make()
    return {
      layer: Redis.layer({ url: server.url }),
      description: `a throwaway redis-server at ${server.url} (pid ${server.pid})`
    }
  })

/**
 * Starts the upstream and, in front of it, the proxy (`Proxy.layer` with the rate limit, keyed by client IP,
 * on a free loopback port, as `wakuwaku proxy` runs it); both stop with the scope. A store failure is a 503
 * (`fail-closed`), so the report shows it rather than hiding it.
 */
export const startTarget = (
  options: TargetOptions
): Effect.Effect<Target, RedisServer.RedisServerError | Redis.RedisError | Proxy.ListenError, Scope.Scope> =>
  Effect.gen(function*() {
    const store = yield* storeOf(options)
    const upstream = yield* Effect.acquireRelease(Effect.promise(() => startUpstream()), (u) => Effect.promise(u.close))
    const limiter: RateLimit.Limiter<TokenBucket.Requirements<"write"> | FixedWindow.Requirements<"write">> = limiterOf(
      options.policy,
      `loadtest-${randomBytes(4).toString("hex")}`
    )
    const context = yield* Layer.build(
      Proxy.layer({
        upstream: upstream.url,
        port: 0,
        host: "127.0.0.1",
        shutdownTimeout: "1 second",
        rateLimit: { limiter, onStoreFailure: "fail-closed" }
      }).pipe(Layer.provide(store.layer))
    )
    const url = `http://127.0.0.1:${Context.get(context, Proxy.Server).address.port}/`
    return {
      url,
      description:
        `an in-process proxy at ${url} (${describePolicy(options.policy)} per client IP, on ${store.description}) ` +
        `in front of an upstream at ${upstream.url}`
    }
  })
