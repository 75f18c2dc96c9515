/**
 * `npm run bench` (part of its own): what deciding several limiters as one (`Limits.acquire`) costs in this
 * process, beside one limiter's `acquire`, on the embedded store (`Redis.layerMemory()`: the library's own CPU
 * only, no socket; on Redis the same code runs, and the server's script is the rest).
 *
 * Rows, each a loop of `acquire`s of cost 1 on one name, every one allowed, one fiber, rounds alternated:
 *
 * - `TokenBucket.acquire`: one limiter (the reference);
 * - `Limits.acquire([A])`, `Limits.acquire([A, B])`, `Limits.acquire([A, Limits.shadow(S)])`: the list written in
 *   the call, a new array each time, as most code writes it;
 * - `Limits.acquire(LIST)`, LIST = `[A, Limits.shadow(S)]` a module-level value: the list kept, as a proxy route
 *   keeps its limits.
 *
 * Printed per row: Node CPU µs per call (`process.cpuUsage`, user + system), median over rounds with min–max, and
 * its ratio to the reference in the same rounds. 50 000 calls per round, 2 warm-up rounds, 7 timed (`--quick`:
 * 10 000, 1, 3).
 *
 * Run: `npm run build && npx tsx --tsconfig test/bench/tsconfig.json test/bench/limits.ts [--quick]`.
 */
import { Effect, ManagedRuntime } from "effect"
import { Limits, Rate, Redis, TokenBucket } from "wakuwaku"
import { clockTicks, machineTicks, median, otherCpuLine, stat } from "./measure.js"

const QUICK = process.argv.includes("--quick")
const CALLS = QUICK ? 10_000 : 50_000
const WARMUP = QUICK ? 1 : 2
const ROUNDS = QUICK ? 3 : 7

// Buckets that allow everything: every call is the allowed path, the one a service takes most.
const A = TokenBucket.make<string>("bench-a", 1e9, Rate.make(1e9, "1 second"))
const B = TokenBucket.make<string>("bench-b", 1e9, Rate.make(1e9, "1 second"))
const S = TokenBucket.make<string>("bench-s", 1e9, Rate.make(1e9, "1 second"))
const LIST = [A, Limits.shadow(S)] as const

const ROWS: ReadonlyArray<readonly [string, () => Effect.Effect<unknown, unknown, Redis.ReadWrite>]> = [
  ["`TokenBucket.acquire` (one limiter)", () => A.acquire("user", 1)],
  ["`Limits.acquire([A])`", () => Limits.acquire([A], "user")],
  ["`Limits.acquire([A, B])`", () => Limits.acquire([A, B], "user")],
  ["`Limits.acquire([A, Limits.shadow(S)])`", () => Limits.acquire([A, Limits.shadow(S)], "user")],
  ["`Limits.acquire(LIST)`, LIST = `[A, Limits.shadow(S)]` kept", () => Limits.acquire(LIST, "user")]
]

const runtime = ManagedRuntime.make(Redis.layerMemory())

/** CPU µs per call of one round of `row`. */
const round = async (row: () => Effect.Effect<unknown, unknown, Redis.ReadWrite>): Promise<number> => {
  const before = process.cpuUsage()
  await runtime.runPromise(Effect.gen(function*() {
    for (let i = 0; i < CALLS; i++) yield* row()
  }))
  const used = process.cpuUsage(before)
  return (used.user + used.system) / CALLS
}

const perCall = ROWS.map((): Array<number> => [])
const ticksBefore = machineTicks()
const ownBefore = process.cpuUsage()
for (let r = 0; r < WARMUP + ROUNDS; r++) {
  for (const [i, [, row]] of ROWS.entries()) {
    const us = await round(row)
    if (r >= WARMUP) perCall[i]!.push(us)
  }
}
const own = process.cpuUsage(ownBefore)
const otherSeconds = (machineTicks() - ticksBefore) / clockTicks() - (own.user + own.system) / 1e6
await runtime.dispose()

console.log(
  `node ${process.version}; embedded store; ${CALLS.toLocaleString("en-US")} calls per round, ${WARMUP} warm-up, ` +
    `${ROUNDS} timed, rows alternated\n`
)
console.log("| call | CPU µs per call | × one limiter |")
console.log("|---|---:|---:|")
const reference = perCall[0]!
for (const [i, [label]] of ROWS.entries()) {
  const ratios = perCall[i]!.map((us, r) => us / reference[r]!)
  console.log(`| ${label} | ${stat(perCall[i]!, 2)} | ${median(ratios).toFixed(2)} |`)
}
console.log(`\n${otherCpuLine(otherSeconds)}`)
