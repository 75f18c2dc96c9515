/**
 * `npm run bench`: TokenBucket.acquire against the same Lua script sent by raw ioredis EVALSHA, and
 * against the peers rate-limiter-flexible and @effect/experimental's RateLimiter.
 *
 * One throwaway redis-server (RedisServer.make), five contenders on it, and the memory backend beside
 * them, rounds alternated A B C D E F A B C D E F:
 *
 * - wakuwaku: 256 fibers, each calling `BUCKET.acquire(name_i, 1)` in a loop, provided with a
 *   `Redis.layer({ url })` context built once, before anything is timed. The library batches acquires
 *   that are in flight together into one call of its many-bucket script.
 * - wakuwaku, `Effect.forEach(indices, (i) => BUCKET.acquire(name_i, 1), { concurrency: 256 })`: the same,
 *   with a fiber per acquire, as most code would write it.
 * - wakuwaku `FixedWindow.acquire`: the first row's loop on a window of CAPACITY per 1000 s (the peers'
 *   window): the same batched path.
 * - the floors (test/bench/floors.ts): the library's own batch script sent by a batcher with no library
 *   code, ≤ 32 calls per EVALSHA, the shape once per call; driven by plain Promises, and by `Effect.async`
 *   from 256 fibers. The library's distance from the Effect floor is what its own code costs.
 * - raw: a plain ioredis client (no auto-pipelining, default options) sending `EVALSHA` of the library's
 *   single-acquire script (ACQUIRE.sha1) with the same KEYS and ARGV, one call per acquire, 256
 *   promises kept in flight by 256 async loops.
 * - rate-limiter-flexible: `RateLimiterRedis` (its fixed window: `points` 1 000 000 per `duration`
 *   1000 s, the same average rate as the bucket's) on its own plain ioredis client (default options, no
 *   auto-pipelining), `consume(name_i, 1)`, 256 promises kept in flight by 256 async loops.
 * - @effect/experimental: `RateLimiter.consume({ key: name_i, limit: 1 000 000, window: "1000 seconds" })`
 *   (its default algorithm, fixed window, `onExceeded: "fail"`) on its Redis store
 *   (`RateLimiter/Redis.layerStore`, which opens its own ioredis client with default options), called
 *   by 256 fibers in a loop as the first row; and the same with `algorithm: "token-bucket"`.
 * - `RateLimiter.consume` over wakuwaku's store (`wakuwaku/RateLimiterStore`, on the first row's
 *   `Redis.layer` context): the same two rows, the same calls, only the store changed.
 * - reference: the fixed comparator, a straightforward token-bucket script (TIME, HMGET,
 *   HSET, PEXPIRE on a hash), sent by raw ioredis EVALSHA as the raw row is, on its own keys.
 * - memory: the first row's loop on a `Redis.layerMemory()` context: the store is this process's
 *   memory, shared with no other process, so it is no peer of the rows above; it shows what the
 *   embedded backend costs in one process (its Redis CPU column is the idle server's).
 *
 * Throughput rounds: 100 000 acquires of cost 1 over 10 000 names, 256 in flight, capacity 1 000 000
 * refilled at 1000/s, so every acquire is allowed (long rounds, so that the ramp at each end of a round,
 * with fewer in flight, weighs little). Latency rounds: 3000 acquires one after another.
 * Every round starts from an empty database (FLUSHALL, untimed). Each contender gets two untimed
 * warm-up rounds of each kind, then 5 timed rounds of each; figures are medians over rounds with min–max.
 * With `--quick` (development): 20 000 and 1000 acquires per round, 1 warm-up, 2 timed rounds.
 *
 * CPU per acquire (throughput rounds only): Node is `process.cpuUsage()` (user + system) of this
 * process; Redis is utime + stime of the redis-server process from /proc/<pid>/stat, in clock ticks.
 * Also printed: socket reads Redis made per acquire (INFO stats `total_reads_processed`), which shows
 * how many commands reach Redis together, and the CPU other processes used meanwhile (/proc/stat
 * minus this process and the server), which tells whether the machine was quiet.
 */
import * as RateLimiter from "@effect/experimental/RateLimiter"
import * as RateLimiterRedis from "@effect/experimental/RateLimiter/Redis"
import { Context, Effect, Either, Layer } from "effect"
import { Redis as IORedis } from "ioredis"
import { availableParallelism } from "node:os"
import { performance } from "node:perf_hooks"
import { RateLimiterRedis as FlexibleRedis } from "rate-limiter-flexible"
import { FixedWindow, Rate, Redis, TokenBucket } from "wakuwaku"
import { ACQUIRE } from "wakuwaku/internal/tokenBucket"
import * as RateLimiterStore from "wakuwaku/RateLimiterStore"
import { RedisServer } from "wakuwaku/testing"
import { batcher, effectFloor, promiseFloor } from "./floors.js"
import {
  clockTicks,
  machineTicks,
  median,
  otherCpuLine,
  percentile,
  plainClient,
  processTicks,
  stat
} from "./measure.js"

const QUICK = process.argv.includes("--quick")
const NAMES = 10_000
const IN_FLIGHT = 256
const THROUGHPUT_OPS = QUICK ? 20_000 : 100_000
const LATENCY_OPS = QUICK ? 1_000 : 3_000
const ROUNDS = QUICK ? 2 : 5
/** Untimed rounds of each kind per contender before the timed ones: GC makes fewer unreliable. */
const WARMUPS = QUICK ? 1 : 2
const CAPACITY = 1_000_000
const RATE = Rate.perSecond(1000)

const WAKU_NAMESPACE = "bench-wakuwaku"
const RAW_NAMESPACE = "bench-raw"
const FLEXIBLE_PREFIX = "bench-rlf"
const EFFECT_PREFIX = "bench-effect:"
/** The peers' fixed window: CAPACITY points per window, the bucket's average rate (1000/s). */
const WINDOW_SECONDS = 1000

const BUCKET = TokenBucket.make<string>(WAKU_NAMESPACE, CAPACITY, RATE)
/** The same average rate as a window: CAPACITY per 1000 s, as the fixed-window peers are set. */
const WINDOW = FixedWindow.make<string>("bench-window", CAPACITY, `${WINDOW_SECONDS} seconds`)
const FLOOR_KEY_PREFIX = "bench-floor:"

const names: ReadonlyArray<string> = Array.from({ length: NAMES }, (_, i) => `user-${i}`)
const nameOf = (i: number): string => names[i % NAMES] ?? "unreachable"

/** The raw side builds the same key the library builds, and sends the same ARGV. */
const RAW_KEY_PREFIX = `@@wakuwaku:TokenBucket:${RAW_NAMESPACE}:`
const ARGV_SHAPE = `${CAPACITY} ${RATE.tokens} ${RATE.periodMicros}`
const ARGV_COST = "1"

/**
 * The fixed comparator: a straightforward token bucket (TIME, HMGET tokens/ts, HSET, PEXPIRE).
 * KEYS[1] the bucket (a hash); ARGV capacity, tokens per period, period µs, cost. Returns 1 or 0.
 */
const REFERENCE_LUA = `local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local capacity, k, period, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local state = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(state[1]) or capacity
local ts = tonumber(state[2]) or now
tokens = math.min(capacity, tokens + math.max(0, now - ts) * k / period)
local allowed = 0
if tokens >= cost then
  tokens = tokens - cost
  allowed = 1
end
redis.call('HSET', KEYS[1], 'tokens', tokens, 'ts', now)
redis.call('PEXPIRE', KEYS[1], math.ceil((capacity - tokens) * period / k / 1000) + 1)
return allowed
`
const REFERENCE_KEY_PREFIX = "bench-reference:"
const REFERENCE_ARGV = [String(CAPACITY), String(RATE.tokens), String(RATE.periodMicros), "1"] as const

const throughputIndices: ReadonlyArray<number> = Array.from({ length: THROUGHPUT_OPS }, (_, i) => i)

type Env = Context.Context<Redis.ReadWrite>
type Limiter = RateLimiter.RateLimiter

type Algorithm = "fixed-window" | "token-bucket"

const effectConsume = (limiter: Limiter, name: string, algorithm: Algorithm = "fixed-window") =>
  limiter.consume({ key: name, limit: CAPACITY, window: `${WINDOW_SECONDS} seconds`, tokens: 1, algorithm })

// ---------------------------------------------------------------------------------------------------
// The contenders

/** 256 fibers, each acquiring in a loop: the same shape as the raw side's 256 async loops. */
const wakuThroughput = (env: Env): Promise<void> => {
  let next = 0
  const loop = Effect.whileLoop({
    while: () => next < THROUGHPUT_OPS,
    body: () => BUCKET.acquire(nameOf(next++), 1),
    step: () => {}
  })
  return Effect.runPromise(
    Effect.all(Array.from({ length: IN_FLIGHT }, () => loop), { concurrency: "unbounded", discard: true })
      .pipe(Effect.provide(env))
  )
}

/** The same loop on a fixed window. */
const windowThroughput = (env: Env): Promise<void> => {
  let next = 0
  const loop = Effect.whileLoop({
    while: () => next < THROUGHPUT_OPS,
    body: () => WINDOW.acquire(nameOf(next++), 1),
    step: () => {}
  })
  return Effect.runPromise(
    Effect.all(Array.from({ length: IN_FLIGHT }, () => loop), { concurrency: "unbounded", discard: true })
      .pipe(Effect.provide(env))
  )
}

/** The idiom most code would write: one fiber per acquire, 256 at a time. */
const wakuForEach = (env: Env): Promise<void> =>
  Effect.runPromise(
    Effect.forEach(throughputIndices, (i) => BUCKET.acquire(nameOf(i), 1), { concurrency: IN_FLIGHT, discard: true })
      .pipe(Effect.provide(env))
  )

const rawThroughput = async (client: IORedis): Promise<void> => {
  let next = 0
  const loop = async (): Promise<void> => {
    while (next < THROUGHPUT_OPS) {
      const i = next++
      await client.evalsha(ACQUIRE.sha1, 1, RAW_KEY_PREFIX + nameOf(i), ARGV_SHAPE, ARGV_COST)
    }
  }
  await Promise.all(Array.from({ length: IN_FLIGHT }, loop))
}

const referenceThroughput = async (client: IORedis, sha1: string): Promise<void> => {
  let next = 0
  const loop = async (): Promise<void> => {
    while (next < THROUGHPUT_OPS) {
      await client.evalsha(sha1, 1, REFERENCE_KEY_PREFIX + nameOf(next++), ...REFERENCE_ARGV)
    }
  }
  await Promise.all(Array.from({ length: IN_FLIGHT }, loop))
}

const referenceLatency = async (client: IORedis, sha1: string, out: Float64Array): Promise<void> => {
  for (let i = 0; i < out.length; i++) {
    const start = performance.now()
    await client.evalsha(sha1, 1, REFERENCE_KEY_PREFIX + nameOf(i), ...REFERENCE_ARGV)
    out[i] = performance.now() - start
  }
}

const flexibleThroughput = async (limiter: FlexibleRedis): Promise<void> => {
  let next = 0
  const loop = async (): Promise<void> => {
    while (next < THROUGHPUT_OPS) {
      await limiter.consume(nameOf(next++), 1)
    }
  }
  await Promise.all(Array.from({ length: IN_FLIGHT }, loop))
}

/** The same 256 fibers as wakuThroughput, calling a RateLimiter service. */
const effectThroughput = (limiter: Limiter, algorithm?: Algorithm): Promise<void> => {
  let next = 0
  const loop = Effect.whileLoop({
    while: () => next < THROUGHPUT_OPS,
    body: () => effectConsume(limiter, nameOf(next++), algorithm),
    step: () => {}
  })
  return Effect.runPromise(
    Effect.all(Array.from({ length: IN_FLIGHT }, () => loop), { concurrency: "unbounded", discard: true })
  )
}

const wakuLatency = (env: Env, out: Float64Array): Promise<void> =>
  Effect.runPromise(
    Effect.gen(function*() {
      for (let i = 0; i < out.length; i++) {
        const start = performance.now()
        yield* BUCKET.acquire(nameOf(i), 1)
        out[i] = performance.now() - start
      }
    }).pipe(Effect.provide(env))
  )

const rawLatency = async (client: IORedis, out: Float64Array): Promise<void> => {
  for (let i = 0; i < out.length; i++) {
    const start = performance.now()
    await client.evalsha(ACQUIRE.sha1, 1, RAW_KEY_PREFIX + nameOf(i), ARGV_SHAPE, ARGV_COST)
    out[i] = performance.now() - start
  }
}

const flexibleLatency = async (limiter: FlexibleRedis, out: Float64Array): Promise<void> => {
  for (let i = 0; i < out.length; i++) {
    const start = performance.now()
    await limiter.consume(nameOf(i), 1)
    out[i] = performance.now() - start
  }
}

const effectLatency = (limiter: Limiter, out: Float64Array, algorithm?: Algorithm): Promise<void> =>
  Effect.runPromise(
    Effect.gen(function*() {
      for (let i = 0; i < out.length; i++) {
        const start = performance.now()
        yield* effectConsume(limiter, nameOf(i), algorithm)
        out[i] = performance.now() - start
      }
    })
  )

/** Untimed: how many of `n` consumes a RateLimiter allows. */
const countConsumed = (limiter: Limiter, n: number, algorithm?: Algorithm) =>
  Effect.runPromise(
    Effect.forEach(
      throughputIndices.slice(0, n),
      (i) => Effect.map(Effect.either(effectConsume(limiter, nameOf(i), algorithm)), Either.isRight),
      { concurrency: IN_FLIGHT }
    ).pipe(Effect.map((xs) => xs.filter((x) => x).length))
  )

/** Untimed: how many of `n` acquires each side gets allowed, to show the workload is all-allowed. */
const countAllowed = async (
  env: Env,
  client: IORedis,
  flexible: FlexibleRedis,
  limiters: Limiters,
  n: number
) => {
  const waku = await Effect.runPromise(
    Effect.forEach(
      throughputIndices.slice(0, n),
      (i) => Effect.map(BUCKET.acquire(nameOf(i), 1), (admission) => admission._tag === "Allowed" ? 1 : 0),
      { concurrency: IN_FLIGHT }
    ).pipe(Effect.map((xs) => xs.reduce((a: number, b) => a + b, 0)), Effect.provide(env))
  )
  let raw = 0
  for (let i = 0; i < n; i += IN_FLIGHT) {
    const batch = throughputIndices.slice(i, Math.min(n, i + IN_FLIGHT)).map((j) =>
      client.evalsha(ACQUIRE.sha1, 1, RAW_KEY_PREFIX + nameOf(j), ARGV_SHAPE, ARGV_COST)
    )
    for (const reply of await Promise.all(batch)) {
      if (Array.isArray(reply) && reply[0] === 1) raw++
    }
  }
  let rlf = 0
  for (let i = 0; i < n; i += IN_FLIGHT) {
    const batch = throughputIndices.slice(i, Math.min(n, i + IN_FLIGHT)).map((j) =>
      flexible.consume(nameOf(j), 1).then(() => 1, () => 0)
    )
    for (const ok of await Promise.all(batch)) rlf += ok
  }
  const effect = await countConsumed(limiters.experimental, n)
  const effectBucket = await countConsumed(limiters.experimental, n, "token-bucket")
  const store = await countConsumed(limiters.wakuwaku, n)
  const storeBucket = await countConsumed(limiters.wakuwaku, n, "token-bucket")
  return { waku, raw, rlf, effect, effectBucket, store, storeBucket }
}

/** RateLimiter over @effect/experimental's Redis store, and over wakuwaku's. */
interface Limiters {
  readonly experimental: Limiter
  readonly wakuwaku: Limiter
}

// ---------------------------------------------------------------------------------------------------
// Measurement

interface ThroughputSample {
  readonly opsPerSecond: number
  readonly nodeCpuUs: number
  readonly redisCpuUs: number
  /** Socket reads Redis made per acquire: how many commands arrive together. */
  readonly redisReads: number
}

interface LatencySample {
  readonly p50Us: number
  readonly p99Us: number
}

interface Contender {
  readonly label: string
  readonly throughput: () => Promise<void>
  /** Absent when it would be the same loop as another row's (concurrency 1 has nothing to fork). */
  readonly latency: ((out: Float64Array) => Promise<void>) | undefined
  readonly throughputs: Array<ThroughputSample>
  readonly latencies: Array<LatencySample>
}

const measure = async (
  server: RedisServer.Server,
  env: Env,
  memoryEnv: Env,
  client: IORedis,
  flexible: FlexibleRedis,
  limiters: Limiters,
  referenceSha1: string
): Promise<void> => {
  const limiter = limiters.experimental
  const ticksPerSecond = clockTicks()
  // Both stores empty before every round: what one round left must not weigh on the next one's GC.
  const flush = async () => {
    await client.flushall()
    await Effect.runPromise(
      Effect.flatMap(Redis.Redis, (redis) => redis.command("FLUSHALL", [])).pipe(Effect.provide(memoryEnv))
    )
  }

  const readsProcessed = async (): Promise<number> =>
    Number(String(await client.info("stats")).match(/total_reads_processed:(\d+)/)?.[1] ?? Number.NaN)

  const timeThroughput = async (contender: Contender): Promise<ThroughputSample> => {
    await flush()
    const readsBefore = await readsProcessed()
    const redisBefore = processTicks(server.pid)
    const cpuBefore = process.cpuUsage()
    const start = performance.now()
    await contender.throughput()
    const elapsedMs = performance.now() - start
    const cpu = process.cpuUsage(cpuBefore)
    const redisTicks = processTicks(server.pid) - redisBefore
    const reads = await readsProcessed() - readsBefore
    return {
      redisReads: reads / THROUGHPUT_OPS,
      opsPerSecond: THROUGHPUT_OPS / (elapsedMs / 1000),
      nodeCpuUs: (cpu.user + cpu.system) / THROUGHPUT_OPS,
      redisCpuUs: (redisTicks / ticksPerSecond) * 1e6 / THROUGHPUT_OPS
    }
  }

  const timeLatency = async (contender: Contender): Promise<LatencySample> => {
    await flush()
    const out = new Float64Array(LATENCY_OPS)
    await contender.latency!(out)
    out.sort()
    return { p50Us: percentile(out, 0.5), p99Us: percentile(out, 0.99) }
  }

  const waku: Contender = {
    label: "wakuwaku `TokenBucket.acquire`",
    throughput: () => wakuThroughput(env),
    latency: (out) => wakuLatency(env, out),
    throughputs: [],
    latencies: []
  }
  const wakuEach: Contender = {
    label: "wakuwaku, `Effect.forEach` (a fiber per acquire)",
    throughput: () => wakuForEach(env),
    latency: undefined,
    throughputs: [],
    latencies: []
  }
  const raw: Contender = {
    label: "raw ioredis `evalsha`",
    throughput: () => rawThroughput(client),
    latency: (out) => rawLatency(client, out),
    throughputs: [],
    latencies: []
  }
  const reference: Contender = {
    label: "reference script (TIME, HMGET, HSET, PEXPIRE), raw ioredis `evalsha`",
    throughput: () => referenceThroughput(client, referenceSha1),
    latency: (out) => referenceLatency(client, referenceSha1, out),
    throughputs: [],
    latencies: []
  }
  const rlf: Contender = {
    label: "rate-limiter-flexible 11.4 `RateLimiterRedis.consume` (fixed window)",
    throughput: () => flexibleThroughput(flexible),
    latency: (out) => flexibleLatency(flexible, out),
    throughputs: [],
    latencies: []
  }
  const effectPeer: Contender = {
    label: "@effect/experimental 0.61 `RateLimiter.consume`, Redis store (fixed window)",
    throughput: () => effectThroughput(limiter),
    latency: (out) => effectLatency(limiter, out),
    throughputs: [],
    latencies: []
  }
  const effectBucket: Contender = {
    label: "@effect/experimental 0.61 `RateLimiter.consume`, Redis store (token bucket)",
    throughput: () => effectThroughput(limiter, "token-bucket"),
    latency: (out) => effectLatency(limiter, out, "token-bucket"),
    throughputs: [],
    latencies: []
  }
  const storeWindow: Contender = {
    label: "@effect/experimental 0.61 `RateLimiter.consume`, wakuwaku's store (fixed window)",
    throughput: () => effectThroughput(limiters.wakuwaku),
    latency: (out) => effectLatency(limiters.wakuwaku, out),
    throughputs: [],
    latencies: []
  }
  const storeBucket: Contender = {
    label: "@effect/experimental 0.61 `RateLimiter.consume`, wakuwaku's store (token bucket)",
    throughput: () => effectThroughput(limiters.wakuwaku, "token-bucket"),
    latency: (out) => effectLatency(limiters.wakuwaku, out, "token-bucket"),
    throughputs: [],
    latencies: []
  }
  const windowRow: Contender = {
    label: "wakuwaku `FixedWindow.acquire`",
    throughput: () => windowThroughput(env),
    latency: undefined,
    throughputs: [],
    latencies: []
  }
  // The floors (test/bench/floors.ts): the library's batch script by a batcher with no library code.
  const call = batcher(client, ACQUIRE.many!.sha1, [ARGV_SHAPE], 32)
  const promiseFloorRow: Contender = {
    label: "floor: plain-Promise batcher (≤ 32 per EVALSHA of the batch script, no Effect)",
    throughput: () => promiseFloor(call, (i) => FLOOR_KEY_PREFIX + nameOf(i), [ARGV_COST], THROUGHPUT_OPS, IN_FLIGHT),
    latency: undefined,
    throughputs: [],
    latencies: []
  }
  const effectFloorRow: Contender = {
    label: "floor: the same batcher, `Effect.async` from 256 fibers (no library code)",
    throughput: () => effectFloor(call, (i) => FLOOR_KEY_PREFIX + nameOf(i), [ARGV_COST], THROUGHPUT_OPS, IN_FLIGHT),
    latency: undefined,
    throughputs: [],
    latencies: []
  }
  // Not a peer of the others: its store is this process's memory, shared with no other process.
  const memory: Contender = {
    label: "wakuwaku on `Redis.layerMemory()` (one process only: not comparable)",
    throughput: () => wakuThroughput(memoryEnv),
    latency: (out) => wakuLatency(memoryEnv, out),
    throughputs: [],
    latencies: []
  }
  const contenders = [
    waku,
    wakuEach,
    windowRow,
    effectFloorRow,
    promiseFloorRow,
    raw,
    reference,
    rlf,
    effectPeer,
    storeWindow,
    effectBucket,
    storeBucket,
    memory
  ] as const

  const version = String(await client.info("server")).match(/redis_version:(\S+)/)?.[1] ?? "?"
  console.log(
    `node ${process.version}, ${availableParallelism()} cores, redis-server ${version} (pid ${server.pid}, ${server.url}), ` +
      `CLK_TCK ${ticksPerSecond}`
  )
  // To tell whether anything else ran on the machine meanwhile, which would disturb the figures.
  const machineBefore = machineTicks()
  const nodeBefore = process.cpuUsage()
  const redisTicksBefore = processTicks(server.pid)
  console.log(
    `throughput: ${THROUGHPUT_OPS} acquires/round, ${IN_FLIGHT} in flight, ${NAMES} names, cost 1, ` +
      `capacity ${CAPACITY}, ${String(RATE)}; latency: ${LATENCY_OPS} sequential acquires/round; ` +
      `${ROUNDS} timed rounds each after ${WARMUPS} warm-up${WARMUPS > 1 ? "s" : ""}, alternating\n`
  )

  // Warm-ups, untimed: WARMUPS rounds of each kind per contender.
  for (let warm = 0; warm < WARMUPS; warm++) {
    for (const contender of contenders) {
      await timeThroughput(contender)
      if (contender.latency) await timeLatency(contender)
    }
  }
  await flush()
  const allowed = await countAllowed(env, client, flexible, limiters, 10_000)
  console.log(
    `allowed (check, untimed): wakuwaku ${allowed.waku}/10000, raw ${allowed.raw}/10000, ` +
      `rate-limiter-flexible ${allowed.rlf}/10000, @effect/experimental ${allowed.effect}/10000 ` +
      `(token bucket ${allowed.effectBucket}/10000), RateLimiter over wakuwaku's store ${allowed.store}/10000 ` +
      `(token bucket ${allowed.storeBucket}/10000)\n`
  )

  for (let round = 1; round <= ROUNDS; round++) {
    for (const contender of contenders) {
      const t = await timeThroughput(contender)
      contender.throughputs.push(t)
      console.log(
        `round ${round} throughput ${contender.label}: ${Math.round(t.opsPerSecond)} acquires/s, ` +
          `Node ${t.nodeCpuUs.toFixed(1)} µs, Redis ${t.redisCpuUs.toFixed(1)} µs CPU/acquire, ` +
          `Redis socket reads/acquire ${t.redisReads.toFixed(3)}`
      )
    }
    for (const contender of contenders.filter((c) => c.latency !== undefined)) {
      const l = await timeLatency(contender)
      contender.latencies.push(l)
      console.log(
        `round ${round} latency    ${contender.label}: p50 ${l.p50Us.toFixed(1)} µs, p99 ${l.p99Us.toFixed(1)} µs`
      )
    }
  }
  await flush()
  const nodeCpu = process.cpuUsage(nodeBefore)
  const otherSeconds =
    (machineTicks() - machineBefore - (processTicks(server.pid) - redisTicksBefore)) / ticksPerSecond -
    (nodeCpu.user + nodeCpu.system) / 1e6
  console.log(
    "\n" + otherCpuLine(otherSeconds)
  )

  const summary = (c: Contender) => ({
    throughput: median(c.throughputs.map((t) => t.opsPerSecond)),
    p50: median(c.latencies.map((l) => l.p50Us))
  })

  console.log("\nmedian over rounds (min–max):\n")
  console.log("| contender | acquires/s | p50 µs | p99 µs | Node CPU µs/acquire | Redis CPU µs/acquire |")
  console.log("|---|---:|---:|---:|---:|---:|")
  for (const c of contenders) {
    console.log(
      `| ${c.label} | ${stat(c.throughputs.map((t) => t.opsPerSecond), 0, true)} | ` +
        (c.latency
          ? `${stat(c.latencies.map((l) => l.p50Us), 1)} | ${stat(c.latencies.map((l) => l.p99Us), 1)} | `
          : "— | — | ") +
        `${stat(c.throughputs.map((t) => t.nodeCpuUs), 1)} | ${stat(c.throughputs.map((t) => t.redisCpuUs), 1)} |`
    )
  }

  console.log(
    `\nRedis socket reads per acquire (median; lower means more commands arrive together): ` +
      contenders.map((c) => `${c.label} ${median(c.throughputs.map((t) => t.redisReads)).toFixed(3)}`).join(", ")
  )

  const w = summary(waku)
  const r = summary(raw)
  const f = summary(rlf)
  const e = summary(effectPeer)
  const nodeCpu_ = (c: Contender) => median(c.throughputs.map((t) => t.nodeCpuUs))
  const redisCpu = (c: Contender) => median(c.throughputs.map((t) => t.redisCpuUs))
  const line = (what: string, value: number, unit: string, target: string, met: boolean) =>
    console.log(`- ${what} = ${value.toFixed(unit === "×" ? 3 : 1)}${unit} (${target}): ${met ? "MET" : "MISSED"}`)
  console.log("\ntargets:")
  for (const [name, c] of [["TokenBucket", waku], ["FixedWindow", windowRow]] as const) {
    const ratio = summary(c).throughput / f.throughput
    line(`${name} throughput / rate-limiter-flexible`, ratio, "×", "target ≥ 2.0×, stretch 2.3×", ratio >= 2)
    line(`${name} Node CPU per acquire`, nodeCpu_(c), " µs", "target ≤ 4.5 µs, stretch 3.5 µs", nodeCpu_(c) <= 4.5)
  }
  console.log(
    `- distance from the Effect floor: TokenBucket +${(nodeCpu_(waku) - nodeCpu_(effectFloorRow)).toFixed(1)} µs, ` +
      `FixedWindow +${(nodeCpu_(windowRow) - nodeCpu_(effectFloorRow)).toFixed(1)} µs of Node CPU per acquire ` +
      `(the Effect floor ${nodeCpu_(effectFloorRow).toFixed(1)} µs, the plain-Promise floor ${
        nodeCpu_(promiseFloorRow).toFixed(1)
      } µs)`
  )
  const diff = w.p50 - r.p50
  line("p50 at concurrency 1, wakuwaku − raw", diff, " µs", "limit ≤ +15 µs", diff <= 15)
  const ratio = (a: Contender, b: Contender) => (summary(a).throughput / summary(b).throughput).toFixed(3)
  console.log(
    `- RateLimiter.consume over wakuwaku's store / over the experimental Redis store: fixed window ${
      ratio(storeWindow, effectPeer)
    }×, token bucket ${ratio(storeBucket, effectBucket)}×; Node CPU per consume ${nodeCpu_(storeWindow).toFixed(1)} ` +
      `and ${nodeCpu_(storeBucket).toFixed(1)} µs against ${nodeCpu_(effectPeer).toFixed(1)} and ${
        nodeCpu_(effectBucket).toFixed(1)
      } µs; Redis CPU ${redisCpu(storeWindow).toFixed(1)} and ${redisCpu(storeBucket).toFixed(1)} µs against ${
        redisCpu(effectPeer).toFixed(1)
      } and ${redisCpu(effectBucket).toFixed(1)} µs`
  )
  console.log(
    `  (wakuwaku/@effect/experimental = ${(w.throughput / e.throughput).toFixed(3)}×, wakuwaku/raw = ${
      (w.throughput / r.throughput).toFixed(3)
    }×; Redis CPU per acquire: wakuwaku ${redisCpu(waku).toFixed(1)} µs, the reference script ${
      redisCpu(reference).toFixed(1)
    } µs, rate-limiter-flexible ${redisCpu(rlf).toFixed(1)} µs)`
  )
}

// ---------------------------------------------------------------------------------------------------
// One server, one wakuwaku context, one raw client: all set up before anything is timed, all closed
// with the scope.

const program = Effect.scoped(
  Effect.gen(function*() {
    const server = yield* RedisServer.make()
    const env = yield* Layer.build(Redis.layer({ url: server.url }))
    const memoryEnv = yield* Layer.build(Redis.layerMemory())
    const client = yield* plainClient(server.url)
    // The floors send the batch script by EVALSHA alone.
    yield* Effect.promise(() => client.script("LOAD", ACQUIRE.many!.lua))
    const sha1 = yield* Effect.promise(() => client.script("LOAD", ACQUIRE.lua))
    if (sha1 !== ACQUIRE.sha1) {
      yield* Effect.dieMessage(`SCRIPT LOAD returned ${String(sha1)}, expected ${ACQUIRE.sha1}`)
    }
    // The peers, each on its own connection, as each would be deployed.
    const flexibleClient = yield* plainClient(server.url)
    const flexible = new FlexibleRedis({
      storeClient: flexibleClient,
      keyPrefix: FLEXIBLE_PREFIX,
      points: CAPACITY,
      duration: WINDOW_SECONDS
    })
    const limiterEnv = yield* Layer.build(
      RateLimiter.layer.pipe(
        Layer.provide(RateLimiterRedis.layerStore({ host: server.host, port: server.port, prefix: EFFECT_PREFIX }))
      )
    )
    const limiter = Context.get(limiterEnv, RateLimiter.RateLimiter)
    // The same RateLimiter over wakuwaku's store, on the wakuwaku rows' connection.
    const storeEnv = yield* Layer.build(
      RateLimiter.layer.pipe(
        Layer.provide(RateLimiterStore.layer({ namespace: "bench-store" })),
        Layer.provide(Layer.succeedContext(env))
      )
    )
    const limiters: Limiters = { experimental: limiter, wakuwaku: Context.get(storeEnv, RateLimiter.RateLimiter) }
    const referenceSha1 = String(yield* Effect.promise(() => client.script("LOAD", REFERENCE_LUA)))
    yield* Effect.promise(() => measure(server, env, memoryEnv, client, flexible, limiters, referenceSha1))
  })
)

Effect.runPromise(program).catch((error: unknown) => {
  console.error(error)
  process.exitCode = 1
})
