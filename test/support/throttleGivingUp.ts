/**
 * One OS process making throttled calls on one bucket while giving many of them up, for the test of the
 * throttle's bound across processes. Prints "ready" once connected, waits for "go" on stdin, then makes
 * `calls` calls, each after a random delay of up to `spreadMillis`: a third wrapped in a timeout, a
 * third interrupted from outside, both after a random time of up to `giveUpMillis`, and a third left
 * alone. Each call that starts records its turn: the server time (µs) its reservation said it may
 * start (from the reservation it runs under), so that how late this process starts it cannot blur the
 * bound. Prints {"turns": […], "gaveUp": n} once every call has ended. Random but seeded.
 *
 * argv: url namespace name capacity tokens periodMillis calls spreadMillis giveUpMillis seed
 */
import { Effect, Fiber, FiberRef, Option } from "effect"
import { Rate, Redis, TokenBucket } from "wakuwaku"
import { readyThenGo } from "./processes.js"
import { lastGrant, recordingGrants, startOf } from "./turns.js"

const [url, namespace, name, capacity, tokens, periodMillis, calls, spread, giveUp, seed] = process.argv.slice(2)
const bucket = TokenBucket.make<string>(
  namespace!,
  Number(capacity),
  Rate.make(Number(tokens), `${Number(periodMillis)} millis`)
)

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

const turns: Array<number> = []
let gaveUp = 0

const started = Effect.flatMap(FiberRef.get(lastGrant), (granted) =>
  Effect.sync(() => {
    turns.push(startOf(bucket, granted!))
  }))

/** One call, as drawn: its delay, and how (and when) its caller gives up, if it does; true if it did. */
const call = (delay: number, how: number, after: number): Effect.Effect<boolean, unknown, Redis.ReadWrite> => {
  const throttled = Effect.as(TokenBucket.throttle(started, bucket, name!), false)
  const given = how < 1 / 3
    ? Effect.timeout(throttled, `${after} millis`).pipe(Effect.catchTag("TimeoutException", () => Effect.succeed(true)))
    : how < 2 / 3
    ? Effect.gen(function*() {
      const fiber = yield* Effect.fork(throttled)
      yield* Effect.sleep(`${after} millis`)
      if (Option.isSome(yield* fiber.poll)) return false
      yield* Fiber.interrupt(fiber)
      return true
    })
    : throttled
  return Effect.zipRight(
    Effect.sleep(`${delay} millis`),
    Effect.tap(given, (gave) => Effect.sync(() => gave && gaveUp++))
  )
}

const program = Effect.gen(function*() {
  // Warm up on a name of this process's own, with tokens to spare.
  yield* TokenBucket.throttle(Effect.void, bucket, `warm-${process.pid}`, { cost: 0 })
  const drawn = Array.from(
    { length: Number(calls) },
    () => [random() * Number(spread), random(), random() * Number(giveUp)] as const
  )
  yield* Effect.promise(readyThenGo)
  yield* Effect.all(drawn.map(([delay, how, after]) => call(delay, how, after)), {
    concurrency: "unbounded",
    discard: true
  })
  yield* Effect.sync(() => process.stdout.write(JSON.stringify({ turns, gaveUp }) + "\n"))
})

program.pipe(Effect.provide(recordingGrants), Effect.provide(Redis.layer({ url: url! })), Effect.runPromise).then(
  () => process.exit(0),
  (error) => {
    process.stderr.write(String(error) + "\n")
    process.exit(1)
  }
)
