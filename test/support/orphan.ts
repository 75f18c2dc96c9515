/**
 * Starts a throwaway redis-server through `wakuwaku/testing`, prints its pid, and runs until it is killed:
 * RedisServer.test.ts SIGKILLs this process and watches the server die with it.
 */
import { Effect } from "effect"
import { RedisServer } from "wakuwaku/testing"

Effect.runPromise(
  Effect.scoped(Effect.flatMap(RedisServer.make(), (server) =>
    Effect.zipRight(
      Effect.sync(() => console.log(server.pid)),
      Effect.never
    )))
).then(
  () => undefined,
  (error) => {
    process.stderr.write(String(error) + "\n")
    process.exit(1)
  }
)
