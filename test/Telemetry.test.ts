/**
 * Telemetry (src/Telemetry.ts, src/internal/telemetry.ts) through a real OpenTelemetry SDK
 * (`@effect/opentelemetry`'s NodeSdk, in-memory span and metric exporters): span names, attributes (exact
 * values), parent-child links (a decision span is the parent of its store request's client span; a batch's
 * span links the other calls it carried), metric names and labels; on the embedded backend and on a real
 * redis-server. Also: spans are off by default and metrics on; `metrics: false` counts nothing.
 */
import { NodeSdk } from "@effect/opentelemetry"
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import { describe, expect, it } from "@effect/vitest"
import { SpanKind } from "@opentelemetry/api"
import type { ResourceMetrics } from "@opentelemetry/sdk-metrics"
import {
  AggregationTemporality,
  InMemoryMetricExporter,
  PeriodicExportingMetricReader
} from "@opentelemetry/sdk-metrics"
import { InMemorySpanExporter, type ReadableSpan, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base"
import { Effect, Layer, Metric, Schema, Stream } from "effect"
import { Redis as IORedis } from "ioredis"
import { FixedWindow, Limits, Lock, Pipe, Rate, Redis, Telemetry, TokenBucket } from "wakuwaku"
import { RateLimit } from "wakuwaku/http"
import * as limits from "../src/internal/limits.js"
import { keysMatching } from "./support/backends.js"
import { freshNamespace, redisUrl } from "./support/redis.js"

const CLIENT = SpanKind.CLIENT
const INTERNAL = 0 // SpanKind.INTERNAL

/** An SDK with in-memory exporters, and what they hold once `effect` has run with it. */
const withSdk = <A, E>(
  effect: Effect.Effect<A, E, Redis.ReadWrite>,
  store: Layer.Layer<Redis.ReadWrite, Redis.RedisError>,
  /** What to set with `Telemetry.layer`; null: nothing (the defaults). */
  settings: Telemetry.Options | null = { spans: true }
) => {
  const spans = new InMemorySpanExporter()
  const metrics = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE)
  const reader = new PeriodicExportingMetricReader({ exporter: metrics, exportIntervalMillis: 3_600_000 })
  const sdk = NodeSdk.layer(() => ({
    resource: { serviceName: "telemetry-test" },
    spanProcessor: new SimpleSpanProcessor(spans),
    metricReader: reader
  }))
  const layers = settings === null
    ? Layer.mergeAll(sdk, store)
    : Layer.mergeAll(sdk, store, Telemetry.layer(settings))
  return Effect.gen(function*() {
    // Read while the SDK is up: its shutdown empties the exporters. A SimpleSpanProcessor exports each span
    // as it ends.
    const [value, exported, finished] = yield* Effect.provide(
      Effect.flatMap(effect, (value) =>
        Effect.promise(() => reader.forceFlush()).pipe(
          Effect.map(() => [value, metrics.getMetrics(), [...spans.getFinishedSpans()]] as const)
        )),
      layers
    )
    return { value, exported, spans: finished }
  })
}

const byName = (spans: ReadonlyArray<ReadableSpan>, name: string) => spans.filter((s) => s.name === name)
const one = (spans: ReadonlyArray<ReadableSpan>, name: string) => {
  const found = byName(spans, name)
  expect(found.map((s) => s.name)).toEqual([name])
  return found[0]!
}
const parentOf = (span: ReadableSpan) => span.parentSpanContext?.spanId

/** A data point of metric `name` whose attributes include `labels`, from the last export. */
const point = (exported: ReadonlyArray<ResourceMetrics>, name: string, labels: Record<string, string>) => {
  const last = exported[exported.length - 1]
  const metric = last?.scopeMetrics.flatMap((s) => s.metrics).find((m) => m.descriptor.name === name)
  return metric?.dataPoints.find((p) => Object.entries(labels).every(([k, v]) => p.attributes[k] === v))
}

const STORES: ReadonlyArray<
  {
    readonly name: string
    readonly layer: () => Layer.Layer<Redis.ReadWrite, Redis.RedisError>
    readonly system: string
  }
> = [
  { name: "memory", layer: () => Redis.layerMemory(), system: "wakuwaku.memory" },
  { name: "Redis", layer: () => Redis.layer({ url: redisUrl }), system: "redis" }
]

const server = new URL(redisUrl)

for (const store of STORES) {
  describe(`Telemetry on ${store.name}`, () => {
    it.live("an allowed acquire: its decision span is the parent of its client span, with exact attributes", () =>
      Effect.gen(function*() {
        const ns = freshNamespace()
        const bucket = TokenBucket.make<string>(ns, 5, Rate.perSecond(1))
        const { spans, value } = yield* withSdk(bucket.acquire("alice", 2), store.layer())
        expect(value._tag).toBe("Allowed")
        const decision = one(spans, "TokenBucket.acquire")
        expect(decision.kind).toBe(INTERNAL)
        expect(decision.attributes).toEqual({
          "wakuwaku.kind": "TokenBucket",
          "wakuwaku.policy": ns,
          "wakuwaku.cost": 2,
          "wakuwaku.decision": "allowed",
          "wakuwaku.remaining": 3
        })
        const call = one(spans, "EVALSHA TokenBucket.acquire")
        expect(call.kind).toBe(CLIENT)
        expect(parentOf(call)).toBe(decision.spanContext().spanId)
        expect(call.spanContext().traceId).toBe(decision.spanContext().traceId)
        expect(call.attributes).toEqual({
          "db.system.name": store.system,
          "db.operation.name": "EVALSHA",
          "db.query.summary": "EVALSHA TokenBucket.acquire",
          "wakuwaku.script": "TokenBucket.acquire",
          ...(store.name === "Redis" ? { "server.address": server.hostname, "server.port": Number(server.port) } : {})
        })
      }))

    it.live("a reservation is a decision too: TokenBucket.reserve, granted then refused, with exact attributes", () =>
      Effect.gen(function*() {
        const ns = freshNamespace()
        const bucket = TokenBucket.make<string>(ns, 5, Rate.make(1, "1 hour"))
        const { spans } = yield* withSdk(
          Effect.zipRight(bucket.reserve("carol", 3, "0 millis"), bucket.reserve("carol", 3, "0 millis")),
          store.layer()
        )
        const [granted, refused] = byName(spans, "TokenBucket.reserve")
        expect(granted!.attributes).toEqual({
          "wakuwaku.kind": "TokenBucket",
          "wakuwaku.policy": ns,
          "wakuwaku.cost": 3,
          "wakuwaku.decision": "allowed",
          "wakuwaku.remaining": 2
        })
        // One token short at 1 an hour: an hour less the milliseconds since the first reservation.
        const retry = refused!.attributes["wakuwaku.retry_after_ms"]
        expect(retry).toBeGreaterThan(3_599_000)
        expect(retry).toBeLessThanOrEqual(3_600_000)
        expect(refused!.attributes).toEqual({
          "wakuwaku.kind": "TokenBucket",
          "wakuwaku.policy": ns,
          "wakuwaku.cost": 3,
          "wakuwaku.decision": "denied",
          "wakuwaku.denied_by": ns,
          "wakuwaku.retry_after_ms": retry
        })
        const calls = byName(spans, "EVALSHA TokenBucket.reserve")
        expect(calls.map(parentOf)).toEqual([granted!.spanContext().spanId, refused!.spanContext().spanId])
      }))

    it.live("a denied acquire: decision, retry-after and the policy that denied", () =>
      Effect.gen(function*() {
        const ns = freshNamespace()
        const window = FixedWindow.make<string>(ns, 1, "1 hour")
        const { spans } = yield* withSdk(
          Effect.zipRight(window.acquire("bob", 1), window.acquire("bob", 1)),
          store.layer()
        )
        const [allowed, denied] = byName(spans, "FixedWindow.acquire")
        expect(allowed!.attributes["wakuwaku.decision"]).toBe("allowed")
        expect(denied!.attributes["wakuwaku.kind"]).toBe("FixedWindow")
        expect(denied!.attributes["wakuwaku.decision"]).toBe("denied")
        expect(denied!.attributes["wakuwaku.denied_by"]).toBe(ns)
        // Until the window ends (windows are aligned on the epoch).
        const retry = denied!.attributes["wakuwaku.retry_after_ms"] as number
        const started = denied!.startTime[0] * 1000 + denied!.startTime[1] / 1e6
        // Redis's clock and this process's may differ by a few ms.
        expect(Math.abs(retry - (3_600_000 - (started % 3_600_000)))).toBeLessThan(50)
        // A cost above the quota can never be allowed: -1.
        const { spans: never } = yield* withSdk(window.acquire("carol", 2), store.layer())
        expect(one(never, "FixedWindow.acquire").attributes["wakuwaku.retry_after_ms"]).toBe(-1)
      }))

    it.live("a group (Limits): one decision span over both policies, the one that denied, one client span", () =>
      Effect.gen(function*() {
        const a = TokenBucket.make<string>(freshNamespace(), 5, Rate.perSecond(1))
        const b = FixedWindow.make<string>(freshNamespace(), 1, "1 hour")
        const group = [a, b] as unknown as ReadonlyArray<limits.AnyLimiter>
        const { spans, value } = yield* withSdk(
          Effect.zipRight(limits.acquire(group, "n", 1), limits.acquire(group, "n", 1)),
          store.layer()
        )
        expect(value.allowed).toBe(false)
        const [first, second] = byName(spans, "Limits.acquire")
        expect(first!.attributes).toEqual({
          "wakuwaku.kind": "Limits",
          "wakuwaku.policy": `${a.namespace},${b.namespace}`,
          "wakuwaku.cost": 1,
          "wakuwaku.decision": "allowed",
          "wakuwaku.remaining": 0
        })
        expect(second!.attributes["wakuwaku.decision"]).toBe("denied")
        expect(second!.attributes["wakuwaku.denied_by"]).toBe(b.namespace)
        const calls = byName(spans, "EVALSHA Limits.acquire")
        expect(calls.map(parentOf)).toEqual([first!.spanContext().spanId, second!.spanContext().spanId])
      }))

    it.live("a store failure: the decision span names its reason, the client span its error.type", () =>
      Effect.gen(function*() {
        const bucket = TokenBucket.make<string>(freshNamespace(), 5, Rate.perSecond(1))
        const key = (bucket as unknown as limits.AnyLimiter).keyOf("acquire", "x") as string
        // A key of the wrong type makes the script fail on either backend.
        const failing = Effect.zipRight(
          Effect.flatMap(Redis.Redis, (redis) => redis.command("SET", [key, "not a hash", "PX", "60000"])),
          Effect.exit(bucket.acquire("x", 1))
        )
        const { spans, value } = yield* withSdk(failing, store.layer())
        expect(value._tag).toBe("Failure")
        const decision = one(spans, "TokenBucket.acquire")
        expect(decision.attributes["wakuwaku.store.failure"]).toBe("Script")
        expect(decision.status.code).toBe(2) // ERROR
        const call = one(spans, "EVALSHA TokenBucket.acquire")
        expect(call.attributes["error.type"]).toBe("Script")
        expect(parentOf(call)).toBe(decision.spanContext().spanId)
      }))

    it.live("a lock: acquire (waited, outcome) and hold spans, and its store calls under them", () =>
      Effect.gen(function*() {
        const ns = freshNamespace()
        const lock = Lock.make<string>(ns, "10 seconds")
        const { spans } = yield* withSdk(Lock.withLock(lock, "job")(Effect.void), store.layer())
        const acquire = one(spans, "Lock.acquire")
        expect(acquire.attributes["wakuwaku.kind"]).toBe("Lock")
        expect(acquire.attributes["wakuwaku.policy"]).toBe(ns)
        expect(acquire.attributes["wakuwaku.lock"]).toBe(`Lock(${ns})`)
        expect(acquire.attributes["wakuwaku.lease.outcome"]).toBe("acquired")
        expect(typeof acquire.attributes["wakuwaku.lease.wait_ms"]).toBe("number")
        const hold = one(spans, "Lock.hold")
        expect(hold.attributes["wakuwaku.kind"]).toBe("Lock")
        expect(hold.attributes["wakuwaku.policy"]).toBe(ns)
        // The release is registered when the lease is granted, inside the acquisition: its request is a child of it.
        const calls = spans.filter((s) => s.kind === CLIENT)
        expect(calls.map((c) => [c.name, parentOf(c)])).toEqual([
          ["EVALSHA Lock.acquire", acquire.spanContext().spanId],
          ["EVALSHA Lock.release", acquire.spanContext().spanId]
        ])
        const nanos = ([sec, ns]: readonly [number, number]) => BigInt(sec) * 1_000_000_000n + BigInt(ns)
        expect(nanos(hold.startTime) >= nanos(acquire.endTime)).toBe(true)
      }))

    it.live("a lease lost while held: counted by reason, on its hold span; the wait counted by outcome", () =>
      Effect.gen(function*() {
        const ns = freshNamespace()
        const lock = Lock.make<string>(ns, "300 millis")
        // Another party deletes the lease's key: the next renewal finds it is no longer ours (Expired).
        const stolen = Effect.flatMap(
          keysMatching(`*${ns}*`),
          (keys) => Effect.flatMap(Redis.Redis, (redis) => redis.command("DEL", keys))
        )
        const { exported, spans, value } = yield* withSdk(
          Effect.exit(Lock.withLock(lock, "job")(Effect.zipRight(stolen, Effect.never))),
          store.layer()
        )
        expect(value._tag).toBe("Failure")
        expect(one(spans, "Lock.hold").attributes["wakuwaku.lease.lost_reason"]).toBe("Expired")
        const labels = { kind: "Lock", policy: ns }
        expect(point(exported, "wakuwaku_lease_lost", { ...labels, reason: "Expired" })?.value).toBe(1)
        const waited = point(exported, "wakuwaku_lease_wait_seconds", { ...labels, outcome: "acquired", unit: "s" })
        expect((waited?.value as { count: number } | undefined)?.count).toBe(1)
        const held = point(exported, "wakuwaku_lease_hold_seconds", { ...labels, unit: "s" })
        expect((held?.value as { count: number } | undefined)?.count).toBe(1)
      }))

    it.live("a pipe: send and receive spans; messages counted by operation", () =>
      Effect.gen(function*() {
        const ns = freshNamespace()
        const pipe = Pipe.make<string, string>(ns, Schema.String, "10 seconds")
        const { exported, spans } = yield* withSdk(
          Effect.gen(function*() {
            yield* pipe.send("p", "hello")
            yield* pipe.close("p")
            return yield* Stream.runCollect(pipe.receive("p"))
          }),
          store.layer()
        )
        const send = one(spans, "Pipe.send")
        expect(send.attributes).toEqual({
          "wakuwaku.kind": "Pipe",
          "wakuwaku.policy": ns,
          "wakuwaku.pipe.operation": "send"
        })
        expect(byName(spans, "EVALSHA Pipe.send").map(parentOf)).toEqual([send.spanContext().spanId])
        expect(byName(spans, "Pipe.receive").length).toBe(2) // the message, then the end
        const counted = (operation: string) =>
          point(exported, "wakuwaku_pipe_messages", { policy: ns, operation })?.value
        expect([counted("send"), counted("receive"), counted("abandoned")]).toEqual([1, 1, undefined])
      }))
  })
}

describe("Telemetry: batches on Redis", () => {
  it.live("a request carrying several calls: parent the first call's span, links the others, batch size", () =>
    Effect.gen(function*() {
      const bucket = TokenBucket.make<string>(freshNamespace(), 100, Rate.perSecond(1))
      const n = 64
      const { spans } = yield* withSdk(
        Effect.forEach(Array.from({ length: n }, (_, i) => `k${i}`), (k) => bucket.acquire(k, 1), {
          concurrency: "unbounded"
        }),
        Redis.layer({ url: redisUrl })
      )
      const decisions = byName(spans, "TokenBucket.acquire")
      expect(decisions.length).toBe(n)
      const calls = spans.filter((s) => s.kind === CLIENT)
      const batches = calls.filter((c) => c.attributes["db.operation.batch.size"] !== undefined)
      expect(batches.length).toBeGreaterThan(0)
      for (const batch of batches) {
        expect(batch.attributes["wakuwaku.script"]).toBe("TokenBucket.acquireMany")
        expect(batch.links.length).toBe((batch.attributes["db.operation.batch.size"] as number) - 1)
      }
      // Every decision is the parent of one request, or a link of one: each exactly once.
      const carried = calls.flatMap((c) => [parentOf(c), ...c.links.map((l) => l.context.spanId)])
      expect(carried.sort()).toEqual(decisions.map((d) => d.spanContext().spanId).sort())
      const sizes = calls.map((c) => (c.attributes["db.operation.batch.size"] as number | undefined) ?? 1)
      expect(sizes.reduce((a, b) => a + b, 0)).toBe(n)
    }))
})

describe("Telemetry: defaults and settings", () => {
  it.live("by default: no span of ours (even with a tracer), and nothing counted", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const bucket = TokenBucket.make<string>(ns, 1, Rate.perSecond(1))
      const { exported, spans } = yield* withSdk(
        Effect.zipRight(bucket.acquire("a", 1), bucket.acquire("a", 1)).pipe(Effect.withSpan("request")),
        Redis.layerMemory(),
        null
      )
      expect(spans.map((s) => s.name)).toEqual(["request"])
      expect(point(exported, "wakuwaku_limiter_decisions", { policy: ns })).toBeUndefined()
    }))

  it.live("Telemetry.layer({}): metrics, no spans; decisions counted by kind, policy and decision", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const bucket = TokenBucket.make<string>(ns, 1, Rate.perSecond(1))
      const { exported, spans } = yield* withSdk(
        Effect.zipRight(bucket.acquire("a", 1), bucket.acquire("a", 1)).pipe(Effect.withSpan("request")),
        Redis.layerMemory(),
        {}
      )
      expect(spans.map((s) => s.name)).toEqual(["request"])
      // Through the SDK's exporter: the names and labels of the contract.
      const labels = { kind: "TokenBucket", policy: ns }
      expect(point(exported, "wakuwaku_limiter_decisions", { ...labels, decision: "allowed" })?.value).toBe(1)
      expect(point(exported, "wakuwaku_limiter_decisions", { ...labels, decision: "denied" })?.value).toBe(1)
      const duration = point(exported, "db.client.operation.duration", {
        "db.system.name": "wakuwaku.memory",
        "db.operation.name": "EVALSHA",
        unit: "s"
      })
      expect((duration?.value as { count: number } | undefined)?.count).toBeGreaterThanOrEqual(2)
      const counted = (decision: string) =>
        Metric.value(
          Telemetry.decisions.pipe(
            Metric.tagged("kind", "TokenBucket"),
            Metric.tagged("policy", ns),
            Metric.tagged("decision", decision)
          )
        )
      expect((yield* counted("allowed")).count).toBe(1)
    }))

  it.live("Limits.acquire with its list written in each call: every call counted under each limiter's policy, and the span names the list's policies in its order", () =>
    Effect.gen(function*() {
      const a = TokenBucket.make<string>(freshNamespace(), 2, Rate.make(1, "1 hour"))
      const b = FixedWindow.make<string>(freshNamespace(), 1, "1 hour")
      // A new array each call (its labels are found by the limiters', not made again), then the other order.
      const calls = Effect.all([
        Limits.acquire([a, b], "n"),
        Limits.acquire([a, b], "n"),
        Limits.acquire([b, a], "m")
      ])
      const { spans, value } = yield* withSdk(calls, Redis.layerMemory(), { spans: true })
      expect(value.map((d) => d.allowed)).toEqual([true, false, true])
      expect(byName(spans, "Limits.acquire").map((s) => s.attributes["wakuwaku.policy"])).toEqual([
        `${a.namespace},${b.namespace}`,
        `${a.namespace},${b.namespace}`,
        `${b.namespace},${a.namespace}`
      ])
      const counted = (kind: string, policy: string, decision: string) =>
        Effect.map(
          Metric.value(
            Telemetry.decisions.pipe(
              Metric.tagged("kind", kind),
              Metric.tagged("policy", policy),
              Metric.tagged("decision", decision)
            )
          ),
          (state) => state.count
        )
      expect(yield* counted("TokenBucket", a.namespace, "allowed")).toBe(2)
      expect(yield* counted("TokenBucket", a.namespace, "denied")).toBe(1)
      expect(yield* counted("FixedWindow", b.namespace, "allowed")).toBe(2)
      expect(yield* counted("FixedWindow", b.namespace, "denied")).toBe(1)
    }))

  it.live("metrics: false counts nothing", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const bucket = TokenBucket.make<string>(ns, 1, Rate.perSecond(1))
      yield* withSdk(bucket.acquire("a", 1), Redis.layerMemory(), { metrics: false })
      const state = yield* Metric.value(
        Telemetry.decisions.pipe(
          Metric.tagged("kind", "TokenBucket"),
          Metric.tagged("policy", ns),
          Metric.tagged("decision", "allowed")
        )
      )
      expect(state.count).toBe(0)
    }))

  it("a setting that is not a boolean is refused", () => {
    expect(() => Telemetry.layer({ spans: "yes" as unknown as boolean })).toThrow(
      new TypeError("wakuwaku: Telemetry option spans must be a boolean, got yes")
    )
  })
})

describe("Telemetry: the HTTP verdict on the request's span", () => {
  const request = (app: Effect.Effect<HttpServerResponse.HttpServerResponse, unknown, unknown>) =>
    Effect.provideService(
      app,
      HttpServerRequest.HttpServerRequest,
      HttpServerRequest.fromWeb(new Request("http://localhost/"))
    ).pipe(Effect.withSpan("request")) as Effect.Effect<HttpServerResponse.HttpServerResponse, unknown, Redis.ReadWrite>
  const hello = Effect.succeed(HttpServerResponse.text("hello"))

  it.live("a denial: decision, policy, the policy that denied, retry-after", () =>
    Effect.gen(function*() {
      const limiter = TokenBucket.make<string>(freshNamespace(), 1, Rate.perSecond(1))
      const app = RateLimit.middleware({ limiter, key: () => "k", onStoreFailure: "fail-closed" })(hello)
      const { spans, value } = yield* withSdk(Effect.zipRight(request(app), request(app)), Redis.layerMemory())
      expect(value.status).toBe(429)
      const [, denied] = byName(spans, "request")
      expect(denied!.attributes).toMatchObject({
        "wakuwaku.decision": "denied",
        "wakuwaku.policy": limiter.namespace,
        "wakuwaku.denied_by": limiter.namespace,
        "wakuwaku.retry_after_ms": 1000
      })
    }))

  it.live("a store failure: the store-failure policy applied, and the failure's reason on the decision span", () =>
    Effect.gen(function*() {
      const limiter = TokenBucket.make<string>(freshNamespace(), 1, Rate.perSecond(1))
      const app = RateLimit.middleware({ limiter, key: () => "k", onStoreFailure: "fail-open" })(hello)
      // A client that cannot send: every call fails at once.
      const client = new IORedis({ port: 1, lazyConnect: true, enableOfflineQueue: false })
      const { spans, value } = yield* withSdk(request(app), Redis.layerClient(client))
      client.disconnect()
      expect(value.status).toBe(200)
      expect(one(spans, "request").attributes).toMatchObject({
        "wakuwaku.decision": "fail-open",
        "wakuwaku.policy": limiter.namespace,
        "wakuwaku.store.on_failure": "fail-open"
      })
      expect(one(spans, "TokenBucket.acquire").attributes["wakuwaku.store.failure"]).toBe("Connection")
    }))
})
