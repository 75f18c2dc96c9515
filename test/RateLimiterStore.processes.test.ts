/**
 * RateLimiterStore across OS processes: several processes call `RateLimiter.consume` on one key at once.
 * Each count (each token) is taken by exactly one call, whichever process makes it, and exactly `limit`
 * calls get through a `fail` limit. One run of the processes plays every scenario, each on a key of its own.
 */
import { Redis as IORedis } from "ioredis"
import { fileURLToPath } from "node:url"
import { afterAll, describe, expect, it } from "vitest"
import { runProcesses } from "./support/processes.js"
import { freshNamespace, redisUrl } from "./support/redis.js"

const PROCESSES = 4
const CALLS = 100
const consumer = fileURLToPath(new URL("./support/consumer.ts", import.meta.url))
const raw = new IORedis(redisUrl)
afterAll(() => raw.quit())

interface Out {
  readonly remaining: ReadonlyArray<number>
  readonly delays: ReadonlyArray<number>
  readonly exceeded: number
  readonly errors: number
}

// Windows of 100 hours: no window ends and no token comes back during the run.
const SCENARIOS = [
  { algorithm: "fixed-window", onExceeded: "fail", limit: 150, window: "100 hours", key: "fw-fail" },
  { algorithm: "token-bucket", onExceeded: "fail", limit: 150, window: "100 hours", key: "tb-fail" },
  { algorithm: "fixed-window", onExceeded: "delay", limit: 50, window: "100 hours", key: "fw-delay" },
  { algorithm: "token-bucket", onExceeded: "delay", limit: 50, window: "100 hours", key: "tb-delay" }
] as const

/** limit - 1, limit - 2, …, limit - n. */
const countdown = (limit: number, n: number) => Array.from({ length: n }, (_, i) => limit - 1 - i)

describe(`RateLimiterStore across ${PROCESSES} OS processes (${PROCESSES * CALLS} calls on one key each)`, () => {
  it("fail: exactly limit calls get through; delay: every call counted once, limit of them without delay", async () => {
    const { results } = await runProcesses(raw, consumer, PROCESSES, [
      redisUrl,
      freshNamespace(),
      CALLS,
      8,
      JSON.stringify(SCENARIOS)
    ])
    const outs = results.map((line): ReadonlyArray<Out> => JSON.parse(line))
    SCENARIOS.forEach((scenario, i) => {
      const of = outs.map((o) => o[i]!)
      const remaining = of.flatMap((o) => o.remaining).sort((a, b) => b - a)
      const exceeded = of.reduce((n, o) => n + o.exceeded, 0)
      expect(of.reduce((n, o) => n + o.errors, 0), scenario.key).toBe(0)
      if (scenario.onExceeded === "fail") {
        expect(remaining, scenario.key).toEqual(countdown(scenario.limit, scenario.limit))
        expect(exceeded, scenario.key).toBe(PROCESSES * CALLS - scenario.limit)
      } else {
        expect(exceeded, scenario.key).toBe(0)
        expect(remaining, scenario.key).toEqual(countdown(scenario.limit, PROCESSES * CALLS))
        expect(of.flatMap((o) => o.delays).filter((ms) => ms === 0).length, scenario.key).toBe(scenario.limit)
      }
    })
  }, 180_000)
})
