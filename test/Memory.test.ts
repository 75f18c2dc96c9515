/**
 * What only the memory backend has: time on Effect's Clock (so TestClock drives it), the store and its
 * sweep, layers sharing a store, and its own failures. Each test builds its layer inside the test, so
 * the layer sees the TestClock.
 */
import { describe, expect, it } from "@effect/vitest"
import { Chunk, Duration, Effect, Exit, Fiber, Layer, Option, Schema, Stream, TestClock } from "effect"
import { Lock, Pipe, Rate, Redis, Script, TokenBucket } from "wakuwaku"
import { levelOf, shapeOf, store as storeLevel } from "../src/internal/bucket.js"
import { Keys, type Written } from "../src/internal/memory/keys.js"
import { Db } from "../src/internal/memory/keyspace.js"
import { command, exists, get, keysMatching, pttl } from "./support/backends.js"

const { Allowed, Denied } = TokenBucket.Admission

const Msg = Schema.Struct({ n: Schema.Number })
type Msg = typeof Msg.Type

const range = (from: number, to: number) => Array.from({ length: to - from }, (_, i) => from + i)

/** How many TestClock sleeps end at `at` (ms). */
const sleepsAt = (at: number) => Effect.map(TestClock.sleeps(), Chunk.reduce(0, (n, end) => (end === at ? n + 1 : n)))

/** Yields until more than `before` TestClock sleeps end at `at`: a fiber has started waiting until then. */
const sleepingUntil = (at: number, before = 0) =>
  Effect.gen(function*() {
    while ((yield* sleepsAt(at)) <= before) yield* Effect.yieldNow()
  })

/**
 * Runs `effect` while every Map iterator counts the entries it hands out (the keys a sweep or an eviction
 * steps on, whatever Map and iterator the store uses), and returns that count.
 */
const mapSteps = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.acquireUseRelease(
    Effect.sync(() => {
      const prototype = Object.getPrototypeOf(new Map().entries()) as { next: () => IteratorResult<unknown> }
      const original = prototype.next
      const counted = { steps: 0 }
      prototype.next = function(this: unknown) {
        const result = original.call(this)
        if (result.done !== true) counted.steps++
        return result
      }
      return { prototype, original, counted }
    }),
    ({ counted }) => Effect.as(effect, counted),
    ({ original, prototype }) => Effect.sync(() => void (prototype.next = original))
  ).pipe(Effect.map((counted) => counted.steps))

describe("Memory backend", () => {
  it.effect("TestClock: a drained bucket of 20, 1 per 3 s, gets exactly one more token after 3 s", () =>
    Effect.gen(function*() {
      const LOGINS = TokenBucket.make<string>("login", 20, Rate.make(1, "3 seconds"))
      const key = "@@wakuwaku:TokenBucket:login:203.0.113.7"
      for (let i = 19; i >= 0; i--) expect(yield* LOGINS.acquire("203.0.113.7", 1)).toEqual(Allowed({ remaining: i }))
      // No time passed: the wait is exactly one period, and the bucket is full again in 60 s.
      expect(yield* LOGINS.acquire("203.0.113.7", 1)).toEqual(
        Denied({ retryAfter: Option.some(Duration.millis(3000)) })
      )
      expect(yield* pttl(key)).toBe(60_000)
      yield* TestClock.adjust("2999 millis")
      expect(yield* LOGINS.acquire("203.0.113.7", 1)).toEqual(Denied({ retryAfter: Option.some(Duration.millis(1)) }))
      yield* TestClock.adjust("1 millis")
      expect(yield* LOGINS.acquire("203.0.113.7", 1)).toEqual(Allowed({ remaining: 0 }))
      expect(yield* LOGINS.acquire("203.0.113.7", 1)).toEqual(
        Denied({ retryAfter: Option.some(Duration.millis(3000)) })
      )
      // Left alone for 60 s it is full; the key expires 1 ms later (alive while now <= its expiry).
      yield* TestClock.adjust("60 seconds")
      expect(yield* LOGINS.peek("203.0.113.7")).toBe(20)
      expect(yield* exists(key)).toBe(1)
      yield* TestClock.adjust("1 millis")
      expect(yield* exists(key)).toBe(0)
      expect(yield* LOGINS.acquire("203.0.113.7", 20)).toEqual(Allowed({ remaining: 0 }))
    }).pipe(Effect.provide(Redis.layerMemory())))

  it.effect("TestClock: a 10 s lease holds through 10 s and is free 1 ms later; the fence strictly increases", () =>
    Effect.gen(function*() {
      const JOBS = Lock.make<string>("job", "10 seconds")
      const first = Option.getOrThrow(yield* JOBS.tryLock("a"))
      // The fence is the time in µs (TestClock starts at 0).
      expect(first.fence).toBe(0n)
      yield* TestClock.adjust("10 seconds")
      expect(yield* JOBS.tryLock("a")).toEqual(Option.none())
      yield* TestClock.adjust("1 millis")
      const second = Option.getOrThrow(yield* JOBS.tryLock("a"))
      expect(second.fence).toBe(10_001_000n)
      // The first holder's token no longer holds anything.
      expect(yield* first.release).toBe(false)
      expect(yield* first.extend).toBe(false)
      // Granted again at the same instant: the last fence plus one.
      expect(yield* second.release).toBe(true)
      const third = Option.getOrThrow(yield* JOBS.tryLock("a"))
      expect(third.fence).toBe(10_001_001n)
    }).pipe(Effect.provide(Redis.layerMemory())))

  it.effect("expiry: an expired key is invisible at once, still counted until the sweep, which leaves the store empty", () => {
    const store = Redis.makeMemoryStore()
    return Effect.gen(function*() {
      const BUCKET = TokenBucket.make<string>("e", 5, Rate.make(1, "1 second"))
      const LOCK = Lock.make<string>("e", "5 seconds")
      const PIPE = Pipe.make<string, Msg>("e", Msg, "5 seconds")
      const bucket = "@@wakuwaku:TokenBucket:e:a"
      const owner = "@@wakuwaku:Lock:{e:a}:owner"
      const fence = "@@wakuwaku:Lock:{e:a}:fence"
      const messages = "@@wakuwaku:Pipe:{e:a}:messages"
      expect(yield* BUCKET.acquire("a", 5)).toEqual(Allowed({ remaining: 0 }))
      expect(Option.isSome(yield* LOCK.tryLock("a"))).toBe(true)
      yield* PIPE.send("a", { n: 1 })
      // Every key expires at 5 s.
      expect((yield* keysMatching("*")).sort()).toEqual([fence, owner, messages, bucket].sort())
      for (const key of [bucket, owner, fence, messages]) expect(yield* pttl(key)).toBe(5000)
      expect(store.size).toBe(4)
      expect(yield* command("DBSIZE")).toBe(4)
      // At 5 s they are alive (now <= expiry); the sweeps of 1..5 s kept them.
      yield* TestClock.adjust("5 seconds")
      expect(yield* command("EXISTS", bucket, owner, fence, messages)).toBe(4)
      expect(store.size).toBe(4)
      // 1 ms later they are gone for every read, while the store still holds them until the sweep at 6 s.
      yield* TestClock.adjust("1 millis")
      expect(store.size).toBe(4)
      expect(yield* command("DBSIZE")).toBe(4)
      expect(yield* command("EXISTS", bucket, owner, messages)).toBe(0)
      expect(yield* BUCKET.peek("a")).toBe(5)
      expect(yield* command("LRANGE", messages, 0, -1)).toEqual([])
      // A read removes the expired key it finds, as Redis does; the fence key, never read, waits for the sweep.
      expect(store.size).toBe(1)
      expect(yield* command("DBSIZE")).toBe(1)
      yield* TestClock.adjust("999 millis")
      expect(store.size).toBe(0)
      expect(yield* command("DBSIZE")).toBe(0)
      expect(yield* get(fence)).toBeNull()
    }).pipe(Effect.provide(Redis.layerMemory({ store })))
  })

  it.effect("TestClock: a receiver that gets nothing for one TTL fails with PipeAbandoned then, not before, and leaves nothing", () => {
    const store = Redis.makeMemoryStore()
    return Effect.gen(function*() {
      const P = Pipe.make<string, Msg>("quiet", Msg, "10 seconds")
      yield* P.send("p", { n: 1 })
      const got: Array<number> = []
      const receiver = yield* Effect.fork(
        Effect.flip(P.receive("p").pipe(Stream.runForEach((m) => Effect.sync(() => got.push(m.n)))))
      )
      // It got the message and blocks in BLMOVE, whose timeout ends at 10 s.
      yield* sleepingUntil(10_000)
      expect(got).toEqual([1])
      yield* TestClock.adjust("9999 millis")
      expect(yield* Fiber.poll(receiver)).toEqual(Option.none())
      yield* TestClock.adjust("1 millis")
      const error = yield* Fiber.join(receiver)
      expect(error).toBeInstanceOf(Pipe.PipeAbandoned)
      expect(error).toMatchObject({ _tag: "PipeAbandoned", pipe: "Pipe(quiet)", name: "p" })
      expect(Duration.toMillis((error as Pipe.PipeAbandoned).ttl)).toBe(10_000)
      // Its lease and in-flight list went with it; the message list was drained.
      expect(store.size).toBe(0)
    }).pipe(Effect.provide(Redis.layerMemory({ store })))
  })

  it.effect("blocking receive: 200 cycles of receive, interrupt, send lose nothing and repeat nothing", () => {
    const store = Redis.makeMemoryStore()
    return Effect.gen(function*() {
      const P = Pipe.make<string, Msg>("cycles", Msg, "10 seconds")
      const got: Array<number> = []
      const receive = P.receive("p").pipe(Stream.runForEach((m) => Effect.sync(() => got.push(m.n))))
      for (let i = 0; i < 200; i++) {
        const blocked = yield* sleepsAt(10_000)
        const fiber = yield* Effect.fork(receive)
        switch (i % 4) {
          case 0: // before it opens
            yield* Fiber.interrupt(fiber)
            yield* P.send("p", { n: i })
            break
          case 1: // while it opens
            yield* Effect.yieldNow()
            yield* Fiber.interrupt(fiber)
            yield* P.send("p", { n: i })
            break
          case 2: // blocked in BLMOVE, nothing on its way
            yield* sleepingUntil(10_000, blocked)
            yield* Fiber.interrupt(fiber)
            yield* P.send("p", { n: i })
            break
          case 3: // blocked in BLMOVE, woken by the message
            yield* sleepingUntil(10_000, blocked)
            yield* P.send("p", { n: i })
            yield* Fiber.interrupt(fiber)
        }
        expect(Exit.isInterrupted(yield* Fiber.await(fiber))).toBe(true)
      }
      const during = got.length
      yield* P.close("p")
      yield* receive
      expect(got).toEqual(range(0, 200))
      // Receivers took messages between interruptions, and the last one got the rest.
      expect(during).toBeGreaterThan(0)
      expect(during).toBeLessThan(200)
      expect(yield* keysMatching("*")).toEqual(["@@wakuwaku:Pipe:{cycles:p}:closed"])
      expect(store.size).toBe(1)
    }).pipe(Effect.provide(Redis.layerMemory({ store })))
  })

  it.effect("BLMOVE: a push just after the wait starts wakes it at once, whatever the interleaving", () =>
    Effect.gen(function*() {
      const redis = yield* Redis.Redis
      for (let yields = 0; yields < 6; yields++) {
        const source = `source-${yields}`
        const dedicated = yield* redis.dedicated(source)
        const waiting = yield* Effect.fork(dedicated.command("BLMOVE", [source, "destination", "LEFT", "RIGHT", 10]))
        for (let i = 0; i < yields; i++) yield* Effect.yieldNow()
        yield* command("RPUSH", source, `x${yields}`)
        // No time passes: only the wake-up can end the wait, within a few turns of the scheduler.
        for (let i = 0; i < 100 && Option.isNone(yield* Fiber.poll(waiting)); i++) yield* Effect.yieldNow()
        const moved = Option.map(yield* Fiber.poll(waiting), (exit) => (Exit.isSuccess(exit) ? exit.value : exit))
        expect({ yields, moved, source: yield* command("LRANGE", source, 0, -1) })
          .toEqual({ yields, moved: Option.some(`x${yields}`), source: [] })
      }
    }).pipe(Effect.scoped, Effect.provide(Redis.layerMemory())))

  it.effect("one store, two layers: what one writes the other sees; separately built layers share nothing", () => {
    const B = TokenBucket.make<string>("shared", 5, Rate.make(1, "1 second"))
    const store = Redis.makeMemoryStore()
    const one = Redis.layerMemory({ store })
    const two = Redis.layerMemory({ store })
    return Effect.gen(function*() {
      expect(yield* B.acquire("a", 3).pipe(Effect.provide(one))).toEqual(Allowed({ remaining: 2 }))
      expect(yield* B.peek("a").pipe(Effect.provide(two))).toBe(2)
      expect(yield* B.acquire("a", 2).pipe(Effect.provide(two))).toEqual(Allowed({ remaining: 0 }))
      expect(yield* B.peek("a").pipe(Effect.provide(one))).toBe(0)
      expect(store.size).toBe(1)
      // Without a store, each build of a layer has its own: within one build the data is shared…
      const own = Redis.layerMemory()
      expect(yield* Effect.all([B.acquire("a", 5), B.peek("a")]).pipe(Effect.provide(own)))
        .toEqual([Allowed({ remaining: 0 }), 0])
      // …and another build, of the same layer value or a new one, starts empty.
      expect(yield* B.peek("a").pipe(Effect.provide(own))).toBe(5)
      expect(yield* B.peek("a").pipe(Effect.provide(Redis.layerMemory()))).toBe(5)
      expect(yield* B.peek("a").pipe(Effect.provide(one))).toBe(0)
      expect(store.size).toBe(1)
    })
  })

  it.effect("layerMemoryReadOnly over a read-write layer's store reads what it wrote, as time passes", () => {
    const B = TokenBucket.make<string>("ro", 5, Rate.make(1, "1 second"))
    const store = Redis.makeMemoryStore()
    const readOnly = Redis.layerMemoryReadOnly({ store })
    return Effect.gen(function*() {
      expect(yield* B.acquire("a", 4).pipe(Effect.provide(Redis.layerMemory({ store })))).toEqual(
        Allowed({ remaining: 1 })
      )
      const written = yield* get("@@wakuwaku:TokenBucket:ro:a").pipe(Effect.provide(readOnly))
      expect(yield* B.peek("a").pipe(Effect.provide(readOnly))).toBe(1)
      yield* TestClock.adjust("2 seconds")
      expect(yield* B.peek("a").pipe(Effect.provide(readOnly))).toBe(3)
      expect(yield* B.peek("b").pipe(Effect.provide(readOnly))).toBe(5)
      // Peeking wrote nothing.
      expect(yield* get("@@wakuwaku:TokenBucket:ro:a").pipe(Effect.provide(readOnly))).toBe(written)
      expect(store.size).toBe(1)
    })
  })

  it.effect("a script with no twin fails with RedisError (Script)", () =>
    Effect.gen(function*() {
      const MINE = Script.make({ name: "mine", keys: 1, lua: "return redis.call('GET', KEYS[1])" })
      const redis = yield* Redis.Redis
      const error = yield* Effect.flip(redis.script(MINE, ["k"], []))
      expect(error).toBeInstanceOf(Redis.RedisError)
      expect(error).toMatchObject({ _tag: "RedisError", reason: "Script", operation: "script mine" })
      expect(error.message).toContain("NOSCRIPT")
    }).pipe(Effect.provide(Redis.layerMemory())))

  it("a sweepInterval that is not finite and longer than zero throws a RangeError when the layer is made", () => {
    expect(() => Redis.layerMemory({ sweepInterval: 0 })).toThrow(RangeError)
    expect(() => Redis.layerMemory({ sweepInterval: "0 millis" })).toThrow(RangeError)
    expect(() => Redis.layerMemory({ sweepInterval: Infinity })).toThrow(RangeError)
    expect(() => Redis.layerMemoryReadOnly({ sweepInterval: 0 })).toThrow(RangeError)
  })

  it.effect("maxKeys caps the store: expired keys go first, then the oldest", () =>
    Effect.gen(function*() {
      const store = Redis.makeMemoryStore({ maxKeys: 3 })
      const run = <A, E>(effect: Effect.Effect<A, E, Redis.Redis>) =>
        effect.pipe(Effect.provide(Redis.layerMemory({ store })))
      yield* run(command("SET", "short", "1", "PX", 100))
      yield* run(command("SET", "a", "1", "PX", 60_000))
      yield* run(command("SET", "b", "1", "PX", 60_000))
      yield* TestClock.adjust("101 millis")
      // "short" has expired (unswept): it makes room, and nothing live is evicted.
      yield* run(command("SET", "c", "1", "PX", 60_000))
      expect(store.size).toBe(3)
      expect((yield* run(command("KEYS", "*"))) as Array<string>).toEqual(["a", "b", "c"])
      // Full of live keys: the oldest ("a") is evicted; rewriting a key makes it the newest.
      yield* run(command("SET", "b", "2", "PX", 60_000))
      yield* run(command("SET", "d", "1", "PX", 60_000))
      expect((yield* run(command("KEYS", "*"))) as Array<string>).toEqual(["c", "b", "d"])
      expect(store.size).toBe(3)
    }))

  it.effect("maxKeys past the sweep's step of 16: expired keys it meets make room; else the least recently written go, in order", () =>
    Effect.gen(function*() {
      const store = Redis.makeMemoryStore({ maxKeys: 20 })
      const run = <A, E>(effect: Effect.Effect<A, E, Redis.Redis>) =>
        effect.pipe(Effect.provide(Redis.layerMemory({ store })))
      // The keys held, least recently written first, expired ones included (KEYS would remove those it meets).
      const held = () => [...(store as unknown as { db: Db }).db.entries.keys()]
      const set = (name: string, px = 60_000) => run(command("SET", name, "1", "PX", px))
      const names = range(0, 20).map((i) => `k${String(i).padStart(2, "0")}`)
      const expiring = new Set(["k02", "k06", "k10", "k14", "k18"])
      for (const name of names) yield* set(name, expiring.has(name) ? 100 : 60_000)
      yield* TestClock.adjust("200 millis")
      // Full, with 5 keys expired: the sweep's 16 steps meet at least one of them for each new key, and
      // the next new key's go on where the last stopped, so nothing alive is evicted.
      yield* set("n1")
      yield* set("n2")
      const alive = names.filter((name) => !expiring.has(name))
      expect(held().filter((name) => !expiring.has(name))).toEqual([...alive, "n1", "n2"])
      // By the second new key that finds the store full, the sweep has been all the way round: the 5 expired
      // keys are gone. From then on each new key evicts the least recently written: 29 keys written, 5
      // expired, so the 4 oldest alive went.
      const news = range(1, 10).map((i) => `n${i}`)
      for (const name of news.slice(2)) yield* set(name)
      expect(alive.slice(0, 4)).toEqual(["k00", "k01", "k03", "k04"])
      expect(held()).toEqual([...alive.slice(4), ...news])
      // Writing a key again (k05) makes it the most recent: the next two new keys evict k07 and k08.
      yield* set("k05")
      yield* set("n10")
      yield* set("n11")
      expect(held()).toEqual([...alive.slice(7), ...news, "k05", "n10", "n11"])
      expect(store.size).toBe(20)
    }))

  it("eviction against a model: 20 000 random writes, deletes and evictions over 300 names, each eviction the least recently written key", () => {
    const keys = new Keys<Written>()
    // The model: the names held, least recently written first.
    let model: Array<string> = []
    // A seeded generator (mulberry32), so that a failure repeats.
    let seed = 26_28
    const random = () => {
      seed = (seed + 0x6d2b79f5) | 0
      let t = Math.imul(seed ^ (seed >>> 15), 1 | seed)
      t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t
      return ((t ^ (t >>> 14)) >>> 0) / 4294967296
    }
    let evictions = 0
    for (let step = 0; step < 20_000; step++) {
      const name = `k${Math.floor(random() * 300)}`
      const r = random()
      if (r < 0.8) {
        // Written (again): the most recently written, wherever it stood.
        keys.set(name, { expireAt: undefined, key: "", older: undefined, newer: undefined })
        model = [...model.filter((held) => held !== name), name]
      } else if (r < 0.9) {
        expect(keys.delete(name)).toBe(model.includes(name))
        model = model.filter((held) => held !== name)
      } else {
        keys.evictOldest()
        model = model.slice(1)
        evictions++
      }
      expect(keys.size).toBe(model.length)
    }
    expect(keys.keys()).toEqual(model)
    expect(evictions).toBeGreaterThan(1500)
  })

  it("a bucket's level is the same whether its state is one of the last written (kept with its numbers) or read from its text", () => {
    const db = new Db()
    // 10 tokens, 1 per ms.
    const b = shapeOf("10 1 1000")
    const at = (ms: number) => db.at(BigInt(ms) * 1_000_000n)
    at(1_000)
    storeLevel(db, "a", b, 2.25)
    storeLevel(db, "z", b, -0)
    at(1_003)
    const kept = [levelOf(db, "a", b), levelOf(db, "z", b)]
    expect(kept).toEqual([5.25, 3])
    // Eight more writes: the states of "a" and "z" are no longer among the last written.
    for (let i = 0; i < 8; i++) storeLevel(db, `other${i}`, b, i)
    expect([levelOf(db, "a", b), levelOf(db, "z", b)]).toEqual(kept)
    // The same texts written by SET (other strings, equal text): the same levels.
    db.set("a2", db.get("a")!, { px: 60_000 })
    db.set("z2", db.get("z")!, { px: 60_000 })
    expect([levelOf(db, "a2", b), levelOf(db, "z2", b)]).toEqual(kept)
    expect(db.get("z")).toBe("0 1000000")
  })

  it.live(
    "a full store of 100 000 live keys: each new name looks at 17 keys (16 swept, 1 evicted), not the whole store",
    () =>
      Effect.gen(function*() {
        const KEYS = 100_000
        const store = Redis.makeMemoryStore({ maxKeys: KEYS })
        const db = (store as unknown as { db: Db }).db
        const BUCKET = TokenBucket.make<string>("cap", 10, Rate.make(1, "1 hour"))
        const keyOf = (name: string) => `@@wakuwaku:TokenBucket:cap:${name}`
        const acquireAll = (names: ReadonlyArray<string>) =>
          Effect.forEach(names, (name) => BUCKET.acquire(name, 1), { discard: true })
        yield* Effect.gen(function*() {
          yield* acquireAll(range(0, KEYS).map((i) => `old-${i}`))
          expect(store.size).toBe(KEYS)
          // On the live clock, milliseconds pass between them (the old full sweep ran once a millisecond).
          const NEW = 1000
          const steps = yield* mapSteps(acquireAll(range(0, NEW).map((i) => `new-${i}`)))
          expect(store.size).toBe(KEYS)
          // 16 swept and 1 evicted for each, and the first step of each of the store's Maps: not the store.
          expect(steps).toBeLessThanOrEqual(NEW * 18)
          // The least recently written went, in order: old-0 … old-999.
          expect(db.entries.has(keyOf("old-999"))).toBe(false)
          expect(db.entries.has(keyOf("old-1000"))).toBe(true)
          expect(db.entries.has(keyOf("new-999"))).toBe(true)
        }).pipe(Effect.provide(Redis.layerMemory({ store, sweepInterval: "1 hour" })))
      }),
    60_000
  )

  it.live(
    "the periodic sweep removes 100 000 expired keys in steps of at most 1000, the event loop running between",
    () =>
      Effect.gen(function*() {
        const KEYS = 100_000
        const store = Redis.makeMemoryStore()
        const seed = Redis.layerMemory({ store, sweepInterval: "1 hour" })
        yield* Effect.forEach(range(0, KEYS), (i) => command("SET", `k${i}`, "1", "PX", 1), { discard: true }).pipe(
          Effect.provide(seed)
        )
        yield* Effect.sleep("5 millis")
        expect(store.size).toBe(KEYS)
        // A fiber that looks at the store's size on each turn of the event loop (a timer), until it is empty.
        const seen: Array<number> = []
        const watcher = yield* Effect.fork(Effect.gen(function*() {
          while (seen.at(-1) !== 0) {
            seen.push(store.size)
            yield* Effect.sleep(Duration.zero)
          }
        }))
        yield* Effect.scoped(Effect.zipRight(
          Layer.build(Redis.layerMemory({ store, sweepInterval: "10 millis" })),
          Fiber.join(watcher)
        ))
        expect(seen[0]).toBe(KEYS)
        const steps = seen.slice(1).map((size, i) => seen[i]! - size)
        expect(Math.max(...steps)).toBeLessThanOrEqual(1000)
      }),
    60_000
  )

  it("maxKeys must be a positive safe integer", () => {
    for (const maxKeys of [0, -1, 1.5, Number.NaN, Infinity]) {
      expect(() => Redis.makeMemoryStore({ maxKeys })).toThrow(RangeError)
      expect(() => Redis.layerMemory({ maxKeys })).toThrow(RangeError)
    }
  })
})
