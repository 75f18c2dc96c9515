/**
 * What the round-trip benchmarks share (lock.ts, semaphore.ts): contenders that each take and give back
 * something on a name, measured in alternating rounds A B C A B C on one throwaway redis-server.
 *
 * - Throughput rounds: one loop per entry of `loops` (a name each; several loops may share a name), each
 *   doing round trips on its name until `throughputOps` are done in all.
 * - Latency rounds: `latencyOps` round trips one after another (concurrency 1) over the distinct names,
 *   each timed from before the take to after the give-back; their round trips per second are printed too.
 * - Every round starts from an empty database (FLUSHALL, untimed). Each contender gets one untimed
 *   warm-up round of each kind, then `rounds` timed rounds of each; figures are medians over rounds with
 *   min–max.
 *
 * CPU per round trip (throughput rounds only): Node is `process.cpuUsage()` (user + system) of this
 * process; Redis is utime + stime of the redis-server process from /proc/<pid>/stat, in clock ticks.
 * Also printed: the CPU other processes used meanwhile (/proc/stat minus this process and the server),
 * which tells whether the machine was quiet.
 */
import { Effect } from "effect"
import type { Context } from "effect"
import type { Redis as IORedis } from "ioredis"
import { availableParallelism } from "node:os"
import { performance } from "node:perf_hooks"
import type { RedisServer } from "wakuwaku/testing"
import { clockTicks, machineTicks, median, otherCpuLine, percentile, processTicks, stat } from "./measure.js"

export interface Contender {
  readonly label: string
  readonly throughput: () => Promise<void>
  readonly latency: (out: Float64Array) => Promise<void>
}

export interface Plan {
  /** Names of the loops of a throughput round, one per loop. */
  readonly loops: ReadonlyArray<string>
  readonly throughputOps: number
  readonly latencyOps: number
  readonly rounds: number
}

/** A contender whose round trip is an Effect, run in fibers in `env`: one fiber per loop. */
export const effectContender = <R>(
  label: string,
  plan: Plan,
  env: Context.Context<R>,
  roundTrip: (name: string) => Effect.Effect<void, unknown, R>
): Contender => {
  const names = [...new Set(plan.loops)]
  return {
    label,
    throughput: () => {
      let done = 0
      const loop = (name: string) =>
        Effect.whileLoop({
          while: () => done < plan.throughputOps,
          body: () => {
            done++
            return roundTrip(name)
          },
          step: () => {}
        })
      return Effect.runPromise(
        Effect.all(plan.loops.map(loop), { concurrency: "unbounded", discard: true }).pipe(Effect.provide(env))
      )
    },
    latency: (out) =>
      Effect.runPromise(
        Effect.gen(function*() {
          for (let i = 0; i < out.length; i++) {
            const start = performance.now()
            yield* roundTrip(names[i % names.length]!)
            out[i] = performance.now() - start
          }
        }).pipe(Effect.provide(env))
      )
  }
}

/** A contender whose round trip is a Promise: one async loop per loop. */
export const promiseContender = (
  label: string,
  plan: Plan,
  roundTrip: (name: string) => Promise<void>
): Contender => {
  const names = [...new Set(plan.loops)]
  return {
    label,
    throughput: async () => {
      let done = 0
      const loop = async (name: string): Promise<void> => {
        while (done < plan.throughputOps) {
          done++
          await roundTrip(name)
        }
      }
      await Promise.all(plan.loops.map(loop))
    },
    latency: async (out) => {
      for (let i = 0; i < out.length; i++) {
        const start = performance.now()
        await roundTrip(names[i % names.length]!)
        out[i] = performance.now() - start
      }
    }
  }
}

interface ThroughputSample {
  readonly opsPerSecond: number
  readonly nodeCpuUs: number
  readonly redisCpuUs: number
}

interface LatencySample {
  readonly p50Us: number
  readonly p99Us: number
  readonly opsPerSecond: number
}

/**
 * Measures `contenders` (the first is wakuwaku, the second the peer its targets compare with), prints
 * every round, the table and the targets. `describe` is the workload line; `held` counts what is left
 * held after the rounds (it must be 0).
 */
export const measure = async (options: {
  readonly server: RedisServer.Server
  readonly client: IORedis
  readonly plan: Plan
  readonly describe: string
  readonly contenders: readonly [Contender, Contender, ...Array<Contender>]
  readonly held: () => Promise<number>
  /** Whether p50 ≤ the peer's is a target (Lock's), or only reported. */
  readonly p50Target?: boolean | undefined
}): Promise<void> => {
  const { client, contenders, plan, server } = options
  const ticksPerSecond = clockTicks()
  const flush = () => client.flushall()
  const throughputs = new Map<Contender, Array<ThroughputSample>>(contenders.map((c) => [c, []]))
  const latencies = new Map<Contender, Array<LatencySample>>(contenders.map((c) => [c, []]))

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
      opsPerSecond: plan.throughputOps / (elapsedMs / 1000),
      nodeCpuUs: (cpu.user + cpu.system) / plan.throughputOps,
      redisCpuUs: (redisTicks / ticksPerSecond) * 1e6 / plan.throughputOps
    }
  }

  const timeLatency = async (contender: Contender): Promise<LatencySample> => {
    await flush()
    const out = new Float64Array(plan.latencyOps)
    const start = performance.now()
    await contender.latency(out)
    const elapsedMs = performance.now() - start
    out.sort()
    return {
      p50Us: percentile(out, 0.5),
      p99Us: percentile(out, 0.99),
      opsPerSecond: plan.latencyOps / (elapsedMs / 1000)
    }
  }

  const version = String(await client.info("server")).match(/redis_version:(\S+)/)?.[1] ?? "?"
  console.log(
    `node ${process.version}, ${availableParallelism()} cores, redis-server ${version} (pid ${server.pid}, ${server.url}), ` +
      `CLK_TCK ${ticksPerSecond}`
  )
  const machineBefore = machineTicks()
  const nodeBefore = process.cpuUsage()
  const redisTicksBefore = processTicks(server.pid)
  console.log(`${options.describe}; ${plan.rounds} timed rounds each after 1 warm-up, alternating\n`)

  // Warm-up, untimed: one round of each kind per contender (loads the scripts, warms the JIT).
  for (const contender of contenders) {
    await timeThroughput(contender)
    await timeLatency(contender)
  }

  for (let round = 1; round <= plan.rounds; round++) {
    for (const contender of contenders) {
      const t = await timeThroughput(contender)
      throughputs.get(contender)!.push(t)
      console.log(
        `round ${round} throughput ${contender.label}: ${Math.round(t.opsPerSecond)} round trips/s, ` +
          `Node ${t.nodeCpuUs.toFixed(1)} µs, Redis ${t.redisCpuUs.toFixed(1)} µs CPU/round trip`
      )
    }
    for (const contender of contenders) {
      const l = await timeLatency(contender)
      latencies.get(contender)!.push(l)
      console.log(
        `round ${round} latency    ${contender.label}: p50 ${l.p50Us.toFixed(1)} µs, p99 ${l.p99Us.toFixed(1)} µs, ` +
          `${Math.round(l.opsPerSecond)} round trips/s`
      )
    }
  }
  const held = await options.held()
  await flush()
  const nodeCpu = process.cpuUsage(nodeBefore)
  const otherSeconds =
    (machineTicks() - machineBefore - (processTicks(server.pid) - redisTicksBefore)) / ticksPerSecond -
    (nodeCpu.user + nodeCpu.system) / 1e6
  console.log(`\nleft held after the rounds: ${held}\n${otherCpuLine(otherSeconds)}`)

  const loops = plan.loops.length
  const names = new Set(plan.loops).size
  const inFlight = loops === names ? `${loops} names` : `${loops} loops on ${names} names`
  console.log("\nmedian over rounds (min–max):\n")
  console.log(
    `| contender | round trips/s (${inFlight}) | round trips/s (concurrency 1) | p50 µs | p99 µs | ` +
      "Node CPU µs/round trip | Redis CPU µs/round trip |"
  )
  console.log("|---|---:|---:|---:|---:|---:|---:|")
  for (const c of contenders) {
    const t = throughputs.get(c)!
    const l = latencies.get(c)!
    console.log(
      `| ${c.label} | ${stat(t.map((x) => x.opsPerSecond), 0, true)} | ${
        stat(l.map((x) => x.opsPerSecond), 0, true)
      } | ` +
        `${stat(l.map((x) => x.p50Us), 1)} | ${stat(l.map((x) => x.p99Us), 1)} | ` +
        `${stat(t.map((x) => x.nodeCpuUs), 1)} | ${stat(t.map((x) => x.redisCpuUs), 1)} |`
    )
  }

  const [ours, peer] = contenders
  const of = (c: Contender) => ({
    throughput: median(throughputs.get(c)!.map((t) => t.opsPerSecond)),
    sequential: median(latencies.get(c)!.map((l) => l.opsPerSecond)),
    p50: median(latencies.get(c)!.map((l) => l.p50Us))
  })
  const w = of(ours)
  const s = of(peer)
  const ratio = w.throughput / s.throughput
  const sequential = w.sequential / s.sequential
  const diff = w.p50 - s.p50
  console.log("\ntargets:")
  console.log(`- throughput ours/peer = ${ratio.toFixed(3)}× (target ≥ 1.0×): ${ratio >= 1 ? "MET" : "MISSED"}`)
  console.log(`- at concurrency 1, ours/peer = ${sequential.toFixed(3)}× (reported)`)
  console.log(
    `- p50 ours − peer = ${diff >= 0 ? "+" : ""}${diff.toFixed(1)} µs ` +
      (options.p50Target === true ? `(target ≤ 0): ${diff <= 0 ? "MET" : "MISSED"}` : "(reported)")
  )
  if (held !== 0) throw new Error(`${held} left held after the rounds`)
}
