/**
 * Metered calls across OS processes: 3 processes each make 40 metered calls at once on one name of one budget
 * (a bucket of 100 000 tokens refilled one a day, so that what was taken is read off its level), each with an
 * estimate, an actual cost above or below it, and an ending drawn at random: settled, settled then failed,
 * failed before settling, never settled, or interrupted from outside at a random time.
 *
 * What each call was charged is read from the store's replies on the call's fiber (test/support/meterer.ts):
 * its reservation, then its settlement or its release. The total taken from the bucket equals the total
 * charged, exactly (to the token: the refill of the run is below a thousandth); no call settles twice, gets
 * back more than it did not use, or is charged less than the actual cost it settled with.
 */
import { Redis as IORedis } from "ioredis"
import { fileURLToPath } from "node:url"
import { afterAll, describe, expect, it } from "vitest"
import { runProcesses } from "./support/processes.js"
import { freshNamespace, redisUrl } from "./support/redis.js"

const PROCESSES = 3
const CALLS = 40
const CAPACITY = 100_000
const worker = fileURLToPath(new URL("./support/meterer.ts", import.meta.url))
const raw = new IORedis(redisUrl)
afterAll(() => raw.quit())

interface Outcome {
  readonly charged: number
  readonly actual: number
  readonly calls: number
  readonly settles: number
  readonly problems: ReadonlyArray<string>
}

describe(`TokenBucket.metered across ${PROCESSES} OS processes`, () => {
  it(
    `${PROCESSES} × ${CALLS} calls on one budget, random costs and endings: the total taken is the total charged`,
    async () => {
      const namespace = freshNamespace()
      const seed = Math.floor(Math.random() * 2 ** 31)
      const { results } = await runProcesses(
        raw,
        worker,
        PROCESSES,
        (i) => [redisUrl, namespace, "tenant", CAPACITY, CALLS, seed + i]
      )
      const outcomes = results.map((line) => JSON.parse(line) as Outcome)
      const charged = outcomes.reduce((n, o) => n + o.charged, 0)
      const settles = outcomes.reduce((n, o) => n + o.settles, 0)
      const state = await raw.get(`@@wakuwaku:TokenBucket:${namespace}:tenant`)
      const tokens = Number(state!.split(" ")[0])
      const taken = CAPACITY - tokens
      console.info(
        `metered (seed ${seed}): ${PROCESSES * CALLS} calls, ${settles} settlements and releases sent; ` +
          `taken ${taken.toFixed(6)}, charged ${charged}, actual costs settled ${
            outcomes.reduce((n, o) => n + o.actual, 0)
          }`
      )
      expect(outcomes.flatMap((o) => o.problems), `seed ${seed}`).toEqual([])
      expect(Number.isSafeInteger(charged)).toBe(true)
      // The refill during the run (a token a day) is all that stands between them.
      expect(taken).toBeLessThanOrEqual(charged)
      expect(charged - taken, `seed ${seed}`).toBeLessThan(0.001)
      expect(settles).toBeGreaterThanOrEqual(PROCESSES * CALLS / 3)
    },
    120_000
  )
})
