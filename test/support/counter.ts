/**
 * One OS process doing read-modify-write on a plain Redis counter, for the mutual-exclusion test:
 * `iterations` times GET, a short pause, SET to one more; holding the lock (the scoped form) when mode is
 * "lock".
 * Prints "ready", waits for "go", then prints "done <fences…>" (the fences it was granted, in order).
 *
 * argv: url namespace mode counterKey iterations
 */
import { Effect } from "effect"
import { Lock, Redis } from "wakuwaku"
import { readyThenGo } from "./processes.js"

const [url, namespace, mode, counterKey, iterations] = process.argv.slice(2)
const COUNTER = Lock.make<string>(namespace!, "5 seconds")

const readModifyWrite = Effect.gen(function*() {
  const redis = yield* Redis.Redis
  const value = Number((yield* redis.command("GET", [counterKey!])) ?? 0)
  yield* Effect.sleep("2 millis")
  yield* redis.command("SET", [counterKey!, value + 1, "PX", 60_000])
})

const program = Effect.gen(function*() {
  yield* Effect.promise(readyThenGo)
  const fences: Array<string> = []
  for (let i = 0; i < Number(iterations); i++) {
    if (mode === "lock") {
      yield* Effect.scoped(Effect.gen(function*() {
        const { lost, token } = yield* Lock.scoped(COUNTER, "counter", {
          acquire: Lock.wait({ deadline: "30 seconds" })
        })
        fences.push(String(token.fence))
        yield* Effect.raceFirst(readModifyWrite, lost)
      }))
    } else {
      yield* readModifyWrite
    }
  }
  yield* Effect.sync(() => process.stdout.write(`done ${fences.join(" ")}\n`))
})

program.pipe(Effect.provide(Redis.layer({ url: url! })), Effect.runPromise).then(
  () => process.exit(0),
  (error) => {
    process.stderr.write(String(error) + "\n")
    process.exit(1)
  }
)
