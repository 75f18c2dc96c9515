/**
 * One OS process asking a group of two limiters at once (a token bucket and a fixed window, all or nothing),
 * for the multi-process test. Prints "ready" once connected, waits for "go" on stdin, makes `attempts`
 * decisions (`concurrency` in flight) on one name, and prints {"allowed":…,"denied":…,"errors":…}.
 *
 * argv: url bucketNamespace capacity windowNamespace limit windowSeconds name attempts concurrency
 */
import { Effect, Ref } from "effect"
import { FixedWindow, Rate, Redis, TokenBucket } from "wakuwaku"
import * as limits from "../../src/internal/limits.js"
import { readyThenGo } from "./processes.js"

const [url, bucketNs, capacity, windowNs, limit, windowSeconds, name, attempts, concurrency] = process.argv.slice(2)
const bucket = TokenBucket.make<string>(bucketNs!, Number(capacity), Rate.make(1, "1 hour"))
const window = FixedWindow.make<string>(windowNs!, Number(limit), `${Number(windowSeconds)} seconds`)
const group = [bucket, window] as unknown as ReadonlyArray<limits.AnyLimiter>

const program = Effect.gen(function*() {
  const counts = { allowed: 0, denied: 0, errors: 0 }
  const made = yield* Ref.make(0)
  yield* Effect.promise(readyThenGo)
  const worker = Effect.gen(function*() {
    while ((yield* Ref.getAndUpdate(made, (n) => n + 1)) < Number(attempts)) {
      const outcome = yield* Effect.either(limits.acquire(group, name!, 1))
      if (outcome._tag === "Left") counts.errors++
      else if (outcome.right.allowed) counts.allowed++
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
