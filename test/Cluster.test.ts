/**
 * What only a Redis Cluster shows: names spread over every master, scripts reloaded per node after
 * SCRIPT FLUSH, and a manual failover in the middle of a run. (Every structure's suite also runs on the
 * cluster, through test/support/backends.ts.)
 */
import keySlot from "cluster-key-slot"
import { Effect, Exit, Layer } from "effect"
import { Redis as IORedis } from "ioredis"
import { describe, expect, it } from "vitest"
import { Rate, Redis, TokenBucket } from "wakuwaku"
import { RedisServer } from "wakuwaku/testing"
import { ACQUIRE } from "../src/internal/tokenBucket.js"
import { clusterNodes, freshNamespace } from "./support/redis.js"

/** A plain connection to one node, for what the library never does: CLUSTER SLOTS, SCRIPT FLUSH, FAILOVER. */
const node = (address: string) =>
  Effect.acquireRelease(
    Effect.sync(() => {
      const [host, port] = address.split(":")
      return new IORedis(Number(port), host!, { maxRetriesPerRequest: 1 })
    }),
    (client) => Effect.sync(() => client.disconnect())
  )

/** slot → "host:port" of its master, from CLUSTER SLOTS. */
const slotOwners = (client: IORedis) =>
  Effect.promise(async () => {
    const ranges = (await client.cluster("SLOTS")) as unknown as Array<
      [number, number, [string, number, ...Array<unknown>]]
    >
    return (slot: number) => {
      const range = ranges.find(([from, to]) => slot >= from && slot <= to)
      return range === undefined ? undefined : `${range[2][0]}:${range[2][1]}`
    }
  })

/** Acquires on many names from 16 fibers until `stop` says so; counts successes and typed failures. */
const hammer = (bucket: TokenBucket.TokenBucket<string>, stop: () => boolean) =>
  Effect.gen(function*() {
    const tally = { ok: 0, failures: [] as Array<{ readonly reason: string; readonly at: number }> }
    const loop = (fiber: number) =>
      Effect.gen(function*() {
        for (let i = 0; !stop(); i++) {
          const exit = yield* Effect.exit(bucket.acquire(`user-${fiber}-${i % 50}`, 1))
          if (Exit.isSuccess(exit)) tally.ok++
          else {
            const error = exit.cause._tag === "Fail" ? exit.cause.error : undefined
            // Anything but a typed RedisError would be a bug: surface it as a defect.
            if (!(error instanceof Redis.RedisError)) return yield* Effect.die(exit.cause)
            tally.failures.push({ reason: error.reason, at: performance.now() })
          }
        }
      })
    yield* Effect.all(Array.from({ length: 16 }, (_, fiber) => loop(fiber)), {
      concurrency: "unbounded",
      discard: true
    })
    return tally
  })

describe("Redis Cluster", () => {
  it("names spread over every master: each master holds some of 60 buckets' keys (by CLUSTER KEYSLOT)", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      // One token back an hour: each key lives an hour, however slow the machine is.
      const B = TokenBucket.make<string>(ns, 10, Rate.make(1, "1 hour"))
      const admin = yield* node(clusterNodes[0]!)
      const keys: Array<string> = []
      yield* Effect.gen(function*() {
        for (let i = 0; i < 60; i++) {
          yield* B.acquire(`user-${i}`, 1)
          keys.push(`@@wakuwaku:TokenBucket:${ns}:user-${i}`)
        }
      }).pipe(Effect.provide(Redis.layerCluster({ nodes: clusterNodes })))
      const owner = yield* slotOwners(admin)
      const holders = new Map<string, number>()
      // One connection per master, opened once.
      const connections = new Map<string, IORedis>()
      for (const key of keys) {
        const slot = Number(yield* Effect.promise(() => admin.cluster("KEYSLOT", key)))
        const master = owner(slot)!
        holders.set(master, (holders.get(master) ?? 0) + 1)
        // The key is really there, on that master, with the TTL of one token's refill (an hour).
        let there = connections.get(master)
        if (there === undefined) connections.set(master, there = yield* node(master))
        const ttl = yield* Effect.promise(() => there.pttl(key))
        expect(ttl, key).toBeGreaterThan(3_500_000)
        expect(ttl, key).toBeLessThanOrEqual(3_600_000)
      }
      expect(holders.size).toBe(3)
      for (const count of holders.values()) expect(count).toBeGreaterThan(0)
    }).pipe(Effect.scoped, Effect.runPromise))

  it(
    "calls made together are batched per hash slot: 30 acquires on 3 names of 3 masters in 4 script calls",
    () =>
      Effect.gen(function*() {
        // A cluster of its own, so that the script calls counted are this test's alone.
        const cluster = yield* RedisServer.makeCluster({ replicasPerMaster: 0 })
        const admins = yield* Effect.all(cluster.masters.map((m) => node(`${m.host}:${m.port}`)))
        const owner = yield* slotOwners(admins[0]!)
        const ns = freshNamespace()
        const keyOf = (name: string) => `@@wakuwaku:TokenBucket:${ns}:${name}`
        // One name on each master.
        const names: Array<string> = []
        const masters: Array<string> = []
        for (let i = 0; names.length < 3; i++) {
          const master = owner(keySlot(keyOf(`user-${i}`)))!
          if (!masters.includes(master)) {
            masters.push(master)
            names.push(`user-${i}`)
          }
        }
        for (const admin of admins) {
          yield* Effect.promise(() =>
            Promise.all([admin.script("LOAD", ACQUIRE.lua), admin.script("LOAD", ACQUIRE.many!.lua)])
          )
          yield* Effect.promise(() => admin.config("RESETSTAT"))
        }
        const B = TokenBucket.make<string>(ns, 5, Rate.make(1, "1 hour"))
        const admissions = yield* Effect.all(
          names.flatMap((name) => Array.from({ length: 10 }, () => B.acquire(name, 1))),
          {
            concurrency: "unbounded"
          }
        ).pipe(
          Effect.provide(Redis.layerCluster({ nodes: [`${cluster.masters[0]!.host}:${cluster.masters[0]!.port}`] }))
        )
        // Each name: exactly 5 allowed, remaining 4..0, and 5 denied.
        names.forEach((_, n) => {
          const own = admissions.slice(10 * n, 10 * n + 10)
          expect(own.flatMap((a) => a._tag === "Allowed" ? [a.remaining] : []).sort()).toEqual([0, 1, 2, 3, 4])
        })
        // The first call goes alone on the idle connection; the 29 made while it is in flight go in one call per
        // slot, each on the master of its slot.
        const calls = new Map<string, number>()
        for (const [i, m] of cluster.masters.entries()) {
          const info = String(yield* Effect.promise(() => admins[i]!.info("commandstats")))
          calls.set(`${m.host}:${m.port}`, Number(/cmdstat_evalsha:calls=(\d+)/.exec(info)?.[1] ?? 0))
        }
        expect(masters.map((m) => calls.get(m))).toEqual([2, 1, 1])
      }).pipe(Effect.scoped, Effect.runPromise),
    30_000
  )

  it("SCRIPT FLUSH on every node in the middle of a run: zero errors reach the callers", () =>
    Effect.gen(function*() {
      const B = TokenBucket.make<string>(freshNamespace(), 1_000_000, Rate.perSecond(1))
      const admins = yield* Effect.all(clusterNodes.map(node))
      let stop = false
      const run = yield* Effect.fork(
        hammer(B, () => stop).pipe(Effect.provide(Redis.layerCluster({ nodes: clusterNodes })))
      )
      // Let the run warm up (scripts loaded everywhere), flush them all twice, then stop.
      yield* Effect.sleep("300 millis")
      for (let round = 0; round < 2; round++) {
        yield* Effect.promise(() => Promise.all(admins.map((admin) => admin.script("FLUSH"))))
        yield* Effect.sleep("200 millis")
      }
      stop = true
      const tally = yield* run.await.pipe(Effect.flatten)
      expect(tally.failures).toEqual([])
      expect(tally.ok).toBeGreaterThan(100)
    }).pipe(Effect.scoped, Effect.runPromise), 30_000)

  it(
    "a manual failover of one master in the middle of a run: a bounded burst of typed errors at most, then recovery",
    () =>
      Effect.gen(function*() {
        // A cluster of its own: the failover must not disturb the other files' cluster.
        const cluster = yield* RedisServer.makeCluster()
        const nodes = cluster.masters.map((m) => `${m.host}:${m.port}`)
        const B = TokenBucket.make<string>(freshNamespace(), 1_000_000, Rate.perSecond(1))
        const replica = yield* node(`${cluster.replicas[0]!.host}:${cluster.replicas[0]!.port}`)
        let stop = false
        const run = yield* Effect.fork(
          hammer(B, () => stop).pipe(Effect.provide(Layer.fresh(Redis.layerCluster({ nodes }))))
        )
        yield* Effect.sleep("300 millis")
        // A manual failover gives up after 5 s if the replica cannot catch up (a busy machine): ask again then.
        let started = 0
        let switched = -1
        let attempts = 0
        for (; attempts < 3 && switched < 0; attempts++) {
          started = performance.now()
          yield* Effect.promise(() => replica.cluster("FAILOVER"))
          while (performance.now() - started < 6000) {
            if (String(yield* Effect.promise(() => replica.info("replication"))).includes("role:master")) {
              switched = performance.now() - started
              break
            }
            yield* Effect.sleep("20 millis")
          }
        }
        expect(switched).toBeGreaterThanOrEqual(0)
        // Keep going past the switch: the run must recover.
        yield* Effect.sleep("1 second")
        const okBeforeEnd = yield* Effect.sync(() => performance.now())
        yield* Effect.sleep("300 millis")
        stop = true
        const tally = yield* run.await.pipe(Effect.flatten)
        const reasons = [...new Set(tally.failures.map((f) => f.reason))]
        const span = tally.failures.length === 0
          ? 0
          : Math.max(...tally.failures.map((f) => f.at)) - Math.min(...tally.failures.map((f) => f.at))
        console.info(
          `cluster failover: the replica took over in ${
            switched.toFixed(0)
          } ms (attempt ${attempts}); callers saw ${tally.failures.length} ` +
            `typed errors (${reasons.join(", ") || "none"}) over ${span.toFixed(0)} ms, and ${tally.ok} successes`
        )
        // Typed, retryable, few, and over before the end of the run.
        for (const reason of reasons) expect(["Connection", "Timeout", "Server"]).toContain(reason)
        expect(tally.failures.length).toBeLessThanOrEqual(100)
        expect(tally.failures.every((f) => f.at < okBeforeEnd)).toBe(true)
        expect(tally.ok).toBeGreaterThan(100)
      }).pipe(Effect.scoped, Effect.runPromise),
    60_000
  )
})
