/**
 * A lease's end, for every leased holder (Lock, RwLock's read and write leases, Semaphore, the Pipe
 * receiver; one renewal loop, src/internal/keepAlive.ts):
 *
 * - a `renewEvery` that cannot keep the lease alive is a `RangeError` where it is given, naming both
 *   durations;
 * - a holder whose lease reaches its end with no renewal confirmed is stopped at that end, counted from
 *   when the grant or the last confirmed renewal was sent: with Redis stalled, refusing or slow; the
 *   scoped forms (`Lock.scoped`, `RwLock.scopedRead`/`scopedWrite`, `Semaphore.scoped`) fail their `lost`
 *   at that same end.
 *
 * On the embedded backend a decorator of the `Redis` service plays the faults on the TestClock, so the
 * times are exact. On a throwaway redis-server the faults are real (SIGSTOP, SIGKILL, a relay that holds
 * back replies), and times carry the timer allowance of test/Faults.test.ts (see TIMER_SLACK).
 */
import { describe, expect, it } from "@effect/vitest"
import {
  Cause,
  Chunk,
  Clock,
  Deferred,
  Duration,
  Effect,
  Exit,
  Fiber,
  Layer,
  Option,
  Ref,
  Schema,
  Scope,
  Stream,
  TestClock
} from "effect"
import { createServer, Socket } from "node:net"
import { Lock, Pipe, Redis, RwLock, Semaphore } from "wakuwaku"
import { RedisServer } from "wakuwaku/testing"
import { keepAlive } from "../src/internal/keepAlive.js"
import { OPEN, RELEASE } from "../src/internal/pipe/scripts.js"
import { freshNamespace } from "./support/redis.js"

/**
 * How late a timer may fire on this shared 2-core machine while other test files run: the allowance
 * test/Faults.test.ts gives each fault to surface (its `+ 200`). Nothing here is allowed later than the
 * lease's end plus this.
 */
const TIMER_SLACK = 200

const failureOf = <A, E>(exit: Exit.Exit<A, E>): E => {
  if (Exit.isSuccess(exit)) throw new Error(`expected a failure, got a success: ${String(exit.value)}`)
  const failure = Cause.failureOption(exit.cause)
  if (Option.isNone(failure)) throw new Error(`expected a typed failure, got ${Cause.pretty(exit.cause)}`)
  return failure.value
}

/** What happened to a body run under a lease, on the Clock: when it started, when it was interrupted. */
interface Times {
  started?: number
  interrupted?: number
}

/** A body that records its start, runs `atStart` (a fault), then waits until it is interrupted. */
const waitingBody = (times: Times, atStart: Effect.Effect<void> = Effect.void) =>
  Effect.gen(function*() {
    times.started = yield* Clock.currentTimeMillis
    yield* atStart
    return yield* Effect.never
  }).pipe(Effect.onInterrupt(() => Effect.map(Clock.currentTimeMillis, (now) => void (times.interrupted = now))))

type Requirements = Lock.Requirements | RwLock.Requirements | Semaphore.Requirements

/** One kind of leased holder: runs `body` under a fresh lease of `ttl` on `name`. */
interface Holder {
  readonly title: string
  readonly hold: <A>(
    ns: string,
    ttl: Duration.DurationInput,
    name: string,
    body: Effect.Effect<A>
  ) => Effect.Effect<A, unknown, Requirements>
  /** Another replica's attempt at the same name (for a read lease: a writer's). */
  readonly tryOther: (
    ns: string,
    ttl: Duration.DurationInput,
    name: string
  ) => Effect.Effect<boolean, unknown, Requirements>
}

const holders: ReadonlyArray<Holder> = [
  {
    title: "Lock",
    hold: (ns, ttl, name, body) => Lock.withLock(Lock.make<string>(ns, ttl), name)(body),
    tryOther: (ns, ttl, name) => Effect.map(Lock.make<string>(ns, ttl).tryLock(name), Option.isSome)
  },
  {
    title: "RwLock read",
    hold: (ns, ttl, name, body) => RwLock.withRead(RwLock.make<string>(ns, ttl), name)(body),
    tryOther: (ns, ttl, name) => Effect.map(RwLock.make<string>(ns, ttl).tryWrite(name), Option.isSome)
  },
  {
    title: "RwLock write",
    hold: (ns, ttl, name, body) => RwLock.withWrite(RwLock.make<string>(ns, ttl), name)(body),
    tryOther: (ns, ttl, name) => Effect.map(RwLock.make<string>(ns, ttl).tryWrite(name), Option.isSome)
  },
  {
    title: "Semaphore of 1",
    hold: (ns, ttl, name, body) => Semaphore.withPermits(Semaphore.make<string>(ns, 1, ttl), name, 1)(body),
    tryOther: (ns, ttl, name) => Effect.map(Semaphore.make<string>(ns, 1, ttl).tryAcquire(name), Option.isSome)
  }
]

describe("renewEvery that cannot keep the lease alive", () => {
  const ns = freshNamespace()
  const message = (lease: string, got: string) =>
    `wakuwaku: renewEvery must be shorter than half the lease (${lease}), so that a failed renewal can be ` +
    `retried before the lease ends; got ${got}`

  it("the issue's case, a 500 ms lease renewed every 3 s, is a RangeError naming both", () => {
    const L = Lock.make<string>(ns, "500 millis")
    expect(() => Lock.withLock(L, "a", { renewEvery: "3 seconds" })(Effect.void)).toThrow(
      new RangeError(message("500ms", "3s"))
    )
  })

  it("every call that takes it: half the lease or more throws, just under half is taken", () => {
    const L = Lock.make<string>(ns, "500 millis")
    const RW = RwLock.make<string>(ns, "500 millis")
    const S = Semaphore.make<string>(ns, 2, "500 millis")
    const calls: ReadonlyArray<(renewEvery: Duration.DurationInput) => unknown> = [
      (renewEvery) => Lock.withLock(L, "a", { renewEvery })(Effect.void),
      (renewEvery) => Lock.withLock(Effect.void, L, "a", { renewEvery }),
      (renewEvery) => Lock.scoped(L, "a", { renewEvery }),
      (renewEvery) => RwLock.withRead(RW, "a", { renewEvery })(Effect.void),
      (renewEvery) => RwLock.withWrite(RW, "a", { renewEvery })(Effect.void),
      (renewEvery) => RwLock.scopedRead(RW, "a", { renewEvery }),
      (renewEvery) => RwLock.scopedWrite(RW, "a", { renewEvery }),
      (renewEvery) => Semaphore.withPermits(S, "a", 1, { renewEvery })(Effect.void),
      (renewEvery) => Semaphore.scoped(S, "a", 2, { renewEvery })
    ]
    for (const call of calls) {
      expect(() => call("250 millis")).toThrow(new RangeError(message("500ms", "250ms")))
      expect(() => call("500 millis")).toThrow(new RangeError(message("500ms", "500ms")))
      expect(() => call(Duration.minutes(1))).toThrow(new RangeError(message("500ms", "1m")))
      expect(Effect.isEffect(call("249 millis"))).toBe(true)
    }
    // The lease as Redis holds it: whole milliseconds, rounded up.
    expect(() => Lock.withLock(Lock.make<string>(ns, "10 micros"), "a", { renewEvery: "1 millis" })(Effect.void))
      .toThrow(new RangeError(message("1ms", "1ms")))
  })
})

/** What the embedded backend's faulty service does from `from` (ms on the Clock) on. */
type Fault = "stalled" | "refusing" | "slow"

/** How long a stalled call waits before it fails with Timeout: `Redis.layer`'s default commandTimeout. */
const COMMAND_TIMEOUT = 2000

/**
 * The memory backend behind a decorator of the service that, from `from` on, plays `fault` on every
 * script and command: stalled (no answer, then Timeout after the command timeout), refusing (Connection
 * at once), slow (the call runs at once, its answer comes `slowBy` ms later).
 */
const faulty = (fault: Fault, from: number, slowBy = 0, store = Redis.makeMemoryStore()) =>
  Layer.effect(
    Redis.Redis,
    Effect.map(Redis.Redis, (inner): Redis.Service => {
      const play = <A>(operation: string, call: Effect.Effect<A, Redis.RedisError>) =>
        Effect.flatMap(Clock.currentTimeMillis, (now): Effect.Effect<A, Redis.RedisError> =>
          now < from
            ? call
            : fault === "stalled"
            ? Effect.zipRight(
              Effect.sleep(COMMAND_TIMEOUT),
              Effect.fail(new Redis.RedisError({ reason: "Timeout", operation, cause: new Error("Command timed out") }))
            )
            : fault === "refusing"
            ? Effect.fail(
              new Redis.RedisError({ reason: "Connection", operation, cause: new Error("connect ECONNREFUSED") })
            )
            : Effect.zipLeft(call, Effect.sleep(slowBy)))
      return {
        ...inner,
        script: (script, keys, args) => play(`script ${script.name}`, inner.script(script, keys, args)),
        command: (name, args) => play(name, inner.command(name, args))
      }
    })
  ).pipe(Layer.provideMerge(Redis.layerMemory({ store })))

/** Moves the TestClock to `ms`: TestClock.adjust wakes each sleep at its own time, fibers running in between. */
const advanceTo = (ms: number) => Effect.flatMap(Clock.currentTimeMillis, (now) => TestClock.adjust(ms - now))

describe("on the embedded backend, on the TestClock: a lease of 900 ms, renewed every 300 ms", () => {
  for (const holder of holders) {
    for (const fault of ["stalled", "refusing", "slow"] as const) {
      it.effect(
        `${holder.title}, Redis ${fault} from 650 ms: the body is interrupted at exactly 1500 ms (the renewal ` +
          `sent at 600 ms + 900 ms), LockLost (Unconfirmed)`,
        () =>
          Effect.gen(function*() {
            const times: Times = {}
            const fiber = yield* Effect.fork(holder.hold("t", "900 millis", "a", waitingBody(times)))
            yield* advanceTo(5000)
            const error = failureOf(yield* Fiber.await(fiber))
            expect(error).toBeInstanceOf(Lock.LeaseLost)
            expect(error).toMatchObject({ _tag: "LeaseLost", name: "a", reason: "Unconfirmed" })
            expect(times).toEqual({ started: 0, interrupted: 1500 })
          }).pipe(Effect.provide(faulty(fault, 650, 700)))
      )
    }

    it.effect(
      `${holder.title}, the grant answered at 1000 ms, after the lease would have ended: LockLost (Unconfirmed), ` +
        `and the body never runs`,
      () =>
        Effect.gen(function*() {
          const times: Times = {}
          const fiber = yield* Effect.fork(holder.hold("t", "900 millis", "a", waitingBody(times)))
          yield* advanceTo(5000)
          const exit = yield* Fiber.await(fiber)
          expect(failureOf(exit)).toMatchObject({ _tag: "LeaseLost", name: "a", reason: "Unconfirmed" })
          expect(times).toEqual({})
        }).pipe(Effect.provide(faulty("slow", 0, 1000)))
    )

    it.effect(
      `${holder.title}, every answer 400 ms late: each renewal is sent as soon as the last is confirmed, and the ` +
        `lease is kept`,
      () =>
        Effect.gen(function*() {
          const fiber = yield* Effect.fork(
            holder.hold("t", "900 millis", "a", Effect.zipRight(Effect.sleep("3 seconds"), Clock.currentTimeMillis))
          )
          yield* advanceTo(5000)
          // Granted at 0, answered at 400; the body ran 3 s; the release took 400 ms more.
          expect(yield* Fiber.join(fiber)).toBe(3400)
        }).pipe(Effect.provide(faulty("slow", 0, 400)))
    )
  }

  // The scoped forms hand `lost` to the caller to race its work against: it must fail at the same end.
  const scopedForms: ReadonlyArray<{
    readonly title: string
    readonly take: (
      ttl: Duration.DurationInput
    ) => Effect.Effect<Effect.Effect<never, Lock.LeaseLost>, unknown, Requirements | Scope.Scope>
  }> = [
    { title: "Lock.scoped", take: (ttl) => Effect.map(Lock.scoped(Lock.make<string>("t", ttl), "a"), (h) => h.lost) },
    {
      title: "RwLock.scopedRead",
      take: (ttl) => Effect.map(RwLock.scopedRead(RwLock.make<string>("t", ttl), "a"), (h) => h.lost)
    },
    {
      title: "RwLock.scopedWrite",
      take: (ttl) => Effect.map(RwLock.scopedWrite(RwLock.make<string>("t", ttl), "a"), (h) => h.lost)
    },
    {
      title: "Semaphore.scoped",
      take: (ttl) => Effect.map(Semaphore.scoped(Semaphore.make<string>("t", 1, ttl), "a", 1), (h) => h.lost)
    }
  ]
  for (const form of scopedForms) {
    for (const fault of ["stalled", "refusing", "slow"] as const) {
      it.effect(
        `${form.title}, Redis ${fault} from 650 ms: its \`lost\` fails at exactly 1500 ms, LeaseLost (Unconfirmed)`,
        () =>
          Effect.gen(function*() {
            const fiber = yield* Effect.fork(Effect.scoped(Effect.flatMap(form.take("900 millis"), (lost) =>
              Effect.flatMap(
                Effect.flip(lost),
                (error) => Effect.map(Clock.currentTimeMillis, (at) => ({ error, at }))
              ))))
            yield* advanceTo(5000)
            const { at, error } = yield* Fiber.join(fiber)
            expect(error).toBeInstanceOf(Lock.LeaseLost)
            expect(error).toMatchObject({ _tag: "LeaseLost", name: "a", reason: "Unconfirmed" })
            expect(at).toBe(1500)
          }).pipe(Effect.provide(faulty(fault, 650, 700)))
      )
    }
  }

  it.effect("the loop itself, whatever its period: a lease of 500 ms renewed every 3 s, never answered, is lost at 500 ms", () =>
    Effect.gen(function*() {
      const lost = yield* Deferred.make<readonly [string, number]>()
      const scope = yield* Scope.make()
      yield* keepAlive({
        ttl: Duration.millis(500),
        every: Duration.seconds(3),
        since: 0,
        renew: Effect.never,
        onLost: (reason) => Effect.flatMap(Clock.currentTimeMillis, (now) => Deferred.succeed(lost, [reason, now]))
      }).pipe(Scope.extend(scope))
      yield* advanceTo(4000)
      const result = yield* Deferred.poll(lost)
      expect(Option.isSome(result)).toBe(true)
      expect(yield* Option.getOrThrow(result)).toEqual(["Unconfirmed", 500])
      yield* Scope.close(scope, Exit.void)
    }))

  for (const fault of ["stalled", "refusing", "slow"] as const) {
    it.effect(
      `Pipe receiver, Redis ${fault} from 650 ms: nothing is handed over after the lease's end (1500 ms); the next ` +
        `pull fails with PipeBusy (Lost)`,
      () =>
        Effect.gen(function*() {
          const P = Pipe.make<string, number>("t", Schema.Number, "900 millis")
          for (let i = 0; i < 10; i++) yield* P.send("p", i)
          const handed: Array<readonly [number, number]> = []
          // One FETCH takes all ten at 0 ms; the consumer spends 400 ms on each.
          const exit = yield* P.receive("p").pipe(
            Stream.runForEach((n) =>
              Effect.flatMap(Clock.currentTimeMillis, (now) => {
                handed.push([n, now])
                return Effect.sleep("400 millis")
              })
            ),
            Effect.exit,
            Effect.fork,
            Effect.tap(() => advanceTo(8000)),
            Effect.flatMap(Fiber.join)
          )
          expect(failureOf(exit)).toMatchObject({ _tag: "PipeBusy", name: "p", reason: "Lost" })
          expect(handed).toEqual([[0, 0], [1, 400], [2, 800], [3, 1200]])
        }).pipe(Effect.provide(faulty(fault, 650, 700)))
    )
  }

  it.effect("Pipe receiver, OPEN answered at 1000 ms, after the lease would have ended: PipeBusy (Lost), nothing handed", () =>
    Effect.gen(function*() {
      const store = Redis.makeMemoryStore()
      const P = Pipe.make<string, number>("t", Schema.Number, "900 millis")
      // Messages are waiting, sent before the service turned slow.
      for (let i = 0; i < 3; i++) yield* P.send("p", i).pipe(Effect.provide(Redis.layerMemory({ store })))
      const handed = yield* Ref.make(Chunk.empty<number>())
      const failedAt = yield* Deferred.make<number>()
      const fiber = yield* P.receive("p").pipe(
        Stream.tapError(() => Effect.flatMap(Clock.currentTimeMillis, (now) => Deferred.succeed(failedAt, now))),
        Stream.runForEach((n) => Ref.update(handed, Chunk.append(n))),
        Effect.provide(faulty("slow", 0, 1000, store)),
        Effect.fork
      )
      yield* advanceTo(8000)
      expect(failureOf(yield* Fiber.await(fiber))).toMatchObject({ _tag: "PipeBusy", reason: "Lost" })
      // Lost as OPEN's reply came (1000 ms); the stream fails once its release is done (RELEASE, answered 1000 ms
      // later). Without the check, FETCH would have gone first: 3000 ms.
      expect(yield* Deferred.await(failedAt)).toBe(2000)
      expect(Chunk.toArray(yield* Ref.get(handed))).toEqual([])
    }))
})

/**
 * A TCP relay in front of a server that holds back every reply by `delay` ms once set (0: passes at once),
 * and from then on records the SHA1 of every script the client runs (EVALSHA), in order.
 */
const delayingRelay = (port: number) =>
  Effect.acquireRelease(
    Effect.async<{ port: number; delay: (ms: number) => void; scripts: () => Array<string>; close: () => void }>(
      (resume) => {
        let delay = 0
        let sent = ""
        const sockets = new Set<Socket>()
        const server = createServer((client) => {
          const upstream = new Socket()
          sockets.add(client).add(upstream)
          upstream.connect(port, "127.0.0.1")
          client.on("data", (chunk: Buffer) => {
            if (delay > 0) sent += chunk.toString("latin1")
            upstream.write(chunk)
          })
          upstream.on("data", (chunk: Buffer) => {
            if (delay === 0) client.write(chunk)
            else setTimeout(() => client.destroyed || client.write(chunk), delay)
          })
          const end = () => {
            client.destroy()
            upstream.destroy()
          }
          client.on("error", end).on("close", end)
          upstream.on("error", end).on("close", end)
        })
        server.listen(0, "127.0.0.1", () => {
          const address = server.address()
          resume(Effect.succeed({
            port: typeof address === "object" && address ? address.port : 0,
            delay: (ms: number) => (delay = ms),
            scripts: () => [...sent.matchAll(/evalsha\r\n\$40\r\n([0-9a-f]{40})/gi)].map((m) => m[1]!),
            close: () => {
              for (const socket of sockets) socket.destroy()
              server.close()
            }
          }))
        })
      }
    ),
    (relay) => Effect.sync(() => relay.close())
  )

/** A throwaway server, resumed before it is stopped (a stopped process keeps a SIGTERM pending). */
const server = Effect.tap(RedisServer.make(), (s) =>
  Effect.addFinalizer(() =>
    Effect.sync(() => {
      try {
        process.kill(s.pid, "SIGCONT")
      } catch {
        // Already gone (SIGKILL).
      }
    })
  ))

const LEASE = 600
const layerOf = (url: string, commandTimeout: Duration.DurationInput = "300 millis") =>
  Layer.fresh(Redis.layer({ url, commandTimeout }))
/** How long the relay holds back replies: past the lease. The client's command timeout is longer still. */
const HELD_BACK = LEASE + 400
const relayed = (port: number) => layerOf(`redis://127.0.0.1:${port}`, "3 seconds")

describe("on a throwaway redis-server: a lease of 600 ms, renewed every 200 ms", () => {
  for (const holder of holders) {
    for (const [fault, signal] of [["stalled (SIGSTOP)", "SIGSTOP"], ["refusing (SIGKILL)", "SIGKILL"]] as const) {
      it.live(
        `${holder.title}, Redis ${fault} as the body starts: interrupted at the lease's end, LockLost (Unconfirmed)`,
        () =>
          Effect.gen(function*() {
            const s = yield* server
            const ns = freshNamespace()
            const times: Times = {}
            const exit = yield* Effect.gen(function*() {
              const before = yield* Clock.currentTimeMillis
              const exit = yield* Effect.exit(
                holder.hold(ns, LEASE, "a", waitingBody(times, Effect.sync(() => process.kill(s.pid, signal))))
              )
              return { before, exit }
            }).pipe(Effect.provide(layerOf(s.url)))
            expect(failureOf(exit.exit)).toMatchObject({ _tag: "LeaseLost", name: "a", reason: "Unconfirmed" })
            // The grant was sent between `before` and the body's start, and nothing was confirmed since.
            const { interrupted, started } = times as Required<Times>
            expect(interrupted).toBeGreaterThanOrEqual(exit.before + LEASE)
            expect(interrupted).toBeLessThanOrEqual(started + LEASE + TIMER_SLACK)
            console.info(`${holder.title}, ${fault}: interrupted ${interrupted - started} ms after the body started`)
          }).pipe(Effect.scoped),
        20_000
      )
    }

    it.live(
      `${holder.title}, every reply held back past the lease: another replica gets in at the lease's end, and the ` +
        `body never runs: LockLost (Unconfirmed)`,
      () =>
        Effect.gen(function*() {
          const s = yield* server
          const relay = yield* delayingRelay(s.port)
          const ns = freshNamespace()
          const times: Times = {}
          const direct = layerOf(s.url)
          yield* Effect.gen(function*() {
            // Scripts loaded while replies still pass at once.
            yield* holder.hold(ns, LEASE, "warm", Effect.void)
            relay.delay(HELD_BACK)
            const first = yield* Effect.fork(Effect.exit(holder.hold(ns, LEASE, "a", waitingBody(times))))
            // The server granted at once; its lease runs out at 600 ms; the grant's reply arrives at 1000 ms.
            yield* Effect.sleep(LEASE + 100)
            expect(yield* holder.tryOther(ns, LEASE, "a").pipe(Effect.provide(direct))).toBe(true)
            const exit = yield* Fiber.join(first)
            expect(failureOf(exit)).toMatchObject({ _tag: "LeaseLost", name: "a", reason: "Unconfirmed" })
            expect(times).toEqual({})
          }).pipe(Effect.provide(relayed(relay.port)))
        }).pipe(Effect.scoped),
      20_000
    )
  }

  // Longer than the lease: the FETCH the receiver waits on is cut off by the lease's end, not by its timeout.
  const COMMAND_TIMEOUT_LIVE = 800
  it.live(
    "Pipe receiver, Redis stalled (SIGSTOP) while it waits: its wait ends at the lease's end, PipeBusy (Lost)",
    () =>
      Effect.gen(function*() {
        const s = yield* server
        const P = Pipe.make<string, number>(freshNamespace(), Schema.Number, LEASE)
        const failedAt = yield* Deferred.make<number>()
        yield* Effect.gen(function*() {
          yield* P.send("p", 0)
          let first = 0
          const before = yield* Clock.currentTimeMillis
          const exit = yield* P.receive("p").pipe(
            Stream.tapError(() => Effect.flatMap(Clock.currentTimeMillis, (now) => Deferred.succeed(failedAt, now))),
            Stream.runForEach(() =>
              Effect.flatMap(Clock.currentTimeMillis, (now) => {
                first = now
                process.kill(s.pid, "SIGSTOP")
                return Effect.void
              })
            ),
            Effect.exit
          )
          expect(failureOf(exit)).toMatchObject({ _tag: "PipeBusy", reason: "Lost" })
          const at = yield* Deferred.await(failedAt)
          // OPEN was sent between `before` and the first message; nothing was confirmed since. The stream
          // fails once the release (CLIENT KILL and RELEASE, each cut off by the command timeout) is done.
          expect(at).toBeGreaterThanOrEqual(before + LEASE)
          expect(at).toBeLessThanOrEqual(first + LEASE + 2 * COMMAND_TIMEOUT_LIVE + TIMER_SLACK)
        }).pipe(Effect.provide(layerOf(s.url, COMMAND_TIMEOUT_LIVE)))
      }).pipe(Effect.scoped),
    20_000
  )

  it.live(
    "Pipe receiver, OPEN's reply held back past the lease: PipeBusy (Lost) as it arrives, and nothing is handed over",
    () =>
      Effect.gen(function*() {
        const s = yield* server
        const relay = yield* delayingRelay(s.port)
        const P = Pipe.make<string, number>(freshNamespace(), Schema.Number, LEASE)
        yield* Effect.gen(function*() {
          // Scripts loaded while replies still pass at once.
          yield* P.send("warm", 0)
          yield* P.close("warm")
          yield* P.receive("warm").pipe(Stream.runDrain)
          for (let i = 0; i < 3; i++) yield* P.send("p", i)
          relay.delay(HELD_BACK)
          const handed: Array<number> = []
          const exit = yield* P.receive("p").pipe(
            Stream.runForEach((n) => Effect.sync(() => handed.push(n))),
            Effect.exit
          )
          expect(failureOf(exit)).toMatchObject({ _tag: "PipeBusy", reason: "Lost" })
          expect(handed).toEqual([])
          // Lost at OPEN's reply: no FETCH after it, only the release.
          expect(relay.scripts()).toEqual([OPEN.sha1, RELEASE.sha1])
        }).pipe(Effect.provide(relayed(relay.port)))
      }).pipe(Effect.scoped),
    20_000
  )

  // Last in the file: no renewal loop, receiver or relay outlives the tests above.
  it.effect("no fiber outlives the faults: only this test's own fiber is left", () =>
    Effect.gen(function*() {
      expect((yield* Fiber.roots).length).toBe(1)
    }))
})
