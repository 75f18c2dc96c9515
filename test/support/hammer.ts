/**
 * One OS process hammering one bucket, for the multi-process tests. Prints "ready" once connected,
 * waits for "go" on stdin, then acquires (cost 1, `concurrency` in flight) until it has made
 * `attempts` attempts or `millis` have passed, and prints {"allowed":…,"denied":…,"errors":…}.
 *
 * argv: url namespace name capacity tokens periodMillis attempts millis concurrency
 */
import { Effect, Ref } from "effect"
import { Rate, Redis, TokenBucket } from "wakuwaku"
import { readyThenGo } from "./processes.js"

const [url, namespace, name, capacity, tokens, periodMillis, attempts, millis, concurrency] = process.argv.slice(2)
const bucket = TokenBucket.make<string>(
  namespace!,
  Number(capacity),
  Rate.make(Number(tokens), `${Number(periodMillis)} millis`)
)

const program = Effect.gen(function*() {
  const counts = { allowed: 0, denied: 0, errors: 0 }
  const made = yield* Ref.make(0)
  yield* Effect.promise(readyThenGo)
  const deadline = performance.now() + Number(millis)
  const worker = Effect.gen(function*() {
    while ((yield* Ref.getAndUpdate(made, (n) => n + 1)) < Number(attempts) && performance.now() < deadline) {
      const admission = yield* Effect.either(bucket.acquire(name!, 1))
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
