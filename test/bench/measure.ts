/** What the benchmarks share: CPU readings from /proc, percentiles and medians, a plain client. */
import { Effect } from "effect"
import { Redis as IORedis } from "ioredis"
import { execFileSync } from "node:child_process"
import { readdirSync, readFileSync } from "node:fs"

/** Clock ticks per second (`getconf CLK_TCK`), 100 if unknown. */
export const clockTicks = (): number => {
  try {
    const n = Number(execFileSync("getconf", ["CLK_TCK"], { encoding: "utf8" }).trim())
    return Number.isFinite(n) && n > 0 ? n : 100
  } catch {
    return 100
  }
}

/** utime + stime of a process, in clock ticks (fields 14 and 15 of /proc/<pid>/stat). */
export const processTicks = (pid: number): number => {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8")
  // Field 2 (comm) is in parentheses and may contain spaces: count from after the last ')'.
  const rest = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
  // rest[0] is field 3, so field 14 is rest[11] and field 15 is rest[12].
  return Number(rest[11]) + Number(rest[12])
}

/** Busy clock ticks of `pid` and every process below it (nginx's workers, say), from /proc. */
export const treeTicks = (pid: number): number => {
  let sum = 0
  try {
    sum = processTicks(pid)
    for (const task of readdirSync(`/proc/${pid}/task`)) {
      const children = readFileSync(`/proc/${pid}/task/${task}/children`, "utf8").trim()
      for (const child of children === "" ? [] : children.split(" ")) sum += treeTicks(Number(child))
    }
  } catch {
    // The process (or a child) exited meanwhile: what was read is what it had.
  }
  return sum
}

/**
 * Busy clock ticks of the whole machine that processes account for: user, nice, system, and steal (what
 * the host took). Not irq and softirq: with IRQ time accounting they are charged to no process, and
 * loopback traffic alone (wrk at 60k req/s) makes softirq a fifth of the machine.
 */
export const machineTicks = (): number => {
  const fields = (readFileSync("/proc/stat", "utf8").split("\n")[0] ?? "").trim().split(/\s+/).map(Number)
  return [1, 2, 3, 8].reduce((sum, i) => sum + (fields[i] ?? 0), 0)
}

/** The q-quantile of sorted milliseconds, in µs. */
export const percentile = (sortedMs: Float64Array, q: number): number =>
  (sortedMs[Math.min(sortedMs.length - 1, Math.max(0, Math.ceil(q * sortedMs.length) - 1))] ?? Number.NaN) * 1000

export const median = (xs: ReadonlyArray<number>): number => {
  const s = [...xs].sort((a, b) => a - b)
  const mid = Math.floor(s.length / 2)
  return s.length % 2 === 1 ? s[mid] ?? Number.NaN : ((s[mid - 1] ?? Number.NaN) + (s[mid] ?? Number.NaN)) / 2
}

/** A plain ioredis client (default options, no auto-pipelining), connected for the scope. */
export const plainClient = (url: string) =>
  Effect.acquireRelease(
    Effect.promise(async () => {
      const client = new IORedis(url, { lazyConnect: true, enableAutoPipelining: false })
      await client.connect()
      return client
    }),
    (client) => Effect.promise(() => client.quit().catch(() => "OK"))
  )

/** A column cell: the median over rounds, then min–max; `thousands` rounds and groups digits. */
export const stat = (xs: ReadonlyArray<number>, digits = 0, thousands = false): string => {
  const fmt = (x: number) => thousands ? Math.round(x).toLocaleString("en-US") : x.toFixed(digits)
  return `${fmt(median(xs))} (${fmt(Math.min(...xs))}–${fmt(Math.max(...xs))})`
}

/** The line that tells whether the machine was quiet while a benchmark measured. */
export const otherCpuLine = (otherSeconds: number): string =>
  `CPU used by other processes during the measurement: ${Math.max(0, otherSeconds).toFixed(1)} s ` +
  `(anything above ~0.5 s means the figures are disturbed)`
