/**
 * docs/examples/login.ts picks its store and says which: REDIS_URL, else a throwaway server, else memory.
 * docs/examples/httpapi.ts runs its API and its client; docs/httpapi.openapi.json is its OpenAPI document, valid
 * OpenAPI 3.1, whose limited operations declare the rate-limit fields (the OWASP rate-limit rules' conditions).
 * docs/http.md's HttpApi server and client blocks run as written, each as a program of its own.
 */
import * as OpenApi from "@effect/platform/OpenApi"
import { Effect, Exit, Scope } from "effect"
import { execFile, spawn } from "node:child_process"
import { randomBytes } from "node:crypto"
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { promisify } from "node:util"
import { afterAll, describe, expect, it } from "vitest"
import { RedisServer } from "wakuwaku/testing"
import { api } from "../docs/examples/httpapi.js"
import { fencedBlocks } from "./support/npm.js"
import { closedPort, outcome, ROOT } from "./support/proxy.js"
import { redisUrl } from "./support/redis.js"
import { nodeArgs } from "./support/spawn.js"
import { owaspRateLimit, validateOpenApi } from "./support/standards.js"

const run = promisify(execFile)

// A PATH that holds node and nothing else: no redis-server.
const nodeOnly = mkdtempSync(join(tmpdir(), "wakuwaku-node-only-"))
symlinkSync(process.execPath, join(nodeOnly, "node"))
afterAll(() => rmSync(nodeOnly, { recursive: true, force: true }))

const login = async (env: Record<string, string>) => {
  const { REDIS_URL: _, ...inherited } = process.env
  const { stdout } = await run(process.execPath, nodeArgs("docs/examples/login.ts"), {
    cwd: ROOT,
    env: { ...inherited, ...env }
  })
  return stdout.split("\n")
}

const expectTheBurst = (lines: ReadonlyArray<string>) => {
  expect(lines[1]).toBe("limiter TokenBucket(login): capacity 20, 1 per 3s")
  expect(lines[2]).toBe("attempt 1: allowed, remaining 19")
  expect(lines[21]).toBe("attempt 20: allowed, remaining 0")
  expect(lines[22]).toMatch(/^attempt 21: denied, retry after (2[89]\d\d|3000) ms$/)
  expect(lines[23]).toBe("reset: bucket existed true; next attempt: Allowed")
}

describe("docs/examples/login.ts", () => {
  it("with no REDIS_URL and no redis-server on PATH: the memory backend, said first", async () => {
    const lines = await login({ PATH: nodeOnly })
    expect(lines[0]).toBe("store: memory (no REDIS_URL, no redis-server on PATH): shared by nothing but this process")
    expectTheBurst(lines)
  }, 30_000)

  it("with redis-server on PATH: a throwaway server", async () => {
    const lines = await login({})
    expect(lines[0]).toMatch(/^store: a throwaway redis-server at redis:\/\/127\.0\.0\.1:\d+ \(pid \d+\)$/)
    expectTheBurst(lines)
  }, 30_000)

  it("with REDIS_URL: that Redis", async () => {
    const lines = await login({ REDIS_URL: redisUrl })
    expect(lines[0]).toBe(`store: Redis at ${redisUrl} (REDIS_URL)`)
    expect(lines[2]).toMatch(/^attempt 1: allowed, remaining \d+$/)
  }, 30_000)
})

describe("docs/examples/httpapi.ts", () => {
  it("runs: 20 logins pass, the 21st is RateLimitExceeded; each user's plan is in the fields", async () => {
    const { REDIS_URL: _, ...inherited } = process.env
    const { stdout } = await run(process.execPath, nodeArgs("docs/examples/httpapi.ts"), {
      cwd: ROOT,
      env: inherited
    })
    const lines = stdout.split("\n")
    expect(lines[0]).toBe("store: memory (no REDIS_URL): shared by nothing but this process")
    expect(lines[1]).toBe("login 1: welcome (RateLimit: \"login\";r=19;t=3)")
    expect(lines[20]).toBe("login 20: welcome (RateLimit: \"login\";r=0;t=60)")
    // 3 s when the 20 logins took under a second; on a loaded machine the bucket refills a fraction meanwhile.
    expect(lines[21]).toMatch(
      /^login 21: RateLimitExceeded by login, retry after ([1-3]) s \(RateLimit: "login";r=0;t=\1, Retry-After: \1\)$/
    )
    expect(lines.slice(22)).toEqual([
      "order of ann: RateLimit-Policy: \"per-second\";q=10;w=1, \"free\";q=100;w=3600 " +
      "(RateLimit: \"per-second\";r=9;t=1)",
      "order of bob: RateLimit-Policy: \"per-second\";q=10;w=1, \"paid\";q=10000;w=3600 " +
      "(RateLimit: \"per-second\";r=9;t=1)",
      "a wrong token: Unauthorized",
      ""
    ])
  }, 30_000)

  it("docs/httpapi.openapi.json is its OpenAPI document, as `--openapi` prints it now", () => {
    const sample = readFileSync(new URL("../docs/httpapi.openapi.json", import.meta.url), "utf8")
    expect(sample).toBe(`${JSON.stringify(OpenApi.fromApi(api), null, 2)}\n`)
    // The 429 is on the limited endpoints only.
    const spec = JSON.parse(sample)
    expect(Object.keys(spec.paths["/login"].post.responses)).toContain("429")
    expect(Object.keys(spec.paths["/orders"].get.responses)).toContain("429")
    expect(Object.keys(spec.paths["/health"].get.responses)).not.toContain("429")
  })

  it("docs/httpapi.openapi.json is valid OpenAPI 3.1; OWASP's rate-limit rules find only the unlimited /health", async () => {
    const spec = JSON.parse(readFileSync(new URL("../docs/httpapi.openapi.json", import.meta.url), "utf8"))
    expect(await validateOpenApi(spec)).toMatchObject({ valid: true })
    expect(owaspRateLimit(spec)).toEqual([
      { code: "owasp:api4:2023-rate-limit", path: "paths /health get responses 200" },
      { code: "owasp:api4:2023-rate-limit", path: "paths /health get responses 400" }
    ])
    const tooMany = spec.paths["/login"].post.responses["429"]
    expect(Object.keys(tooMany.content)).toEqual(["application/problem+json"])
    expect(Object.keys(tooMany.headers).sort()).toEqual(["RateLimit", "RateLimit-Policy", "Retry-After"])
  })
})

describe("docs/http.md, HttpApi: the server block serves the API, the client block calls it", () => {
  // Inside the project, where tsconfig.json's paths resolve "wakuwaku" (ignored by git).
  const dir = join(ROOT, "test", ".docs-tmp", `httpapi-${process.pid}-${randomBytes(4).toString("hex")}`)
  afterAll(() => rmSync(dir, { recursive: true, force: true }))

  /** The one ```ts block of docs/http.md that holds `marker`, written out as a file. */
  const blockFile = (marker: string, name: string) => {
    const found = fencedBlocks(readFileSync(join(ROOT, "docs", "http.md"), "utf8"), "ts")
      .filter((code) => code.includes(marker))
    expect(found).toHaveLength(1)
    mkdirSync(dir, { recursive: true })
    writeFileSync(join(dir, name), found[0]!)
    return join(dir, name)
  }

  it(
    "20 logins are welcome, the 21st is RateLimitExceeded, retry after 3 s (less on a loaded machine); SIGINT stops the server, code 0",
    async () => {
      const serverFile = blockFile("Layer.launch(ServerLive)", "server.ts")
      const clientFile = blockFile("HttpApiClient.make(api, { baseUrl })", "client.ts")
      const scope = await Effect.runPromise(Scope.make())
      try {
        const redis = await Effect.runPromise(Scope.extend(RedisServer.make(), scope))
        const port = await closedPort()
        const { REDIS_URL: _, ...inherited } = process.env
        const server = spawn(process.execPath, nodeArgs(serverFile), {
          cwd: ROOT,
          env: { ...inherited, PORT: String(port), REDIS_URL: redis.url },
          stdio: ["ignore", "pipe", "pipe"]
        })
        const exited = outcome(server)
        try {
          await new Promise<void>((resolve, reject) => {
            let seen = ""
            server.stdout?.on("data", (chunk: Buffer) => {
              seen += chunk.toString()
              if (seen.includes("Listening on http://")) resolve()
            })
            void exited.then((o) => reject(new Error(`the server exited (${o.code}): ${o.stdout}${o.stderr}`)))
          })
          const { stdout } = await run(process.execPath, nodeArgs(clientFile), {
            cwd: ROOT,
            env: { ...inherited, API_URL: `http://127.0.0.1:${port}` }
          })
          const lines = stdout.split("\n")
          expect(lines.slice(0, 20)).toEqual(Array.from({ length: 20 }, (_, i) => `login ${i + 1}: welcome`))
          // 3 s, as the doc says, when the logins took under a second; on a loaded machine the bucket refills
          // a fraction meanwhile (as in docs/examples/httpapi.ts's test above).
          expect(lines.slice(20)).toEqual([
            expect.stringMatching(/^login 21: RateLimitExceeded, retry after [1-3] s$/),
            ""
          ])
        } finally {
          server.kill("SIGINT")
        }
        const exit = await exited
        expect({ code: exit.code, stderr: exit.stderr }).toEqual({ code: 0, stderr: "" })
        expect(exit.stdout).toMatch(new RegExp(`Listening on http://\\S*:${port}$`, "m"))
      } finally {
        await Effect.runPromise(Scope.close(scope, Exit.void))
      }
    },
    60_000
  )
})
