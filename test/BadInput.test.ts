/**
 * One bad-input suite for every structure. fast-check generates bad names (lone surrogates, over 4096
 * bytes, numbers that are no safe integer, huge bigints and byte arrays, values of no name type), bad
 * costs (negative, fractional, non-finite, huge, of no number type), bad waits (negative, past 10^11
 * ms, no duration), bad permit counts (the same, 0, and more than a name has), bad messages (non-finite,
 * of the wrong shape, that JSON would change) and bad delivery modes, for every operation of TokenBucket
 * (throttle included), FixedWindow, SlidingWindow, Lock, RwLock, Semaphore and Pipe. Each runs on the
 * throwaway server and on the embedded backend:
 *
 * - it must fail with `InvalidInput` naming the argument, never a defect and never a `RedisError`;
 * - it must leave no key behind: SCAN over the run's namespaces on Redis, the store's key count on the
 *   embedded backend (a store only this file uses, so it must hold nothing at all);
 * - both backends must fail the same way (operation, argument and message).
 *
 * Bad durations, namespaces, capacities, limits and permits are refused when a structure or an option is made,
 * with a `RangeError` (a `TypeError` for a namespace), before anything could reach either backend.
 *
 * Seeded: WAKUWAKU_SEED, else a random seed; a failure prints it (fast-check's "seed" and "path").
 * Runs per property: WAKUWAKU_BAD_RUNS, else 100.
 */
import { Duration, Effect, Exit, type ManagedRuntime, Option, Schema, Stream } from "effect"
import * as Runtime from "effect/ManagedRuntime"
import fc from "fast-check"
import { afterAll, describe, expect, it } from "vitest"
import { FixedWindow, Lock, Pipe, Rate, Redis, RwLock, Semaphore, SlidingWindow, TokenBucket } from "wakuwaku"
import { freshNamespace, RedisLive } from "./support/redis.js"

const SEED = Number(process.env["WAKUWAKU_SEED"] ?? Math.floor(Math.random() * 2 ** 31))
const RUNS = Number(process.env["WAKUWAKU_BAD_RUNS"] ?? 100)
const options = { seed: SEED, numRuns: RUNS }

const RUN = freshNamespace("bad")
const ns = (kind: string) => `${RUN}-${kind}`
const BUCKET = TokenBucket.make<Redis.KeyName>(ns("tb"), 10, Rate.perSecond(1))
const WINDOW = FixedWindow.make<Redis.KeyName>(ns("fw"), 10, "1 second")
const SLIDING = SlidingWindow.make<Redis.KeyName>(ns("sw"), 10, "1 second")
const LOCK = Lock.make<Redis.KeyName>(ns("lock"), "1 second")
const RW = RwLock.make<Redis.KeyName>(ns("rw"), "1 second")
const SEM = Semaphore.make<Redis.KeyName>(ns("sem"), 3, "1 second")
const Msg = Schema.Struct({ n: Schema.Number })
const PIPE = Pipe.make<Redis.KeyName, typeof Msg.Type>(ns("pipe"), Msg, "1 second")

// ---------------------------------------------------------------------------------------------------
// The backends

const store = Redis.makeMemoryStore()
const runtimes = {
  Redis: Runtime.make(RedisLive),
  memory: Runtime.make(Redis.layerMemory({ store }))
} satisfies Record<string, ManagedRuntime.ManagedRuntime<Redis.ReadWrite, Redis.RedisError>>
afterAll(() => Promise.all(Object.values(runtimes).map((runtime) => runtime.dispose())))

/** Every key under this file's namespaces on the server. */
const serverKeys = Effect.gen(function*() {
  const redis = yield* Redis.Redis
  const found: Array<string> = []
  let cursor = "0"
  do {
    const [next, keys] = (yield* redis.command("SCAN", [cursor, "MATCH", `*${RUN}*`, "COUNT", 1000])) as [
      string,
      Array<string>
    ]
    found.push(...keys)
    cursor = next
  } while (cursor !== "0")
  return found
})

// ---------------------------------------------------------------------------------------------------
// Bad values

const isWellFormed = (s: string) => (s as unknown as { isWellFormed(): boolean }).isWellFormed()

const badName: fc.Arbitrary<unknown> = fc.oneof(
  // A lone surrogate, anywhere, in a string of any length.
  fc.tuple(fc.string({ maxLength: 30 }), fc.integer({ min: 0xd800, max: 0xdfff }), fc.string({ maxLength: 30 }))
    .map(([a, c, b]) => a + String.fromCharCode(c) + b)
    .filter((s) => !isWellFormed(s)),
  // Very long: over 4096 bytes of UTF-8, in one-, two- and three-byte characters.
  fc.tuple(fc.constantFrom("x", "é", "€"), fc.integer({ min: 0, max: 200_000 }))
    .map(([c, extra]) => c.repeat(Math.floor(4096 / Buffer.byteLength(c)) + 1 + extra)),
  // Numbers that are no safe integer.
  fc.constantFrom(NaN, Infinity, -Infinity, 2 ** 53, -(2 ** 53), Number.MAX_VALUE, 0.5, -1.5),
  fc.double().filter((d) => !Number.isSafeInteger(d)),
  // Bigints of more than 4096 digits, and byte arrays of more than 2048 bytes (4096 in hex).
  fc.bigInt({ min: 10n ** 4096n, max: 10n ** 4200n }),
  fc.bigInt({ min: -(10n ** 4200n), max: -(10n ** 4095n) }),
  fc.integer({ min: 2049, max: 100_000 }).map((n) => new Uint8Array(n)),
  // No name type at all.
  fc.constantFrom(null, undefined, true, {}, [], Symbol("s"), () => 1, new Date(0), new Map())
)

const badCost: fc.Arbitrary<unknown> = fc.oneof(
  fc.integer({ min: Number.MIN_SAFE_INTEGER, max: -1 }),
  fc.double().filter((d) => !(Number.isSafeInteger(d) && d >= 0)),
  fc.constantFrom(NaN, Infinity, -Infinity, 2 ** 53, 1e300, 0.5, "1", 1n, null, undefined, {}, [1])
)

/** Permit counts: bad costs (but undefined, which is tryAcquire's default of 1), 0, and more than the 3 of a name. */
const badCount: fc.Arbitrary<unknown> = fc.oneof(
  badCost.filter((n) => n !== undefined),
  fc.constant(0),
  fc.integer({ min: 4, max: Number.MAX_SAFE_INTEGER })
)

const badMessage: fc.Arbitrary<unknown> = fc.oneof(
  fc.constantFrom(NaN, Infinity, -Infinity).map((n) => ({ n })),
  fc.constantFrom({}, { n: "1" }, { n: null }, { n: 1n }, null, 1, "m", undefined, [], new Date(0)),
  fc.string().map((n) => ({ n }))
)

const badDelivery: fc.Arbitrary<unknown> = fc.oneof(
  fc.string().filter((s) => s !== "at-most-once" && s !== "at-least-once"),
  fc.constantFrom(null, 1, {}, "AT-MOST-ONCE", "exactly-once")
)

/** Durations that are bad everywhere: not a duration, not finite, not longer than zero. */
const badDuration: fc.Arbitrary<unknown> = fc.oneof(
  fc.constantFrom(
    0,
    -1,
    NaN,
    Infinity,
    -Infinity,
    0n,
    -5n,
    "garbage",
    "0 seconds",
    "-5 seconds",
    "1 fortnight",
    "",
    {},
    null
  ),
  fc.constantFrom(Duration.infinity, Duration.zero),
  fc.double({ max: 0, noNaN: true })
)

/** Durations past the bound of what a structure keeps in Redis (10^11 ms). */
const pastBound: fc.Arbitrary<unknown> = fc.oneof(
  fc.double({ min: 1e11 + 1, max: 1e300, noNaN: true }),
  fc.bigInt({ min: 10n ** 20n + 1n, max: 10n ** 40n }),
  fc.constantFrom("200 weeks", Duration.days(1e6), 2 ** 62)
)

/** A reservation's maxWait: anything but a duration from 0 to 10^11 ms (0 is fine here). */
const badMaxWait: fc.Arbitrary<unknown> = fc.oneof(
  fc.constantFrom(-1, NaN, Infinity, -Infinity, -5n, "garbage", "-5 seconds", "1 fortnight", "", {}, null, [-1, 0]),
  fc.constantFrom(Duration.infinity, "x".repeat(100_000)),
  fc.double({ max: -Number.MIN_VALUE, noNaN: true }),
  pastBound
)

/** What a token bucket's cancel must refuse: anything but a Granted as reserve made it. */
const GRANTED = TokenBucket.Reservation.Granted({
  wait: Duration.zero,
  cost: 1,
  grantedAt: 1_764_496_804_727_810,
  level: -1
})
const badReservation: fc.Arbitrary<unknown> = fc.oneof(
  fc.constantFrom(
    null,
    undefined,
    1,
    "Granted",
    [],
    {},
    TokenBucket.Reservation.Refused({ retryAfter: Option.none() })
  ),
  fc.constantFrom({ _tag: "Granted" }, { ...GRANTED, _tag: "Refused" }, { _tag: "Granted", wait: Duration.zero }),
  badCost.map((cost) => ({ ...GRANTED, cost })),
  fc.oneof(badCost, fc.constant(-1)).map((grantedAt) => ({ ...GRANTED, grantedAt })),
  fc.constantFrom(NaN, Infinity, -Infinity, "-1", -1n, null, undefined, {}).map((level) => ({ ...GRANTED, level }))
)

const badNamespace: fc.Arbitrary<unknown> = fc.oneof(
  fc.constantFrom("", "a:b", "{x}", "has space", "ü", "a/b", null, 1, undefined),
  fc.integer({ min: 65, max: 1_000_000 }).map((n) => "n".repeat(n))
)

// ---------------------------------------------------------------------------------------------------
// Operations

interface Op {
  readonly label: string
  readonly argument: string
  readonly run: () => Effect.Effect<unknown, unknown, Redis.ReadWrite>
}

/** An operation with the bad value it got, printed short in a counterexample (a long name is not printed whole). */
const op = (label: string, argument: string, input: unknown, run: Op["run"]): Op =>
  Object.assign({ label, argument, run }, { [fc.toStringMethod]: () => `${label} with ${argument} ${short(input)}` })

const short = (input: unknown): string => {
  if (typeof input === "string" && input.length > 60) {
    return `a string of ${input.length} characters (${Buffer.byteLength(input)} bytes)`
  }
  if (typeof input === "bigint" && String(input).length > 60) return `a bigint of ${String(input).length} characters`
  if (input instanceof Uint8Array) return `a Uint8Array of ${input.byteLength} bytes`
  return fc.stringify(input)
}

// Bad values are cast: the compiler would refuse most of them, and this suite is about what gets past it.
const as = <T>(u: unknown) => u as T
const collect = <A, E>(stream: Stream.Stream<A, E, Pipe.Requirements>) => Stream.runDrain(stream)

const limiterOps = (
  label: string,
  limiter:
    | TokenBucket.TokenBucket<Redis.KeyName>
    | FixedWindow.FixedWindow<Redis.KeyName>
    | SlidingWindow.SlidingWindow<Redis.KeyName>
) =>
  fc.oneof(
    badName.map((name) => op(`${label}.acquire(name)`, "name", name, () => limiter.acquire(as(name), 1))),
    badCost.map((cost) => op(`${label}.acquire(cost)`, "cost", cost, () => limiter.acquire("n", as(cost)))),
    badName.map((name) => op(`${label}.reset`, "name", name, () => limiter.reset(as(name)))),
    badName.map((name) => op(`${label}.peek`, "name", name, () => limiter.peek(as(name))))
  )

const bucketOps = fc.oneof(
  limiterOps("TokenBucket", BUCKET),
  badName.map((name) => op("TokenBucket.reserve(name)", "name", name, () => BUCKET.reserve(as(name), 1, 0))),
  badCost.map((cost) => op("TokenBucket.reserve(cost)", "cost", cost, () => BUCKET.reserve("n", as(cost), "1 second"))),
  badMaxWait.map((wait) => op("TokenBucket.reserve(maxWait)", "maxWait", wait, () => BUCKET.reserve("n", 1, as(wait)))),
  badName.map((name) => op("TokenBucket.refund(name)", "name", name, () => BUCKET.refund(as(name), 1))),
  badCost.map((cost) => op("TokenBucket.refund(cost)", "cost", cost, () => BUCKET.refund("n", as(cost)))),
  badName.map((name) => op("TokenBucket.cancel(name)", "name", name, () => BUCKET.cancel(as(name), GRANTED))),
  badReservation.map((reservation) =>
    op("TokenBucket.cancel(reservation)", "reservation", reservation, () => BUCKET.cancel("n", as(reservation)))
  ),
  badName.map((name) =>
    op("TokenBucket.throttle(name)", "name", name, () => TokenBucket.throttle(Effect.void, BUCKET, as(name)))
  ),
  // An option left undefined takes its default.
  badCost.filter((cost) => cost !== undefined).map((cost) =>
    op(
      "TokenBucket.throttle(cost)",
      "cost",
      cost,
      () => TokenBucket.throttle(Effect.void, BUCKET, "n", { cost: as(cost) })
    )
  ),
  badMaxWait.map((wait) =>
    op(
      "TokenBucket.throttle(maxWait)",
      "maxWait",
      wait,
      () => TokenBucket.throttle(Effect.void, BUCKET, "n", { maxWait: as(wait) })
    )
  )
)

const lockOps = fc.oneof(
  badName.map((name) => op("Lock.tryLock", "name", name, () => LOCK.tryLock(as(name)))),
  badName.map((name) =>
    op("Lock.withLock", "name", name, () => Lock.withLock(LOCK, as(name), { acquire: Lock.tryOnce })(Effect.void))
  ),
  badName.map((name) => op("Lock.scoped", "name", name, () => Effect.scoped(Lock.scoped(LOCK, as(name)))))
)

const rwOps = fc.oneof(
  badName.map((name) => op("RwLock.tryRead", "name", name, () => RW.tryRead(as(name)))),
  badName.map((name) => op("RwLock.tryWrite", "name", name, () => RW.tryWrite(as(name)))),
  badName.map((name) => op("RwLock.withRead", "name", name, () => RwLock.withRead(RW, as(name))(Effect.void))),
  badName.map((name) => op("RwLock.withWrite", "name", name, () => RwLock.withWrite(RW, as(name))(Effect.void))),
  badName.map((name) =>
    op(
      "RwLock.scopedWrite",
      "name",
      name,
      () => Effect.scoped(RwLock.scopedWrite(RW, as(name), { acquire: Lock.tryOnce }))
    )
  )
)

const semaphoreOps = fc.oneof(
  badName.map((name) => op("Semaphore.tryAcquire(name)", "name", name, () => SEM.tryAcquire(as(name)))),
  badCount.map((n) => op("Semaphore.tryAcquire(n)", "n", n, () => SEM.tryAcquire("n", as(n)))),
  badName.map((name) =>
    op(
      "Semaphore.withPermits(name)",
      "name",
      name,
      () => Semaphore.withPermits(SEM, as(name), 1, { acquire: Lock.tryOnce })(Effect.void)
    )
  ),
  badCount.map((n) =>
    op("Semaphore.withPermits(n)", "n", n, () => Semaphore.withPermits(SEM, "n", as(n))(Effect.void))
  ),
  badName.map((name) => op("Semaphore.scoped", "name", name, () => Effect.scoped(Semaphore.scoped(SEM, as(name), 2)))),
  badCount.map((n) => op("Semaphore.scoped(n)", "n", n, () => Effect.scoped(Semaphore.scoped(SEM, "n", as(n)))))
)

const pipeOps = fc.oneof(
  badName.map((name) => op("Pipe.send(name)", "name", name, () => PIPE.send(as(name), { n: 1 }))),
  badMessage.map((message) => op("Pipe.send(message)", "message", message, () => PIPE.send("n", as(message)))),
  badName.map((name) => op("Pipe.close", "name", name, () => PIPE.close(as(name)))),
  badName.map((name) => op("Pipe.receive(name)", "name", name, () => collect(PIPE.receive(as(name))))),
  badDelivery.map((delivery) =>
    op("Pipe.receive(delivery)", "delivery", delivery, () => collect(PIPE.receive("n", { delivery: as(delivery) })))
  ),
  badName.map((name) => op("Pipe.heartbeat", "name", name, () => Pipe.heartbeat(PIPE, as(name))))
)

/** What an operation did on one backend, as comparable data, and the keys left behind. */
const observe = async (backend: keyof typeof runtimes, operation: Op) => {
  const runtime = runtimes[backend]
  const exit = await runtime.runPromiseExit(operation.run())
  const left = backend === "Redis" ? (await runtime.runPromise(serverKeys)).length : store.size
  if (Exit.isSuccess(exit)) return { outcome: "succeeded", left }
  const failure = exit.cause._tag === "Fail" ? exit.cause.error : undefined
  if (!(failure instanceof Redis.InvalidInput)) return { outcome: `not InvalidInput: ${String(exit.cause)}`, left }
  return { outcome: { operation: failure.operation, argument: failure.argument, message: failure.message }, left }
}

const property = (ops: fc.Arbitrary<Op>) =>
  fc.assert(
    fc.asyncProperty(ops, async (operation) => {
      const { argument, label } = operation
      const onRedis = await observe("Redis", operation)
      const onMemory = await observe("memory", operation)
      expect(onRedis.outcome, `${label} on Redis`).toMatchObject({ argument })
      expect(onMemory.outcome, `${label} on memory`).toMatchObject({ argument })
      expect(onRedis.left, `${label}: keys left on Redis`).toBe(0)
      expect(onMemory.left, `${label}: keys left on memory`).toBe(0)
      expect(onMemory.outcome, `${label}: memory against Redis`).toEqual(onRedis.outcome)
    }),
    options
  )

describe(`bad input on Redis and on the embedded backend (seed ${SEED}, ${RUNS} runs)`, () => {
  it(
    "TokenBucket: every operation fails with InvalidInput, writes nothing, and both backends agree",
    () => property(bucketOps),
    60_000
  )
  it(
    "FixedWindow: every operation fails with InvalidInput, writes nothing, and both backends agree",
    () => property(limiterOps("FixedWindow", WINDOW)),
    60_000
  )
  it(
    "SlidingWindow: every operation fails with InvalidInput, writes nothing, and both backends agree",
    () => property(limiterOps("SlidingWindow", SLIDING)),
    60_000
  )
  it(
    "Lock: every operation fails with InvalidInput, writes nothing, and both backends agree",
    () => property(lockOps),
    60_000
  )
  it(
    "RwLock: every operation fails with InvalidInput, writes nothing, and both backends agree",
    () => property(rwOps),
    60_000
  )
  it(
    "Semaphore: every operation fails with InvalidInput, writes nothing, and both backends agree",
    () => property(semaphoreOps),
    60_000
  )
  it(
    "Pipe: every operation fails with InvalidInput, writes nothing, and both backends agree",
    () => property(pipeOps),
    60_000
  )

  it("names at the bound: 4096 bytes pass, 4097 do not, in every name type", async () => {
    const exact = ["x".repeat(4096), "€".repeat(1365) + "x", 10n ** 4095n, new Uint8Array(2048)]
    const over = ["x".repeat(4097), "€".repeat(1366), 10n ** 4096n, new Uint8Array(2049)]
    for (const backend of ["Redis", "memory"] as const) {
      for (const name of exact) {
        expect(await runtimes[backend].runPromise(BUCKET.peek(name))).toBe(10)
      }
      for (const name of over) {
        const observed = await observe(backend, op("peek", "name", name, () => BUCKET.peek(name)))
        expect(observed.outcome).toMatchObject({
          operation: `TokenBucket(${ns("tb")}).peek`,
          argument: "name",
          message: expect.stringMatching(
            /^a name must encode to at most 4096 bytes, got (4097|4098|more) \(a (string|bigint|Uint8Array, in hex)\)$/
          )
        })
      }
    }
  })
})

describe(`bad input when a structure or an option is made (seed ${SEED}, ${RUNS} runs)`, () => {
  /** The call throws `kind`, and no backend holds a key of this file afterwards. */
  const throwsOnly = async (call: () => unknown, kind: typeof RangeError | typeof TypeError) => {
    let thrown: unknown
    try {
      call()
    } catch (error) {
      thrown = error
    }
    expect(thrown).toBeInstanceOf(kind)
    expect(await runtimes.Redis.runPromise(serverKeys)).toEqual([])
    expect(store.size).toBe(0)
  }

  it("a bad duration is a RangeError: every make, Lock.wait, renewEvery, heartbeat", () =>
    fc.assert(
      fc.asyncProperty(badDuration, async (d) => {
        const bad = as<Duration.DurationInput>(d)
        await throwsOnly(() => Lock.make("x", bad), RangeError)
        await throwsOnly(() => RwLock.make("x", bad), RangeError)
        await throwsOnly(() => Semaphore.make("x", 1, bad), RangeError)
        await throwsOnly(() => Pipe.make("x", Msg, bad), RangeError)
        await throwsOnly(() => FixedWindow.make("x", 1, bad), RangeError)
        await throwsOnly(() => SlidingWindow.make("x", 1, bad), RangeError)
        await throwsOnly(() => Rate.make(1, as<"1 second">(bad)), RangeError)
        await throwsOnly(() => Lock.wait({ deadline: bad }), RangeError)
        await throwsOnly(() => Lock.withLock(LOCK, "n", { renewEvery: bad })(Effect.void), RangeError)
        await throwsOnly(() => RwLock.withRead(RW, "n", { renewEvery: bad })(Effect.void), RangeError)
        await throwsOnly(() => RwLock.withWrite(RW, "n", { renewEvery: bad })(Effect.void), RangeError)
        await throwsOnly(() => Semaphore.withPermits(SEM, "n", 1, { renewEvery: bad })(Effect.void), RangeError)
        await throwsOnly(() => Semaphore.scoped(SEM, "n", 1, { renewEvery: bad }), RangeError)
        await throwsOnly(() => Pipe.heartbeat(PIPE, "n", bad), RangeError)
      }),
      options
    ), 60_000)

  it("a duration past 10^11 ms is a RangeError for what a structure keeps in Redis", () =>
    fc.assert(
      fc.asyncProperty(pastBound, async (d) => {
        const bad = as<Duration.DurationInput>(d)
        await throwsOnly(() => Lock.make("x", bad), RangeError)
        await throwsOnly(() => RwLock.make("x", bad), RangeError)
        await throwsOnly(() => Semaphore.make("x", 1, bad), RangeError)
        await throwsOnly(() => Pipe.make("x", Msg, bad), RangeError)
        await throwsOnly(() => FixedWindow.make("x", 1, bad), RangeError)
        await throwsOnly(() => SlidingWindow.make("x", 1, bad), RangeError)
      }),
      options
    ), 60_000)

  it("a bad namespace is a TypeError; a bad capacity, limit or count of permits a RangeError", () =>
    fc.assert(
      fc.asyncProperty(badNamespace, badCost, async (namespace, count) => {
        const bad = as<string>(namespace)
        await throwsOnly(() => TokenBucket.make(bad, 1, Rate.perSecond(1)), TypeError)
        await throwsOnly(() => FixedWindow.make(bad, 1, "1 second"), TypeError)
        await throwsOnly(() => SlidingWindow.make(bad, 1, "1 second"), TypeError)
        await throwsOnly(() => Lock.make(bad, "1 second"), TypeError)
        await throwsOnly(() => RwLock.make(bad, "1 second"), TypeError)
        await throwsOnly(() => Semaphore.make(bad, 1, "1 second"), TypeError)
        await throwsOnly(() => Pipe.make(bad, Msg, "1 second"), TypeError)
        await throwsOnly(() => TokenBucket.make("x", as<number>(count), Rate.perSecond(1)), RangeError)
        await throwsOnly(() => FixedWindow.make("x", as<number>(count), "1 second"), RangeError)
        await throwsOnly(() => SlidingWindow.make("x", as<number>(count), "1 second"), RangeError)
        await throwsOnly(() => Semaphore.make("x", as<number>(count), "1 second"), RangeError)
      }),
      options
    ), 60_000)

  it("a sliding window's limit above its maximum is a RangeError that names the maximum", () =>
    fc.assert(
      fc.property(fc.integer({ min: SlidingWindow.maxLimit + 1, max: Number.MAX_SAFE_INTEGER }), (limit) => {
        expect(() => SlidingWindow.make("x", limit, "1 second")).toThrow(
          /^wakuwaku: SlidingWindow\(x\) limit must be a whole number from 0 to 10000 /
        )
      }),
      options
    ))

  it("a namespace of 65 characters names the bound; a megabyte one is not printed whole", () => {
    expect(() => Lock.make("n".repeat(65), "1 second")).toThrow(
      `wakuwaku: Lock namespace must be a non-empty string of at most 64 letters, digits, '_', '.' or '-', got "${
        "n".repeat(65)
      }"`
    )
    expect(() => Lock.make("n".repeat(1 << 20), "1 second")).toThrow(
      "wakuwaku: Lock namespace must be a non-empty string of at most 64 letters, digits, '_', '.' or '-', got a string of 1048576 characters"
    )
    expect(String(Lock.make("n".repeat(64), "1 second"))).toContain("n".repeat(64))
  })
})
