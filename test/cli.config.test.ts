/**
 * `wakuwaku proxy --config FILE` and `--check-config FILE` as processes: the wiring of the file into the command
 * (what it prints, its exit codes, the routes it runs). What the file means is test/Proxy.config.test.ts's and
 * test/Proxy.routes.test.ts's, in this process.
 */
import { mkdtempSync, writeFileSync } from "node:fs"
import * as Http from "node:http"
import type { AddressInfo } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterEach, describe, expect, it } from "vitest"
import { request, runCli, startProxy } from "./support/proxy.js"
import { freshNamespace } from "./support/redis.js"

const cleanups: Array<() => Promise<unknown>> = []
afterEach(async () => {
  await Promise.all(cleanups.splice(0).map((cleanup) => cleanup()))
})

const dir = mkdtempSync(join(tmpdir(), "wakuwaku-cli-config-"))
const fileWith = (name: string, contents: unknown): string => {
  const path = join(dir, name)
  writeFileSync(path, JSON.stringify(contents, null, 2))
  return path
}

describe("--check-config FILE: checks, prints, exits (as nginx -t)", () => {
  it("a valid file: what it holds on stdout, exit 0; problems on stderr, exit 1; a delay route without its one limit refused as the proxy would", async () => {
    const good = fileWith("good.json", {
      upstream: "http://127.0.0.1:3000",
      routes: [
        {
          name: "login",
          match: { path: "/login" },
          limits: [{ name: "login", algorithm: "sliding-window", limit: 5, window: "1m" }]
        },
        { name: "health", match: { methods: ["GET"], path: "/health" } }
      ]
    })
    const bad = fileWith("bad.json", {
      upstream: "http://127.0.0.1:3000",
      routes: [{
        name: "api",
        match: { prefix: "/api" },
        limits: [{ name: "api", algorithm: "token-bucket", capacity: 100, refil: "100/1s" }]
      }]
    })
    const delay = fileWith("delay.json", {
      upstream: "http://127.0.0.1:3000",
      routes: [{ name: "slow", match: { prefix: "/" }, mode: "delay", maxWait: "1s" }]
    })
    const [valid, invalid, delayed] = await Promise.all([
      runCli(["proxy", "--check-config", good]),
      runCli(["proxy", "--check-config", bad]),
      runCli(["proxy", "--check-config", delay])
    ])
    expect(valid).toMatchObject({
      code: 0,
      stderr: "",
      stdout: `wakuwaku proxy: ${good}: the configuration is valid: 2 routes and the default route\n` +
        "  login (/login): sliding window \"login\": 5 per any 1m, per client IP\n" +
        "  health (GET /health): no limit\n" +
        "  default: no limit\n"
    })
    expect(invalid).toMatchObject({
      code: 1,
      stdout: "",
      stderr: `wakuwaku proxy: ${bad}: 2 problems\n` +
        "  routes[0].limits[0].refil: unknown field (did you mean refill?); expected name, algorithm, capacity, " +
        "refill, key or cost\n" +
        "  routes[0].limits[0].refill: is missing: expected N/DURATION with N at least 1, such as 1/3s or 10/1m\n"
    })
    expect(delayed).toMatchObject({
      code: 1,
      stdout: "",
      stderr: `wakuwaku proxy: ${delay}: 1 problem\n` +
        "  routes[0].limits: delay waits each request's turn in one limit: expected one limit, got 0\n"
    })
  })
})

describe("--config FILE: the proxy runs the file's routes", () => {
  it("the banner lists the routes; /health passes with no field, /login is limited, a flag wins over the file", async () => {
    const upstream = Http.createServer((req, res) => res.end(`up ${req.url}`))
    await new Promise<void>((resolve) => upstream.listen(0, "127.0.0.1", resolve))
    cleanups.push(() => new Promise((resolve) => upstream.close(resolve)))
    const login = freshNamespace("login")
    const file = fileWith("run.json", {
      // Nothing listens here: the --upstream flag wins.
      upstream: "http://127.0.0.1:1",
      port: 1,
      routes: [
        {
          name: "login",
          match: { path: "/login" },
          limits: [{ name: login, algorithm: "fixed-window", limit: 2, window: "1h" }]
        },
        { name: "health", match: { path: "/health" } }
      ]
    })
    const url = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`
    const proxy = await startProxy(["--config", file, "--upstream", url])
    cleanups.push(async () => {
      proxy.child.kill("SIGTERM")
      await proxy.exited
    })
    const statuses: Array<number> = []
    for (const path of ["/login", "/LOGIN", "/%6cogin", "/health", "/health"]) {
      statuses.push((await request(proxy.port, { path })).status)
    }
    expect(statuses).toEqual([200, 200, 429, 200, 200])
    const health = await request(proxy.port, { path: "/health" })
    expect(health.headers.some(([name]) => name.toLowerCase().startsWith("ratelimit"))).toBe(false)
    proxy.child.kill("SIGTERM")
    const { code, stdout } = await proxy.exited
    expect(code).toBe(0)
    expect(stdout).toContain(
      `  config:   ${file}\n` +
        `  routes:   login (/login): fixed window "${login}": 2 per 1h, per client IP\n` +
        "            health (/health): no limit\n" +
        "            default: no limit\n"
    )
  })
})
