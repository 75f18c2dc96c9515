/**
 * No double spend across OS processes: several processes hammer one name at once, and the number
 * admitted is exactly the capacity plus the refill over the measured interval, never more.
 */
import { Redis as IORedis } from "ioredis"
import { fileURLToPath } from "node:url"
import { afterAll, describe, expect, it } from "vitest"
import { ACQUIRE } from "../src/internal/tokenBucket.js"
import { runProcesses } from "./support/processes.js"
import { freshNamespace, redisUrl } from "./support/redis.js"

const PROCESSES = 4
const hammer = fileURLToPath(new URL("./support/hammer.ts", import.meta.url))
const raw = new IORedis(redisUrl)
afterAll(() => raw.quit())

interface Counts {
  readonly allowed: number
  readonly denied: number
  readonly errors: number
}

/** Starts the hammers, releases them at once, and collects their counts. */
const run = async (args: ReadonlyArray<string | number>, beforeGo?: () => Promise<void>) => {
  const { ended, results, started } = await runProcesses(raw, hammer, PROCESSES, [redisUrl, ...args], beforeGo)
  return { counts: results.map((line): Counts => JSON.parse(line)), started, ended }
}

const sum = (counts: ReadonlyArray<Counts>, field: keyof Counts) => counts.reduce((n, c) => n + c[field], 0)

describe(`TokenBucket across ${PROCESSES} OS processes`, () => {
  it("a slow refill: exactly capacity is admitted, whatever the contention", async () => {
    const ns = freshNamespace()
    // capacity 200, 1 token per hour; each process tries 150 times, 16 in flight: 600 attempts.
    const { counts, ended, started } = await run([ns, "shared", 200, 1, 3_600_000, 150, 60_000, 16])
    const refill = Math.floor(((ended - started) / 1_000_000) / 3600)
    expect(sum(counts, "errors")).toBe(0)
    expect(sum(counts, "allowed") + sum(counts, "denied")).toBe(600)
    expect(refill).toBe(0)
    expect(sum(counts, "allowed")).toBe(200 + refill)
    console.info(`slow refill: ${sum(counts, "allowed")} admitted of 600 attempts; bound 200 + ${refill}`)
  }, 60_000)

  it(
    "a fast refill: admitted = capacity + refill over the interval, exactly by the stored state, never more",
    async () => {
      const ns = freshNamespace()
      const key = `@@wakuwaku:TokenBucket:${ns}:shared`
      const capacity = 1000
      const perSecond = 200
      const parse = (state: string | null) => {
        const [tokens, ts] = (state ?? "").split(" ").map(Number)
        return { tokens: tokens!, ts: ts! }
      }
      // Right before the processes go, one acquire here takes half the bucket and fixes the starting state.
      const sha = await raw.script("LOAD", ACQUIRE.lua) as string
      let first = { tokens: 0, ts: 0 }
      // Each process hammers for 1.5 s, 8 in flight.
      const { counts, ended, started } = await run(
        [ns, "shared", capacity, perSecond, 1000, 1_000_000, 1500, 8],
        async () => {
          expect(await raw.evalsha(sha, 1, key, `${capacity} ${perSecond} 1000000`, capacity / 2)).toEqual([
            1,
            0,
            capacity / 2
          ])
          first = parse(await raw.get(key))
        }
      )
      expect(first.tokens).toBe(capacity / 2)
      const last = parse(await raw.get(key))
      const admitted = sum(counts, "allowed")
      expect(sum(counts, "errors")).toBe(0)
      // Conservation: the processes took the starting level plus the refill up to the last call, less what is left.
      const refilled = (last.ts - first.ts) * perSecond / 1_000_000
      expect(Math.abs(admitted - (first.tokens + refilled - last.tokens))).toBeLessThan(1e-6)
      // Counting the half taken here: never more than capacity plus the refill over the measured interval.
      const bound = capacity + Math.floor((ended - started) * perSecond / 1_000_000)
      expect(admitted + capacity / 2).toBeLessThanOrEqual(bound)
      console.info(
        `fast refill: ${capacity / 2} + ${admitted} admitted in ${(ended - started) / 1000} ms server time; ` +
          `capacity ${capacity} + refill ${refilled.toFixed(3)} - left ${last.tokens.toFixed(3)}; bound ${bound}; ` +
          `${sum(counts, "denied")} denied`
      )
    },
    60_000
  )
})
