/**
 * The proxy's admin port (`/metrics`, `/healthz`, `/readyz`) and access log: `Proxy.layer` in this process
 * in front of real node:http upstreams, its limits on the suite's Redis (or a throwaway redis-server that a
 * test stops), `/metrics` read with a third-party parser of the Prometheus text format
 * (parse-prometheus-text-format); and one `wakuwaku proxy` process for the flags and SIGTERM.
 */
import { Context, Duration, Effect, Exit, Layer, Logger, Metric, MetricBoundaries, MetricLabel, Scope } from "effect"
import type * as Http from "node:http"
import * as Net from "node:net"
import parsePrometheus from "parse-prometheus-text-format"
import { afterEach, describe, expect, it } from "vitest"
import { Limits, Rate, Redis, Telemetry, TokenBucket } from "wakuwaku"
import * as Proxy from "wakuwaku/Proxy"
import { RedisServer } from "wakuwaku/testing"
import * as accessLog from "../src/internal/proxy/accessLog.js"
import { parse } from "../src/internal/proxy/cli.js"
import * as prometheus from "../src/internal/proxy/prometheus.js"
import * as snapshot from "../src/internal/proxy/snapshot.js"
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
     * A histogram's count over all its label sets: the sum of its `_count` lines, read from the text (the
     * parser merges the buckets of several label sets, the last wins, and drops `_count` and `_sum`). The
     * registry is the process's: earlier test files of this worker leave label sets of their own.
     */
    histogramCount: (name: string): number =>
      [...reply.body.toString().matchAll(new RegExp(`^${name}_count(?:\\{[^}]*\\})? (\\d+)$`, "gm"))]
        .reduce((sum, line) => sum + Number(line[1]), 0),
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

  it("the library's metrics: on with the admin port, unless the application set Telemetry itself", async () => {
    const up = await okUpstream()
    const decided = async (telemetry: Layer.Layer<never> | undefined) => {
      const ns = freshNamespace("tel")
      const layer = Proxy.layer<Redis.ReadWrite>({
        upstream: up.url,
        port: 0,
        host: "127.0.0.1",
        rateLimit: { limiter: TokenBucket.make<string>(ns, 5, Rate.perSecond(1)), onStoreFailure: "fail-closed" },
        admin: { port: 0 }
      }).pipe(Layer.provide(Redis.layerMemory()))
      const { server } = await build(telemetry === undefined ? layer : layer.pipe(Layer.provide(telemetry)))
      expect((await get(server.address.port, "/")).status).toBe(200)
      const labels = { kind: "TokenBucket", policy: ns, decision: "allowed" }
      return (await scrape(server.admin!.port)).value("wakuwaku_limiter_decisions_total", labels)
    }
    expect(await decided(undefined)).toBe(1)
    expect(await decided(Telemetry.layer({ metrics: false }))).toBe(0)
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

describe("the Prometheus text of Effect's registry", () => {
  it("every kind of Effect metric, names and label values escaped, reads back through the parser", () => {
    const ns = freshNamespace("prom").replace(/-/g, "_")
    const counter = Metric.counter(`${ns}.hits`, { description: "a \\ b\nc", incremental: true })
    const level = Metric.counter(`${ns}_level`)
    const gauge = Metric.gauge(`${ns}_gauge`)
    const histogram = Metric.histogram(`${ns}_seconds`, MetricBoundaries.fromIterable([0.1, 1]))
    const frequency = Metric.frequency(`${ns}_words`)
    const summary = Metric.summary({
      name: `${ns}_summary`,
      maxAge: "1 minute",
      maxSize: 10,
      error: 0.01,
      quantiles: [0.5]
    })
    const label = [MetricLabel.make("odd-name", "a \"quoted\" \\ value\nwith a line feed")]
    counter.unsafeUpdate(2, label)
    level.unsafeUpdate(-3, [])
    gauge.unsafeUpdate(7.5, [])
    for (const v of [0.05, 0.5, 5]) histogram.unsafeUpdate(v, [])
    frequency.unsafeUpdate("yes", [])
    summary.unsafeUpdate(4, [])
    const families = parsePrometheus(prometheus.render())
    const mine = families.filter((f) => f.name.startsWith(ns)).map((f) => ({ ...f }))
    expect(mine).toEqual([
      { name: `${ns}_gauge`, help: "", type: "GAUGE", metrics: [{ value: "7.5" }] },
      {
        name: `${ns}_hits_total`,
        help: "a \\ b\nc",
        type: "COUNTER",
        metrics: [{ value: "2", labels: { odd_name: "a \"quoted\" \\ value\nwith a line feed" } }]
      },
      { name: `${ns}_level`, help: "", type: "GAUGE", metrics: [{ value: "-3" }] },
      {
        name: `${ns}_seconds`,
        help: "",
        type: "HISTOGRAM",
        metrics: [{ buckets: { "0.1": "1", "1": "2", "+Inf": "3" }, count: "3", sum: "5.55" }]
      },
      {
        name: `${ns}_summary`,
        help: "",
        type: "SUMMARY",
        metrics: [{ quantiles: { "0.5": "4" }, count: "1", sum: "4" }]
      },
      { name: `${ns}_words_total`, help: "", type: "COUNTER", metrics: [{ value: "1", labels: { key: "yes" } }] }
    ])
  })
})

describe("the registries of several processes, added up (wakuwaku proxy --workers)", () => {
  it("every kind crosses JSON and merges by series: counters, gauges, histograms, frequencies added", () => {
    const ns = freshNamespace("merge").replace(/-/g, "_")
    const counter = Metric.counter(`${ns}_hits`, { incremental: true })
    const big = Metric.counter(`${ns}_big`, { bigint: true, incremental: true })
    const gauge = Metric.gauge(`${ns}_gauge`)
    const histogram = Metric.histogram(`${ns}_seconds`, MetricBoundaries.fromIterable([0.1, 1]))
    const frequency = Metric.frequency(`${ns}_words`)
    const summary = Metric.summary({
      name: `${ns}_summary`,
      maxAge: "1 minute",
      maxSize: 10,
      error: 0.01,
      quantiles: [0.5]
    })
    const a = [MetricLabel.make("route", "a")]
    const b = [MetricLabel.make("route", "b")]
    counter.unsafeUpdate(2, a)
    big.unsafeUpdate(2n ** 60n, [])
    gauge.unsafeUpdate(7.5, [])
    histogram.unsafeUpdate(0.05, [])
    frequency.unsafeUpdate("yes", [])
    summary.unsafeUpdate(4, [])
    /** This process's series of this test, as the primary receives a worker's (JSON over IPC). */
    const take = () =>
      JSON.parse(JSON.stringify(snapshot.take().filter((s) => s.name.startsWith(ns)))) as Array<snapshot.Series>
    const first = take()
    counter.unsafeUpdate(3, a)
    counter.unsafeUpdate(1, b)
    histogram.unsafeUpdate(5, [])
    frequency.unsafeUpdate("no", [])
    summary.unsafeUpdate(6, [])
    const second = take()
    const families = parsePrometheus(prometheus.render(snapshot.toPairs(snapshot.merge([first, second]))))
    expect(families.map((f) => ({ ...f }))).toEqual([
      { name: `${ns}_big_total`, help: "", type: "COUNTER", metrics: [{ value: String(2n ** 61n) }] },
      { name: `${ns}_gauge`, help: "", type: "GAUGE", metrics: [{ value: "15" }] },
      {
        name: `${ns}_hits_total`,
        help: "",
        type: "COUNTER",
        metrics: [{ value: "7", labels: { route: "a" } }, { value: "1", labels: { route: "b" } }]
      },
      {
        name: `${ns}_seconds`,
        help: "",
        type: "HISTOGRAM",
        metrics: [{ buckets: { "0.1": "2", "1": "2", "+Inf": "3" }, count: "3", sum: "5.1" }]
      },
      // Quantiles of two processes do not add up: unknown; the count and the sum do.
      {
        name: `${ns}_summary`,
        help: "",
        type: "SUMMARY",
        metrics: [{ quantiles: { "0.5": "NaN" }, count: "3", sum: "14" }]
      },
      {
        name: `${ns}_words_total`,
        help: "",
        type: "COUNTER",
        metrics: [{ value: "2", labels: { key: "yes" } }, { value: "1", labels: { key: "no" } }]
      }
    ])
  })
})

describe("/healthz and /readyz", () => {
  it("answer GET and HEAD; other paths 404, other methods 405; never on the public port", async () => {
    const up = await okUpstream()
    const { server } = await build(Proxy.layer({ upstream: up.url, port: 0, host: "127.0.0.1", admin: { port: 0 } }))
    const admin = server.admin!.port
    expect(await get(admin, "/healthz")).toEqual({ status: 200, body: "ok\n" })
    expect(await get(admin, "/readyz?verbose=1")).toEqual({ status: 200, body: "ready\n" })
    expect((await request(admin, { method: "HEAD", path: "/readyz" })).status).toBe(200)
    expect(await get(admin, "/")).toEqual({ status: 404, body: "not found: /metrics, /healthz or /readyz\n" })
    const post = await request(admin, { method: "POST", path: "/metrics", body: "x" })
    expect([post.status, post.headers.find(([n]) => n.toLowerCase() === "allow")?.[1]]).toEqual([405, "GET, HEAD"])
    // The public port forwards these paths to the upstream like any other.
    expect(await get(server.address.port, "/metrics")).toEqual({ status: 200, body: "ok" })
    expect(() => Proxy.layer({ upstream: up.url, port: 8080, admin: { port: 8080 } })).toThrow(
      new RangeError(
        "wakuwaku/Proxy: admin.port must not be the public port (8080): metrics and health are never served to clients"
      )
    )
    expect(() => Proxy.layer({ upstream: up.url, port: 0, admin: { port: 0, drainDelay: -1 } })).toThrow(RangeError)
  })

  it("the store: ready while it answers; when it stops, unready under fail-closed, ready under fail-open", async () => {
    const up = await okUpstream()
    const storeScope = Effect.runSync(Scope.make())
    cleanups.push(() => Effect.runPromise(Scope.close(storeScope, Exit.void)))
    const store = await Effect.runPromise(Scope.extend(RedisServer.make(), storeScope))
    const ns = freshNamespace("ready")
    const proxy = (onStoreFailure: "fail-closed" | "fail-open") =>
      build(
        Proxy.layer<Redis.ReadWrite>({
          upstream: up.url,
          port: 0,
          host: "127.0.0.1",
          rateLimit: { limiter: TokenBucket.make<string>(ns, 10, Rate.perSecond(1)), onStoreFailure },
          admin: { port: 0 }
        }).pipe(Layer.provide(Redis.layer({ url: store.url, commandTimeout: "200 millis" })))
      )
    const closed = (await proxy("fail-closed")).server
    const open = (await proxy("fail-open")).server
    expect(await get(closed.admin!.port, "/readyz")).toEqual({ status: 200, body: "ready\n" })
    const before = await scrape(closed.admin!.port)

    await Effect.runPromise(Scope.close(storeScope, Exit.void))
    expect(await get(closed.admin!.port, "/readyz")).toEqual({
      status: 503,
      body: "not ready: the store does not answer (fail-closed)\n"
    })
    expect(await get(open.admin!.port, "/readyz")).toEqual({
      status: 200,
      body: "ready: the store does not answer; fail-open decides meanwhile\n"
    })
    // What a request meets meanwhile: a 503, and a store failure counted by reason.
    expect((await get(closed.address.port, "/")).status).toBe(503)
    const after = await scrape(closed.admin!.port)
    const failures = (reason: string) =>
      delta(before, after)("wakuwaku_ratelimit_store_failures_total", {
        policy: ns,
        reason
      })
    expect(failures("Connection") + failures("Timeout")).toBe(1)
    expect(
      delta(before, after)("wakuwaku_proxy_requests_total", {
        route: "default",
        decision: "fail-closed",
        status: "503"
      })
    )
      .toBe(1)
  })

  it("on shutdown: /readyz says 503 first, the proxy serves on for drainDelay, then stops accepting", async () => {
    const up = await okUpstream()
    const { close, server } = await build(
      Proxy.layer({ upstream: up.url, port: 0, host: "127.0.0.1", admin: { port: 0, drainDelay: "400 millis" } })
    )
    const admin = server.admin!.port
    const port = server.address.port
    expect((await get(admin, "/readyz")).status).toBe(200)
    const closing = close()
    expect(await get(admin, "/readyz")).toEqual({
      status: 503,
      body: "not ready: not serving (starting or shutting down)\n"
    })
    // Unready, and still serving: a load balancer has the delay to stop sending.
    expect(await get(port, "/")).toEqual({ status: 200, body: "ok" })
    await closing
    const refused = (p: number) =>
      new Promise<string>((resolve) => {
        const socket = Net.connect(p, "127.0.0.1")
        socket.once("connect", () => (socket.destroy(), resolve("accepted")))
        socket.once("error", (error: NodeJS.ErrnoException) => resolve(error.code ?? "error"))
      })
    expect([await refused(port), await refused(admin)]).toEqual(["ECONNREFUSED", "ECONNREFUSED"])
  })
})

describe("the access log", () => {
  /** A proxy keyed by `x-api-key` whose log lines this test reads. */
  const logged = async (query: boolean) => {
    const up = await okUpstream()
    const lines: Array<string> = []
    const ns = freshNamespace("log")
    const { server } = await build(
      Proxy.layer<Redis.ReadWrite>({
        upstream: up.url,
        port: 0,
        host: "127.0.0.1",
        rateLimit: {
          limiter: TokenBucket.make<string>(ns, 1, Rate.make(1, "1 hour")),
          key: Proxy.header("x-api-key"),
          onStoreFailure: "fail-closed"
        },
        accessLog: { format: "json", query, write: (line) => lines.push(line) }
      }).pipe(Layer.provide(Redis.layer({ url: redisUrl })))
    )
    return { ns, port: server.address.port, lines, up }
  }

  /** Secrets where clients put them: the query, credentials, cookies, the header the limit is keyed by. */
  const HOSTILE = {
    path: "/login?token=S3CRET-QUERY&next=%2Fhome",
    headers: {
      "authorization": "Bearer S3CRET-AUTH",
      "cookie": "session=S3CRET-COOKIE",
      "x-api-key": "S3CRET-KEY",
      "proxy-authorization": "Basic S3CRET-PROXY",
      "user-agent": "S3CRET-AGENT",
      "x-forwarded-for": "203.0.113.7"
    }
  }

  it("one JSON line per request, with no header value and no query string", async () => {
    const { lines, ns, port } = await logged(false)
    expect((await request(port, HOSTILE)).status).toBe(200)
    expect((await request(port, HOSTILE)).status).toBe(429)
    // A path that would break a line or a JSON string if written as it came.
    expect((await request(port, { path: "/a%22b%0A\\\"c", headers: { "x-api-key": "other" } })).status).toBe(200)
    await expect.poll(() => lines.length).toBe(3)
    const text = lines.join("")
    expect(text).not.toMatch(/S3CRET|203\.0\.113\.7|token=|next=|other/)
    expect(lines.every((line) => line.endsWith("}\n") && line.indexOf("\n") === line.length - 1)).toBe(true)
    const entries = lines.map((line) => JSON.parse(line) as Record<string, unknown>)
    for (const entry of entries) {
      expect(Object.keys(entry)).toEqual([
        "time",
        "method",
        "path",
        "status",
        "route",
        "decision",
        "deniedBy",
        "retryAfter",
        "upstreamMs",
        "totalMs"
      ])
      expect(new Date(entry["time"] as string).toISOString()).toBe(entry["time"])
      expect(entry["totalMs"]).toBeGreaterThanOrEqual(0)
    }
    const [allowed, denied, odd] = entries.map(({ time: _t, totalMs: _total, upstreamMs, ...rest }) => ({
      ...rest,
      upstreamMs: typeof upstreamMs
    }))
    expect(allowed).toEqual({
      method: "GET",
      path: "/login",
      status: 200,
      route: "default",
      decision: "allowed",
      deniedBy: null,
      retryAfter: null,
      upstreamMs: "number"
    })
    expect(denied).toEqual({
      method: "GET",
      path: "/login",
      status: 429,
      route: "default",
      decision: "denied",
      deniedBy: [ns],
      retryAfter: 3600,
      upstreamMs: "object"
    })
    expect(odd).toMatchObject({ path: "/a%22b%0A\\\"c", status: 200, decision: "allowed" })
  })

  it("a line with every field: valid JSON, in the documented order, whatever the strings hold", () => {
    const text = accessLog.line("2026-12-02T18:00:00.000Z", {
      method: "GE\"T",
      path: "/\u2028\n\"}",
      query: "a=1",
      status: 429,
      route: "r\\",
      decision: "denied",
      deniedBy: ["login", "api"],
      retryAfter: 3,
      wouldDeny: ["strict"],
      upstreamMs: 1.23456,
      waitedMs: 250.0004,
      totalMs: 251.5
    }, true)
    expect(text.endsWith("}\n") && text.indexOf("\n") === text.length - 1).toBe(true)
    const parsed = JSON.parse(text) as Record<string, unknown>
    expect(Object.entries(parsed)).toEqual([
      ["time", "2026-12-02T18:00:00.000Z"],
      ["method", "GE\"T"],
      ["path", "/\u2028\n\"}"],
      ["query", "a=1"],
      ["status", 429],
      ["route", "r\\"],
      ["decision", "denied"],
      ["deniedBy", ["login", "api"]],
      ["retryAfter", 3],
      ["wouldDeny", ["strict"]],
      ["upstreamMs", 1.235],
      ["waitedMs", 250],
      ["totalMs", 251.5]
    ])
  })

  it("the query string only when configured; a client that leaves first is a 499", async () => {
    const { lines, port, up } = await logged(true)
    expect((await request(port, HOSTILE)).status).toBe(200)
    await expect.poll(() => lines.length).toBe(1)
    const entry = JSON.parse(lines[0]!) as Record<string, unknown>
    expect([entry["path"], entry["query"]]).toEqual(["/login", "token=S3CRET-QUERY&next=%2Fhome"])
    expect(lines[0]).not.toMatch(/S3CRET-(AUTH|COOKIE|KEY|PROXY|AGENT)|203\.0\.113\.7/)

    const socket = Net.connect(port, "127.0.0.1")
    socket.write("GET /hold HTTP/1.1\r\nHost: x\r\nX-Api-Key: k2\r\n\r\n")
    await expect.poll(() => up.held.length).toBe(1)
    socket.destroy()
    await expect.poll(() => lines.length).toBe(2)
    expect(JSON.parse(lines[1]!)).toMatchObject({ path: "/hold", query: null, status: 499, decision: "allowed" })
    up.held.pop()!.end()
  })
})

describe("wakuwaku proxy --admin-port, --drain-delay, --access-log", () => {
  const configOf = (argv: ReadonlyArray<string>, env: Record<string, string> = {}) => {
    const command = parse(["proxy", "--demo", ...argv], env)
    if (command._tag !== "Proxy") throw new Error(JSON.stringify(command))
    return command.config
  }
  const invalid = (argv: ReadonlyArray<string>, env: Record<string, string> = {}) => {
    const command = parse(["proxy", "--demo", ...argv], env)
    return command._tag === "Invalid" ? command.message : JSON.stringify(command)
  }

  it("the flags and their variables: the admin port on loopback by default, never --port's", () => {
    expect([configOf([]).admin, configOf([]).accessLog]).toEqual([undefined, undefined])
    const admin = configOf(["--admin-port", "9901", "--drain-delay", "5s"]).admin
    expect([admin?.port, admin?.host, admin?.drainDelay.pipe(Duration.toMillis)]).toEqual([9901, "127.0.0.1", 5000])
    expect(configOf([], { WAKUWAKU_ADMIN_PORT: "0", WAKUWAKU_ADMIN_HOST: "::" }).admin?.host).toBe("::")
    expect(configOf(["--access-log", "json"]).accessLog).toEqual({ query: false })
    expect(configOf([], { WAKUWAKU_ACCESS_LOG: "json", WAKUWAKU_ACCESS_LOG_QUERY: "1" }).accessLog).toEqual({
      query: true
    })
    const see = " (see wakuwaku proxy --help)"
    expect(invalid(["--port", "9901", "--admin-port", "9901"])).toBe(
      "wakuwaku proxy: --admin-port: expected a port other than --port's (metrics and health are never served to " +
        `clients), got "9901"${see}`
    )
    expect(invalid(["--admin-host", "0.0.0.0"])).toBe(
      `wakuwaku proxy: --admin-host applies only with --admin-port${see}`
    )
    expect(invalid([], { WAKUWAKU_DRAIN_DELAY: "5s" })).toBe(
      `wakuwaku proxy: WAKUWAKU_DRAIN_DELAY applies only with --admin-port${see}`
    )
    expect(invalid(["--admin-port", "1", "--drain-delay", "soon"])).toBe(
      `wakuwaku proxy: --drain-delay: expected a duration such as 0s, 500ms or 5s, got "soon"${see}`
    )
    expect(invalid(["--access-log", "combined"])).toBe(
      `wakuwaku proxy: --access-log: expected json, got "combined"${see}`
    )
    expect(invalid(["--access-log-query"])).toBe(
      `wakuwaku proxy: --access-log-query applies only with --access-log json${see}`
    )
  })

  it("a process: the banner names the admin port, /readyz turns 503 on SIGTERM while the proxy still serves", async () => {
    const up = await okUpstream()
    const proxy = await startProxy([
      "--upstream",
      up.url,
      "--admin-port",
      "0",
      "--drain-delay",
      "1s",
      "--access-log",
      "json"
    ])
    cleanups.push(async () => {
      proxy.child.kill("SIGKILL")
      await proxy.exited
    })
    const banner = /admin: {4}http:\/\/127\.0\.0\.1:(\d+)\/metrics, \/healthz, \/readyz\n/.exec(proxy.stdout())
    const admin = Number(banner?.[1])
    expect(proxy.stdout()).toContain("  log:      one JSON line per request on stdout\n")
    expect(await get(admin, "/readyz")).toEqual({ status: 200, body: "ready\n" })
    expect(await get(proxy.port, "/x?secret=1")).toEqual({ status: 200, body: "ok" })
    await expect.poll(() => proxy.stdout().includes(`"path":"/x","status":200,"route":"default","decision":"allowed"`))
      .toBe(
        true
      )
    expect(proxy.stdout()).not.toContain("secret")
    const metrics = parsePrometheus((await request(admin, { path: "/metrics" })).body.toString())
    expect(
      metrics.find((f) => f.name === "wakuwaku_proxy_requests_total")?.metrics.find((m) =>
        m.labels?.["status"] === "200"
      )
        ?.value
    ).toBe("1")

    proxy.child.kill("SIGTERM")
    await expect.poll(() => get(admin, "/readyz").then((r) => r.status)).toBe(503)
    // Unready, still serving: the request is logged before the process ends.
    expect(await get(proxy.port, "/y")).toEqual({ status: 200, body: "ok" })
    const exit = await proxy.exited
    expect(exit.code).toBe(0)
    expect(exit.stdout).toContain(`"path":"/y","status":200`)
  })
})
