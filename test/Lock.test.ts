import { layer } from "@effect/vitest"
import { Deferred, Duration, Effect, Exit, Fiber, Option } from "effect"
import { inspect } from "node:util"
import { expect } from "vitest"
import { Lock, Redis } from "wakuwaku"
import { RedisServer } from "wakuwaku/testing"
import { command, exists, expectTtls, forEachBackend, get, keysMatching, pttl } from "./support/backends.js"
import { freshNamespace, RedisLive } from "./support/redis.js"

const ownerKey = (ns: string, name: string) => `@@wakuwaku:Lock:{${ns}:${name}}:owner`
const fenceKey = (ns: string, name: string) => `@@wakuwaku:Lock:{${ns}:${name}}:fence`

const keysOf = (ns: string) => keysMatching(`@@wakuwaku:Lock:{${ns}:*`)

/** Every key under the namespace carries a TTL. */
const expectTtlsOf = (ns: string) =>
  Effect.flatMap(expectTtls(`@@wakuwaku:Lock:{${ns}:*`), (missing) => Effect.sync(() => expect(missing).toEqual([])))

const some = <A>(option: Option.Option<A>): A => Option.getOrThrow(option)

forEachBackend("Lock", (it) => {
  it.scoped("tryLock grants one holder per name, never waits, and release frees it", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const JOBS = Lock.make<string>(ns, "30 seconds")
      const token = some(yield* JOBS.tryLock("a"))
      expect(yield* JOBS.tryLock("a")).toEqual(Option.none())
      expect(Option.isSome(yield* JOBS.tryLock("b"))).toBe(true)
      // One string key holding the token, with the lease as its TTL.
      const held = [yield* get(ownerKey(ns, "a")), yield* pttl(ownerKey(ns, "a"))] as const
      expect(held[0]).toMatch(/^[A-Za-z0-9_-]{22}$/)
      expect(held[1]).toBeGreaterThan(29_000)
      expect(held[1]).toBeLessThanOrEqual(30_000)
      expect(yield* token.release).toBe(true)
      expect(yield* exists(ownerKey(ns, "a"))).toBe(0)
      expect(yield* token.release).toBe(false)
      expect(Option.isSome(yield* JOBS.tryLock("a"))).toBe(true)
      yield* expectTtlsOf(ns)
    }))

  it.scoped("the token never appears in toString, inspect or JSON", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const token = some(yield* Lock.make<string>(ns, "30 seconds").tryLock("a"))
      const secret = (yield* get(ownerKey(ns, "a")))!
      expect(Buffer.from(secret, "base64url")).toHaveLength(16)
      for (const shown of [String(token), inspect(token, { depth: 10, showHidden: true }), JSON.stringify(token)]) {
        expect(shown).not.toContain(secret)
      }
      expect(String(token)).toBe(`LockToken(${ns}:a, fence ${token.fence})`)
      expect(JSON.parse(JSON.stringify(token))).toEqual({
        _id: "LockToken",
        namespace: ns,
        name: "a",
        fence: String(token.fence)
      })
    }))

  it.scoped("extend restarts the lease; after the lease runs out another holder gets the lock", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const L = Lock.make<string>(ns, "600 millis")
      const first = some(yield* L.tryLock("a"))
      yield* Effect.sleep("200 millis")
      expect(yield* first.extend).toBe(true)
      expect(yield* pttl(ownerKey(ns, "a"))).toBeGreaterThan(450)
      yield* Effect.sleep("650 millis")
      const second = some(yield* L.tryLock("a"))
      // The stale token can neither release nor extend the new holder's lock.
      expect(yield* first.release).toBe(false)
      expect(yield* first.extend).toBe(false)
      expect(yield* L.tryLock("a")).toEqual(Option.none())
      expect(second.fence).toBeGreaterThan(first.fence)
      expect(yield* second.release).toBe(true)
    }))

  it.scoped("one tryLock value run twice draws two secrets: the stale first token cannot touch the second", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const get = Lock.make<string>(ns, "30 seconds").tryLock("a")
      const first = some(yield* get)
      yield* command("DEL", ownerKey(ns, "a"))
      const second = some(yield* get)
      expect(yield* first.extend).toBe(false)
      expect(yield* first.release).toBe(false)
      expect(yield* second.release).toBe(true)
    }))

  it.scoped("a lease under a millisecond counts as one", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      some(yield* Lock.make<string>(ns, "10 micros").tryLock("a"))
      expect(yield* pttl(ownerKey(ns, "a"))).toBeLessThanOrEqual(1)
    }))

  it.scoped("fences strictly increase across 1000 grants and across an idle expiry", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const L = Lock.make<string>(ns, "10 seconds")
      let last = 0n
      for (let i = 0; i < 1000; i++) {
        const token = some(yield* L.tryLock("a"))
        expect(token.fence).toBeGreaterThan(last)
        last = token.fence
        expect(yield* token.release).toBe(true)
      }
      // Left to expire (a lock value with a short lease, on the same keys): both keys go, and the next
      // fence is still larger.
      const SHORT = Lock.make<string>(ns, "100 millis")
      some(yield* SHORT.tryLock("a"))
      yield* Effect.sleep("150 millis")
      expect(yield* command("EXISTS", ownerKey(ns, "a"), fenceKey(ns, "a"))).toBe(0)
      expect((some(yield* SHORT.tryLock("a"))).fence).toBeGreaterThan(last)
      yield* expectTtlsOf(ns)
    }))

  it.scoped("withLock holds the lock while its effect runs and releases it at once afterwards", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const L = Lock.make<string>(ns, "30 seconds")
      const result = yield* Lock.withLock(L, "a")(
        Effect.gen(function*() {
          expect(yield* L.tryLock("a")).toEqual(Option.none())
          return 42
        })
      )
      expect(result).toBe(42)
      expect(yield* exists(ownerKey(ns, "a"))).toBe(0)
    }))

  it.scoped("withLock is dual: withLock(effect, lock, name) and effect.pipe(withLock(lock, name)) hold it alike", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const L = Lock.make<string>(ns, "30 seconds")
      const held = Effect.map(L.tryLock("a"), Option.isSome)
      expect(yield* Lock.withLock(held, L, "a")).toBe(false)
      expect(yield* held.pipe(Lock.withLock(L, "a", { acquire: Lock.tryOnce }))).toBe(false)
      expect(yield* exists(ownerKey(ns, "a"))).toBe(0)
    }))

  it.scoped("withLock releases on failure and on interruption, immediately, not after the TTL", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const L = Lock.make<string>(ns, "30 seconds")
      const failed = yield* Effect.flip(Lock.withLock(L, "a")(Effect.fail("boom" as const)))
      expect(failed).toBe("boom")
      expect(yield* exists(ownerKey(ns, "a"))).toBe(0)

      const started = yield* Deferred.make<void>()
      const fiber = yield* Effect.fork(
        Lock.withLock(L, "b")(Effect.zipRight(Deferred.succeed(started, undefined), Effect.never))
      )
      yield* Deferred.await(started)
      expect(yield* exists(ownerKey(ns, "b"))).toBe(1)
      const exit = yield* Fiber.interrupt(fiber)
      expect(Exit.isInterrupted(exit)).toBe(true)
      expect(yield* exists(ownerKey(ns, "b"))).toBe(0)
    }))

  it.scoped("auto-extension keeps a lock held across 3 × ttl", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const L = Lock.make<string>(ns, "300 millis")
      const result = yield* Lock.withLock(L, "a")(
        Effect.gen(function*() {
          for (let i = 0; i < 5; i++) {
            yield* Effect.sleep("200 millis")
            expect(yield* L.tryLock("a")).toEqual(Option.none())
          }
          return "held for 1000 ms"
        })
      )
      expect(result).toBe("held for 1000 ms")
    }))

  it.scoped("deleting the key under a holder: LockLost, and the body is interrupted", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const L = Lock.make<string>(ns, "150 millis")
      const started = yield* Deferred.make<void>()
      const interrupted = yield* Deferred.make<void>()
      const fiber = yield* Effect.fork(
        Lock.withLock(L, "a")(
          Effect.zipRight(Deferred.succeed(started, undefined), Effect.never).pipe(
            Effect.onInterrupt(() => Deferred.succeed(interrupted, undefined))
          )
        )
      )
      yield* Deferred.await(started)
      yield* command("DEL", ownerKey(ns, "a"))
      const error = yield* Effect.flip(Fiber.join(fiber))
      expect(error).toBeInstanceOf(Lock.LockLost)
      expect(error).toMatchObject({ _tag: "LeaseLost", lock: `Lock(${ns})`, name: "a", reason: "Expired" })
      expect(yield* Deferred.isDone(interrupted)).toBe(true)
    }))

  it.scoped("renewals that could not keep the lease alive are refused: a RangeError naming both durations", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const L = Lock.make<string>(ns, "100 millis")
      // Renewed every 250 ms, a 100 ms lease would run out unseen between renewals (test/LeaseEnd.test.ts).
      expect(() => Lock.withLock(L, "a", { renewEvery: "250 millis" })(Effect.never)).toThrow(
        new RangeError(
          "wakuwaku: renewEvery must be shorter than half the lease (100ms), so that a failed renewal can be " +
            "retried before the lease ends; got 250ms"
        )
      )
      expect(yield* keysOf(ns)).toEqual([])
    }))

  it.scoped("acquisition policies: tryOnce fails with LockUnavailable; wait gives up at its deadline or gets in", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const L = Lock.make<string>(ns, "30 seconds")
      const holder = some(yield* L.tryLock("a"))
      const once = yield* Effect.flip(Lock.withLock(L, "a", { acquire: Lock.tryOnce })(Effect.void))
      expect(once).toBeInstanceOf(Lock.LockUnavailable)
      expect(once).toMatchObject({ _tag: "LeaseUnavailable", lock: `Lock(${ns})`, name: "a" })
      const before = performance.now()
      const waited = yield* Effect.flip(
        Lock.withLock(L, "a", { acquire: Lock.wait({ deadline: "150 millis" }) })(Effect.void)
      )
      expect(waited._tag).toBe("LeaseUnavailable")
      expect(performance.now() - before).toBeGreaterThanOrEqual(140)
      // Released while a waiter waits: the waiter gets in.
      const waiter = yield* Effect.fork(
        Lock.withLock(L, "a", { acquire: Lock.wait({ deadline: "5 seconds" }) })(Effect.succeed("in"))
      )
      yield* Effect.sleep("50 millis")
      expect(yield* holder.release).toBe(true)
      expect(yield* Fiber.join(waiter)).toBe("in")
    }))

  it.scoped("the scoped form yields the token and releases when the scope closes", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const L = Lock.make<string>(ns, "30 seconds")
      const fence = yield* Effect.scoped(
        Effect.gen(function*() {
          const { token } = yield* Lock.scoped(L, "a")
          expect(yield* exists(ownerKey(ns, "a"))).toBe(1)
          return token.fence
        })
      )
      expect(typeof fence).toBe("bigint")
      expect(yield* exists(ownerKey(ns, "a"))).toBe(0)
    }))

  it.scoped("bad input: a name that cannot be encoded is InvalidInput and writes nothing; a bad ttl throws", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const L = Lock.make<number>(ns, "1 second")
      expect(yield* Effect.flip(L.tryLock(Number.NaN))).toMatchObject({ _tag: "InvalidInput", argument: "name" })
      expect(yield* Effect.flip(Lock.withLock(L, 1.5)(Effect.void))).toBeInstanceOf(Redis.InvalidInput)
      expect(yield* keysOf(ns)).toEqual([])
      const ttls: ReadonlyArray<Duration.DurationInput> = [0, -5, Duration.zero, "0 seconds"]
      for (const ttl of ttls) expect(() => Lock.make(ns, ttl)).toThrow(/ttl must be longer than zero/)
      expect(() => Lock.make(ns, Duration.infinity)).toThrow(/ttl must be finite/)
      expect(() => Lock.make("a:b", "1 second")).toThrow(/namespace must be a non-empty string/)
    }))
})

// A second, real redis-server stopped with SIGSTOP: a fault only a server process can have.
layer(RedisLive, { excludeTestServices: true })("Lock on Redis only", (it) => {
  it.scoped("a Redis that stops answering: LockLost (Unconfirmed) by the end of the lease, not after the command timeout", () =>
    Effect.gen(function*() {
      const server = yield* RedisServer.make()
      const L = Lock.make<string>(freshNamespace(), "300 millis")
      const started = yield* Deferred.make<void>()
      const fiber = yield* Effect.fork(
        Lock.withLock(L, "a")(Effect.zipRight(Deferred.succeed(started, undefined), Effect.never)).pipe(
          Effect.provide(Redis.layer({ url: server.url, commandTimeout: "10 seconds", quitTimeout: "10 millis" }))
        )
      )
      yield* Deferred.await(started)
      process.kill(server.pid, "SIGSTOP")
      const stopped = performance.now()
      const error = yield* Effect.flip(Fiber.join(fiber))
      const waited = performance.now() - stopped
      process.kill(server.pid, "SIGCONT")
      expect(error).toMatchObject({ _tag: "LeaseLost", reason: "Unconfirmed" })
      // At most one lease after the last confirmed renewal, which was at most a third of a lease ago;
      // the release at the end waits at most one lease more for the silent server.
      expect(waited).toBeLessThan(300 + 300 + 300)
    }))
})
