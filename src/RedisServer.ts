/**
 * A throwaway `redis-server` on loopback, for tests, examples and benchmarks: started in a scope,
 * stopped when the scope closes. Reachable from the `wakuwaku/testing` subpath only; the root module
 * never loads it (docs/testing.md).
 *
 * - It listens on `127.0.0.1` on a free port (retrying on "Address already in use"), with no
 *   persistence (`--save '' --appendonly no`), and is ready when it says "Ready to accept connections".
 * - On Linux it runs under `setpriv --pdeathsig SIGKILL`, so it dies with the process that started it
 *   even when that process is killed: no leaked servers.
 * - It needs `redis-server` on PATH (Debian: `apt-get install redis-server`).
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { Rate, TokenBucket } from "wakuwaku"
 * import { RedisServer } from "wakuwaku/testing"
 *
 * const LOGINS = TokenBucket.make<string>("login", 20, Rate.make(1, "3 seconds"))
 *
 * LOGINS.acquire("203.0.113.7", 1).pipe(Effect.provide(RedisServer.layer()), Effect.runPromise)
 * ```
 *
 * @since 0.1.0
 */
import type * as Cause from "effect/Cause"
import type * as Context from "effect/Context"
import type * as Duration from "effect/Duration"
import type * as Effect from "effect/Effect"
import type * as Layer from "effect/Layer"
import type * as Schema from "effect/Schema"
import type * as Scope from "effect/Scope"
import * as internal from "./internal/redisServer.js"
import * as values from "./internal/redisServer/values.js"
import type * as Redis from "./Redis.js"

/**
 * A running server.
 *
 * @since 0.1.0
 * @category models
 */
export interface Server {
  readonly host: string
  readonly port: number
  /** `redis://127.0.0.1:<port>` */
  readonly url: string
  /** The server's process id. */
  readonly pid: number
}

/**
 * The server a {@link layer} started.
 *
 * @since 0.1.0
 * @category tags
 */
export interface RedisServer extends Context.TagClassShape<"wakuwaku/RedisServer", Server> {}

/**
 * The tag of {@link RedisServer}: `yield* RedisServer.RedisServer` gives the {@link Server}.
 *
 * @since 0.1.0
 * @category tags
 */
export const RedisServer: Context.Tag<RedisServer, Server> = values.RedisServer

/**
 * The server could not be started.
 *
 * @since 0.1.0
 * @category errors
 */
export interface RedisServerError extends Cause.YieldableError {
  readonly _tag: "RedisServerError"
  readonly reason: RedisServerErrorReason
  readonly message: string
}

/**
 * The class of {@link RedisServerError}, and its schema.
 *
 * @since 0.1.0
 * @category errors
 */
export const RedisServerError: Schema.TaggedErrorClass<RedisServerError, "RedisServerError", {
  readonly _tag: Schema.tag<"RedisServerError">
  readonly reason: RedisServerErrorReasonSchema
  readonly message: typeof Schema.String
}> = values.RedisServerError

/**
 * The type of the schema {@link RedisServerErrorReason}.
 *
 * @since 0.2.0
 * @category errors
 */
export type RedisServerErrorReasonSchema = Schema.Literal<["NotInstalled", "StartFailed", "Timeout"]>

/**
 * Why the server could not be started.
 *
 * @since 0.2.0
 * @category errors
 */
export type RedisServerErrorReason = RedisServerErrorReasonSchema["Type"]

/**
 * The schema of {@link RedisServerErrorReason}.
 *
 * @since 0.2.0
 * @category errors
 */
export const RedisServerErrorReason: RedisServerErrorReasonSchema = values.RedisServerErrorReason

/**
 * @since 0.1.0
 * @category models
 */
export interface Options {
  /** A fixed port; by default a free one is chosen. */
  readonly port?: number | undefined
  /** Extra `redis-server` arguments, such as `["--replicaof", "127.0.0.1", "6379"]`. */
  readonly args?: ReadonlyArray<string> | undefined
  /** The binary; default `redis-server` from PATH. */
  readonly binary?: string | undefined
  /** How long to wait for "Ready to accept connections". Default 10 seconds. */
  readonly startTimeout?: Duration.DurationInput | undefined
}

/**
 * Starts a server, and stops it (SIGTERM, then SIGKILL after 2 s) when the scope closes.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (options?: Options): Effect.Effect<Server, RedisServerError, Scope.Scope> => internal.make(options)

/**
 * Starts a server and connects an owned client to it: provides `Redis` with `Capability.ReadWrite`,
 * and the server itself.
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = (
  options?: Options,
  client?: Omit<Redis.Options, "url">
): Layer.Layer<Redis.ReadWrite | RedisServer, RedisServerError | Redis.RedisError> => internal.layer(options, client)

/**
 * Options of {@link makeCluster}.
 *
 * @since 0.1.0
 * @category models
 */
export interface ClusterOptions {
  /** How many masters; at least 3 (Redis Cluster's minimum). Default 3. */
  readonly masters?: number | undefined
  /** Replicas per master. Default 1. */
  readonly replicasPerMaster?: number | undefined
  /** The binary; default `redis-server` from PATH (`redis-cli` must be on PATH too). */
  readonly binary?: string | undefined
  /** How long to wait for `cluster_state:ok` and the replicas' links. Default 30 seconds. */
  readonly startTimeout?: Duration.DurationInput | undefined
}

/**
 * A running local Redis Cluster.
 *
 * @since 0.1.0
 * @category models
 */
export interface RedisCluster {
  /** Every node, masters and replicas. */
  readonly nodes: ReadonlyArray<Server>
  readonly masters: ReadonlyArray<Server>
  readonly replicas: ReadonlyArray<Server>
}

/**
 * Starts a throwaway Redis Cluster on loopback: `masters × (1 + replicasPerMaster)` servers started as
 * {@link make} does, with `--cluster-enabled yes`, the bus port at the port + 100, a 2 s node timeout and
 * diskless replication without delay; joined with `redis-cli --cluster create`; ready once every node
 * reports `cluster_state:ok`, every replica `master_link_status:up`, and every node's `CLUSTER SLOTS`
 * lists the replicas (so that clients reading from replicas find them). Closing the scope stops every
 * node and deletes their `nodes-*.conf` files. About 3 s for 3 masters here, 7 s with 3 replicas more.
 *
 * @since 0.1.0
 * @category constructors
 */
export const makeCluster = (options?: ClusterOptions): Effect.Effect<RedisCluster, RedisServerError, Scope.Scope> =>
  internal.makeCluster(options)
