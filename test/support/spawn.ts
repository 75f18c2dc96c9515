/**
 * How tests start a TypeScript program as a child process: `node <bundle>`, where the bundle is the
 * script with the sources it imports (`wakuwaku` and `wakuwaku/*` through tsconfig.json's paths, and
 * relative imports) compiled into one ES module by esbuild, packages left to node_modules. A child then
 * starts without a TypeScript loader: `node --import tsx` transforms every module it loads at each start,
 * which doubled the CPU of the processes tests here.
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

const bundle = (script: string): string => {
  const { outputFiles } = buildSync({
    entryPoints: [join(ROOT, script)],
    bundle: true,
    platform: "node",
    format: "esm",
    target: "node20",
    packages: "external",
    tsconfig: join(ROOT, "tsconfig.json"),
    write: false,
    sourcemap: "inline",
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
