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
 * 4. Floors, in the same server: 100 000 plain `SET … PX` keys of other shapes (pipelined, untimed), to
 *    show what a key with a TTL costs at the least here, whatever the library stores.
 * `--quick` runs the same measurement: it is short already (about 20 s).
 */
import { Effect, Layer } from "effect"
import type { Redis as IORedis } from "ioredis"
import { performance } from "node:perf_hooks"
import { Rate, Redis, TokenBucket } from "wakuwaku"
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

Effect.runPromise(program).catch((error: unknown) => {
  console.error(error)
  process.exitCode = 1
})
