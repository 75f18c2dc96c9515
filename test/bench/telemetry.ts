/**
 * `npm run bench` (part of its own): what telemetry costs per `TokenBucket.acquire`, in this process.
 *
 * The first row of test/bench/tokenBucket.ts (256 fibers, each calling `BUCKET.acquire(name_i, 1)` in a
 * loop, every acquire allowed) under four settings, rounds alternated A B C D A B C D:
 *
 * - off: nothing provided (the default): no metric, no span;
 * - metrics: `Telemetry.layer({})`: Effect Metrics in the process's registry, no span;
 * - spans, Effect's tracer: `Telemetry.layer({ spans: true })` (metrics too) and no tracer installed: Effect's
 *   built-in tracer still makes every span;
 * - spans, OpenTelemetry: the same with `@effect/opentelemetry`'s NodeSdk, a SimpleSpanProcessor into an
 *   InMemorySpanExporter (emptied after each round, untimed) and a metric reader.
 *
 * On two stores: the embedded one (`Redis.layerMemory()`: the library's own CPU only, where telemetry
 * weighs the most) and a throwaway redis-server (`Redis.layer({ url })`: batched calls, what a service sees).
 * Printed per setting: Node CPU µs per acquire (`process.cpuUsage`, user + system) and acquires per second,
 * medians over rounds with min–max, and the CPU ratio to "off".
 *
 * Memory: 50 000 acquires per round, Redis: 50 000; 2 warm-up rounds, 5 timed (`--quick`: 10 000, 1, 2).
 */
import { NodeSdk } from "@effect/opentelemetry"
import {
  AggregationTemporality,
  InMemoryMetricExporter,
  PeriodicExportingMetricReader
} from "@opentelemetry/sdk-metrics"
import { InMemorySpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base"
import { Effect, Layer, ManagedRuntime } from "effect"
import { Rate, Redis, Telemetry, TokenBucket } from "wakuwaku"
import { RedisServer } from "wakuwaku/testing"
import { median } from "./measure.js"

const QUICK = process.argv.includes("--quick")
const OPS = QUICK ? 10_000 : 50_000
const ROUNDS = QUICK ? 2 : 5
const WARMUPS = QUICK ? 1 : 2
const IN_FLIGHT = 256
const NAMES = 10_000
const BUCKET = TokenBucket.make<string>("bench-telemetry", 1_000_000, Rate.perSecond(1000))
const names = Array.from({ length: NAMES }, (_, i) => `user-${i}`)

/** `ops` acquires by IN_FLIGHT fibers, each in a loop. */
const loop = (ops: number) =>
  Effect.gen(function*() {
    let next = 0
    const worker = Effect.whileLoop({
      while: () => next < ops,
      body: () => BUCKET.acquire(names[next++ % NAMES]!, 1),
      step: () => {}
    })
    yield* Effect.all(Array.from({ length: IN_FLIGHT }, () => worker), { concurrency: "unbounded", discard: true })
  })

interface Setting {
  readonly name: string
  readonly layer: Layer.Layer<never>
  readonly after?: () => void
}

const spans = new InMemorySpanExporter()
const SETTINGS: ReadonlyArray<Setting> = [
  { name: "off (the default)", layer: Layer.empty },
  { name: "metrics: `Telemetry.layer({})`", layer: Telemetry.layer({}) },
  { name: "spans, Effect's tracer", layer: Telemetry.layer({ spans: true }) },
  {
    name: "spans, OpenTelemetry SDK",
    layer: Layer.merge(
      Telemetry.layer({ spans: true }),
      NodeSdk.layer(() => ({
        resource: { serviceName: "bench" },
        spanProcessor: new SimpleSpanProcessor(spans),
        metricReader: new PeriodicExportingMetricReader({
          exporter: new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE),
          exportIntervalMillis: 60_000
        })
      }))
    ),
    after: () => spans.reset()
  }
]

const round = async (runtime: ManagedRuntime.ManagedRuntime<Redis.ReadWrite, unknown>, ops: number) => {
  const cpu = process.cpuUsage()
  const start = performance.now()
  await runtime.runPromise(loop(ops))
  const wall = performance.now() - start
  const used = process.cpuUsage(cpu)
  return { cpuUs: (used.user + used.system) / ops, perSecond: ops / (wall / 1000) }
}

const fmt = (xs: ReadonlyArray<number>, digits: number) =>
  `${median(xs).toFixed(digits)} (${Math.min(...xs).toFixed(digits)}–${Math.max(...xs).toFixed(digits)})`

const measure = async (title: string, store: () => Layer.Layer<Redis.ReadWrite, Redis.RedisError>) => {
  const runtimes = SETTINGS.map((s) => ManagedRuntime.make(Layer.merge(store(), s.layer)))
  const results = SETTINGS.map(() => ({ cpu: [] as Array<number>, rate: [] as Array<number> }))
  for (let r = 0; r < WARMUPS + ROUNDS; r++) {
    for (let i = 0; i < SETTINGS.length; i++) {
      const measured = await round(runtimes[i]!, OPS)
      SETTINGS[i]!.after?.()
      if (r >= WARMUPS) {
        results[i]!.cpu.push(measured.cpuUs)
        results[i]!.rate.push(measured.perSecond)
      }
    }
  }
  for (const runtime of runtimes) await runtime.dispose()
  const off = median(results[0]!.cpu)
  console.log(`\n${title}: ${OPS} acquires per round, ${IN_FLIGHT} in flight, ${ROUNDS} rounds\n`)
  console.log("| setting | Node CPU µs/acquire | acquires/s | CPU vs off |")
  console.log("|---|---:|---:|---:|")
  SETTINGS.forEach((s, i) => {
    const { cpu, rate } = results[i]!
    console.log(`| ${s.name} | ${fmt(cpu, 2)} | ${fmt(rate, 0)} | ${(median(cpu) / off).toFixed(2)}× |`)
  })
}

await measure("Embedded store (Redis.layerMemory)", () => Redis.layerMemory())
await Effect.runPromise(
  Effect.scoped(
    Effect.gen(function*() {
      const server = yield* RedisServer.make()
      yield* Effect.promise(() => measure("redis-server (Redis.layer)", () => Redis.layer({ url: server.url })))
    })
  )
)
