/**
 * The backends every structure's suite runs against, from one definition: the throwaway redis-server,
 * the embedded memory store and the throwaway Redis Cluster. A suite is written once as
 * `forEachBackend("TokenBucket", (it, backend) => …)`
 * and inspects what the library wrote through the `Redis` service (`command`), so the same assertion
 * reads either store.
 */
import { layer } from "@effect/vitest"
import type { Vitest } from "@effect/vitest"
import type { Layer } from "effect"
import { Effect } from "effect"
import { Redis } from "wakuwaku"
import { ClusterLive, clusterNodes, RedisLive, redisUrl } from "./redis.js"

export interface Backend {
  readonly name: "Redis" | "memory" | "cluster"
  readonly layer: Layer.Layer<Redis.ReadWrite, Redis.RedisError>
  /** Read-only access, for capability checks: a replica-style layer on servers, a store of its own on memory. */
  readonly readOnly: () => Layer.Layer<Redis.ReadOnly, Redis.RedisError>
}

export const backends: ReadonlyArray<Backend> = [
  { name: "Redis", layer: RedisLive, readOnly: () => Redis.layerReadOnly({ url: redisUrl }) },
  { name: "memory", layer: Redis.layerMemory(), readOnly: () => Redis.layerMemoryReadOnly() },
  { name: "cluster", layer: ClusterLive, readOnly: () => Redis.layerClusterReadOnly({ nodes: clusterNodes }) }
]

/** The `it` of a block whose layer provides read-write access (live clock, no test services). */
export type Methods = Vitest.MethodsNonLive<Redis.ReadWrite, true>

/** One describe block per backend, `<title> on <backend>`, each with its layer built once for the block. */
export const forEachBackend = (title: string, tests: (it: Methods, backend: Backend) => void): void => {
  for (const backend of backends) {
    layer(backend.layer, { excludeTestServices: true })(`${title} on ${backend.name}`, (it) => tests(it, backend))
  }
}

/** One plain command through the service in context (either backend). */
export const command = (name: string, ...args: ReadonlyArray<string | number>) =>
  Effect.flatMap(Redis.Redis, (redis) => redis.command(name, args))

export const pttl = (key: string) => command("PTTL", key) as Effect.Effect<number, Redis.RedisError, Redis.Redis>
export const exists = (key: string) => command("EXISTS", key) as Effect.Effect<number, Redis.RedisError, Redis.Redis>
export const get = (key: string) => command("GET", key) as Effect.Effect<string | null, Redis.RedisError, Redis.Redis>

/** Every key matching a glob pattern (SCAN, never KEYS). */
export const keysMatching = (pattern: string): Effect.Effect<Array<string>, Redis.RedisError, Redis.Redis> =>
  Effect.gen(function*() {
    const found: Array<string> = []
    let cursor = "0"
    do {
      const [next, keys] = (yield* command("SCAN", cursor, "MATCH", pattern, "COUNT", 1000)) as [string, Array<string>]
      found.push(...keys)
      cursor = next
    } while (cursor !== "0")
    return found
  })

/** Every key under the pattern carries a TTL (PTTL > 0). */
export const expectTtls = (pattern: string) =>
  Effect.gen(function*() {
    const missing: Array<[string, number]> = []
    for (const key of yield* keysMatching(pattern)) {
      const ttl = yield* pttl(key)
      // -2: gone since the scan found it (it expired, as a key with a TTL does); -1: no TTL.
      if (!(ttl > 0) && ttl !== -2) missing.push([key, ttl])
    }
    return missing
  })
