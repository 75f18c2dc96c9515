/**
 * The proxy's delay mode (src/internal/proxy/delay.ts), over real sockets and a redis-server of this file's own
 * (so that `INFO commandstats` counts only these tests' store calls): `Proxy.layer` in this process for the
 * behaviour, and three `wakuwaku proxy --mode delay` processes sharing the server for the bound across replicas.
 *
 * Times are compared on the server's clock: Redis `TIME` before the requests are sent, and each arrival at the
 * upstream mapped onto it by an offset measured once (one `TIME` round trip; on this machine both read the same
 * system clock). A turn is due at `t0 + (k − capacity + 1) / rate` for the k-th request (from 0) of a bucket full
 * at t0, the first grant, which comes after the `TIME` read before sending: no request may reach the upstream
 * before that, on any process, and each may arrive later (the reply's way back, its timer, the forwarding).
 */
import { Context, Duration, Effect, Either, Exit, Layer, Logger, LogLevel, Scope } from "effect"
import { Redis as IORedis } from "ioredis"
import * as Http from "node:http"
import { performance } from "node:perf_hooks"
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest"
import { FixedWindow, Rate, Redis, TokenBucket } from "wakuwaku"
import * as Proxy from "wakuwaku/Proxy"
import { RedisServer } from "wakuwaku/testing"
import { parse } from "../src/internal/proxy/cli.js"
import * as configFile from "../src/internal/proxy/config.js"
import { CANCEL, RESERVE } from "../src/internal/tokenBucket.js"
import { cleanEnv, type Reply, request, startProxy, upstream, valueOf } from "./support/proxy.js"

const cleanups: Array<() => Promise<unknown>> = []
afterEach(async () => {
  await Promise.all(cleanups.splice(0).map((cleanup) => cleanup()))
})

const scope = Effect.runSync(Scope.make())
let url = ""
let raw: IORedis
/** Redis's clock minus this process's wall clock, in ms. */
let offset = 0

const wallClock = () => performance.timeOrigin + performance.now()

/** The server's time now, in ms (fractional). */
const serverNow = async (): Promise<number> => {
  const [s, us] = await raw.time()
  return Number(s) * 1000 + Number(us) / 1000
}

beforeAll(async () => {
  url = (await Effect.runPromise(Scope.extend(RedisServer.make(), scope))).url
  raw = new IORedis(url)
  // Loaded beforehand, so that no call meets NOSCRIPT and each request is one EVALSHA.
  await raw.script("LOAD", RESERVE.lua)
  await raw.script("LOAD", CANCEL.lua)
  const before = wallClock()
  const server = await serverNow()
  offset = server - (before + wallClock()) / 2
})
afterAll(async () => {
  await raw?.quit()
  await Effect.runPromise(Scope.close(scope, Exit.void))
})

/** EVALSHA calls since the last `CONFIG RESETSTAT`. */
const evalshas = async (): Promise<number> =>
  Number(/^cmdstat_evalsha:calls=(\d+)/m.exec(await raw.info("commandstats"))?.[1] ?? 0)

/** An upstream that records when each request arrived, on the server's clock, and answers 200. */
const timedUpstream = async () => {
  const arrivals: Array<number> = []
  const server = await upstream((_, res) => {
    arrivals.push(wallClock() + offset)
    res.end("ok")
  })
  cleanups.push(server.close)
  return { ...server, arrivals }
}

/** Runs `Proxy.layer` on a free loopback port with this file's Redis until the test ends; its `Proxy.Server`. */
const serveLayer = async (
  options: Omit<Proxy.LayerOptions<Redis.ReadWrite>, "port" | "host">
): Promise<Proxy.Server["Type"]> => {
  const layerScope = Effect.runSync(Scope.make())
  const context = await Effect.runPromise(
    Layer.buildWithScope(
      Proxy.layer<Redis.ReadWrite>({ ...options, port: 0, host: "127.0.0.1", shutdownTimeout: "1 second" }).pipe(
        Layer.provide(Redis.layer({ url })),
        Layer.provide(Logger.minimumLogLevel(LogLevel.None))
      ),
      layerScope
    )
  )
  cleanups.push(() => Effect.runPromise(Scope.close(layerScope, Exit.void)))
  return Context.get(context, Proxy.Server)
}

/** Waits until `condition` holds (checked every 5 ms), failing after 10 s. */
const until = async (what: string, condition: () => boolean | Promise<boolean>): Promise<void> => {
  const deadline = Date.now() + 10_000
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`)
    await new Promise((resolve) => setTimeout(resolve, 5))
  }
}

/** A request that can be abandoned: its reply, and a way to close its connection before the reply. */
const abandonable = (port: number, key: string) => {
  const req = Http.request({ host: "127.0.0.1", port, agent: false, path: "/", headers: { "x-k": key } })
  const replied = new Promise<number>((resolve, reject) => {
    req.on("response", (response) => {
      response.resume()
      resolve(response.statusCode ?? 0)
    })
    req.on("error", reject)
  })
  replied.catch(() => undefined)
  req.end()
  return { replied, abandon: () => req.destroy() }
}

/** The tokens a bucket's key holds ("<tokens> <ts µs>"), or undefined for a full bucket (no key). */
const tokensOf = async (namespace: string, name: string): Promise<number | undefined> => {
  const value = await raw.get(`@@wakuwaku:TokenBucket:${namespace}:${name}`)
  return value === null ? undefined : Number(value.split(" ")[0])
}

const byHeader = Proxy.header("x-k")

describe("delay mode (Proxy.layer)", () => {
  it("over the rate, a request waits its turn on the server's clock and is forwarded; one EVALSHA each", async () => {
    const up = await timedUpstream()
    const capacity = 2
    // A token back every 150 ms: the six requests arrive well within one, even on a loaded machine (with 50 ms,
    // CI's load spread them enough for a token to come back between them).
    const stepMs = 150
    const server = await serveLayer({
      upstream: up.url,
      rateLimit: {
        limiter: TokenBucket.make<string>("wait", capacity, Rate.make(1, `${stepMs} millis`)),
        key: byHeader,
        onStoreFailure: "fail-closed",
        delay: { maxWait: "2 seconds" }
      }
    })
    {
      await raw.config("RESETSTAT")
      const before = await serverNow()
      const replies = await Promise.all(
        Array.from({ length: 6 }, () => request(server.address.port, { headers: { "x-k": "a" } }))
      )
      expect(replies.map((r) => r.status)).toEqual([200, 200, 200, 200, 200, 200])
      // The fields of each: the whole tokens left (0 in debt, while the request waited its turn), t = 1 s.
      for (const reply of replies) expect(valueOf(reply, "ratelimit")).toMatch(/^"wait";r=[01];t=1$/)
      expect(replies.filter((r) => valueOf(r, "ratelimit") === "\"wait\";r=0;t=1").length).toBeGreaterThanOrEqual(4)
      expect(await evalshas()).toBe(6)
      const arrivals = [...up.arrivals].sort((a, b) => a - b)
      // Never early: the k-th no sooner than its turn (a Node timer may fire up to 1 ms early).
      arrivals.forEach((at, k) => {
        expect(at).toBeGreaterThanOrEqual(before + Math.max(0, k - capacity + 1) * stepMs - 1)
      })
      expect(server.waiting()).toBe(0)
    }
  })

  it("a turn further than maxWait is a 429 with Retry-After and the fields; nothing is taken", async () => {
    const up = await timedUpstream()
    const server = await serveLayer({
      upstream: up.url,
      rateLimit: {
        limiter: TokenBucket.make<string>("far", 1, Rate.make(1, "200 millis")),
        key: byHeader,
        onStoreFailure: "fail-closed",
        delay: { maxWait: "200 millis" }
      }
    })
    const port = server.address.port
    const first = await request(port, { headers: { "x-k": "b" } })
    const second = request(port, { headers: { "x-k": "b" } })
    await until("the second waits", () => server.waiting() === 1)
    const third = await request(port, { headers: { "x-k": "b" } })
    expect(first.status).toBe(200)
    expect((await second).status).toBe(200)
    expect(third.status).toBe(429)
    expect(valueOf(third, "retry-after")).toBe("1")
    expect(valueOf(third, "ratelimit")).toBe("\"far\";r=0;t=1")
    expect(valueOf(third, "ratelimit-policy")).toBe("\"far\";q=1;w=1")
    expect(valueOf(third, "proxy-status")).toBe("wakuwaku; error=http_request_error")
    expect(JSON.parse(third.body.toString())).toEqual({
      type: "https://iana.org/assignments/http-problem-types#quota-exceeded",
      title: "Quota Exceeded",
      status: 429,
      "violated-policies": ["far"]
    })
    expect(up.arrivals).toHaveLength(2)
  })

  it("past maxWaiting: 503 with Proxy-Status, no store call; a client gone gives its turn back", async () => {
    const up = await timedUpstream()
    const server = await serveLayer({
      upstream: up.url,
      maxWaiting: 2,
      rateLimit: {
        limiter: TokenBucket.make<string>("held", 1, Rate.make(1, "10 seconds")),
        key: byHeader,
        onStoreFailure: "fail-closed",
        delay: { maxWait: "1 minute" }
      }
    })
    const port = server.address.port
    await raw.config("RESETSTAT")
    expect((await request(port, { headers: { "x-k": "c" } })).status).toBe(200)
    const b = abandonable(port, "c")
    await until("b waits", () => server.waiting() === 1)
    const c = abandonable(port, "c")
    await until("c waits", () => server.waiting() === 2)
    // Two tokens owed (the refill, 0.1 a second, adds a little while the test runs).
    expect(await tokensOf("held", "x-k=c")).toBeLessThan(-1.5)

    const full: Reply = await request(port, { headers: { "x-k": "c" } })
    expect(full.status).toBe(503)
    expect(Object.fromEntries(full.headers.map(([name, value]) => [name.toLowerCase(), value]))).toMatchObject({
      "content-type": "application/problem+json",
      "ratelimit-policy": "\"held\";q=1;w=10",
      "proxy-status": "wakuwaku; error=proxy_internal_response; details=\"too many requests waiting\"",
      "cache-control": "no-store"
    })
    expect(JSON.parse(full.body.toString())).toEqual({
      type: "about:blank",
      title: "Service Unavailable",
      status: 503,
      detail: "The proxy holds its most requests waiting their turn (2)."
    })
    // The first request and the two reservations: the 503 asked nothing.
    expect(await evalshas()).toBe(3)

    // The last in the queue goes first: its turn is the queue's end, so its token comes back; then the other's.
    c.abandon()
    await until("c has left", () => server.waiting() === 1)
    const one = await tokensOf("held", "x-k=c")
    expect(one).toBeGreaterThan(-1.5)
    expect(one).toBeLessThan(-0.5)
    b.abandon()
    await until("b has left", () => server.waiting() === 0)
    const left = await tokensOf("held", "x-k=c")
    expect(left).toBeGreaterThan(-0.5)
    expect(left).toBeLessThan(0.5)
    // Two cancels, one call each.
    expect(await evalshas()).toBe(5)
    await expect(b.replied).rejects.toThrow()
    await expect(c.replied).rejects.toThrow()
    expect(up.arrivals).toHaveLength(1)
  })

  it("needs one token bucket: another limiter, or several, is a TypeError", async () => {
    const up = await timedUpstream()
    const fixed = FixedWindow.make<string>("fixed", 5, "10 seconds")
    const bucket = TokenBucket.make<string>("one", 5, Rate.perSecond(5))
    for (const limiter of [fixed, [bucket, TokenBucket.make<string>("two", 5, Rate.perSecond(5))]] as const) {
      expect(() =>
        Proxy.layer({
          upstream: up.url,
          port: 0,
          rateLimit: {
            limiter: limiter as unknown as Proxy.RateLimitOptions<never>["limiter"],
            onStoreFailure: "fail-closed",
            delay: { maxWait: "1 second" }
          }
        })
      ).toThrow(TypeError)
    }
    expect(() =>
      Proxy.layer({
        upstream: up.url,
        port: 0,
        rateLimit: { limiter: fixed, onStoreFailure: "fail-closed", delay: { maxWait: "1 second" } }
      })
    ).toThrow("a request waits its turn (delay) in one token bucket's reservation: the limiter must be one TokenBucket")
    expect(() => Proxy.layer({ upstream: up.url, port: 0, maxWaiting: 0 })).toThrow(RangeError)
    // A wait longer than a timer can: Effect's clock would never wake it.
    const far = TokenBucket.make<string>("far", 1, Rate.make(1, "1 hour"))
    expect(() =>
      Proxy.layer({
        upstream: up.url,
        port: 0,
        rateLimit: { limiter: far, onStoreFailure: "fail-closed", delay: { maxWait: "25 days" } }
      })
    ).toThrow(
      new RangeError(
        "wakuwaku/Proxy: maxWait must be at most 24d 20h 31m 23s 647ms (the longest a timer waits), got 25d"
      )
    )
  })
})

describe("a route in delay mode (Proxy.layer routes)", () => {
  it("waits its turn on its own route's bucket; other routes are not delayed; maxWait is required", async () => {
    const up = await timedUpstream()
    const bucket = TokenBucket.make<string>("api", 1, Rate.make(1, "100 millis"))
    const server = await serveLayer({
      upstream: up.url,
      onStoreFailure: "fail-closed",
      routes: [{
        name: "api",
        match: { prefix: "/api" },
        limits: [{ limiter: bucket, key: byHeader, cost: 1 }],
        mode: "delay",
        maxWait: "1 second"
      }]
    })
    const port = server.address.port
    const before = await serverNow()
    const replies = await Promise.all([
      request(port, { path: "/api/a", headers: { "x-k": "r" } }),
      request(port, { path: "/api/b", headers: { "x-k": "r" } })
    ])
    expect(replies.map((r) => r.status)).toEqual([200, 200])
    const arrivals = [...up.arrivals].sort((a, b) => a - b)
    expect(arrivals[1]!).toBeGreaterThanOrEqual(before + 100 - 1)
    expect((await request(port, { path: "/other" })).status).toBe(200)
    expect(() =>
      Proxy.layer({
        upstream: up.url,
        port: 0,
        onStoreFailure: "fail-closed",
        routes: [{ name: "api", match: { prefix: "/api" }, limits: [{ limiter: bucket }], mode: "delay" }]
      })
    ).toThrow("wakuwaku/Proxy: routes[0].mode \"delay\" needs maxWait: the longest a request waits its turn")
  })

  it("the configuration file: delay takes one limit of an algorithm that reserves, and no shadow limit", () => {
    const file = (route: object) => JSON.stringify({ upstream: "http://127.0.0.1:3000", routes: [route] })
    const route = { name: "api", match: { prefix: "/api" }, mode: "delay", maxWait: "1s" }
    const bucket = { name: "b", algorithm: "token-bucket", capacity: 5, refill: "5/1s" }
    expect(configFile.decode(file({ ...route, limits: [bucket] }))._tag).toBe("Right")
    expect(
      configFile.decode(file({ ...route, limits: [{ name: "w", algorithm: "fixed-window", limit: 5, window: "1m" }] }))
    )
      .toEqual(Either.left([
        "routes[0].limits[0].algorithm: delay waits each request's turn in a reservation, which \"fixed-window\" " +
        "cannot make: expected token-bucket"
      ]))
    expect(configFile.decode(file({ ...route, limits: [bucket, { ...bucket, name: "c" }] }))).toEqual(Either.left([
      "routes[0].limits: delay waits each request's turn in one limit: expected one limit, got 2"
    ]))
    expect(configFile.decode(file({ ...route, limits: [bucket], shadow: [{ ...bucket, name: "c" }] }))).toEqual(
      Either.left(["routes[0].shadow: delay takes no shadow limits (a reservation is one limit's)"])
    )
    expect(configFile.decode(JSON.stringify({ maxWaiting: 0 }))).toEqual(
      Either.left(["maxWaiting: expected a positive whole number, got 0"])
    )
  })
})

describe("wakuwaku proxy --mode delay (flags)", () => {
  const base = ["proxy", "--upstream", "http://127.0.0.1:3000"]

  it("reads the mode, the wait and the bound", () => {
    const command = parse([...base, "--mode", "delay", "--max-wait", "2s", "--max-waiting", "50"], {})
    expect(command._tag).toBe("Proxy")
    if (command._tag !== "Proxy") return
    expect(command.config.defaultRoute.mode).toBe("delay")
    expect(Duration.toMillis(command.config.defaultRoute.maxWait!)).toBe(2000)
    expect(command.config.maxWaiting).toBe(50)
    const defaults = parse(base, {})
    expect(defaults._tag === "Proxy" && defaults.config.defaultRoute.mode).toBe("enforce")
  })

  it.each([
    [
      ["--mode", "delay", "--algorithm", "fixed-window"],
      "wakuwaku proxy: --mode delay: a request waits its turn in a reservation, which the fixed-window algorithm " +
      "cannot make; use --algorithm token-bucket, or --mode enforce (see wakuwaku proxy --help)"
    ],
    [
      ["--max-wait", "2s"],
      "wakuwaku proxy: --max-wait applies to --mode delay only (see wakuwaku proxy --help)"
    ],
    [
      ["--mode", "later"],
      "wakuwaku proxy: --mode: expected enforce or delay, got \"later\" (see wakuwaku proxy --help)"
    ],
    [
      ["--mode", "delay", "--max-waiting", "0"],
      "wakuwaku proxy: --max-waiting: expected a positive whole number, got \"0\" (see wakuwaku proxy --help)"
    ]
  ])("refuses %j", (flags, message) => {
    expect(parse([...base, ...flags], {})).toEqual({ _tag: "Invalid", message, code: 2 })
  })
})

describe("delay mode across OS processes", () => {
  it(
    "3 `wakuwaku proxy --mode delay` sharing Redis: no request starts before its turn on the server's clock",
    async () => {
      const up = await timedUpstream()
      // Slow enough that the way there and back (tens to hundreds of ms on a busy machine) cannot hide three
      // buckets where there should be one: each would let its own requests through three times as fast.
      const capacity = 2
      const perSecond = 10
      const proxies = await Promise.all(
        [0, 1, 2].map(() =>
          startProxy(
            [
              "--upstream",
              up.url,
              "--redis",
              url,
              "--on-store-failure",
              "fail-closed",
              // A busy machine may take longer than the default 500 ms to connect.
              "--store-timeout",
              "5s",
              "--namespace",
              "shared",
              "--key",
              "header:x-k",
              "--mode",
              "delay",
              "--capacity",
              String(capacity),
              "--refill",
              `${perSecond}/1s`,
              "--max-wait",
              "5s"
            ],
            cleanEnv()
          )
        )
      )
      cleanups.push(() =>
        Promise.all(proxies.map((p) => {
          p.child.kill("SIGTERM")
          return p.exited
        }))
      )
      // Warm-up on names of their own (connections, the first decision's code paths).
      await Promise.all(proxies.map((p, i) => request(p.port, { headers: { "x-k": `warm-${i}` } })))
      up.arrivals.length = 0
      await raw.config("RESETSTAT")
      const perProxy = 8
      const before = await serverNow()
      const replies = await Promise.all(
        proxies.flatMap((p) => Array.from({ length: perProxy }, () => request(p.port, { headers: { "x-k": "one" } })))
      )
      const ended = await serverNow()
      expect(replies.map((r) => r.status)).toEqual(replies.map(() => 200))
      const arrivals = [...up.arrivals].sort((a, b) => a - b)
      expect(arrivals).toHaveLength(3 * perProxy)
      const stepMs = 1000 / perSecond
      const late = arrivals.map((at, k) => at - (before + Math.max(0, k - capacity + 1) * stepMs))
      // The bound on starts, across the three: the k-th start comes no sooner than its turn (a timer: 1 ms early).
      expect(Math.min(...late)).toBeGreaterThanOrEqual(-1)
      // One store call per request, whichever process it reached.
      expect(await evalshas()).toBe(3 * perProxy)
      console.info(
        `delay across 3 processes: ${arrivals.length} requests over ${
          (arrivals.at(-1)! - arrivals[0]!).toFixed(0)
        } ms ` +
          `(due over ${((arrivals.length - capacity) * stepMs).toFixed(0)} ms), the run ${
            (ended - before).toFixed(0)
          } ms; ` +
          `after its turn by p50 ${[...late].sort((a, b) => a - b)[late.length >> 1]!.toFixed(1)} ms, max ${
            Math.max(...late).toFixed(1)
          } ms`
      )
    },
    60_000
  )
})
