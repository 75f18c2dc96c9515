/**
 * `npm run bench` (a part): an acquire/release round trip, wakuwaku `Semaphore` against redis-semaphore's
 * `Semaphore`, on one throwaway redis-server (RedisServer.make), rounds alternated A B C A B C
 * (roundTrips.ts says how rounds are measured).
 *
 * - wakuwaku: `EXPORTS.tryAcquire(name)` (1 of 4 permits), then `EXPORTS.release(permit)`, provided with
 *   a `Redis.layer({ url })` context built once, before anything is timed (the library's default client
 *   options).
 * - redis-semaphore: `new Semaphore(client, name, 4, options)`, `tryAcquire()`, then `release()`, on its
 *   own plain ioredis client (default options, no auto-pipelining). Options: the same 30 s lease
 *   (`lockTimeout`), one attempt (`acquireAttemptsLimit: 1`), and no refresh timer
 *   (`refreshInterval: 0`), since `tryAcquire` starts no renewal either. A fresh `Semaphore` per round
 *   trip, as a fresh wakuwaku permit is: each has its own random identifier. Its acquire is a script
 *   given the client's clock (`Date.now()`); its release a plain `ZREM`; it has no fence.
 * - raw (for reference, not a target): the same plain ioredis client sending `EVALSHA` of the library's
 *   own acquire and release scripts with the same KEYS and ARGV and a token made the same way (16
 *   random bytes, base64url): what the scripts cost without the library.
 * - floor (for reference, not a target): the same two scripts through the library's `Redis` service
 *   (`redis.script`, so batched as the library batches them) in bare Effect, with the same keys, ARGV
 *   and token source: no capability check, no name encoding, no reply decoding, no permit. What any
 *   Effect implementation of these scripts on this service costs.
 *
 * Throughput rounds: 64 loops on 16 names (`export-0` … `export-15`, 4 loops each, so that every
 * acquire finds 0 to 3 other holders and is granted), each acquiring and releasing over and over until
 * 20 000 round trips are done. Latency rounds: 2000 round trips one after another (concurrency 1). Every
 * acquire must be granted and every release must find its permit: anything else stops the benchmark.
 */
import { Effect, Layer, Option } from "effect"
import type { Redis as IORedis } from "ioredis"
import { randomBytes } from "node:crypto"
import { Semaphore as RedisSemaphore } from "redis-semaphore"
import { Redis, Semaphore } from "wakuwaku"
import * as lease from "wakuwaku/internal/lease"
import { ACQUIRE, RELEASE } from "wakuwaku/internal/semaphore"
import { RedisServer } from "wakuwaku/testing"
import { plainClient } from "./measure.js"
import { effectContender, measure, type Plan, promiseContender } from "./roundTrips.js"

/** `--quick` (development): fewer round trips, 2 timed rounds. */
const QUICK = process.argv.includes("--quick")
const LEASE_MS = 30_000
const PERMITS = 4
const NAMES = 16
const plan: Plan = {
  loops: Array.from({ length: NAMES * PERMITS }, (_, i) => `export-${i % NAMES}`),
  throughputOps: QUICK ? 10_000 : 20_000,
  latencyOps: QUICK ? 1_000 : 2_000,
  rounds: QUICK ? 2 : 5
}

const EXPORTS = Semaphore.make<string>("bench", PERMITS, LEASE_MS)
const PEER_PREFIX = "bench-rs:"
const RAW_NAMESPACE = "bench-raw"
const FLOOR_NAMESPACE = "bench-floor"
const PEER_OPTIONS = { lockTimeout: LEASE_MS, acquireAttemptsLimit: 1, refreshInterval: 0 } as const
const ARGS = [String(PERMITS), String(LEASE_MS), "0"] as const

/** One wakuwaku round trip: acquire 1, release. Dies if it is not granted or the release finds nothing. */
const wakuRoundTrip = (name: string) =>
  Effect.flatMap(EXPORTS.tryAcquire(name), (permit) =>
    Option.isNone(permit)
      ? Effect.dieMessage(`wakuwaku: ${name} was not granted`)
      : Effect.flatMap(
        EXPORTS.release(permit.value),
        (released) => released ? Effect.void : Effect.dieMessage(`wakuwaku: ${name} was not released`)
      ))

/** One redis-semaphore round trip: a fresh Semaphore, one try, release. Throws if it is not granted. */
const peerRoundTrip = (client: IORedis) => async (name: string): Promise<void> => {
  const semaphore = new RedisSemaphore(client, PEER_PREFIX + name, PERMITS, PEER_OPTIONS)
  if (!(await semaphore.tryAcquire())) throw new Error(`redis-semaphore: ${name} was not granted`)
  await semaphore.release()
}

/** One raw round trip: the library's own scripts by EVALSHA, with the keys the library would build. */
const rawRoundTrip = (client: IORedis) => async (name: string): Promise<void> => {
  const key = (suffix: string) => `@@wakuwaku:Semaphore:{${RAW_NAMESPACE}:${name}}:${suffix}`
  const member = `1:${randomBytes(16).toString("base64url")}`
  const fence = await client.evalsha(ACQUIRE.sha1, 3, key("holders"), key("intent"), key("fence"), member, ...ARGS)
  if (typeof fence !== "string") throw new Error(`raw: ${name} was not granted`)
  if ((await client.evalsha(RELEASE.sha1, 1, key("holders"), member)) !== 1) {
    throw new Error(`raw: ${name} was not released`)
  }
}

/** One floor round trip: the same scripts through the service, in bare Effect. */
const floorRoundTrip = (name: string) =>
  Effect.flatMap(Redis.Redis, (redis) => {
    const key = (suffix: string) => `@@wakuwaku:Semaphore:{${FLOOR_NAMESPACE}:${name}}:${suffix}`
    const holders = key("holders")
    const member = `1:${lease.secret()}`
    return Effect.flatMap(
      redis.script(ACQUIRE, [holders, key("intent"), key("fence")], [member, ...ARGS]),
      (fence) =>
        Option.isNone(fence)
          ? Effect.dieMessage(`floor: ${name} was not granted`)
          : Effect.flatMap(
            redis.script(RELEASE, [holders], [member]),
            (released) => released ? Effect.void : Effect.dieMessage(`floor: ${name} was not released`)
          )
    )
  })

// One server, one wakuwaku context, one plain ioredis client (redis-semaphore's and raw's): all set up
// before anything is timed, all closed with the scope.
const program = Effect.scoped(
  Effect.gen(function*() {
    const server = yield* RedisServer.make()
    const env = yield* Layer.build(Redis.layer({ url: server.url }))
    const client = yield* plainClient(server.url)
    for (const script of [ACQUIRE, RELEASE]) {
      const sha1 = yield* Effect.promise(() => client.script("LOAD", script.lua))
      if (sha1 !== script.sha1) {
        yield* Effect.dieMessage(`SCRIPT LOAD returned ${String(sha1)}, expected ${script.sha1}`)
      }
    }
    yield* Effect.promise(() =>
      measure({
        server,
        client,
        plan,
        describe: `throughput: ${plan.throughputOps} acquire/release round trips/round, 64 loops on ${NAMES} names ` +
          `of ${PERMITS} permits; latency: ${plan.latencyOps} sequential round trips/round; lease ${LEASE_MS} ms`,
        contenders: [
          effectContender("wakuwaku `tryAcquire` + `release`", plan, env, wakuRoundTrip),
          promiseContender("redis-semaphore `Semaphore` `tryAcquire` + `release`", plan, peerRoundTrip(client)),
          promiseContender("raw ioredis `evalsha` of wakuwaku's scripts (reference)", plan, rawRoundTrip(client)),
          effectContender("floor: the same scripts through the `Redis` service, bare Effect", plan, env, floorRoundTrip)
        ],
        // Nothing is left held: the last release of a name deletes its holders (and redis-semaphore's
        // set empties).
        held: async () =>
          (await client.keys("@@wakuwaku:Semaphore:*:holders")).length +
          (await client.keys(`semaphore:${PEER_PREFIX}*`)).length
      })
    )
  })
)

Effect.runPromise(program).catch((error: unknown) => {
  console.error(error)
  process.exitCode = 1
})
