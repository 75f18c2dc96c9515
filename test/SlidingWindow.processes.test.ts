/**
 * A sliding window across OS processes: 4 processes acquire at once on one name of a window of 100 an hour,
 * 8 calls in flight each, 100 attempts each. Exactly 100 pass; the list holds exactly their 100 entries, in
 * the order of server time, and its total says 100: no acquire was counted twice, none past the limit.
 */
import { Redis as IORedis } from "ioredis"
import { fileURLToPath } from "node:url"
import { afterAll, describe, expect, it } from "vitest"
import { runProcesses } from "./support/processes.js"
import { freshNamespace, redisUrl } from "./support/redis.js"

const PROCESSES = 4
const worker = fileURLToPath(new URL("./support/slidingHammer.ts", import.meta.url))
const raw = new IORedis(redisUrl)
afterAll(() => raw.quit())

interface Counts {
  readonly allowed: number
  readonly denied: number
  readonly errors: number
}

describe(`SlidingWindow across ${PROCESSES} OS processes`, () => {
  it("atomic under contention: exactly the limit passes, and the list holds exactly those entries", async () => {
    const ns = freshNamespace("sliding")
    const { results } = await runProcesses(raw, worker, PROCESSES, [redisUrl, ns, 100, 3600, "shared", 100, 8])
    const counts = results.map((line): Counts => JSON.parse(line))
    const sum = (field: keyof Counts) => counts.reduce((n, c) => n + c[field], 0)
    expect(sum("errors")).toBe(0)
    expect(sum("allowed") + sum("denied")).toBe(400)
    expect(sum("allowed")).toBe(100)
    const [total, ...entries] = await raw.lrange(`@@wakuwaku:SlidingWindow:${ns}:shared`, 0, -1)
    expect(total).toBe("100")
    expect(entries.length).toBe(100)
    const times = entries.map((e) => Number(e.split(" ")[0]))
    expect(times).toEqual([...times].sort((a, b) => a - b))
    expect(entries.every((e) => e.endsWith(" 1"))).toBe(true)
    const ttl = await raw.pttl(`@@wakuwaku:SlidingWindow:${ns}:shared`)
    expect(ttl).toBeGreaterThan(3_500_000)
    expect(ttl).toBeLessThanOrEqual(3_600_000)
  }, 60_000)
})
