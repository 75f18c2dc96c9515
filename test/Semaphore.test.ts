import { Cause, Deferred, Duration, Effect, Exit, Fiber, Option, Ref } from "effect"
import { inspect } from "node:util"
import { expect } from "vitest"
import { Lock, Redis, Semaphore } from "wakuwaku"
import { command, exists, expectTtls, forEachBackend, get, keysMatching, pttl } from "./support/backends.js"
import { freshNamespace } from "./support/redis.js"

/** Every namespace of this file starts with RUN, so the last test can sweep all the keys the file wrote. */
const RUN = freshNamespace("sem")
const fresh = () => freshNamespace(RUN)

type Suffix = "holders" | "intent" | "fence"
const keyOf = (ns: string, name: string, suffix: Suffix) => `@@wakuwaku:Semaphore:{${ns}:${name}}:${suffix}`

const keysOf = (ns: string) => keysMatching(`@@wakuwaku:Semaphore:{${ns}:*`)
/** The suffixes of the keys that exist for one name, sorted. */
const suffixesOf = (ns: string, name: string) =>
  Effect.map(
    keysMatching(`@@wakuwaku:Semaphore:{${ns}:${name}}:*`),
    (keys) => keys.map((key) => key.slice(`@@wakuwaku:Semaphore:{${ns}:${name}}:`.length)).sort()
  )

/** The holders set of a name: [member, score] pairs in score order (`#` first). */
const holdersOf = (ns: string, name: string) =>
  Effect.map(
    command("ZRANGE", keyOf(ns, name, "holders"), 0, -1, "WITHSCORES") as Effect.Effect<
      Array<string>,
      Redis.RedisError,
      Redis.Redis
    >,
    (flat) => Array.from({ length: flat.length / 2 }, (_, i) => [flat[2 * i]!, Number(flat[2 * i + 1])] as const)
  )

/** The permits held on a name, as the `#` member counts them (0 when the set is gone). */
const heldOf = (ns: string, name: string) =>
  Effect.map(
    command("ZSCORE", keyOf(ns, name, "holders"), "#") as Effect.Effect<string | null, Redis.RedisError, Redis.Redis>,
    (score) => (score === null ? 0 : -Number(score))
  )

/** The server's time (on memory, the store's clock) in whole microseconds. */
const serverMicros = Effect.map(
  command("TIME") as Effect.Effect<[string, string], Redis.RedisError, Redis.Redis>,
  ([seconds, micros]) => BigInt(seconds) * 1_000_000n + BigInt(micros)
)

/** Every key under the pattern carries a TTL. */
const expectTtlsUnder = (pattern: string) =>
  Effect.flatMap(expectTtls(pattern), (missing) => Effect.sync(() => expect(missing).toEqual([])))

const some = <A>(option: Option.Option<A>): A => Option.getOrThrow(option)

/** Polls every 5 ms until `check` holds; fails after 5 s. */
const until = <E, R>(what: string, check: Effect.Effect<boolean, E, R>) =>
  Effect.gen(function*() {
    const started = performance.now()
    while (!(yield* check)) {
      if (performance.now() - started > 5_000) return yield* Effect.die(new Error(`timed out waiting for ${what}`))
      yield* Effect.sleep("5 millis")
    }
  })

/** Waits out a lease: its length plus a margin. */
const pastLease = (ttlMillis: number) => Effect.sleep(Duration.millis(ttlMillis + 40))

/** What a cast does: hide a missing capability from the compiler. */
const unchecked = <A, E>(effect: Effect.Effect<A, E, unknown>) => effect as Effect.Effect<A, E, Redis.Redis>

const intentOf = (ns: string, name: string) => get(keyOf(ns, name, "intent"))

/**
 * The starvation bound (docs/semaphore.md): a waiter for n > 1 gets in at its first attempt after the
 * holders that were in when it was first refused have left: within their longest hold (20 ms in these
 * tests) and one pause of its schedule (the default's is at most 200 ms), plus the round trips, for
 * which 100 ms are allowed on a loaded machine.
 */
const BOUND = 20 + 200 + 100

forEachBackend("Semaphore", (it, backend) => {
  it.scoped("tryAcquire takes n permits (1 by default) while they are free, never waits, and release gives them back", () =>
    Effect.gen(function*() {
      const ns = fresh()
      const EXPORTS = Semaphore.make<string>(ns, 3, "30 seconds")
      const one = some(yield* EXPORTS.tryAcquire("t"))
      expect(one.permits).toBe(1)
      const two = some(yield* EXPORTS.tryAcquire("t", 2))
      expect(two.permits).toBe(2)
      // All 3 are held: not one more, of any size.
      expect(yield* EXPORTS.tryAcquire("t")).toEqual(Option.none())
      expect(yield* EXPORTS.tryAcquire("t", 3)).toEqual(Option.none())
      expect(yield* heldOf(ns, "t")).toBe(3)
      // Another name has its own 3.
      some(yield* EXPORTS.tryAcquire("u", 3))
      expect(yield* EXPORTS.release(two)).toBe(true)
      expect(yield* heldOf(ns, "t")).toBe(1)
      expect(yield* EXPORTS.tryAcquire("t", 3)).toEqual(Option.none())
      const again = some(yield* EXPORTS.tryAcquire("t", 2))
      expect(yield* EXPORTS.tryAcquire("t")).toEqual(Option.none())
      expect(yield* EXPORTS.release(one)).toBe(true)
      expect(yield* EXPORTS.release(again)).toBe(true)
      // The last release deletes the holders set; the fence key stays for a lease.
      expect(yield* suffixesOf(ns, "t")).toEqual(["fence"])
      expect(yield* EXPORTS.release(one)).toBe(false)
      expect(yield* EXPORTS.extend(one)).toBe(false)
      expect(Option.isSome(yield* EXPORTS.tryAcquire("t", 3))).toBe(true)
      yield* expectTtlsUnder(`@@wakuwaku:Semaphore:{${ns}:*`)
    }))

  it.scoped("a permit releases and extends itself, as a lock token does", () =>
    Effect.gen(function*() {
      const ns = fresh()
      const S = Semaphore.make<string>(ns, 2, "30 seconds")
      const permit = some(yield* S.tryAcquire("t", 2))
      expect(yield* S.tryAcquire("t")).toEqual(Option.none())
      expect(yield* permit.extend).toBe(true)
      expect(yield* heldOf(ns, "t")).toBe(2)
      expect(yield* permit.release).toBe(true)
      expect(yield* heldOf(ns, "t")).toBe(0)
      // Its lease had ended (it was released): nothing more to give back or extend.
      expect(yield* permit.release).toBe(false)
      expect(yield* permit.extend).toBe(false)
      expect(Option.isSome(yield* S.tryAcquire("t", 2))).toBe(true)
    }))

  it.scoped("what is stored: a holders set with one member <n>:<token> per holder, scored by its lease end, and # at minus the permits held", () =>
    Effect.gen(function*() {
      const ns = fresh()
      const TEN = Semaphore.make<string>(ns, 5, "10 seconds")
      const TWENTY = Semaphore.make<string>(ns, 5, "20 seconds")
      const holders = keyOf(ns, "t", "holders")
      const before = yield* serverMicros
      const first = some(yield* TEN.tryAcquire("t", 2))
      const after = yield* serverMicros
      expect(yield* suffixesOf(ns, "t")).toEqual(["fence", "holders"])
      expect(yield* command("TYPE", holders)).toBe("zset")
      const [total, holder] = yield* holdersOf(ns, "t")
      expect(total).toEqual(["#", -2])
      expect(holder![0]).toMatch(/^2:[A-Za-z0-9_-]{22}$/)
      // Scored by the end of its lease in server µs: the grant's time plus 10 s.
      expect(BigInt(holder![1])).toBeGreaterThanOrEqual(before + 10_000_000n)
      expect(BigInt(holder![1])).toBeLessThanOrEqual(after + 10_000_000n)
      expect(first.fence).toBeGreaterThanOrEqual(before)
      expect(first.fence).toBeLessThanOrEqual(after)
      for (const suffix of ["holders", "fence"] as const) {
        const ttl = yield* pttl(keyOf(ns, "t", suffix))
        expect(ttl, suffix).toBeGreaterThan(9_000)
        expect(ttl, suffix).toBeLessThanOrEqual(10_000)
      }
      // The set lives as long as its longest lease, and a shorter grant does not shorten it.
      const long = some(yield* TWENTY.tryAcquire("t"))
      expect(yield* pttl(holders)).toBeGreaterThan(19_000)
      const third = some(yield* TEN.tryAcquire("t", 2))
      expect(yield* pttl(holders)).toBeGreaterThan(19_000)
      expect(yield* pttl(holders)).toBeLessThanOrEqual(20_000)
      expect((yield* holdersOf(ns, "t")).map(([member, score]) => [member.split(":")[0], score > 0])).toEqual([
        ["#", false],
        ["2", true],
        ["2", true],
        ["1", true]
      ])
      expect(yield* heldOf(ns, "t")).toBe(5)
      expect(yield* TEN.release(long)).toBe(true)
      expect(yield* TEN.release(first)).toBe(true)
      expect(yield* heldOf(ns, "t")).toBe(2)
      expect(yield* TEN.release(third)).toBe(true)
      expect(yield* exists(holders)).toBe(0)
      // A number name is encoded in decimal into the same shape of keys.
      some(yield* Semaphore.make<number>(ns, 5, "10 seconds").tryAcquire(42))
      expect(yield* exists(keyOf(ns, "42", "holders"))).toBe(1)
      yield* expectTtlsUnder(`@@wakuwaku:Semaphore:{${ns}:*`)
    }))

  it.scoped("holders whose lease ended do not count: the next acquire prunes them, on the server's clock", () =>
    Effect.gen(function*() {
      const ns = fresh()
      // Long enough that a loaded machine does not end it before the next two calls.
      const SHORT = Semaphore.make<string>(ns, 3, "300 millis")
      const LONG = Semaphore.make<string>(ns, 3, "10 seconds")
      const forgotten = some(yield* SHORT.tryAcquire("t", 2))
      const live = some(yield* LONG.tryAcquire("t"))
      expect(yield* LONG.tryAcquire("t")).toEqual(Option.none())
      yield* pastLease(300)
      // The 2 of the ended lease are free again without anyone releasing them; the live one still counts.
      const taken = some(yield* LONG.tryAcquire("t", 2))
      expect(yield* heldOf(ns, "t")).toBe(3)
      expect((yield* holdersOf(ns, "t")).length).toBe(3)
      expect(yield* LONG.tryAcquire("t")).toEqual(Option.none())
      // The stale permit answers false and leaves the others as they are.
      const held = yield* holdersOf(ns, "t")
      expect(yield* SHORT.release(forgotten)).toBe(false)
      expect(yield* SHORT.extend(forgotten)).toBe(false)
      expect(yield* holdersOf(ns, "t")).toEqual(held)
      expect(yield* LONG.release(live)).toBe(true)
      expect(yield* LONG.release(taken)).toBe(true)
      expect(yield* exists(keyOf(ns, "t", "holders"))).toBe(0)
    }))

  it.scoped("a permit whose lease ended but is not pruned yet cannot be released or extended", () =>
    Effect.gen(function*() {
      const ns = fresh()
      const SHORT = Semaphore.make<string>(ns, 3, "50 millis")
      const LONG = Semaphore.make<string>(ns, 3, "10 seconds")
      const live = some(yield* LONG.tryAcquire("t"))
      const stale = some(yield* SHORT.tryAcquire("t", 2))
      yield* pastLease(50)
      // Nothing has pruned it: it is still in the set, with a lease end in the past.
      expect((yield* holdersOf(ns, "t")).length).toBe(3)
      expect(yield* SHORT.extend(stale)).toBe(false)
      expect(yield* SHORT.release(stale)).toBe(false)
      expect(yield* heldOf(ns, "t")).toBe(3)
      expect(yield* LONG.extend(live)).toBe(true)
      // The next acquire prunes it.
      some(yield* LONG.tryAcquire("t", 2))
      expect(yield* heldOf(ns, "t")).toBe(3)
    }))

  it.scoped("extend restarts the lease; the set's TTL follows it", () =>
    Effect.gen(function*() {
      const ns = fresh()
      const S = Semaphore.make<string>(ns, 2, "600 millis")
      const permit = some(yield* S.tryAcquire("t", 2))
      yield* Effect.sleep("300 millis")
      expect(yield* S.extend(permit)).toBe(true)
      expect(yield* pttl(keyOf(ns, "t", "holders"))).toBeGreaterThan(450)
      yield* Effect.sleep("400 millis")
      // 700 ms after the grant, past its first lease: still held, thanks to the extension.
      expect(yield* S.tryAcquire("t")).toEqual(Option.none())
      expect(yield* S.release(permit)).toBe(true)
    }))

  it.scoped("fences strictly increase across 500 grants of every size and across an idle expiry", () =>
    Effect.gen(function*() {
      const ns = fresh()
      const S = Semaphore.make<string>(ns, 3, "10 seconds")
      let last = 0n
      const held: Array<Semaphore.Permit> = []
      for (let i = 0; i < 500; i++) {
        const permit = some(yield* S.tryAcquire("t", 1 + (i % 2)))
        expect(permit.fence).toBeGreaterThan(last)
        last = permit.fence
        held.push(permit)
        // Keep some held, so that grants meet other holders.
        if (held.length === 2) expect(yield* S.release(held.shift()!)).toBe(true)
      }
      const now = yield* serverMicros
      expect(last).toBeLessThanOrEqual(now + 1000n)
      for (const permit of held) expect(yield* S.release(permit)).toBe(true)
      // Left to expire: every key of the name goes, and the next fence is still larger.
      const SHORT = Semaphore.make<string>(ns, 3, "50 millis")
      const before = some(yield* SHORT.tryAcquire("idle"))
      yield* pastLease(50)
      expect(yield* suffixesOf(ns, "idle")).toEqual([])
      const after = some(yield* SHORT.tryAcquire("idle"))
      expect(after.fence).toBeGreaterThan(before.fence)
      const fenceTtl = yield* pttl(keyOf(ns, "idle", "fence"))
      expect(fenceTtl).toBeGreaterThan(0)
      expect(fenceTtl).toBeLessThanOrEqual(50)
    }))

  it.scoped("one tryAcquire value run twice draws two secrets: releasing one leaves the other", () =>
    Effect.gen(function*() {
      const ns = fresh()
      const S = Semaphore.make<string>(ns, 2, "30 seconds")
      const take = S.tryAcquire("t")
      const first = some(yield* take)
      const second = some(yield* take)
      expect(yield* S.release(first)).toBe(true)
      expect(yield* S.release(first)).toBe(false)
      expect(yield* heldOf(ns, "t")).toBe(1)
      expect(yield* S.extend(second)).toBe(true)
      expect(yield* S.release(second)).toBe(true)
    }))

  it.scoped("the permit never shows its secret in toString, inspect or JSON", () =>
    Effect.gen(function*() {
      const ns = fresh()
      const permit = some(yield* Semaphore.make<string>(ns, 3, "30 seconds").tryAcquire("t", 2))
      const secret = (yield* holdersOf(ns, "t"))[1]![0].slice(2)
      expect(Buffer.from(secret, "base64url")).toHaveLength(16)
      for (const shown of [String(permit), inspect(permit, { depth: 10, showHidden: true }), JSON.stringify(permit)]) {
        expect(shown).not.toContain(secret)
      }
      expect(String(permit)).toBe(`Permit(${ns}:t, permits 2, fence ${permit.fence})`)
      expect(JSON.parse(JSON.stringify(permit))).toEqual({
        _id: "Permit",
        namespace: ns,
        name: "t",
        permits: 2,
        fence: String(permit.fence)
      })
    }))

  it.scoped("withPermits holds n permits while its effect runs and releases them at once on every exit", () =>
    Effect.gen(function*() {
      const ns = fresh()
      const S = Semaphore.make<string>(ns, 3, "10 seconds")
      const holders = keyOf(ns, "t", "holders")
      const whileHeld = Effect.flatMap(heldOf(ns, "t"), (held) => Effect.sync(() => expect(held).toBe(2)))

      expect(yield* Semaphore.withPermits(S, "t", 2)(Effect.as(whileHeld, "done"))).toBe("done")
      expect(yield* exists(holders)).toBe(0)
      // Dual: the effect first.
      expect(yield* Semaphore.withPermits(Effect.as(whileHeld, 7), S, "t", 2)).toBe(7)
      expect(yield* exists(holders)).toBe(0)

      const failed = yield* Effect.flip(
        Semaphore.withPermits(S, "t", 2)(Effect.zipRight(whileHeld, Effect.fail("boom" as const)))
      )
      expect(failed).toBe("boom")
      expect(yield* exists(holders)).toBe(0)

      const died = yield* Effect.exit(
        Semaphore.withPermits(S, "t", 2)(Effect.zipRight(whileHeld, Effect.die("defect")))
      )
      expect(Exit.isFailure(died) && Cause.isDie(died.cause)).toBe(true)
      expect(yield* exists(holders)).toBe(0)

      const started = yield* Deferred.make<void>()
      const fiber = yield* Effect.fork(
        Semaphore.withPermits(S, "t", 2)(
          Effect.zipRight(whileHeld, Effect.zipRight(Deferred.succeed(started, undefined), Effect.never))
        )
      )
      yield* Deferred.await(started)
      expect(Exit.isInterrupted(yield* Fiber.interrupt(fiber))).toBe(true)
      expect(yield* exists(holders)).toBe(0)
      // Free for the next holder at once, not after the lease.
      expect(Option.isSome(yield* S.tryAcquire("t", 3))).toBe(true)
    }))

  it.scoped("the scoped form yields the permit and releases when the scope closes", () =>
    Effect.gen(function*() {
      const ns = fresh()
      const S = Semaphore.make<string>(ns, 3, "10 seconds")
      const fence = yield* Effect.scoped(
        Effect.gen(function*() {
          const { permit } = yield* Semaphore.scoped(S, "t", 3)
          expect(permit.permits).toBe(3)
          expect(permit.name).toBe("t")
          expect(yield* S.tryAcquire("t")).toEqual(Option.none())
          return permit.fence
        })
      )
      expect(typeof fence).toBe("bigint")
      expect(yield* exists(keyOf(ns, "t", "holders"))).toBe(0)
    }))

  it.scoped("auto-extension keeps permits held across 3 × ttl", () =>
    Effect.gen(function*() {
      const ns = fresh()
      const S = Semaphore.make<string>(ns, 2, "300 millis")
      const result = yield* Semaphore.withPermits(S, "t", 2)(
        Effect.gen(function*() {
          for (let i = 0; i < 5; i++) {
            yield* Effect.sleep("200 millis")
            expect(yield* S.tryAcquire("t")).toEqual(Option.none())
          }
          return "held for 1000 ms"
        })
      )
      expect(result).toBe("held for 1000 ms")
    }))

  it.scoped("deleting the holders under a holder: LeaseLost (Expired) with its fence, and the body is interrupted", () =>
    Effect.gen(function*() {
      const ns = fresh()
      const S = Semaphore.make<string>(ns, 2, "150 millis")
      const fence = yield* Deferred.make<bigint>()
      const interrupted = yield* Deferred.make<void>()
      const fiber = yield* Effect.fork(Effect.scoped(Effect.gen(function*() {
        const { lost, permit } = yield* Semaphore.scoped(S, "t", 1)
        yield* Deferred.succeed(fence, permit.fence)
        yield* Effect.raceFirst(
          Effect.never.pipe(Effect.onInterrupt(() => Deferred.succeed(interrupted, undefined))),
          lost
        )
      })))
      const granted = yield* Deferred.await(fence)
      yield* command("DEL", keyOf(ns, "t", "holders"))
      const error = yield* Effect.flip(Fiber.join(fiber))
      expect(error).toBeInstanceOf(Semaphore.LeaseLost)
      // The neutral error; Lock.LockLost is another name of the same class.
      expect(error).toBeInstanceOf(Lock.LockLost)
      expect(error).toMatchObject({ _tag: "LeaseLost", lock: `Semaphore(${ns})`, name: "t", reason: "Expired" })
      expect((error as Lock.LeaseLost).fence).toBe(granted)
      expect(yield* Deferred.isDone(interrupted)).toBe(true)

      // The same through withPermits.
      const started = yield* Deferred.make<void>()
      const body = yield* Effect.fork(
        Semaphore.withPermits(S, "u", 2)(Effect.zipRight(Deferred.succeed(started, undefined), Effect.never))
      )
      yield* Deferred.await(started)
      yield* command("DEL", keyOf(ns, "u", "holders"))
      expect(yield* Effect.flip(Fiber.join(body))).toMatchObject({ _tag: "LeaseLost", name: "u", reason: "Expired" })
    }))

  it.scoped("renewals that could not keep the lease alive are refused: a RangeError naming both durations", () =>
    Effect.sync(() => {
      const S = Semaphore.make<string>(fresh(), 2, "100 millis")
      // Renewed every 250 ms, a 100 ms lease would run out unseen between renewals (test/LeaseEnd.test.ts).
      expect(() => Semaphore.withPermits(S, "t", 1, { renewEvery: "250 millis" })(Effect.never)).toThrow(
        new RangeError(
          "wakuwaku: renewEvery must be shorter than half the lease (100ms), so that a failed renewal can be " +
            "retried before the lease ends; got 250ms"
        )
      )
    }))

  it.scoped("acquisition policies: tryOnce fails with LeaseUnavailable; wait gives up at its deadline or gets in", () =>
    Effect.gen(function*() {
      const ns = fresh()
      const S = Semaphore.make<string>(ns, 2, "30 seconds")
      const holder = some(yield* S.tryAcquire("t", 2))
      const once = yield* Effect.flip(Semaphore.withPermits(S, "t", 1, { acquire: Lock.tryOnce })(Effect.void))
      expect(once).toBeInstanceOf(Semaphore.LeaseUnavailable)
      expect(once).toBeInstanceOf(Lock.LockUnavailable)
      expect(once).toMatchObject({ _tag: "LeaseUnavailable", lock: `Semaphore(${ns})`, name: "t" })
      expect(once.message).toBe(`Semaphore(${ns}) "t" is held by someone else`)
      const before = performance.now()
      const waited = yield* Effect.flip(
        Semaphore.withPermits(S, "t", 1, { acquire: Lock.wait({ deadline: "150 millis" }) })(Effect.void)
      )
      expect(waited._tag).toBe("LeaseUnavailable")
      expect(performance.now() - before).toBeGreaterThanOrEqual(140)
      // A single-permit waiter leaves no intent.
      expect(yield* exists(keyOf(ns, "t", "intent"))).toBe(0)
      // Released while a waiter waits: the waiter gets in.
      const waiter = yield* Effect.fork(
        Semaphore.withPermits(S, "t", 1, { acquire: Lock.wait({ deadline: "5 seconds" }) })(Effect.succeed("in"))
      )
      yield* Effect.sleep("50 millis")
      expect(yield* S.release(holder)).toBe(true)
      expect(yield* Fiber.join(waiter)).toBe("in")
    }))

  it.scoped("a waiter for n > 1 leaves an intent: newcomers get only the permits beyond its n, and it gets in", () =>
    Effect.gen(function*() {
      const ns = fresh()
      const S = Semaphore.make<string>(ns, 4, "10 seconds")
      const first = some(yield* S.tryAcquire("t", 2))
      // Waits for 3 of 4 while 2 are held.
      const big = yield* Effect.fork(
        Semaphore.withPermits(S, "t", 3, { acquire: Lock.wait({ deadline: "5 seconds" }) })(
          Effect.map(heldOf(ns, "t"), (held) => `in with ${held} held`)
        )
      )
      yield* until("the intent", Effect.map(exists(keyOf(ns, "t", "intent")), (n) => n === 1))
      expect(yield* intentOf(ns, "t")).toMatch(/^3:[A-Za-z0-9_-]{22}$/)
      const intentTtl = yield* pttl(keyOf(ns, "t", "intent"))
      expect(intentTtl).toBeGreaterThan(9_000)
      expect(intentTtl).toBeLessThanOrEqual(10_000)
      // 2 are free, but granting 1 would leave fewer than the 3 it waits for: refused, of every size.
      expect(yield* S.tryAcquire("t")).toEqual(Option.none())
      expect(yield* S.tryAcquire("t", 2)).toEqual(Option.none())
      expect(yield* Effect.flip(Semaphore.withPermits(S, "t", 1, { acquire: Lock.tryOnce })(Effect.void)))
        .toMatchObject({ _tag: "LeaseUnavailable" })
      // Another waiter for more than one leaves no intent of its own while this one stands.
      expect(
        yield* Effect.flip(
          Semaphore.withPermits(S, "t", 2, { acquire: Lock.wait({ deadline: "30 millis" }) })(Effect.void)
        )
      ).toMatchObject({ _tag: "LeaseUnavailable" })
      expect(yield* intentOf(ns, "t")).toMatch(/^3:/)
      expect(yield* S.extend(first)).toBe(true)
      expect(yield* S.release(first)).toBe(true)
      expect(yield* Fiber.join(big)).toBe("in with 3 held")
      // Done: the intent went with the grant.
      expect(yield* suffixesOf(ns, "t")).toEqual(["fence"])
    }))

  it.scoped("while an intent stands, a newcomer is granted when the permits beyond the waiter's n allow it", () =>
    Effect.gen(function*() {
      const ns = fresh()
      const S = Semaphore.make<string>(ns, 5, "10 seconds")
      const first = some(yield* S.tryAcquire("t", 3))
      const big = yield* Effect.fork(
        Semaphore.withPermits(S, "t", 3, { acquire: Lock.wait({ deadline: "5 seconds" }) })(heldOf(ns, "t"))
      )
      yield* until("the intent", Effect.map(exists(keyOf(ns, "t", "intent")), (n) => n === 1))
      // 2 free: a newcomer of 1 would leave 1 < 3; refused. Once the 3 are released, 2 may go to others.
      expect(yield* S.tryAcquire("t")).toEqual(Option.none())
      expect(yield* S.release(first)).toBe(true)
      // Whoever comes first, the waiter's 3 stay free: a newcomer of 2 fits beside them, one of 3 does not.
      const beside = yield* S.tryAcquire("t", 2)
      if (Option.isSome(beside)) {
        expect(yield* S.tryAcquire("t")).toEqual(Option.none())
        expect(yield* Fiber.join(big)).toBe(5)
        expect(yield* S.release(beside.value)).toBe(true)
      } else {
        // The waiter got in first (its intent is gone): 2 are left.
        expect(yield* Fiber.join(big)).toBe(3)
      }
    }))

  it.scoped("a waiter that gives up, or is interrupted, withdraws its intent at once", () =>
    Effect.gen(function*() {
      const ns = fresh()
      const S = Semaphore.make<string>(ns, 3, "10 seconds")
      const holder = some(yield* S.tryAcquire("t", 2))
      const started = performance.now()
      const error = yield* Effect.flip(
        Semaphore.withPermits(S, "t", 2, { acquire: Lock.wait({ deadline: "100 millis" }) })(Effect.succeed("never"))
      )
      expect(error).toMatchObject({ _tag: "LeaseUnavailable", lock: `Semaphore(${ns})`, name: "t" })
      expect(performance.now() - started).toBeGreaterThanOrEqual(90)
      // Its intent (10 s long) is withdrawn, so newcomers are not held back for a lease.
      expect(yield* exists(keyOf(ns, "t", "intent"))).toBe(0)
      const next = some(yield* S.tryAcquire("t"))

      const waiter = yield* Effect.fork(
        Semaphore.withPermits(S, "t", 2, { acquire: Lock.wait({ deadline: "5 seconds" }) })(Effect.void)
      )
      yield* until("the intent", Effect.map(exists(keyOf(ns, "t", "intent")), (n) => n === 1))
      yield* Fiber.interrupt(waiter)
      expect(yield* exists(keyOf(ns, "t", "intent"))).toBe(0)
      expect(yield* S.release(next)).toBe(true)
      expect(Option.isSome(yield* S.tryAcquire("t"))).toBe(true)
      // tryOnce and tryAcquire never leave one.
      expect(yield* S.tryAcquire("t", 2)).toEqual(Option.none())
      yield* Effect.flip(Semaphore.withPermits(S, "t", 2, { acquire: Lock.tryOnce })(Effect.void))
      expect(yield* exists(keyOf(ns, "t", "intent"))).toBe(0)
      expect(yield* S.release(holder)).toBe(true)
    }))

  it.scoped("no starvation: with 6 fibers taking 1 of 3 permits continuously, withPermits(3) gets in within the bound", () =>
    Effect.gen(function*() {
      const ns = fresh()
      // A lease well past the bound, so that only a stall of most of a second could end a holder unseen.
      const ttl = 1000
      const S = Semaphore.make<string>(ns, 3, Duration.millis(ttl))
      const takes = yield* Ref.make(0)
      // Single permits inside their body right now; the big holder's body must never see one.
      let active = 0
      const takeOne = Semaphore.withPermits(S, "t", 1, { acquire: Lock.wait({ deadline: Duration.millis(20 * ttl) }) })(
        Effect.acquireUseRelease(
          Effect.sync(() => active++),
          () => Effect.sleep("20 millis"),
          () => Effect.sync(() => active--)
        )
      ).pipe(
        Effect.zipRight(Ref.update(takes, (n) => n + 1)),
        // Held back by the waiting big acquirer for longer than its own wait: try again.
        Effect.catchTag("LeaseUnavailable", () => Effect.void)
      )
      const small = yield* Effect.forEach(Array.from({ length: 6 }), () => Effect.forkScoped(Effect.forever(takeOne)))
      const busy = (atLeast: number) =>
        Effect.flatMap(
          Ref.get(takes),
          (seen) => until("busy single permits", Effect.map(Ref.get(takes), (n) => n >= seen + atLeast))
        )

      yield* busy(40)
      const waits: Array<number> = []
      for (let round = 0; round < 5; round++) {
        yield* busy(16)
        const requested = performance.now()
        const waited = yield* Semaphore.withPermits(S, "t", 3, {
          acquire: Lock.wait({ deadline: Duration.millis(20 * ttl) })
        })(
          Effect.gen(function*() {
            const waited = performance.now() - requested
            expect(active).toBe(0)
            expect(yield* heldOf(ns, "t")).toBe(3)
            yield* Effect.sleep("20 millis")
            expect(active).toBe(0)
            return waited
          })
        )
        waits.push(waited)
      }
      for (const fiber of small) expect(Option.isNone(yield* Fiber.poll(fiber))).toBe(true)
      const sorted = [...waits].sort((a, b) => a - b)
      console.info(
        `Semaphore no-starvation on ${backend.name}: 6 fibers taking 1 of 3 permits (20 ms each), ttl ${ttl} ms: ` +
          `withPermits(3) waited ${sorted.map((ms) => ms.toFixed(0)).join(", ")} ms over 5 rounds (max ${
            sorted[4]!.toFixed(0)
          } ms; bound ${BOUND} ms)`
      )
      for (const waited of waits) expect(waited).toBeLessThan(BOUND)

      // The trade-off of never waiting: tryAcquire(3) leaves no intent, so the same stream may keep it out.
      // Measured for the docs, not asserted.
      yield* busy(16)
      let attempts = 0
      let granted = 0
      const started = performance.now()
      while (performance.now() - started < 600) {
        attempts++
        const permit = yield* S.tryAcquire("t", 3)
        if (Option.isSome(permit)) {
          granted++
          yield* S.release(permit.value)
        }
        yield* Effect.sleep("5 millis")
      }
      console.info(
        `Semaphore try-only trade-off on ${backend.name}: under the same stream, tryAcquire(3) was granted ${granted} ` +
          `of ${attempts} attempts over 600 ms`
      )
    }))

  it.scoped("bad input: n that is not a positive safe integer at most the permits, or a bad name, is InvalidInput and writes nothing", () =>
    Effect.gen(function*() {
      const ns = fresh()
      const S = Semaphore.make<number>(ns, 3, "10 seconds")
      const expectInvalid = (
        operation: string,
        argument: string,
        message: string,
        effect: Effect.Effect<unknown, unknown, Semaphore.Requirements>
      ) =>
        Effect.gen(function*() {
          const error = yield* Effect.flip(effect)
          expect(error).toBeInstanceOf(Redis.InvalidInput)
          expect(error).toMatchObject({ _tag: "InvalidInput", operation, argument, message })
        })
      const tooMany = "n must be at most the 3 permits of a name, got 4"
      yield* expectInvalid(`Semaphore(${ns}).tryAcquire`, "n", tooMany, S.tryAcquire(1, 4))
      yield* expectInvalid(`Semaphore(${ns}).withPermits`, "n", tooMany, Semaphore.withPermits(S, 1, 4)(Effect.void))
      yield* expectInvalid(`Semaphore(${ns}).withPermits`, "n", tooMany, Effect.scoped(Semaphore.scoped(S, 1, 4)))
      for (
        const [n, shown] of [[0, "0"], [-1, "-1"], [1.5, "1.5"], [Number.NaN, "NaN"], [2 ** 53, "9007199254740992"]]
      ) {
        yield* expectInvalid(
          `Semaphore(${ns}).tryAcquire`,
          "n",
          `n must be a positive safe integer, got ${shown}`,
          S.tryAcquire(1, n as number)
        )
      }
      yield* expectInvalid(
        `Semaphore(${ns}).tryAcquire`,
        "n",
        `n must be a positive safe integer, got "2"`,
        S.tryAcquire(1, "2" as unknown as number)
      )
      const badName = "a number name must be a safe integer, got NaN"
      yield* expectInvalid(`Semaphore(${ns}).tryAcquire`, "name", badName, S.tryAcquire(Number.NaN))
      yield* expectInvalid(
        `Semaphore(${ns}).withPermits`,
        "name",
        badName,
        Semaphore.withPermits(S, Number.NaN, 1)(Effect.void)
      )
      yield* expectInvalid(
        `Semaphore(${ns}).withPermits`,
        "name",
        badName,
        Effect.scoped(Semaphore.scoped(S, Number.NaN, 1))
      )
      expect(yield* keysOf(ns)).toEqual([])
    }))

  it.scoped("bad input at make: permits, ttl and namespace throw, before anything is written", () =>
    Effect.gen(function*() {
      const ns = fresh()
      for (const permits of [0, -1, 1.5, Number.NaN, Number.POSITIVE_INFINITY, 2 ** 53]) {
        expect(() => Semaphore.make(ns, permits, "1 second")).toThrow(RangeError)
      }
      expect(() => Semaphore.make(ns, 0, "1 second")).toThrow(
        `wakuwaku: Semaphore(${ns}) permits must be a positive safe integer, got 0`
      )
      expect(() => Semaphore.make(ns, "3" as unknown as number, "1 second")).toThrow(
        `wakuwaku: Semaphore(${ns}) permits must be a positive safe integer, got "3"`
      )
      expect(() => Semaphore.make(ns, 3, 0)).toThrow(`wakuwaku: Semaphore(${ns}) ttl must be longer than zero, got 0`)
      expect(() => Semaphore.make(ns, 3, Duration.infinity)).toThrow(RangeError)
      expect(() => Semaphore.make(ns, 3, 1e11 + 1)).toThrow(
        `wakuwaku: Semaphore(${ns}) ttl must be at most 10^11 ms (about 3.2 years)`
      )
      expect(() => Semaphore.make("a:b", 3, "1 second")).toThrow(TypeError)
      expect(() => Semaphore.withPermits(Semaphore.make(ns, 3, "1 second"), "t", 1, { renewEvery: 0 })(Effect.void))
        .toThrow(
          "wakuwaku: renewEvery must be longer than zero, got 0 ms"
        )
      // Under a millisecond counts as one; the largest safe integer is a valid count.
      expect(String(Semaphore.make<string>(ns, 3, "10 micros"))).toBe(`Semaphore(${ns}): 3 permits, lease 1 ms`)
      const HUGE = Semaphore.make<string>(ns, Number.MAX_SAFE_INTEGER, "10 seconds")
      const all = some(yield* HUGE.tryAcquire("t", Number.MAX_SAFE_INTEGER))
      expect(yield* heldOf(ns, "t")).toBe(Number.MAX_SAFE_INTEGER)
      expect(yield* HUGE.tryAcquire("t")).toEqual(Option.none())
      expect(yield* HUGE.release(all)).toBe(true)
      const big = some(yield* HUGE.tryAcquire("t", Number.MAX_SAFE_INTEGER - 1))
      some(yield* HUGE.tryAcquire("t"))
      expect(yield* HUGE.release(big)).toBe(true)
      expect(yield* heldOf(ns, "t")).toBe(1)
    }))

  it.scoped("something that is no permit granted here dies naming the mistake", () =>
    Effect.gen(function*() {
      const S = Semaphore.make<string>(fresh(), 3, "10 seconds")
      const forged = { namespace: "x", name: "t", permits: 1, fence: 1n } as unknown as Semaphore.Permit
      const exit = yield* Effect.exit(S.release(forged))
      expect(Exit.isFailure(exit) && Cause.isDie(exit.cause)).toBe(true)
      expect(String(Exit.isFailure(exit) ? Cause.pretty(exit.cause) : "")).toContain(
        "Semaphore.release takes a permit granted by tryAcquire, withPermits or scoped"
      )
      expect(Exit.isFailure(yield* Effect.exit(S.extend(forged)))).toBe(true)
    }))

  it.scoped("the capability is checked at run time: a tryAcquire forced through a cast under read-only dies", () =>
    Effect.gen(function*() {
      const ns = fresh()
      const S = Semaphore.make<string>(ns, 3, "10 seconds")
      const [exit, keys] = yield* Effect.promise(() =>
        Effect.runPromise(
          Effect.all([Effect.exit(unchecked(S.tryAcquire("t"))), keysOf(ns)]).pipe(Effect.provide(backend.readOnly()))
        )
      )
      expect(Exit.isFailure(exit)).toBe(true)
      if (Exit.isSuccess(exit)) return
      const message = String((Option.getOrThrow(Cause.dieOption(exit.cause)) as Error).message)
      expect(message).toContain("needs to write Semaphore")
      expect(message).toContain("Capability.Write<Semaphore>")
      expect(keys).toEqual([])
    }))

  it.scoped("every key this file wrote carries a TTL", () =>
    Effect.gen(function*() {
      expect((yield* keysMatching(`@@wakuwaku:Semaphore:{${RUN}-*`)).length).toBeGreaterThan(0)
      yield* expectTtlsUnder(`@@wakuwaku:Semaphore:{${RUN}-*`)
    }))
})
