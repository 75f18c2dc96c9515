/**
 * The Semaphore across OS processes. An external counter (a plain Redis key: INCR on entry, DECR on
 * the way out) sees who is inside:
 * - 4 processes × 50 withPermits(sem, "work", 1) on 3 permits: never more than 3 inside, and 3 at some
 *   point; without the semaphore the same work has all 4 inside, which proves the counter can see it;
 * - no starvation: 3 processes taking 1 of 3 permits again and again, and a fourth waiting for all 3,
 *   five times: each wait is within the bound of docs/semaphore.md, and nobody is inside while it holds
 *   them.
 */
import { Redis as IORedis } from "ioredis"
import { fileURLToPath } from "node:url"
import { afterAll, describe, expect, it } from "vitest"
import { runProcesses } from "./support/processes.js"
import { freshNamespace, redisUrl } from "./support/redis.js"

const PROCESSES = 4
const ITERATIONS = 50
const PERMITS = 3
const worker = fileURLToPath(new URL("./support/semaphoreWorker.ts", import.meta.url))
const raw = new IORedis(redisUrl)
afterAll(() => raw.quit())

const keysOf = (ns: string) => ({ counter: `test:${ns}:inside`, stop: `test:${ns}:stop` })

const count = async (mode: "count" | "none") => {
  const ns = freshNamespace()
  const { counter, stop } = keysOf(ns)
  const { results } = await runProcesses(raw, worker, PROCESSES, [
    redisUrl,
    ns,
    PERMITS,
    5_000,
    mode,
    counter,
    stop,
    ITERATIONS
  ])
  const lines = results.map((line) => line.split(" "))
  const left = Number(await raw.get(counter))
  await raw.del(counter)
  return {
    most: Math.max(...lines.map((words) => Number(words[1]))),
    fences: lines.flatMap((w) => w.slice(2)),
    left,
    ns
  }
}

describe(`Semaphore across ${PROCESSES} OS processes`, () => {
  it(
    `${PROCESSES} × ${ITERATIONS} withPermits(sem, name, 1) on ${PERMITS} permits: never more than ${PERMITS} inside, and ${PERMITS} at some point`,
    async () => {
      const { fences, left, most, ns } = await count("count")
      expect(most).toBe(PERMITS)
      expect(left).toBe(0)
      // Every grant had its own fence.
      expect(fences).toHaveLength(PROCESSES * ITERATIONS)
      expect(new Set(fences).size).toBe(PROCESSES * ITERATIONS)
      // Released every time: nothing is left but the fence key, which expires with the lease.
      expect(await raw.exists(`@@wakuwaku:Semaphore:{${ns}:work}:holders`)).toBe(0)
      expect(await raw.exists(`@@wakuwaku:Semaphore:{${ns}:work}:intent`)).toBe(0)
      expect(await raw.pttl(`@@wakuwaku:Semaphore:{${ns}:work}:fence`)).toBeGreaterThan(0)
      console.info(`with the semaphore: at most ${most} inside of ${PROCESSES} processes (${PERMITS} permits)`)
    },
    60_000
  )

  it("without the semaphore, the same counter sees all of them inside", async () => {
    const { most } = await count("none")
    expect(most).toBe(PROCESSES)
    console.info(`without the semaphore: at most ${most} inside`)
  }, 60_000)

  it(
    "no starvation: 3 processes streaming 1 of 3 permits do not keep a fourth waiting for 3 past the bound",
    async () => {
      // As in test/Semaphore.test.ts: the longest hold (20 ms), one pause of the default schedule (at
      // most 200 ms), and 100 ms for the round trips on a loaded machine.
      const bound = 20 + 200 + 100
      const ns = freshNamespace()
      // A lease well past the bound, so that only a stall of most of a second could end a holder unseen.
      const ttl = 1000
      const rounds = 5
      const { counter, stop } = keysOf(ns)
      const { results } = await runProcesses(
        raw,
        worker,
        PROCESSES,
        (i) => [redisUrl, ns, PERMITS, ttl, i === 0 ? "big" : "stream", counter, stop, rounds]
      )
      await raw.del(counter, stop)
      const [big, ...streams] = results.map((line) => line.split(" "))
      const readings = big![1]!.split(",").map(Number)
      const waits = big!.slice(2).map(Number)
      const taken = streams.map((words) => Number(words[1]))
      console.info(
        `Semaphore no-starvation across processes: 3 processes taking 1 of 3 permits (20 ms each), ttl ${ttl} ms: ` +
          `withPermits(3) waited ${waits.join(", ")} ms over ${rounds} rounds (bound ${bound} ms); ` +
          `the streams took ${taken.join(", ")}`
      )
      // Nobody was inside while the big one held all 3, and the others kept working meanwhile.
      expect(readings).toEqual(Array.from({ length: 2 * rounds }, () => 0))
      expect(waits).toHaveLength(rounds)
      for (const waited of waits) expect(waited).toBeLessThan(bound)
      for (const n of taken) expect(n).toBeGreaterThan(rounds)
    },
    60_000
  )
})
