/**
 * `npm run bench [-- --quick]`: runs the benchmark parts one after another, each in a process of its
 * own (tsx with test/bench/tsconfig.json, so `wakuwaku` is the built package), passing every flag
 * given to this runner to each part. (`npm run bench -- --quick` appends `--quick` only to the last
 * command of an `&&` chain, hence a runner.) A part that fails does not stop the others; the runner
 * then exits with code 1.
 *
 * `--quick` is for development (under 2 minutes); the full run, for the report, takes under 15.
 */
import { spawnSync } from "node:child_process"
import { performance } from "node:perf_hooks"
import { fileURLToPath } from "node:url"

const PARTS = [
  "tokenBucket.ts",
  "memory.ts",
  "limits.ts",
  "lock.ts",
  "semaphore.ts",
  "pipe.ts",
  "proxy.ts",
  "proxyDelay.ts",
  "routes.ts",
  "httpApi.ts",
  "telemetry.ts"
] as const
const ROOT = fileURLToPath(new URL("../../", import.meta.url))
const flags = process.argv.slice(2)

const started = performance.now()
const failed: Array<string> = []
for (const part of PARTS) {
  console.log(`\n=== test/bench/${part} ${flags.join(" ")}\n`)
  const partStart = performance.now()
  const result = spawnSync(
    process.execPath,
    ["--import", "tsx", `test/bench/${part}`, ...flags],
    { cwd: ROOT, stdio: "inherit", env: { ...process.env, TSX_TSCONFIG_PATH: "test/bench/tsconfig.json" } }
  )
  const seconds = ((performance.now() - partStart) / 1000).toFixed(0)
  if (result.status !== 0) failed.push(part)
  console.log(
    `\n=== test/bench/${part}: ${
      result.status === 0 ? "done" : `FAILED (${result.status ?? result.signal})`
    } in ${seconds} s`
  )
}
const minutes = Math.floor((performance.now() - started) / 60_000)
const seconds = Math.round(((performance.now() - started) % 60_000) / 1000)
console.log(
  `\nbench: ${PARTS.length} parts in ${minutes} min ${seconds} s${
    failed.length > 0 ? `; failed: ${failed.join(", ")}` : ""
  }`
)
if (failed.length > 0) process.exitCode = 1
