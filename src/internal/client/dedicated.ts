/** @internal Dedicated connections, for blocking commands, and dropping a connection for good. */
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import { Cluster, Redis as IORedisClient } from "ioredis"
import type { Redis as IORedis } from "ioredis"
import type * as Redis from "../../Redis.js"
import { redisError, watch } from "../errors.js"
import { masterOf } from "./cluster.js"

/**
 * @internal A connection of its own for blocking commands on `key`, connected for the scope, with its server-side
 * id; dropped at the end. On a standalone client, a duplicate; on a cluster, a connection to the master
 * serving `key`'s slot now. `kill` sends `CLIENT KILL ID` over `killer` (a connection to the same server,
 * within the service's deadline), then drops the socket.
 */
export const dedicated = (
  client: IORedis | Cluster,
  killer: (id: number, via: IORedis | undefined) => Effect.Effect<unknown, Redis.RedisError>
) =>
(key: string): Effect.Effect<Redis.Dedicated, Redis.RedisError, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.suspend(() => {
      // The connection's last reported error: a connect that failed fails with it.
      let last: (() => unknown) | undefined
      return Effect.tryPromise({
        try: async () => {
          // Never reconnected, never re-sent: a blocking command re-sent after `CLIENT KILL` could still
          // move a message after its owner gave the connection up.
          // No command timeout of the parent's either: a blocking command waits as long as it says.
          const own = {
            lazyConnect: true,
            autoResendUnfulfilledCommands: false,
            retryStrategy: () => null,
            commandTimeout: undefined,
            socketTimeout: undefined
          } as const
          let via: IORedis | undefined
          let connection: IORedis
          if (client instanceof Cluster) {
            via = masterOf(client, key)
            connection = new IORedisClient(via.options.port ?? 6379, via.options.host ?? "127.0.0.1", {
              ...client.options.redisOptions,
              ...own
            })
          } else {
            connection = client.duplicate(own)
          }
          const watched = last = watch(connection)
          try {
            await connection.connect()
            return { connection, id: Number(await connection.client("ID")), via, last: watched }
          } catch (cause) {
            connection.disconnect()
            throw cause
          }
        },
        catch: (cause) => redisError("connect (dedicated)", cause, last)
      })
    }),
    ({ connection }) => Effect.sync(() => drop(connection))
  ).pipe(
    Effect.map(({ connection, id, last, via }) => ({
      id,
      command: (name: string, args: ReadonlyArray<string | number>) =>
        Effect.tryPromise({
          try: () => connection.call(name, ...args),
          catch: (cause) => redisError(name, cause, last)
        }),
      close: Effect.sync(() => drop(connection)),
      kill: Effect.ensuring(Effect.ignore(killer(id, via)), Effect.sync(() => drop(connection)))
    }))
  )

/**
 * @internal Stops a connection for good. `disconnect` only half-closes the socket (FIN), which a hung server
 * never answers, so the socket would linger and keep the process alive: destroy it too.
 */
export const drop = (connection: IORedis) => {
  connection.disconnect()
  connection.stream?.destroy()
}
