/**
 * The published shape. `npm pack` builds dist (its prepack script) and packs what a user installs: the
 * entry that the exports map names works from plain Node; the tarball carries LICENSE and every file that
 * README and docs link to (and every heading they link to); and README's Install section works as
 * written: in an empty directory its commands install the tarball and make the project, where README's
 * example compiles with `npx tsc` under README's tsconfig.json (strict, `skipLibCheck: false`) and runs
 * with `node login.js`; it, docs/testing.md's test and docs/examples/httpapi.ts compile with the pinned
 * TypeScript and with TypeScript 7, and run. npm installs from the registry through its own cache
 * (`npmEnv`).
 */
import { Effect, Exit, Scope } from "effect"
import { execFile } from "node:child_process"
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from "node:fs"
import { rm } from "node:fs/promises"
import { tmpdir } from "node:os"
import { dirname, join, normalize } from "node:path"
import { fileURLToPath } from "node:url"
import { promisify } from "node:util"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { RedisServer } from "wakuwaku/testing"
import {
  exec,
  fencedBlocks,
  headingAnchors,
  installAsWritten,
  installCommands,
  npm,
  npmEnv,
  type Outcome,
  relativeLinks,
  satisfies,
  section,
  tsc
} from "./support/npm.js"
import { freshNamespace, redisUrl } from "./support/redis.js"

const run = promisify(execFile)
const root = fileURLToPath(new URL("..", import.meta.url))
const node = (code: string) => run(process.execPath, ["--input-type=module", "-e", code], { cwd: root })

const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8"))
const TMP = mkdtempSync(join(tmpdir(), "wakuwaku-package-"))
const tarball = join(TMP, `wakuwaku-${pkg.version}.tgz`)

beforeAll(async () => {
  await npm(["pack", "--pack-destination", TMP], root)
}, 120_000)

// The fresh project's node_modules is large: give its removal time on a busy machine.
afterAll(() => rm(TMP, { recursive: true, force: true }), 120_000)

describe("package", () => {
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

  it("names no repository it does not have: no repository, homepage or bugs in package.json, none in the docs", () => {
    expect([pkg.repository, pkg.homepage, pkg.bugs]).toEqual([undefined, undefined, undefined])
    const pages = ["README.md", ...filesUnder(join(root, "docs")).map((file) => `docs/${file}`)]
    const named = pages.flatMap((page) =>
      [...readFileSync(join(root, page), "utf8").matchAll(/https?:\/\/[^\s)`"'>]*wakuwaku[^\s)`"'>]*/gi)]
        .map((url) => `${page}: ${url[0]}`)
    )
    expect(named).toEqual([])
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

  it("the root exports the namespaces Admission, Capability, FixedWindow, Limiter, Limits, Lock, Pipe, Rate, Redis, RwLock, Script, Semaphore, SlidingWindow, Telemetry and TokenBucket", async () => {
    const { stdout } = await node(`import("wakuwaku").then((m) => console.log(JSON.stringify(Object.keys(m))))`)
    expect(JSON.parse(stdout)).toEqual([
      "Admission",
      "Capability",
      "FixedWindow",
      "Limiter",
      "Limits",
      "Lock",
      "Pipe",
      "Rate",
      "Redis",
      "RwLock",
      "Script",
      "Semaphore",
      "SlidingWindow",
      "Telemetry",
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

/** Every file under a directory, as paths relative to it with `/` separators. */
const filesUnder = (dir: string, prefix = ""): Array<string> =>
  readdirSync(dir, { withFileTypes: true }).flatMap((entry) =>
    entry.isDirectory()
      ? filesUnder(join(dir, entry.name), `${prefix}${entry.name}/`)
      : [`${prefix}${entry.name}`]
  ).sort()

describe("the tarball", () => {
  const unpacked = join(TMP, "unpacked")
  let files: Array<string> = []

  beforeAll(async () => {
    mkdirSync(unpacked)
    await run("tar", ["-xzf", tarball, "-C", unpacked])
    files = filesUnder(join(unpacked, "package"))
  })

  it("carries LICENSE (MIT, as package.json says), README.md, dist, and docs with every page and example", () => {
    const docs = filesUnder(join(root, "docs")).map((file) => `docs/${file}`)
    expect(docs).toContain("docs/token-bucket.md")
    expect(docs).toContain("docs/examples/login.ts")
    const wanted = ["LICENSE", "README.md", "package.json", "dist/index.js", ...docs]
    expect(wanted.filter((file) => !files.includes(file))).toEqual([])
    expect(pkg.license).toBe("MIT")
    const license = readFileSync(join(unpacked, "package", "LICENSE"), "utf8")
    expect(license.split("\n").slice(0, 3)).toEqual(["MIT License", "", "Copyright (c) 2026 the wakuwaku authors"])
    expect(license).toContain("Permission is hereby granted, free of charge, to any person obtaining a copy")
  })

  it("every relative link of README.md and of docs/**/*.md resolves to a file in the tarball, and to its heading", () => {
    const pages = files.filter((file) => file === "README.md" || (file.startsWith("docs/") && file.endsWith(".md")))
    const read = (page: string) => readFileSync(join(unpacked, "package", page), "utf8")
    const links = pages.flatMap((page) =>
      relativeLinks(read(page)).map(({ fragment, path }) => ({
        page,
        target: path === "" ? page : normalize(join(dirname(page), path)).replaceAll("\\", "/"),
        fragment
      }))
    )
    expect(links).toContainEqual({ page: "README.md", target: "docs/token-bucket.md", fragment: undefined })
    expect(links).toContainEqual({ page: "README.md", target: "README.md", fragment: "install" })
    expect(links.filter(({ target }) => !files.includes(target))).toEqual([])
    expect([...headingAnchors("# wakuwaku\n## RateLimiter.consume over wakuwaku's store\n### Usage\n### Usage\n")])
      .toEqual(["wakuwaku", "ratelimiterconsume-over-wakuwakus-store", "usage", "usage-1"])
    const anchored = links.filter(({ fragment, target }) => fragment !== undefined && target.endsWith(".md"))
    expect(anchored.length).toBeGreaterThan(100)
    expect(anchored.filter(({ fragment, target }) => !headingAnchors(read(target)).has(fragment!))).toEqual([])
    expect(pages).toContain("docs/http.md")
  })
})

describe("npm ci on Node 20.19", () => {
  it("every locked package's engines accept the engines floor, Node 20.19.0: no EBADENGINE warning", () => {
    // The reader of ranges, on the forms the lockfile holds.
    expect(satisfies("20.19.0", ">=22")).toBe(false)
    expect(satisfies("20.19.0", "^20.20.0")).toBe(false)
    expect(satisfies("20.19.0", "^20.19.0 || >=22.12.0")).toBe(true)
    expect(satisfies("20.19.0", "20 || >=22")).toBe(true)
    expect(satisfies("20.19.0", ">= 10.x")).toBe(true)
    expect(satisfies("20.19.0", ">20")).toBe(false)
    expect(pkg.engines.node).toBe(">=20.19")
    const lock = JSON.parse(readFileSync(join(root, "package-lock.json"), "utf8"))
    const refused = Object.entries(lock.packages as Record<string, { engines?: { node?: string } }>)
      .filter(([, entry]) => entry.engines?.node !== undefined && !satisfies("20.19.0", entry.engines.node))
      .map(([path, entry]) => `${path} requires node ${entry.engines?.node}`)
    expect(refused).toEqual([])
  })
})

describe("install as README says, into a fresh project", () => {
  const fresh = join(TMP, "fresh")
  const readme = readFileSync(join(root, "README.md"), "utf8")
  // Read in the hooks and tests, so that a README without the section fails them, not the whole file.
  const commands = () => installCommands(readme)
  const version = (name: string): string =>
    JSON.parse(readFileSync(join(fresh, "node_modules", name, "package.json"), "utf8")).version
  const shipped = (path: string) => readFileSync(join(fresh, "node_modules", "wakuwaku", path), "utf8")
  /** README's tsconfig.json, the one ```json block of its Install section. */
  const tsconfig = () => fencedBlocks(section(readme, "Install"), "json")
  const scope = Effect.runSync(Scope.make())
  const compiled: { pinned?: Outcome; seven?: Outcome } = {}

  beforeAll(async () => {
    // README to the letter: an empty directory, its commands, its tsconfig.json, README's example as
    // login.ts (on this test's own server), `npx tsc`. Beside it, in the same program (one compile of the
    // libraries' declarations, not two): docs/testing.md's test and the HttpApi example, as the installed
    // package carries them.
    await installAsWritten(fresh, commands(), tarball)
    const server = await Effect.runPromise(Scope.extend(RedisServer.make(), scope))
    writeFileSync(join(fresh, "tsconfig.json"), tsconfig()[0]!)
    const [example] = fencedBlocks(shipped("README.md"), "ts")
    const [test] = fencedBlocks(shipped("docs/testing.md"), "ts")
    writeFileSync(join(fresh, "login.ts"), example!.replaceAll("redis://127.0.0.1:6379", server.url))
    writeFileSync(join(fresh, "limiter.test.ts"), test!)
    writeFileSync(join(fresh, "httpapi.ts"), shipped("docs/examples/httpapi.ts"))
    compiled.pinned = await exec("npx", ["tsc"], { cwd: fresh, env: npmEnv() })
    // TypeScript 7 beside the pinned one, under a name of its own (after `npx tsc`: its bin is tsc too).
    await npm(["i", "-D", "typescript-7@npm:typescript@7"], fresh)
    compiled.seven = await tsc(fresh, "typescript-7", "--noEmit")
  }, 420_000)

  afterAll(() => Effect.runPromise(Scope.close(scope, Exit.void)))

  it("README's Install section: the Effect 3 line, every command an npm one, every peer at its range", () => {
    const install = section(readme, "Install")
    expect(install).toContain("wakuwaku 0.1 is built on **Effect 3**: it supports effect 3.22")
    expect(install).toContain("Effect 4 is not supported yet.")
    expect(commands().map((words) => words.slice(0, 2).join(" "))).toEqual([
      "npm i",
      "npm i",
      "npm i",
      "npm i",
      "npm i",
      "npm pkg",
      "npm i"
    ])
    const specs = commands().flat()
    expect(specs).toContain("wakuwaku")
    expect(specs).toContain("-D")
    expect(specs).toContain("type=module")
    expect(specs).toContain(`typescript@${pkg.devDependencies.typescript}`)
    for (const [name, range] of Object.entries(pkg.peerDependencies as Record<string, string>)) {
      expect(specs, name).toContain(`${name}@${range}`)
    }
    // Say where npm gets the packages from when this test installs them.
    expect(install.replace(/\s+/g, " ")).toContain("from the npm registry, through npm's cache (`prefer-offline`)")
  })

  it("README's tsconfig.json: strict, exactOptionalPropertyTypes, noUncheckedIndexedAccess, skipLibCheck false, NodeNext", () => {
    expect(tsconfig()).toHaveLength(1)
    expect(JSON.parse(tsconfig()[0]!)).toEqual({
      compilerOptions: {
        target: "ES2022",
        lib: ["ES2022"],
        module: "NodeNext",
        moduleResolution: "NodeNext",
        strict: true,
        exactOptionalPropertyTypes: true,
        noUncheckedIndexedAccess: true,
        skipLibCheck: false
      }
    })
  })

  it("the commands make an ESM project and install the tarball and the Effect 3 line, each package in its range", () => {
    expect(JSON.parse(readFileSync(join(fresh, "package.json"), "utf8")).type).toBe("module")
    expect(version("wakuwaku")).toBe(pkg.version)
    expect(version("effect")).toMatch(/^3\.22\./)
    const ranged = commands().flat().map((word) => /^(@?[^@]+)@(.+)$/.exec(word)).filter((found) => found !== null)
    expect(ranged.map(([, name]) => name)).toEqual([
      "effect",
      "@types/node",
      "@effect/platform",
      "@effect/platform-node",
      "@effect/experimental",
      "vitest",
      "@effect/vitest",
      "typescript"
    ])
    for (const [, name, range] of ranged) {
      expect(satisfies(version(name!), range!), `${name}@${version(name!)} in ${range}`).toBe(true)
    }
  })

  it("README to the letter: `npx tsc`, the TypeScript it installs, compiles README's example, docs/testing.md's test and the HttpApi example", () => {
    expect(satisfies(version("typescript"), pkg.devDependencies.typescript)).toBe(true)
    expect(compiled.pinned).toEqual({ code: 0, stdout: "", stderr: "" })
    expect(readme).toContain("`npx tsc` compiles it and `node login.js` runs it")
  })

  it("TypeScript 7 compiles them with one clash, vitest 3.2's with @types/chai, which README names: none in login.ts or httpapi.ts", () => {
    expect(version("typescript-7")).toMatch(/^7\./)
    const lines = (compiled.seven?.stdout.trim().split("\n") ?? []).sort()
    expect(lines).toHaveLength(2)
    expect(lines[0]).toMatch(
      /^node_modules\/@types\/chai\/index\.d\.ts\(\d+,\d+\): error TS2300: Duplicate identifier 'containSubset'\.$/
    )
    expect(lines[1]).toMatch(
      /^node_modules\/vitest\/dist\/chunks\/global\.d\.[\w-]+\.d\.ts\(\d+,\d+\): error TS2300: Duplicate identifier 'containSubset'\.$/
    )
    expect(section(readme, "Install")).toContain("`Duplicate identifier 'containSubset'`")
  })

  it("README's example runs and prints what its comment says: a login allowed, 1 000 rows taken", async () => {
    const promised = /^\/\/ The first run .* prints (.*)\.$/m.exec(fencedBlocks(readme, "ts")[0] ?? "")?.[1]
    expect(promised).toBe("[{\"proceed\":true},{\"remaining\":9000,\"_tag\":\"Allowed\"}]")
    const outcome = await exec(process.execPath, ["login.js"], { cwd: fresh })
    expect(outcome).toEqual({ code: 0, stdout: `${promised}\n`, stderr: "" })
  }, 60_000)

  it("docs/examples/httpapi.ts runs from the installed package: its API, its client, its 429", async () => {
    const { REDIS_URL: _, ...env } = process.env
    const outcome = await exec(process.execPath, ["httpapi.js"], { cwd: fresh, env })
    expect(outcome.code).toBe(0)
    const lines = outcome.stdout.split("\n")
    expect(lines[0]).toBe("store: memory (no REDIS_URL): shared by nothing but this process")
    // The wait left depends on how long the 20 logins took: the first 20 pass and the 21st is refused.
    expect(lines[20]).toMatch(/^login 20: welcome /)
    expect(lines[21]).toMatch(/^login 21: RateLimitExceeded by login, retry after \d s /)
    expect(lines.slice(-2)).toEqual(["a wrong token: Unauthorized", ""])
  }, 60_000)

  it("docs/testing.md's test passes under the installed vitest and @effect/vitest", async () => {
    const outcome = await exec(process.execPath, [
      join(fresh, "node_modules", "vitest", "vitest.mjs"),
      "run",
      "limiter.test.ts"
    ], { cwd: fresh, env: { ...npmEnv(), NO_COLOR: "1" } })
    expect(outcome.code, outcome.stdout + outcome.stderr).toBe(0)
    expect(outcome.stdout).toMatch(/Tests {2}1 passed \(1\)/)
  }, 60_000)
})
