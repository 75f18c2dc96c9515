/**
 * The proxy's routes at work: `Proxy.layer` in this process with routes, in front of node:http upstreams on
 * loopback ports, deciding on the suite's redis-server (a throwaway one of its own for the docs' example, whose
 * limit names are fixed). Each rule of docs/http.md's "Routes and the configuration file": the first match
 * wins, the default route catches the rest, a route with no limits passes, `RateLimit-Policy` names the route's
 * limits, the attacker's spellings of a path take its route, limits keyed and costed each their own way are
 * decided as one, a route's own upstream and timeout, shadow mode and shadow limits (one store call, counted and
 * logged with the route), delay refused until it lands, and the example file of the docs as it is written.
 */
import { Context, Effect, Exit, Layer, Logger, Metric, Scope } from "effect"
import { mkdtempSync, writeFileSync } from "node:fs"
import * as Http from "node:http"
import type { AddressInfo } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterEach, describe, expect, it } from "vitest"
import { FixedWindow, Limits, Rate, Redis, SlidingWindow, TokenBucket } from "wakuwaku"
import * as Proxy from "wakuwaku/Proxy"
import { RedisServer } from "wakuwaku/testing"
import { parse } from "../src/internal/proxy/cli.js"
import { layerOptions } from "../src/internal/proxy/main.js"
import { freshNamespace, RedisLive } from "./support/redis.js"
import { docsExample } from "./support/routes.js"

const cleanups: Array<() => Promise<unknown>> = []
afterEach(async () => {
  await Promise.all(cleanups.splice(0).map((cleanup) => cleanup()))
})

/** What the in-process proxies logged. */
const logged: Array<{ readonly message: string; readonly annotations: Record<string, unknown> }> = []
const captureLogs = Logger.replace(
  Logger.defaultLogger,
  Logger.make(({ annotations, message }) => {
    logged.push({
      message: String(Array.isArray(message) ? message[0] : message),
      annotations: Object.fromEntries(annotations)
    })
  })
)

/** The suite's Redis, counting the scripts it runs by name. */
const counting = () => {
  const calls: Array<string> = []
  const layer = Layer.effectContext(
    Effect.map(Effect.context<Redis.ReadWrite>(), (context) => {
      const redis = Context.get(context, Redis.Redis)
      return Context.add(context, Redis.Redis, {
        ...redis,
        script: (script, keys, args) => {
          calls.push(script.name)
          return redis.script(script, keys, args)
        }
      })
    })
  ).pipe(Layer.provide(RedisLive))
  return { layer, calls }
}

/** Runs `layer` (a proxy) for the test; its port. */
const serve = async (layer: Layer.Layer<Proxy.Server, unknown>): Promise<number> => {
  const scope = Effect.runSync(Scope.make())
  const context = await Effect.runPromise(Layer.buildWithScope(Layer.provide(layer, captureLogs), scope))
  cleanups.push(() => Effect.runPromise(Scope.close(scope, Exit.void)))
  return Context.get(context, Proxy.Server).address.port
}

/** `Proxy.layer` with routes on a free loopback port, on `store` (the suite's Redis by default). */
const serveRoutes = (
  options: Omit<Proxy.LayerOptions<Redis.ReadWrite>, "port" | "host">,
  store: Layer.Layer<Redis.ReadWrite, unknown> = RedisLive
): Promise<number> =>
  serve(
    Proxy.layer<Redis.ReadWrite>({ ...options, port: 0, host: "127.0.0.1", shutdownTimeout: "1 second" }).pipe(
      Layer.provide(store)
    )
  )

/** An upstream that records the targets it is sent, answering `up <target>` (or as `respond` says). */
const recording = async (respond?: (req: Http.IncomingMessage, res: Http.ServerResponse) => void) => {
  const seen: Array<string> = []
  const server = Http.createServer((req, res) => {
    seen.push(req.url ?? "")
    if (respond !== undefined) respond(req, res)
    else res.end(`up ${req.url}`)
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  cleanups.push(() =>
    new Promise<void>((resolve) => {
      server.closeAllConnections()
      server.close(() => resolve())
    })
  )
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen }
}

interface Reply {
  readonly status: number
  readonly headers: Http.IncomingHttpHeaders
  readonly body: string
}

/** One request on a fresh connection, its target sent exactly as given, from `from` (a loopback address). */
const send = (
  port: number,
  target: string,
  options: { readonly method?: string; readonly headers?: Record<string, string>; readonly from?: string } = {}
) =>
  new Promise<Reply>((resolve, reject) => {
    const req = Http.request({
      host: "127.0.0.1",
      port,
      agent: false,
      method: options.method ?? "GET",
      path: target,
      headers: options.headers,
      ...(options.from === undefined ? {} : { localAddress: options.from })
    })
    req.on("response", (response) => {
      let body = ""
      response.on("data", (chunk: Buffer) => (body += chunk.toString()))
      response.on("end", () => resolve({ status: response.statusCode ?? 0, headers: response.headers, body }))
    })
    req.on("error", reject)
    req.end()
  })

const statuses = async (port: number, targets: ReadonlyArray<string>, headers?: Record<string, string>) => {
  const out: Array<number> = []
  for (const target of targets) out.push((await send(port, target, { headers: headers ?? {} })).status)
  return out
}

const peek = (
  limiter: { readonly peek: (name: string) => Effect.Effect<number, unknown, Redis.ReadWrite> },
  name: string
) => Effect.runPromise(limiter.peek(name).pipe(Effect.provide(RedisLive)))

describe("routes: the first match wins, the default route catches the rest", () => {
  it("each route's limits and RateLimit-Policy; a route with no limits passes with no field; the default's limit", async () => {
    const up = await recording()
    const login = SlidingWindow.make<string>(freshNamespace("login"), 2, "1 minute")
    const api = TokenBucket.make<string>(freshNamespace("api"), 3, Rate.make(1, "1 hour"))
    const edge = FixedWindow.make<string>(freshNamespace("edge"), 1_000, "1 minute")
    const port = await serveRoutes({
      upstream: up.url,
      rateLimit: { limiter: edge, onStoreFailure: "fail-closed" },
      routes: [
        { name: "login", match: { path: "/login" }, limits: [{ limiter: login }] },
        { name: "health", match: { methods: ["GET"], path: "/health" } },
        { name: "api", match: { prefix: "/api" }, limits: [{ limiter: api, key: Proxy.header("x-api-key") }] },
        // Never reached for /api/…: the route before it takes those.
        { name: "api-v2", match: { prefix: "/api/v2" } }
      ]
    })
    const first = await send(port, "/login")
    expect([first.status, first.headers["ratelimit-policy"], first.headers["ratelimit"]]).toEqual([
      200,
      `"${login.namespace}";q=2;w=60`,
      `"${login.namespace}";r=1;t=60`
    ])
    expect(await statuses(port, ["/login", "/login"])).toEqual([200, 429])
    // Ten health checks: all forwarded, no rate-limit field.
    for (let i = 0; i < 10; i++) {
      const health = await send(port, "/health")
      expect([health.status, health.headers["ratelimit-policy"], health.headers["ratelimit"]]).toEqual([
        200,
        undefined,
        undefined
      ])
    }
    // POST /health is not the health route's: the default route's limit applies.
    expect((await send(port, "/health", { method: "POST" })).headers["ratelimit-policy"]).toBe(
      `"${edge.namespace}";q=1000;w=60`
    )
    expect(await statuses(port, ["/api/v2/a", "/api/b", "/api/c", "/api/d"], { "x-api-key": "k1" })).toEqual([
      200,
      200,
      200,
      429
    ])
    expect((await send(port, "/api/v2/a", { headers: { "x-api-key": "k2" } })).status).toBe(200)
    const other = await send(port, "/other")
    expect([other.status, other.headers["ratelimit-policy"], other.body]).toEqual([
      200,
      `"${edge.namespace}";q=1000;w=60`,
      "up /other"
    ])
    expect(up.seen.filter((t) => t === "/login").length).toBe(2)
    expect(await peek(api, "x-api-key=k1")).toBe(0)
  })

  it("a route's own upstream (under its base path) and timeout; the others keep the proxy's", async () => {
    const main = await recording()
    const slow = await recording((req, res) => {
      if (req.url?.endsWith("/slow") === true) setTimeout(() => res.end("late"), 2_000)
      else res.end(`v1 ${req.url}`)
    })
    const port = await serveRoutes({
      upstream: main.url,
      timeout: "5 seconds",
      routes: [{ name: "v1", match: { prefix: "/v1" }, upstream: `${slow.url}/base`, timeout: "150 millis" }]
    })
    expect((await send(port, "/v1/users?x=1")).body).toBe("v1 /base/v1/users?x=1")
    const late = await send(port, "/v1/slow")
    expect([late.status, late.headers["proxy-status"]]).toEqual([504, "wakuwaku; error=http_response_timeout"])
    expect((await send(port, "/users")).body).toBe("up /users")
  })
})

describe("the attacker's spellings of /login take the login route and its limit", () => {
  it.each([
    "/%6cogin",
    "/%6C%6F%67%69%6E",
    "/api/../login",
    "/%2e%2e/login",
    "/x/%2E%2e/login",
    "/./login",
    "//login",
    "/login/",
    "/LOGIN",
    "/Login/",
    "/login;jsessionid=1",
    "/login?next=/",
    "/%5Clogin",
    "/\\login",
    "http://example.com/login"
  ])("%s: 429 once /login has spent its limit", async (target) => {
    const up = await recording()
    const login = SlidingWindow.make<string>(freshNamespace("login"), 1, "1 hour")
    const port = await serveRoutes({
      upstream: up.url,
      onStoreFailure: "fail-closed",
      routes: [{ name: "login", match: { path: "/login" }, limits: [{ limiter: login }] }]
    })
    expect((await send(port, "/login")).status).toBe(200)
    const spelled = await send(port, target, { method: "POST" })
    expect([spelled.status, spelled.headers["ratelimit-policy"]]).toEqual([429, `"${login.namespace}";q=1;w=3600`])
    expect(up.seen).toEqual(["/login"])
  })

  it("what no upstream reads as /login is another path: /login.json, /logins, /login%00, /log/in", async () => {
    const up = await recording()
    const login = SlidingWindow.make<string>(freshNamespace("login"), 1, "1 hour")
    const port = await serveRoutes({
      upstream: up.url,
      onStoreFailure: "fail-closed",
      routes: [{ name: "login", match: { path: "/login" }, limits: [{ limiter: login }] }]
    })
    expect(await statuses(port, ["/login", "/login.json", "/logins", "/login%00", "/log/in", "/login"])).toEqual([
      200,
      200,
      200,
      200,
      200,
      429
    ])
  })
})

describe("a route's limits: each keyed and costed its own way, decided as one", () => {
  it("a request any limit denies spends from none, whatever their keys and costs", async () => {
    const up = await recording()
    // Per API key: 10 tokens, a request costs 5. Per address: 3 a minute.
    const perKey = TokenBucket.make<string>(freshNamespace("key"), 10, Rate.make(1, "1 hour"))
    const perAddress = FixedWindow.make<string>(freshNamespace("addr"), 3, "1 hour")
    const port = await serveRoutes({
      upstream: up.url,
      onStoreFailure: "fail-closed",
      routes: [{
        name: "api",
        match: { prefix: "/api" },
        limits: [{ limiter: perKey, key: Proxy.header("x-api-key"), cost: 5 }, { limiter: perAddress }]
      }]
    })
    const call = (key: string) => send(port, "/api/x", { headers: { "x-api-key": key } })
    expect((await call("k1")).status).toBe(200)
    const second = await call("k1")
    expect([second.status, second.headers["ratelimit-policy"]]).toEqual([
      200,
      `"${perKey.namespace}";q=10;w=36000, "${perAddress.namespace}";q=3;w=3600`
    ])
    // k1's bucket is empty: denied, and the address's window is not spent.
    const third = await call("k1")
    expect([third.status, JSON.parse(third.body)["violated-policies"]]).toEqual([429, [perKey.namespace]])
    expect(await peek(perAddress, "127.0.0.1")).toBe(1)
    // The address's last one, with another key.
    expect((await call("k2")).status).toBe(200)
    // The address's window denies: k3's bucket is not spent.
    const fifth = await call("k3")
    expect([fifth.status, JSON.parse(fifth.body)["violated-policies"]]).toEqual([429, [perAddress.namespace]])
    expect([await peek(perKey, "x-api-key=k1"), await peek(perKey, "x-api-key=k2"), await peek(perKey, "x-api-key=k3")])
      .toEqual([0, 5, 10])
    expect(up.seen.length).toBe(3)
  })
})

const wouldDeny = (policy: string, route: string) =>
  Effect.runSync(
    Metric.value(Limits.wouldDenyCounter.pipe(Metric.tagged("policy", policy), Metric.tagged("route", route)))
  ).count

describe("modes: shadow routes and shadow limits", () => {
  it("shadow mode: every request passes, with no field; a would-be denial is counted and logged with its route", async () => {
    const up = await recording()
    const beta = TokenBucket.make<string>(freshNamespace("beta"), 1, Rate.make(1, "1 hour"))
    const keyed = FixedWindow.make<string>(freshNamespace("beta-key"), 1, "1 hour")
    const port = await serveRoutes({
      upstream: up.url,
      onStoreFailure: "fail-closed",
      routes: [{
        name: "beta",
        match: { prefix: "/beta" },
        mode: "shadow",
        limits: [{ limiter: beta }, { limiter: keyed, key: Proxy.header("x-api-key") }]
      }]
    })
    logged.length = 0
    for (let i = 0; i < 3; i++) {
      const reply = await send(port, "/beta/x?secret=1", { headers: { "x-api-key": "s3cret" } })
      expect([reply.status, reply.headers["ratelimit-policy"], reply.headers["ratelimit"]]).toEqual([
        200,
        undefined,
        undefined
      ])
    }
    expect(up.seen.length).toBe(3)
    // Each limit was decided and spent, and would have denied the second and the third request.
    expect(await peek(beta, "127.0.0.1")).toBe(0)
    expect([wouldDeny(beta.namespace, "beta"), wouldDeny(keyed.namespace, "beta")]).toEqual([2, 2])
    const lines = logged.filter((l) => l.message.includes("would deny"))
    expect(lines.length).toBe(4)
    expect(lines[0]).toEqual({
      message: `proxy: route beta: ${beta.namespace} would deny (retry after 3600 s)`,
      annotations: {
        "proxy.route": "beta",
        "ratelimit.policy": beta.namespace,
        "ratelimit.retryAfter": 3600,
        "ratelimit.key": "127.0.0.1",
        "http.method": "GET",
        "url.path": "/beta/x"
      }
    })
    // A header's value is logged as a fingerprint, never as it came.
    const keyLine = lines.find((l) => l.annotations["ratelimit.policy"] === keyed.namespace)!
    expect(keyLine.annotations["ratelimit.key"]).toMatch(/^x-api-key=#[0-9a-f]{12}$/)
    expect(JSON.stringify(lines)).not.toContain("s3cret")
  })

  it("shadow limits beside enforced ones: one store call per request, only the enforced ones deny or show", async () => {
    const up = await recording()
    const enforced = TokenBucket.make<string>(freshNamespace("api"), 3, Rate.make(1, "1 hour"))
    const stricter = TokenBucket.make<string>(freshNamespace("api-strict"), 1, Rate.make(1, "1 hour"))
    const store = counting()
    const port = await serveRoutes({
      upstream: up.url,
      onStoreFailure: "fail-closed",
      routes: [{
        name: "api",
        match: { prefix: "/api" },
        limits: [{ limiter: enforced }, { limiter: stricter, shadow: true }]
      }]
    }, store.layer)
    const replies = [await send(port, "/api/a"), await send(port, "/api/b"), await send(port, "/api/c")]
    expect(replies.map((r) => [r.status, r.headers["ratelimit-policy"]])).toEqual([
      [200, `"${enforced.namespace}";q=3;w=10800`],
      [200, `"${enforced.namespace}";q=3;w=10800`],
      [200, `"${enforced.namespace}";q=3;w=10800`]
    ])
    expect((await send(port, "/api/d")).status).toBe(429)
    expect(store.calls).toEqual(["Limits.acquire", "Limits.acquire", "Limits.acquire", "Limits.acquire"])
    expect(wouldDeny(stricter.namespace, "api")).toBe(2)
    expect(await peek(stricter, "127.0.0.1")).toBe(0)
  })
})

describe("routes refused when the proxy is made", () => {
  const limiter = TokenBucket.make<string>("refused", 1, Rate.make(1, "1 hour"))
  const made = (options: Partial<Proxy.LayerOptions<never>>) => () =>
    Proxy.layer({ upstream: "http://127.0.0.1:1", port: 0, ...options })
  it.each([
    [
      { routes: [{ name: "a", match: { path: "/a" } }, { name: "a", match: { path: "/b" } }] },
      "wakuwaku/Proxy: routes[1].name \"a\" is given twice"
    ],
    [
      { routes: [{ name: "all" }, { name: "b", match: { path: "/b" } }] },
      "wakuwaku/Proxy: routes[0] takes every request: only the last route may (the routes after it never would)"
    ],
    [
      {
        rateLimit: { limiter, onStoreFailure: "fail-open" as const },
        routes: [{ name: "all", match: {} }]
      },
      "wakuwaku/Proxy: routes[0] takes every request: rateLimit, the default route's limit, would never apply"
    ],
    [
      { routes: [{ name: "default", match: { path: "/a" } }] },
      "wakuwaku/Proxy: routes[0].name \"default\" is the default route's: only a last route that takes every request " +
      "has it"
    ],
    [
      { routes: [{ name: "a", match: { path: "/a" }, limits: [{ limiter }] }] },
      "wakuwaku/Proxy: routes[0] has limits: give onStoreFailure (or rateLimit's)"
    ],
    [
      { routes: [{ name: "a", match: { prefix: "/files/*.png" } }] },
      "wakuwaku/Proxy: routes[0].match.prefix: expected each * to be a whole segment, as in /users/*/posts, got " +
      "\"/files/*.png\""
    ],
    [
      { routes: [{ name: "a b", match: { path: "/a" } }] },
      "wakuwaku/Proxy: routes[0].name must be 1 to 64 letters, digits, '_', '.' or '-', got \"a b\""
    ]
  ] as ReadonlyArray<readonly [Partial<Proxy.LayerOptions<never>>, string]>)("%j", (options, message) => {
    expect(made(options)).toThrow(new TypeError(message))
  })
})

describe("the example of docs/http.md, as it is written, on a redis-server of its own", () => {
  it("login: 5 a minute per address; api: 100 a second per API key; health: no limit; the rest passes", async () => {
    const up = await recording()
    const scope = Effect.runSync(Scope.make())
    cleanups.push(() => Effect.runPromise(Scope.close(scope, Exit.void)))
    const server = await Effect.runPromise(Scope.extend(RedisServer.make(), scope))
    const path = join(mkdtempSync(join(tmpdir(), "wakuwaku-routes-")), "proxy.json")
    writeFileSync(path, docsExample())
    // The flag wins over the file's upstream.
    const command = parse(["proxy", "--config", path, "--upstream", up.url, "--redis", server.url], {})
    if (command._tag !== "Proxy") throw new Error(JSON.stringify(command))
    const port = await serve(
      Proxy.layer({ ...layerOptions(command.config, up.url), port: 0, host: "127.0.0.1" }).pipe(
        Layer.provide(Redis.layer({ url: server.url }))
      )
    )

    // login: five from one address, the sixth refused; another address has its own five.
    expect(await statuses(port, ["/login", "/login", "/login", "/login", "/login"])).toEqual([200, 200, 200, 200, 200])
    const sixth = await send(port, "/login", { method: "POST" })
    expect([sixth.status, sixth.headers["ratelimit-policy"], JSON.parse(sixth.body)["violated-policies"]]).toEqual([
      429,
      "\"login\";q=5;w=60",
      ["login"]
    ])
    expect((await send(port, "/Login/", { from: "127.0.0.2" })).status).toBe(200)

    // api: per key, 100 a second; another key has its own.
    const fresh = await send(port, "/api/orders", { headers: { "x-api-key": "key-b" } })
    expect([fresh.status, fresh.headers["ratelimit-policy"], fresh.headers["ratelimit"]]).toEqual([
      200,
      "\"api\";q=100;w=1",
      "\"api\";r=99;t=1"
    ])
    // A burst of 250 from one key at once: 100 pass, and those the refill allows meanwhile (100 a second), no
    // more; the rest are refused, naming "api" (how many depends on how fast this machine sends them).
    const started = performance.now()
    const burst = await Promise.all(
      Array.from({ length: 250 }, (_, i) => send(port, `/api/orders/${i}`, { headers: { "x-api-key": "key-a" } }))
    )
    const seconds = (performance.now() - started) / 1000
    const passed = burst.filter((r) => r.status === 200).length
    expect(passed).toBeGreaterThanOrEqual(100)
    expect(passed).toBeLessThanOrEqual(100 + Math.ceil(100 * seconds))
    for (const refused of burst.filter((r) => r.status !== 200)) {
      expect([refused.status, refused.headers["ratelimit-policy"], JSON.parse(refused.body)["violated-policies"]])
        .toEqual([429, "\"api\";q=100;w=1", ["api"]])
    }

    // health: no limit, no field; any other path: the default route, no limit.
    for (let i = 0; i < 20; i++) {
      const health = await send(port, "/health")
      expect([health.status, health.headers["ratelimit-policy"]]).toEqual([200, undefined])
    }
    const other = await send(port, "/")
    expect([other.status, other.headers["ratelimit-policy"], other.body]).toEqual([200, undefined, "up /"])
  }, 30_000)

  it("a key made of the address and a header: one name of both, apart from each alone", async () => {
    const up = await recording()
    const namespace = freshNamespace("pair")
    const path = join(mkdtempSync(join(tmpdir(), "wakuwaku-routes-")), "proxy.json")
    writeFileSync(
      path,
      JSON.stringify({
        routes: [{
          name: "pair",
          match: { prefix: "/" },
          limits: [{ name: namespace, algorithm: "fixed-window", limit: 1, window: "1h", key: ["ip", "header:x-user"] }]
        }]
      })
    )
    const command = parse(["proxy", "--config", path, "--upstream", up.url], {})
    if (command._tag !== "Proxy") throw new Error(JSON.stringify(command))
    const port = await serve(
      Proxy.layer({ ...layerOptions(command.config, up.url), port: 0, host: "127.0.0.1" }).pipe(
        Layer.provide(RedisLive)
      )
    )
    const as = (user: string, from: string) => send(port, "/x", { headers: { "x-user": user }, from })
    expect([
      (await as("ann", "127.0.0.1")).status,
      (await as("ann", "127.0.0.1")).status,
      (await as("bob", "127.0.0.1")).status,
      (await as("ann", "127.0.0.3")).status
    ]).toEqual([200, 429, 200, 200])
    const window = FixedWindow.make<string>(namespace, 1, "1 hour")
    expect(await peek(window, "127.0.0.1\nx-user=ann")).toBe(0)
    expect(await peek(window, "127.0.0.1\nx-user=bob")).toBe(0)
  })
})
