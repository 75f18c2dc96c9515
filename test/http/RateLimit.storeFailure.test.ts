/**
 * `onStoreFailure`, each policy with its own redis-server stopped mid-run: the first request is decided
 * by Redis, the server is stopped, and the next requests show the policy: 503, passing through with a
 * log line and a metric, or a bounded local fallback.
 */
import type * as HttpApp from "@effect/platform/HttpApp"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import { describe, expect, it } from "@effect/vitest"
import { type Context, Effect, Exit, HashMap, Layer, List, Logger, LogLevel, Metric, Scope } from "effect"
import { Rate, Redis, TokenBucket } from "wakuwaku"
import { RateLimit } from "wakuwaku/http"
import { RedisServer } from "wakuwaku/testing"
import { fields, get, serve } from "../support/http.js"
import { freshNamespace } from "../support/redis.js"

const hello = Effect.succeed(HttpServerResponse.text("hello"))

const count = (policy: string, decision: RateLimit.Decision) =>
  Effect.map(
    Metric.value(RateLimit.decisions.pipe(Metric.tagged("policy", policy), Metric.tagged("decision", decision))),
    (state) => state.count
  )

const failures = (policy: string, reason: Redis.RedisErrorReason) =>
  Effect.map(
    Metric.value(RateLimit.storeFailures.pipe(Metric.tagged("policy", policy), Metric.tagged("reason", reason))),
    (state) => state.count
  )

interface Logged {
  readonly level: string
  readonly message: unknown
  readonly annotations: Record<string, unknown>
}

/**
 * A throwaway redis-server in a scope of its own, so the test can stop it, and a client of it with
 * short timeouts, held for the test's scope. Returns the client's context and the stop.
 */
const redisToStop = Effect.gen(function*() {
  const serverScope = yield* Scope.make()
  yield* Effect.addFinalizer(() => Scope.close(serverScope, Exit.void))
  const server = yield* Scope.extend(RedisServer.make(), serverScope)
  const client = yield* Layer.build(
    Redis.layer({
      url: server.url,
      commandTimeout: "500 millis",
      connectTimeout: "500 millis",
      quitTimeout: "100 millis"
    })
  )
  return {
    client,
    stop: Scope.close(serverScope, Exit.void),
    // The same port again: a new, empty server, which the client finds by itself.
    restart: RedisServer.make({ port: server.port })
  }
})

/** Serves `app` with the client, recording log lines. */
const serveLogged = <E, R extends Redis.ReadWrite>(
  app: HttpApp.Default<E, R>,
  client: Context.Context<Redis.ReadWrite>
) =>
  Effect.gen(function*() {
    const logged: Array<Logged> = []
    const logger = Logger.make(({ annotations, logLevel, message }) => {
      logged.push({
        level: logLevel.label,
        message: List.isList(message) ? List.toArray(message) : message,
        annotations: Object.fromEntries(HashMap.toEntries(annotations))
      })
    })
    const served = yield* serve(app).pipe(
      Effect.provide(client),
      Effect.provide(Logger.replace(Logger.defaultLogger, logger)),
      Logger.withMinimumLogLevel(LogLevel.Debug)
    )
    return { ...served, logged }
  })

describe("RateLimit onStoreFailure, with Redis stopped mid-run", () => {
  it.scoped("fail-closed: 503 with the policy, a log line and a metric", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const limiter = TokenBucket.make<string>(ns, 3, Rate.make(1, "100 seconds"))
      const { client, stop } = yield* redisToStop
      const { logged, v4 } = yield* serveLogged(
        RateLimit.middleware({ limiter, onStoreFailure: "fail-closed" })(hello),
        client
      )
      const policy = `"${ns}";q=3;w=300`

      expect(fields(yield* get(v4))).toEqual({ status: 200, policy, limit: `"${ns}";r=2;t=100`, retryAfter: undefined })
      yield* stop
      const down = yield* get(v4)
      expect(fields(down)).toEqual({ status: 503, policy, limit: undefined, retryAfter: undefined })
      expect(down.headers["content-type"]).toBe("application/problem+json")
      expect(down.body).toBe(JSON.stringify({
        type: "about:blank",
        title: "Service Unavailable",
        status: 503,
        detail: "The rate limiter's store is unavailable."
      }))
      expect(yield* count(ns, "fail-closed")).toBe(1)
      expect(logged.filter((line) => line.annotations["ratelimit.policy"] === ns)).toMatchObject([
        {
          level: "WARN",
          message: [
            expect.stringMatching(
              /^wakuwaku\/http: the rate limiter's store failed \((Connection|Timeout): .+\); requests are refused with 503 until it answers \(fail-closed\)$/
            )
          ],
          annotations: { "ratelimit.policy": ns, "ratelimit.onStoreFailure": "fail-closed" }
        }
      ])
    }))

  it.scoped("fail-open: the request passes with the policy only, a log line and a metric", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const limiter = TokenBucket.make<string>(ns, 1, Rate.make(1, "100 seconds"))
      const { client, stop } = yield* redisToStop
      const { logged, v4 } = yield* serveLogged(
        RateLimit.middleware({ limiter, onStoreFailure: "fail-open" })(hello),
        client
      )
      const policy = `"${ns}";q=1;w=100`

      expect(fields(yield* get(v4))).toEqual({ status: 200, policy, limit: `"${ns}";r=0;t=100`, retryAfter: undefined })
      expect(fields(yield* get(v4))).toMatchObject({ status: 429 })
      yield* stop
      // The bucket is empty, but the store cannot say so: open means through.
      const replies = [yield* get(v4), yield* get(v4)]
      expect(replies.map(fields)).toEqual([
        { status: 200, policy, limit: undefined, retryAfter: undefined },
        { status: 200, policy, limit: undefined, retryAfter: undefined }
      ])
      expect(replies.map((reply) => reply.body)).toEqual(["hello", "hello"])
      expect(yield* count(ns, "fail-open")).toBe(2)
      const total = (yield* failures(ns, "Connection")) + (yield* failures(ns, "Timeout"))
      expect(total).toBe(2)
      // Two failures, one outage: one line.
      const lines = logged.filter((line) => line.annotations["ratelimit.policy"] === ns)
      expect(lines).toHaveLength(1)
      expect(lines[0]).toMatchObject({
        level: "WARN",
        message: [
          expect.stringMatching(
            /^wakuwaku\/http: the rate limiter's store failed \((Connection|Timeout): .+\); requests pass until it answers \(fail-open\)$/
          )
        ],
        annotations: { "ratelimit.policy": ns, "ratelimit.onStoreFailure": "fail-open" }
      })
    }))

  it.scoped("a bounded local fallback: decisions go on in memory, capped at maxEntries names", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const limiter = TokenBucket.make<string>(ns, 2, Rate.make(1, "100 seconds"))
      const fallback = RateLimit.fallback({ maxEntries: 3 })
      const { client, stop } = yield* redisToStop
      const key = RateLimit.clientIp({ trustedProxies: ["127.0.0.1"] })
      const { logged, v4 } = yield* serveLogged(
        RateLimit.middleware({ limiter, key, onStoreFailure: fallback })(hello),
        client
      )
      const policy = `"${ns}";q=2;w=200`
      const from = (address: string) => get(v4, { "x-forwarded-for": address })

      expect(fields(yield* from("203.0.113.1"))).toMatchObject({ status: 200, limit: `"${ns}";r=1;t=100` })
      yield* stop
      // The fallback knows nothing of Redis's count: the name starts with a full bucket here.
      const replies = [yield* from("203.0.113.1"), yield* from("203.0.113.1"), yield* from("203.0.113.1")]
      expect(replies.map(fields)).toEqual([
        { status: 200, policy, limit: `"${ns}";r=1;t=100`, retryAfter: undefined },
        { status: 200, policy, limit: `"${ns}";r=0;t=200`, retryAfter: undefined },
        { status: 429, policy, limit: `"${ns}";r=0;t=100`, retryAfter: "100" }
      ])
      for (const address of ["203.0.113.2", "203.0.113.3", "203.0.113.4", "203.0.113.5"]) {
        expect((yield* from(address)).status).toBe(200)
      }
      expect(fallback.store.size).toBe(3)
      // 203.0.113.1 was evicted to make room: it starts afresh.
      expect(fields(yield* from("203.0.113.1"))).toMatchObject({ status: 200, limit: `"${ns}";r=1;t=100` })
      expect(yield* count(ns, "allowed")).toBe(1)
      expect(yield* count(ns, "fallback-allowed")).toBe(7)
      expect(yield* count(ns, "fallback-denied")).toBe(1)
      // Eight failures, one outage: one line.
      expect(logged.filter((line) => line.annotations["ratelimit.policy"] === ns)).toHaveLength(1)
      expect(logged.find((line) => line.annotations["ratelimit.policy"] === ns)).toMatchObject({
        level: "WARN",
        message: [
          expect.stringMatching(
            /^wakuwaku\/http: the rate limiter's store failed \((Connection|Timeout): .+\); the local fallback decides until it answers$/
          )
        ],
        annotations: { "ratelimit.onStoreFailure": "fallback" }
      })
    }))

  it.scopedLive(
    "an outage is logged twice, when the store fails and when it answers again, whatever the requests",
    () =>
      Effect.gen(function*() {
        const ns = freshNamespace()
        const limiter = TokenBucket.make<string>(ns, 100, Rate.make(1, "100 seconds"))
        const { client, restart, stop } = yield* redisToStop
        const { logged, v4 } = yield* serveLogged(
          RateLimit.middleware({ limiter, onStoreFailure: RateLimit.fallback({ maxEntries: 10 }) })(hello),
          client
        )
        expect((yield* get(v4)).status).toBe(200)
        yield* stop
        for (let i = 0; i < 20; i++) expect((yield* get(v4)).status).toBe(200)
        yield* restart
        // Until a request is decided by Redis again (the client reconnects with a backoff of its own).
        const restarted = performance.now()
        while ((yield* count(ns, "allowed")) < 2 && performance.now() - restarted < 15_000) {
          expect((yield* get(v4)).status).toBe(200)
          yield* Effect.sleep("25 millis")
        }
        for (let i = 0; i < 10; i++) expect((yield* get(v4)).status).toBe(200)
        const lines = logged.filter((line) => line.annotations["ratelimit.policy"] === ns)
        expect(lines.map((line) => line.level)).toEqual(["WARN", "INFO"])
        const failed = yield* count(ns, "fallback-allowed")
        expect(failed).toBeGreaterThanOrEqual(20)
        expect(lines[1]).toMatchObject({
          message: [
            expect.stringMatching(
              new RegExp(
                `^wakuwaku/http: the rate limiter's store answers again, after ${failed} failed calls ` +
                  "\\((Connection|Timeout): .+\\)$"
              )
            )
          ],
          annotations: { "ratelimit.policy": ns, "ratelimit.onStoreFailure": "fallback" }
        })
      }),
    30_000
  )
})
