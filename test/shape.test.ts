/**
 * Each operation's module function runs the method, data-first and data-last (the type tests are in
 * shape.test-d.ts). On the embedded backend: the dispatch between the two forms is what is tested.
 */
import { Chunk, Effect, Option, Schema, Stream } from "effect"
import { describe, expect, it } from "vitest"
import { FixedWindow, Lock, Pipe, Rate, Redis, RwLock, Semaphore, TokenBucket } from "wakuwaku"

const run = <A, E>(effect: Effect.Effect<A, E, Redis.ReadWrite>) =>
  Effect.runPromise(effect.pipe(Effect.provide(Redis.layerMemory())))

describe("module functions beside the methods", () => {
  it("TokenBucket: acquire, refund, peek, reset, reserve and cancel, both ways", () =>
    run(Effect.gen(function*() {
      const bucket = TokenBucket.make<string>("shape-bucket", 10, Rate.make(1, "1 hour"))
      expect((yield* TokenBucket.acquire(bucket, "a", 4))._tag).toBe("Allowed")
      expect((yield* TokenBucket.acquire("a", 4)(bucket))._tag).toBe("Allowed")
      expect(yield* TokenBucket.peek(bucket, "a")).toBe(2)
      expect(yield* TokenBucket.refund("a", 1)(bucket)).toBe(3)
      expect(yield* TokenBucket.peek("a")(bucket)).toBe(3)
      const reservation = yield* TokenBucket.reserve(bucket, "a", 5, "3 hours")
      expect(reservation._tag).toBe("Granted")
      if (reservation._tag === "Granted") expect(yield* TokenBucket.cancel("a", reservation)(bucket)).toBe(true)
      expect(yield* TokenBucket.reset(bucket, "a")).toBe(true)
      expect(yield* TokenBucket.reset("a")(bucket)).toBe(false)
    })))

  it("FixedWindow: acquire, peek and reset, both ways", () =>
    run(Effect.gen(function*() {
      const window = FixedWindow.make<string>("shape-window", 10, "1 minute")
      expect((yield* FixedWindow.acquire(window, "a", 3))._tag).toBe("Allowed")
      expect((yield* FixedWindow.acquire("a", 3)(window))._tag).toBe("Allowed")
      expect(yield* FixedWindow.peek(window, "a")).toBe(4)
      expect(yield* FixedWindow.peek("a")(window)).toBe(4)
      expect(yield* FixedWindow.reset(window, "a")).toBe(true)
      expect(yield* FixedWindow.reset("a")(window)).toBe(false)
    })))

  it("Lock, RwLock and Semaphore: their tries, both ways; Semaphore's release and extend", () =>
    run(Effect.gen(function*() {
      const lock = Lock.make<string>("shape-lock", "10 seconds")
      expect(Option.isSome(yield* Lock.tryLock(lock, "a"))).toBe(true)
      expect(Option.isNone(yield* Lock.tryLock("a")(lock))).toBe(true)
      const rw = RwLock.make<string>("shape-rw", "10 seconds")
      expect(Option.isSome(yield* RwLock.tryRead(rw, "a"))).toBe(true)
      expect(Option.isSome(yield* RwLock.tryRead("a")(rw))).toBe(true)
      expect(Option.isNone(yield* RwLock.tryWrite(rw, "a"))).toBe(true)
      expect(Option.isSome(yield* RwLock.tryWrite("b")(rw))).toBe(true)
      const sem = Semaphore.make<string>("shape-sem", 3, "10 seconds")
      const two = Option.getOrThrow(yield* Semaphore.tryAcquire(sem, "a", 2))
      const one = Option.getOrThrow(yield* Semaphore.tryAcquire("a")(sem))
      expect([two.permits, one.permits]).toEqual([2, 1])
      expect(Option.isNone(yield* Semaphore.tryAcquire(sem, "a"))).toBe(true)
      expect(yield* Semaphore.extend(sem, two)).toBe(true)
      expect(yield* Semaphore.extend(one)(sem)).toBe(true)
      expect(yield* Semaphore.release(sem, two)).toBe(true)
      expect(yield* Semaphore.release(two)(sem)).toBe(false)
    })))

  it("Pipe: send, close and receive, both ways", () =>
    run(Effect.gen(function*() {
      const pipe = Pipe.make<string, number>("shape-pipe", Schema.Number, "10 seconds")
      yield* Pipe.send(pipe, "a", 1)
      yield* Pipe.send("a", 2)(pipe)
      yield* Pipe.close("a")(pipe)
      expect(Chunk.toArray(yield* Stream.runCollect(Pipe.receive(pipe, "a")))).toEqual([1, 2])
      yield* Pipe.send("b", 3)(pipe)
      yield* Pipe.close(pipe, "b")
      expect(Chunk.toArray(yield* Stream.runCollect(Pipe.receive("b")(pipe)))).toEqual([3])
    })))
})
