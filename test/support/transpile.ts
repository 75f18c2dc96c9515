/**
 * The package's sources compiled module by module, as tsc builds dist (esbuild's transpile: one .js per
 * .ts, imports as written, no types), into a scratch directory of .tmp/ (git-ignored, outside tsconfig's
 * include) with this package.json beside its dist/: plain Node resolves `wakuwaku` and `wakuwaku/http`
 * there through the exports map, and the packages from the project's node_modules. For tests of which
 * modules a program loads, which a bundle would hide; a start costs no TypeScript loader (`--import tsx`
 * took about 2.5 s of CPU per process here).
 */
import { buildSync } from "esbuild"
import { randomBytes } from "node:crypto"
import { copyFileSync, mkdirSync, readdirSync, rmdirSync, rmSync } from "node:fs"
import { join } from "node:path"
import { fileURLToPath } from "node:url"

const ROOT = fileURLToPath(new URL("../..", import.meta.url))
const TMP_ROOT = join(ROOT, ".tmp", "transpiled")

/** Compiles src/ into a new scratch directory: its path, and how to remove it. */
export const transpile = (): { readonly dir: string; readonly remove: () => void } => {
  const dir = join(TMP_ROOT, `run-${process.pid}-${randomBytes(4).toString("hex")}`)
  mkdirSync(dir, { recursive: true })
  copyFileSync(join(ROOT, "package.json"), join(dir, "package.json"))
  const src = join(ROOT, "src")
  buildSync({
    entryPoints: readdirSync(src, { recursive: true, encoding: "utf8" })
      .filter((file) => file.endsWith(".ts") && !file.endsWith(".d.ts"))
      .map((file) => join(src, file)),
    outbase: src,
    outdir: join(dir, "dist"),
    bundle: false,
    platform: "node",
    format: "esm",
    target: "node20",
    logLevel: "silent"
  })
  const remove = () => {
    rmSync(dir, { recursive: true, force: true })
    try {
      rmdirSync(TMP_ROOT)
    } catch {
      // another file is using it
    }
  }
  return { dir, remove }
}
