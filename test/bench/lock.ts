/**
 * `npm run bench` (second part): a lock/unlock round trip, wakuwaku `Lock` against redis-semaphore's
 * `Mutex`, on one throwaway redis-server (RedisServer.make), rounds alternated A B C A B C.
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
 * (concurrency 1), each timed from before the lock to after the release. Every round starts from an
 * empty database (FLUSHALL, untimed). Each contender gets one untimed warm-up round of each kind, then
 * 5 timed rounds of each; figures are medians over rounds with min–max. Every lock must be granted and
 * every release must find its lock: anything else stops the benchmark.
 *
 * CPU per round trip (throughput rounds only): Node is `process.cpuUsage()` (user + system) of this
 * process; Redis is utime + stime of the redis-server process from /proc/<pid>/stat, in clock ticks.
 * Also printed: the CPU other processes used meanwhile (/proc/stat minus this process and the server),
 * which tells whether the machine was quiet.
 */
import { Effect, Layer, Option } from "effect"
import type { Context } from "effect"
import { Redis as IORedis } from "ioredis"
import { randomBytes } from "node:crypto"
import { availableParallelism } from "node:os"
import { performance } from "node:perf_hooks"
import { Mutex } from "redis-semaphore"
import { Lock, Redis } from "wakuwaku"
import { ACQUIRE, RELEASE } from "wakuwaku/internal/lock"
import { RedisServer } from "wakuwaku/testing"
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

/** `--quick` (development): fewer round trips, 2 timed rounds. */
const QUICK = process.argv.includes("--quick")
const IN_FLIGHT = 64
const THROUGHPUT_OPS = QUICK ? 10_000 : 20_000
const LATENCY_OPS = QUICK ? 1_000 : 2_000
const ROUNDS = QUICK ? 2 : 5
const LEASE_MS = 30_000

const JOBS = Lock.make<string>("bench", LEASE_MS)
const SEMAPHORE_PREFIX = "bench-rs:"
const RAW_NAMESPACE = "bench-raw"
const LEASE_ARG = String(LEASE_MS)
const SEMAPHORE_OPTIONS = { lockTimeout: LEASE_MS, acquireAttemptsLimit: 1, refreshInterval: 0 } as const

const names: ReadonlyArray<string> = Array.from({ length: IN_FLIGHT }, (_, i) => `job-${i}`)
const nameOf = (i: number): string => names[i % IN_FLIGHT] ?? "unreachable"

type Env = Context.Context<Redis.ReadWrite>

// ---------------------------------------------------------------------------------------------------
// The contenders

/** One wakuwaku round trip: lock, release. Dies if the lock is not granted or the release finds nothing. */
const wakuRoundTrip = (name: string) =>
  Effect.flatMap(JOBS.tryLock(name), (token) =>
    Option.isNone(token)
      ? Effect.dieMessage(`wakuwaku: ${name} was not granted`)
      : Effect.flatMap(
        token.value.release,
        (released) => released ? Effect.void : Effect.dieMessage(`wakuwaku: ${name} was not released`)
      ))

/** 64 fibers, each locking and unlocking its own name in a loop. */
const wakuThroughput = (env: Env): Promise<void> => {
  let done = 0
  const loop = (name: string) =>
    Effect.whileLoop({
      while: () => done < THROUGHPUT_OPS,
      body: () => {
        done++
        return wakuRoundTrip(name)
      },
      step: () => {}
    })
  return Effect.runPromise(
    Effect.all(names.map(loop), { concurrency: "unbounded", discard: true }).pipe(Effect.provide(env))
  )
}

const wakuLatency = (env: Env, out: Float64Array): Promise<void> =>
  Effect.runPromise(
    Effect.gen(function*() {
      for (let i = 0; i < out.length; i++) {
        const start = performance.now()
        yield* wakuRoundTrip(nameOf(i))
        out[i] = performance.now() - start
      }
    }).pipe(Effect.provide(env))
  )

/** One redis-semaphore round trip: a fresh Mutex, one try, release. Throws if the lock is not granted. */
const semaphoreRoundTrip = async (client: IORedis, name: string): Promise<void> => {
  const mutex = new Mutex(client, SEMAPHORE_PREFIX + name, SEMAPHORE_OPTIONS)
  if (!(await mutex.tryAcquire())) throw new Error(`redis-semaphore: ${name} was not granted`)
  await mutex.release()
}

const semaphoreThroughput = async (client: IORedis): Promise<void> => {
  let done = 0
  const loop = async (name: string): Promise<void> => {
    while (done < THROUGHPUT_OPS) {
      done++
      await semaphoreRoundTrip(client, name)
    }
  }
  await Promise.all(names.map(loop))
}

const semaphoreLatency = async (client: IORedis, out: Float64Array): Promise<void> => {
  for (let i = 0; i < out.length; i++) {
    const start = performance.now()
    await semaphoreRoundTrip(client, nameOf(i))
    out[i] = performance.now() - start
  }
}

/** One raw round trip: the library's own scripts by EVALSHA, with the keys the library would build. */
const rawRoundTrip = async (client: IORedis, name: string): Promise<void> => {
  const owner = `@@wakuwaku:Lock:{${RAW_NAMESPACE}:${name}}:owner`
  const fence = `@@wakuwaku:Lock:{${RAW_NAMESPACE}:${name}}:fence`
  const token = randomBytes(16).toString("base64url")
  if (typeof (await client.evalsha(ACQUIRE.sha1, 2, owner, fence, token, LEASE_ARG)) !== "string") {
    throw new Error(`raw: ${name} was not granted`)
  }
  if ((await client.evalsha(RELEASE.sha1, 1, owner, token)) !== 1) throw new Error(`raw: ${name} was not released`)
}

const rawThroughput = async (client: IORedis): Promise<void> => {
  let done = 0
  const loop = async (name: string): Promise<void> => {
    while (done < THROUGHPUT_OPS) {
      done++
      await rawRoundTrip(client, name)
    }
  }
  await Promise.all(names.map(loop))
}

const rawLatency = async (client: IORedis, out: Float64Array): Promise<void> => {
  for (let i = 0; i < out.length; i++) {
    const start = performance.now()
    await rawRoundTrip(client, nameOf(i))
    out[i] = performance.now() - start
  }
}

// ---------------------------------------------------------------------------------------------------
// Measurement

interface ThroughputSample {
  readonly opsPerSecond: number
  readonly nodeCpuUs: number
  readonly redisCpuUs: number
}

interface LatencySample {
  readonly p50Us: number
  readonly p99Us: number
}

interface Contender {
  readonly label: string
  readonly throughput: () => Promise<void>
  readonly latency: (out: Float64Array) => Promise<void>
  readonly throughputs: Array<ThroughputSample>
  readonly latencies: Array<LatencySample>
}

const measure = async (server: RedisServer.Server, env: Env, client: IORedis): Promise<void> => {
  const ticksPerSecond = clockTicks()
  const flush = () => client.flushall()

  const timeThroughput = async (contender: Contender): Promise<ThroughputSample> => {
    await flush()
    const redisBefore = processTicks(server.pid)
    const cpuBefore = process.cpuUsage()
    const start = performance.now()
    await contender.throughput()
    const elapsedMs = performance.now() - start
    const cpu = process.cpuUsage(cpuBefore)
    const redisTicks = processTicks(server.pid) - redisBefore
    return {
      opsPerSecond: THROUGHPUT_OPS / (elapsedMs / 1000),
      nodeCpuUs: (cpu.user + cpu.system) / THROUGHPUT_OPS,
      redisCpuUs: (redisTicks / ticksPerSecond) * 1e6 / THROUGHPUT_OPS
    }
  }

  const timeLatency = async (contender: Contender): Promise<LatencySample> => {
    await flush()
    const out = new Float64Array(LATENCY_OPS)
    await contender.latency(out)
    out.sort()
    return { p50Us: percentile(out, 0.5), p99Us: percentile(out, 0.99) }
  }

  const waku: Contender = {
    label: "wakuwaku `tryLock` + `release`",
    throughput: () => wakuThroughput(env),
    latency: (out) => wakuLatency(env, out),
    throughputs: [],
    latencies: []
  }
  const semaphore: Contender = {
    label: "redis-semaphore `Mutex` `tryAcquire` + `release`",
    throughput: () => semaphoreThroughput(client),
    latency: (out) => semaphoreLatency(client, out),
    throughputs: [],
    latencies: []
  }
  const raw: Contender = {
    label: "raw ioredis `evalsha` of wakuwaku's scripts (reference)",
    throughput: () => rawThroughput(client),
    latency: (out) => rawLatency(client, out),
    throughputs: [],
    latencies: []
  }
  const contenders = [waku, semaphore, raw] as const

  const version = String(await client.info("server")).match(/redis_version:(\S+)/)?.[1] ?? "?"
  console.log(
    `node ${process.version}, ${availableParallelism()} cores, redis-server ${version} (pid ${server.pid}, ${server.url}), ` +
      `CLK_TCK ${ticksPerSecond}`
  )
  const machineBefore = machineTicks()
  const nodeBefore = process.cpuUsage()
  const redisTicksBefore = processTicks(server.pid)
  console.log(
    `throughput: ${THROUGHPUT_OPS} lock/unlock round trips/round, ${IN_FLIGHT} names in flight (one loop each); ` +
      `latency: ${LATENCY_OPS} sequential round trips/round; lease ${LEASE_MS} ms; ` +
      `${ROUNDS} timed rounds each after 1 warm-up, alternating\n`
  )

  // Warm-up, untimed: one round of each kind per contender (loads the scripts, warms the JIT).
  for (const contender of contenders) {
    await timeThroughput(contender)
    await timeLatency(contender)
  }

  for (let round = 1; round <= ROUNDS; round++) {
    for (const contender of contenders) {
      const t = await timeThroughput(contender)
      contender.throughputs.push(t)
      console.log(
        `round ${round} throughput ${contender.label}: ${Math.round(t.opsPerSecond)} round trips/s, ` +
          `Node ${t.nodeCpuUs.toFixed(1)} µs, Redis ${t.redisCpuUs.toFixed(1)} µs CPU/round trip`
      )
    }
    for (const contender of contenders) {
      const l = await timeLatency(contender)
      contender.latencies.push(l)
      console.log(
        `round ${round} latency    ${contender.label}: p50 ${l.p50Us.toFixed(1)} µs, p99 ${l.p99Us.toFixed(1)} µs`
      )
    }
  }
  // Nothing is left held: every lock was released.
  const held = (await client.keys("@@wakuwaku:Lock:*:owner")).length +
    (await client.keys(`mutex:${SEMAPHORE_PREFIX}*`)).length
  await flush()
  const nodeCpu = process.cpuUsage(nodeBefore)
  const otherSeconds =
    (machineTicks() - machineBefore - (processTicks(server.pid) - redisTicksBefore)) / ticksPerSecond -
    (nodeCpu.user + nodeCpu.system) / 1e6
  console.log(
    `\nlocks left held after the rounds: ${held}` +
      "\n" + otherCpuLine(otherSeconds)
  )

  const summary = (c: Contender) => ({
    throughput: median(c.throughputs.map((t) => t.opsPerSecond)),
    p50: median(c.latencies.map((l) => l.p50Us))
  })

  console.log("\nmedian over rounds (min–max):\n")
  console.log(
    "| contender | round trips/s (64 names) | p50 µs | p99 µs | Node CPU µs/round trip | Redis CPU µs/round trip |"
  )
  console.log("|---|---:|---:|---:|---:|---:|")
  for (const c of contenders) {
    console.log(
      `| ${c.label} | ${stat(c.throughputs.map((t) => t.opsPerSecond), 0, true)} | ` +
        `${stat(c.latencies.map((l) => l.p50Us), 1)} | ${stat(c.latencies.map((l) => l.p99Us), 1)} | ` +
        `${stat(c.throughputs.map((t) => t.nodeCpuUs), 1)} | ${stat(c.throughputs.map((t) => t.redisCpuUs), 1)} |`
    )
  }

  const w = summary(waku)
  const s = summary(semaphore)
  const ratio = w.throughput / s.throughput
  const diff = w.p50 - s.p50
  console.log("\ntargets:")
  console.log(
    `- throughput wakuwaku/redis-semaphore = ${ratio.toFixed(3)}× (target ≥ 1.0×): ${ratio >= 1 ? "MET" : "MISSED"}`
  )
  console.log(
    `- p50 wakuwaku − redis-semaphore = ${diff >= 0 ? "+" : ""}${diff.toFixed(1)} µs (target ≤ 0): ` +
      (diff <= 0 ? "MET" : "MISSED")
  )
}

// ---------------------------------------------------------------------------------------------------
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
    yield* Effect.promise(() => measure(server, env, client))
  })
)

Effect.runPromise(program).catch((error: unknown) => {
  console.error(error)
  process.exitCode = 1
})
