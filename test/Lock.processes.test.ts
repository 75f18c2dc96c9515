/**
 * Mutual exclusion across OS processes: 4 processes each do read-modify-write on a plain Redis counter
 * (GET, a pause, SET) 50 times. Under the lock the count is exact; without it, updates are lost, which
 * proves the test can fail.
 */
import { Redis as IORedis } from "ioredis"
import { fileURLToPath } from "node:url"
import { afterAll, describe, expect, it } from "vitest"
import { runProcesses } from "./support/processes.js"
import { freshNamespace, redisUrl } from "./support/redis.js"

const PROCESSES = 4
const ITERATIONS = 50
const counter = fileURLToPath(new URL("./support/counter.ts", import.meta.url))
const raw = new IORedis(redisUrl)
afterAll(() => raw.quit())

const run = async (mode: "lock" | "none") => {
  const ns = freshNamespace()
  const key = `test:${ns}:counter`
  const { results } = await runProcesses(raw, counter, PROCESSES, [redisUrl, ns, mode, key, ITERATIONS])
  return { count: Number(await raw.get(key)), fences: results.flatMap((line) => line.split(" ").slice(1)), ns }
}

describe(`Lock across ${PROCESSES} OS processes`, () => {
  it(
    `under the lock, ${PROCESSES} × ${ITERATIONS} read-modify-writes count exactly ${PROCESSES * ITERATIONS}`,
    async () => {
      const { count, fences, ns } = await run("lock")
      expect(count).toBe(PROCESSES * ITERATIONS)
      // Every grant had its own fence.
      expect(fences).toHaveLength(PROCESSES * ITERATIONS)
      expect(new Set(fences).size).toBe(PROCESSES * ITERATIONS)
      // Released every time: nothing is left but the fence key, which expires with the lease.
      expect(await raw.exists(`@@wakuwaku:Lock:{${ns}:counter}:owner`)).toBe(0)
      expect(await raw.pttl(`@@wakuwaku:Lock:{${ns}:counter}:fence`)).toBeGreaterThan(0)
      console.info(`with the lock: ${count} of ${PROCESSES * ITERATIONS}`)
    },
    60_000
  )

  it("without the lock, the same work loses updates", async () => {
    const { count } = await run("none")
    expect(count).toBeLessThan(PROCESSES * ITERATIONS)
    console.info(`without the lock: ${count} of ${PROCESSES * ITERATIONS}`)
  }, 60_000)
})
