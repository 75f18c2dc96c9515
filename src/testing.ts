/**
 * `wakuwaku/testing`: tools for tests, examples and benchmarks, apart from the library so that the core
 * never loads them.
 *
 * - {@link RedisServer}: a throwaway `redis-server`, or a local Redis Cluster, on loopback, started in
 *   a scope and stopped when it closes (docs/testing.md).
 *
 * @since 0.1.0
 */

/** @since 0.1.0 */
export * as RedisServer from "./RedisServer.js"
