/**
 * Several limits decided as one, across OS processes: 4 processes ask a token bucket of 100 and a fixed
 * window of 150 at once, all or nothing, on one name, 8 calls in flight each. Exactly 100 requests pass;
 * the bucket is empty and the window counted exactly those 100: no request the bucket denied was counted
 * by the window, and none was let through twice.
 */
import { Redis as IORedis } from "ioredis"
import { fileURLToPath } from "node:url"
import { afterAll, describe, expect, it } from "vitest"
import { runProcesses, serverTime } from "./support/processes.js"
import { freshNamespace, redisUrl } from "./support/redis.js"

const PROCESSES = 4
const worker = fileURLToPath(new URL("./support/groupHammer.ts", import.meta.url))
const raw = new IORedis(redisUrl)
afterAll(() => raw.quit())

interface Counts {
  readonly allowed: number
  readonly denied: number
  readonly errors: number
}

describe(`Several limits as one, across ${PROCESSES} OS processes`, () => {
  it(
    "all or nothing under contention: exactly the bucket's 100 pass, and the window counted exactly them",
    async () => {
      const bucketNs = freshNamespace("bucket")
      const windowNs = freshNamespace("window")
      // Windows of 10^6 s start at its multiples: pick one whose current window does not end within a minute.
      const now = Math.floor((await serverTime(raw)) / 1_000_000)
      const windowSeconds = [1_000_000, 1_000_007, 1_000_011].find((s) => s - (now % s) > 60)!
      const { results } = await runProcesses(
        raw,
        worker,
        PROCESSES,
        [redisUrl, bucketNs, 100, windowNs, 150, windowSeconds, "shared", 100, 8]
      )
      const counts = results.map((line): Counts => JSON.parse(line))
      const sum = (field: keyof Counts) => counts.reduce((n, c) => n + c[field], 0)
      expect(sum("errors")).toBe(0)
      expect(sum("allowed") + sum("denied")).toBe(400)
      expect(sum("allowed")).toBe(100)
      // The bucket: 100 taken (its refill of 1 an hour adds nothing in a few seconds).
      const state = await raw.get(`@@wakuwaku:TokenBucket:${bucketNs}:shared`)
      expect(Math.floor(Number(state!.split(" ")[0]))).toBe(0)
      // The window: exactly the 100 that passed, not the 300 the bucket denied.
      const window = await raw.get(`@@wakuwaku:FixedWindow:${windowNs}:shared`)
      expect(Number(window!.split(" ")[1])).toBe(100)
      console.info(`4 processes × 100: ${sum("allowed")} allowed, ${sum("denied")} denied; window counted 100 of 150`)
    },
    60_000
  )
})
