/**
 * How tests start a TypeScript program as a child process: `node <bundle>`, where the bundle is the
 * script with everything it imports (`wakuwaku` and `wakuwaku/*` through tsconfig.json's paths, relative
 * imports, and the packages: effect, ioredis, undici, @effect/platform…) compiled into one ES module by
 * esbuild. A child then starts without a TypeScript loader (`node --import tsx` transforms every module it
 * loads at each start, which doubled the CPU of the processes tests here), and without loading hundreds of
 * package modules one by one: a worker of the processes tests starts on 0.5 s of CPU bundled whole, 1.4 s
 * with its packages left to node_modules (measured on the 2-core machine, 2026-12-02). The tests start
 * over a hundred children. Left out: what cannot be bundled or need not be ({@link EXTERNAL}).
 *
 * Bundles go to `.tmp/bundles/` (git-ignored), named by the script's path and its bundle's hash, written
 * once per content by whichever test asks first (a write to a temporary name, then a rename). Being two
 * folders deep, as test/support/ is, a bundled `new URL("../..", import.meta.url)` still names the root.
 */
import { buildSync } from "esbuild"
import { createHash } from "node:crypto"
import { existsSync, mkdirSync, renameSync, writeFileSync } from "node:fs"
import { join, relative, resolve } from "node:path"
import { fileURLToPath } from "node:url"

const ROOT = fileURLToPath(new URL("../..", import.meta.url))
const OUT = join(ROOT, ".tmp", "bundles")

const made = new Map<string, string>()

/**
 * Packages loaded from node_modules: a compiler (typescript, large and loaded by one child), the linter
 * (which loads its config and plugins itself, and must share that child's typescript) and tools with native
 * binaries or their own loaders. Every other package is bundled.
 */
const EXTERNAL = [
  "typescript",
  "esbuild",
  "tsx",
  "vitest",
  "@vitest/*",
  "eslint",
  "@eslint/*",
  "typescript-eslint",
  "@typescript-eslint/*",
  "@effect/eslint-plugin"
]

/** Bundled CommonJS (ioredis, …) calls `require` for Node's own modules: give the ES module one. */
const REQUIRE =
  `import { createRequire as __wakuwakuRequire } from "node:module";const require = __wakuwakuRequire(import.meta.url);`

const bundle = (script: string): string => {
  const { outputFiles } = buildSync({
    entryPoints: [join(ROOT, script)],
    bundle: true,
    platform: "node",
    format: "esm",
    target: "node20",
    external: EXTERNAL,
    banner: { js: REQUIRE },
    tsconfig: join(ROOT, "tsconfig.json"),
    write: false,
    logLevel: "silent"
  })
  const code = outputFiles[0]!.contents
  const hash = createHash("sha1").update(code).digest("hex").slice(0, 12)
  const path = join(OUT, `${script.replace(/[\\/]/g, "_").replace(/\.ts$/, "")}-${hash}.mjs`)
  if (!existsSync(path)) {
    mkdirSync(OUT, { recursive: true })
    const partial = `${path}.${process.pid}.part`
    writeFileSync(partial, code)
    renameSync(partial, path)
  }
  return path
}

/**
 * The arguments that make `node` run `script` (absolute, or from the project's root, such as "src/bin.ts"):
 * the bundle's path, made on first use in this process.
 */
export const nodeArgs = (script: string): Array<string> => {
  const key = relative(ROOT, resolve(ROOT, script))
  let path = made.get(key)
  if (path === undefined) made.set(key, path = bundle(key))
  return [path]
}
