/**
 * The core never loads @effect/platform: the package's sources are compiled module by module, as tsc
 * builds dist (support/transpile.ts), so `wakuwaku` and `wakuwaku/http` resolve through the exports map;
 * and plain Node imports it under a resolve hook that refuses every module of @effect/platform or
 * @effect/platform-node. `wakuwaku/http` under the same hook fails, which shows the hook works.
 */
import { execFile } from "node:child_process"
import { readFileSync } from "node:fs"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import { promisify } from "node:util"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { REFUSE_PLATFORM } from "../support/proxy.js"
import { transpile } from "../support/transpile.js"

const run = promisify(execFile)
const ROOT = fileURLToPath(new URL("../..", import.meta.url))
let scratch: ReturnType<typeof transpile> | undefined

const node = (code: string, hooked: boolean) =>
  run(
    process.execPath,
    [
      ...(hooked ? ["--import", `data:text/javascript,${encodeURIComponent(REFUSE_PLATFORM)}`] : []),
      "--input-type=module",
      "-e",
      code
    ],
    { cwd: scratch!.dir }
  )

const keysOf = (specifier: string) =>
  `import(${JSON.stringify(specifier)}).then((m) => console.log(JSON.stringify(Object.keys(m))))`

describe("the core does not load @effect/platform", () => {
  beforeAll(() => {
    scratch = transpile()
  })

  afterAll(() => scratch?.remove())

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
