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
 *
 * The whole suite bundles {@link SCRIPTS} before its files start ({@link prebuild}, from
 * support/globalSetup.ts, while the test cluster starts and the cores have little else to do): about 15 s of
 * esbuild's CPU that test workers spent in `buildSync` between their tests. They are one build with an entry
 * point per script and a whole bundle each: esbuild parses what they share once (2.4 s wall against 6.7 s for a
 * build each). (Their shared modules split into chunks took less still, but a child then loads the union of what
 * the scripts use: a proxy started on 0.17 s more CPU, over a hundred children.)
 */
import { build, buildSync } from "esbuild"
import { createHash } from "node:crypto"
import { existsSync, mkdirSync, renameSync, writeFileSync } from "node:fs"
import { readdir, rm } from "node:fs/promises"
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

const OPTIONS = {
  bundle: true,
  platform: "node",
  format: "esm",
  target: "node20",
  external: EXTERNAL,
  banner: { js: REQUIRE },
  tsconfig: join(ROOT, "tsconfig.json"),
  logLevel: "silent"
} as const

/** The scripts the tests start as child processes, from the project's root. */
const SCRIPTS = [
  "src/bin.ts",
  "docs/examples/httpapi.ts",
  "docs/examples/login.ts",
  ...[
    "consumer",
    "counter",
    "groupHammer",
    "hammer",
    "meterer",
    "orphan",
    "pipeReceiver",
    "semaphoreWorker",
    "slidingHammer",
    "throttleGivingUp",
    "throttler",
    "typecheck"
  ].map((name) => `test/support/${name}.ts`)
]

const nameOf = (script: string) => script.replace(/[\\/]/g, "_").replace(/\.ts$/, "")

/**
 * Bundles each of {@link SCRIPTS} to `<name>-<run>.mjs`, in one build. Once
 * `WAKUWAKU_PREBUILT` names the run (globalSetup sets it; the workers inherit it), `nodeArgs` takes them as
 * they are; the teardown removes them ({@link unbuild}).
 */
export const prebuild = async (run: string): Promise<void> => {
  mkdirSync(OUT, { recursive: true })
  // One build of every entry point: esbuild parses the modules they share once (a build each: 2.8× the time).
  await build({
    ...OPTIONS,
    entryPoints: Object.fromEntries(SCRIPTS.map((script) => [`${nameOf(script)}-${run}`, join(ROOT, script)])),
    outdir: OUT,
    outExtension: { ".js": ".mjs" }
  })
}

/** Removes the bundles of {@link prebuild}'s run. */
export const unbuild = async (run: string): Promise<void> => {
  const names = await readdir(OUT).catch(() => [])
  const ours = names.filter((name) => name.endsWith(`-${run}.mjs`))
  await Promise.all(ours.map((name) => rm(join(OUT, name))))
}

const bundle = (script: string): string => {
  const run = process.env["WAKUWAKU_PREBUILT"]
  if (run !== undefined && SCRIPTS.includes(script)) return join(OUT, `${nameOf(script)}-${run}.mjs`)
  const { outputFiles } = buildSync({ ...OPTIONS, entryPoints: [join(ROOT, script)], write: false })
  const code = outputFiles[0]!.contents
  const hash = createHash("sha1").update(code).digest("hex").slice(0, 12)
  const path = join(OUT, `${nameOf(script)}-${hash}.mjs`)
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
