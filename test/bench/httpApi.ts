/**
 * `npm run bench` (seventh part): what the HttpApi middleware, `choose` and several limits as one cost,
 * each beside its baseline in one run.
 *
 * - **Apps** (CPU per request): one @effect/platform-node server per app in this process, on the embedded
 *   store with allow-everything limiters (a token bucket of 10^9 refilled 10^9 a second, a fixed window of
 *   10^9 a second), the tracer disabled, driven by `wrk -t1 -c32` rounds alternated over the apps after one
 *   warm-up. CPU per request is this process's `process.cpuUsage()` over the requests wrk completed (only
 *   the app under load is busy). The rows:
 *   an `HttpApp` answering a fixed text, alone; running `TokenBucket.acquire` itself before answering (the
 *   floor of any middleware asking this limiter); with `RateLimit.middleware` on one bucket; on the bucket and
 *   the window as one decision; with `choose` picking the bucket by a header; an `HttpApi` with one
 *   endpoint answering a string, alone; with a middleware implemented by `RateLimit.apiMiddleware`.
 * - **Decisions on Redis** (one throwaway redis-server, one call after another): a bucket alone
 *   (`TokenBucket.acquire`); the bucket and a window decided as one (one `Limits.acquire` script); the two
 *   asked one after the other, as two stacked middlewares do. Per decision: the median latency, and
 *   redis-server's CPU inside the scripts (INFO commandstats `usec` of evalsha, over the decisions).
 *
 * - **In process** (CPU per request): the `HttpApp`s above run on one request with no server and no socket,
 *   50 000 times each per round, 5 rounds after a warm-up, alternated: what the middleware itself costs,
 *   without the spread of a server's CPU per request.
 *
 * `--quick`: one round of 2 s, 1000 decisions per row, 10 000 runs in process. The full run: 3 rounds of
 * 4 s, 3000 decisions per row; 5 rounds in process. The CPU other processes used is printed.
 */
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import * as HttpApi from "@effect/platform/HttpApi"
import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import * as HttpApiEndpoint from "@effect/platform/HttpApiEndpoint"
import * as HttpApiGroup from "@effect/platform/HttpApiGroup"
import * as HttpApiMiddleware from "@effect/platform/HttpApiMiddleware"
import type * as HttpApp from "@effect/platform/HttpApp"
import * as HttpMiddleware from "@effect/platform/HttpMiddleware"
import * as HttpServer from "@effect/platform/HttpServer"
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import { Context, Effect, Exit, Layer, Runtime, Schema, Scope } from "effect"
import { Redis as IORedis } from "ioredis"
import { spawn } from "node:child_process"
import { readFileSync } from "node:fs"
import { createServer } from "node:http"
import { availableParallelism } from "node:os"
import { performance } from "node:perf_hooks"
import { FixedWindow, Rate, Redis, TokenBucket } from "wakuwaku"
import { RateLimit } from "wakuwaku/http"
import * as limits from "wakuwaku/internal/limits"
import { RedisServer } from "wakuwaku/testing"
import { clockTicks, machineTicks, median, otherCpuLine, processTicks, stat } from "./measure.js"

const QUICK = process.argv.includes("--quick")
const ROUNDS = QUICK ? 1 : 3
const WRK_SECONDS = QUICK ? 2 : 4
const DECISIONS = QUICK ? 1000 : 3000
const IN_PROCESS = QUICK ? 10_000 : 50_000
const IN_PROCESS_ROUNDS = QUICK ? 1 : 5

const BUCKET = TokenBucket.make<string>("bench-bucket", 1_000_000_000, Rate.make(1_000_000_000, "1 second"))
const WINDOW = FixedWindow.make<string>("bench-window", 1_000_000_000, "1 second")
const hello = Effect.succeed(HttpServerResponse.text("hello, world\n"))

class BenchLimit extends HttpApiMiddleware.Tag<BenchLimit>()("BenchLimit", {
  failure: RateLimit.RateLimitExceeded
}) {}

const endpoint = HttpApiEndpoint.get("hello", "/").addSuccess(Schema.String)
const plainApi = HttpApi.make("plain").add(HttpApiGroup.make("g").add(endpoint))
const limitedApi = HttpApi.make("limited").add(HttpApiGroup.make("g").add(endpoint).middleware(BenchLimit))

const noTracer = HttpMiddleware.withTracerDisabledWhen(() => true)
const node = NodeHttpServer.layer(() => createServer(), { port: 0, host: "127.0.0.1" })

type Served = Layer.Layer<HttpServer.HttpServer, unknown, Redis.ReadWrite>

const served = <E, R extends Redis.ReadWrite>(app: HttpApp.Default<E, R>): Served =>
  HttpServer.serve(app).pipe(noTracer, Layer.provideMerge(node))

const apiServed = <E, R extends Redis.ReadWrite>(api: Layer.Layer<HttpApi.Api, E, R>): Served =>
  HttpApiBuilder.serve().pipe(noTracer, Layer.provide(api), Layer.provideMerge(node))

const hi = () => Effect.succeed("hello")

/** The `HttpApp`s: served below, and run in process with no server (their first is the baseline). */
const httpApps: ReadonlyArray<readonly [label: string, app: HttpApp.Default<unknown, Redis.ReadWrite>]> = [
  ["`HttpApp`, no middleware", hello],
  ["floor: the same app running `TokenBucket.acquire` itself", Effect.zipRight(BUCKET.acquire("x", 1), hello)],
  [
    "the same with `RateLimit.middleware`, one bucket",
    RateLimit.middleware({ limiter: BUCKET, onStoreFailure: "fail-closed" })(hello)
  ],
  [
    "the same, a bucket and a window as one decision",
    RateLimit.middleware({ limiter: [BUCKET, WINDOW], onStoreFailure: "fail-closed" })(hello)
  ],
  [
    "the same, `choose` picking the bucket",
    RateLimit.middleware({ choose: () => ({ limiter: BUCKET, key: "127.0.0.1" }), onStoreFailure: "fail-closed" })(
      hello
    )
  ]
]

/** The apps, each served on a port of its own; the first of each kind is the baseline of the rows below it. */
const apps: ReadonlyArray<readonly [label: string, layer: Served, baseline: number]> = [
  ...httpApps.map(([label, app]) => [label, served(app), 0] as const),
  [
    "`HttpApi`, no middleware",
    apiServed(
      HttpApiBuilder.api(plainApi).pipe(
        Layer.provide(HttpApiBuilder.group(plainApi, "g", (h) => h.handle("hello", hi)))
      )
    ),
    5
  ],
  [
    "the same with `RateLimit.apiMiddleware`, one bucket",
    apiServed(
      HttpApiBuilder.api(limitedApi).pipe(
        Layer.provide(HttpApiBuilder.group(limitedApi, "g", (h) => h.handle("hello", hi))),
        Layer.provide(RateLimit.apiMiddleware(BenchLimit, { limiter: BUCKET, onStoreFailure: "fail-closed" }))
      )
    ),
    5
  ]
]

/** wrk's figures: requests/s and requests done; throws unless every response was 2xx. */
const wrk = (url: string, seconds: number) =>
  new Promise<{ readonly requestsPerSecond: number; readonly requests: number }>((resolve, reject) => {
    const child = spawn("wrk", ["-c", "32", "-t", "1", "-d", `${seconds}s`, url], { stdio: ["ignore", "pipe", "pipe"] })
    let output = ""
    child.stdout.on("data", (chunk: Buffer) => (output += chunk.toString()))
    child.stderr.on("data", (chunk: Buffer) => (output += chunk.toString()))
    child.on("error", reject)
    child.on("exit", (code) => {
      const requests = Number(/(\d+) requests in/.exec(output)?.[1] ?? Number.NaN)
      const requestsPerSecond = Number(/Requests\/sec:\s+([\d.]+)/.exec(output)?.[1] ?? Number.NaN)
      if (code !== 0 || output.includes("Non-2xx") || !(requests > 0)) {
        return reject(new Error(`wrk exited ${code}: ${output}`))
      }
      resolve({ requests, requestsPerSecond })
    })
  })

const cpuMicros = () => {
  const { system, user } = process.cpuUsage()
  return user + system
}

/** utime + stime of this process's reaped children (wrk), in clock ticks: fields 16 and 17 of /proc/self/stat. */
const childrenTicks = (): number => {
  const stat = readFileSync("/proc/self/stat", "utf8")
  const rest = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
  return Number(rest[13]) + Number(rest[14])
}

/** INFO commandstats: the evalsha calls and the µs Redis spent in them so far. */
const evalsha = async (client: IORedis) => {
  const info = await client.info("commandstats")
  const m = /cmdstat_evalsha:calls=(\d+),usec=(\d+)/.exec(info)
  return { calls: Number(m?.[1] ?? 0), usec: Number(m?.[2] ?? 0) }
}

const main = Effect.gen(function*() {
  const ticks = clockTicks()
  const server = yield* RedisServer.make()
  const raw = new IORedis(server.url)
  yield* Effect.addFinalizer(() => Effect.promise(() => raw.quit()))
  const memory = yield* Layer.build(Redis.layerMemory())
  const urls: Array<string> = []
  for (const [, layer] of apps) {
    const context = yield* Layer.build(layer).pipe(Effect.provide(memory))
    const address = Context.get(context, HttpServer.HttpServer).address
    if (address._tag !== "TcpAddress") return yield* Effect.dieMessage("expected a TCP address")
    urls.push(`http://127.0.0.1:${address.port}/`)
  }
  console.log(
    `node ${process.version}, ${availableParallelism()} cores; wrk -t1 -c32 -d${WRK_SECONDS}s per app per round, ` +
      `${ROUNDS} rounds after one warm-up, alternating; ${DECISIONS} decisions per row per round on ${server.url}\n`
  )
  for (const url of urls) yield* Effect.promise(() => wrk(url, 1))

  // Decisions on Redis: a context built once.
  const store = yield* Layer.build(Redis.layer({ url: server.url }))
  const group = [BUCKET, WINDOW] as unknown as ReadonlyArray<limits.AnyLimiter>
  const rows: ReadonlyArray<readonly [string, (i: number) => Effect.Effect<unknown, unknown, Redis.ReadWrite>]> = [
    ["a bucket alone (`TokenBucket.acquire`)", (i) => BUCKET.acquire(`n${i}`, 1)],
    ["a bucket and a window as one (`Limits.acquire`, one script)", (i) => limits.acquire(group, `n${i}`, 1)],
    [
      "the two one after the other (two stacked middlewares)",
      (i) => Effect.zipRight(BUCKET.acquire(`n${i}`, 1), WINDOW.acquire(`n${i}`, 1))
    ]
  ]
  const decisions = rows.map(() => ({ p50: [] as Array<number>, redisUs: [] as Array<number> }))
  // One untimed pass.
  for (const [, decide] of rows) {
    for (let i = 0; i < 200; i++) yield* Effect.provide(decide(i), store)
  }

  const machineBefore = machineTicks()
  const redisBefore = processTicks(server.pid)
  const childrenBefore = childrenTicks()
  const selfBefore = cpuMicros()
  const samples = apps.map(() => ({ rps: [] as Array<number>, cpu: [] as Array<number> }))
  for (let round = 1; round <= ROUNDS; round++) {
    for (let a = 0; a < apps.length; a++) {
      const before = cpuMicros()
      const w = yield* Effect.promise(() => wrk(urls[a]!, WRK_SECONDS))
      const cpu = (cpuMicros() - before) / w.requests
      samples[a]!.rps.push(w.requestsPerSecond)
      samples[a]!.cpu.push(cpu)
      console.log(
        `round ${round} ${apps[a]![0]}: ${Math.round(w.requestsPerSecond)} req/s, CPU ${cpu.toFixed(1)} µs/request`
      )
    }
    for (let r = 0; r < rows.length; r++) {
      const [label, decide] = rows[r]!
      yield* Effect.promise(() => raw.flushall())
      const stats = yield* Effect.promise(() => evalsha(raw))
      const times = new Float64Array(DECISIONS)
      for (let i = 0; i < DECISIONS; i++) {
        const t = performance.now()
        yield* Effect.provide(decide(i), store)
        times[i] = performance.now() - t
      }
      const after = yield* Effect.promise(() => evalsha(raw))
      // The INFO itself is no evalsha.
      const redisUs = (after.usec - stats.usec) / DECISIONS
      times.sort()
      const p50 = (times[Math.floor(DECISIONS / 2)] ?? Number.NaN) * 1000
      decisions[r]!.p50.push(p50)
      decisions[r]!.redisUs.push(redisUs)
      console.log(
        `round ${round} ${label}: p50 ${p50.toFixed(1)} µs, redis-server ${redisUs.toFixed(1)} µs in scripts, ` +
          `${((after.calls - stats.calls) / DECISIONS).toFixed(0)} script calls per decision`
      )
    }
  }
  const selfSeconds = (cpuMicros() - selfBefore) / 1e6
  const known = (processTicks(server.pid) - redisBefore + childrenTicks() - childrenBefore) / ticks
  console.log("\n" + otherCpuLine((machineTicks() - machineBefore) / ticks - selfSeconds - known))

  // In process: each app run on one request, one call after another, with no server and no socket, so
  // that what the middleware itself costs is not lost in the spread of a server's CPU per request.
  const request = HttpServerRequest.fromWeb(new Request("http://127.0.0.1/"))
  const runtime = yield* Effect.runtime<Redis.ReadWrite>().pipe(Effect.provide(memory))
  const inProcess = httpApps.map(() => [] as Array<number>)
  for (let round = 0; round < IN_PROCESS_ROUNDS + 1; round++) {
    for (let a = 0; a < httpApps.length; a++) {
      const app = Effect.provideService(httpApps[a]![1], HttpServerRequest.HttpServerRequest, request)
      const us = yield* Effect.promise(async () => {
        const before = cpuMicros()
        for (let i = 0; i < IN_PROCESS; i++) await Runtime.runPromise(runtime, app)
        return (cpuMicros() - before) / IN_PROCESS
      })
      // The first round warms up.
      if (round > 0) inProcess[a]!.push(us)
    }
  }

  console.log("\nmedian over rounds (min–max):\n")
  console.log("| app (embedded store) | req/s | CPU µs/request | added |")
  console.log("|---|---:|---:|---:|")
  const cpu = samples.map((s) => median(s.cpu))
  apps.forEach(([label, , baseline], a) => {
    const added = a === baseline ? "—" : `${(cpu[a]! - cpu[baseline]!).toFixed(1)} µs`
    console.log(`| ${label} | ${stat(samples[a]!.rps, 0, true)} | ${stat(samples[a]!.cpu, 1)} | ${added} |`)
  })
  console.log(
    `\nin process, no server (${IN_PROCESS} runs of each app on one request per round, ${IN_PROCESS_ROUNDS} ` +
      `rounds after one warm-up, alternating):\n`
  )
  console.log("| app (embedded store) | CPU µs/request | added |")
  console.log("|---|---:|---:|")
  httpApps.forEach(([label], a) => {
    const added = a === 0 ? "—" : `${(median(inProcess[a]!) - median(inProcess[0]!)).toFixed(1)} µs`
    console.log(`| ${label} | ${stat(inProcess[a]!, 1)} | ${added} |`)
  })
  console.log("\n| decision on Redis, one at a time | p50 µs | redis-server µs in scripts |")
  console.log("|---|---:|---:|")
  rows.forEach(([label], r) => {
    console.log(`| ${label} | ${stat(decisions[r]!.p50, 1)} | ${stat(decisions[r]!.redisUs, 1)} |`)
  })
})

const scope = Effect.runSync(Scope.make())
Effect.runPromise(Scope.extend(main, scope)).then(
  () => Effect.runPromise(Scope.close(scope, Exit.void)).then(() => process.exit(0)),
  (error) => {
    console.error(error)
    process.exit(1)
  }
)
