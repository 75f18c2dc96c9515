/**
 * The proxy tried as an attacker would (path escapes, the header cap, secrets in logs, bodies of denied
 * clients, key spaces, forwarding details, Proxy-Status, a store down at start), over raw sockets: each
 * test is the attacker's request, against `Proxy.layer` (what `wakuwaku proxy` runs) in this process, or against the
 * command itself in a child process. Three address parsers agreeing is test/http/address.test.ts.
 */
import { Context, Effect, Exit, Layer, Logger, LogLevel, Scope } from "effect"
import type * as Http from "node:http"
import * as Net from "node:net"
import { gunzipSync, gzipSync } from "node:zlib"
import { afterEach, describe, expect, it } from "vitest"
import { Rate, Redis, TokenBucket } from "wakuwaku"
import * as Proxy from "wakuwaku/Proxy"
import { RedisServer } from "wakuwaku/testing"
import { cleanEnv, closedPort, request, runCli, startProxy, upstream } from "./support/proxy.js"

const MB = 1024 * 1024

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

/** What an upstream saw of one request. */
interface Seen {
  readonly method: string
  readonly url: string
  readonly headers: Http.IncomingHttpHeaders
  readonly body: Buffer
}

const recordingUpstream = async (respond?: (req: Http.IncomingMessage, res: Http.ServerResponse) => void) => {
  const seen: Array<Seen> = []
  const server = await upstream((req, res) => {
    const chunks: Array<Buffer> = []
    req.on("data", (chunk: Buffer) => chunks.push(chunk))
    req.on("end", () => {
      seen.push({ method: req.method ?? "", url: req.url ?? "", headers: req.headers, body: Buffer.concat(chunks) })
      if (respond !== undefined) respond(req, res)
      else res.end("ok")
    })
  })
  cleanups.push(server.close)
  return { ...server, seen }
}

/**
 * Writes raw bytes on a fresh connection and reads until the server closes it or, once its answer has begun,
 * goes quiet for `idleMs` (the quiet counted from the first byte: a loaded machine may take longer to answer).
 */
const raw = (
  port: number,
  bytes: string | Buffer,
  options: { readonly idleMs?: number | undefined; readonly localAddress?: string | undefined } = {}
): Promise<string> =>
  new Promise((resolve) => {
    const socket = Net.connect(
      options.localAddress === undefined
        ? { port, host: "127.0.0.1" }
        : { port, host: "127.0.0.1", localAddress: options.localAddress }
    )
    let data = ""
    let timer: ReturnType<typeof setTimeout> | undefined
    const done = () => {
      if (timer !== undefined) clearTimeout(timer)
      socket.destroy()
      resolve(data)
    }
    const idle = () => {
      if (timer !== undefined) clearTimeout(timer)
      timer = setTimeout(done, options.idleMs ?? 300)
    }
    socket.on("connect", () => socket.write(bytes))
    socket.on("data", (chunk: Buffer) => {
      data += chunk.toString("latin1")
      idle()
    })
    socket.on("error", done)
    socket.on("close", done)
  })

const statusOf = (response: string): number => Number(/^HTTP\/1\.1 (\d{3})/.exec(response)?.[1] ?? 0)
const headerOf = (response: string, name: string): string | undefined =>
  new RegExp(`^${name}: (.*)\r$`, "im").exec(response)?.[1]

describe("1. path escape: the forwarded path stays under the upstream's base path", () => {
  it.each([
    ["/../admin", "/v1/admin"],
    ["/%2e%2e/admin", "/v1/admin"],
    ["/%2E%2e/admin?x=1", "/v1/admin?x=1"],
    ["/a/./../../secret", "/v1/secret"],
    ["/a/%2e/b/%2e%2e/c", "/v1/a/c"],
    ["/..;/admin", "/v1/admin"],
    ["/a/b/..", "/v1/a/"],
    ["/users/42", "/v1/users/42"],
    ["/group%2Fproject/raw", "/v1/group%2Fproject/raw"],
    ["http://attacker.example/../admin", "/v1/admin"]
  ])("GET %s reaches the upstream as %s", async (target, expected) => {
    const up = await recordingUpstream()
    const port = await serveLayer({ upstream: `${up.url}/v1` })
    const response = await raw(port, `GET ${target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`)
    expect(statusOf(response)).toBe(200)
    expect(up.seen.map((s) => s.url)).toEqual([expected])
  })

  it.each(["/..%2fadmin", "/..%5Cadmin", "/a/..\\admin", "/.%2e%2f..%2fadmin"])(
    "GET %s hides a dot segment behind an encoded slash: 400, nothing forwarded",
    async (target) => {
      const up = await recordingUpstream()
      const port = await serveLayer({ upstream: `${up.url}/v1` })
      const response = await raw(port, `GET ${target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`)
      expect(statusOf(response)).toBe(400)
      expect(headerOf(response, "proxy-status")).toBe("wakuwaku; error=http_request_error")
      expect(up.seen).toEqual([])
    }
  )

  it("OPTIONS * stays OPTIONS *, never OPTIONS /v1/; another method with * is refused", async () => {
    const up = await recordingUpstream()
    const port = await serveLayer({ upstream: `${up.url}/v1` })
    expect(statusOf(await raw(port, "OPTIONS * HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"))).toBe(200)
    expect(statusOf(await raw(port, "GET * HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"))).toBe(400)
    expect(up.seen.map((s) => [s.method, s.url])).toEqual([["OPTIONS", "*"]])
  })

  it("Proxy.make (the @effect/platform front end) removes dot segments too", async () => {
    const up = await recordingUpstream()
    const scope = Effect.runSync(Scope.make())
    const context = await Effect.runPromise(
      Layer.buildWithScope(
        Proxy.serve(Proxy.make({ upstream: `${up.url}/v1` }), { port: 0, host: "127.0.0.1" }).pipe(
          Layer.provide(Logger.minimumLogLevel(LogLevel.None))
        ),
        scope
      )
    )
    cleanups.push(() => Effect.runPromise(Scope.close(scope, Exit.void)))
    const { HttpServer } = await import("@effect/platform")
    const address = Context.get(context, HttpServer.HttpServer).address
    const port = address._tag === "TcpAddress" ? address.port : 0
    await raw(port, "GET /%2e%2e/admin HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    expect(up.seen.map((s) => s.url)).toEqual(["/v1/admin"])
  })
})

/** `count` short header lines that mean nothing (1000 of them stay under Node's 16 KiB head). */
const filler = (count: number) => Array.from({ length: count }, (_, i) => `F${i}: 1\r\n`).join("")

describe("2. the header cap: too many lines is a 431, never a request forwarded with lines missing", () => {
  it("a trusted proxy's X-Forwarded-For past the cap does not leave the bucket to the client's own value", async () => {
    const up = await recordingUpstream()
    const limiter = TokenBucket.make<string>("cap-xff", 1, Rate.make(1, "1 minute"))
    const trustedProxies = ["127.0.0.1"]
    const port = await serveLayer({
      upstream: up.url,
      trustedProxies,
      rateLimit: { limiter, onStoreFailure: "fail-closed" }
    })
    // The client's own X-Forwarded-For comes first; the trusted proxy (the socket, 127.0.0.1) appended the
    // real one, which lies past line 1000.
    const statuses: Array<number> = []
    for (let i = 0; i < 5; i++) {
      const head = `GET / HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 198.51.100.${i}\r\n${filler(1000)}` +
        `X-Forwarded-For: 203.0.113.7\r\nConnection: close\r\n\r\n`
      statuses.push(statusOf(await raw(port, head)))
    }
    expect(statuses).toEqual([431, 431, 431, 431, 431])
    expect(up.seen).toEqual([])
  })

  it("a Content-Length past the cap: 431 with Proxy-Status, the POST never forwarded without its body", async () => {
    const up = await recordingUpstream()
    const port = await serveLayer({ upstream: up.url })
    const head = `POST / HTTP/1.1\r\nHost: x\r\n${filler(1000)}Content-Length: 5\r\n\r\nhello`
    const response = await raw(port, head)
    expect(statusOf(response)).toBe(431)
    expect(headerOf(response, "proxy-status")).toBe(
      "wakuwaku; error=http_request_error; details=\"too many header lines\""
    )
    expect(headerOf(response, "connection")).toBe("close")
    expect(up.seen).toEqual([])
  })

  it("at the cap every line is forwarded; the cap is an option", async () => {
    const up = await recordingUpstream()
    const port = await serveLayer({ upstream: up.url })
    // Host, Connection and the filler: 100 lines, the default cap (Apache's LimitRequestFields).
    const atCap = await raw(port, `GET / HTTP/1.1\r\nHost: x\r\n${filler(98)}Connection: close\r\n\r\n`)
    expect(statusOf(atCap)).toBe(200)
    expect(statusOf(await raw(port, `GET / HTTP/1.1\r\nHost: x\r\n${filler(99)}Connection: close\r\n\r\n`))).toBe(431)
    expect(Object.keys(up.seen[0]!.headers).filter((name) => /^f\d+$/.test(name))).toHaveLength(98)
    const small = await serveLayer({ upstream: up.url, maxHeaderLines: 5 })
    expect(statusOf(await raw(small, `GET / HTTP/1.1\r\nHost: x\r\n${filler(5)}\r\n`))).toBe(431)
    expect(() => Proxy.layer({ upstream: up.url, port: 0, maxHeaderLines: 0 })).toThrow(RangeError)
  })
})

describe("3. the Redis password is never printed", () => {
  it(
    "--redis and REDIS_URL with userinfo, in any form: the banner and the logs show ***, never the password",
    async () => {
      const port = await closedPort()
      const cases = [
        [["--redis", `redis://default:S3cret@127.0.0.1:${port}/0`], cleanEnv(), `redis://***@127.0.0.1:${port}/0`],
        [[], cleanEnv({ REDIS_URL: `redis://default:S3cret@127.0.0.1:${port}` }), `redis://***@127.0.0.1:${port}`],
        // A password with an unencoded @ ("S3c@ret"): the host is what follows the last @.
        [["--redis", `redis://:S3c@ret@127.0.0.1:${port}`], cleanEnv(), `redis://***@127.0.0.1:${port}`],
        // A password in the query, which ioredis reads as an option.
        [["--redis", `redis://127.0.0.1:${port}?password=S3cret`], cleanEnv(), `redis://127.0.0.1:${port}?password=***`]
      ] as const
      // The proxies run side by side: each takes seconds to start.
      await Promise.all(cases.map(async ([args, env, shown]) => {
        const proxy = await startProxy(["--demo", ...args], env)
        // A request while Redis is down: the outage's log line, with the store's URL.
        expect((await request(proxy.port)).status).toBe(200)
        proxy.child.kill("SIGTERM")
        const exit = await proxy.exited
        expect(exit.stdout).toContain(
          `store:    Redis at ${shown}, on failure: fallback (NOT ANSWERING at start: connect `
        )
        expect(exit.stdout + exit.stderr).toContain(`ratelimit.store: ${shown}\n`)
        expect(exit.stdout + exit.stderr).not.toMatch(/S3c|ret@|default:/)
      }))
    },
    120_000
  )

  it("a URL the command refuses is echoed masked: exit 1 (a misconfigured store), one line", async () => {
    const { code, stderr, stdout } = await runCli(["proxy", "--demo", "--redis", "http://:hunter2@127.0.0.1:6379"])
    expect({ code, stderr, stdout }).toEqual({
      code: 1,
      stderr: "wakuwaku proxy: --redis: expected a redis:// or rediss:// URL, got \"http://***@127.0.0.1:6379/\" " +
        "(see wakuwaku proxy --help)\n",
      stdout: ""
    })
  }, 30_000)
})

describe("4. a denied client cannot make the proxy read its body", () => {
  const overLimit = async () => {
    const up = await recordingUpstream()
    const limiter = TokenBucket.make<string>("body", 1, Rate.make(1, "1 minute"))
    const port = await serveLayer({ upstream: up.url, rateLimit: { limiter, onStoreFailure: "fail-closed" } })
    expect((await request(port)).status).toBe(200)
    return { up, port }
  }

  it("a 300 MB POST over the limit gets its 429 early and the connection is closed, not the body read", async () => {
    const { port, up } = await overLimit()
    const size = 300 * MB
    const result = await new Promise<{ readonly written: number; readonly response: string; readonly ms: number }>(
      (resolve) => {
        const started = Date.now()
        const socket = Net.connect(port, "127.0.0.1")
        let written = 0
        let response = ""
        const chunk = Buffer.alloc(64 * 1024, 7)
        const finish = () => resolve({ written, response, ms: Date.now() - started })
        socket.on("data", (data: Buffer) => (response += data.toString("latin1")))
        socket.on("close", finish)
        socket.on("error", () => {})
        socket.on("connect", () => {
          socket.write(`POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: ${size}\r\n\r\n`)
          const pump = () => {
            while (written < size && !socket.destroyed) {
              written += chunk.length
              if (!socket.write(chunk)) return void socket.once("drain", pump)
            }
          }
          pump()
        })
      }
    )
    expect(statusOf(result.response)).toBe(429)
    expect(headerOf(result.response, "connection")).toBe("close")
    // Socket buffers and the drain bound, not the body: the proxy read a few MB at most.
    expect(result.written).toBeLessThan(32 * MB)
    expect(result.ms).toBeLessThan(3_000)
    expect(up.seen).toHaveLength(1)
  })

  it("Expect: 100-continue over the limit: a 429 and no 100 Continue; under the limit, 100 Continue then the body", async () => {
    const up = await recordingUpstream()
    const limiter = TokenBucket.make<string>("expect", 1, Rate.make(1, "1 minute"))
    const port = await serveLayer({ upstream: up.url, rateLimit: { limiter, onStoreFailure: "fail-closed" } })
    const head = "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n"
    const first = await new Promise<string>((resolve) => {
      const socket = Net.connect(port, "127.0.0.1")
      let data = ""
      socket.on("connect", () => socket.write(head))
      socket.on("data", (chunk: Buffer) => {
        data += chunk.toString()
        if (data.startsWith("HTTP/1.1 100 Continue\r\n\r\n") && !data.includes("200 OK")) socket.write("hello")
        if (data.includes("\r\n\r\nok")) {
          socket.destroy()
          resolve(data)
        }
      })
    })
    expect(first).toMatch(/^HTTP\/1\.1 100 Continue\r\n\r\nHTTP\/1\.1 200 OK/)
    expect(up.seen.map((s) => s.body.toString())).toEqual(["hello"])
    const denied = await raw(port, head)
    expect(denied).toMatch(/^HTTP\/1\.1 429 /)
    expect(denied).not.toContain("100 Continue")
    expect(up.seen).toHaveLength(1)
  })
})

describe("5. --key header:NAME and the IP fallback do not share keys", () => {
  it("X-Api-Key: 127.0.0.5 does not spend the bucket of the client at 127.0.0.5", async () => {
    const up = await recordingUpstream()
    const limiter = TokenBucket.make<string>("keys", 1, Rate.make(1, "1 minute"))
    const ip = Proxy.header("x-api-key")
    const port = await serveLayer({ upstream: up.url, rateLimit: { limiter, key: ip, onStoreFailure: "fail-closed" } })
    const get = (headers: string, localAddress?: string) =>
      raw(port, `GET / HTTP/1.1\r\nHost: x\r\n${headers}Connection: close\r\n\r\n`, { localAddress }).then(statusOf)
    expect(await get("X-Api-Key: 127.0.0.5\r\n")).toBe(200)
    expect(await get("X-Api-Key: 127.0.0.5\r\n")).toBe(429)
    expect(await get("", "127.0.0.5")).toBe(200)
    expect(await get("", "127.0.0.5")).toBe(429)
    expect(ip({ remoteAddress: "127.0.0.5", headers: { "x-api-key": "k" } })).toBe("x-api-key=k")
    expect(ip({ remoteAddress: "127.0.0.5", headers: {} })).toBe("127.0.0.5")
    // A key the store will not take (over 4096 bytes) is the client's 400, not the proxy's 500.
    const huge = await raw(
      port,
      `GET / HTTP/1.1\r\nHost: x\r\nX-Api-Key: ${"k".repeat(5000)}\r\nConnection: close\r\n\r\n`
    )
    expect(statusOf(huge)).toBe(400)
    expect(headerOf(huge, "proxy-status")).toBe("wakuwaku; error=http_request_error")
  })
})

describe("7. forwarding details", () => {
  it("an upstream that answers 101 to a request that asked for no upgrade: 502 at once, not 504 after the timeout", async () => {
    const server = Net.createServer((socket) =>
      socket.once(
        "data",
        () => socket.write("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
      )
    )
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
    cleanups.push(() => new Promise((resolve) => server.close(resolve)))
    const port = await serveLayer({
      upstream: `http://127.0.0.1:${(server.address() as Net.AddressInfo).port}`,
      timeout: "5 seconds"
    })
    const started = Date.now()
    const response = await raw(port, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    expect(statusOf(response)).toBe(502)
    expect(headerOf(response, "proxy-status")).toMatch(/^wakuwaku; error=http_protocol_error/)
    expect(Date.now() - started).toBeLessThan(1_000)
  })

  it("Transfer-Encoding: gzip, chunked is forwarded faithfully, both ways: the coding is kept, the bytes too", async () => {
    const text = "hello, coded world ".repeat(100)
    const coded = gzipSync(text)
    const up = await recordingUpstream((_req, res) => {
      res.writeHead(200, { "transfer-encoding": "gzip, chunked" })
      res.end(coded)
    })
    const port = await serveLayer({ upstream: up.url })
    const body = `${coded.length.toString(16)}\r\n${coded.toString("latin1")}\r\n0\r\n\r\n`
    const response = await raw(
      port,
      Buffer.from(
        `POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\nConnection: close\r\n\r\n${body}`,
        "latin1"
      )
    )
    const seen = up.seen[0]!
    expect(seen.headers["transfer-encoding"]).toBe("gzip, chunked")
    expect(gunzipSync(seen.body).toString()).toBe(text)
    expect(headerOf(response, "transfer-encoding")).toBe("gzip, chunked")
    const chunked = Buffer.from(response.slice(response.indexOf("\r\n\r\n") + 4), "latin1").toString("latin1")
    // De-chunk the response body and ungzip it.
    let rest = chunked
    const parts: Array<Buffer> = []
    for (;;) {
      const eol = rest.indexOf("\r\n")
      const size = parseInt(rest.slice(0, eol), 16)
      if (size === 0) break
      parts.push(Buffer.from(rest.slice(eol + 2, eol + 2 + size), "latin1"))
      rest = rest.slice(eol + 2 + size + 2)
    }
    expect(gunzipSync(Buffer.concat(parts)).toString()).toBe(text)
  })

  it("a 204 loses its Content-Length", async () => {
    const server = Net.createServer((socket) =>
      socket.once("data", () => socket.end("HTTP/1.1 204 No Content\r\nContent-Length: 0\r\nX-Kept: 1\r\n\r\n"))
    )
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
    cleanups.push(() => new Promise((resolve) => server.close(resolve)))
    const port = await serveLayer({ upstream: `http://127.0.0.1:${(server.address() as Net.AddressInfo).port}` })
    const response = await raw(port, "DELETE /x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    expect(statusOf(response)).toBe(204)
    expect(headerOf(response, "x-kept")).toBe("1")
    expect(headerOf(response, "content-length")).toBeUndefined()
  })

  it("X-Real-IP, X-Forwarded-Port and X-Forwarded-Prefix pass from a trusted proxy only", async () => {
    const up = await recordingUpstream()
    const claims = "X-Real-IP: 6.6.6.6\r\nX-Forwarded-Port: 443\r\nX-Forwarded-Prefix: /admin\r\n"
    const untrusted = await serveLayer({ upstream: up.url })
    const trusted = await serveLayer({ upstream: up.url, trustedProxies: ["127.0.0.0/8"] })
    await raw(untrusted, `GET / HTTP/1.1\r\nHost: x\r\n${claims}Connection: close\r\n\r\n`)
    await raw(trusted, `GET / HTTP/1.1\r\nHost: x\r\n${claims}Connection: close\r\n\r\n`)
    const pick = (
      seen: Seen
    ) => [seen.headers["x-real-ip"], seen.headers["x-forwarded-port"], seen.headers["x-forwarded-prefix"]]
    expect(pick(up.seen[0]!)).toEqual([undefined, undefined, undefined])
    expect(pick(up.seen[1]!)).toEqual(["6.6.6.6", "443", "/admin"])
  })
})

describe("8. every response the proxy makes carries Proxy-Status, Node's own included", () => {
  it.each([
    ["a request that is not HTTP", "GARBAGE\r\n\r\n", 400],
    ["a head over Node's 16 KiB", `GET / HTTP/1.1\r\nHost: x\r\nX-Big: ${"a".repeat(20_000)}\r\n\r\n`, 431],
    [
      "an Expect other than 100-continue",
      "GET / HTTP/1.1\r\nHost: x\r\nExpect: bogus\r\nConnection: close\r\n\r\n",
      417
    ]
  ])("%s: %s", async (_what, bytes, status) => {
    const up = await recordingUpstream()
    const port = await serveLayer({ upstream: up.url })
    const response = await raw(port, bytes)
    expect(statusOf(response)).toBe(status)
    expect(headerOf(response, "proxy-status")).toBe("wakuwaku; error=http_request_error")
    expect(up.seen).toEqual([])
  })

  it("a request that takes longer than requestTimeout: 408 with Proxy-Status", async () => {
    const up = await recordingUpstream()
    const port = await serveLayer({ upstream: up.url, requestTimeout: "300 millis" })
    const response = await raw(port, "GET / HTTP/1.1\r\nHost: x\r\n", { idleMs: 2_000 })
    expect(statusOf(response)).toBe(408)
    expect(headerOf(response, "proxy-status")).toBe("wakuwaku; error=http_request_error")
  })
})

describe("9. the proxy starts while Redis is down under fallback and fail-open", () => {
  it("fallback: starts, says so, limits in this process, then shares limits once Redis answers", async () => {
    const port = await closedPort()
    const proxy = await startProxy([
      "--demo",
      "--redis",
      `redis://127.0.0.1:${port}`,
      "--capacity",
      "2",
      "--namespace",
      "down-at-start"
    ])
    cleanups.push(async () => {
      proxy.child.kill("SIGKILL")
      await proxy.exited
    })
    // Effect's logger writes to stdout.
    let output = ""
    proxy.child.stdout?.on("data", (chunk: Buffer) => (output += chunk.toString()))
    proxy.child.stderr?.on("data", (chunk: Buffer) => (output += chunk.toString()))
    const statuses = [await request(proxy.port), await request(proxy.port), await request(proxy.port)].map((r) =>
      r.status
    )
    expect(statuses).toEqual([200, 200, 429])
    // Redis comes up on that port: the proxy notices, and decisions go to it.
    const redis = await Effect.runPromise(Effect.scoped(Effect.gen(function*() {
      const server = yield* RedisServer.make({ port })
      const { Redis: IORedis } = yield* Effect.promise(() => import("ioredis"))
      const client = yield* Effect.acquireRelease(
        Effect.sync(() => new IORedis(server.url)),
        (client) => Effect.promise(() => client.quit())
      )
      const keys = () => Effect.promise(() => client.keys("*down-at-start*"))
      // Requests until one reaches Redis (the proxy's client reconnects with a backoff of its own).
      const started = performance.now()
      while ((yield* keys()).length === 0 && performance.now() - started < 15_000) {
        yield* Effect.promise(() => request(proxy.port))
        yield* Effect.sleep("25 millis")
      }
      // The bucket of 2 in Redis has one token left for this client.
      const reply = yield* Effect.promise(() => request(proxy.port, { headers: { "x-try": "redis" } }))
      return { reply, keys: yield* keys() }
    })))
    expect(redis.reply.status).toBe(200)
    expect(redis.keys.length).toBe(1)
    proxy.child.kill("SIGTERM")
    const exit = await proxy.exited
    expect(exit.stdout).toContain(
      `(NOT ANSWERING at start: connect ECONNREFUSED 127.0.0.1:${port}; fallback applies until it does)`
    )
    expect(exit.stdout + exit.stderr).toContain(
      `WARN (#`
    )
    expect(exit.stdout + exit.stderr).toContain(
      `wakuwaku/http: the rate limiter's store failed (Connection: connect ECONNREFUSED 127.0.0.1:${port}); the ` +
        "local fallback decides until it answers\n"
    )
    expect(exit.stdout + exit.stderr).toMatch(
      /wakuwaku\/http: the rate limiter's store answers again, after \d+ failed/
    )
    expect(exit.code).toBe(0)
  }, 30_000)

  it("fail-open: starts and lets requests through while Redis is down", async () => {
    const port = await closedPort()
    const proxy = await startProxy([
      "--demo",
      "--redis",
      `redis://127.0.0.1:${port}`,
      "--capacity",
      "1",
      "--on-store-failure",
      "fail-open"
    ])
    cleanups.push(async () => {
      proxy.child.kill("SIGKILL")
      await proxy.exited
    })
    const started = Date.now()
    const statuses = [await request(proxy.port), await request(proxy.port), await request(proxy.port)].map((r) =>
      r.status
    )
    expect(statuses).toEqual([200, 200, 200])
    // No offline queue while down: each request is decided at once, not after the store timeout.
    expect(Date.now() - started).toBeLessThan(1_000)
  }, 30_000)
})
