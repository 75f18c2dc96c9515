/**
 * `npm start`: the login limiter from the TokenBucket spec, against a throwaway redis-server.
 *
 * Bursts of 20 logins per address, one more every 3 seconds: 20 back-to-back attempts are allowed
 * (remaining 19 down to 0), the 21st is denied with a retry-after just under 3 s. Then a reset.
 */
import { Console, Duration, Effect, Option } from "effect"
import { Rate, TokenBucket } from "wakuwaku"
import * as RedisServer from "wakuwaku/RedisServer"

/** Bursts of 20 logins per address, one more every 3 seconds. */
export const LOGINS = TokenBucket.make<string>("login", 20, Rate.make(1, "3 seconds"))

const address = "203.0.113.7"

const program = Effect.gen(function*() {
  const server = yield* RedisServer.RedisServer
  yield* Console.log(`redis-server ${server.url} (pid ${server.pid}), limiter ${LOGINS}`)
  for (let attempt = 1; attempt <= 21; attempt++) {
    const admission = yield* LOGINS.acquire(address, 1)
    yield* Console.log(
      TokenBucket.Admission.$match(admission, {
        Allowed: ({ remaining }) => `attempt ${attempt}: allowed, remaining ${remaining}`,
        Denied: ({ retryAfter }) =>
          `attempt ${attempt}: denied, retry after ${
            Option.match(retryAfter, { onNone: () => "never", onSome: (d) => `${Duration.toMillis(d)} ms` })
          }`
      })
    )
  }
  const existed = yield* LOGINS.reset(address)
  yield* Console.log(`reset: bucket existed ${existed}; next attempt:`, (yield* LOGINS.acquire(address, 1))._tag)
})

program.pipe(Effect.provide(RedisServer.layer()), Effect.runPromise).catch((error) => {
  console.error(String(error))
  process.exitCode = 1
})
