/**
 * The proxy's admin port (`/metrics`, `/healthz`, `/readyz`) and access log: `Proxy.layer` in this process
 * in front of real node:http upstreams, its limits on the suite's Redis (or a throwaway redis-server that a
 * test stops), `/metrics` read with a third-party parser of the Prometheus text format
 * (parse-prometheus-text-format); and one `wakuwaku proxy` process for the flags and SIGTERM.
 */
import { Context, Effect, Exit, Layer, Logger, Scope } from "effect"
import type * as Http from "node:http"
import * as Net from "node:net"
import parsePrometheus from "parse-prometheus-text-format"
import { afterEach, describe, expect, it } from "vitest"
import { Limits, Rate, Redis, TokenBucket } from "wakuwaku"
import * as Proxy from "wakuwaku/Proxy"
import { RedisServer } from "wakuwaku/testing"
import { parse } from "../src/internal/proxy/cli.js"
import { request, startProxy, upstream } from "./support/proxy.js"
import { freshNamespace, redisUrl } from "./support/redis.js"

const cleanups: Array<() => Promise<unknown>> = []
afterEach(async () => {
  await Promise.all(cleanups.splice(0).map((cleanup) => cleanup()))
})

/** Builds `layer` until the test ends (or until `close` is called); its Server. */
const build = async <E>(layer: Layer.Layer<Proxy.Server, E>) => {
  const scope = Effect.runSync(Scope.make())
  const context = await Effect.runPromise(
    Layer.buildWithScope(layer.pipe(Layer.provide(Logger.remove(Logger.defaultLogger))), scope)
  )
  let closed: Promise<void> | undefined
  const close = () => (closed ??= Effect.runPromise(Scope.close(scope, Exit.void)))
  cleanups.push(close)
  return { server: Context.get(context, Proxy.Server), close }
}

/** An upstream that answers 200 `ok`, except `/hold`, answered when `release` is called. */
const okUpstream = async () => {
  const held: Array<Http.ServerResponse> = []
  const up = await upstream((req, res) => {
    if (req.url === "/hold") return void held.push(res)
    res.writeHead(200, { "content-type": "text/plain" }).end("ok")
  })
  cleanups.push(up.close)
  return { ...up, held }
}

const get = (port: number, path: string, headers: Record<string, string> = {}) =>
  request(port, { path, headers }).then((reply) => ({ status: reply.status, body: reply.body.toString() }))

/** `/metrics`, parsed by the third-party parser: the value of one sample (0 when absent), by family and labels. */
const scrape = async (adminPort: number) => {
  const reply = await request(adminPort, { path: "/metrics" })
  expect(reply.status).toBe(200)
  expect(reply.headers.find(([name]) => name.toLowerCase() === "content-type")?.[1]).toBe(
    "text/plain; version=0.0.4; charset=utf-8"
  )
  const families = parsePrometheus(reply.body.toString())
  const family = (name: string) => families.find((f) => f.name === name)
  return {
    family,
    value: (name: string, labels: Record<string, string> = {}): number => {
      const sample = family(name)?.metrics.find((m) =>
        Object.entries(labels).every(([k, v]) => m.labels?.[k] === v) &&
        Object.keys(m.labels ?? {}).length === Object.keys(labels).length
      )
      return sample?.value === undefined ? 0 : Number(sample.value)
    },
    /**
     * A histogram's count, from its `+Inf` bucket, for a histogram of one label set: the parser merges the
     * buckets of several (the last wins) and drops their `_count` and `_sum` lines.
     */
    histogramCount: (name: string): number => Number(family(name)?.metrics[0]?.buckets?.["+Inf"] ?? 0),
    /** The `_count` line of one label set of a histogram, read from the text (see `histogramCount`). */
    countLine: (name: string, labels: string): number =>
      Number(new RegExp(`^${name}_count\\{${labels}\\} (\\d+)$`, "m").exec(reply.body.toString())?.[1] ?? 0)
  }
}

const delta = (before: Awaited<ReturnType<typeof scrape>>, after: Awaited<ReturnType<typeof scrape>>) =>
(
  name: string,
  labels: Record<string, string> = {}
) => after.value(name, labels) - before.value(name, labels)

describe("Proxy.layer's admin port", () => {
  it("/metrics: requests by route, decision and status, memory hits, store latency, in flight, upstream time", async () => {
    const up = await okUpstream()
    const ns = freshNamespace("adm")
    const { server } = await build(
      Proxy.layer<Redis.ReadWrite>({
        upstream: up.url,
        port: 0,
        host: "127.0.0.1",
        maxHeaderLines: 5,
        rateLimit: {
          limiter: TokenBucket.make<string>(ns, 3, Rate.make(1, "1 hour")),
          onStoreFailure: "fail-closed",
          rememberDenials: 10
        },
        admin: { port: 0 }
      }).pipe(Layer.provide(Redis.layer({ url: redisUrl })))
    )
    expect(server.admin?.host).toBe("127.0.0.1")
    const admin = server.admin!.port
    const before = await scrape(admin)

    // 3 allowed, a denial from the store, a denial from memory, a 431 before the limit.
    for (let i = 0; i < 3; i++) expect((await get(server.address.port, "/")).status).toBe(200)
    expect((await get(server.address.port, "/")).status).toBe(429)
    expect((await get(server.address.port, "/")).status).toBe(429)
    const lines = Object.fromEntries(Array.from({ length: 6 }, (_, i) => [`x-line-${i}`, "1"]))
    expect((await get(server.address.port, "/", lines)).status).toBe(431)
    // A shadow limit's would-be denial elsewhere in the process, on the same registry.
    const strict = TokenBucket.make<string>(`${ns}-shadow`, 1, Rate.make(1, "1 hour"))
    const open = TokenBucket.make<string>(`${ns}-open`, 10, Rate.make(1, "1 hour"))
    await Effect.runPromise(
      Effect.gen(function*() {
        yield* Limits.acquire([open, Limits.shadow(strict)], "k")
        yield* Limits.acquire([open, Limits.shadow(strict)], "k")
      }).pipe(Effect.provide(Redis.layerMemory()))
    )

    const after = await scrape(admin)
    const d = delta(before, after)
    const route = "default"
    expect(d("wakuwaku_proxy_requests_total", { route, decision: "allowed", status: "200" })).toBe(3)
    expect(d("wakuwaku_proxy_requests_total", { route, decision: "denied", status: "429" })).toBe(2)
    expect(d("wakuwaku_proxy_requests_total", { route, decision: "none", status: "431" })).toBe(1)
    expect(after.value("wakuwaku_ratelimit_denial_memory_hits_total", { policy: ns })).toBe(1)
    expect(after.value("wakuwaku_ratelimit_decisions_total", { policy: ns, decision: "allowed" })).toBe(3)
    expect(after.value("wakuwaku_ratelimit_decisions_total", { policy: ns, decision: "denied" })).toBe(2)
    expect(after.value("wakuwaku_shadow_would_deny_total", { policy: `${ns}-shadow` })).toBe(1)
    // The admin port turned the library's metrics on: the limiter's decisions (the store's, not memory's)…
    expect(after.value("wakuwaku_limiter_decisions_total", { kind: "TokenBucket", policy: ns, decision: "allowed" }))
      .toBe(3)
    expect(after.value("wakuwaku_limiter_decisions_total", { kind: "TokenBucket", policy: ns, decision: "denied" }))
      .toBe(1)
    // …and the store's latency: 4 acquires, and the check (read-only) that remembered the denial.
    expect(after.family("db_client_operation_duration")?.type).toBe("HISTOGRAM")
    const redis = (operation: string) => `db_system_name="redis",db_operation_name="${operation}",unit="s"`
    const calls = (operation: string) =>
      after.countLine("db_client_operation_duration", redis(operation)) -
      before.countLine("db_client_operation_duration", redis(operation))
    expect([calls("EVALSHA"), calls("EVALSHA_RO")]).toEqual([4, 1])
    // The upstream's time: the 3 forwarded requests.
    expect(
      after.histogramCount("wakuwaku_proxy_upstream_duration_seconds") -
        before.histogramCount("wakuwaku_proxy_upstream_duration_seconds")
    ).toBe(3)
    expect(after.family("wakuwaku_proxy_requests_in_flight")?.type).toBe("GAUGE")
  })

  it("/metrics: a request in flight until its response is done; a client that leaves first counts 499", async () => {
    const up = await okUpstream()
    const { server } = await build(Proxy.layer({ upstream: up.url, port: 0, host: "127.0.0.1", admin: { port: 0 } }))
    const admin = server.admin!.port
    const before = await scrape(admin)
    const held = request(server.address.port, { path: "/hold" })
    await expect.poll(() => up.held.length).toBe(1)
    const during = await scrape(admin)
    expect(during.value("wakuwaku_proxy_requests_in_flight") - before.value("wakuwaku_proxy_requests_in_flight"))
      .toBe(1)
    up.held.pop()!.end("late")
    expect((await held).status).toBe(200)

    // A client that leaves while the upstream holds its request.
    const socket = Net.connect(server.address.port, "127.0.0.1")
    socket.write("GET /hold HTTP/1.1\r\nHost: x\r\n\r\n")
    await expect.poll(() => up.held.length).toBe(1)
    socket.destroy()
    await expect.poll(async () =>
      delta(before, await scrape(admin))("wakuwaku_proxy_requests_total", {
        route: "default",
        decision: "none",
        status: "499"
      })
    ).toBe(1)
    up.held.pop()!.end()
    const after = await scrape(admin)
    const d = delta(before, after)
    expect(d("wakuwaku_proxy_requests_in_flight")).toBe(0)
    expect(d("wakuwaku_proxy_requests_total", { route: "default", decision: "none", status: "200" })).toBe(1)
  })
})
