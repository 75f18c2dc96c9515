/**
 * One OS process receiving a pipe in at-least-once mode, for the crash test. For each message its
 * handler records the start (RPUSH to `<log>:started`, and a line `started <n>` on stdout), works for a
 * millisecond, and records the end (RPUSH to `<log>:finished`). At message `stallAt` the handler never
 * ends: the parent kills the process there. A receiver still held by a killed process is waited for
 * (PipeBusy, until its lease runs out). Prints `done` when the pipe is closed and drained.
 *
 * argv: url namespace name ttlMillis logKey stallAt
 */
import { Effect, Schedule, Schema, Stream } from "effect"
import { Pipe, Redis } from "wakuwaku"

const [url, namespace, name, ttl, log, stallAt] = process.argv.slice(2)
const P = Pipe.make<string, { readonly n: number }>(namespace!, Schema.Struct({ n: Schema.Number }), Number(ttl))

const handle = (m: { readonly n: number }) =>
  Effect.gen(function*() {
    const redis = yield* Redis.Redis
    yield* redis.command("RPUSH", [`${log}:started`, m.n])
    yield* Effect.sync(() => process.stdout.write(`started ${m.n}\n`))
    if (m.n === Number(stallAt)) return yield* Effect.never
    yield* Effect.sleep("1 millis")
    yield* redis.command("RPUSH", [`${log}:finished`, m.n])
  })

const program = P.receive(name!, { delivery: "at-least-once" }).pipe(
  Stream.runForEach(handle),
  Effect.retry({ while: (error) => error._tag === "PipeBusy", schedule: Schedule.spaced("20 millis") }),
  Effect.zipRight(Effect.sync(() => process.stdout.write("done\n")))
)

program.pipe(Effect.provide(Redis.layer({ url: url! })), Effect.runPromise).then(
  () => process.exit(0),
  (error) => {
    process.stderr.write(String(error) + "\n")
    process.exit(1)
  }
)
