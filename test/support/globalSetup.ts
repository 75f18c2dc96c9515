/**
 * Starts one throwaway redis-server for the whole run (unless REDIS_URL points at one) and hands its
 * URL to the tests through `inject("redisUrl")`, and one throwaway Redis Cluster (3 masters, 3
 * replicas; unless REDIS_CLUSTER_NODES names one, as comma-separated host:port) through
 * `inject("clusterNodes")`. Every server runs under a parent-death signal, so it dies with the runner
 * even when the runner is killed.
 *
 * The cluster takes seconds to start, so it starts only when a test file of the run needs it: one that
 * reads `clusterNodes` or runs on every backend (see {@link needsCluster}). `npm test -- test/Rate.test.ts`
 * starts none.
 *
 * When the whole suite runs, it bundles the scripts tests start as child processes meanwhile
 * (support/spawn.ts's `prebuild`), and the teardown removes those bundles.
 */
import { Effect, Exit, Scope } from "effect"
import { Cluster, Redis as IORedis } from "ioredis"
import { randomUUID } from "node:crypto"
import { readFile } from "node:fs/promises"
import type { TestProject } from "vitest/node"
import * as RedisServer from "../../src/RedisServer.js"
import { prebuild, unbuild } from "./spawn.js"

declare module "vitest" {
  export interface ProvidedContext {
    redisUrl: string
    clusterNodes: Array<string>
  }
}

export default async function setup(project: TestProject) {
  const run = randomUUID().slice(0, 8)
  const scope = Effect.runSync(Scope.make())
  const fromEnv = process.env["REDIS_URL"]
  const clusterFromEnv = process.env["REDIS_CLUSTER_NODES"]
  const whole = filters().length === 0
  const cluster = await needsCluster(project)
  const bundled = whole ? prebuild(run) : Promise.resolve()
  const [url, nodes] = await Effect.runPromise(Scope.extend(
    Effect.all([
      fromEnv !== undefined && fromEnv !== ""
        ? Effect.succeed(fromEnv)
        : Effect.map(RedisServer.make(), (server) => server.url),
      !cluster
        ? Effect.succeed([])
        : clusterFromEnv !== undefined && clusterFromEnv !== ""
        ? Effect.succeed(clusterFromEnv.split(","))
        : Effect.map(RedisServer.makeCluster(), (cluster) => cluster.masters.map((node) => `${node.host}:${node.port}`))
    ], { concurrency: "unbounded" }),
    scope
  ))
  await bundled
  if (whole) process.env["WAKUWAKU_PREBUILT"] = run
  project.provide("redisUrl", url)
  project.provide("clusterNodes", nodes)
  return async () => {
    try {
      await audit(url, nodes)
    } finally {
      await Effect.runPromise(Scope.close(scope, Exit.void))
      if (whole) await unbuild(run)
    }
  }
}

/** The command line's file filters: none when the whole suite runs. */
const filters = () => {
  const run = process.argv.indexOf("run")
  return process.argv.slice(run < 0 ? 2 : run + 1).filter((arg) => !arg.startsWith("-"))
}

/** What marks a test file that needs the cluster: it reads the nodes, or runs a suite on every backend. */
const CLUSTER_USE = /\bclusterNodes\b|\bClusterLive\b|\bforEachBackend\b|support\/backends\.js/

/**
 * Whether some test file of this run needs the cluster: the files that the command line's filters select
 * (every file when it names none), read for {@link CLUSTER_USE}.
 */
const needsCluster = async (project: TestProject): Promise<boolean> => {
  if (filters().length === 0) return true
  const specs = await project.vitest.globTestSpecifications(filters())
  const texts = await Promise.all(specs.map((spec) => readFile(spec.moduleId, "utf8")))
  return texts.some((text) => CLUSTER_USE.test(text))
}

/** Every key under `@@wakuwaku:` on one server: how many, and which have no TTL. */
const untimed = async (client: IORedis): Promise<{ keys: number; untimed: Array<string> }> => {
  let keys = 0
  const untimed: Array<string> = []
  let cursor = "0"
  do {
    const [next, batch] = await client.scan(cursor, "MATCH", "@@wakuwaku:*", "COUNT", 1000)
    keys += batch.length
    for (const key of batch) if ((await client.pttl(key)) === -1) untimed.push(key)
    cursor = next
  } while (cursor !== "0")
  return { keys, untimed }
}

/**
 * The key hygiene audit, after the entire suite: on the standalone server and on every master of the
 * cluster, SCAN over the `@@wakuwaku:` prefix finds no key without a TTL. It prints the count, and fails
 * the run otherwise.
 */
const audit = async (url: string, nodes: ReadonlyArray<string>) => {
  const standalone = new IORedis(url)
  const cluster = new Cluster(
    nodes.map((node) => {
      const [host, port] = node.split(":")
      return { host: host!, port: Number(port) }
    }),
    { lazyConnect: true }
  )
  try {
    const alone = await untimed(standalone)
    if (nodes.length > 0) await cluster.connect()
    const perMaster = nodes.length === 0 ? [] : await Promise.all(cluster.nodes("master").map(untimed))
    const clustered = { keys: perMaster.reduce((n, m) => n + m.keys, 0), untimed: perMaster.flatMap((m) => m.untimed) }
    console.info(
      `key hygiene audit: standalone ${alone.keys} keys under @@wakuwaku:, ${alone.untimed.length} without a TTL; ` +
        `cluster ${clustered.keys} keys, ${clustered.untimed.length} without a TTL`
    )
    const bad = [...alone.untimed, ...clustered.untimed]
    if (bad.length > 0) {
      throw new Error(`key hygiene audit: ${bad.length} keys without a TTL: ${bad.slice(0, 20).join(", ")}`)
    }
  } finally {
    standalone.disconnect()
    cluster.disconnect()
  }
}
