/** @internal */
import { createHash } from "node:crypto"
import * as Config from "effect/Config"
import type * as ConfigError from "effect/ConfigError"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { Redis as IORedis } from "ioredis"
import type { Cluster, RedisOptions } from "ioredis"
import * as Capability from "../Capability.js"
import * as Redis from "../Redis.js"
import { toMillis } from "./duration.js"

/** @internal */
export const script = (options: { readonly name: string; readonly lua: string; readonly keys: number }): Redis.Script =>
  Object.freeze({ ...options, sha1: createHash("sha1").update(options.lua).digest("hex") })

const messageOf = (cause: unknown): string => cause instanceof Error ? cause.message : String(cause)

/** @internal Sorts an ioredis or server failure into a reason. */
export const reasonOf = (cause: unknown): Redis.RedisErrorReason => {
  const message = messageOf(cause)
  if (message.startsWith("Command timed out")) return "Timeout"
  if (message.startsWith("READONLY")) return "ReadOnly"
  if (message.startsWith("OOM")) return "OutOfMemory"
  if (
    message.startsWith("Connection is closed") || message.startsWith("Reached the max retries") ||
    message.startsWith("Stream isn't writeable") || message.startsWith("connect ") || message.includes("ECONN") ||
    message.includes("EPIPE") || message.includes("ETIMEDOUT") || message.startsWith("LOADING")
  ) return "Connection"
  if (message.includes("user_script") || message.startsWith("NOSCRIPT") || message.includes("Error running script")) {
    return "Script"
  }
  return "Server"
}

/** @internal */
export const redisError = (operation: string, cause: unknown): Redis.RedisError =>
  new Redis.RedisError({ reason: reasonOf(cause), operation, cause })

const isNoScript = (cause: unknown) => messageOf(cause).startsWith("NOSCRIPT")

/** @internal Wraps a client the caller owns. */
export const make = (client: IORedis | Cluster): Redis.Redis => {
  const send = (operation: string, run: () => Promise<unknown>) =>
    Effect.tryPromise({ try: run, catch: (cause) => redisError(operation, cause) })
  return {
    [Redis.TypeId]: Redis.TypeId,
    script: (script, keys, args) => {
      if (keys.length !== script.keys) {
        return Effect.dieMessage(`wakuwaku: script ${script.name} declares ${script.keys} keys, got ${keys.length}`)
      }
      const operation = `script ${script.name}`
      return Effect.tryPromise({
        try: () => client.evalsha(script.sha1, script.keys, ...keys, ...args),
        catch: (cause) => cause
      }).pipe(
        Effect.catchAll((cause) =>
          isNoScript(cause)
            ? send(operation, () => client.eval(script.lua, script.keys, ...keys, ...args))
            : Effect.fail(redisError(operation, cause))
        )
      )
    },
    command: (name, args) => send(name, () => client.call(name, ...args))
  }
}

const defaults = {
  commandTimeout: "2 seconds",
  connectTimeout: "2 seconds",
  quitTimeout: "1 second"
} as const

/** @internal The ioredis options an owned client gets: our defaults, then the caller's options. */
export const clientOptions = (options: Redis.Options): RedisOptions => {
  const { commandTimeout, connectTimeout, quitTimeout: _, url: __, ...rest } = options
  return {
    maxRetriesPerRequest: 1,
    enableOfflineQueue: true,
    autoResendUnfulfilledCommands: false,
    ...rest,
    lazyConnect: true,
    commandTimeout: toMillis(commandTimeout ?? defaults.commandTimeout),
    connectTimeout: toMillis(connectTimeout ?? defaults.connectTimeout)
  }
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
        Effect.tapError(() => Effect.sync(() => client.disconnect())),
        Effect.as(client)
      )
    }),
    (client) =>
      Effect.tryPromise(() => client.quit()).pipe(
        Effect.timeout(options.quitTimeout ?? defaults.quitTimeout),
        Effect.ignore,
        Effect.ensuring(Effect.sync(() => client.disconnect()))
      )
  )

const owned = (options: Redis.Options) =>
  Layer.scoped(Redis.Redis, Effect.map(acquireClient(options), make))

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
  Layer.merge(Layer.succeed(Redis.Redis, make(client)), Capability.ReadWrite)

/** @internal */
export const layerClientReadOnly = (client: IORedis | Cluster): Layer.Layer<Redis.ReadOnly> =>
  Layer.merge(Layer.succeed(Redis.Redis, make(client)), Capability.ReadOnly)

