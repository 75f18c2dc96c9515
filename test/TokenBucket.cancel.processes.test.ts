/**
 * The throttle's bound across OS processes while callers give up: 3 processes each make 40 calls
 * throttled on one name of a bucket of 2 refilled 50 a second (one token every 20 ms), spread over a
 * second (2.4 times what the bucket serves, so a queue builds), a third of them wrapped in a timeout and
 * a third interrupted from outside, both at a random time of up to 400 ms, in any order, from every
 * process at once.
 *
 * Every call that starts records its turn: the server time its reservation said it may start (see
 * test/support/turns.ts), so that how late a process starts a call cannot blur the bound. Then over every
 * window [t_i, t_j] of the sorted turns, the starts are at most capacity + rate × (t_j − t_i). Giving a
 * reservation back without regard to its place in the queue (adding its tokens back, as `refund` does)
 * hands the same turn to a newcomer: the windows then hold several tokens too many.
 */
import { Redis as IORedis } from "ioredis"
import { fileURLToPath } from "node:url"
import { afterAll, describe, expect, it } from "vitest"
import { Rate, TokenBucket } from "wakuwaku"
import { runProcesses } from "./support/processes.js"
import { freshNamespace, redisUrl } from "./support/redis.js"
import { worstWindow } from "./support/turns.js"

const PROCESSES = 3
const CALLS = 40
const CAPACITY = 2
const PER_SECOND = 50
const SPREAD_MS = 1000
const GIVE_UP_MS = 400
const worker = fileURLToPath(new URL("./support/throttleGivingUp.ts", import.meta.url))
const raw = new IORedis(redisUrl)
afterAll(() => raw.quit())

describe(`TokenBucket.throttle across ${PROCESSES} OS processes, callers giving up at random`, () => {
  it(
    `${PROCESSES} × ${CALLS} calls, capacity ${CAPACITY} at ${PER_SECOND}/s, random timeouts and interrupts: ` +
      "the bound in every window of the turns started",
    async () => {
      const namespace = freshNamespace()
      const seed = Math.floor(Math.random() * 2 ** 31)
      const { results } = await runProcesses(
        raw,
        worker,
        PROCESSES,
        (i) => [redisUrl, namespace, "partner", CAPACITY, PER_SECOND, 1000, CALLS, SPREAD_MS, GIVE_UP_MS, seed + i]
      )
      const outcomes = results.map((line) => JSON.parse(line) as { turns: Array<number>; gaveUp: number })
      const turns = outcomes.flatMap((o) => o.turns)
      const gaveUp = outcomes.reduce((n, o) => n + o.gaveUp, 0)
      const bucket = TokenBucket.make<string>(namespace, CAPACITY, Rate.perSecond(PER_SECOND))
      const worst = worstWindow(turns, bucket)
      const span = (Math.max(...turns) - Math.min(...turns)) / 1000
      console.info(
        `throttle, giving up (seed ${seed}): ${turns.length} started, ${gaveUp} gave up; turns over ${
          span.toFixed(1)
        } ms; worst window: ${worst.starts} starts in ${((worst.to - worst.from) / 1000).toFixed(1)} ms, ${
          worst.excess.toFixed(3)
        } against the bound`
      )
      // Every call either started or gave up; enough of both for the windows to mean something.
      expect(turns.length + gaveUp).toBe(PROCESSES * CALLS)
      expect(gaveUp).toBeGreaterThanOrEqual(20)
      expect(turns.length).toBeGreaterThanOrEqual(30)
      expect(worst.excess, `seed ${seed}`).toBeLessThanOrEqual(0)
    },
    // Starting three processes through tsx takes most of it on a busy machine.
    120_000
  )
})
