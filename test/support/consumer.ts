/**
 * One OS process calling @effect/experimental's `RateLimiter.consume` over RateLimiterStore, for the
 * multi-process test. Prints "ready" once connected, waits for "go" on stdin, then, for each scenario in
 * turn, consumes one token of its key `calls` times (`concurrency` in flight), and prints one line: per
 * scenario {"remaining":[…],"delays":[ms…],"exceeded":n,"errors":n}, the `remaining` and `delay` of every
 * call that succeeded, and how many failed.
 *
 * argv: url namespace calls concurrency scenarios (JSON: [{algorithm, onExceeded, limit, window, key}])
 */
import { RateLimiter } from "@effect/experimental"
import { Duration, Effect, Layer } from "effect"
import { Redis } from "wakuwaku"
import * as RateLimiterStore from "wakuwaku/RateLimiterStore"
import { readyThenGo } from "./processes.js"

const [url, namespace, calls, concurrency, scenarios] = process.argv.slice(2)

interface Scenario {
  readonly algorithm: "fixed-window" | "token-bucket"
  readonly onExceeded: "delay" | "fail"
  readonly limit: number
  readonly window: string
  readonly key: string
}

const consumeAll = (limiter: RateLimiter.RateLimiter, scenario: Scenario) =>
  Effect.gen(function*() {
    const out = { remaining: [] as Array<number>, delays: [] as Array<number>, exceeded: 0, errors: 0 }
    const consume = limiter.consume({ ...scenario, window: scenario.window as Duration.DurationInput })
    yield* Effect.forEach(
      Array.from({ length: Number(calls) }),
      () =>
        Effect.match(consume, {
          onFailure: (error) => error.reason === "Exceeded" ? out.exceeded++ : out.errors++,
          onSuccess: (result) => {
            out.remaining.push(result.remaining)
            out.delays.push(Duration.toMillis(result.delay))
          }
        }),
      { concurrency: Number(concurrency), discard: true }
    )
    return out
  })

const program = Effect.gen(function*() {
  const limiter = yield* RateLimiter.RateLimiter
  yield* Effect.promise(readyThenGo)
  const outs = yield* Effect.forEach(JSON.parse(scenarios!) as ReadonlyArray<Scenario>, (s) => consumeAll(limiter, s))
  yield* Effect.sync(() => process.stdout.write(JSON.stringify(outs) + "\n"))
})

program.pipe(
  Effect.provide(RateLimiter.layer.pipe(Layer.provide(RateLimiterStore.layer({ namespace: namespace! })))),
  // Generous timeouts: the test's processes start together on a machine the other tests also load.
  Effect.provide(Redis.layer({ url: url!, connectTimeout: "30 seconds", commandTimeout: "30 seconds" })),
  Effect.runPromise
).then(
  () => process.exit(0),
  (error) => {
    process.stderr.write(String(error) + "\n")
    process.exit(1)
  }
)
