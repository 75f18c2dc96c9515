/**
 * One OS process making metered calls on one budget, for the test of metered calls across processes. Prints
 * "ready" once connected, waits for "go" on stdin, then makes `calls` calls at once, each drawn at random
 * (seeded): an estimate, an actual cost above or below it, and an ending: settle and succeed, settle and
 * fail, fail before settling, succeed without settling, or be interrupted from outside at a random time (before
 * or after its settle).
 *
 * What each call was charged is read from the store's own replies, on the fiber of the call: its reservation
 * (+ its cost), and its settlement or its release (+ what was taken beyond the estimate, − the tokens given
 * back). Prints {"charged": n, "actual": n, "calls": n, "settles": n, "problems": [...]} once every call has
 * ended: `actual` the actual costs of the calls that settled; `problems` any call that settled twice, got back
 * more than it did not use, or was charged less than its actual cost.
 *
 * argv: url namespace name capacity calls seed
 */
import { Effect, Fiber, FiberRef, Layer } from "effect"
import { Rate, Redis, TokenBucket } from "wakuwaku"
import { readyThenGo } from "./processes.js"

const [url, namespace, name, capacity, calls, seed] = process.argv.slice(2)
// One token a day: the refill during the run is below a thousandth of a token.
const bucket = TokenBucket.make<string>(namespace!, Number(capacity), Rate.make(1, "1 day"))

/** mulberry32: a small seeded generator of numbers in [0, 1). */
const random = (() => {
  let a = Number(seed) >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
})()

interface Ledger {
  charged: number
  settles: number
  returned: number
}
const callOf = FiberRef.unsafeMake<Ledger | undefined>(undefined)

/** The service in context, charging each call's ledger as the store replies. */
const recording: Layer.Layer<Redis.Redis, never, Redis.Redis> = Layer.effect(
  Redis.Redis,
  Effect.map(Redis.Redis, (redis): Redis.Service => ({
    ...redis,
    script: (script, keys, args) =>
      Effect.flatMap(
        FiberRef.get(callOf),
        (ledger) =>
          Effect.tap(redis.script(script, keys, args), (reply) =>
            Effect.sync(() => {
              if (ledger === undefined) return
              if (script.name === "TokenBucket.reserve") {
                const reservation = reply as TokenBucket.Reservation
                if (reservation._tag === "Granted") ledger.charged += reservation.cost
              } else if (script.name === "TokenBucket.settle") {
                const [estimate, actual] = [Number(args[1]), Number(args[4])]
                ledger.charged += Math.max(0, actual - estimate) - (reply as number)
                ledger.returned += reply as number
                ledger.settles++
              }
            }))
      )
  }))
)

let charged = 0
let actuals = 0
let settles = 0
const problems: Array<string> = []

class Failed {
  readonly _tag = "Failed"
}

/** One call, as drawn. */
const call = (i: number, estimate: number, actual: number, ending: number, after: number) =>
  Effect.gen(function*() {
    const ledger: Ledger = { charged: 0, settles: 0, returned: 0 }
    let settled = false
    const metered = TokenBucket.metered(bucket, name!, { estimate }, (settle) =>
      Effect.gen(function*() {
        yield* Effect.sleep(`${Math.floor(after / 2)} millis`)
        if (ending < 0.15) return yield* Effect.fail(new Failed())
        if (ending < 0.3) return
        yield* settle(actual)
        settled = true
        if (ending < 0.45) return yield* Effect.fail(new Failed())
        yield* Effect.sleep(`${Math.floor(after / 2)} millis`)
      }))
    const run = ending < 0.7 ? Effect.ignore(metered) : Effect.gen(function*() {
      // Interrupted from outside, at a random time: before its settle, during it, or after it.
      const fiber = yield* Effect.fork(Effect.ignore(metered))
      yield* Effect.sleep(`${Math.floor(after * random())} millis`)
      yield* Fiber.interrupt(fiber)
    })
    yield* Effect.locally(run, callOf, ledger)
    charged += ledger.charged
    settles += ledger.settles
    if (settled) actuals += actual
    if (ledger.settles > 1) problems.push(`call ${i} settled ${ledger.settles} times`)
    if (ledger.returned > estimate) problems.push(`call ${i} got back ${ledger.returned} of ${estimate}`)
    if (settled && ledger.charged < actual) problems.push(`call ${i} was charged ${ledger.charged} for ${actual}`)
  })

const program = Effect.gen(function*() {
  // Warm up on a name of this process's own.
  yield* TokenBucket.metered(bucket, `warm-${process.pid}`, { estimate: 1 }, (settle) => settle(0))
  const drawn = Array.from({ length: Number(calls) }, () => {
    const estimate = 1 + Math.floor(random() * 300)
    const actual = random() < 0.5 ? Math.floor(random() * estimate) : estimate + Math.floor(random() * 300)
    return [estimate, actual, random(), random() * 60] as const
  })
  yield* Effect.promise(readyThenGo)
  yield* Effect.all(drawn.map(([estimate, actual, ending, after], i) => call(i, estimate, actual, ending, after)), {
    concurrency: "unbounded",
    discard: true
  })
  yield* Effect.sync(() =>
    process.stdout.write(JSON.stringify({ charged, actual: actuals, calls: Number(calls), settles, problems }) + "\n")
  )
})

program.pipe(Effect.provide(recording), Effect.provide(Redis.layer({ url: url! })), Effect.runPromise).then(
  () => process.exit(0),
  (error) => {
    process.stderr.write(String(error) + "\n")
    process.exit(1)
  }
)
