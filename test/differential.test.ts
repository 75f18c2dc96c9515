/**
 * Differential property tests: the embedded memory backend (`Redis.layerMemory`, every script run by its
 * TypeScript twin) against a real redis-server (the Lua). fast-check draws a sequence of operations over a
 * few names; the same sequence runs on both backends, each in a namespace of its own for the run, and every
 * operation's outcome, normalised, must be the same on both.
 *
 * Time cannot decide an outcome during a run: the bucket refills one token an hour, leases last 30 s,
 * pipe TTLs 60 s. What does depend on elapsed time is compared with a tolerance measured on the run, or
 * not at all (fences: the server's clock against Effect's, so only "it went up" is compared):
 * - `Denied.retryAfter` (and a reservation's wait or retry) falls a millisecond per millisecond. The
 *   bucket's memory run replays the Redis run's clock: each Redis operation is bracketed by `TIME`
 *   before and after, and the memory run, under a clock set by hand, sets the time to the bracket's
 *   start before the same operation. The two then
 *   differ only by where in its bracket the script ran: |Δ| ≤ 1 + the widest bracket (ms), a few ms at
 *   most, where the run's whole elapsed time (tens of ms) would hide an off-by-one in the twin.
 * - Every run ends with a snapshot of the keys the run wrote (type, and whether and how long they live):
 *   PTTLs may differ by the two runs' elapsed time plus 1 ms.
 *
 * A failure prints the shrunk operation sequence (fast-check's counterexample, plain JSON) and a table of
 * every operation with both backends' outcomes, the mismatches marked.
 *
 * Runs per property: 200, or WAKUWAKU_DIFF_RUNS.
 */
import type { RateLimiter } from "@effect/experimental"
import {
  Clock,
  Context,
  Deferred,
  Duration,
  Effect,
  Either,
  Exit,
  Fiber,
  Layer,
  Option,
  Schedule,
  Schema,
  Scope,
  Stream
} from "effect"
import fc from "fast-check"
import { randomBytes } from "node:crypto"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { FixedWindow, Lock, Pipe, Rate, Redis, RwLock, Semaphore, SlidingWindow, TokenBucket } from "wakuwaku"
import * as RateLimiterStore from "wakuwaku/RateLimiterStore"
import { RedisLive } from "./support/redis.js"

const NUM_RUNS = Number(process.env["WAKUWAKU_DIFF_RUNS"] ?? 200)
/** Per property; vitest's default (30 s) is for one example, this is 200 sequences on two backends. */
const TIMEOUT = 120_000

type Backend = "Redis" | "memory"

let scope: Scope.CloseableScope
const contexts = {} as Record<Backend, Context.Context<Redis.ReadWrite>>

beforeAll(async () => {
  scope = Effect.runSync(Scope.make())
  contexts.Redis = await Effect.runPromise(Scope.extend(Layer.build(RedisLive), scope))
  contexts.memory = await Effect.runPromise(Scope.extend(Layer.build(Redis.layerMemory()), scope))
})

afterAll(async () => {
  if (scope !== undefined) await Effect.runPromise(Scope.close(scope, Exit.void))
})

const freshNamespace = () => `d-${randomBytes(6).toString("hex")}`

/** Runs `effect` on a backend and measures how long it took (ms). */
const runOn = async <A, E>(backend: Backend, effect: Effect.Effect<A, E, Redis.ReadWrite>) => {
  const started = performance.now()
  const value = await Effect.runPromise(Effect.provide(effect, contexts[backend]))
  return { value, elapsed: performance.now() - started }
}

const show = (u: unknown) => JSON.stringify(u, (_, v) => (typeof v === "bigint" ? String(v) : v))

/** Runs a sequence on a backend, in a namespace of its own. */
type Run = (backend: Backend, namespace: string) => Effect.Effect<Array<Entry>, unknown, Redis.ReadWrite>

/**
 * Runs one sequence on both backends, Redis first, each in a fresh namespace, and compares the outcomes
 * entry by entry. `near` says whether two different outcomes are still the same, given the tolerance in
 * ms for time-dependent values (the two runs' elapsed time plus 1). A mismatch throws with a table of
 * every entry.
 */
const differential = async (
  run: Run,
  near: (redis: unknown, memory: unknown, toleranceMs: number) => boolean = nearSnapshot
) => {
  const onRedis = await runOn("Redis", run("Redis", freshNamespace()))
  const onMemory = await runOn("memory", run("memory", freshNamespace()))
  const tolerance = onRedis.elapsed + onMemory.elapsed + 1
  const redis = onRedis.value
  const memory = onMemory.value
  const length = Math.max(redis.length, memory.length)
  let mismatches = 0
  const lines: Array<string> = []
  for (let i = 0; i < length; i++) {
    const r = redis[i]
    const m = memory[i]
    const same = r !== undefined && m !== undefined && r.label === m.label &&
      (show(r.outcome) === show(m.outcome) || near(r.outcome, m.outcome, tolerance))
    if (!same) mismatches++
    lines.push(
      `${same ? "  " : "≠ "}#${i} ${r?.label ?? m?.label}: Redis ${show(r?.outcome)}${
        same && show(r?.outcome) === show(m?.outcome) ? "" : `, memory ${show(m?.outcome)}`
      }`
    )
  }
  if (mismatches > 0) {
    throw new Error(
      `${mismatches} outcome(s) differ between Redis and memory (runs took ${onRedis.elapsed.toFixed(1)} ms and ${
        onMemory.elapsed.toFixed(1)
      } ms):\n${lines.join("\n")}`
    )
  }
}

/** One outcome: the operation that produced it (shown), and what it gave, normalised. */
interface Entry {
  readonly label: string
  readonly outcome: unknown
}

const entry = (op: unknown, outcome: unknown): Entry => ({ label: show(op), outcome })

const property = <Op>(arb: fc.Arbitrary<Op>, check: (ops: ReadonlyArray<Op>) => Promise<void>) =>
  fc.assert(fc.asyncProperty(fc.array(arb, { minLength: 1, maxLength: 20 }), check), { numRuns: NUM_RUNS })

// The keys a run wrote

const command = (name: string, ...args: ReadonlyArray<string | number>) =>
  Effect.flatMap(Redis.Redis, (redis) => redis.command(name, args))

interface Key {
  readonly key: string
  readonly type: string
  /** -1: no TTL. */
  readonly pttl: number
  /** Lists in full, sorted sets by size, strings when `values` (random tokens and times differ). */
  readonly value?: unknown
}

/** Every key of the namespace, as `<ns>` in its name, sorted. */
const snapshot = (namespace: string, values: boolean, label = "keys") =>
  Effect.gen(function*() {
    const keys: Array<string> = []
    let cursor = "0"
    do {
      const [next, found] = (yield* command("SCAN", cursor, "MATCH", `*${namespace}*`, "COUNT", 1000)) as [
        string,
        Array<string>
      ]
      keys.push(...found)
      cursor = next
    } while (cursor !== "0")
    const out: Array<Key> = []
    for (const key of [...new Set(keys)].sort()) {
      const type = (yield* command("TYPE", key)) as string
      const pttl = (yield* command("PTTL", key)) as number
      const value = type === "list"
        ? yield* command("LRANGE", key, 0, -1)
        : type === "zset"
        ? { size: yield* command("ZCARD", key) }
        : type === "string" && values
        ? yield* command("GET", key)
        : undefined
      out.push({ key: key.replace(namespace, "<ns>"), type, pttl, ...(value === undefined ? {} : { value }) })
    }
    return entry({ final: label }, out)
  })

/** Snapshots whose keys, types and values agree, each key living on both or neither, for about as long. */
const nearSnapshot = (redis: unknown, memory: unknown, tolerance: number): boolean => {
  if (!Array.isArray(redis) || !Array.isArray(memory) || redis.length !== memory.length) return false
  return (redis as Array<Key>).every((r, i) => {
    const m = (memory as Array<Key>)[i]!
    return r.key === m.key && r.type === m.type && show(r.value) === show(m.value) &&
      (r.pttl === m.pttl || (r.pttl > 0 && m.pttl > 0 && Math.abs(r.pttl - m.pttl) <= tolerance))
  })
}

/** Ops are plain objects, never null-prototype ones, so that counterexamples print as plain JSON. */
const record = <T>(model: { [K in keyof T]: fc.Arbitrary<T[K]> }): fc.Arbitrary<T> =>
  fc.record(model, { noNullPrototype: true })

const NAMES = ["a", "b", "c"] as const
const name = fc.constantFrom(...NAMES)
/** An index into every token granted so far in the run, modulo their number: fresh and stale ones. */
const tokenIndex = fc.nat({ max: 19 })

// TokenBucket

const CAPACITY = 5

type BucketOp =
  | { readonly op: "acquire"; readonly name: string; readonly cost: number }
  | { readonly op: "reset"; readonly name: string }
  | { readonly op: "peek"; readonly name: string }
  /** Acquires made at once: on Redis, all but the first go as one call of the batch script. */
  | { readonly op: "burst"; readonly calls: ReadonlyArray<{ readonly name: string; readonly cost: number }> }
  /** Token buckets only: a reservation that may go into debt by up to the refill of maxWait (ms). */
  | { readonly op: "reserve"; readonly name: string; readonly cost: number; readonly maxWait: number }
  | { readonly op: "refund"; readonly name: string; readonly cost: number }
  /** Token buckets only: gives back a reservation granted so far in the run (fresh and stale ones), by index. */
  | { readonly op: "cancel"; readonly reservation: number }

const cost = fc.integer({ min: 0, max: CAPACITY + 2 })

const bucketOp: fc.Arbitrary<BucketOp> = fc.oneof(
  { arbitrary: record({ op: fc.constant("acquire" as const), name, cost }), weight: 5 },
  { arbitrary: record({ op: fc.constant("reset" as const), name }), weight: 1 },
  { arbitrary: record({ op: fc.constant("peek" as const), name }), weight: 2 },
  {
    arbitrary: record({
      op: fc.constant("burst" as const),
      calls: fc.array(record({ name, cost }), { minLength: 2, maxLength: 6 })
    }),
    weight: 1
  }
)

/** Up to 4 hours: at a token an hour, a debt of up to 4 tokens. */
const maxWait = fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 4 * 3_600_000 }))

/** bucketOp, with reservations and refunds. */
const tokenBucketOp: fc.Arbitrary<BucketOp> = fc.oneof(
  { arbitrary: bucketOp, weight: 5 },
  { arbitrary: record({ op: fc.constant("reserve" as const), name, cost, maxWait }), weight: 4 },
  { arbitrary: record({ op: fc.constant("refund" as const), name, cost }), weight: 2 },
  { arbitrary: record({ op: fc.constant("cancel" as const), reservation: tokenIndex }), weight: 3 }
)

/** A reservation, as an admission's outcome: its wait, like retryAfter, falls a millisecond per millisecond. */
const reservation = (r: TokenBucket.Reservation) =>
  r._tag === "Granted"
    ? { waitMs: Duration.toMillis(r.wait) }
    : { deniedRetryMs: Option.match(r.retryAfter, { onNone: () => "never" as const, onSome: Duration.toMillis }) }

const admission = (a: TokenBucket.Admission) =>
  a._tag === "Allowed"
    ? { allowed: a.remaining }
    : { deniedRetryMs: Option.match(a.retryAfter, { onNone: () => "never" as const, onSome: Duration.toMillis }) }

/**
 * Where the Redis run's operations ran on the server clock: `TIME` before and after each, in µs. The
 * memory run replays the starts.
 */
interface Brackets {
  readonly at: Array<readonly [before: number, after: number]>
}

/**
 * A Clock whose time is set by hand, in µs (the memory backend reads the fiber's Clock on every call); it
 * sleeps for real. TestClock would do, but each of its moves waits for a timer, a millisecond an op.
 */
class ReplayClock implements Clock.Clock {
  readonly [Clock.ClockTypeId]: Clock.ClockTypeId = Clock.ClockTypeId
  micros = 0
  private readonly live = Clock.make()
  unsafeCurrentTimeMillis() {
    return Math.floor(this.micros / 1000)
  }
  readonly currentTimeMillis = Effect.sync(() => this.unsafeCurrentTimeMillis())
  unsafeCurrentTimeNanos() {
    return BigInt(this.micros) * 1000n
  }
  readonly currentTimeNanos = Effect.sync(() => this.unsafeCurrentTimeNanos())
  sleep(duration: Duration.Duration) {
    return this.live.sleep(duration)
  }
}

const serverMicros = Effect.map(command("TIME"), (reply) => {
  const [s, us] = reply as [string, string]
  return Number(s) * 1_000_000 + Number(us)
})

/** What the bucket property drives: a token bucket, or a fixed window (the same Admission). */
interface Limiter {
  readonly acquire: (name: string, cost: number) => Effect.Effect<TokenBucket.Admission, Failure, Redis.ReadWrite>
  readonly reset: (name: string) => Effect.Effect<boolean, Failure, Redis.ReadWrite>
  readonly peek: (name: string) => Effect.Effect<number, Failure, Redis.ReadWrite>
  readonly reserve?: (
    name: string,
    cost: number,
    maxWait: Duration.DurationInput
  ) => Effect.Effect<TokenBucket.Reservation, Failure, Redis.ReadWrite>
  readonly refund?: (name: string, cost: number) => Effect.Effect<number, Failure, Redis.ReadWrite>
  readonly cancel?: (name: string, reservation: TokenBucket.Granted) => Effect.Effect<boolean, Failure, Redis.ReadWrite>
}
type Failure = Redis.RedisError | Redis.InvalidInput

// One token an hour: a run of a few seconds refills a thousandth of one, which changes no whole count
// and no admission, only retryAfter (a millisecond per millisecond).
const slowBucket = (namespace: string): Limiter => TokenBucket.make<string>(namespace, CAPACITY, Rate.make(1, "1 hour"))
// Hour-long windows: a run crosses a window's end once in many thousands of runs (both backends then
// cross it too, at the replayed times, unless it falls inside one operation's bracket).
const hourWindow = (namespace: string): Limiter => FixedWindow.make<string>(namespace, CAPACITY, "1 hour")
// Hour-long sliding windows: no entry ends during a run.
const hourSliding = (namespace: string): Limiter => SlidingWindow.make<string>(namespace, CAPACITY, "1 hour")

/**
 * A sliding window's run, its snapshot's entries ("<t µs> <cost>") read as their costs and their order: each
 * backend stamps them with its own time (the memory run replays where Redis's bracket started, a few µs
 * before its script ran). Entries of one instant on one backend must be of one instant on the other: a
 * difference of timing would show as a different number of entries.
 */
const runSliding = (ops: ReadonlyArray<BucketOp>, brackets: Brackets): Run => (backend, namespace) =>
  Effect.map(
    runBucket(ops, brackets, hourSliding)(backend, namespace),
    (entries) =>
      entries.map((e) =>
        isSnapshot(e.outcome)
          ? {
            ...e,
            outcome: (e.outcome as Array<Key>).map((k) =>
              Array.isArray(k.value)
                ? { ...k, value: (k.value as Array<string>).map((v, i) => (i === 0 ? v : v.split(" ")[1])) }
                : k
            )
          }
          : e
      )
  )

/**
 * The replay of a run's times: `timed` brackets each operation by the server's `TIME` on Redis and, on
 * memory, sets `clock` (which the run must be given) to where Redis's started.
 */
const replay = (backend: Backend, brackets: Brackets) => {
  let step = 0
  const clock = new ReplayClock()
  const timed = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
    Effect.gen(function*() {
      const i = step++
      if (backend === "Redis") {
        const before = yield* serverMicros
        const value = yield* effect
        brackets.at[i] = [before, yield* serverMicros]
        return value
      }
      clock.micros = brackets.at[i]![0]
      return yield* effect
    })
  return { clock, timed }
}

const runBucket = (
  ops: ReadonlyArray<BucketOp>,
  brackets: Brackets,
  limiter: (namespace: string) => Limiter = slowBucket
): Run =>
(backend, namespace) => {
  const { clock, timed } = replay(backend, brackets)
  const run = Effect.gen(function*() {
    const bucket = limiter(namespace)
    const entries: Array<Entry> = []
    // Every reservation granted so far, with its name: each backend gives back its own.
    const granted: Array<{ readonly name: string; readonly reservation: TokenBucket.Granted }> = []
    for (const op of ops) {
      switch (op.op) {
        case "acquire":
          entries.push(entry(op, admission(yield* timed(bucket.acquire(op.name, op.cost)))))
          break
        case "reset":
          entries.push(entry(op, { existed: yield* timed(bucket.reset(op.name)) }))
          break
        case "peek":
          entries.push(entry(op, { tokens: yield* timed(bucket.peek(op.name)) }))
          break
        case "burst": {
          const all = yield* timed(Effect.all(op.calls.map((call) => bucket.acquire(call.name, call.cost)), {
            concurrency: "unbounded"
          }))
          entries.push(entry(op, all.map(admission)))
          break
        }
        case "reserve": {
          const made = yield* timed(bucket.reserve!(op.name, op.cost, op.maxWait))
          if (made._tag === "Granted") granted.push({ name: op.name, reservation: made })
          entries.push(entry(op, reservation(made)))
          break
        }
        case "cancel": {
          const given = granted[op.reservation % Math.max(1, granted.length)]
          entries.push(
            entry(
              op,
              given === undefined
                ? "none granted yet"
                : { reclaimed: yield* timed(bucket.cancel!(given.name, given.reservation)) }
            )
          )
          break
        }
        case "refund":
          entries.push(entry(op, { tokens: yield* timed(bucket.refund!(op.name, op.cost)) }))
          break
      }
    }
    for (const n of NAMES) entries.push(entry({ final: "peek", name: n }, { tokens: yield* timed(bucket.peek(n)) }))
    entries.push(yield* timed(snapshot(namespace, false)))
    return entries
  })
  return backend === "Redis" ? run : Effect.withClock(run, clock)
}

/** The widest bracket of the Redis run, in ms. */
const widest = (brackets: Brackets) => Math.max(0, ...brackets.at.map(([before, after]) => (after - before) / 1000))

const isSnapshot = (u: unknown): boolean =>
  Array.isArray(u) && u.some((k) => typeof k === "object" && k !== null && "key" in k)

/**
 * Denials whose retry times differ by at most 1 ms plus the widest bracket: the memory run read the
 * time at the start of the bracket where the script on Redis ran somewhere inside it, both for this
 * operation and for the one that started the refill. Snapshots are compared as {@link nearSnapshot}.
 */
const nearRetry = (widestMs: number) => (redis: unknown, memory: unknown, tolerance: number): boolean => {
  if (isSnapshot(redis) || isSnapshot(memory)) return nearSnapshot(redis, memory, tolerance)
  if (Array.isArray(redis) && Array.isArray(memory)) {
    return redis.length === memory.length &&
      redis.every((r, i) => show(r) === show(memory[i]) || nearRetry(widestMs)(r, memory[i], tolerance))
  }
  for (const field of ["deniedRetryMs", "waitMs"] as const) {
    const r = (redis as Partial<Record<typeof field, unknown>> | undefined)?.[field]
    const m = (memory as Partial<Record<typeof field, unknown>> | undefined)?.[field]
    if (typeof r === "number" && typeof m === "number" && Math.abs(r - m) <= 1 + Math.floor(widestMs)) return true
  }
  return false
}

// RateLimiterStore

/**
 * The store contract's two calls, with each call's own parameters, alone or several at once (on Redis,
 * those of one shape go as one call of the batch script). Refills of an hour or two per token: nothing
 * refills or ends during a run, only a window's remaining time falls (compared as retries are).
 */
type StoreCall =
  | {
    readonly op: "fixedWindow"
    readonly name: string
    readonly tokens: number
    readonly refillHours: number
    readonly limit: number | null
  }
  | {
    readonly op: "tokenBucket"
    readonly name: string
    readonly tokens: number
    readonly refillHours: number
    readonly limit: number
    readonly allowOverflow: boolean
  }
type StoreOp = StoreCall | { readonly op: "burst"; readonly calls: ReadonlyArray<StoreCall> }

const refillHours = fc.constantFrom(1, 2)

const storeCall: fc.Arbitrary<StoreCall> = fc.oneof(
  record({
    op: fc.constant("fixedWindow" as const),
    name,
    tokens: cost,
    refillHours,
    limit: fc.option(fc.integer({ min: 0, max: CAPACITY }), { nil: null })
  }),
  record({
    op: fc.constant("tokenBucket" as const),
    name,
    tokens: cost,
    refillHours,
    limit: fc.integer({ min: 0, max: CAPACITY }),
    allowOverflow: fc.boolean()
  })
)

/**
 * Calls made at once have no order, and the batcher sends those of one shape together: so that the outcome
 * does not hang on an order, a burst's calls of one algorithm share the first one's refill and limit.
 */
const oneShape = (calls: ReadonlyArray<StoreCall>): ReadonlyArray<StoreCall> =>
  calls.map((call) => {
    const first = calls.find((c) => c.op === call.op)!
    return { ...call, refillHours: first.refillHours, limit: first.limit } as StoreCall
  })

const storeOp: fc.Arbitrary<StoreOp> = fc.oneof(
  { arbitrary: storeCall, weight: 4 },
  {
    arbitrary: record({
      op: fc.constant("burst" as const),
      calls: fc.array(storeCall, { minLength: 2, maxLength: 6 }).map(oneShape)
    }),
    weight: 1
  }
)

/** One call's outcome: a window's count and remaining time, or a bucket's tokens left. */
const callStore = (
  store: RateLimiter.RateLimiterStore["Type"],
  call: StoreCall
): Effect.Effect<{ readonly count: number; readonly ttlMs: number } | { readonly remaining: number }, unknown> => {
  const refillRate = Duration.hours(call.refillHours)
  const { name: key, tokens } = call
  return call.op === "fixedWindow"
    ? Effect.map(
      store.fixedWindow({ key, tokens, refillRate, limit: call.limit ?? undefined }),
      ([count, ttlMs]) => ({ count, ttlMs })
    )
    : Effect.map(
      store.tokenBucket({ key, tokens, refillRate, limit: call.limit, allowOverflow: call.allowOverflow }),
      (remaining) => ({ remaining })
    )
}

const runStore = (ops: ReadonlyArray<StoreOp>, brackets: Brackets): Run => (backend, namespace) => {
  const { clock, timed } = replay(backend, brackets)
  const run = Effect.gen(function*() {
    const store = yield* RateLimiterStore.make({ namespace })
    const entries: Array<Entry> = []
    for (const op of ops) {
      const outcome = op.op === "burst"
        ? yield* timed(Effect.all(op.calls.map((call) => callStore(store, call)), { concurrency: "unbounded" }))
        : yield* timed(callStore(store, op))
      entries.push(entry(op, outcome))
    }
    entries.push(yield* timed(snapshot(namespace, false)))
    return entries
  })
  return backend === "Redis" ? run : Effect.withClock(run, clock)
}

/**
 * A window's outcomes: the same count, remaining times within 1 ms plus the widest bracket (as {@link nearRetry}).
 * The keys' TTLs within twice the tolerance: each call brings its own refill rate, and a bucket whose rate
 * changes between calls (1 or 2 hours per token here) weighs the time of its earlier calls by their ratio, so
 * its key's expiry moves by up to twice how far each call's time on memory (the bracket's start) is from its
 * time on Redis (somewhere in the bracket). Seen under CPU load: 24 ms apart after runs of 16.0 and 1.4 ms.
 */
const nearWindow = (widestMs: number) => (redis: unknown, memory: unknown, tolerance: number): boolean => {
  if (isSnapshot(redis) || isSnapshot(memory)) return nearSnapshot(redis, memory, 2 * tolerance)
  if (Array.isArray(redis) && Array.isArray(memory)) {
    return redis.length === memory.length &&
      redis.every((r, i) => show(r) === show(memory[i]) || nearWindow(widestMs)(r, memory[i], tolerance))
  }
  const r = redis as { readonly count?: unknown; readonly ttlMs?: unknown } | undefined
  const m = memory as { readonly count?: unknown; readonly ttlMs?: unknown } | undefined
  return typeof r?.ttlMs === "number" && typeof m?.ttlMs === "number" && r.count === m.count &&
    Math.abs(r.ttlMs - m.ttlMs) <= 1 + Math.floor(widestMs)
}

// Lock

const LEASE = "30 seconds"

type LockOp =
  | { readonly op: "tryLock"; readonly name: string }
  | { readonly op: "release"; readonly token: number }
  | { readonly op: "extend"; readonly token: number }
  /** Lock.scoped with tryOnce, released when the op ends. */
  | { readonly op: "scoped"; readonly name: string }
  /** tryLocks made at once: on Redis, all but the first go as one call of the batch script. */
  | { readonly op: "burst"; readonly names: ReadonlyArray<string> }
  /** Releases (or extends) of several tokens at once, batched as `burst`. */
  | { readonly op: "tokenBurst"; readonly what: "release" | "extend"; readonly tokens: ReadonlyArray<number> }

const lockOp: fc.Arbitrary<LockOp> = fc.oneof(
  { arbitrary: record({ op: fc.constant("tryLock" as const), name }), weight: 4 },
  { arbitrary: record({ op: fc.constant("release" as const), token: tokenIndex }), weight: 3 },
  { arbitrary: record({ op: fc.constant("extend" as const), token: tokenIndex }), weight: 2 },
  { arbitrary: record({ op: fc.constant("scoped" as const), name }), weight: 1 },
  {
    arbitrary: record({ op: fc.constant("burst" as const), names: fc.array(name, { minLength: 2, maxLength: 5 }) }),
    weight: 1
  },
  {
    arbitrary: record({
      op: fc.constant("tokenBurst" as const),
      what: fc.constantFrom<"release" | "extend">("release", "extend"),
      tokens: fc.array(tokenIndex, { minLength: 2, maxLength: 5 })
    }),
    weight: 1
  }
)

/** Every grant's fence, per name, must exceed the last one of that name on the same backend. */
const fences = () => {
  const last = new Map<string, bigint>()
  return (name: string, fence: bigint) => {
    const previous = last.get(name)
    last.set(name, fence)
    return previous === undefined || fence > previous
  }
}

interface Held {
  readonly name: string
  readonly kind: "read" | "write"
  readonly release: Effect.Effect<boolean, Redis.RedisError, Redis.ReadWrite>
  readonly extend: Effect.Effect<boolean, Redis.RedisError, Redis.ReadWrite>
}

/** Records a granted token in `tokens` and names it, or says none was granted; a write's fence must increase. */
const recorder = (tokens: Array<Held>, increased: (name: string, fence: bigint) => boolean) =>
(
  kind: Held["kind"],
  name: string,
  token: Option.Option<Pick<Held, "release" | "extend"> & { readonly fence?: bigint | undefined }>
) => {
  if (Option.isNone(token)) return { granted: false }
  tokens.push({ name, kind, release: token.value.release, extend: token.value.extend })
  const granted = `#${tokens.length - 1}`
  return kind === "read" ? { granted } : { granted, fenceIncreased: increased(name, token.value.fence!) }
}

/** release/extend of token `i` (modulo how many were granted): which token, and what it answered. */
const useToken = (tokens: ReadonlyArray<Held>, i: number, what: "release" | "extend") =>
  Effect.gen(function*() {
    if (tokens.length === 0) return "no token yet"
    const at = i % tokens.length
    const token = tokens[at]!
    return { token: `#${at} ${token.kind} ${token.name}`, [what]: yield* token[what] }
  })

const runLock = (ops: ReadonlyArray<LockOp>): Run => (_, namespace) =>
  Effect.gen(function*() {
    const lock = Lock.make<string>(namespace, LEASE)
    const increased = fences()
    const tokens: Array<Held> = []
    const grant = recorder(tokens, increased)
    const entries: Array<Entry> = []
    for (const op of ops) {
      switch (op.op) {
        case "tryLock":
          entries.push(entry(op, grant("write", op.name, yield* lock.tryLock(op.name))))
          break
        case "release":
        case "extend":
          entries.push(entry(op, yield* useToken(tokens, op.token, op.op)))
          break
        case "scoped": {
          const held = yield* Effect.scoped(
            Effect.either(Effect.map(Lock.scoped(lock, op.name, { acquire: Lock.tryOnce }), ({ token }) => token.fence))
          )
          entries.push(entry(
            op,
            Either.match(held, {
              onLeft: (error) => ({ failed: error._tag }),
              onRight: (fence) => ({ heldAndReleased: true, fenceIncreased: increased(op.name, fence) })
            })
          ))
          break
        }
        case "burst": {
          const all = yield* Effect.all(op.names.map((name) => lock.tryLock(name)), { concurrency: "unbounded" })
          entries.push(entry(op, all.map((token, i) => grant("write", op.names[i]!, token))))
          break
        }
        case "tokenBurst":
          entries.push(entry(
            op,
            yield* Effect.all(op.tokens.map((i) => useToken(tokens, i, op.what)), { concurrency: "unbounded" })
          ))
          break
      }
    }
    // Who holds what at the end: tryLock every name once more.
    for (const n of NAMES) entries.push(entry({ final: "tryLock", name: n }, grant("write", n, yield* lock.tryLock(n))))
    entries.push(yield* snapshot(namespace, false))
    return entries
  })

// RwLock

type RwOp =
  | { readonly op: "tryRead"; readonly name: string }
  | { readonly op: "tryWrite"; readonly name: string }
  | { readonly op: "release"; readonly token: number }
  | { readonly op: "extend"; readonly token: number }
  /**
   * RwLock.scopedWrite with one waiting attempt (Lock.wait, Schedule.recurs(0)): refused, it leaves a
   * writer intent and withdraws it; granted, it holds and releases. Either way nothing is left over.
   */
  | { readonly op: "waitWrite"; readonly name: string }
  /** RwLock.scopedRead with tryOnce, released when the op ends. */
  | { readonly op: "scopedRead"; readonly name: string }

const rwOp: fc.Arbitrary<RwOp> = fc.oneof(
  { arbitrary: record({ op: fc.constant("tryRead" as const), name }), weight: 4 },
  { arbitrary: record({ op: fc.constant("tryWrite" as const), name }), weight: 4 },
  { arbitrary: record({ op: fc.constant("release" as const), token: tokenIndex }), weight: 4 },
  { arbitrary: record({ op: fc.constant("extend" as const), token: tokenIndex }), weight: 2 },
  { arbitrary: record({ op: fc.constant("waitWrite" as const), name }), weight: 1 },
  { arbitrary: record({ op: fc.constant("scopedRead" as const), name }), weight: 1 }
)

const runRwLock = (ops: ReadonlyArray<RwOp>): Run => (_, namespace) =>
  Effect.gen(function*() {
    const rw = RwLock.make<string>(namespace, LEASE)
    const increased = fences()
    const tokens: Array<Held> = []
    const grant = recorder(tokens, increased)
    const entries: Array<Entry> = []
    for (const op of ops) {
      switch (op.op) {
        case "tryRead":
          entries.push(entry(op, grant("read", op.name, yield* rw.tryRead(op.name))))
          break
        case "tryWrite":
          entries.push(entry(op, grant("write", op.name, yield* rw.tryWrite(op.name))))
          break
        case "release":
        case "extend":
          entries.push(entry(op, yield* useToken(tokens, op.token, op.op)))
          break
        case "waitWrite": {
          const held = yield* Effect.scoped(Effect.either(Effect.map(
            RwLock.scopedWrite(rw, op.name, { acquire: Lock.wait({ schedule: Schedule.recurs(0) }) }),
            ({ token }) => token.fence
          )))
          entries.push(entry(
            op,
            Either.match(held, {
              onLeft: (error) => ({ failed: error._tag }),
              onRight: (fence) => ({ heldAndReleased: true, fenceIncreased: increased(op.name, fence) })
            })
          ))
          break
        }
        case "scopedRead": {
          const held = yield* Effect.scoped(Effect.either(RwLock.scopedRead(rw, op.name, { acquire: Lock.tryOnce })))
          entries.push(entry(
            op,
            Either.match(held, {
              onLeft: (error) => ({ failed: error._tag }),
              onRight: () => ({ heldAndReleased: true })
            })
          ))
          break
        }
      }
    }
    // What each name admits at the end: a write (granted only with no live reader, writer or intent)
    // and, after releasing it, a read.
    for (const n of NAMES) {
      const w = yield* rw.tryWrite(n)
      entries.push(entry({ final: "tryWrite", name: n }, grant("write", n, w)))
      if (Option.isSome(w)) yield* w.value.release
      entries.push(entry({ final: "tryRead", name: n }, grant("read", n, yield* rw.tryRead(n))))
    }
    entries.push(yield* snapshot(namespace, false))
    return entries
  })

// Semaphore

const PERMITS = 3

type SemaphoreOp =
  | { readonly op: "tryAcquire"; readonly name: string; readonly n: number }
  | { readonly op: "release"; readonly token: number }
  | { readonly op: "extend"; readonly token: number }
  /** Semaphore.scoped with tryOnce, released when the op ends. */
  | { readonly op: "scoped"; readonly name: string; readonly n: number }
  /**
   * Semaphore.scoped with one waiting attempt (Lock.wait, Schedule.recurs(0)): refused for n > 1, it
   * leaves an intent and withdraws it; granted, it holds and releases. Either way nothing is left over.
   */
  | { readonly op: "waitOnce"; readonly name: string; readonly n: number }
  /**
   * A withPermits waiter left waiting in a fiber (its next attempt an hour away) until the run ends:
   * refused for n > 1, its intent stands and holds the ops after it back; granted, it holds its permits.
   */
  | { readonly op: "waiter"; readonly name: string; readonly n: number }
  /** tryAcquires made at once: on Redis, all but the first go as one call of the batch script. */
  | { readonly op: "burst"; readonly calls: ReadonlyArray<{ readonly name: string; readonly n: number }> }
  /** Releases (or extends) of several permits at once, batched as `burst`. */
  | { readonly op: "tokenBurst"; readonly what: "release" | "extend"; readonly tokens: ReadonlyArray<number> }

/** 1 to the permits, and now and then one more, which is InvalidInput on both. */
const permitCount = fc.oneof(
  { arbitrary: fc.integer({ min: 1, max: PERMITS }), weight: 9 },
  { arbitrary: fc.constant(PERMITS + 1), weight: 1 }
)

const semaphoreOp: fc.Arbitrary<SemaphoreOp> = fc.oneof(
  { arbitrary: record({ op: fc.constant("tryAcquire" as const), name, n: permitCount }), weight: 5 },
  { arbitrary: record({ op: fc.constant("release" as const), token: tokenIndex }), weight: 3 },
  { arbitrary: record({ op: fc.constant("extend" as const), token: tokenIndex }), weight: 2 },
  { arbitrary: record({ op: fc.constant("scoped" as const), name, n: permitCount }), weight: 1 },
  { arbitrary: record({ op: fc.constant("waitOnce" as const), name, n: permitCount }), weight: 1 },
  { arbitrary: record({ op: fc.constant("waiter" as const), name, n: permitCount }), weight: 1 },
  {
    arbitrary: record({
      op: fc.constant("burst" as const),
      calls: fc.array(record({ name, n: permitCount }), { minLength: 2, maxLength: 5 })
    }),
    weight: 1
  },
  {
    arbitrary: record({
      op: fc.constant("tokenBurst" as const),
      what: fc.constantFrom<"release" | "extend">("release", "extend"),
      tokens: fc.array(tokenIndex, { minLength: 2, maxLength: 5 })
    }),
    weight: 1
  }
)

const runSemaphore = (ops: ReadonlyArray<SemaphoreOp>): Run => (_, namespace) =>
  Effect.gen(function*() {
    const sem = Semaphore.make<string>(namespace, PERMITS, LEASE)
    const increased = fences()
    const tokens: Array<Held> = []
    const record = recorder(tokens, increased)
    const grant = (name: string, permit: Option.Option<Semaphore.Permit>) =>
      record(
        "write",
        name,
        Option.map(permit, (p) => ({ release: sem.release(p), extend: sem.extend(p), fence: p.fence }))
      )
    const tryAcquire = (name: string, n: number) =>
      Effect.match(sem.tryAcquire(name, n), {
        onFailure: (e) => ({ failed: e._tag }),
        onSuccess: (p) => grant(name, p)
      })
    const held = (name: string, n: number, acquire: Lock.Acquire) =>
      Effect.scoped(
        Effect.either(Effect.map(Semaphore.scoped(sem, name, n, { acquire }), ({ permit }) => permit.fence))
      )
        .pipe(Effect.map(Either.match({
          onLeft: (error) => ({ failed: error._tag }),
          onRight: (fence) => ({ heldAndReleased: true, fenceIncreased: increased(name, fence) })
        })))
    const waiters: Array<Fiber.RuntimeFiber<unknown, unknown>> = []
    const entries: Array<Entry> = []
    for (const op of ops) {
      switch (op.op) {
        case "tryAcquire":
          entries.push(entry(op, yield* tryAcquire(op.name, op.n)))
          break
        case "release":
        case "extend":
          entries.push(entry(op, yield* useToken(tokens, op.token, op.op)))
          break
        case "scoped":
          entries.push(entry(op, yield* held(op.name, op.n, Lock.tryOnce)))
          break
        case "waitOnce":
          entries.push(entry(op, yield* held(op.name, op.n, Lock.wait({ schedule: Schedule.recurs(0) }))))
          break
        case "waiter": {
          // Done once its first attempt is: granted (its body runs) or refused (its schedule sees it).
          const attempted = yield* Deferred.make<"granted" | "waiting">()
          const schedule = Schedule.spaced("1 hour").pipe(
            Schedule.tapInput(() => Deferred.succeed(attempted, "waiting"))
          )
          waiters.push(
            yield* Effect.fork(
              Semaphore.withPermits(sem, op.name, op.n, { acquire: Lock.wait({ schedule, deadline: "2 hours" }) })(
                Effect.zipRight(Deferred.succeed(attempted, "granted"), Effect.never)
              ).pipe(Effect.catchAll((e) => Deferred.succeed(attempted, "waiting").pipe(Effect.as(e._tag))))
            )
          )
          entries.push(entry(op, yield* Deferred.await(attempted)))
          break
        }
        case "burst": {
          const all = yield* Effect.all(op.calls.map((call) => tryAcquire(call.name, call.n)), {
            concurrency: "unbounded"
          })
          entries.push(entry(op, all))
          break
        }
        case "tokenBurst":
          entries.push(entry(
            op,
            yield* Effect.all(op.tokens.map((i) => useToken(tokens, i, op.what)), { concurrency: "unbounded" })
          ))
          break
      }
    }
    // The waiters give up: their intents are withdrawn and their permits released. Then how many permits
    // each name has free: take one at a time until refused.
    for (const waiter of waiters) yield* Fiber.interrupt(waiter)
    for (const n of NAMES) {
      let free = 0
      while (Option.isSome(yield* sem.tryAcquire(n))) free++
      entries.push(entry({ final: "free permits", name: n }, free))
    }
    entries.push(yield* snapshot(namespace, false))
    return entries
  })

// Pipe

type Delivery = "at-most-once" | "at-least-once"

type PipeOp =
  | { readonly op: "send"; readonly name: string; readonly message: number }
  | { readonly op: "close"; readonly name: string }
  /** Sends made at once: on Redis, all but the first go as one call of the batch script. */
  | { readonly op: "sendBurst"; readonly sends: ReadonlyArray<{ readonly name: string; readonly message: number }> }
  /**
   * Takes up to `k` messages, never more than the model says are there before the close, so it never
   * waits. At least once, the last one taken goes back (it was not pulled past).
   */
  | { readonly op: "receive"; readonly name: string; readonly k: number; readonly delivery: Delivery }

/** Two names: sequences of 20 spread over three leave too few messages per pipe to receive. */
const PIPE_NAMES = ["a", "b"] as const
const pipeName = fc.constantFrom(...PIPE_NAMES)

const message = fc.integer({ min: 0, max: 999 })

const pipeOp: fc.Arbitrary<PipeOp> = fc.oneof(
  {
    arbitrary: record({ op: fc.constant("send" as const), name: pipeName, message }),
    weight: 5
  },
  { arbitrary: record({ op: fc.constant("close" as const), name: pipeName }), weight: 1 },
  {
    arbitrary: record({
      op: fc.constant("sendBurst" as const),
      sends: fc.array(record({ name: pipeName, message }), { minLength: 2, maxLength: 5 })
    }),
    weight: 1
  },
  {
    arbitrary: record({
      op: fc.constant("receive" as const),
      name: pipeName,
      k: fc.integer({ min: 1, max: 5 }),
      delivery: fc.constantFrom<Delivery>("at-most-once", "at-least-once")
    }),
    weight: 3
  }
)

/** A receive that waits this long means the test's model is wrong: fail, do not hang. */
const RECEIVE_DEADLINE = "5 seconds"

const runPipe = (ops: ReadonlyArray<PipeOp>): Run => (_, namespace) =>
  Effect.gen(function*() {
    const pipe = Pipe.make<string, number>(namespace, Schema.Int, "60 seconds")
    // The model: how many messages each name has before its close (or in all, while open).
    const available = new Map<string, number>(PIPE_NAMES.map((n) => [n, 0]))
    const closed = new Set<string>()
    const receive = (name: string, k: number, delivery: Delivery) =>
      pipe.receive(name, { delivery }).pipe(
        Stream.take(k),
        Stream.runCollect,
        Effect.map((chunk) => Array.from(chunk)),
        Effect.timeoutFail({
          duration: RECEIVE_DEADLINE,
          onTimeout: () => new Error(`receive(${name}, ${k}) waited: the test's model of the pipe is wrong`)
        })
      )
    const entries: Array<Entry> = []
    for (const op of ops) {
      switch (op.op) {
        case "send":
          yield* pipe.send(op.name, op.message)
          if (!closed.has(op.name)) available.set(op.name, available.get(op.name)! + 1)
          entries.push(entry(op, "sent"))
          break
        case "sendBurst":
          yield* Effect.all(op.sends.map((send) => pipe.send(send.name, send.message)), { concurrency: "unbounded" })
          for (const send of op.sends) {
            if (!closed.has(send.name)) available.set(send.name, available.get(send.name)! + 1)
          }
          entries.push(entry(op, "sent"))
          break
        case "close":
          yield* pipe.close(op.name)
          closed.add(op.name)
          entries.push(entry(op, "closed"))
          break
        case "receive": {
          const k = Math.min(op.k, available.get(op.name)!)
          const got = yield* receive(op.name, k, op.delivery)
          available.set(op.name, available.get(op.name)! - (op.delivery === "at-least-once" ? Math.max(0, k - 1) : k))
          entries.push(entry(op, { take: k, got }))
          break
        }
      }
    }
    entries.push(yield* snapshot(namespace, true, "keys before the drain"))
    // Close every name and drain it: the stream ends at the close.
    for (const n of PIPE_NAMES) {
      yield* pipe.close(n)
      const got = yield* pipe.receive(n).pipe(
        Stream.runCollect,
        Effect.map((chunk) => Array.from(chunk)),
        Effect.timeoutFail({ duration: RECEIVE_DEADLINE, onTimeout: () => new Error(`drain(${n}) did not end`) })
      )
      entries.push(entry({ final: "close and drain", name: n }, got))
    }
    entries.push(yield* snapshot(namespace, true))
    return entries
  })

describe("differential: memory backend against Redis", () => {
  it(
    "TokenBucket: acquire (costs 0..capacity+2, alone or in bursts), reserve into debt, cancel, refund, reset, peek",
    async () => {
      await property(tokenBucketOp, async (ops) => {
        const brackets: Brackets = { at: [] }
        await differential(runBucket(ops, brackets), (r, m, tolerance) => nearRetry(widest(brackets))(r, m, tolerance))
      })
    },
    TIMEOUT
  )

  it("FixedWindow: acquire (costs 0..limit+2, alone or in bursts), reset, peek", async () => {
    await property(bucketOp, async (ops) => {
      const brackets: Brackets = { at: [] }
      await differential(
        runBucket(ops, brackets, hourWindow),
        (r, m, tolerance) => nearRetry(widest(brackets))(r, m, tolerance)
      )
    })
  }, TIMEOUT)

  it("SlidingWindow: acquire (costs 0..limit+2, alone or in bursts), reset, peek", async () => {
    await property(bucketOp, async (ops) => {
      const brackets: Brackets = { at: [] }
      await differential(runSliding(ops, brackets), (r, m, tolerance) => nearRetry(widest(brackets))(r, m, tolerance))
    })
  }, TIMEOUT)

  it(
    "RateLimiterStore: fixedWindow (with and without a limit) and tokenBucket (with and without overflow), each call's own parameters, alone or in bursts",
    async () => {
      await property(storeOp, async (ops) => {
        const brackets: Brackets = { at: [] }
        await differential(runStore(ops, brackets), (r, m, tolerance) => nearWindow(widest(brackets))(r, m, tolerance))
      })
    },
    TIMEOUT
  )

  it("Lock: tryLock (alone or in bursts), scoped, release and extend of fresh and stale tokens", async () => {
    await property(lockOp, (ops) => differential(runLock(ops)))
  }, TIMEOUT)

  it("RwLock: tryRead, tryWrite, a waiting write, a scoped read, release and extend of any token", async () => {
    await property(rwOp, (ops) => differential(runRwLock(ops)))
  }, TIMEOUT)

  it(
    "Semaphore: tryAcquire of 1 to 4 of 3 (alone or in bursts), scoped, waiting once, waiters left waiting, release and extend of any permit",
    async () => {
      await property(semaphoreOp, (ops) => differential(runSemaphore(ops)))
    },
    TIMEOUT
  )

  it("Pipe: send, close, receive (both deliveries), then close and drain every name", async () => {
    await property(pipeOp, (ops) => differential(runPipe(ops)))
  }, TIMEOUT)

  it("the harness itself: tolerances, the mismatch table, the replay clock", async () => {
    expect(nearRetry(0.4)({ deniedRetryMs: 100 }, { deniedRetryMs: 101 }, 50)).toBe(true)
    expect(nearRetry(0.4)({ deniedRetryMs: 100 }, { deniedRetryMs: 102 }, 50)).toBe(false)
    expect(nearRetry(0.4)({ deniedRetryMs: "never" }, { deniedRetryMs: 100 }, 50)).toBe(false)
    expect(nearRetry(0.4)({ allowed: 1 }, { allowed: 2 }, 50)).toBe(false)
    expect(nearRetry(0.4)({ waitMs: 100 }, { waitMs: 101 }, 50)).toBe(true)
    expect(nearRetry(0.4)({ waitMs: 100 }, { waitMs: 102 }, 50)).toBe(false)
    expect(nearRetry(0.4)({ waitMs: 100 }, { deniedRetryMs: 100 }, 50)).toBe(false)
    const burst = (retry: number) => [{ allowed: 1 }, { deniedRetryMs: retry }]
    expect(nearRetry(2.5)(burst(100), burst(103), 50)).toBe(true)
    expect(nearRetry(2.5)(burst(100), burst(104), 50)).toBe(false)
    expect(nearWindow(0.4)({ count: 3, ttlMs: 100 }, { count: 3, ttlMs: 101 }, 50)).toBe(true)
    expect(nearWindow(0.4)({ count: 3, ttlMs: 100 }, { count: 3, ttlMs: 102 }, 50)).toBe(false)
    expect(nearWindow(0.4)({ count: 3, ttlMs: 100 }, { count: 4, ttlMs: 100 }, 50)).toBe(false)
    expect(nearWindow(0.4)({ remaining: 1 }, { remaining: 2 }, 50)).toBe(false)
    expect(nearWindow(0.4)([{ remaining: 1 }, { count: 1, ttlMs: 5 }], [{ remaining: 1 }, { count: 1, ttlMs: 6 }], 50))
      .toBe(true)
    const key = { key: "k", type: "string", pttl: 1000 }
    expect(nearSnapshot([key], [{ ...key, pttl: 1040 }], 50)).toBe(true)
    expect(nearSnapshot([key], [{ ...key, pttl: 1060 }], 50)).toBe(false)
    expect(nearWindow(0.4)([key], [{ ...key, pttl: 1100 }], 50)).toBe(true)
    expect(nearWindow(0.4)([key], [{ ...key, pttl: 1101 }], 50)).toBe(false)
    expect(nearSnapshot([key], [{ ...key, pttl: -1 }], 1e9)).toBe(false)
    expect(nearSnapshot([key], [{ ...key, type: "list" }], 50)).toBe(false)
    expect(nearSnapshot([key], [], 50)).toBe(false)
    const op = { op: "acquire", name: "a", cost: 3 }
    await expect(differential((_, ns) => Effect.succeed([entry(op, ns)]))).rejects.toThrow(
      /1 outcome\(s\) differ[^]*≠ #0 \{"op":"acquire","name":"a","cost":3\}: Redis "d-/
    )
    const clock = new ReplayClock()
    clock.micros = 1_700_000_000_123_456
    const time = await runOn("memory", Effect.withClock(command("TIME"), clock))
    expect(time.value).toEqual(["1700000000", "123456"])
  })
})
