/** @internal */
import * as Config from "effect/Config"
import type * as ConfigError from "effect/ConfigError"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import { Cluster, Redis as IORedis } from "ioredis"
import type { RedisOptions } from "ioredis"
import * as Capability from "../Capability.js"
import * as Redis from "../Redis.js"
import * as client_ from "./client.js"
import { toMillis } from "./duration.js"
import { redisError } from "./errors.js"

/** @internal Wraps a client the caller owns, with the client's own options. */
export const make = (client: IORedis | Cluster): Redis.Service => client_.make(client)

const defaults = {
  commandTimeout: "2 seconds",
  connectTimeout: "2 seconds",
  quitTimeout: "1 second"
} as const

/** @internal The ioredis options an owned client gets: our defaults, then the caller's options. */
export const clientOptions = (options: Redis.Options): RedisOptions => {
  const { commandTimeout: _, connectTimeout, quitTimeout: __, url: ___, ...rest } = options
  return {
    maxRetriesPerRequest: 1,
    enableOfflineQueue: true,
    autoResendUnfulfilledCommands: false,
    ...rest,
    lazyConnect: true,
    // The command timeout is kept by the service (see Deadlines), not by ioredis.
    connectTimeout: toMillis(connectTimeout ?? defaults.connectTimeout)
  }
}

/**
 * Stops a client for good. `disconnect` only half-closes the socket (FIN), which a hung server never
 * answers, so the socket would linger and keep the process alive: destroy it too.
 */
const drop = (client: IORedis) => {
  client.disconnect()
  client.stream?.destroy()
}

/** @internal An owned client: connected in the scope, quit (with a timeout) when it closes. */
export const acquireClient = (options: Redis.Options) =>
  Effect.acquireRelease(
    Effect.suspend(() => {
      const client = options.url === undefined
        ? new IORedis(clientOptions(options))
        : new IORedis(options.url, clientOptions(options))
      // Failures surface as typed errors of the commands; without a listener ioredis would print them.
      client.on("error", () => {})
      // The whole connect phase (TCP connect, then the ready check) is bounded by connectTimeout.
      const timeout = toMillis(options.connectTimeout ?? defaults.connectTimeout)
      return Effect.tryPromise({ try: () => client.connect(), catch: (cause) => redisError("connect", cause) }).pipe(
        // acquireRelease runs this uninterruptibly; the wait itself may be cut short by the timeout.
        Effect.interruptible,
        Effect.timeoutFail({
          duration: timeout,
          onTimeout: () => redisError("connect", new Error(`connect ETIMEDOUT: not ready within ${timeout} ms`))
        }),
        // Failed, timed out or interrupted: stop the client, or it would go on reconnecting.
        Effect.onExit((exit) => Exit.isSuccess(exit) ? Effect.void : Effect.sync(() => drop(client))),
        Effect.as(client)
      )
    }),
    (client) =>
      Effect.tryPromise(() => client.quit()).pipe(
        // Finalizers run uninterruptibly; the wait for QUIT's reply must be cut short by the timeout.
        Effect.interruptible,
        Effect.timeout(options.quitTimeout ?? defaults.quitTimeout),
        Effect.ignore,
        Effect.ensuring(Effect.sync(() => drop(client)))
      )
  )

const owned = (options: Redis.Options) =>
  Layer.scoped(
    Redis.Redis,
    Effect.flatMap(acquireClient(options), (client) =>
      Effect.map(
        Effect.acquireRelease(
          Effect.sync(() => new client_.Deadlines(toMillis(options.commandTimeout ?? defaults.commandTimeout))),
          (deadlines) => Effect.sync(() => deadlines.close())
        ),
        (deadlines) => client_.make(client, deadlines)
      ))
  )

/** @internal */
export const layer = (options: Redis.Options = {}): Layer.Layer<Redis.ReadWrite, Redis.RedisError> =>
  Layer.merge(owned(options), Capability.ReadWrite)

/** @internal */
export const layerReadOnly = (options: Redis.Options = {}): Layer.Layer<Redis.ReadOnly, Redis.RedisError> =>
  Layer.merge(owned(options), Capability.ReadOnly)

/** @internal */
export const layerConfig = (
  options: Omit<Redis.Options, "url"> = {}
): Layer.Layer<Redis.ReadWrite, Redis.RedisError | ConfigError.ConfigError> =>
  Layer.unwrapEffect(Effect.map(Config.string("REDIS_URL"), (url) => layer({ ...options, url })))

/** @internal */
export const layerClient = (client: IORedis | Cluster): Layer.Layer<Redis.ReadWrite> =>
  Layer.merge(Layer.succeed(Redis.Redis, client_.make(client)), Capability.ReadWrite)

/** @internal */
export const layerClientReadOnly = (client: IORedis | Cluster): Layer.Layer<Redis.ReadOnly> =>
  Layer.merge(Layer.succeed(Redis.Redis, client_.make(client)), Capability.ReadOnly)

/** @internal An owned cluster client: connected in the scope (ready), quit (with a timeout) when it closes. */
export const layerCluster = <Access extends "ReadWrite" | "ReadOnly">(
  options: Redis.ClusterOptions,
  access: Access
): Layer.Layer<Access extends "ReadWrite" ? Redis.ReadWrite : Redis.ReadOnly, Redis.RedisError> => {
  const { commandTimeout, connectTimeout, nodes, quitTimeout, redisOptions, ...rest } = options
  const timeout = toMillis(connectTimeout ?? "5 seconds")
  const acquire = Effect.acquireRelease(
    Effect.suspend(() => {
      const cluster = new Cluster([...nodes], {
        enableOfflineQueue: true,
        ...rest,
        lazyConnect: true,
        scaleReads: access === "ReadOnly" ? "slave" : "master",
        redisOptions: {
          maxRetriesPerRequest: 1,
          autoResendUnfulfilledCommands: false,
          ...redisOptions,
          connectTimeout: timeout
        }
      })
      cluster.on("error", () => {})
      return Effect.tryPromise({ try: () => cluster.connect(), catch: (cause) => redisError("connect", cause) }).pipe(
        Effect.interruptible,
        Effect.timeoutFail({
          duration: timeout,
          onTimeout: () =>
            redisError("connect", new Error(`connect ETIMEDOUT: the cluster was not ready within ${timeout} ms`))
        }),
        Effect.onExit((exit) => Exit.isSuccess(exit) ? Effect.void : Effect.sync(() => cluster.disconnect())),
        Effect.as(cluster)
      )
    }),
    (cluster) =>
      Effect.tryPromise(() => cluster.quit()).pipe(
        Effect.interruptible,
        Effect.timeout(quitTimeout ?? defaults.quitTimeout),
        Effect.ignore,
        Effect.ensuring(Effect.sync(() => cluster.disconnect()))
      )
  )
  const service = Layer.scoped(
    Redis.Redis,
    Effect.flatMap(acquire, (cluster) =>
      Effect.map(
        Effect.acquireRelease(
          Effect.sync(() => new client_.Deadlines(toMillis(commandTimeout ?? defaults.commandTimeout))),
          (deadlines) => Effect.sync(() => deadlines.close())
        ),
        (deadlines) => client_.make(cluster, deadlines)
      ))
  )
  return Layer.merge(service, access === "ReadWrite" ? Capability.ReadWrite : Capability.ReadOnly) as Layer.Layer<
    never,
    Redis.RedisError
  > as Layer.Layer<Access extends "ReadWrite" ? Redis.ReadWrite : Redis.ReadOnly, Redis.RedisError>
}
