/**
 * `npm run bench` (second part): Redis memory per active TokenBucket bucket, and that it all goes
 * once the buckets are full again.
 *
 * One throwaway redis-server (RedisServer.make), a `Redis.layer({ url })` context and a plain client:
 *
 * 1. Warm-up: 1000 acquires, so the scripts are loaded (the script cache counts in `used_memory`, and
 *    FLUSHALL keeps it), then FLUSHALL and the baseline: `used_memory` and DBSIZE.
 * 2. 100 000 buckets (`user-0` … `user-99999` in namespace `m`), each taken from once (cost 1, 256 in
 *    flight), so each holds a key: `used_memory` after, and (after − before) / 100 000 bytes per bucket.
 *    Target ≤ 110 B.
 * 3. The buckets refill at 1 token per 10 s, so each key has a 10 s TTL: wait (polling every 250 ms,
 *    at most 60 s) until DBSIZE is back to 0 and `used_memory` is back to the baseline within
 *    TOLERANCE bytes (64 KiB, under 0.7 B per bucket), or fail.
 *
 * The key is `@@wakuwaku:TokenBucket:m:user-<i>` (31–35 bytes) and the value `"<tokens> <µs>"` (18 bytes
 * here); memory per bucket grows with the key's length. Also printed: `MEMORY USAGE` of one key (Redis's
 * own estimate of the key, its value and its main-table entry, without the expiry entry or the tables).
 * 4. Bytes per name by limit, beside the token bucket's: `MEMORY USAGE` (SAMPLES 0: every element counted) of
 *    one name of a TokenBucket, a FixedWindow and a SlidingWindow of each limit in LIMITS (10, 100, 1000 and
 *    the sliding window's maximum), each spent to the full in one-unit acquires. A bucket and a fixed window
 *    hold one string whatever the limit; a sliding window holds an entry per unit in its last window.
 * 5. Floors, in the same server: 100 000 plain `SET … PX` keys of other shapes (pipelined, untimed), to
 *    show what a key with a TTL costs at the least here, whatever the library stores.
 * `--quick` runs the same measurement: it is short already (about 20 s).
 *
 * Before those, the embedded store (`Redis.layerMemory`) at its cap, the proxy's `--max-entries`
 * default: `TokenBucket.acquire` for a new name on a store of 100 000 keys at most, first while it is
 * nearly empty, then once it is full of live keys (each new name evicts one). Each call is timed alone
 * and followed by a turn of the event loop (`setImmediate`), as calls arriving over sockets would be;
 * the periodic sweep (every second) runs meanwhile. Printed: µs per call in each phase (wall clock
 * and the process's CPU time) and the ratio of CPU times (target ≤ 2×); the slowest call, as the least
 * of its wall-clock and CPU times, each of which bounds what the main thread spent on it (target at the
 * cap ≤ 5 ms: the CPU time leaves out what a busy machine's preemption adds to wall clock, the wall
 * clock what V8's helper threads add to CPU), and the slowest of the calls that no collection of V8's
 * fell in, beside the longest collection (`PerformanceObserver`, `gc`); the event loop's delays
 * (`monitorEventLoopDelay`, 1 ms resolution: p99 and longest, preemption included); and the machine's
 * load average. 10 000 calls per phase (`--quick`: 2000).
 */
import { Effect, Layer, ManagedRuntime } from "effect"
import type { Redis as IORedis } from "ioredis"
import * as os from "node:os"
import { monitorEventLoopDelay, performance, PerformanceObserver } from "node:perf_hooks"
import { Capability, FixedWindow, Limiter, Rate, Redis, SlidingWindow, TokenBucket } from "wakuwaku"
import { RedisServer } from "wakuwaku/testing"
import { plainClient } from "./measure.js"

const BUCKETS = 100_000
const IN_FLIGHT = 256
const CAPACITY = 10
/** One token per 10 s: a bucket one token short is full again, and its key gone, 10 s later. */
const RATE = Rate.make(1, "10 seconds")
const TOLERANCE = 64 * 1024
const TARGET_BYTES = 110
const WAIT_MS = 60_000

const BUCKET = TokenBucket.make<string>("m", CAPACITY, RATE)
const indices: ReadonlyArray<number> = Array.from({ length: BUCKETS }, (_, i) => i)

const usedMemory = async (client: IORedis): Promise<number> =>
  Number(String(await client.info("memory")).match(/used_memory:(\d+)/)?.[1] ?? Number.NaN)

/** The limits of the bytes-per-name rows: the sliding window's memory grows with its limit. */
const LIMITS = [10, 100, 1000, SlidingWindow.maxLimit] as const

const CAP = 100_000
const CALLS = process.argv.includes("--quick") ? 2000 : 10_000

/**
 * CPU time of this process (every thread: the main one and V8's helpers), in µs, exact to the µs. Not
 * the main thread's own from /proc (`/proc/<pid>/task/<pid>/schedstat`): Linux updates that figure only
 * at a scheduler tick or a switch, so a 0.1 ms call read 0 or about 4 ms there (a tick is 4 ms here),
 * and the slowest call always looked like a tick. Node 20 has no per-thread CPU clock.
 */
const cpuMicros = (): number => {
  const { system, user } = process.cpuUsage()
  return user + system
}

/**
 * `n` acquires for new names `<prefix>-<i>`, each timed alone (wall clock, and the process's CPU
 * time), each followed by a turn of the event loop.
 */
const newNames = async (
  runtime: ManagedRuntime.ManagedRuntime<Redis.ReadWrite, never>,
  prefix: string,
  n: number
) => {
  const EMBEDDED = TokenBucket.make<string>("cap", CAPACITY, Rate.make(1, "1 hour"))
  const loop = monitorEventLoopDelay({ resolution: 1 })
  loop.enable()
  // V8's collections (wall clock), reported after the fact: which calls one fell in, and the longest.
  const collections: Array<{ readonly start: number; readonly end: number }> = []
  const observer = new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) {
      collections.push({ start: entry.startTime, end: entry.startTime + entry.duration })
    }
  })
  observer.observe({ entryTypes: ["gc"] })
  const calls: Array<{ readonly start: number; readonly end: number; readonly bound: number }> = []
  let wall = 0
  let cpu = 0
  for (let i = 0; i < n; i++) {
    const started = performance.now()
    const cpuStarted = cpuMicros()
    await runtime.runPromise(EMBEDDED.acquire(`${prefix}-${i}`, 1))
    const used = cpuMicros() - cpuStarted
    const ended = performance.now()
    wall += ended - started
    cpu += used
    // What the main thread spent on this call is at most either figure.
    calls.push({ start: started, end: ended, bound: Math.min((ended - started) * 1000, used) })
    await new Promise((resolve) => setImmediate(resolve))
  }
  loop.disable()
  await new Promise((resolve) => setImmediate(resolve))
  observer.disconnect()
  const inCollection = (call: (typeof calls)[number]) =>
    collections.some((gc) => gc.start < call.end && gc.end > call.start)
  const slowest = (of: ReadonlyArray<(typeof calls)[number]>) => Math.max(0, ...of.map((call) => call.bound)) / 1000
  return {
    wall: (wall * 1000) / n,
    cpu: cpu / n,
    slowest: slowest(calls),
    slowestOutsideGc: slowest(calls.filter((call) => !inCollection(call))),
    longestGc: Math.max(0, ...collections.map((gc) => gc.end - gc.start)),
    loopP99: loop.percentile(99) / 1e6,
    loopMax: loop.max / 1e6
  }
}

const embeddedAtCap = async () => {
  const store = Redis.makeMemoryStore({ maxKeys: CAP })
  const runtime = ManagedRuntime.make(Redis.layerMemory({ store }))
  await newNames(runtime, "warm", 5000)
  const empty = await newNames(runtime, "empty", CALLS)
  const below = store.size
  await newNames(runtime, "fill", CAP - store.size)
  const filled = store.size
  const full = await newNames(runtime, "full", CALLS)
  await runtime.dispose()
  // On CPU time: on a machine shared with other work, wall-clock time per call varies by more than 2× from
  // one run to the next.
  const ratio = full.cpu / empty.cpu
  const row = (label: string, r: typeof empty) =>
    `| ${label} | ${r.wall.toFixed(1)} | ${r.cpu.toFixed(1)} | ${r.slowest.toFixed(2)} | ${
      r.slowestOutsideGc.toFixed(2)
    } | ${r.longestGc.toFixed(2)} | ${r.loopP99.toFixed(2)} | ${r.loopMax.toFixed(2)} |`
  console.log(
    `embedded store, maxKeys ${CAP}: TokenBucket.acquire for a new name, ${CALLS} calls a phase ` +
      `(load average ${os.loadavg()[0]!.toFixed(1)} on ${os.cpus().length} CPUs)\n`
  )
  console.log(
    "| store | µs per call | CPU µs per call | slowest call, least of wall and CPU (ms) | slowest with no " +
      "collection in it (ms) | longest collection, wall (ms) | event-loop delay p99 (ms) | longest (ms) |"
  )
  console.log("|---|---:|---:|---:|---:|---:|---:|---:|")
  console.log(row(`below the cap (${below} keys at the end)`, empty))
  console.log(row(`full (${filled} live keys; each call evicts one)`, full))
  console.log(
    `\nembedded store: CPU per call full / below the cap = ${ratio.toFixed(2)}× (target ≤ 2×): ${
      ratio <= 2 ? "MET" : "MISSED"
    }; slowest call at the cap ${full.slowest.toFixed(2)} ms (target ≤ 5 ms): ${
      full.slowest <= 5 ? "MET" : "MISSED"
    }, ${full.slowestOutsideGc.toFixed(2)} ms of those with no collection in them\n`
  )
}

const program = Effect.scoped(
  Effect.gen(function*() {
    const server = yield* RedisServer.make()
    const env = yield* Layer.build(Redis.layer({ url: server.url }))
    const client = yield* plainClient(server.url)
    const takeOnce = (n: number) =>
      Effect.forEach(indices.slice(0, n), (i) => BUCKET.acquire(`user-${i}`, 1), {
        concurrency: IN_FLIGHT,
        discard: true
      })
        .pipe(Effect.provide(env))

    yield* takeOnce(1000)
    yield* Effect.promise(() => client.flushall())
    const baseline = yield* Effect.promise(() => usedMemory(client))
    const baseKeys = yield* Effect.promise(() => client.dbsize())

    const start = performance.now()
    yield* takeOnce(BUCKETS)
    const createdMs = performance.now() - start
    const after = yield* Effect.promise(() => usedMemory(client))
    const keys = yield* Effect.promise(() => client.dbsize())
    const perBucket = (after - baseline) / BUCKETS
    console.log(
      `memory: ${BUCKETS} buckets taken from once in ${
        (createdMs / 1000).toFixed(1)
      } s; DBSIZE ${baseKeys} → ${keys}; ` +
        `used_memory ${baseline} → ${after} B: ${perBucket.toFixed(1)} B per bucket ` +
        `(target ≤ ${TARGET_BYTES} B): ${perBucket <= TARGET_BYTES ? "MET" : "MISSED"}`
    )
    const sample = `@@wakuwaku:TokenBucket:m:user-${BUCKETS - 1}`
    const sampleUsage = yield* Effect.promise(() => client.call("MEMORY", "USAGE", sample, "SAMPLES", "0"))
    const sampleValue = yield* Effect.promise(() => client.get(sample))
    console.log(
      `memory: one key, ${sample} (${sample.length} B) = ${JSON.stringify(sampleValue)} ` +
        `(${sampleValue?.length ?? 0} B): MEMORY USAGE ${String(sampleUsage)} B`
    )
    if (keys !== BUCKETS) yield* Effect.dieMessage(`expected ${BUCKETS} keys after the acquires, found ${keys}`)

    // Full again: every key must expire and the memory return to the baseline.
    const waitStart = performance.now()
    let now = { keys, memory: after }
    while (performance.now() - waitStart < WAIT_MS) {
      yield* Effect.sleep("250 millis")
      now = yield* Effect.promise(async () => ({ keys: await client.dbsize(), memory: await usedMemory(client) }))
      if (now.keys === baseKeys && Math.abs(now.memory - baseline) <= TOLERANCE) break
    }
    const waited = (performance.now() - waitStart) / 1000
    const back = now.keys === baseKeys && Math.abs(now.memory - baseline) <= TOLERANCE
    console.log(
      `memory: full again after ${waited.toFixed(1)} s: DBSIZE ${now.keys}, used_memory ${now.memory} B ` +
        `(${now.memory - baseline >= 0 ? "+" : ""}${
          now.memory - baseline
        } B against the baseline; tolerance ±${TOLERANCE} B): ` +
        `${back ? "MET" : "FAILED"}`
    )
    if (!back) yield* Effect.dieMessage("DBSIZE and used_memory did not return to the baseline")

    console.log(
      "\nmemory per name by limit: MEMORY USAGE (SAMPLES 0) of one name spent to the full in one-unit acquires\n"
    )
    console.log("| limit | TokenBucket B | FixedWindow B | SlidingWindow B | SlidingWindow B per unit |")
    console.log("|---:|---:|---:|---:|---:|")
    for (const limit of LIMITS) {
      const kinds: ReadonlyArray<Limiter.Limiter<string, Redis.Redis | Capability.Write<Capability.AnyEntity>>> = [
        TokenBucket.make<string>(`tb${limit}`, limit, Rate.make(1, "1 hour")),
        FixedWindow.make<string>(`fw${limit}`, limit, "1 hour"),
        SlidingWindow.make<string>(`sw${limit}`, limit, "1 hour")
      ]
      const usage: Array<number> = []
      for (const limiter of kinds) {
        yield* Effect.forEach(indices.slice(0, limit), () => limiter.acquire("user-0", 1), {
          concurrency: IN_FLIGHT,
          discard: true
        }).pipe(Effect.provide(env))
        const key = `@@wakuwaku:${limiter[Limiter.TypeId].kind}:${limiter.namespace}:user-0`
        usage.push(Number(yield* Effect.promise(() => client.call("MEMORY", "USAGE", key, "SAMPLES", "0"))))
      }
      const [tb, fw, sw] = usage as [number, number, number]
      console.log(`| ${limit} | ${tb} | ${fw} | ${sw} | ${(sw / limit).toFixed(1)} |`)
    }

    console.log("\nmemory floors: 100 000 plain `SET <key> <value> PX 600000`, bytes of used_memory per key:\n")
    console.log("| key | value | B per key |")
    console.log("|---|---|---:|")
    const floors: ReadonlyArray<readonly [string, string, (i: number) => string, string]> = [
      ["`k<i>` (2–6 B)", "`1` (a shared integer: no allocation)", (i) => `k${i}`, "1"],
      [
        "`m:user-<i>` (8–12 B: namespace and name, no prefix)",
        "`1796046751052900` (one integer)",
        (i) => `m:user-${i}`,
        "1796046751052900"
      ],
      ["`m:user-<i>`", "`9 1796046751052900` (the library's 18 B)", (i) => `m:user-${i}`, "9 1796046751052900"],
      [
        "`@@wakuwaku:TokenBucket:m:user-<i>` (the library's)",
        "`9 1796046751052900`",
        (i) => `@@wakuwaku:TokenBucket:m:user-${i}`,
        "9 1796046751052900"
      ]
    ]
    for (const [keyLabel, valueLabel, keyOf, value] of floors) {
      const bytes = yield* Effect.promise(async () => {
        await client.flushall()
        const before = await usedMemory(client)
        for (let i = 0; i < BUCKETS; i += 1000) {
          const batch = client.pipeline()
          for (let j = i; j < i + 1000; j++) batch.set(keyOf(j), value, "PX", 600_000)
          await batch.exec()
        }
        const used = (await usedMemory(client)) - before
        await client.flushall()
        return used / BUCKETS
      })
      console.log(`| ${keyLabel} | ${valueLabel} | ${bytes.toFixed(1)} |`)
    }
  })
)

embeddedAtCap().then(() => Effect.runPromise(program)).catch((error: unknown) => {
  console.error(error)
  process.exitCode = 1
})
