/**
 * One OS process using a Semaphore, for the tests across processes. Prints "ready", waits for "go",
 * does its work and prints one line. An external counter, a plain Redis key, counts who is inside:
 * INCR on entry (its reply is how many are inside then, this process included), DECR on the way out.
 *
 * argv: url namespace permits ttlMillis mode counterKey stopKey arg
 *
 * - `count` (arg: iterations): `iterations` × withPermits(sem, "work", 1) around the counter and a 3 ms
 *   pause; prints "done <most seen inside> <fences…>".
 * - `none` (arg: iterations): the same work without the semaphore, to prove the counter can see more.
 * - `stream`: withPermits(sem, "work", 1) around the counter and a 20 ms pause, again and again, until
 *   the stop key exists; prints "done <how many>".
 * - `big` (arg: rounds): `rounds` × (a 150 ms pause, then withPermits(sem, "work", permits), whose body
 *   reads the counter, which must be 0, and pauses 20 ms); then sets the stop key; prints
 *   "done <counter readings inside, comma-separated> <waits in ms…>".
 */
import { type Duration, Effect } from "effect"
import { Lock, Redis, Semaphore } from "wakuwaku"
import { readyThenGo } from "./processes.js"

const [url, namespace, permits, ttlMillis, mode, counterKey, stopKey, arg] = process.argv.slice(2)
const SEM = Semaphore.make<string>(namespace!, Number(permits), Number(ttlMillis))
const WAIT = { acquire: Lock.wait({ deadline: "60 seconds" }) }

const counter = (name: "INCR" | "DECR") =>
  Effect.flatMap(Redis.Redis, (redis) => redis.command(name, [counterKey!])) as Effect.Effect<
    number,
    Redis.RedisError,
    Redis.Redis
  >

/** Counts itself in for `pause`, and out; succeeds with how many were inside when it came in. */
const inside = (pause: Duration.DurationInput) =>
  Effect.acquireUseRelease(
    counter("INCR"),
    (seen) => Effect.as(Effect.sleep(pause), seen),
    () => Effect.orDie(counter("DECR"))
  )

const program = Effect.gen(function*() {
  const redis = yield* Redis.Redis
  yield* Effect.promise(readyThenGo)
  let line = "done"
  switch (mode) {
    case "count":
    case "none": {
      let most = 0
      const fences: Array<string> = []
      for (let i = 0; i < Number(arg); i++) {
        const seen = mode === "none" ? yield* inside("3 millis") : yield* Effect.scoped(Effect.gen(function*() {
          const { lost, permit } = yield* Semaphore.scoped(SEM, "work", 1, WAIT)
          fences.push(String(permit.fence))
          return yield* Effect.raceFirst(inside("3 millis"), lost)
        }))
        most = Math.max(most, seen)
      }
      line = `done ${most} ${fences.join(" ")}`
      break
    }
    case "stream": {
      let count = 0
      while ((yield* redis.command("EXISTS", [stopKey!])) === 0) {
        yield* Semaphore.withPermits(SEM, "work", 1, WAIT)(inside("20 millis"))
        count++
      }
      line = `done ${count}`
      break
    }
    case "big": {
      const readings: Array<number> = []
      const waits: Array<string> = []
      for (let round = 0; round < Number(arg); round++) {
        yield* Effect.sleep("150 millis")
        const requested = performance.now()
        yield* Semaphore.withPermits(SEM, "work", Number(permits), WAIT)(Effect.gen(function*() {
          waits.push((performance.now() - requested).toFixed(1))
          readings.push(Number(yield* redis.command("GET", [counterKey!])))
          yield* Effect.sleep("20 millis")
          readings.push(Number(yield* redis.command("GET", [counterKey!])))
        }))
      }
      yield* redis.command("SET", [stopKey!, "1", "PX", 60_000])
      line = `done ${readings.join(",")} ${waits.join(" ")}`
      break
    }
    default:
      return yield* Effect.dieMessage(`unknown mode ${mode}`)
  }
  yield* Effect.sync(() => process.stdout.write(`${line}\n`))
})

program.pipe(Effect.provide(Redis.layer({ url: url! })), Effect.runPromise).then(
  () => process.exit(0),
  (error) => {
    process.stderr.write(String(error) + "\n")
    process.exit(1)
  }
)
