/**
 * `npm run bench` (a part): a lock/unlock round trip, wakuwaku `Lock` against redis-semaphore's
 * `Mutex`, on one throwaway redis-server (RedisServer.make), rounds alternated A B C A B C
 * (roundTrips.ts says how rounds are measured).
 *
 * - wakuwaku: `JOBS.tryLock(name)`, then `token.release`, provided with a `Redis.layer({ url })` context
 *   built once, before anything is timed (the library's default client options).
 * - redis-semaphore: `new Mutex(client, name, options)`, `tryAcquire()`, then `release()`, on its own
 *   plain ioredis client (default options, no auto-pipelining). Options: the same 30 s lease
 *   (`lockTimeout`), one attempt (`acquireAttemptsLimit: 1`), and no refresh timer
 *   (`refreshInterval: 0`), since `tryLock` starts no renewal either. A fresh `Mutex` per round trip,
 *   as a fresh wakuwaku token is: each has its own random identifier.
 * - raw (for reference, not a target): the same plain ioredis client sending `EVALSHA` of the library's
 *   own acquire and release scripts (ACQUIRE.sha1, RELEASE.sha1) with the same KEYS and ARGV and a
 *   token made the same way (16 random bytes, base64url): what the scripts cost without the library.
 *
 * Throughput rounds: 64 loops, each locking and unlocking its own name (`job-0` … `job-63`) over and
 * over, until 20 000 round trips are done. Latency rounds: 2000 round trips one after another
 * (concurrency 1). Every lock must be granted and every release must find its lock: anything else
 * stops the benchmark.
 */
import { Effect, Layer, Option } from "effect"
import type { Redis as IORedis } from "ioredis"
import { randomBytes } from "node:crypto"
import { Mutex } from "redis-semaphore"
import { Lock, Redis } from "wakuwaku"
import { ACQUIRE, RELEASE } from "wakuwaku/internal/lock"
import { RedisServer } from "wakuwaku/testing"
import { plainClient } from "./measure.js"
import { effectContender, measure, type Plan, promiseContender } from "./roundTrips.js"

/** `--quick` (development): fewer round trips, 2 timed rounds. */
const QUICK = process.argv.includes("--quick")
const LEASE_MS = 30_000
const plan: Plan = {
  loops: Array.from({ length: 64 }, (_, i) => `job-${i}`),
  throughputOps: QUICK ? 10_000 : 20_000,
  latencyOps: QUICK ? 1_000 : 2_000,
  rounds: QUICK ? 2 : 5
}

const JOBS = Lock.make<string>("bench", LEASE_MS)
const SEMAPHORE_PREFIX = "bench-rs:"
const RAW_NAMESPACE = "bench-raw"
const LEASE_ARG = String(LEASE_MS)
const SEMAPHORE_OPTIONS = { lockTimeout: LEASE_MS, acquireAttemptsLimit: 1, refreshInterval: 0 } as const

/** One wakuwaku round trip: lock, release. Dies if the lock is not granted or the release finds nothing. */
const wakuRoundTrip = (name: string) =>
  Effect.flatMap(JOBS.tryLock(name), (token) =>
    Option.isNone(token)
      ? Effect.dieMessage(`wakuwaku: ${name} was not granted`)
      : Effect.flatMap(
        token.value.release,
        (released) => released ? Effect.void : Effect.dieMessage(`wakuwaku: ${name} was not released`)
      ))

/** One redis-semaphore round trip: a fresh Mutex, one try, release. Throws if the lock is not granted. */
const semaphoreRoundTrip = (client: IORedis) => async (name: string): Promise<void> => {
  const mutex = new Mutex(client, SEMAPHORE_PREFIX + name, SEMAPHORE_OPTIONS)
  if (!(await mutex.tryAcquire())) throw new Error(`redis-semaphore: ${name} was not granted`)
  await mutex.release()
}

/** One raw round trip: the library's own scripts by EVALSHA, with the keys the library would build. */
const rawRoundTrip = (client: IORedis) => async (name: string): Promise<void> => {
  const owner = `@@wakuwaku:Lock:{${RAW_NAMESPACE}:${name}}:owner`
  const fence = `@@wakuwaku:Lock:{${RAW_NAMESPACE}:${name}}:fence`
  const token = randomBytes(16).toString("base64url")
  if (typeof (await client.evalsha(ACQUIRE.sha1, 2, owner, fence, token, LEASE_ARG)) !== "string") {
    throw new Error(`raw: ${name} was not granted`)
  }
  if ((await client.evalsha(RELEASE.sha1, 1, owner, token)) !== 1) throw new Error(`raw: ${name} was not released`)
}

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
        describe:
          `throughput: ${plan.throughputOps} lock/unlock round trips/round, 64 names in flight (one loop each); ` +
          `latency: ${plan.latencyOps} sequential round trips/round; lease ${LEASE_MS} ms`,
        contenders: [
          effectContender("wakuwaku `tryLock` + `release`", plan, env, wakuRoundTrip),
          promiseContender("redis-semaphore `Mutex` `tryAcquire` + `release`", plan, semaphoreRoundTrip(client)),
          promiseContender("raw ioredis `evalsha` of wakuwaku's scripts (reference)", plan, rawRoundTrip(client))
        ],
        // Nothing is left held: every lock was released.
        held: async () =>
          (await client.keys("@@wakuwaku:Lock:*:owner")).length +
          (await client.keys(`mutex:${SEMAPHORE_PREFIX}*`)).length,
        p50Target: true
      })
    )
  })
)

Effect.runPromise(program).catch((error: unknown) => {
  console.error(error)
  process.exitCode = 1
})
