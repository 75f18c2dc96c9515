/**
 * The core never loads @effect/platform: the package's sources are compiled module by module, as tsc
 * builds dist (esbuild's transpile: one .js per .ts, imports as written; which modules load is what is
 * tested here, not their types), into a scratch directory with this package.json, so `wakuwaku` and
 * `wakuwaku/http` resolve through its exports map; and plain Node
 * imports it under a resolve hook that refuses every module of @effect/platform or
 * @effect/platform-node. `wakuwaku/http` under the same hook fails, which shows the hook works.
 */
import { buildSync } from "esbuild"
import { execFile } from "node:child_process"
import { randomBytes } from "node:crypto"
import { copyFileSync, mkdirSync, readdirSync, readFileSync, rmdirSync, rmSync } from "node:fs"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import { promisify } from "node:util"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { REFUSE_PLATFORM } from "../support/proxy.js"

const run = promisify(execFile)
const ROOT = fileURLToPath(new URL("../..", import.meta.url))
// Under .tmp/ (git-ignored, outside tsconfig's include), so node resolves effect from the project's node_modules.
const TMP_ROOT = join(ROOT, ".tmp", "http-core")
const TMP = join(TMP_ROOT, `run-${process.pid}-${randomBytes(4).toString("hex")}`)

const node = (code: string, hooked: boolean) =>
  run(
    process.execPath,
    [
      ...(hooked ? ["--import", `data:text/javascript,${encodeURIComponent(REFUSE_PLATFORM)}`] : []),
      "--input-type=module",
      "-e",
      code
    ],
    { cwd: TMP }
  )

const keysOf = (specifier: string) =>
  `import(${JSON.stringify(specifier)}).then((m) => console.log(JSON.stringify(Object.keys(m))))`

describe("the core does not load @effect/platform", () => {
  beforeAll(() => {
    mkdirSync(TMP, { recursive: true })
    copyFileSync(join(ROOT, "package.json"), join(TMP, "package.json"))
    const src = join(ROOT, "src")
    buildSync({
      entryPoints: readdirSync(src, { recursive: true, encoding: "utf8" })
        .filter((file) => file.endsWith(".ts") && !file.endsWith(".d.ts"))
        .map((file) => join(src, file)),
      outbase: src,
      outdir: join(TMP, "dist"),
      bundle: false,
      platform: "node",
      format: "esm",
      target: "node20",
      logLevel: "silent"
    })
  })

  afterAll(() => {
    rmSync(TMP, { recursive: true, force: true })
    try {
      rmdirSync(TMP_ROOT)
    } catch {
      // another run is using it
    }
  })

  it("package.json exports wakuwaku/http with its types", () => {
    const pkg = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8"))
    expect(pkg.exports["./http"]).toEqual({ types: "./dist/http.d.ts", default: "./dist/http.js" })
  })

  it("wakuwaku imports with every @effect/platform module refused", async () => {
    const { stdout } = await node(keysOf("wakuwaku"), true)
    expect(JSON.parse(stdout)).toContain("TokenBucket")
  })

  it("wakuwaku/http under the same hook is refused: the hook works", async () => {
    await expect(node(keysOf("wakuwaku/http"), true)).rejects.toThrow(/refused to load .*@effect[\\/]platform/)
  })

  it("wakuwaku/http exports ClientIp and RateLimit", async () => {
    const { stdout } = await node(keysOf("wakuwaku/http"), false)
    expect(JSON.parse(stdout)).toEqual(["ClientIp", "RateLimit"])
  })
})
