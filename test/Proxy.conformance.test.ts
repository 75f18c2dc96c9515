/**
 * The proxy judged as clients, proxies and API tools that its authors never saw judge it: its header fields
 * parsed by a third-party Structured Fields parser (`structured-headers`, RFC 9651), its framing read off raw
 * sockets, against a hostile upstream (`net.createServer`, writing whatever bytes it likes) and a raw client.
 * Against `Proxy.layer` (what `wakuwaku proxy` runs) in this process, on an embedded store; the rate-limit
 * fields also through `Proxy.make` with `RateLimit.middleware`.
 */
import type * as NodeHttpClient from "@effect/platform-node/NodeHttpClient"
import type * as HttpApp from "@effect/platform/HttpApp"
import * as HttpServer from "@effect/platform/HttpServer"
import { Context, Effect, Exit, Layer, Logger, LogLevel, Scope } from "effect"
import type * as Http from "node:http"
import { type Item, parseList, Token } from "structured-headers"
import { afterEach, describe, expect, it } from "vitest"
import { FixedWindow, Redis } from "wakuwaku"
import { RateLimit } from "wakuwaku/http"
import * as Proxy from "wakuwaku/Proxy"
import { type Reply, request, upstream, valueOf, valuesOf } from "./support/proxy.js"

const cleanups: Array<() => Promise<unknown>> = []
afterEach(async () => {
  await Promise.all(cleanups.splice(0).map((cleanup) => cleanup()))
})

/** Runs `Proxy.layer` on a free loopback port, on an embedded store, until the test ends. */
const serveLayer = async (options: Omit<Proxy.LayerOptions<Redis.ReadWrite>, "port" | "host">): Promise<number> => {
  const scope = Effect.runSync(Scope.make())
  const context = await Effect.runPromise(
    Layer.buildWithScope(
      Proxy.layer<Redis.ReadWrite>({ ...options, port: 0, host: "127.0.0.1", shutdownTimeout: "1 second" }).pipe(
        Layer.provide(Redis.layerMemory()),
        Layer.provide(Logger.minimumLogLevel(LogLevel.None))
      ),
      scope
    )
  )
  cleanups.push(() => Effect.runPromise(Scope.close(scope, Exit.void)))
  return Context.get(context, Proxy.Server).address.port
}

/** Serves `Proxy.make` behind `RateLimit.middleware` with `Proxy.serve`, on an embedded store. */
const serveMiddleware = (upstreamUrl: string, limiter: FixedWindow.FixedWindow<string>): Promise<number> =>
  serveApp(
    Proxy.make({ upstream: upstreamUrl }).pipe(
      RateLimit.middleware({ limiter, key: RateLimit.clientIp(), onStoreFailure: "fail-closed" })
    )
  )

/** Serves an app with `Proxy.serve` on a free loopback port, on an embedded store, until the test ends. */
const serveApp = async (app: HttpApp.Default<unknown, NodeHttpClient.HttpAgent | Redis.ReadWrite>) => {
  const scope = Effect.runSync(Scope.make())
  const context = await Effect.runPromise(
    Layer.buildWithScope(
      Proxy.serve(app, { port: 0, host: "127.0.0.1", shutdownTimeout: "1 second" }).pipe(
        Layer.provide(Redis.layerMemory()),
        Layer.provide(Logger.minimumLogLevel(LogLevel.None))
      ),
      scope
    )
  )
  cleanups.push(() => Effect.runPromise(Scope.close(scope, Exit.void)))
  const address = Context.get(context, HttpServer.HttpServer).address
  return address._tag === "TcpAddress" ? address.port : 0
}

/** A node:http upstream answering every request with `respond`, closed after the test. */
const startUpstream = async (respond: (req: Http.IncomingMessage, res: Http.ServerResponse) => void) => {
  const server = await upstream(respond)
  cleanups.push(server.close)
  return server
}

/** A Structured Field List (RFC 9651) as plain values: each member's value and its parameters. */
const members = (lines: ReadonlyArray<string>): Array<[unknown, Record<string, unknown>]> =>
  // Several lines of a list field are one list, their values joined with commas (RFC 9651 §4.2).
  parseList(lines.join(", ")).map((member) => {
    const [value, parameters] = member as Item
    return [plain(value), Object.fromEntries([...parameters].map(([k, v]) => [k, plain(v)]))]
  })

const plain = (value: unknown): unknown => value instanceof Token ? `token:${value.toString()}` : value

/** The list members of a response's field, parsed. */
const field = (reply: Reply, name: string) => members(valuesOf(reply, name))

describe("1. RateLimit fields through the proxy: its members after the upstream's (draft §7.2)", () => {
  const origin = (status: number, extra: Record<string, string> = {}) =>
    startUpstream((_req, res) => {
      res.writeHead(status, {
        "ratelimit-policy": "\"origin\";q=5;w=60",
        "ratelimit": "\"origin\";r=1;t=50",
        ...extra
      })
      res.end("from the origin")
    })

  it("Proxy.layer: both fields hold the upstream's member, then the proxy's", async () => {
    const up = await origin(200)
    const port = await serveLayer({
      upstream: up.url,
      rateLimit: { limiter: FixedWindow.make<string>("proxy", 100, "1 minute"), onStoreFailure: "fail-closed" }
    })
    const reply = await request(port)
    expect(reply.status).toBe(200)
    expect(field(reply, "ratelimit-policy")).toEqual([["origin", { q: 5, w: 60 }], ["proxy", { q: 100, w: 60 }]])
    expect(field(reply, "ratelimit")).toEqual([["origin", { r: 1, t: 50 }], ["proxy", { r: 99, t: 60 }]])
  })

  it("Proxy.layer: the upstream's own 429 keeps its Retry-After and its members, the proxy's appended", async () => {
    const up = await origin(429, { "retry-after": "30", "ratelimit": "\"origin\";r=0;t=30" })
    const port = await serveLayer({
      upstream: up.url,
      rateLimit: { limiter: FixedWindow.make<string>("proxy", 100, "1 minute"), onStoreFailure: "fail-closed" }
    })
    await request(port)
    const reply = await request(port)
    expect(reply.status).toBe(429)
    expect(valuesOf(reply, "retry-after")).toEqual(["30"])
    expect(field(reply, "ratelimit-policy")).toEqual([["origin", { q: 5, w: 60 }], ["proxy", { q: 100, w: 60 }]])
    expect(field(reply, "ratelimit")).toEqual([["origin", { r: 0, t: 30 }], ["proxy", { r: 98, t: 60 }]])
    expect(reply.body.toString()).toBe("from the origin")
  })

  it("Proxy.layer: an upstream's fields on several lines (over undici and over node:http) stay one list, in order", async () => {
    const up = await startUpstream((_req, res) => {
      res.setHeader("ratelimit-policy", ["\"origin\";q=5;w=60", "\"burst\";q=1;w=1"])
      res.setHeader("ratelimit", ["\"origin\";r=4;t=60", "\"burst\";r=0;t=1"])
      res.end()
    })
    const port = await serveLayer({
      upstream: up.url,
      rateLimit: { limiter: FixedWindow.make<string>("proxy", 100, "1 minute"), onStoreFailure: "fail-closed" }
    })
    // `OPTIONS *` goes over node:http, every other request over undici.
    for (const options of [{}, { method: "OPTIONS", path: "*" }]) {
      const reply = await request(port, options)
      expect(field(reply, "ratelimit-policy")).toEqual([
        ["origin", { q: 5, w: 60 }],
        ["burst", { q: 1, w: 1 }],
        ["proxy", { q: 100, w: 60 }]
      ])
      expect(field(reply, "ratelimit").map(([name]) => name)).toEqual(["origin", "burst", "proxy"])
    }
  })

  it("Proxy.make with RateLimit.middleware appends in the same order, and keeps the upstream's Retry-After", async () => {
    const up = await origin(429, { "retry-after": "30" })
    const port = await serveMiddleware(up.url, FixedWindow.make<string>("proxy", 100, "1 minute"))
    const reply = await request(port)
    expect(valuesOf(reply, "retry-after")).toEqual(["30"])
    expect(field(reply, "ratelimit-policy")).toEqual([["origin", { q: 5, w: 60 }], ["proxy", { q: 100, w: 60 }]])
    expect(field(reply, "ratelimit")).toEqual([["origin", { r: 1, t: 50 }], ["proxy", { r: 99, t: 60 }]])
  })
})

describe("2. Proxy-Status on the proxy's own 429: http_request_error (RFC 9209 §2 and §2.3)", () => {
  it("Proxy.layer: the 429 says error=http_request_error, and its fields parse", async () => {
    const up = await startUpstream((_req, res) => res.end("ok"))
    const port = await serveLayer({
      upstream: up.url,
      rateLimit: { limiter: FixedWindow.make<string>("proxy", 1, "1 minute"), onStoreFailure: "fail-closed" }
    })
    await request(port)
    const denied = await request(port)
    expect(denied.status).toBe(429)
    expect(field(denied, "proxy-status")).toEqual([["token:wakuwaku", { error: "token:http_request_error" }]])
    expect(field(denied, "ratelimit-policy")).toEqual([["proxy", { q: 1, w: 60 }]])
    const [[, limit]] = field(denied, "ratelimit") as [[unknown, { r: number; t: number }]]
    expect(limit.r).toBe(0)
    expect(Number(valueOf(denied, "retry-after"))).toBe(limit.t)
  })

  it("Proxy.serve: a limiter's 429 says the same", async () => {
    const up = await startUpstream((_req, res) => res.end("ok"))
    const port = await serveMiddleware(up.url, FixedWindow.make<string>("proxy", 1, "1 minute"))
    await request(port)
    const denied = await request(port)
    expect(denied.status).toBe(429)
    expect(field(denied, "proxy-status")).toEqual([["token:wakuwaku", { error: "token:http_request_error" }]])
  })
})
