/**
 * The `wakuwaku` command: its help, its flags and environment variables, and how it fails. The
 * parser is tested in this process; the command itself runs as a child process: bundled from the
 * sources (support/spawn.ts), compiled module by module where which modules it loads is the question
 * (support/transpile.ts), and through `npm start` (tsx) as a user runs it.
 */
import { Duration, Effect, Exit, Layer, Scope } from "effect"
import { spawn } from "node:child_process"
import * as Net from "node:net"
import { join } from "node:path"
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest"
import { Limiter, Redis, SlidingWindow } from "wakuwaku"
import { RedisServer } from "wakuwaku/testing"
import { type Config, envNames, flagNames, parse } from "../src/internal/proxy/cli.js"
import { build, rateLimitOf, startFailure } from "../src/internal/proxy/main.js"
import {
  cleanEnv,
  closedPort,
  outcome,
  REFUSE_PLATFORM,
  request,
  ROOT,
  runCli,
  startProxy,
  valueOf
} from "./support/proxy.js"
import { nodeArgs } from "./support/spawn.js"
import { transpile } from "./support/transpile.js"

const cleanups: Array<() => Promise<unknown>> = []
afterEach(async () => {
  await Promise.all(cleanups.splice(0).map((cleanup) => cleanup()))
})

/** Every flag of `wakuwaku proxy` and the variable it also reads. */
const FLAGS: ReadonlyArray<readonly [string, string]> = [
  ["host", "WAKUWAKU_HOST"],
  ["port", "WAKUWAKU_PORT"],
  ["shutdown-timeout", "WAKUWAKU_SHUTDOWN_TIMEOUT"],
  ["workers", "WAKUWAKU_WORKERS"],
  ["upstream", "WAKUWAKU_UPSTREAM"],
  ["demo", "WAKUWAKU_DEMO"],
  ["timeout", "WAKUWAKU_TIMEOUT"],
  ["algorithm", "WAKUWAKU_ALGORITHM"],
  ["capacity", "WAKUWAKU_CAPACITY"],
  ["refill", "WAKUWAKU_REFILL"],
  ["limit", "WAKUWAKU_LIMIT"],
  ["window", "WAKUWAKU_WINDOW"],
  ["key", "WAKUWAKU_KEY"],
  ["trusted-proxies", "WAKUWAKU_TRUSTED_PROXIES"],
  ["ipv6-prefix", "WAKUWAKU_IPV6_PREFIX"],
  ["namespace", "WAKUWAKU_NAMESPACE"],
  ["mode", "WAKUWAKU_MODE"],
  ["max-wait", "WAKUWAKU_MAX_WAIT"],
  ["max-waiting", "WAKUWAKU_MAX_WAITING"],
  ["redis", "REDIS_URL"],
  ["store-timeout", "WAKUWAKU_STORE_TIMEOUT"],
  ["on-store-failure", "WAKUWAKU_ON_STORE_FAILURE"],
  ["max-entries", "WAKUWAKU_MAX_ENTRIES"],
  ["remember-denials", "WAKUWAKU_REMEMBER_DENIALS"],
  ["admin-port", "WAKUWAKU_ADMIN_PORT"],
  ["admin-host", "WAKUWAKU_ADMIN_HOST"],
  ["drain-delay", "WAKUWAKU_DRAIN_DELAY"],
  ["access-log", "WAKUWAKU_ACCESS_LOG"],
  ["access-log-query", "WAKUWAKU_ACCESS_LOG_QUERY"],
  ["config", "WAKUWAKU_CONFIG"]
]

const config = (argv: ReadonlyArray<string>, env: Record<string, string> = {}): Config => {
  const command = parse(["proxy", ...argv], env)
  if (command._tag !== "Proxy") throw new Error(`expected a configuration, got ${JSON.stringify(command)}`)
  return command.config
}

const invalid = (argv: ReadonlyArray<string>, env: Record<string, string> = {}): string => {
  const command = parse(argv, env)
  if (command._tag !== "Invalid") throw new Error(`expected an error, got ${JSON.stringify(command)}`)
  return command.message
}

const millis = (d: Duration.Duration) => Duration.toMillis(d)

describe("help", () => {
  it("`wakuwaku proxy --help` lists every flag with its variable, on stdout, with exit code 0", async () => {
    expect([...flagNames]).toEqual([...FLAGS.map(([flag]) => flag), "check-config", "help"])
    expect([...envNames]).toEqual(FLAGS.map(([, env]) => env))
    const { code, stderr, stdout } = await runCli(["proxy", "--help"])
    expect(code).toBe(0)
    expect(stderr).toBe("")
    expect(stdout).toMatch(/^Usage: wakuwaku proxy \[flags\]/)
    for (const [flag, env] of FLAGS) {
      expect(stdout).toMatch(new RegExp(`^  --${flag}\\b`, "m"))
      expect(stdout).toContain(`env ${env}`)
    }
    expect(stdout).toContain("-h, --help")
    // -h anywhere among other flags is the help too.
    expect(parse(["proxy", "--port", "1", "-h"], {})).toEqual({ _tag: "Help", text: stdout })
  })

  it("`wakuwaku --help` names the proxy command", async () => {
    const { code, stdout } = await runCli(["--help"])
    expect(code).toBe(0)
    expect(stdout).toContain("proxy    a rate-limiting reverse proxy")
  })
})

describe("--help and bad flags answer without loading the server", () => {
  // Module by module as the package ships (support/transpile.ts): a bundle would hold the server's modules
  // that bin.ts imports only when it runs one.
  let scratch: ReturnType<typeof transpile> | undefined
  beforeAll(() => {
    scratch = transpile()
  })
  afterAll(() => scratch?.remove())

  const hooked = (args: ReadonlyArray<string>) =>
    outcome(
      spawn(
        process.execPath,
        [
          "--import",
          `data:text/javascript,${encodeURIComponent(REFUSE_PLATFORM)}`,
          join(scratch!.dir, "dist", "bin.js"),
          ...args
        ],
        { cwd: ROOT, env: cleanEnv(), stdio: ["ignore", "pipe", "pipe"] }
      )
    )

  it("with @effect/platform refused, --help and a bad flag still answer; running the proxy does not", async () => {
    const [help, bad, run] = await Promise.all([
      hooked(["proxy", "--help"]),
      hooked(["proxy", "--port", "x"]),
      hooked(["proxy", "--demo", "--port", "0"])
    ])
    expect(help.code).toBe(0)
    expect(help.stdout).toMatch(/^Usage: wakuwaku proxy/)
    expect(bad.code).toBe(2)
    // The hook works: the proxy itself needs @effect/platform.
    expect(run.code).toBe(1)
    expect(run.stderr).toMatch(/^wakuwaku proxy: refused to load .*@effect\/platform/)
  })
})

describe("bad flags: one line on stderr, nothing on stdout, exit code 2", () => {
  const CASES = [
    [["proxy", "--bogus"], {}, "wakuwaku proxy: unknown flag --bogus (see wakuwaku proxy --help)"],
    [
      ["proxy", "--upstream", "http://127.0.0.1:3000", "--port", "http"],
      {},
      "wakuwaku proxy: --port: expected a port number from 0 to 65535, got \"http\" (see wakuwaku proxy --help)"
    ],
    [
      ["proxy", "--demo"],
      { WAKUWAKU_TIMEOUT: "soon" },
      "wakuwaku proxy: WAKUWAKU_TIMEOUT: expected a positive duration such as 500ms, 30s or 2m, got \"soon\" (see wakuwaku proxy --help)"
    ],
    [
      ["proxy"],
      {},
      "wakuwaku proxy: --upstream URL is required (or --demo for a built-in demo upstream) (see wakuwaku proxy --help)"
    ],
    [["serve"], {}, "wakuwaku: unknown command \"serve\" (see wakuwaku --help)"],
    [[], {}, "wakuwaku: missing command (see wakuwaku --help)"]
  ] as const

  // The parser decides the line and the code (bin.ts writes the one and exits with the other): each case here.
  it.each(CASES)("%j %j", (argv, env, message) => {
    expect(parse(argv, env)).toEqual({ _tag: "Invalid", message, code: 2 })
  })

  // And bin.ts does so, for one of them, as a process.
  it("as a process: `wakuwaku proxy --bogus`", async () => {
    const { code, stderr, stdout } = await runCli(["proxy", "--bogus"], cleanEnv())
    expect({ code, stdout, stderr }).toEqual({ code: 2, stdout: "", stderr: `${CASES[0][2]}\n` })
  })
})

describe("a mistyped flag or command: the nearest one is suggested, when one is near", () => {
  it.each([
    [
      ["proxy", "--upsteam", "http://127.0.0.1:3000"],
      "wakuwaku proxy: unknown flag --upsteam (did you mean --upstream?)"
    ],
    [["proxy", "--demo", "--prot", "8080"], "wakuwaku proxy: unknown flag --prot (did you mean --port?)"],
    [["proxy", "--demo", "--capasity=5"], "wakuwaku proxy: unknown flag --capasity (did you mean --capacity?)"],
    [["proxy", "--demo", "--Port", "8080"], "wakuwaku proxy: unknown flag --Port (did you mean --port?)"],
    [
      ["proxy", "--demo", "--remember-denial", "5"],
      "wakuwaku proxy: unknown flag --remember-denial (did you mean --remember-denials?)"
    ],
    [["proxy", "--dmeo"], "wakuwaku proxy: unknown flag --dmeo (did you mean --demo?)"],
    // One dash: parseArgs sees -p; the flag as typed is named, with its two-dash form.
    [["proxy", "--demo", "-port", "8080"], "wakuwaku proxy: unknown flag -port (did you mean --port?)"],
    [["proxy", "--demo", "-x"], "wakuwaku proxy: unknown flag -x"],
    [["proxy", "--bogus"], "wakuwaku proxy: unknown flag --bogus"],
    [["proxy", "--demo", "--ttl", "5"], "wakuwaku proxy: unknown flag --ttl"],
    [["prxy", "--demo"], "wakuwaku: unknown command \"prxy\" (did you mean proxy?)"],
    [["Proxy"], "wakuwaku: unknown command \"Proxy\" (did you mean proxy?)"],
    [["hlep"], "wakuwaku: unknown command \"hlep\" (did you mean help?)"],
    // A proxy flag where the command goes: the command was left out.
    [["--demo"], "wakuwaku: unknown command \"--demo\" (did you mean wakuwaku proxy --demo?)"],
    [
      ["--upstream", "http://127.0.0.1:3000"],
      "wakuwaku: unknown command \"--upstream\" (did you mean wakuwaku proxy --upstream?)"
    ],
    [["serve"], "wakuwaku: unknown command \"serve\""]
  ])("%j", (argv, message) => {
    const help = argv[0] === "proxy" ? "wakuwaku proxy --help" : "wakuwaku --help"
    expect(parse(argv, {})).toEqual({ _tag: "Invalid", message: `${message} (see ${help})`, code: 2 })
  })
})

// The process's exit code and its masked line: test/Proxy.attacks.test.ts, item 3.
describe("a Redis URL that cannot be used is a misconfigured store: exit code 1 with the reason, masked", () => {
  it("the parser says so: code 1 for the store's URL, 2 for the rest of the command line", () => {
    const command = (argv: ReadonlyArray<string>, env: Record<string, string> = {}) => {
      const parsed = parse(argv, env)
      return parsed._tag === "Invalid" ? parsed.code : parsed._tag
    }
    expect(command(["proxy", "--demo", "--redis", "redis://:pw@redis/zero"])).toBe(1)
    expect(command(["proxy", "--demo"], { REDIS_URL: "redis://:pw" })).toBe(1)
    expect(command(["proxy", "--demo", "--port", "x"])).toBe(2)
    expect(command(["serve"])).toBe(2)
  })
})

/** A token bucket's `--refill`, read. */
type Refill = { readonly tokens: number; readonly period: Duration.Duration }

describe("parse", () => {
  it("defaults to the demo policy: a token bucket of 20, one back every 3 s, per client IP, on :8080, embedded store", () => {
    const c = config(["--upstream", "http://127.0.0.1:3000"])
    expect(c).toMatchObject({
      host: undefined,
      port: 8080,
      upstream: { _tag: "Url", url: "http://127.0.0.1:3000" },
      limiter: { algorithm: "token-bucket", params: { capacity: 20, refill: { tokens: 1 } } },
      key: { _tag: "ip" },
      trustedProxies: [],
      ipv6Prefix: 56,
      namespace: "proxy",
      redis: undefined,
      onStoreFailure: "fallback",
      maxEntries: 100_000
    })
    expect(millis((c.limiter.params["refill"] as Refill).period)).toBe(3_000)
    expect(millis(c.timeout)).toBe(30_000)
    expect(millis(c.shutdownTimeout)).toBe(10_000)
    expect(millis(c.storeTimeout)).toBe(500)
  })

  it("reads every flag from its environment variable; a flag wins over its variable; empty variables are unset", () => {
    const env = {
      WAKUWAKU_HOST: "0.0.0.0",
      WAKUWAKU_PORT: "9000",
      WAKUWAKU_SHUTDOWN_TIMEOUT: "2s",
      WAKUWAKU_UPSTREAM: "http://app:3000/api",
      WAKUWAKU_TIMEOUT: "1.5s",
      WAKUWAKU_ALGORITHM: "fixed-window",
      WAKUWAKU_LIMIT: "100",
      WAKUWAKU_WINDOW: "1m",
      WAKUWAKU_KEY: "header:X-Api-Key",
      WAKUWAKU_TRUSTED_PROXIES: "10.0.0.0/8, fd00::/8",
      WAKUWAKU_IPV6_PREFIX: "64",
      WAKUWAKU_NAMESPACE: "edge",
      REDIS_URL: "redis://redis:6379/2",
      WAKUWAKU_STORE_TIMEOUT: "200ms",
      WAKUWAKU_ON_STORE_FAILURE: "fail-open",
      WAKUWAKU_MAX_ENTRIES: "5000",
      WAKUWAKU_DEMO: ""
    }
    const c = config([], env)
    expect(c).toMatchObject({
      host: "0.0.0.0",
      port: 9000,
      upstream: { _tag: "Url", url: "http://app:3000/api" },
      limiter: { algorithm: "fixed-window", params: { limit: 100 } },
      key: { _tag: "header", name: "x-api-key" },
      trustedProxies: ["10.0.0.0/8", "fd00::/8"],
      ipv6Prefix: 64,
      namespace: "edge",
      redis: "redis://redis:6379/2",
      onStoreFailure: "fail-open",
      maxEntries: 5000
    })
    expect([millis(c.shutdownTimeout), millis(c.timeout), millis(c.storeTimeout)]).toEqual([2_000, 1_500, 200])
    expect(millis(c.limiter.params["window"] as Duration.Duration)).toBe(60_000)
    expect(config(["--port=7000", "--namespace", "flag"], env)).toMatchObject({ port: 7000, namespace: "flag" })
    expect(config(["--demo"], { WAKUWAKU_DEMO: "true" }).upstream).toEqual({ _tag: "Demo" })
    expect(config([], { WAKUWAKU_DEMO: "1" }).upstream).toEqual({ _tag: "Demo" })
  })

  it("--algorithm sliding-window: the fixed window's --limit and --window, a sliding window made of them", () => {
    const c = config(["--demo", "--algorithm", "sliding-window", "--limit", "5", "--window", "10s"])
    expect(c.limiter).toMatchObject({
      algorithm: "sliding-window",
      title: "sliding window",
      params: { limit: 5 },
      summary: "5 per any 10s",
      burst: 5
    })
    expect(millis(c.limiter.params["window"] as Duration.Duration)).toBe(10_000)
    const limiter = rateLimitOf(c).limiter
    expect(SlidingWindow.isSlidingWindow(limiter)).toBe(true)
    expect(limiter[Limiter.TypeId]).toMatchObject({ kind: "SlidingWindow", quota: 5 })
    expect(config(["--demo"], { WAKUWAKU_ALGORITHM: "sliding-window", WAKUWAKU_LIMIT: "7" }).limiter.params)
      .toMatchObject({ limit: 7 })
    // Above its maximum: refused when the proxy starts, as the structures' bad options are (exit code 2).
    expect(() => rateLimitOf(config(["--demo", "--algorithm", "sliding-window", "--limit", "10001"]))).toThrow(
      /^wakuwaku: SlidingWindow\(proxy\) limit must be a whole number from 0 to 10000 /
    )
  })

  it("the help offers every kind's algorithm, with the flags each reads", () => {
    const command = parse(["proxy", "--help"], {})
    const text = command._tag === "Help" ? command.text : ""
    expect(text).toContain("--algorithm NAME             token-bucket, fixed-window or sliding-window\n")
    expect(text).toContain("--limit N                    fixed-window, sliding-window: requests per window\n")
    expect(text).toContain("  wakuwaku proxy --demo --algorithm sliding-window --limit 5 --window 10s\n")
  })

  it("durations, refill rates and hop counts", () => {
    const refill = (text: string) => {
      const c = config(["--demo", "--refill", text])
      const { period, tokens } = c.limiter.params["refill"] as Refill
      return [tokens, millis(period)]
    }
    expect(refill("1/3s")).toEqual([1, 3_000])
    expect(refill("10/1m")).toEqual([10, 60_000])
    expect(refill("5/s")).toEqual([5, 1_000])
    expect(refill("1 / 250ms")).toEqual([1, 250])
    const timeout = (text: string) => millis(config(["--demo", "--timeout", text]).timeout)
    expect([timeout("500ms"), timeout("1.5s"), timeout("2m"), timeout("1h"), timeout("30 seconds")]).toEqual([
      500,
      1_500,
      120_000,
      3_600_000,
      30_000
    ])
    expect(config(["--demo", "--trusted-proxies", "2"]).trustedProxies).toBe(2)
    expect(config(["--demo"]).rememberDenials).toBe(0)
    expect(config(["--demo", "--remember-denials", "10000"]).rememberDenials).toBe(10_000)
    expect(config(["--demo"], { WAKUWAKU_REMEMBER_DENIALS: "5" }).rememberDenials).toBe(5)
    expect(invalid(["proxy", "--demo", "--remember-denials", "-1"])).toBe(
      "wakuwaku proxy: --remember-denials: expected a whole number, got \"-1\" (see wakuwaku proxy --help)"
    )
  })

  it.each([
    [["proxy", "--port"], "--port needs a value (PORT)"],
    [["proxy", "--demo=yes"], "--demo takes no value"],
    [["proxy", "--demo", "--demo"], "--demo is given twice"],
    [["proxy", "extra"], "unexpected argument \"extra\""],
    [["proxy", "--demo", "--port", "70000"], "--port: expected a port number from 0 to 65535, got \"70000\""],
    [["proxy", "--demo", "--upstream", "http://x"], "--demo starts its own upstream: drop --upstream or --demo"],
    [
      ["proxy", "--upstream", "localhost:3000"],
      "--upstream: the upstream must be an http:// or https:// URL, got \"localhost:3000\""
    ],
    [
      ["proxy", "--upstream", "/api"],
      "--upstream: the upstream must be an absolute http:// or https:// URL, got \"/api\""
    ],
    [
      ["proxy", "--upstream", "http://x/?a=1"],
      "--upstream: the upstream URL must have no query, fragment or credentials, got \"http://x/?a=1\""
    ],
    [
      ["proxy", "--demo", "--timeout", "0s"],
      "--timeout: expected a positive duration such as 500ms, 30s or 2m, got \"0s\""
    ],
    [
      ["proxy", "--demo", "--timeout", "30"],
      "--timeout: expected a positive duration such as 500ms, 30s or 2m, got \"30\""
    ],
    [
      ["proxy", "--demo", "--algorithm", "leaky-bucket"],
      "--algorithm: expected token-bucket, fixed-window or sliding-window, got \"leaky-bucket\""
    ],
    [["proxy", "--demo", "--window", "1m"], "--window applies to fixed-window or sliding-window, not token-bucket"],
    [
      ["proxy", "--demo", "--algorithm", "fixed-window", "--capacity", "5"],
      "--capacity applies to token-bucket, not fixed-window"
    ],
    [
      ["proxy", "--demo", "--algorithm", "sliding-window", "--refill", "1/s"],
      "--refill applies to token-bucket, not sliding-window"
    ],
    [
      ["proxy", "--demo", "--algorithm", "sliding-window", "--window", "0s"],
      "--window: expected a positive duration such as 500ms, 30s or 2m, got \"0s\""
    ],
    [["proxy", "--demo", "--capacity", "0"], "--capacity: expected a positive whole number, got \"0\""],
    [
      ["proxy", "--demo", "--refill", "0/1s"],
      "--refill: expected N/DURATION with N at least 1, such as 1/3s or 10/1m, got \"0/1s\""
    ],
    [
      ["proxy", "--demo", "--refill", "3s"],
      "--refill: expected N/DURATION with N at least 1, such as 1/3s or 10/1m, got \"3s\""
    ],
    [["proxy", "--demo", "--key", "cookie"], "--key: expected ip or header:NAME, got \"cookie\""],
    [["proxy", "--demo", "--key", "header:"], "--key: expected a header name after header:, got \"header:\""],
    [
      ["proxy", "--demo", "--trusted-proxies", "10.0.0.0/8,lb.internal"],
      "--trusted-proxies: not an IP address or CIDR block: \"lb.internal\""
    ],
    [["proxy", "--demo", "--ipv6-prefix", "129"], "--ipv6-prefix: expected a prefix length from 0 to 128, got \"129\""],
    [
      ["proxy", "--demo", "--namespace", "a:b"],
      "--namespace: expected a short word (letters, digits, _ . -), got \"a:b\""
    ],
    [
      ["proxy", "--demo", "--redis", "http://redis:6379"],
      "--redis: expected a redis:// or rediss:// URL, got \"http://redis:6379\""
    ],
    [
      ["proxy", "--demo", "--on-store-failure", "retry"],
      "--on-store-failure: expected fail-closed, fail-open or fallback, got \"retry\""
    ],
    [["proxy", "--demo", "--max-entries", "-1"], "--max-entries: expected a positive whole number, got \"-1\""]
  ])("%j: %s", (argv, message) => {
    expect(invalid(argv)).toBe(`wakuwaku proxy: ${message} (see wakuwaku proxy --help)`)
  })

  describe("a URL in a refused value is printed with its password masked, whatever its form", () => {
    const encode = "percent-encode a password's / ? # and @ (%2F %3F %23 %40)"
    it.each([
      // Not a Redis URL.
      ["http://:hunter2@redis:6379", `expected a redis:// or rediss:// URL, got "http://***@redis:6379/"`],
      // The password "hun@ter/2" unencoded: a URL parser reads "hun" as the password and "ter" as the host.
      ["redis://:hun@ter/2@redis:6379", `an @ after the host: ${encode}, got "redis://***@redis:6379"`],
      // The passwords "hun/ter2", "hun?ter2", "hun#ter2": no URL at all.
      ["redis://:hun/ter2@redis:6379", `not a URL: ${encode}, got "redis://***@redis:6379"`],
      ["redis://:hun?ter2@redis:6379", `not a URL: ${encode}, got "redis://***@redis:6379"`],
      ["redis://:hun#ter2@redis:6379", `not a URL: ${encode}, got "redis://***@redis:6379"`],
      // The host forgotten, a port out of range, a database that is not a number.
      ["redis://:hunter2", `expected a redis:// or rediss:// URL, got "redis://***"`],
      ["redis://:hunter2@redis:99999", `not a URL: ${encode}, got "redis://***@redis:99999"`],
      [
        "redis://:hunter2@redis/zero",
        `expected a database number after the host, such as /0, got "redis://***@redis/zero"`
      ]
    ])("--redis and REDIS_URL %s: %s", (url, message) => {
      const fromFlag = invalid(["proxy", "--demo", "--redis", url])
      expect(fromFlag).toBe(`wakuwaku proxy: --redis: ${message} (see wakuwaku proxy --help)`)
      const fromEnv = invalid(["proxy", "--demo"], { REDIS_URL: url })
      expect(fromEnv).toBe(`wakuwaku proxy: REDIS_URL: ${message} (see wakuwaku proxy --help)`)
      for (const text of [fromFlag, fromEnv]) expect(text).not.toMatch(/hun|ter2|ter\//)
    })

    it.each([
      [
        "http://user:hunter2@app:3000",
        `the upstream URL must have no query, fragment or credentials, got "http://***@app:3000/"`
      ],
      [
        "http://:hun/ter2@app:3000",
        `the upstream must be an absolute http:// or https:// URL, got "http://***@app:3000"`
      ],
      ["ftp://:hunter2@app", `the upstream must be an http:// or https:// URL, got "ftp://***@app/"`]
    ])("--upstream and WAKUWAKU_UPSTREAM %s: %s", (url, message) => {
      const fromFlag = invalid(["proxy", "--upstream", url])
      expect(fromFlag).toBe(`wakuwaku proxy: --upstream: ${message} (see wakuwaku proxy --help)`)
      const fromEnv = invalid(["proxy"], { WAKUWAKU_UPSTREAM: url })
      expect(fromEnv).toBe(`wakuwaku proxy: WAKUWAKU_UPSTREAM: ${message} (see wakuwaku proxy --help)`)
      for (const text of [fromFlag, fromEnv]) expect(text).not.toMatch(/hun|ter2|ter\//)
    })

    it("a URL it accepts is kept as given, a password with an unencoded @ included", () => {
      expect(config(["--demo", "--redis", "redis://:p@ss@redis:6379/2"]).redis).toBe("redis://:p@ss@redis:6379/2")
    })
  })

  it("names the variable when the bad value came from one", () => {
    expect(invalid(["proxy", "--demo"], { WAKUWAKU_PORT: "eighty" })).toBe(
      "wakuwaku proxy: WAKUWAKU_PORT: expected a port number from 0 to 65535, got \"eighty\" (see wakuwaku proxy --help)"
    )
    expect(invalid(["proxy"], { WAKUWAKU_UPSTREAM: "http://x", WAKUWAKU_DEMO: "1" })).toBe(
      "wakuwaku proxy: --demo starts its own upstream: drop WAKUWAKU_UPSTREAM or --demo (see wakuwaku proxy --help)"
    )
  })
})

describe("running", () => {
  it("--demo (what `npm start` runs): the demo policy, 20 requests pass and the 21st gets 429", async () => {
    const proxy = await startProxy(["--demo"])
    cleanups.push(async () => {
      proxy.child.kill("SIGTERM")
      await proxy.exited
    })
    const statuses: Array<number> = []
    for (let i = 0; i < 21; i++) statuses.push((await request(proxy.port, { path: "/hello" })).status)
    expect(statuses).toEqual([...Array<number>(20).fill(200), 429])
    const denied = await request(proxy.port)
    expect(valueOf(denied, "proxy-status")).toBe("wakuwaku; error=http_request_error")
    expect(Number(valueOf(denied, "retry-after"))).toBeGreaterThanOrEqual(1)
    expect(Number(valueOf(denied, "retry-after"))).toBeLessThanOrEqual(3)
    proxy.child.kill("SIGTERM")
    const exit = await proxy.exited
    expect(exit.code).toBe(0)
    expect(exit.stdout).toContain("for i in $(seq 25); do curl -s -o /dev/null -w '%{http_code}\\n' 127.0.0.1:")
    expect(exit.stdout).toContain("limit:    token bucket \"proxy\": burst 20, 1 per 3s, per client IP")
    expect(exit.stdout).toContain("store:    embedded")
  })

  it("--algorithm sliding-window --limit 3 --window 1h: 3 requests pass, the 4th gets 429 until the first ends", async () => {
    const proxy = await startProxy(["--demo", "--algorithm", "sliding-window", "--limit", "3", "--window", "1h"])
    cleanups.push(async () => {
      proxy.child.kill("SIGTERM")
      await proxy.exited
    })
    const replies = []
    for (let i = 0; i < 4; i++) replies.push(await request(proxy.port, { path: "/hello" }))
    expect(replies.map((reply) => reply.status)).toEqual([200, 200, 200, 429])
    expect(replies.map((reply) => valueOf(reply, "ratelimit-policy"))).toEqual(Array(4).fill("\"proxy\";q=3;w=3600"))
    expect(valueOf(replies[0]!, "ratelimit")).toBe("\"proxy\";r=2;t=3600")
    const retry = Number(valueOf(replies[3]!, "retry-after"))
    expect(retry).toBeGreaterThan(3590)
    expect(retry).toBeLessThanOrEqual(3600)
    proxy.child.kill("SIGTERM")
    const exit = await proxy.exited
    expect(exit.stdout).toContain("limit:    sliding window \"proxy\": 3 per any 1h, per client IP")
  })

  it(
    "Ctrl-C on `npm start` (SIGINT to its process group, as a terminal sends it): the proxy stops; npm says 130",
    async () => {
      // Its own process group, as a terminal's foreground job: npm, its shell, tsx and the proxy.
      const child = spawn("npm", ["start"], {
        cwd: ROOT,
        env: cleanEnv({ WAKUWAKU_HOST: "127.0.0.1", WAKUWAKU_PORT: "0" }),
        stdio: ["ignore", "pipe", "pipe"],
        detached: true
      })
      const exited = outcome(child)
      cleanups.push(() => {
        try {
          process.kill(-child.pid!, "SIGKILL")
        } catch {
          // Already gone.
        }
        return Promise.resolve()
      })
      const port = await new Promise<number>((resolve, reject) => {
        let seen = ""
        child.stdout?.on("data", (chunk: Buffer) => {
          seen += chunk.toString()
          const match = /listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(seen)
          if (match?.[1] !== undefined) resolve(Number(match[1]))
        })
        void exited.then((o) => reject(new Error(`npm start exited (${o.code}) before listening: ${o.stderr}`)))
      })
      expect((await request(port, { path: "/hello" })).status).toBe(200)
      process.kill(-child.pid!, "SIGINT")
      const exit = await exited
      // npm ends on the signal itself, which a shell reports as 130 (128 + SIGINT), whatever the proxy's own
      // exit code, which is 0 (Proxy.test.ts).
      expect({ code: exit.code, signal: exit.signal, stderr: exit.stderr }).toEqual({
        code: null,
        signal: "SIGINT",
        stderr: ""
      })
      // The proxy, in the same group, got the SIGINT too: it stops accepting.
      for (;;) {
        const refused = await request(port).then(() => false, (error: Error) => /ECONNREFUSED/.test(error.message))
        if (refused) break
        await new Promise((resolve) => setTimeout(resolve, 20))
      }
    },
    60_000
  )

  /** A port something else listens on (every interface when no host is given), closed after the test. */
  const occupied = async (host?: string) => {
    const taken = Net.createServer()
    await new Promise<void>((resolve) => host === undefined ? taken.listen(0, resolve) : taken.listen(0, host, resolve))
    cleanups.push(() => new Promise<void>((resolve) => taken.close(() => resolve())))
    return (taken.address() as Net.AddressInfo).port
  }

  it("a port in use: one line on stderr that names it and says to choose another with --port, exit code 1", async () => {
    const port = await occupied("127.0.0.1")
    const { code, stderr } = await runCli(["proxy", "--demo", "--host", "127.0.0.1", "--port", String(port)])
    expect(code).toBe(1)
    expect(stderr).toBe(
      `wakuwaku proxy: cannot listen on 127.0.0.1:${port}: the port is already in use (EADDRINUSE); ` +
        "choose another with --port (0 picks a free one)\n"
    )
  })

  it("a port in use on every interface (no --host): the line names the port", async () => {
    const port = await occupied()
    const exit = await Effect.runPromise(
      Effect.exit(Effect.scoped(Layer.build(
        build(config(["--demo", "--port", String(port)]), "http://127.0.0.1:1").pipe(Layer.provide(Redis.layerMemory()))
      )))
    )
    if (Exit.isSuccess(exit)) throw new Error("expected the start to fail")
    expect(startFailure(exit.cause)).toBe(
      `cannot listen on port ${port}: the port is already in use (EADDRINUSE); choose another with --port ` +
        "(0 picks a free one)"
    )
  })

  it("a Redis that cannot be reached under fail-closed: one line on stderr, exit code 1", async () => {
    const port = await closedPort()
    const { code, stderr } = await runCli([
      "proxy",
      "--demo",
      "--port",
      "0",
      "--redis",
      `redis://127.0.0.1:${port}`,
      "--on-store-failure",
      "fail-closed"
    ])
    expect(code).toBe(1)
    expect(stderr).toMatch(/^wakuwaku proxy: Redis connect failed \(Connection\): [^\n]+\n$/)
  })

  describe("a misconfigured Redis is not an outage: exit 1 with the reason, under every policy", () => {
    /** A server that wants a password, stopped after the test. */
    const guarded = async (password: string) => {
      const scope = await Effect.runPromise(Scope.make())
      cleanups.push(() => Effect.runPromise(Scope.close(scope, Exit.void)))
      return Effect.runPromise(Scope.extend(RedisServer.make({ args: ["--requirepass", password] }), scope))
    }
    /** Runs the proxy until it exits, or until it listens (then stops it): how it ended. */
    const startOrExit = async (args: ReadonlyArray<string>) => {
      const child = spawn(process.execPath, [...nodeArgs("src/bin.ts"), "proxy", "--demo", ...args], {
        cwd: ROOT,
        env: cleanEnv(),
        stdio: ["ignore", "pipe", "pipe"]
      })
      const exited = outcome(child)
      child.stdout?.on("data", (chunk: Buffer) => {
        if (chunk.toString().includes("listening on")) child.kill("SIGTERM")
      })
      const { code, stderr, stdout } = await exited
      return { code, stderr, listened: stdout.includes("listening on") }
    }

    it.each(["fallback", "fail-open", "fail-closed"])("--on-store-failure %s", async (policy) => {
      const server = await guarded("Right-S3cret")
      // A store timeout a loaded machine cannot reach: the server's refusal, not a timeout, decides.
      const port = ["--port", "0", "--host", "127.0.0.1", "--on-store-failure", policy, "--store-timeout", "5s"]
      const wrong = await startOrExit([...port, "--redis", `redis://:Wrong-S3cret@127.0.0.1:${server.port}`])
      expect(wrong).toEqual({
        code: 1,
        stderr: "wakuwaku proxy: Redis connect failed (Authentication): WRONGPASS invalid username-password pair or " +
          "user is disabled.\n",
        listened: false
      })
      const none = await startOrExit([...port, "--redis", server.url])
      expect(none).toEqual({
        code: 1,
        stderr: "wakuwaku proxy: Redis connect failed (Authentication): NOAUTH Authentication required.\n",
        listened: false
      })
    }, 60_000)

    it.each(["fallback", "fail-open", "fail-closed"])(
      "--on-store-failure %s: a URL that cannot be used, exit 1",
      (policy) => {
        const encode = "percent-encode a password's / ? # and @ (%2F %3F %23 %40)"
        for (
          const [url, message] of [
            [
              "http://:hunter2@127.0.0.1:6379",
              `expected a redis:// or rediss:// URL, got "http://***@127.0.0.1:6379/"`
            ],
            ["redis://:hun@ter/2@127.0.0.1:6379", `an @ after the host: ${encode}, got "redis://***@127.0.0.1:6379"`]
          ] as const
        ) {
          // The flag before the URL and after it: the policy never turns a misconfiguration into an outage.
          const before = ["--on-store-failure", policy, "--redis", url]
          const after = ["--redis", url, "--on-store-failure", policy]
          for (const argv of [before, after]) {
            expect(parse(["proxy", "--demo", ...argv], {})).toEqual({
              _tag: "Invalid",
              message: `wakuwaku proxy: --redis: ${message} (see wakuwaku proxy --help)`,
              code: 1
            })
          }
          expect(parse(["proxy", "--demo", "--on-store-failure", policy], { REDIS_URL: url })).toEqual({
            _tag: "Invalid",
            message: `wakuwaku proxy: REDIS_URL: ${message} (see wakuwaku proxy --help)`,
            code: 1
          })
        }
      }
    )
  })
})
