/**
 * `wakuwaku proxy --config FILE`, in this process and with no server: the file decoded into routes, every
 * problem named by its path with what was expected (exact messages), the committed JSON Schema made from the
 * same Schema, the flags and variables over the file, and the path a route matches (the attacker's spellings of
 * one path read as it). The routes at work, with an upstream and Redis: test/Proxy.routes.test.ts.
 */
import { Ajv } from "ajv"
import { Duration, Either } from "effect"
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { describe, expect, it } from "vitest"
import { type Command, parse } from "../src/internal/proxy/cli.js"
import * as config from "../src/internal/proxy/config.js"
import * as routes from "../src/internal/proxy/routes.js"
import { docsExample } from "./support/routes.js"

const problems = (file: unknown): ReadonlyArray<string> => {
  const decoded = config.decode(JSON.stringify(file))
  if (Either.isRight(decoded)) throw new Error(`expected problems, got ${JSON.stringify(decoded.right)}`)
  return decoded.left
}

const decoded = (file: unknown): config.ProxyFile => {
  const result = config.decode(JSON.stringify(file))
  if (Either.isLeft(result)) throw new Error(result.left.join("\n"))
  return result.right
}

const LOGIN = { name: "login", algorithm: "sliding-window", limit: 5, window: "1m" }
const API = { name: "api", algorithm: "token-bucket", capacity: 100, refill: "100/1s", key: "header:X-Api-Key" }

describe("a file decoded: its routes, in order, and the default route", () => {
  it("names, matches, modes, each limit's algorithm, key and cost; the default route without limits passes", () => {
    const file = decoded({
      upstream: "http://127.0.0.1:3000",
      routes: [
        { name: "login", match: { path: "/login" }, limits: [LOGIN] },
        {
          name: "api",
          match: { prefix: "/api", methods: ["get", "POST"] },
          limits: [{ ...API, cost: 2 }, { ...LOGIN, name: "per-address", key: ["ip", "header:x-api-key"] }],
          shadow: [{ ...API, name: "api-strict", capacity: 50, refill: "50/1s" }],
          mode: "shadow",
          upstream: "http://127.0.0.1:3001/v1",
          timeout: "5s"
        }
      ]
    })
    const [login, api] = config.routesOf(file)
    expect(login).toMatchObject({ name: "login", match: { path: "/login" }, mode: "enforce", shadow: [] })
    expect(login!.limits.map((l) => [l.name, l.algorithm.algorithm, l.algorithm.summary, l.key, l.cost])).toEqual([
      ["login", "sliding-window", "5 per any 1m", [{ _tag: "ip" }], 1]
    ])
    expect(api!.limits.map((l) => [l.name, l.algorithm.summary, l.key, l.cost])).toEqual([
      ["api", "burst 100, 100 per 1s", [{ _tag: "header", name: "x-api-key" }], 2],
      ["per-address", "5 per any 1m", [{ _tag: "ip" }, { _tag: "header", name: "x-api-key" }], 1]
    ])
    expect(api!.shadow.map((l) => [l.name, l.algorithm.summary])).toEqual([["api-strict", "burst 50, 50 per 1s"]])
    expect([api!.mode, api!.upstream, Duration.toMillis(api!.timeout!)]).toEqual([
      "shadow",
      "http://127.0.0.1:3001/v1",
      5000
    ])
    expect(config.defaultRouteOf(file)).toEqual({
      name: "default",
      match: undefined,
      limits: [],
      shadow: [],
      mode: "enforce",
      maxWait: undefined,
      upstream: undefined,
      timeout: undefined
    })
    expect([login, api, config.defaultRouteOf(file)].map((r) => config.describeRoute(r!))).toEqual([
      "login (/login): sliding window \"login\": 5 per any 1m, per client IP",
      "api (get,POST /api and below): token bucket \"api\": burst 100, 100 per 1s, per x-api-key header " +
      "(client IP without it), cost 2; sliding window \"per-address\": 5 per any 1m, per client IP and x-api-key " +
      "header; shadow token bucket \"api-strict\": burst 50, 50 per 1s, per x-api-key header (client IP without " +
      "it) (shadow: nothing denied)",
      "default: no limit"
    ])
  })

  it("the example of docs/http.md decodes: login, api, health, and a default route with no limit", () => {
    const file = decoded(JSON.parse(docsExample()))
    expect([...config.routesOf(file), config.defaultRouteOf(file)].map(config.describeRoute)).toEqual([
      "login (/login): sliding window \"login\": 5 per any 1m, per client IP",
      "api (/api and below): token bucket \"api\": burst 100, 100 per 1s, per x-api-key header (client IP " +
      "without it)",
      "health (GET /health): no limit",
      "default: no limit"
    ])
  })
})

describe("a file that does not decode: every problem, its path first, with what was expected", () => {
  it("values: each read by its flag's parser, the message its flag gives", () => {
    expect(problems({
      port: "8080",
      timeout: "0s",
      trustedProxies: ["10.0.0.0/8", "10.0.0.300"],
      redis: "http://redis:6379",
      upstream: "ftp://x",
      onStoreFailure: "retry",
      routes: [{
        name: "login",
        match: { path: "/login" },
        limits: [
          { name: "a", algorithm: "token-bucket", capacity: 1.5, refill: "3" },
          { name: "b", algorithm: "fixed-window", limit: 0, window: "soon" },
          { name: "c", algorithm: "leaky-bucket" },
          { name: "d e", algorithm: "sliding-window", limit: 20_000, window: "1m" },
          { name: "f", algorithm: "fixed-window", limit: 1, window: "1m", key: "cookie:x", cost: 0 },
          3
        ]
      }]
    })).toEqual([
      "port: expected a port number from 0 to 65535, got \"8080\"",
      "upstream: the upstream must be an http:// or https:// URL, got \"ftp://x\"",
      "timeout: expected a positive duration such as 500ms, 30s or 2m, got \"0s\"",
      "trustedProxies: not an IP address or CIDR block: \"10.0.0.300\"",
      "redis: expected a redis:// or rediss:// URL, got \"http://redis:6379\"",
      "onStoreFailure: expected fail-closed, fail-open or fallback, got \"retry\"",
      "routes[0].limits[0].capacity: expected a positive whole number, got 1.5",
      "routes[0].limits[0].refill: expected N/DURATION with N at least 1, such as 1/3s or 10/1m, got \"3\"",
      "routes[0].limits[1].limit: expected a positive whole number, got 0",
      "routes[0].limits[1].window: expected a positive duration such as 500ms, 30s or 2m, got \"soon\"",
      "routes[0].limits[2].algorithm: expected token-bucket, fixed-window or sliding-window, got \"leaky-bucket\"",
      "routes[0].limits[3].name: expected a name of 1 to 64 letters, digits, '_', '.' or '-', got \"d e\"",
      "routes[0].limits[4].key: expected ip, header:NAME, or a list of them (one key made of each one's value), " +
      "got \"cookie:x\"",
      "routes[0].limits[4].cost: expected a positive whole number, got 0",
      "routes[0].limits[5]: expected a limit: an object with a name, an algorithm (token-bucket, fixed-window or " +
      "sliding-window) and its parameters, got 3"
    ])
  })

  it("a limit its kind refuses: the kind's own words, at the limit's path", () => {
    expect(problems({
      routes: [{ name: "x", match: { path: "/x" }, limits: [{ ...LOGIN, limit: 20_000 }] }]
    })).toEqual([
      "routes[0].limits[0]: SlidingWindow(login) limit must be a whole number from 0 to 10000 (a name holds an " +
      "entry per unit; a TokenBucket or a FixedWindow has no such bound), got 20000"
    ])
  })

  it("shapes: a field that is not one (with the nearest), a missing one, the wrong kind of value", () => {
    expect(problems("routes")).toEqual(["the configuration: expected an object, got \"routes\""])
    expect(problems({
      rotues: [],
      routes: [
        { name: "a", match: { path: "/a" }, limits: [{ ...API, refil: "1/s" }] },
        { match: { path: "/b" }, limits: {} },
        { name: "c", limits: [{ name: "c", algorithm: "fixed-window", limit: 1 }] },
        "d"
      ],
      default: { mode: "strict" }
    })).toEqual([
      "rotues: unknown field (did you mean routes?); expected $schema, host, port, shutdownTimeout, upstream, " +
      "timeout, trustedProxies, ipv6Prefix, redis, storeTimeout, onStoreFailure, maxEntries, rememberDenials, " +
      "workers, maxWaiting, routes or default",
      "routes[0].limits[0].refil: unknown field (did you mean refill?); expected name, algorithm, capacity, " +
      "refill, key or cost",
      "routes[1].name: is missing: expected a name of 1 to 64 letters, digits, '_', '.' or '-'",
      "routes[1].limits: expected a list of limits, got {}",
      "routes[2].match: is missing: expected an object with methods, host, path or prefix",
      "routes[2].limits[0].window: is missing: expected a positive duration such as 500ms, 30s or 2m",
      "routes[3]: expected a route: an object with a name and a match, got \"d\"",
      "default.mode: expected enforce, shadow or delay, got \"strict\""
    ])
  })

  it("matches: patterns, hosts and methods as the router reads them", () => {
    expect(problems({
      routes: [
        { name: "a", match: { path: "login" } },
        { name: "b", match: { prefix: "/files/*.png" } },
        { name: "c", match: { path: "/a/../b" } },
        { name: "d", match: { path: "/a?b" } },
        { name: "e", match: { path: "/a", prefix: "/a" } },
        { name: "f", match: {} },
        { name: "g", match: { host: "api.example.com:8080" } },
        { name: "h", match: { methods: [] } },
        { name: "i", match: { methods: ["GET /"] } }
      ]
    })).toEqual([
      "routes[0].match.path: expected a path that starts with /, got \"login\"",
      "routes[1].match.prefix: expected each * to be a whole segment, as in /users/*/posts, got \"/files/*.png\"",
      "routes[2].match.path: expected a path with no . or .. segment, got \"/a/../b\"",
      "routes[3].match.path: expected a path with no query or fragment (? or #), got \"/a?b\"",
      "routes[4].match: give path or prefix, not both",
      "routes[5].match: expected at least one of methods, host, path or prefix, got {}",
      "routes[6].match.host: expected a host name without a port, or *.name for every name below it, got " +
      "\"api.example.com:8080\"",
      "routes[7].match.methods: expected a non-empty list of methods such as [\"POST\"]",
      "routes[8].match.methods[0]: expected a method such as GET or POST, got \"GET /\""
    ])
  })

  it("across fields: route names, one definition per limit name, delay's wait", () => {
    expect(problems({
      routes: [
        { name: "a", match: { path: "/a" }, limits: [LOGIN], shadow: [LOGIN] },
        { name: "a", match: { path: "/b" }, limits: [{ ...LOGIN, limit: 6 }] },
        { name: "default", match: { path: "/c" }, mode: "delay" },
        { name: "d", match: { path: "/d" }, maxWait: "1s" },
        { name: "e", match: { path: "/e" }, limits: [{ ...LOGIN, window: "60s", key: "header:x" }] },
        { name: "f", match: { path: "/f" }, mode: "delay", maxWait: "600h", limits: [{ ...API, name: "f" }] }
      ]
    })).toEqual([
      "routes[0].shadow[0].name: \"login\" is listed twice in this route (at routes[0].limits[0])",
      "routes[1].name: \"a\" is given twice (and at routes[0])",
      "routes[1].limits[0].name: \"login\" is defined differently at routes[0].limits[0]: one name, one limit " +
      "(they share its keys in the store)",
      "routes[2].name: \"default\" is the default route's name: choose another",
      "routes[2].mode: delay needs maxWait: the longest a request waits its turn",
      "routes[2].limits: delay waits each request's turn in one limit: expected one limit, got 0",
      "routes[3].maxWait: applies to mode delay only, not enforce",
      "routes[5].maxWait: expected at most 24d 20h 31m 23s 647ms (the longest a timer waits), got 25d"
    ])
  })

  it("text that is not JSON", () => {
    const decoded = config.decode("{ \"routes\": [ }")
    expect(Either.isLeft(decoded) && decoded.left.length === 1 && decoded.left[0]!.startsWith("not JSON: ")).toBe(
      true
    )
  })
})

describe("the JSON Schema, made from the same Schema", () => {
  it("docs/proxy-config.schema.json is JSONSchema.make of it (`vitest -u` writes it)", async () => {
    await expect(`${JSON.stringify(config.jsonSchema(), null, 2)}\n`).toMatchFileSnapshot(
      "../docs/proxy-config.schema.json"
    )
  })

  it("is a valid JSON Schema that takes the docs' example and refuses a mistyped field or a bad value", () => {
    const schema = JSON.parse(readFileSync(new URL("../docs/proxy-config.schema.json", import.meta.url), "utf8"))
    const validate = new Ajv({ strict: false }).compile(schema)
    expect(validate(JSON.parse(docsExample()))).toBe(true)
    expect(validate({ routes: [{ name: "a", match: { path: "/a" }, limits: [{ ...API, refil: "1/s" }] }] })).toBe(
      false
    )
    expect(validate({ port: 70_000 })).toBe(false)
    expect(validate({ routes: [{ name: "a", match: { path: "/a" }, mode: "strict" }] })).toBe(false)
  })
})

// ---------------------------------------------------------------------------------------------------------------

const dir = mkdtempSync(join(tmpdir(), "wakuwaku-config-"))
const fileWith = (contents: unknown): string => {
  const path = join(dir, `${Math.random().toString(36).slice(2)}.json`)
  writeFileSync(path, typeof contents === "string" ? contents : JSON.stringify(contents))
  return path
}

const commandOf = (argv: ReadonlyArray<string>, env: Record<string, string> = {}): Command => parse(argv, env)

describe("flags, variables and the file", () => {
  const file = fileWith({
    upstream: "http://127.0.0.1:3000",
    port: 9000,
    timeout: "5s",
    storeTimeout: "2s",
    onStoreFailure: "fail-open",
    trustedProxies: ["10.0.0.0/8"],
    routes: [{ name: "login", match: { path: "/login" }, limits: [LOGIN] }],
    default: { limits: [{ ...API, name: "default-api" }] }
  })

  it("a flag wins over its variable, which wins over the file's field, which wins over the default", () => {
    const command = commandOf(["proxy", "--config", file, "--port", "9001", "--upstream", "http://127.0.0.1:3001"], {
      WAKUWAKU_TIMEOUT: "7s",
      WAKUWAKU_PORT: "9002"
    })
    if (command._tag !== "Proxy") throw new Error(JSON.stringify(command))
    const c = command.config
    expect(c.port).toBe(9001)
    expect(c.upstream).toEqual({ _tag: "Url", url: "http://127.0.0.1:3001" })
    expect(Duration.toMillis(c.timeout)).toBe(7000)
    expect(Duration.toMillis(c.storeTimeout)).toBe(2000)
    expect(c.onStoreFailure).toBe("fail-open")
    expect(c.trustedProxies).toEqual(["10.0.0.0/8"])
    expect(Duration.toMillis(c.shutdownTimeout)).toBe(10_000)
    expect([c.configFile, c.routes.map((r) => r.name), c.defaultRoute.limits.map((l) => l.name)]).toEqual([
      file,
      ["login"],
      ["default-api"]
    ])
    // WAKUWAKU_CONFIG names the file as --config does.
    const viaEnv = commandOf(["proxy"], { WAKUWAKU_CONFIG: file })
    expect(viaEnv._tag === "Proxy" && viaEnv.config.port).toBe(9000)
  })

  it("without a file, the flags make the one default route of before", () => {
    const command = commandOf(["proxy", "--demo", "--key", "header:X-Api-Key", "--namespace", "edge"])
    if (command._tag !== "Proxy") throw new Error(JSON.stringify(command))
    expect(command.config.routes).toEqual([])
    expect(config.describeRoute(command.config.defaultRoute)).toBe(
      "default: token bucket \"edge\": burst 20, 1 per 3s, per x-api-key header (client IP without it)"
    )
  })

  it("the limit flags are refused beside a file; a file's problems are listed (exit code 2)", () => {
    expect(commandOf(["proxy", "--config", file, "--capacity", "5"])).toEqual({
      _tag: "Invalid",
      message: "wakuwaku proxy: --capacity: the limits come from the configuration file's routes and default with " +
        "--config; drop --capacity (see wakuwaku proxy --help)",
      code: 2
    })
    expect(commandOf(["proxy", "--config", file], { WAKUWAKU_ALGORITHM: "fixed-window" })).toMatchObject({
      message: "wakuwaku proxy: WAKUWAKU_ALGORITHM: the limits come from the configuration file's routes and " +
        "default with --config; unset WAKUWAKU_ALGORITHM (see wakuwaku proxy --help)"
    })
    const bad = fileWith({ port: -1, routes: [{ name: "x", match: { path: "/x" }, mode: "fast" }] })
    expect(commandOf(["proxy", "--config", bad])).toEqual({
      _tag: "Invalid",
      message: `wakuwaku proxy: ${bad}: 2 problems\n` +
        "  port: expected a port number from 0 to 65535, got -1\n" +
        "  routes[0].mode: expected enforce, shadow or delay, got \"fast\"",
      code: 2
    })
    const missing = join(dir, "missing.json")
    expect(commandOf(["proxy", "--config", missing])).toMatchObject({
      message: `wakuwaku proxy: --config: cannot read "${missing}": ENOENT: no such file or directory, open ` +
        `'${missing}' (see wakuwaku proxy --help)`,
      code: 2
    })
    expect(commandOf(["proxy", "--config", fileWith({ routes: [] })])).toMatchObject({
      message: "wakuwaku proxy: --upstream URL or the file's \"upstream\" is required (or --demo for a built-in " +
        "demo upstream) (see wakuwaku proxy --help)"
    })
  })

  it("--check-config: what the file holds, or its problems with exit code 1 (as nginx -t)", () => {
    const checked = commandOf(["proxy", "--check-config", file])
    expect(checked._tag === "Check" && checked.text).toBe(
      `wakuwaku proxy: ${file}: the configuration is valid: 1 route and the default route\n` +
        "  login (/login): sliding window \"login\": 5 per any 1m, per client IP\n" +
        "  default: token bucket \"default-api\": burst 100, 100 per 1s, per x-api-key header (client IP without " +
        "it)\n"
    )
    const bad = fileWith({ routes: [{ name: "x", match: { path: "/x" }, limits: [{ ...API, capacity: 0 }] }] })
    expect(commandOf(["proxy", "--check-config", bad])).toEqual({
      _tag: "Invalid",
      message: `wakuwaku proxy: ${bad}: 1 problem\n  routes[0].limits[0].capacity: expected a positive whole ` +
        "number, got 0",
      code: 1
    })
    expect(commandOf(["proxy", "--check-config", file, "--port", "x"])).toMatchObject({ code: 1 })
    expect(commandOf(["proxy", "--check-config", file, "--config", file])).toMatchObject({
      message: "wakuwaku proxy: --check-config FILE checks the file --config FILE would read: give one of them " +
        "(see wakuwaku proxy --help)",
      code: 1
    })
  })
})

describe("the path a route matches: the one the upstream may read", () => {
  it.each([
    ["/login", "/login"],
    ["/%6cogin", "/login"],
    ["/%6C%6F%67%69%6E", "/login"],
    ["//login", "/login"],
    ["/login/", "/login"],
    ["/LOGIN", "/login"],
    ["/login;jsessionid=1", "/login"],
    ["/\\login", "/login"],
    ["/%5Clogin", "/login"],
    ["/a%2F..%2Flogin", "/login"],
    ["/x/%2e%2e/login", "/login"],
    ["/caf%C3%A9", "/café"],
    ["/%FF/login", "/%ff/login"],
    ["/login.json", "/login.json"],
    ["/", "/"],
    ["*", ""]
  ])("%s reads as %s", (path, expected) => {
    expect(routes.matchPath(path)).toBe(expected)
  })

  it("the first route that matches takes the request: methods (GET takes HEAD), host, path, prefix, *", () => {
    const route = routes.compile<{ readonly name: string; readonly match?: routes.Match | undefined }>(
      [
        { name: "post-login", match: { methods: ["POST"], path: "/login" } },
        { name: "admin", match: { host: "*.example.com", prefix: "/admin" } },
        { name: "posts", match: { path: "/users/*/posts" } },
        { name: "files", match: { prefix: "/files/*" } },
        { name: "api", match: { prefix: "/API/" } },
        { name: "get", match: { methods: ["get"], path: "/login" } }
      ],
      { name: "default", match: undefined }
    )
    const at = (method: string, host: string | undefined, path: string) => route(method, host, path).name
    expect(at("POST", "x", "/login")).toBe("post-login")
    expect(at("POST", "x", "/%4cogin/")).toBe("post-login")
    expect(at("GET", "x", "/login")).toBe("get")
    expect(at("HEAD", "x", "/login")).toBe("get")
    expect(at("PUT", "x", "/login")).toBe("default")
    expect(at("GET", "a.Example.com:8443", "/admin/users")).toBe("admin")
    expect(at("GET", "example.com", "/admin")).toBe("default")
    expect(at("GET", undefined, "/admin")).toBe("default")
    expect(at("GET", "x", "/users/7/posts")).toBe("posts")
    expect(at("GET", "x", "/users/7/8/posts")).toBe("default")
    expect(at("GET", "x", "/files/a/b")).toBe("files")
    expect(at("GET", "x", "/files")).toBe("default")
    expect(at("GET", "x", "/api")).toBe("api")
    expect(at("GET", "x", "/api/v1")).toBe("api")
    expect(at("GET", "x", "/apix")).toBe("default")
    const none = routes.compile<{ readonly name: string; readonly match?: routes.Match }>([], { name: "default" })
    expect(none("GET", "x", "/anything").name).toBe("default")
  })
})
