/**
 * @internal The `Redis` service's layers (an owned client, an adopted one, a cluster; each granting
 * read-write or read-only) and the prelude of every operation: the service, once the capability in scope
 * has been checked.
 */
import * as Config from "effect/Config"
import type * as ConfigError from "effect/ConfigError"
import * as Context from "effect/Context"
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import type * as Scope from "effect/Scope"
import { Cluster, Redis as IORedis } from "ioredis"
import type { RedisOptions } from "ioredis"
import * as Capability from "../Capability.js"
import type * as Redis from "../Redis.js"
import type * as Script from "../Script.js"
import { allows, type Keys, keys, type Verb, violation } from "./capability.js"
import * as client_ from "./client.js"
import { drop } from "./client/dedicated.js"
import { toMillis } from "./duration.js"
import { redisError, watch } from "./errors.js"
import { type ScriptOn, ScriptOnId } from "./script.js"
import * as core from "./service.js"
import { parseRedisUrl } from "./url.js"

/** @internal Wraps a client the caller owns, with the client's own options. */
export const make = (client: IORedis | Cluster): Redis.Service => client_.make(client)

const defaults = {
  commandTimeout: "2 seconds",
  connectTimeout: "2 seconds",
  clusterConnectTimeout: "5 seconds",
  quitTimeout: "1 second"
} as const

const reveal = (value: string | Redacted.Redacted<string> | undefined): string | undefined =>
  value === undefined || typeof value === "string" ? value : Redacted.value(value)

/** What ioredis needs of a URL's parts; the URL's query comes first, its own parts win over it. */
const fromUrl = (url: string): RedisOptions => {
  const { db, host, password, port, query, tls, username } = parseRedisUrl(url)
  return {
    ...query,
    host,
    port,
    ...(username === undefined ? {} : { username }),
    ...(password === undefined ? {} : { password }),
    ...(db === undefined ? {} : { db }),
    ...(tls ? { tls: {} } : {})
  }
}

/**
 * @internal The ioredis options an owned client gets: our defaults, then the URL's parts (read by the one
 * parser of Redis URLs, ./url.ts), then the options given beside it. Throws a `TypeError`, the URL masked,
 * on a URL that cannot be used.
 */
export const clientOptions = (options: Redis.Options): RedisOptions => {
  const { commandTimeout: _, connectTimeout, password, quitTimeout: __, url, ...rest } = options
  const revealed = reveal(password)
  const shown = reveal(url)
  return {
    maxRetriesPerRequest: 1,
    enableOfflineQueue: true,
    autoResendUnfulfilledCommands: false,
    ...(shown === undefined ? {} : fromUrl(shown)),
    ...rest,
    ...(revealed === undefined ? {} : { password: revealed }),
    lazyConnect: true,
    // The command timeout is kept by the service (see Deadlines), not by ioredis.
    connectTimeout: toMillis(connectTimeout ?? defaults.connectTimeout)
  }
}

/** An owned client, the last error its connection reported (see `watch`), and why it was down at start. */
interface Watched<C> {
  readonly client: C
  readonly last: () => unknown
  /** Only with `tolerateDown`: the failure of the first connect, when it failed; the client keeps trying. */
  readonly down: Redis.RedisError | undefined
}

/** @internal Failures that are a misconfiguration, not an outage: trying again cannot help. */
export const isMisconfiguration = (error: Redis.RedisError): boolean =>
  error.reason === "Authentication" || error.reason === "Url"

/**
 * An owned client (a connection or a cluster): connected in the scope within `connectTimeout` (the TCP
 * connect, then the ready check), quit when it closes, within `quitTimeout`, then dropped for good. A
 * connection it could not make fails with the last error the connection reported: the socket's
 * (`ECONNREFUSED`, `ENOTFOUND`), or the server's refusal of the credentials (`WRONGPASS`, `NOAUTH`).
 * With `tolerateDown`, a server that cannot be reached does not fail it: the client keeps reconnecting
 * (a misconfiguration still fails it).
 */
const connected = <C extends IORedis | Cluster>(
  create: () => C,
  connectTimeout: Duration.DurationInput,
  quitTimeout: Duration.DurationInput,
  notReady: string,
  tolerateDown = false
): Effect.Effect<Watched<C>, Redis.RedisError, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.suspend(() => {
      const client = create()
      const stop = () => client instanceof Cluster ? client.disconnect() : drop(client)
      const last = watch(client)
      const timeout = toMillis(connectTimeout)
      return Effect.tryPromise({
        try: () => client.connect(),
        catch: (cause) => redisError("connect", cause, last)
      }).pipe(
        // acquireRelease runs this uninterruptibly; the wait itself may be cut short by the timeout.
        Effect.interruptible,
        Effect.timeoutFail({
          duration: timeout,
          onTimeout: () => redisError("connect", new Error(`connect ETIMEDOUT: ${notReady} within ${timeout} ms`))
        }),
        Effect.as<Redis.RedisError | undefined>(undefined),
        Effect.catchIf((error) => tolerateDown && !isMisconfiguration(error), Effect.succeed),
        // Failed, timed out or interrupted: stop the client, or it would go on reconnecting.
        Effect.onExit((exit) => Exit.isSuccess(exit) ? Effect.void : Effect.sync(stop)),
        Effect.map((down) => ({ client, stop, last, down }))
      )
    }),
    ({ client, stop }) =>
      Effect.tryPromise(() => client.quit()).pipe(
        // Finalizers run uninterruptibly; the wait for QUIT's reply must be cut short by the timeout.
        Effect.interruptible,
        Effect.timeout(quitTimeout),
        Effect.ignore,
        Effect.ensuring(Effect.sync(stop))
      )
  ).pipe(Effect.map(({ client, down, last }) => ({ client, last, down })))

/**
 * @internal An owned client: connected in the scope, quit (with a timeout) when it closes. With
 * `tolerateDown`, one that need not answer at start (see `connected`).
 */
export const acquireClient = (
  options: Redis.Options,
  tolerateDown = false
): Effect.Effect<Watched<IORedis>, Redis.RedisError, Scope.Scope> =>
  Effect.flatMap(
    Effect.try({
      try: () => clientOptions(options),
      catch: (cause) => new core.RedisError({ reason: "Url", operation: "connect", cause })
    }),
    (resolved) =>
      connected(
        () => new IORedis(resolved),
        options.connectTimeout ?? defaults.connectTimeout,
        options.quitTimeout ?? defaults.quitTimeout,
        "not ready",
        tolerateDown
      )
  )

/**
 * @internal The service over an owned client that need not answer at start: the client keeps reconnecting
 * in the background, and the failure of its first connect, if any, is returned beside the service. A
 * misconfiguration (a refused password, a URL that cannot be used) fails it.
 */
export const acquireTolerant = (
  options: Redis.Options
): Effect.Effect<
  { readonly layer: Layer.Layer<Redis.ReadWrite>; readonly down: Redis.RedisError | undefined },
  Redis.RedisError,
  Scope.Scope
> =>
  Effect.map(acquireClient(options, true), ({ client, down, last }) => ({
    layer: Layer.merge(
      Layer.succeed(
        core.Redis,
        client_.make(
          client,
          new client_.Deadlines(toMillis(options.commandTimeout ?? defaults.commandTimeout)),
          last
        )
      ),
      Capability.ReadWrite
    ),
    down
  }))

/** The service over an owned client, with command deadlines. */
const owned = <E>(
  acquire: Effect.Effect<Watched<IORedis | Cluster>, E, Scope.Scope>,
  commandTimeout: Duration.DurationInput | undefined
) =>
  Layer.scoped(
    core.Redis,
    Effect.map(
      acquire,
      ({ client, last }) =>
        client_.make(client, new client_.Deadlines(toMillis(commandTimeout ?? defaults.commandTimeout)), last)
    )
  )

const grants = (access: "ReadWrite" | "ReadOnly") => access === "ReadWrite" ? Capability.ReadWrite : Capability.ReadOnly

/** @internal */
export const layer = (options: Redis.Options = {}): Layer.Layer<Redis.ReadWrite, Redis.RedisError> =>
  Layer.merge(owned(acquireClient(options), options.commandTimeout), Capability.ReadWrite)

/** @internal */
export const layerReadOnly = (options: Redis.Options = {}): Layer.Layer<Redis.ReadOnly, Redis.RedisError> =>
  Layer.merge(owned(acquireClient(options), options.commandTimeout), Capability.ReadOnly)

/** @internal */
export const layerConfig = (
  config: Config.Config.Wrap<Redis.Options> = { url: Config.redacted("REDIS_URL") }
): Layer.Layer<Redis.ReadWrite, Redis.RedisError | ConfigError.ConfigError> =>
  Layer.unwrapEffect(Effect.map(Config.unwrap(config), layer))

/** @internal */
export const layerClient = (client: IORedis | Cluster): Layer.Layer<Redis.ReadWrite> =>
  Layer.merge(Layer.succeed(core.Redis, client_.make(client)), Capability.ReadWrite)

/** @internal */
export const layerClientReadOnly = (client: IORedis | Cluster): Layer.Layer<Redis.ReadOnly> =>
  Layer.merge(Layer.succeed(core.Redis, client_.make(client)), Capability.ReadOnly)

/** @internal An owned cluster client: connected in the scope (ready), quit (with a timeout) when it closes. */
export const layerCluster = <Access extends "ReadWrite" | "ReadOnly">(
  options: Redis.ClusterOptions,
  access: Access
): Layer.Layer<Access extends "ReadWrite" ? Redis.ReadWrite : Redis.ReadOnly, Redis.RedisError> => {
  const { commandTimeout, connectTimeout, nodes, quitTimeout, redisOptions, ...rest } = options
  const timeout = connectTimeout ?? defaults.clusterConnectTimeout
  const acquire = connected(
    () =>
      new Cluster([...nodes], {
        enableOfflineQueue: true,
        ...rest,
        lazyConnect: true,
        scaleReads: access === "ReadOnly" ? "slave" : "master",
        redisOptions: {
          maxRetriesPerRequest: 1,
          autoResendUnfulfilledCommands: false,
          ...redisOptions,
          connectTimeout: toMillis(timeout)
        }
      }),
    timeout,
    quitTimeout ?? defaults.quitTimeout,
    "the cluster was not ready"
  )
  return Layer.merge(owned(acquire, commandTimeout), grants(access)) as Layer.Layer<
    never,
    Redis.RedisError
  > as Layer.Layer<Access extends "ReadWrite" ? Redis.ReadWrite : Redis.ReadOnly, Redis.RedisError>
}

// The prelude of every operation.

const cache = { read: new Map<string, Keys>(), write: new Map<string, Keys>() }

const keysOf = (verb: Verb, entity: Capability.AnyEntity): Keys => {
  let found = cache[verb].get(entity.kind)
  if (found === undefined) cache[verb].set(entity.kind, found = keys(verb, entity))
  return found
}

const checked = <A, Err>(
  verb: Verb,
  entity: Capability.AnyEntity,
  f: (redis: Redis.Service) => Effect.Effect<A, Err>
) => {
  const needed = keysOf(verb, entity)
  return Effect.contextWithEffect((context: Context.Context<never>) =>
    allows(context, needed)
      ? f(Context.unsafeGet(context as Context.Context<Redis.Redis>, core.Redis))
      : violation(needed, context)
  )
}

/**
 * @internal Runs `f` with the Redis service, in one step of the fiber, once the grant in scope is checked to
 * allow writing `entity`.
 */
export const write = <E extends Capability.AnyEntity, A, Err>(
  entity: E,
  f: (redis: Redis.Service) => Effect.Effect<A, Err>
): Effect.Effect<A, Err, Redis.Redis | Capability.Write<E>> => checked("write", entity, f)

/** @internal {@link write}, for reading. */
export const read = <E extends Capability.AnyEntity, A, Err>(
  entity: E,
  f: (redis: Redis.Service) => Effect.Effect<A, Err>
): Effect.Effect<A, Err, Redis.Redis | Capability.Read<E>> => checked("read", entity, f)

/**
 * @internal `write(entity, (redis) => redis.script(script, keys, args))` in one step of the fiber: the hot
 * path of every limiter. A service over a client runs the script on the fiber it is handed
 * (`client.scriptOn`), so the capability check, the batching and the wait are one suspension.
 */
export const writeScript = <E extends Capability.AnyEntity, A>(
  entity: E,
  script: Script.Script<A>,
  keys: ReadonlyArray<string>,
  args: ReadonlyArray<string>
): Effect.Effect<A, Redis.RedisError, Redis.Redis | Capability.Write<E>> => {
  const needed = keysOf("write", entity)
  return Effect.withFiberRuntime((fiber, status) => {
    const context = fiber.currentContext
    if (!allows(context, needed)) return violation(needed, context)
    const redis = Context.unsafeGet(context as Context.Context<Redis.Redis>, core.Redis)
    const fast = (redis as Partial<ScriptOn>)[ScriptOnId]
    return fast !== undefined && fast.script === redis.script
      ? fast.on(fiber, status, script, keys, args)
      : redis.script(script, keys, args)
  })
}
