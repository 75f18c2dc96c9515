/** The published shape: `npm run build` produces the entry that the exports map names, and it works from plain Node. */
import { execFile } from "node:child_process"
import { existsSync, readdirSync, readFileSync } from "node:fs"
import { fileURLToPath } from "node:url"
import { promisify } from "node:util"
import { beforeAll, describe, expect, it } from "vitest"
import { freshNamespace, redisUrl } from "./support/redis.js"

const run = promisify(execFile)
const root = fileURLToPath(new URL("..", import.meta.url))
const node = (code: string) => run(process.execPath, ["--input-type=module", "-e", code], { cwd: root })

describe("package", () => {
  beforeAll(async () => {
    await run(process.execPath, [
      fileURLToPath(new URL("../node_modules/typescript/bin/tsc", import.meta.url)),
      "-p",
      "src/tsconfig.build.json"
    ], {
      cwd: root
    })
  }, 120_000)

  it("package.json: name, ESM, engines, exports with types", () => {
    const pkg = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8"))
    expect(pkg.name).toBe("wakuwaku")
    expect(pkg.type).toBe("module")
    expect(pkg.engines.node).toBe(">=20.19")
    expect(pkg.exports["."]).toEqual({ types: "./dist/index.d.ts", default: "./dist/index.js" })
    expect(existsSync(new URL("../dist/index.js", import.meta.url))).toBe(true)
    expect(existsSync(new URL("../dist/index.d.ts", import.meta.url))).toBe(true)
    // The subpaths and the command, each built.
    for (
      const [subpath, file] of [
        ["./testing", "testing"],
        ["./http", "http"],
        ["./Proxy", "Proxy"],
        ["./RateLimiterStore", "RateLimiterStore"]
      ] as const
    ) {
      expect(pkg.exports[subpath]).toEqual({ types: `./dist/${file}.d.ts`, default: `./dist/${file}.js` })
      expect(existsSync(new URL(`../dist/${file}.js`, import.meta.url)), file).toBe(true)
    }
    expect(pkg.bin).toEqual({ wakuwaku: "dist/bin.js" })
  })

  it("no public declaration file names an internal module: every dist/*.d.ts reads only public ones", () => {
    const dist = new URL("../dist/", import.meta.url)
    const files = readdirSync(dist).filter((file) => file.endsWith(".d.ts"))
    expect(files).toContain("Redis.d.ts")
    const leaks = files.flatMap((file) =>
      [...readFileSync(new URL(file, dist), "utf8").matchAll(/(?:from |import\()"(\.[^"]*)"/g)]
        .map((match) => match[1]!)
        .filter((specifier) => specifier.includes("internal"))
        .map((specifier) => `${file} → ${specifier}`)
    )
    expect(leaks).toEqual([])
  })

  it("the built command answers --help from plain Node", async () => {
    const { stdout } = await run(process.execPath, ["dist/bin.js", "proxy", "--help"], { cwd: root })
    expect(stdout).toContain("Usage: wakuwaku proxy [flags]")
  })

  it("the root exports the namespaces Admission, Capability, FixedWindow, Lock, Pipe, Rate, Redis, RwLock, Script, Semaphore and TokenBucket", async () => {
    const { stdout } = await node(`import("wakuwaku").then((m) => console.log(JSON.stringify(Object.keys(m))))`)
    expect(JSON.parse(stdout)).toEqual([
      "Admission",
      "Capability",
      "FixedWindow",
      "Lock",
      "Pipe",
      "Rate",
      "Redis",
      "RwLock",
      "Script",
      "Semaphore",
      "TokenBucket"
    ])
  })

  it("@effect/experimental is an optional peer, of the Effect 3 line (test/architecture.test.ts: only its bridge loads it)", () => {
    const pkg = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8"))
    expect(pkg.peerDependencies["@effect/experimental"]).toBe("~0.61.1")
    expect(pkg.peerDependenciesMeta["@effect/experimental"]).toEqual({ optional: true })
  })

  it("wakuwaku/RateLimiterStore runs RateLimiter.consume against Redis from plain Node", async () => {
    const { stdout } = await node(`
      import { RateLimiter } from "@effect/experimental"
      import { Effect, Layer } from "effect"
      import { Redis } from "wakuwaku"
      import * as RateLimiterStore from "wakuwaku/RateLimiterStore"
      const limiter = RateLimiter.layer.pipe(Layer.provide(RateLimiterStore.layer({ namespace: "${freshNamespace()}" })))
      const result = await Effect.flatMap(RateLimiter.RateLimiter, (l) => l.consume({ key: "a", limit: 5, window: "1 minute" })).pipe(
        Effect.provide(limiter), Effect.provide(Redis.layer({ url: "${redisUrl}" })), Effect.runPromise)
      console.log(result.remaining)
    `)
    expect(stdout.trim()).toBe("4")
  })

  it("the built entry runs against Redis from plain Node", async () => {
    const { stdout } = await node(`
      import { Effect } from "effect"
      import { Rate, Redis, TokenBucket } from "wakuwaku"
      const B = TokenBucket.make("${freshNamespace()}", 20, Rate.make(1, "3 seconds"))
      const admission = await B.acquire("203.0.113.7", 1).pipe(Effect.provide(Redis.layer({ url: "${redisUrl}" })), Effect.runPromise)
      console.log(JSON.stringify(admission))
    `)
    expect(JSON.parse(stdout)).toEqual({ _tag: "Allowed", remaining: 19 })
  })
})
