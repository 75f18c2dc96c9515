/**
 * The proxy judged as clients, proxies and API tools that its authors never saw judge it: its header fields
 * parsed by a third-party Structured Fields parser (`structured-headers`, RFC 9651), its framing read off raw
 * sockets, against a hostile upstream (`net.createServer`, writing whatever bytes it likes) and a raw client.
 * Against `Proxy.layer` (what `wakuwaku proxy` runs) in this process, on an embedded store, and against
 * `Proxy.make` served by `Proxy.serve` (with `RateLimit.middleware` for the fields), which shares its server.
 */
import type * as NodeHttpClient from "@effect/platform-node/NodeHttpClient"
import type * as HttpApp from "@effect/platform/HttpApp"
import * as HttpServer from "@effect/platform/HttpServer"
import { Context, Effect, Exit, Layer, Logger, LogLevel, Scope } from "effect"
import type * as Http from "node:http"
import * as Net from "node:net"
import { type Item, parseList, Token } from "structured-headers"
import { afterEach, describe, expect, it } from "vitest"
import { FixedWindow, Rate, Redis, TokenBucket } from "wakuwaku"
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
const serveMiddleware = (
  upstreamUrl: string,
  limiter: FixedWindow.FixedWindow<string> | TokenBucket.TokenBucket<string>
): Promise<number> =>
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

/**
 * The two front ends, each forwarding to `upstream` without a limit: `Proxy.layer` (its own node:http server,
 * undici to the upstream) and `Proxy.make` served by `Proxy.serve` (@effect/platform, node:http to the upstream).
 */
const FRONT_ENDS: ReadonlyArray<readonly [string, (upstream: string) => Promise<number>]> = [
  ["Proxy.layer", (url) => serveLayer({ upstream: url })],
  ["Proxy.serve", (url) => serveApp(Proxy.make({ upstream: url }))]
]

/** A node:http upstream answering every request with `respond`, closed after the test. */
const startUpstream = async (respond: (req: Http.IncomingMessage, res: Http.ServerResponse) => void) => {
  const server = await upstream(respond)
  cleanups.push(server.close)
  return server
}

/**
 * A hostile upstream: a bare TCP server that reads each request head and answers it with the bytes
 * `answer` gives for its request line, written as they are (and the connection ended after them when
 * `end` says so). `seen` holds the request lines in the order they arrived.
 */
const hostileUpstream = async (
  answer: (requestLine: string, socket: Net.Socket) => { readonly bytes: string; readonly end?: boolean }
) => {
  const seen: Array<string> = []
  const server = Net.createServer((socket) => {
    let buffered = ""
    socket.on("data", (chunk: Buffer) => {
      buffered += chunk.toString("latin1")
      // Bodiless requests only: each head ends a request.
      for (let end = buffered.indexOf("\r\n\r\n"); end !== -1; end = buffered.indexOf("\r\n\r\n")) {
        const line = buffered.slice(0, buffered.indexOf("\r\n"))
        buffered = buffered.slice(end + 4)
        seen.push(line)
        const { bytes, end: close } = answer(line, socket)
        if (close === true) socket.end(bytes, "latin1")
        else socket.write(bytes, "latin1")
      }
    })
    socket.on("error", () => {})
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  cleanups.push(() =>
    new Promise<void>((resolve) => {
      server.close(() => resolve())
    })
  )
  return { url: `http://127.0.0.1:${(server.address() as Net.AddressInfo).port}`, seen }
}

/**
 * A raw client: writes `bytes` on a fresh connection and reads everything until the proxy closes the
 * connection (Node's own keep-alive timeout, 5 s, closes an idle one in any case).
 */
const untilClosed = (port: number, bytes: string): Promise<string> =>
  new Promise((resolve) => {
    const socket = Net.connect(port, "127.0.0.1")
    let data = ""
    socket.on("connect", () => socket.write(bytes, "latin1"))
    socket.on("data", (chunk: Buffer) => (data += chunk.toString("latin1")))
    socket.on("error", () => {})
    socket.on("close", () => resolve(data))
  })

/** The status lines of the responses in a raw byte stream (each at the start of a line). */
const statusLines = (bytes: string): Array<string> => [...bytes.matchAll(/^HTTP\/1\.1 \d{3}[^\r]*/gm)].map((m) => m[0])

/** A header of a raw response head, by name (any case). */
const headerOf = (response: string, name: string): string | undefined =>
  new RegExp(`^${name}: (.*)\r$`, "im").exec(response.slice(0, response.indexOf("\r\n\r\n") + 2))?.[1]

/** The body of the one raw response in `bytes`. */
const bodyOf = (bytes: string): string => bytes.slice(bytes.indexOf("\r\n\r\n") + 4)

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

  // A bucket of 100 refilled 100 a minute: q=100, w=60, and t (the seconds until it is full again) exact.
  const BUCKET = () => TokenBucket.make<string>("proxy", 100, Rate.make(100, "1 minute"))

  it("Proxy.layer: both fields hold the upstream's member, then the proxy's", async () => {
    const up = await origin(200)
    const port = await serveLayer({
      upstream: up.url,
      rateLimit: { limiter: BUCKET(), onStoreFailure: "fail-closed" }
    })
    const reply = await request(port)
    expect(reply.status).toBe(200)
    expect(field(reply, "ratelimit-policy")).toEqual([["origin", { q: 5, w: 60 }], ["proxy", { q: 100, w: 60 }]])
    expect(field(reply, "ratelimit")).toEqual([["origin", { r: 1, t: 50 }], ["proxy", { r: 99, t: 1 }]])
  })

  it("Proxy.layer: the upstream's own 429 keeps its Retry-After and its members, the proxy's appended", async () => {
    const up = await origin(429, { "retry-after": "30", "ratelimit": "\"origin\";r=0;t=30" })
    const port = await serveLayer({
      upstream: up.url,
      rateLimit: { limiter: BUCKET(), onStoreFailure: "fail-closed" }
    })
    await request(port)
    const reply = await request(port)
    expect(reply.status).toBe(429)
    expect(valuesOf(reply, "retry-after")).toEqual(["30"])
    expect(field(reply, "ratelimit-policy")).toEqual([["origin", { q: 5, w: 60 }], ["proxy", { q: 100, w: 60 }]])
    expect(field(reply, "ratelimit")).toEqual([["origin", { r: 0, t: 30 }], ["proxy", { r: 98, t: 2 }]])
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
    const port = await serveMiddleware(up.url, BUCKET())
    const reply = await request(port)
    expect(valuesOf(reply, "retry-after")).toEqual(["30"])
    expect(field(reply, "ratelimit-policy")).toEqual([["origin", { q: 5, w: 60 }], ["proxy", { q: 100, w: 60 }]])
    expect(field(reply, "ratelimit")).toEqual([["origin", { r: 1, t: 50 }], ["proxy", { r: 99, t: 1 }]])
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

describe.each(FRONT_ENDS)("8. framing, against a hostile upstream and a raw client: %s", (_frontEnd, start) => {
  it.each([
    ["304 Not Modified", "Content-Length: 1234", "Content-Length: 1234"],
    ["204 No Content", "Content-Length: 5", undefined]
  ])(
    "a %s that carries %s and no body is relayed (RFC 9110 §8.6), and the connection serves the next request",
    async (status, length, relayed) => {
      const up = await hostileUpstream((line) =>
        line.startsWith("GET /first ")
          ? { bytes: `HTTP/1.1 ${status}\r\n${length}\r\nETag: "v1"\r\n\r\n` }
          : { bytes: "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok" }
      )
      const port = await start(up.url)
      const bytes = await untilClosed(
        port,
        "GET /first HTTP/1.1\r\nHost: x\r\n\r\nGET /second HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
      )
      const [first, second] = bytes.split(/(?=^HTTP\/1\.1 )/m)
      expect(statusLines(bytes)).toEqual([`HTTP/1.1 ${status}`, "HTTP/1.1 200 OK"])
      expect(headerOf(first!, "etag")).toBe("\"v1\"")
      expect(headerOf(first!, "content-length")).toBe(relayed?.slice("Content-Length: ".length))
      expect(headerOf(first!, "proxy-status")).toBe(`wakuwaku; received-status=${status.slice(0, 3)}`)
      expect(bodyOf(first!)).toBe("")
      expect(bodyOf(second!)).toBe("ok")
      expect(up.seen).toEqual(["GET /first HTTP/1.1", "GET /second HTTP/1.1"])
    }
  )

  it("a body whose final transfer coding is not chunked ends with the connection, never runs into the next response", async () => {
    const up = await hostileUpstream((line) =>
      line.startsWith("GET /coded ")
        ? { bytes: "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nnot really gzip", end: true }
        : { bytes: "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsecond" }
    )
    const port = await start(up.url)
    const bytes = await untilClosed(
      port,
      "GET /coded HTTP/1.1\r\nHost: x\r\n\r\nGET /next HTTP/1.1\r\nHost: x\r\n\r\n"
    )
    // The coding is the upstream's, kept; the body ends where the connection does (RFC 9112 §6.3), so the
    // connection carries nothing after it.
    expect(statusLines(bytes)).toEqual(["HTTP/1.1 200 OK"])
    expect(headerOf(bytes, "transfer-encoding")).toBe("gzip")
    expect(headerOf(bytes, "connection")).toBe("close")
    expect(bodyOf(bytes)).toBe("not really gzip")
  })

  it.each([
    ["Host: a\r\nHost: b\r\n"],
    ["Host: a\r\nhOsT: a\r\n"]
  ])("two Host lines (%j): 400 (RFC 9112 §3.2), nothing forwarded, the connection closed", async (hosts) => {
    const up = await hostileUpstream(() => ({ bytes: "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok" }))
    const port = await start(up.url)
    const bytes = await untilClosed(port, `GET / HTTP/1.1\r\n${hosts}\r\n`)
    expect(statusLines(bytes)).toEqual(["HTTP/1.1 400 Bad Request"])
    expect(headerOf(bytes, "proxy-status")).toBe("wakuwaku; error=http_request_error")
    expect(headerOf(bytes, "connection")).toBe("close")
    expect(up.seen).toEqual([])
  })

  it.each([
    ["an HTTP/0.9 request line (no version)", "GET /a\r\n\r\n"],
    ["HTTP/0.9 by name", "GET /a HTTP/0.9\r\n\r\n"],
    ["a text request line that says HTTP/2.0", "GET /a HTTP/2.0\r\nHost: x\r\n\r\n"]
  ])("%s is refused with 400, nothing forwarded", async (_what, bytes) => {
    const up = await hostileUpstream(() => ({ bytes: "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok" }))
    const port = await start(up.url)
    const response = await untilClosed(port, bytes)
    expect(statusLines(response)).toEqual(["HTTP/1.1 400 Bad Request"])
    expect(headerOf(response, "proxy-status")).toBe("wakuwaku; error=http_request_error")
    expect(headerOf(response, "connection")).toBe("close")
    expect(up.seen).toEqual([])
  })

  it("junk after a forwarded request: the forwarded request gets its own response, then the connection closes", async () => {
    const up = await hostileUpstream(() => ({ bytes: "HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nexecuted" }))
    const port = await start(up.url)
    const bytes = await untilClosed(port, "POST /order HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\nJUNK\r\n\r\n")
    expect(up.seen).toEqual(["POST /order HTTP/1.1"])
    expect(statusLines(bytes)).toEqual(["HTTP/1.1 200 OK"])
    expect(headerOf(bytes, "proxy-status")).toBe("wakuwaku; received-status=200")
    expect(headerOf(bytes, "connection")).toBe("close")
    expect(bodyOf(bytes)).toBe("executed")
  })

  it("junk while a forwarded response streams: its body still arrives whole, then the connection closes", async () => {
    const upstreamSockets: Array<Net.Socket> = []
    const up = await hostileUpstream((_line, socket) => {
      upstreamSockets.push(socket)
      return { bytes: "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nfirst" }
    })
    const port = await start(up.url)
    const bytes = await new Promise<string>((resolve) => {
      const socket = Net.connect(port, "127.0.0.1")
      let data = ""
      socket.on("connect", () => socket.write("GET /stream HTTP/1.1\r\nHost: x\r\n\r\n"))
      socket.on("data", (chunk: Buffer) => {
        data += chunk.toString("latin1")
        // The head and half the body are here: the junk reaches the proxy before the rest of the body leaves
        // the upstream.
        if (data.endsWith("\r\n\r\nfirst")) socket.write("JUNK\r\n\r\n", () => upstreamSockets[0]!.write("-last"))
      })
      socket.on("error", () => {})
      socket.on("close", () => resolve(data))
    })
    expect(statusLines(bytes)).toEqual(["HTTP/1.1 200 OK"])
    expect(bodyOf(bytes)).toBe("first-last")
    expect(up.seen).toEqual(["GET /stream HTTP/1.1"])
  })
})
