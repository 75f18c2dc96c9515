/**
 * The login limiter from the TokenBucket spec, alone (`npx tsx docs/examples/login.ts`; `npm start` runs
 * the proxy, `wakuwaku proxy --demo`, with the same policy).
 *
 * Bursts of 20 logins per address, one more every 3 seconds: 20 back-to-back attempts are allowed
 * (remaining 19 down to 0), the 21st is denied with a retry-after just under 3 s. Then a reset.
 *
 * The store, printed first: the Redis at `REDIS_URL` when it is set; otherwise a throwaway
 * redis-server when one is on PATH; otherwise the embedded memory backend (this process only).
 */
import { Config, Console, Duration, Effect, Either, Layer, Option } from "effect"
import { Rate, Redis, TokenBucket } from "wakuwaku"
import { RedisServer } from "wakuwaku/testing"

/** Bursts of 20 logins per address, one more every 3 seconds. */
export const LOGINS = TokenBucket.make<string>("login", 20, Rate.make(1, "3 seconds"))

const address = "203.0.113.7"

/** The store: REDIS_URL, else a throwaway redis-server, else process memory. */
export const store = Layer.unwrapScoped(
  Effect.gen(function*() {
    const url = yield* Config.option(Config.nonEmptyString("REDIS_URL"))
    if (Option.isSome(url)) {
      yield* Console.log(`store: Redis at ${url.value} (REDIS_URL)`)
      return Redis.layer({ url: url.value })
    }
    const server = yield* Effect.either(RedisServer.make())
    if (Either.isRight(server)) {
      yield* Console.log(`store: a throwaway redis-server at ${server.right.url} (pid ${server.right.pid})`)
      return Redis.layer({ url: server.right.url })
    }
    if (server.left.reason !== "NotInstalled") return yield* Effect.fail(server.left)
    yield* Console.log("store: memory (no REDIS_URL, no redis-server on PATH): shared by nothing but this process")
    return Redis.layerMemory()
  })
)

const program = Effect.gen(function*() {
  yield* Console.log(`limiter ${String(LOGINS)}`)
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

program.pipe(Effect.provide(store), Effect.runPromise).catch((error) => {
  console.error(String(error))
  process.exitCode = 1
})
