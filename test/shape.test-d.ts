/**
 * One shape for every structure's API: each operation of a structure is a method and a module function,
 * and the module function, data-first or data-last, takes the method's arguments and gives its result.
 */
import { Schema } from "effect"
import { describe, expectTypeOf, it } from "vitest"
import { Capability, FixedWindow, Lock, Pipe, Rate, Redis, RwLock, Semaphore, TokenBucket } from "wakuwaku"
import * as RateLimiterStore from "wakuwaku/RateLimiterStore"

const bucket = TokenBucket.make<string>("shape-bucket", 10, Rate.perSecond(10))
const window = FixedWindow.make<string>("shape-window", 10, "1 second")
const lock = Lock.make<string>("shape-lock", "10 seconds")
const rw = RwLock.make<string>("shape-rw", "10 seconds")
const sem = Semaphore.make<string>("shape-sem", 3, "10 seconds")
const pipe = Pipe.make<string, number>("shape-pipe", Schema.Number, "10 seconds")
declare const granted: TokenBucket.Granted
declare const permit: Semaphore.Permit

type TB = TokenBucket.TokenBucket<string>
type FW = FixedWindow.FixedWindow<string>
type LK = Lock.Lock<string>
type RW = RwLock.RwLock<string>
type SM = Semaphore.Semaphore<string>
type PP = Pipe.Pipe<string, number>

/** The data-first form (the last overload) of a module function: the structure, then the method's arguments. */
type DataFirst<S, K extends keyof S> = S[K] extends (...args: infer P) => infer R ? (self: S, ...args: P) => R
  : never

describe("every operation is a method and a module function with the method's signature", () => {
  it("TokenBucket", () => {
    expectTypeOf(TokenBucket.acquire<string>).toMatchTypeOf<DataFirst<TB, "acquire">>()
    expectTypeOf<Parameters<typeof TokenBucket.acquire<string>>>().toEqualTypeOf<Parameters<DataFirst<TB, "acquire">>>()
    expectTypeOf(TokenBucket.acquire(bucket, "a", 1)).toEqualTypeOf(bucket.acquire("a", 1))
    expectTypeOf(TokenBucket.acquire("a", 1)(bucket)).toEqualTypeOf(bucket.acquire("a", 1))

    expectTypeOf<Parameters<typeof TokenBucket.reserve<string>>>().toEqualTypeOf<Parameters<DataFirst<TB, "reserve">>>()
    expectTypeOf(TokenBucket.reserve(bucket, "a", 1, "1 second")).toEqualTypeOf(bucket.reserve("a", 1, "1 second"))
    expectTypeOf(TokenBucket.reserve("a", 1, "1 second")(bucket)).toEqualTypeOf(bucket.reserve("a", 1, "1 second"))

    expectTypeOf<Parameters<typeof TokenBucket.cancel<string>>>().toEqualTypeOf<Parameters<DataFirst<TB, "cancel">>>()
    expectTypeOf(TokenBucket.cancel(bucket, "a", granted)).toEqualTypeOf(bucket.cancel("a", granted))
    expectTypeOf(TokenBucket.cancel("a", granted)(bucket)).toEqualTypeOf(bucket.cancel("a", granted))

    expectTypeOf<Parameters<typeof TokenBucket.refund<string>>>().toEqualTypeOf<Parameters<DataFirst<TB, "refund">>>()
    expectTypeOf(TokenBucket.refund(bucket, "a", 1)).toEqualTypeOf(bucket.refund("a", 1))
    expectTypeOf(TokenBucket.refund("a", 1)(bucket)).toEqualTypeOf(bucket.refund("a", 1))

    expectTypeOf<Parameters<typeof TokenBucket.reset<string>>>().toEqualTypeOf<Parameters<DataFirst<TB, "reset">>>()
    expectTypeOf(TokenBucket.reset(bucket, "a")).toEqualTypeOf(bucket.reset("a"))
    expectTypeOf(TokenBucket.reset("a")(bucket)).toEqualTypeOf(bucket.reset("a"))

    expectTypeOf<Parameters<typeof TokenBucket.peek<string>>>().toEqualTypeOf<Parameters<DataFirst<TB, "peek">>>()
    expectTypeOf(TokenBucket.peek(bucket, "a")).toEqualTypeOf(bucket.peek("a"))
    expectTypeOf(TokenBucket.peek("a")(bucket)).toEqualTypeOf(bucket.peek("a"))
  })

  it("FixedWindow", () => {
    expectTypeOf<Parameters<typeof FixedWindow.acquire<string>>>().toEqualTypeOf<Parameters<DataFirst<FW, "acquire">>>()
    expectTypeOf(FixedWindow.acquire(window, "a", 1)).toEqualTypeOf(window.acquire("a", 1))
    expectTypeOf(FixedWindow.acquire("a", 1)(window)).toEqualTypeOf(window.acquire("a", 1))

    expectTypeOf<Parameters<typeof FixedWindow.reset<string>>>().toEqualTypeOf<Parameters<DataFirst<FW, "reset">>>()
    expectTypeOf(FixedWindow.reset(window, "a")).toEqualTypeOf(window.reset("a"))
    expectTypeOf(FixedWindow.reset("a")(window)).toEqualTypeOf(window.reset("a"))

    expectTypeOf<Parameters<typeof FixedWindow.peek<string>>>().toEqualTypeOf<Parameters<DataFirst<FW, "peek">>>()
    expectTypeOf(FixedWindow.peek(window, "a")).toEqualTypeOf(window.peek("a"))
    expectTypeOf(FixedWindow.peek("a")(window)).toEqualTypeOf(window.peek("a"))
  })

  it("Lock", () => {
    expectTypeOf<Parameters<typeof Lock.tryLock<string>>>().toEqualTypeOf<Parameters<DataFirst<LK, "tryLock">>>()
    expectTypeOf(Lock.tryLock(lock, "a")).toEqualTypeOf(lock.tryLock("a"))
    expectTypeOf(Lock.tryLock("a")(lock)).toEqualTypeOf(lock.tryLock("a"))
  })

  it("RwLock", () => {
    expectTypeOf<Parameters<typeof RwLock.tryRead<string>>>().toEqualTypeOf<Parameters<DataFirst<RW, "tryRead">>>()
    expectTypeOf(RwLock.tryRead(rw, "a")).toEqualTypeOf(rw.tryRead("a"))
    expectTypeOf(RwLock.tryRead("a")(rw)).toEqualTypeOf(rw.tryRead("a"))

    expectTypeOf<Parameters<typeof RwLock.tryWrite<string>>>().toEqualTypeOf<Parameters<DataFirst<RW, "tryWrite">>>()
    expectTypeOf(RwLock.tryWrite(rw, "a")).toEqualTypeOf(rw.tryWrite("a"))
    expectTypeOf(RwLock.tryWrite("a")(rw)).toEqualTypeOf(rw.tryWrite("a"))
  })

  it("Semaphore", () => {
    expectTypeOf<Parameters<typeof Semaphore.tryAcquire<string>>>().toEqualTypeOf<
      Parameters<DataFirst<SM, "tryAcquire">>
    >()
    expectTypeOf(Semaphore.tryAcquire(sem, "a")).toEqualTypeOf(sem.tryAcquire("a"))
    expectTypeOf(Semaphore.tryAcquire(sem, "a", 2)).toEqualTypeOf(sem.tryAcquire("a", 2))
    expectTypeOf(Semaphore.tryAcquire("a", 2)(sem)).toEqualTypeOf(sem.tryAcquire("a", 2))

    expectTypeOf<Parameters<typeof Semaphore.release<string>>>().toEqualTypeOf<Parameters<DataFirst<SM, "release">>>()
    expectTypeOf(Semaphore.release(sem, permit)).toEqualTypeOf(sem.release(permit))
    expectTypeOf(Semaphore.release(permit)(sem)).toEqualTypeOf(sem.release(permit))

    expectTypeOf<Parameters<typeof Semaphore.extend<string>>>().toEqualTypeOf<Parameters<DataFirst<SM, "extend">>>()
    expectTypeOf(Semaphore.extend(sem, permit)).toEqualTypeOf(sem.extend(permit))
    expectTypeOf(Semaphore.extend(permit)(sem)).toEqualTypeOf(sem.extend(permit))
  })

  it("Pipe", () => {
    expectTypeOf<Parameters<typeof Pipe.send<string, number>>>().toEqualTypeOf<Parameters<DataFirst<PP, "send">>>()
    expectTypeOf(Pipe.send(pipe, "a", 1)).toEqualTypeOf(pipe.send("a", 1))
    expectTypeOf(Pipe.send("a", 1)(pipe)).toEqualTypeOf(pipe.send("a", 1))

    expectTypeOf<Parameters<typeof Pipe.close<string, number>>>().toEqualTypeOf<Parameters<DataFirst<PP, "close">>>()
    expectTypeOf(Pipe.close(pipe, "a")).toEqualTypeOf(pipe.close("a"))
    expectTypeOf(Pipe.close("a")(pipe)).toEqualTypeOf(pipe.close("a"))

    expectTypeOf<Parameters<typeof Pipe.receive<string, number>>>().toEqualTypeOf<
      Parameters<DataFirst<PP, "receive">>
    >()
    expectTypeOf(Pipe.receive(pipe, "a")).toEqualTypeOf(pipe.receive("a"))
    expectTypeOf(Pipe.receive(pipe, "a", { idle: "1 second" } as Pipe.ReceiveOptions)).toEqualTypeOf(pipe.receive("a"))
    expectTypeOf(Pipe.receive("a")(pipe)).toEqualTypeOf(pipe.receive("a"))
  })
})

/** The one shape of a structure's `Requirements`: `Redis` and the right to write (the default) or read its entity. */
type Needs<Kind extends string, Access extends "read" | "write"> =
  | Redis.Redis
  | (Access extends "write" ? Capability.Write<Capability.Entity<Kind>> : Capability.Read<Capability.Entity<Kind>>)

describe("Requirements is generic alike on every structure", () => {
  it("Requirements<Access>, \"write\" by default", () => {
    expectTypeOf<TokenBucket.Requirements>().toEqualTypeOf<Needs<"TokenBucket", "write">>()
    expectTypeOf<TokenBucket.Requirements<"read">>().toEqualTypeOf<Needs<"TokenBucket", "read">>()
    expectTypeOf<FixedWindow.Requirements>().toEqualTypeOf<Needs<"FixedWindow", "write">>()
    expectTypeOf<FixedWindow.Requirements<"read">>().toEqualTypeOf<Needs<"FixedWindow", "read">>()
    expectTypeOf<Lock.Requirements>().toEqualTypeOf<Needs<"Lock", "write">>()
    expectTypeOf<Lock.Requirements<"read">>().toEqualTypeOf<Needs<"Lock", "read">>()
    expectTypeOf<RwLock.Requirements>().toEqualTypeOf<Needs<"RwLock", "write">>()
    expectTypeOf<RwLock.Requirements<"read">>().toEqualTypeOf<Needs<"RwLock", "read">>()
    expectTypeOf<Semaphore.Requirements>().toEqualTypeOf<Needs<"Semaphore", "write">>()
    expectTypeOf<Semaphore.Requirements<"read">>().toEqualTypeOf<Needs<"Semaphore", "read">>()
    expectTypeOf<Pipe.Requirements>().toEqualTypeOf<Needs<"Pipe", "write">>()
    expectTypeOf<Pipe.Requirements<"read">>().toEqualTypeOf<Needs<"Pipe", "read">>()
    expectTypeOf<RateLimiterStore.Requirements>().toEqualTypeOf<Needs<"RateLimiterStore", "write">>()
    expectTypeOf<RateLimiterStore.Requirements<"read">>().toEqualTypeOf<Needs<"RateLimiterStore", "read">>()
  })

  it("each entity is the one its Requirements name", () => {
    expectTypeOf<TokenBucket.Entity>().toEqualTypeOf<Capability.Entity<"TokenBucket">>()
    expectTypeOf<FixedWindow.Entity>().toEqualTypeOf<Capability.Entity<"FixedWindow">>()
    expectTypeOf<Lock.Entity>().toEqualTypeOf<Capability.Entity<"Lock">>()
    expectTypeOf<RwLock.Entity>().toEqualTypeOf<Capability.Entity<"RwLock">>()
    expectTypeOf<Semaphore.Entity>().toEqualTypeOf<Capability.Entity<"Semaphore">>()
    expectTypeOf<Pipe.Entity>().toEqualTypeOf<Capability.Entity<"Pipe">>()
    expectTypeOf<RateLimiterStore.Entity>().toEqualTypeOf<Capability.Entity<"RateLimiterStore">>()
  })
})
