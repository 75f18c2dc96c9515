/**
 * Throttling across OS processes: 4 processes each start 50 `TokenBucket.throttle` calls at
 * once on one name of a bucket of 10 refilled 50 a second (one token every 20 ms), and record for each
 * call when it was made, the wait its reservation gave, and when it started.
 *
 * - The bound: over any interval between two starts, the starts are at most capacity + rate × T. What
 *   Redis admits keeps it exactly (the tests under TestClock show the schedule to the millisecond); a
 *   process starts a call after that, late by the reply's way back and by its own scheduling, which on
 *   a busy machine reaches tens of milliseconds. So each interval is widened by the most its calls can
 *   have been late (start − made − wait, which also counts the way there), plus 2 ms for a Node timer
 *   that fires early.
 * - An even spread, no herd: the starts after the burst come one token's time apart, the median gap
 *   between consecutive starts within a quarter of 20 ms (callers that all woke at the end of one wait
 *   would start in clumps: gaps of 0 and long gaps), and no caller was retried or refused: exactly one
 *   EVALSHA per permit.
 * - One Redis call per permit: on a server of this file's own, `INFO commandstats` after the run counts
 *   exactly 200 EVALSHA and the commands inside them, and nothing else but the harness's.
 */
import { Effect, Exit, Scope } from "effect"
import { Redis as IORedis } from "ioredis"
import { fileURLToPath } from "node:url"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { RESERVE } from "../src/internal/tokenBucket.js"
import * as RedisServer from "../src/RedisServer.js"
import { runProcesses } from "./support/processes.js"

const PROCESSES = 4
const CALLS = 50
const CAPACITY = 10
const PER_SECOND = 50
const SLACK_MS = 2
const throttler = fileURLToPath(new URL("./support/throttler.ts", import.meta.url))

const scope = Effect.runSync(Scope.make())
let url = ""
let raw: IORedis
beforeAll(async () => {
  url = (await Effect.runPromise(Scope.extend(RedisServer.make(), scope))).url
  raw = new IORedis(url)
})
afterAll(async () => {
  await raw?.quit()
  await Effect.runPromise(Scope.close(scope, Exit.void))
})

/** Calls per command since the last CONFIG RESETSTAT, from INFO commandstats. */
const commandCalls = async (): Promise<Record<string, { calls: number; failed: number }>> => {
  const info = await raw.info("commandstats")
  return Object.fromEntries(
    [...info.matchAll(/^cmdstat_([^:]+):calls=(\d+),.*?failed_calls=(\d+)/gm)].map((m) => [
      m[1]!,
      { calls: Number(m[2]), failed: Number(m[3]) }
    ])
  )
}

interface Call {
  readonly sent: number
  readonly wait: number
  readonly start: number
}

const median = (values: ReadonlyArray<number>) => percentile(values, 0.5)

const percentile = (values: ReadonlyArray<number>, p: number) => {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.ceil(p * sorted.length) - 1)]!
}

describe(`TokenBucket.throttle across ${PROCESSES} OS processes`, () => {
  it(
    `${PROCESSES} × ${CALLS} calls on one name, capacity ${CAPACITY} at ${PER_SECOND}/s: the bound in every window, ` +
      "an even spread, one EVALSHA per permit",
    async () => {
      const { results } = await runProcesses(
        raw,
        throttler,
        PROCESSES,
        [url, "throttled", "partner", CAPACITY, PER_SECOND, 1000, CALLS, 10_000],
        async () => {
          // Loaded beforehand, so that no first call meets NOSCRIPT; counted from here.
          await raw.script("LOAD", RESERVE.lua)
          await raw.config("RESETSTAT")
        }
      )
      const stats = await commandCalls()
      const calls = results.flatMap((line) => (JSON.parse(line) as { calls: Array<Call> }).calls)
        .sort((a, b) => a.start - b.start)
      expect(calls).toHaveLength(PROCESSES * CALLS)
      // None waited longer than its maxWait (10 s).
      expect(Math.max(...calls.map((call) => call.wait))).toBeLessThanOrEqual(10_000)
      const starts = calls.map((call) => call.start)
      // How late each call may have started after the server's due time (grant + wait): at most the
      // time from the call to its start, less the wait.
      const late = calls.map((call) => call.start - call.sent - call.wait)

      // The bound, over every interval [starts[i], starts[j]], widened by the latest of its calls.
      const rate = PER_SECOND / 1000
      let worst = -Infinity
      for (let i = 0; i < starts.length; i++) {
        let latest = 0
        for (let j = i; j < starts.length; j++) {
          latest = Math.max(latest, late[j]!)
          worst = Math.max(worst, j - i + 1 - (CAPACITY + rate * (starts[j]! - starts[i]! + latest + SLACK_MS)))
        }
      }
      expect(worst).toBeLessThanOrEqual(0)

      // The spread: the steady starts come one token's time apart (the median gap), not in bursts.
      const step = 1 / rate
      const steady = starts.slice(CAPACITY)
      const gaps = steady.slice(1).map((start, i) => start - steady[i]!)
      const gap = median(gaps)
      expect(gap).toBeGreaterThanOrEqual(0.75 * step)
      expect(gap).toBeLessThanOrEqual(1.25 * step)
      console.info(
        `throttle: ${starts.length} starts over ${(starts.at(-1)! - starts[0]!).toFixed(1)} ms (due over ${
          (starts.length - CAPACITY) * step
        } ms); worst window ${worst.toFixed(2)} against the bound; late p50 ${median(late).toFixed(1)} ms, max ${
          Math.max(...late).toFixed(1)
        } ms; gap between steady starts p10 ${percentile(gaps, 0.1).toFixed(1)}, p50 ${gap.toFixed(1)}, p90 ${
          percentile(gaps, 0.9).toFixed(1)
        } ms; ${stats["evalsha"]?.calls} EVALSHA`
      )

      // One call per permit: 200 EVALSHA, and inside each the script's TIME, GET and SET (commandstats counts
      // those too). Besides: this file's CONFIG RESETSTAT and TIME, and each process's QUIT as it exits.
      const { quit: _, ...counted } = stats
      expect(counted).toEqual({
        evalsha: { calls: PROCESSES * CALLS, failed: 0 },
        time: { calls: PROCESSES * CALLS + 1, failed: 0 },
        get: { calls: PROCESSES * CALLS, failed: 0 },
        set: { calls: PROCESSES * CALLS, failed: 0 },
        "config|resetstat": { calls: 1, failed: 0 }
      })
    },
    60_000
  )
})
