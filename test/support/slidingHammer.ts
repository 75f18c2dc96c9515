/**
 * One OS process hammering one sliding window, for the multi-process test. Prints "ready" once connected,
 * waits for "go" on stdin, makes `attempts` acquires of cost 1 (`concurrency` in flight) on one name, and
 * prints {"allowed":…,"denied":…,"errors":…}.
 *
 * argv: url namespace limit windowSeconds name attempts concurrency
 */
import { Effect, Ref } from "effect"
import { Redis, SlidingWindow } from "wakuwaku"
import { readyThenGo } from "./processes.js"

const [url, namespace, limit, windowSeconds, name, attempts, concurrency] = process.argv.slice(2)
const window = SlidingWindow.make<string>(namespace!, Number(limit), `${Number(windowSeconds)} seconds`)

const program = Effect.gen(function*() {
  const counts = { allowed: 0, denied: 0, errors: 0 }
  const made = yield* Ref.make(0)
  yield* Effect.promise(readyThenGo)
  const worker = Effect.gen(function*() {
    while ((yield* Ref.getAndUpdate(made, (n) => n + 1)) < Number(attempts)) {
      const admission = yield* Effect.either(window.acquire(name!, 1))
      if (admission._tag === "Left") counts.errors++
      else if (admission.right._tag === "Allowed") counts.allowed++
      else counts.denied++
    }
  })
  yield* Effect.all(Array.from({ length: Number(concurrency) }, () => worker), { concurrency: "unbounded" })
  yield* Effect.sync(() => process.stdout.write(JSON.stringify(counts) + "\n"))
})

program.pipe(Effect.provide(Redis.layer({ url: url! })), Effect.runPromise).then(
  () => process.exit(0),
  (error) => {
    process.stderr.write(String(error) + "\n")
    process.exit(1)
  }
)
