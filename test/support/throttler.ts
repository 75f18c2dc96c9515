/**
 * One OS process making throttled calls on one bucket, for the multi-process throttle test. Prints
 * "ready" once connected (and warmed up on a name of its own), waits for "go" on stdin, then starts
 * `calls` calls at once, each `TokenBucket.throttle(bucket, name, { maxWait })` around a call that
 * records when it started, and prints {"calls":[{sent, wait, start}, …]} once every call has run: when
 * the call was made, the wait its reservation gave (what throttle slept, read from the Clock it slept
 * on), and when it started. Times are wall-clock ms, fractional, as every process on the machine reads
 * them.
 *
 * argv: url namespace name capacity tokens periodMillis calls maxWaitMillis
 */
import { Clock, Duration, Effect } from "effect"
import { Rate, Redis, TokenBucket } from "wakuwaku"
import { readyThenGo } from "./processes.js"

const [url, namespace, name, capacity, tokens, periodMillis, calls, maxWait] = process.argv.slice(2)
const bucket = TokenBucket.make<string>(
  namespace!,
  Number(capacity),
  Rate.make(Number(tokens), `${Number(periodMillis)} millis`)
)

const wallClock = () => performance.timeOrigin + performance.now()

/** The live clock, remembering how long it was asked to sleep. */
class RecordingClock implements Clock.Clock {
  readonly [Clock.ClockTypeId]: Clock.ClockTypeId = Clock.ClockTypeId
  slept = 0
  private readonly live = Clock.make()
  unsafeCurrentTimeMillis = () => this.live.unsafeCurrentTimeMillis()
  currentTimeMillis = this.live.currentTimeMillis
  unsafeCurrentTimeNanos = () => this.live.unsafeCurrentTimeNanos()
  currentTimeNanos = this.live.currentTimeNanos
  sleep(duration: Duration.Duration) {
    this.slept += Duration.toMillis(duration)
    return this.live.sleep(duration)
  }
}

interface Call {
  readonly sent: number
  readonly wait: number
  readonly start: number
}

const throttled = (into: Array<Call>) =>
  Effect.suspend(() => {
    const clock = new RecordingClock()
    const sent = wallClock()
    let start = 0
    return TokenBucket.throttle(Effect.sync(() => (start = wallClock())), bucket, name!, {
      maxWait: `${Number(maxWait)} millis`
    }).pipe(
      Effect.withClock(clock),
      Effect.tap(() => into.push({ sent, wait: clock.slept, start }))
    )
  })

const program = Effect.gen(function*() {
  // Warm up: the same calls on a name of this process's own, with tokens to spare.
  yield* Effect.all(
    Array.from({ length: 20 }, () => TokenBucket.throttle(Effect.void, bucket, `warm-${process.pid}`, { cost: 0 })),
    { concurrency: "unbounded", discard: true }
  )
  yield* Effect.promise(readyThenGo)
  const made: Array<Call> = []
  yield* Effect.all(Array.from({ length: Number(calls) }, () => throttled(made)), {
    concurrency: "unbounded",
    discard: true
  })
  yield* Effect.sync(() => process.stdout.write(JSON.stringify({ calls: made }) + "\n"))
})

program.pipe(Effect.provide(Redis.layer({ url: url! })), Effect.runPromise).then(
  () => process.exit(0),
  (error) => {
    process.stderr.write(String(error) + "\n")
    process.exit(1)
  }
)
