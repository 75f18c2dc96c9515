/**
 * The `Redis` service: the one door through which every structure talks to Redis.
 *
 * Structures never hold a client. Their operations are Effects that need `Redis` (plus a
 * {@link Capability} for what they touch), and a layer decides which server answers:
 *
 * - {@link layer}: an owned ioredis client for a primary; grants `Capability.ReadWrite`.
 * - {@link layerReadOnly}: an owned client for a replica; grants only `Capability.ReadOnly`, so a
 *   program that writes through it does not compile.
 * - {@link layerConfig}: {@link layer} with its options read through Effect `Config` (by default the URL,
 *   from `REDIS_URL`).
 * - {@link layerClient} / {@link layerClientReadOnly}: adopt a client you already own; the layer never
 *   quits it, and it keeps its own options (ioredis's defaults have no command timeout and re-send a
 *   command whose reply was lost).
 * - {@link layerMemory} / {@link layerMemoryReadOnly}: no server at all: the embedded backend, in this
 *   process's memory, with the same semantics (a TypeScript twin of every script) and time on Effect's
 *   `Clock`, for tests under `TestClock` and single-process use. It is not shared across processes.
 *
 * **What lives in Redis.** Every key the library writes is `@@wakuwaku:<Kind>:<namespace>:<name>`.
 * An item made of several keys wraps `{<namespace>:<name>}` as a Redis Cluster hash tag and adds a
 * suffix per key (`@@wakuwaku:<Kind>:{<namespace>:<name>}:<suffix>`), so all its keys share one slot.
 * Every key carries a TTL.
 *
 * **Scripts** are `Script` definitions: the Lua, the twin the embedded backend runs instead, and the
 * reply's decoder. They run by EVALSHA, and by EVAL once when the server answers NOSCRIPT (after a
 * restart or a `SCRIPT FLUSH`). Every key a script touches arrives through KEYS. Calls of a script that
 * has a `many` variant, made while other calls are in flight on the connection, are sent together as
 * one call of that variant (at most 32), each still getting its own reply; a lone call on an idle
 * connection goes at once.
 *
 * **Client defaults, chosen for a limiter** (each can be overridden in {@link Options}):
 * - `commandTimeout` 2 s: a command that gets no reply fails with `RedisError` (reason `Timeout`)
 *   instead of hanging, within about a tenth more of the timeout. The command may still have run on the
 *   server. The service keeps this deadline itself (one interval per connection), not ioredis, whose
 *   per-command timer cost more than the rest of a call.
 * - `connectTimeout` 2 s; an owned client connects while the layer is built, so an unreachable server
 *   fails the layer with `RedisError` (reason `Connection`, with the socket's error: `connect
 *   ECONNREFUSED …`), and a refused password with reason `Authentication` (`WRONGPASS …`).
 * - `autoResendUnfulfilledCommands: false`: ioredis by default re-sends, after a reconnect, a command
 *   whose reply was lost, which can run a script twice (spend tokens twice). Here such a command is
 *   never sent again: it fails with `Timeout`, and the caller decides. Paired with the command
 *   timeout, as it must be, or the promise would never settle.
 * - `maxRetriesPerRequest: 1` and the offline queue on: a command issued while the client reconnects
 *   waits for at most one reconnection, and never longer than the command timeout.
 *
 * Failures are typed: every server or connection failure is a {@link RedisError} carrying the command
 * or script and the cause; bad arguments are {@link InvalidInput}, detected before anything is sent.
 *
 * @since 0.1.0
 */
import type * as Cause from "effect/Cause"
import type * as Config from "effect/Config"
import type * as ConfigError from "effect/ConfigError"
import type * as Context from "effect/Context"
import type * as Duration from "effect/Duration"
import type * as Effect from "effect/Effect"
import type * as Layer from "effect/Layer"
import type * as Redacted from "effect/Redacted"
import type * as Schema from "effect/Schema"
import type * as Scope from "effect/Scope"
import type {
  Cluster,
  ClusterNode,
  ClusterOptions as IORedisClusterOptions,
  Redis as IORedis,
  RedisOptions
} from "ioredis"
import type * as Capability from "./Capability.js"
import * as memory from "./internal/memory.js"
import * as internal from "./internal/redis.js"
import * as service from "./internal/service.js"
import type * as Script from "./Script.js"

/**
 * @since 0.1.0
 * @category type ids
 */
export const TypeId: unique symbol = service.TypeId

/**
 * @since 0.1.0
 * @category type ids
 */
export type TypeId = typeof TypeId

/**
 * A name of an item: a string, a number (a safe integer), a bigint or bytes. Each encodes canonically
 * into the key: strings as they are, integers in decimal (so `42` and `42n` are one name), bytes in
 * lowercase hex. Give each structure one name type; a union such as `string | number` lets `"42"` and
 * `42` share an item.
 *
 * @since 0.1.0
 * @category models
 */
export type KeyName = string | number | bigint | Uint8Array

/**
 * The service: what every structure needs of Redis.
 *
 * @since 0.1.0
 * @category models
 */
export interface Service {
  readonly [TypeId]: TypeId
  /**
   * Runs a script: EVALSHA, and EVAL on NOSCRIPT (on the embedded backend, its twin), and decodes the
   * reply with the script's decoder (a reply it rejects fails with reason `Reply`). `keys.length` must
   * equal `script.keys`. `Script.run` is this, with the service from the context.
   */
  readonly script: <A>(
    script: Script.Script<A>,
    keys: ReadonlyArray<string>,
    args: ReadonlyArray<string>
  ) => Effect.Effect<A, RedisError>
  /**
   * Runs one plain command, such as `DEL` or `PTTL`.
   */
  readonly command: (name: string, args: ReadonlyArray<string | number>) => Effect.Effect<unknown, RedisError>
  /**
   * A connection of its own for blocking commands (BLMOVE) on `key` (and keys in its hash slot), held
   * for the scope: a blocking command on the shared connection would stall every other command behind
   * it. It has no command deadline. On a cluster it is a connection to the master that serves `key`'s
   * slot when it opens; a slot that moves later fails its commands (reason `Connection` or `Server`).
   */
  readonly dedicated: (key: string) => Effect.Effect<Dedicated, RedisError, Scope.Scope>
}

/**
 * A dedicated connection.
 *
 * @since 0.1.0
 * @category models
 */
export interface Dedicated {
  /** The connection's id on the server (`CLIENT ID`), for `CLIENT KILL ID` from another connection. */
  readonly id: number
  /** Runs one command on this connection, with no deadline: a blocking command waits as long as it says. */
  readonly command: (name: string, args: ReadonlyArray<string | number>) => Effect.Effect<unknown, RedisError>
  /** Closes the connection now, on this side (the scope closes it anyway). */
  readonly close: Effect.Effect<void>
  /**
   * Ends the connection on the server too: `CLIENT KILL ID` sent over another connection to the same
   * server, so that a blocking command already on this socket can no longer take anything (closing the
   * socket alone does not stop it). Closes this side as well, and falls back to that alone when the kill
   * fails (no CLIENT permission, a server that does not answer).
   */
  readonly kill: Effect.Effect<void>
}

/**
 * The tag of the {@link Service}.
 *
 * @since 0.1.0
 * @category tags
 */
export interface Redis {
  readonly Redis: unique symbol
}

/**
 * The tag of the {@link Service}: `yield* Redis.Redis` gives the service.
 *
 * @since 0.1.0
 * @category tags
 */
export const Redis: Context.Tag<Redis, Service> = service.Redis

/**
 * Why a Redis call failed.
 *
 * - `Connection`: the server could not be reached (while connecting, or a command issued while
 *   disconnected ran out of reconnection attempts). The cause is the socket's own error when there is
 *   one: `connect ECONNREFUSED 127.0.0.1:6379`, `getaddrinfo ENOTFOUND redis`, `connect ETIMEDOUT`.
 * - `Authentication`: the server refused the credentials (`WRONGPASS …`), or wants some (`NOAUTH …`).
 *   A misconfiguration, not an outage: retrying does not help.
 * - `Url`: the URL cannot be used (not a `redis://` or `rediss://` URL, or not one that parses to a
 *   host, a port and a database); found before anything is sent.
 * - `Timeout`: no reply within `commandTimeout`, which is also what a reply lost to a dropped
 *   connection gives (it is never re-sent); the command may still have run. The message adds what the
 *   connection last reported, if anything: `Command timed out after 2000 ms (the connection: …)`.
 * - `ReadOnly`: a write reached a read-only replica (`READONLY …`).
 * - `OutOfMemory`: the server is over `maxmemory` with a no-eviction policy (`OOM …`).
 * - `Script`: the server rejected or failed a script (`ERR …` from Lua).
 * - `Reply`: the server answered with something this library did not expect.
 * - `Server`: every other error reply.
 *
 * @since 0.1.0
 * @category errors
 */
export type RedisErrorReason = RedisErrorReasonSchema["Type"]

/**
 * The type of the schema {@link RedisErrorReason}.
 *
 * @since 0.1.0
 * @category errors
 */
export type RedisErrorReasonSchema = Schema.Literal<
  ["Connection", "Authentication", "Url", "Timeout", "ReadOnly", "OutOfMemory", "Script", "Reply", "Server"]
>

/**
 * The schema of {@link RedisErrorReason}.
 *
 * @since 0.1.0
 * @category errors
 */
export const RedisErrorReason: RedisErrorReasonSchema = service.RedisErrorReason

/**
 * A server or connection failure. Never a defect: it is in the error channel. A `Schema.TaggedError`,
 * so it crosses an API boundary (`cause` travels as `Schema.Defect` encodes it). Its message is the
 * operation, the reason and the server's or the socket's words:
 * `Redis connect failed (Authentication): WRONGPASS invalid username-password pair or user is disabled.`
 * Neither the message nor the cause holds a password: a URL in them is masked (`redis://***@host`), and
 * an authentication failure's cause does not keep the AUTH command ioredis sent.
 *
 * @since 0.1.0
 * @category errors
 */
export interface RedisError extends Cause.YieldableError {
  readonly _tag: "RedisError"
  /** Why it failed. */
  readonly reason: RedisErrorReason
  /** The command, or `script <name>`, or `connect`. */
  readonly operation: string
  /** What ioredis or the server said. */
  readonly cause: unknown
}

/**
 * The class of {@link RedisError}: `new Redis.RedisError({ reason, operation, cause })`, and its schema.
 *
 * @since 0.1.0
 * @category errors
 */
export const RedisError: Schema.TaggedErrorClass<RedisError, "RedisError", {
  readonly _tag: Schema.tag<"RedisError">
  readonly reason: RedisErrorReasonSchema
  readonly operation: typeof Schema.String
  readonly cause: typeof Schema.Defect
}> = service.RedisError

/**
 * An argument that cannot be used: a cost that is not a non-negative safe integer, a name that cannot be
 * encoded. Detected before anything is sent, so nothing is written. A `Schema.TaggedError`.
 *
 * @since 0.1.0
 * @category errors
 */
export interface InvalidInput extends Cause.YieldableError {
  readonly _tag: "InvalidInput"
  /** The operation, such as `TokenBucket(login).acquire`. */
  readonly operation: string
  /** Which argument: `name`, `cost`, … */
  readonly argument: string
  /** What is wrong with it. */
  readonly message: string
}

/**
 * The class of {@link InvalidInput}: `new Redis.InvalidInput({ operation, argument, message })`, and its schema.
 *
 * @since 0.1.0
 * @category errors
 */
export const InvalidInput: Schema.TaggedErrorClass<InvalidInput, "InvalidInput", {
  readonly _tag: Schema.tag<"InvalidInput">
  readonly operation: typeof Schema.String
  readonly argument: typeof Schema.String
  readonly message: typeof Schema.String
}> = service.InvalidInput

/**
 * Options of the owned-client layers: ioredis options, with durations as `Duration`s.
 *
 * @since 0.1.0
 * @category models
 */
export interface Options extends Omit<RedisOptions, "commandTimeout" | "connectTimeout" | "lazyConnect" | "password"> {
  /**
   * `redis://[[user]:password@]host[:port][/db]` (`rediss://` for TLS), with a password percent-encoded
   * (`@` as `%40`, `/` as `%2F`); options given beside it win. A `Redacted` one (`Config.redacted`) stays
   * redacted: the library prints a URL only masked (`redis://***@host:6379`), either way.
   */
  readonly url?: string | Redacted.Redacted<string> | undefined
  /** The password, beside the URL or instead of its own; a `Redacted` one stays redacted. */
  readonly password?: string | Redacted.Redacted<string> | undefined
  /** How long a command may wait for its reply. Default 2 seconds. */
  readonly commandTimeout?: Duration.DurationInput | undefined
  /** How long connecting may take. Default 2 seconds. */
  readonly connectTimeout?: Duration.DurationInput | undefined
  /** How long closing the scope waits for QUIT before it drops the connection. Default 1 second. */
  readonly quitTimeout?: Duration.DurationInput | undefined
}

/**
 * Options of the cluster layers: ioredis `ClusterOptions`, with durations as `Duration`s, and the
 * startup nodes. The per-node options (`redisOptions`) get the same defaults as {@link layer}'s client.
 *
 * @since 0.1.0
 * @category models
 */
export interface ClusterOptions extends Omit<IORedisClusterOptions, "lazyConnect" | "scaleReads"> {
  /** Some of the cluster's nodes: `"host:port"`, a port, or `{ host, port }`; the rest are discovered. */
  readonly nodes: ReadonlyArray<ClusterNode>
  /** How long a command may wait for its reply. Default 2 seconds. */
  readonly commandTimeout?: Duration.DurationInput | undefined
  /** How long connecting (to a ready cluster) may take. Default 5 seconds. */
  readonly connectTimeout?: Duration.DurationInput | undefined
  /** How long closing the scope waits for QUIT before it drops the connections. Default 1 second. */
  readonly quitTimeout?: Duration.DurationInput | undefined
}

/**
 * What a read-write layer provides.
 *
 * @since 0.1.0
 * @category models
 */
export type ReadWrite = Redis | Capability.Read<Capability.AnyEntity> | Capability.Write<Capability.AnyEntity>

/**
 * What a read-only layer provides.
 *
 * @since 0.1.0
 * @category models
 */
export type ReadOnly = Redis | Capability.Read<Capability.AnyEntity>

/**
 * Wraps a client that the caller owns. Nothing quits it.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (client: IORedis | Cluster): Service => internal.make(client)

/**
 * An owned client for a primary: connects while the layer is built, quits when its scope closes.
 * Grants `Capability.ReadWrite`.
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = (options?: Options): Layer.Layer<ReadWrite, RedisError> => internal.layer(options)

/**
 * An owned client for a read-only replica. Grants only `Capability.ReadOnly`.
 *
 * @since 0.1.0
 * @category layers
 */
export const layerReadOnly = (options?: Options): Layer.Layer<ReadOnly, RedisError> => internal.layerReadOnly(options)

/**
 * {@link layer}, with its options read through Effect `Config`: each option a `Config` of its own (or
 * a plain value with `Config.succeed`), or one `Config` of them all. By default, the URL from
 * `REDIS_URL`, read as `Config.redacted`, and nothing else. The URL and the password are secrets: read
 * them with `Config.redacted`, as Effect's own clients do, and they never show in a log of the config.
 *
 * @example
 * ```ts
 * import { Config } from "effect"
 * import { Redis } from "wakuwaku"
 *
 * export const RedisLive = Redis.layerConfig({
 *   url: Config.redacted("REDIS_URL"),
 *   commandTimeout: Config.duration("REDIS_COMMAND_TIMEOUT").pipe(Config.withDefault("2 seconds"))
 * })
 *
 * // A URL without its password, and the password beside it.
 * export const RedisWithPassword = Redis.layerConfig({
 *   url: Config.string("REDIS_URL"),
 *   password: Config.redacted("REDIS_PASSWORD")
 * })
 * ```
 *
 * @since 0.1.0
 * @category layers
 */
export const layerConfig = (
  config?: Config.Config.Wrap<Options>
): Layer.Layer<ReadWrite, RedisError | ConfigError.ConfigError> => internal.layerConfig(config)

/**
 * Adopts a client the caller owns (it is never quit) for a primary. Grants `Capability.ReadWrite`.
 *
 * @since 0.1.0
 * @category layers
 */
export const layerClient = (client: IORedis | Cluster): Layer.Layer<ReadWrite> => internal.layerClient(client)

/**
 * Adopts a client the caller owns for a replica. Grants only `Capability.ReadOnly`.
 *
 * @since 0.1.0
 * @category layers
 */
export const layerClientReadOnly = (client: IORedis | Cluster): Layer.Layer<ReadOnly> =>
  internal.layerClientReadOnly(client)

/**
 * An owned ioredis `Cluster` over a Redis Cluster: connects while the layer is built, quits when its
 * scope closes. Grants `Capability.ReadWrite`. Every command and script goes to the master of its keys'
 * slot; a multi-key item's keys share one `{namespace:name}` hash tag, so no call can span slots. A
 * script unknown to a node (a restarted or flushed node) is sent again with EVAL to that node.
 *
 * @since 0.1.0
 * @category layers
 */
export const layerCluster = (options: ClusterOptions): Layer.Layer<ReadWrite, RedisError> =>
  internal.layerCluster(options, "ReadWrite")

/**
 * {@link layerCluster} reading from replicas (`scaleReads: "slave"`). Grants only `Capability.ReadOnly`.
 *
 * @since 0.1.0
 * @category layers
 */
export const layerClusterReadOnly = (options: ClusterOptions): Layer.Layer<ReadOnly, RedisError> =>
  internal.layerCluster(options, "ReadOnly")

/**
 * @since 0.1.0
 * @category type ids
 */
export const MemoryStoreTypeId: unique symbol = service.MemoryStoreTypeId

/**
 * @since 0.1.0
 * @category type ids
 */
export type MemoryStoreTypeId = typeof MemoryStoreTypeId

/**
 * A store of the memory backend: keys, values and TTLs in this process's memory. Every layer made
 * with it sees the same data; by default each memory layer makes its own.
 *
 * @since 0.1.0
 * @category models
 */
export interface MemoryStore {
  readonly [MemoryStoreTypeId]: MemoryStoreTypeId
  /** How many keys the store holds right now, expired ones not yet swept included (as `DBSIZE`). */
  readonly size: number
}

/**
 * Options of the memory backend.
 *
 * @since 0.1.0
 * @category models
 */
export interface MemoryOptions {
  /**
   * How often expired keys are removed from memory. An expired key is invisible at once either way;
   * the sweep only bounds memory. Default 1 second, on Effect's `Clock`. Each sweep looks at as many
   * keys as the store holds, 1000 at a time, letting the event loop run between.
   */
  readonly sweepInterval?: Duration.DurationInput | undefined
  /** The store to use, to share one between layers (a read-write and a read-only one). Default: a new one. */
  readonly store?: MemoryStore | undefined
  /**
   * A hard cap on the keys a new store holds (ignored with `store`, which keeps its own). When a write
   * would create a key past it, the sweep looks at the next 16 keys of its round over the store
   * (removing the expired ones), and then the least recently written keys are evicted until there is
   * room, as Redis's `maxmemory` with an eviction policy would: a limiter's evicted name starts afresh.
   * A new key at the cap costs a bounded amount of work, whatever the store's size. Default: no cap.
   */
  readonly maxKeys?: number | undefined
}

/**
 * An empty store for {@link layerMemory} and {@link layerMemoryReadOnly}, to share between them, with
 * at most `maxKeys` keys (see {@link MemoryOptions}).
 *
 * @since 0.1.0
 * @category constructors
 */
export const makeMemoryStore = (options?: { readonly maxKeys?: number | undefined }): MemoryStore =>
  memory.makeStore(options?.maxKeys)

/**
 * The embedded backend: the same `Redis` service, backed by this process's memory instead of a server.
 * Grants `Capability.ReadWrite`, as {@link layer} does.
 *
 * Every script the library runs has a TypeScript twin beside its Lua, run here with the same KEYS and
 * ARGV and replying with the same shape, one call at a time and atomically (nothing else runs in
 * between); plain commands and BLMOVE follow Redis's rules. Time is Effect's `Clock`, read when each
 * call runs, so under `TestClock` a test drives the structures' time: drain a bucket,
 * `TestClock.adjust("3 seconds")`, and exactly the tokens of 3 seconds are back. TTLs are honoured: an
 * expired key is invisible at once, and a sweep every `sweepInterval` frees its memory.
 *
 * The store belongs to one process. It is not shared across replicas: use it for tests, for a single
 * process, and for running without a server; use {@link layer} when several processes share limits.
 * Scripts made without a twin (`Script.make`) fail with a `RedisError` (reason `Script`).
 *
 * @since 0.1.0
 * @category layers
 */
export const layerMemory = (options?: MemoryOptions): Layer.Layer<ReadWrite> => memory.layer(options, "ReadWrite")

/**
 * {@link layerMemory} granting only `Capability.ReadOnly`: pass it the store of a read-write memory
 * layer to read what that one wrote, as a replica would.
 *
 * @since 0.1.0
 * @category layers
 */
export const layerMemoryReadOnly = (options?: MemoryOptions): Layer.Layer<ReadOnly> => memory.layer(options, "ReadOnly")
