/**
 * Starts one throwaway redis-server for the whole run (unless REDIS_URL points at one) and hands its
 * URL to the tests through `inject("redisUrl")`, and one throwaway Redis Cluster (3 masters, 3
 * replicas; unless REDIS_CLUSTER_NODES names one, as comma-separated host:port) through
 * `inject("clusterNodes")`. Every server runs under a parent-death signal, so it dies with the runner
 * even when the runner is killed.
 */
import { Effect, Exit, Scope } from "effect"
import type { TestProject } from "vitest/node"
import * as RedisServer from "../../src/RedisServer.js"

declare module "vitest" {
  export interface ProvidedContext {
    redisUrl: string
    clusterNodes: Array<string>
  }
}

export default async function setup(project: TestProject) {
  const scope = Effect.runSync(Scope.make())
  const fromEnv = process.env["REDIS_URL"]
  const clusterFromEnv = process.env["REDIS_CLUSTER_NODES"]
  const [url, nodes] = await Effect.runPromise(Scope.extend(
    Effect.all([
      fromEnv !== undefined && fromEnv !== "" ? Effect.succeed(fromEnv) : Effect.map(RedisServer.make(), (server) => server.url),
      clusterFromEnv !== undefined && clusterFromEnv !== ""
        ? Effect.succeed(clusterFromEnv.split(","))
        : Effect.map(RedisServer.makeCluster(), (cluster) => cluster.masters.map((node) => `${node.host}:${node.port}`))
    ], { concurrency: "unbounded" }),
    scope
  ))
  project.provide("redisUrl", url)
  project.provide("clusterNodes", nodes)
  return () => Effect.runPromise(Scope.close(scope, Exit.void))
}
