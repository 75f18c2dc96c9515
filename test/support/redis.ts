/** What live tests share: the server's URL, a layer for it, fresh namespaces, a raw client for inspection. */
import { Effect } from "effect"
import { Redis as IORedis } from "ioredis"
import { randomBytes } from "node:crypto"
import { inject } from "vitest"
import { Redis } from "wakuwaku"

/** The throwaway server (or the one REDIS_URL names). */
export const redisUrl: string = inject("redisUrl")

/** Read-write access to it. */
export const RedisLive = Redis.layer({ url: redisUrl })

/** Some masters of the throwaway Redis Cluster (or the one REDIS_CLUSTER_NODES names). */
export const clusterNodes: Array<string> = inject("clusterNodes")

/** Read-write access to the cluster. */
export const ClusterLive = Redis.layerCluster({ nodes: clusterNodes })

/** A namespace no other test uses, so test files can run concurrently on one server. */
export const freshNamespace = (prefix = "t"): string => `${prefix}-${randomBytes(6).toString("hex")}`

/** A plain ioredis client, scoped, for looking at what the library wrote. */
export const rawClient = Effect.acquireRelease(
  Effect.sync(() => new IORedis(redisUrl, { lazyConnect: false })),
  (client) => Effect.promise(() => client.quit().catch(() => "OK"))
)

/** Every key under a prefix (SCAN, never KEYS). */
export const keysMatching = (client: IORedis, pattern: string): Promise<Array<string>> =>
  new Promise((resolve, reject) => {
    const found: Array<string> = []
    const stream = client.scanStream({ match: pattern, count: 1000 })
    stream.on("data", (keys: Array<string>) => found.push(...keys))
    stream.on("end", () => resolve(found))
    stream.on("error", reject)
  })
