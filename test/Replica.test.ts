/**
 * A read-only replica: `Redis.layerReadOnly` pointed at it serves reads of what the primary wrote, and a
 * write forced through a cast fails with a typed ReadOnly error (the compile-time side is in the type
 * tests). The same on the cluster, whose read-only layer reads from replicas.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Exit } from "effect"
import { Cluster } from "ioredis"
import { FixedWindow, Rate, Redis, TokenBucket } from "wakuwaku"
import { RedisServer } from "wakuwaku/testing"
import { clusterNodes, freshNamespace } from "./support/redis.js"

/** Polls `read` until it gives `expected` (a replica lags its primary), for at most 5 s. */
const eventually = <A, E, R>(read: Effect.Effect<A, E, R>, expected: A) =>
  Effect.gen(function*() {
    const started = performance.now()
    while (true) {
      const value = yield* read
      if (value === expected || performance.now() - started > 5000) return value
      yield* Effect.sleep("10 millis")
    }
  })

describe("a read-only replica", () => {
  it.live(
    "layerReadOnly on a replica reads what the primary wrote; a write forced through a cast is ReadOnly",
    () =>
      Effect.gen(function*() {
        const primary = yield* RedisServer.make({ args: ["--repl-diskless-sync-delay", "0"] })
        const replica = yield* RedisServer.make({
          args: ["--replicaof", "127.0.0.1", String(primary.port), "--replica-read-only", "yes"]
        })
        const B = TokenBucket.make<string>(freshNamespace(), 5, Rate.make(1, "1 hour"))
        const W = FixedWindow.make<string>(freshNamespace(), 5, "1 hour")
        yield* Effect.all([B.acquire("a", 3), W.acquire("a", 2)]).pipe(
          Effect.provide(Redis.layer({ url: primary.url }))
        )
        const onReplica = Redis.layerReadOnly({ url: replica.url })
        expect(yield* eventually(B.peek("a").pipe(Effect.provide(onReplica)), 2)).toBe(2)
        expect(yield* eventually(W.peek("a").pipe(Effect.provide(onReplica)), 3)).toBe(3)
        // Only a cast gets a write past the compiler; the replica refuses it, typed.
        const capability = Redis.layer({ url: replica.url })
        const forced = yield* Effect.exit(B.acquire("a", 1).pipe(Effect.provide(capability)))
        expect(Exit.isFailure(forced)).toBe(true)
        if (Exit.isFailure(forced)) {
          const error = forced.cause._tag === "Fail" ? forced.cause.error : undefined
          expect(error).toMatchObject({
            _tag: "RedisError",
            reason: "ReadOnly",
            operation: "script TokenBucket.acquire"
          })
        }
        // Nothing was taken.
        expect(yield* B.peek("a").pipe(Effect.provide(Redis.layer({ url: primary.url })))).toBe(2)
      }).pipe(Effect.scoped),
    20_000
  )

  it.live(
    "layerClusterReadOnly reads from the cluster's replicas what its masters wrote",
    () =>
      Effect.gen(function*() {
        const B = TokenBucket.make<string>(freshNamespace(), 5, Rate.make(1, "1 hour"))
        const names = Array.from({ length: 12 }, (_, i) => `user-${i}`)
        yield* Effect.forEach(names, (name) => B.acquire(name, 4)).pipe(
          Effect.provide(Redis.layerCluster({ nodes: clusterNodes }))
        )
        // Counted on the replicas themselves: read-only scripts (EVALSHA_RO, EVAL_RO) reach them.
        const admin = yield* Effect.acquireRelease(
          Effect.promise(async () => {
            const cluster = new Cluster(
              clusterNodes.map((node) => ({ host: node.split(":")[0]!, port: Number(node.split(":")[1]) })),
              { lazyConnect: true }
            )
            await cluster.connect()
            return cluster
          }),
          (cluster) => Effect.sync(() => cluster.disconnect())
        )
        const onReplicas = Effect.promise(async () => {
          const stats = await Promise.all(admin.nodes("slave").map((node) => node.info("commandstats")))
          const calls = (info: string, command: string) =>
            Number(new RegExp(`cmdstat_${command}:calls=(\\d+)`).exec(info)?.[1] ?? 0)
          // EVAL_RO too: a replica has no script cache of its own until the first EVAL_RO after NOSCRIPT.
          return stats.reduce((n, info) => n + calls(info, "evalsha_ro") + calls(info, "eval_ro"), 0)
        })
        const before = yield* onReplicas
        const readOnly = Redis.layerClusterReadOnly({ nodes: clusterNodes })
        for (const name of names) expect(yield* eventually(B.peek(name).pipe(Effect.provide(readOnly)), 1)).toBe(1)
        expect((yield* onReplicas) - before).toBeGreaterThanOrEqual(names.length)
      }).pipe(Effect.scoped),
    20_000
  )
})
