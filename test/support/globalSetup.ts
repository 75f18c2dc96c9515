/**
 * Starts one throwaway redis-server for the whole run (unless REDIS_URL points at one) and hands its
 * URL to the tests through `inject("redisUrl")`. The server runs under a parent-death signal, so it
 * dies with the runner even when the runner is killed.
 */
import { Effect, Exit, Scope } from "effect"
import type { TestProject } from "vitest/node"
import * as RedisServer from "../../src/RedisServer.js"

declare module "vitest" {
  export interface ProvidedContext {
    redisUrl: string
  }
}

export default async function setup(project: TestProject) {
  const fromEnv = process.env["REDIS_URL"]
  if (fromEnv !== undefined && fromEnv !== "") {
    project.provide("redisUrl", fromEnv)
    return
  }
  const scope = Effect.runSync(Scope.make())
  const server = await Effect.runPromise(Scope.extend(RedisServer.make(), scope))
  project.provide("redisUrl", server.url)
  return () => Effect.runPromise(Scope.close(scope, Exit.void))
}
