import { layer } from "@effect/vitest"
import { Chunk, Deferred, Effect, Exit, Fiber, Schema, Stream } from "effect"
import { Redis as IORedis } from "ioredis"
import { expect } from "vitest"
import { Pipe, Redis } from "wakuwaku"
import { command, exists, forEachBackend, keysMatching, pttl } from "./support/backends.js"
import { freshNamespace, RedisLive, redisUrl } from "./support/redis.js"

const Msg = Schema.Struct({ n: Schema.Number })
type Msg = typeof Msg.Type

class Frame extends Schema.Class<Frame>("Frame")({ text: Schema.String }) {}

const keyOf = (ns: string, name: string, suffix: "messages" | "closed" | "inflight" | "receiver") =>
  `@@wakuwaku:Pipe:{${ns}:${name}}:${suffix}`

/** The keys under the namespace, with their TTLs (ms), read through the backend in context. */
const ttls = (ns: string) =>
  Effect.gen(function*() {
    const found: Record<string, number> = {}
    for (const key of yield* keysMatching(`@@wakuwaku:Pipe:{${ns}:*`)) {
      found[key.slice(key.lastIndexOf(":") + 1)] = yield* pttl(key)
    }
    return found
  })

/** Every key under the namespace carries a TTL. */
const expectTtls = (ns: string) =>
  Effect.map(ttls(ns), (found) => {
    for (const [suffix, ttl] of Object.entries(found)) expect(ttl, suffix).toBeGreaterThan(0)
    return found
  })

const range = (from: number, to: number) => Array.from({ length: to - from }, (_, i) => from + i)

const collect = <A, E, R>(stream: Stream.Stream<A, E, R>) => Effect.map(Stream.runCollect(stream), Chunk.toArray)

const ns_ = (n: Msg) => n.n

/** Consecutive repeats removed: an at-least-once redelivery repeats the message it was handling. */
const squash = (xs: ReadonlyArray<number>) => xs.filter((x, i) => i === 0 || xs[i - 1] !== x)

const deliveries = ["at-most-once", "at-least-once"] as const

forEachBackend("Pipe", (it, backend) => {
  it.scoped("the documented example: a typed frame goes through, and the stream ends at close", () =>
    Effect.gen(function*() {
      const TO_CLIENT = Pipe.make<string, Frame>(freshNamespace(), Frame, "60 seconds")
      yield* TO_CLIENT.send("session-1", new Frame({ text: "hello" }))
      yield* TO_CLIENT.close("session-1")
      const frames = yield* collect(TO_CLIENT.receive("session-1"))
      expect(frames).toEqual([new Frame({ text: "hello" })])
      expect(frames[0]).toBeInstanceOf(Frame)
    }))

  for (const delivery of deliveries) {
    it.scoped(
      `${delivery}: 2 000 messages arrive in order, exactly once, sent while the receiver runs`,
      () =>
        Effect.gen(function*() {
          const ns = freshNamespace()
          const P = Pipe.make<string, Msg>(ns, Msg, "10 seconds")
          const receiver = yield* Effect.fork(collect(P.receive("p", { delivery })))
          for (let i = 0; i < 2_000; i++) yield* P.send("p", { n: i })
          yield* P.close("p")
          expect((yield* Fiber.join(receiver)).map(ns_)).toEqual(range(0, 2_000))
          // Nothing is left but the close marker (and the close sentinel's list, drained, is gone).
          expect(Object.keys(yield* expectTtls(ns))).toEqual(["closed"])
        }),
      60_000
    )
  }

  it.scoped("a receiver started before the sender gets everything; so does one started after the sender closed", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const P = Pipe.make<string, Msg>(ns, Msg, "10 seconds")
      // Before: it opens (its lease key appears) and blocks, and only then does the sender start.
      const early = yield* Effect.fork(collect(P.receive("before")))
      while ((yield* exists(keyOf(ns, "before", "receiver"))) === 0) yield* Effect.yieldNow()
      for (let i = 0; i < 100; i++) yield* P.send("before", { n: i })
      yield* P.close("before")
      expect((yield* Fiber.join(early)).map(ns_)).toEqual(range(0, 100))

      // After: everything waits in the store.
      for (let i = 0; i < 100; i++) yield* P.send("after", { n: i })
      yield* P.close("after")
      expect((yield* collect(P.receive("after"))).map(ns_)).toEqual(range(0, 100))
    }))

  it.scoped("close: everything sent before it, then the end; a message sent after it is accepted and never read", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const P = Pipe.make<string, Msg>(ns, Msg, "10 seconds")
      yield* P.send("p", { n: 1 })
      yield* P.send("p", { n: 2 })
      yield* P.close("p")
      yield* P.send("p", { n: 3 }) // accepted: no error
      yield* P.close("p") // closing twice does nothing
      const list = yield* command("LRANGE", keyOf(ns, "p", "messages"), 0, -1)
      expect(list).toEqual([`{"n":1}`, `{"n":2}`, "!close"])
      expect((yield* collect(P.receive("p"))).map(ns_)).toEqual([1, 2])
      // A later receiver, on the closed and drained pipe, ends at once and holds nothing.
      yield* P.send("p", { n: 4 })
      expect(yield* collect(P.receive("p", { delivery: "at-least-once" }))).toEqual([])
      expect(Object.keys(yield* expectTtls(ns))).toEqual(["closed"])
      const closedTtl = (yield* ttls(ns))["closed"]!
      expect(closedTtl).toBeGreaterThan(9_000)
      expect(closedTtl).toBeLessThanOrEqual(10_000)
    }))

  it.scoped("TTL: a receiver that gets nothing for one TTL fails with PipeAbandoned and leaves nothing behind", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const P = Pipe.make<string, Msg>(ns, Msg, "300 millis")
      yield* P.send("p", { n: 1 })
      const start = Date.now()
      const got: Array<number> = []
      const error = yield* Effect.flip(P.receive("p").pipe(Stream.runForEach((m) => Effect.sync(() => got.push(m.n)))))
      const waited = Date.now() - start
      expect(got).toEqual([1])
      expect(error).toBeInstanceOf(Pipe.PipeAbandoned)
      expect(error).toMatchObject({ _tag: "PipeAbandoned", pipe: `Pipe(${ns})`, name: "p" })
      expect(waited).toBeGreaterThanOrEqual(290)
      expect(waited).toBeLessThan(1_500)
      // Its lease and in-flight list went with it; the message list was drained.
      expect(yield* ttls(ns)).toEqual({})
      // Receiving again is allowed at once.
      expect(yield* Effect.flip(collect(P.receive("p")))).toBeInstanceOf(Pipe.PipeAbandoned)
    }))

  it.scoped("TTL: every send restarts it, and the keys are gone one TTL after the last send", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const P = Pipe.make<string, Msg>(ns, Msg, "300 millis")
      yield* P.send("p", { n: 1 })
      // Measured on the wall clock that both stores' TTLs run on: a timer may fire a millisecond early.
      const first = Date.now()
      yield* Effect.sleep("150 millis")
      const elapsed = Date.now() - first
      const left = (yield* expectTtls(ns))["messages"]!
      expect(left).toBeLessThanOrEqual(300 - elapsed)
      yield* P.send("p", { n: 2 })
      const sent = Date.now()
      const restarted = (yield* expectTtls(ns))["messages"]!
      expect(restarted).toBeGreaterThan(250)
      expect(restarted).toBeLessThanOrEqual(300)
      // Gone when the list expires, one TTL after the second send (not the first).
      while ((yield* exists(keyOf(ns, "p", "messages"))) === 1) yield* Effect.sleep("5 millis")
      const gone = Date.now() - sent
      expect(gone).toBeGreaterThanOrEqual(250)
      expect(gone).toBeLessThan(1_000)
      expect(yield* ttls(ns)).toEqual({})
    }))

  it.scoped("heartbeat: a receiver waits past the TTL while the sender beats; beats never pile up, and stop at close", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const P = Pipe.make<string, Msg>(ns, Msg, "300 millis")
      // Beats on an empty pipe: one sentinel, whatever their number.
      const beats = yield* Effect.fork(Pipe.heartbeat(P, "idle", "10 millis"))
      yield* Effect.sleep("60 millis")
      yield* Fiber.interrupt(beats)
      expect(yield* command("LRANGE", keyOf(ns, "idle", "messages"), 0, -1)).toEqual(["!beat"])

      const heart = yield* Effect.fork(Pipe.heartbeat(P, "p"))
      const receiver = yield* Effect.fork(collect(P.receive("p")))
      yield* Effect.sleep("1 second")
      yield* P.send("p", { n: 1 })
      yield* P.close("p")
      expect((yield* Fiber.join(receiver)).map(ns_)).toEqual([1])
      // Once closed, beats write nothing.
      yield* Effect.sleep("150 millis")
      expect(yield* exists(keyOf(ns, "p", "messages"))).toBe(0)
      yield* Fiber.interrupt(heart)
    }))

  for (const delivery of deliveries) {
    it.scoped(`${delivery}: 1000 cycles of receive, interrupt, send lose nothing`, () =>
      Effect.gen(function*() {
        const ns = freshNamespace()
        const P = Pipe.make<string, Msg>(ns, Msg, "10 seconds")
        const got: Array<number> = []
        const CYCLES = 1000
        let stall: Deferred.Deferred<void> | undefined
        const handler = (m: Msg) =>
          Effect.suspend(() => {
            got.push(m.n)
            // A stalled handler: the interruption lands in the middle of it.
            return stall === undefined ? Effect.void : Effect.zipRight(Deferred.succeed(stall, undefined), Effect.never)
          })
        for (let i = 0; i < CYCLES; i++) {
          stall = i % 5 === 4 ? yield* Deferred.make<void>() : undefined
          const fiber = yield* Effect.fork(P.receive("p", { delivery }).pipe(Stream.runForEach(handler)))
          switch (i % 5) {
            case 0: // before the receiver opens; the message waits for the next one
              yield* Fiber.interrupt(fiber)
              yield* P.send("p", { n: i })
              break
            case 1: // about when the message arrives
              yield* P.send("p", { n: i })
              yield* Effect.yieldNow()
              yield* Fiber.interrupt(fiber)
              break
            case 2: { // while it blocks, the message on its way: the abandoned BLMOVE may take it
              yield* Effect.sleep("1 millis")
              const sending = yield* Effect.fork(P.send("p", { n: i }))
              yield* Fiber.interrupt(fiber)
              yield* Fiber.join(sending)
              break
            }
            case 3: // after it handled the message, while it blocks for the next
              yield* P.send("p", { n: i })
              yield* Effect.sleep("1 millis")
              yield* Fiber.interrupt(fiber)
              break
            case 4: // in the middle of a handler
              yield* P.send("p", { n: i })
              yield* Deferred.await(stall!)
              yield* Fiber.interrupt(fiber)
          }
          const exit = yield* Fiber.await(fiber)
          expect(Exit.isInterrupted(exit), String(exit)).toBe(true)
        }
        stall = undefined
        const during = got.length
        yield* P.close("p")
        yield* P.receive("p", { delivery }).pipe(Stream.runForEach((m) => Effect.sync(() => got.push(m.n))))
        if (delivery === "at-most-once") {
          expect(got).toEqual(range(0, CYCLES))
        } else {
          // A redelivery repeats only the message being handled when the receiver was interrupted.
          expect(squash(got)).toEqual(range(0, CYCLES))
          expect(got.length - CYCLES).toBeGreaterThanOrEqual(CYCLES / 5)
          expect(got.length - CYCLES).toBeLessThanOrEqual(CYCLES)
        }
        // The interruptions really landed among deliveries.
        expect(during).toBeGreaterThan(CYCLES / 10)
        console.info(
          `${backend.name}, ${delivery}: ${during} of ${CYCLES} received between interruptions, ${
            got.length - CYCLES
          } repeated`
        )
        expect(Object.keys(yield* expectTtls(ns))).toEqual(["closed"])
      }), 60_000)
  }

  it.scoped("interrupted mid-handler: at-least-once gets that message again first; at-most-once does not", () =>
    Effect.gen(function*() {
      for (const delivery of deliveries) {
        const ns = freshNamespace()
        const P = Pipe.make<string, Msg>(ns, Msg, "10 seconds")
        for (let i = 0; i < 10; i++) yield* P.send("p", { n: i })
        yield* P.close("p")
        const handling = yield* Deferred.make<void>()
        const got: Array<number> = []
        const first = yield* Effect.fork(
          P.receive("p", { delivery }).pipe(
            Stream.runForEach((m) =>
              Effect.sync(() => got.push(m.n)).pipe(
                Effect.zipRight(
                  m.n === 3 ? Effect.zipRight(Deferred.succeed(handling, undefined), Effect.never) : Effect.void
                )
              )
            )
          )
        )
        yield* Deferred.await(handling)
        // The store holds the message being handled (at-least-once) and the ones taken with it (at-most-once).
        const inflight = yield* command("LRANGE", keyOf(ns, "p", "inflight"), 0, -1)
        if (delivery === "at-least-once") expect(inflight).toEqual(["!least:3", `{"n":3}`])
        else expect(inflight).toEqual(["!most:0", ...range(0, 10).map((n) => `{"n":${n}}`), "!close"])
        yield* Fiber.interrupt(first)
        const rest = (yield* collect(P.receive("p", { delivery }))).map(ns_)
        expect([...got, ...rest]).toEqual(
          delivery === "at-least-once" ? [0, 1, 2, 3, 3, 4, 5, 6, 7, 8, 9] : range(0, 10)
        )
      }
    }))

  it.scoped("stopping early (Stream.take): at-most-once puts back what it took and did not hand over, in order", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const P = Pipe.make<string, Msg>(ns, Msg, "10 seconds")
      for (let i = 0; i < 200; i++) yield* P.send("p", { n: i })
      expect((yield* collect(P.receive("p").pipe(Stream.take(10)))).map(ns_)).toEqual(range(0, 10))
      expect(yield* command("LLEN", keyOf(ns, "p", "messages"))).toBe(190)
      expect((yield* collect(P.receive("p").pipe(Stream.take(100)))).map(ns_)).toEqual(range(10, 110))
      // at-least-once: the last message emitted was never pulled past, so it comes again.
      expect((yield* collect(P.receive("p", { delivery: "at-least-once" }).pipe(Stream.take(10)))).map(ns_))
        .toEqual(range(110, 120))
      yield* P.close("p")
      expect((yield* collect(P.receive("p"))).map(ns_)).toEqual(range(119, 200))
    }))

  it.scoped("a receiver that died without releasing: at-least-once leftovers come first, in order; at-most-once ones are dropped", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const P = Pipe.make<string, Msg>(ns, Msg, "10 seconds")
      yield* P.send("least", { n: 3 })
      yield* P.close("least")
      // What a killed receiver leaves behind: its in-flight list, its lease gone with its TTL.
      yield* command("RPUSH", keyOf(ns, "least", "inflight"), "!least:7", `{"n":1}`, `{"n":2}`)
      expect((yield* collect(P.receive("least"))).map(ns_)).toEqual([1, 2, 3])

      yield* P.send("most", { n: 3 })
      yield* P.close("most")
      yield* command("RPUSH", keyOf(ns, "most", "inflight"), "!most:7", `{"n":1}`, `{"n":2}`)
      expect((yield* collect(P.receive("most"))).map(ns_)).toEqual([3])
    }))

  it.scoped("a dead receiver's in-flight list lives as long as the pipe: every send and beat keeps it two TTLs", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const P = Pipe.make<string, Msg>(ns, Msg, "10 seconds")
      // What a killed receiver leaves behind, with little of its TTL left.
      yield* command("RPUSH", keyOf(ns, "a", "inflight"), "!least:0", `{"n":1}`)
      yield* command("PEXPIRE", keyOf(ns, "a", "inflight"), 500)
      yield* P.send("a", { n: 2 })
      expect(yield* pttl(keyOf(ns, "a", "inflight"))).toBeGreaterThan(19_000)
      yield* command("PEXPIRE", keyOf(ns, "a", "inflight"), 500)
      yield* Effect.race(Pipe.heartbeat(P, "a"), Effect.sleep("50 millis"))
      expect(yield* pttl(keyOf(ns, "a", "inflight"))).toBeGreaterThan(19_000)
      yield* P.close("a")
      expect((yield* collect(P.receive("a", { delivery: "at-least-once" }))).map(ns_)).toEqual([1, 2])
    }))

  it.scoped("a close sentinel that outlived its marker still closes: later sends are dropped", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const P = Pipe.make<string, Msg>(ns, Msg, "10 seconds")
      yield* P.send("a", { n: 1 })
      yield* P.close("a")
      // The marker gone, the sentinel still there (a stopping receiver put it back).
      yield* command("DEL", keyOf(ns, "a", "closed"))
      yield* P.send("a", { n: 2 })
      expect(yield* command("LRANGE", keyOf(ns, "a", "messages"), 0, -1)).toEqual([`{"n":1}`, "!close"])
      expect((yield* collect(P.receive("a"))).map(ns_)).toEqual([1])
    }))

  it.scoped("a bad payload fails the stream with MessageError carrying it; it is taken out, so the next receiver goes on", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const P = Pipe.make<string, Msg>(ns, Msg, "10 seconds")
      yield* P.send("p", { n: 1 })
      yield* command("RPUSH", keyOf(ns, "p", "messages"), "not json", `{"n":"two"}`)
      yield* P.send("p", { n: 3 })
      yield* P.close("p")
      for (const [delivery, bad] of [["at-most-once", "not json"], ["at-least-once", `{"n":"two"}`]] as const) {
        const got: Array<number> = []
        const error = yield* Effect.flip(
          P.receive("p", { delivery }).pipe(Stream.runForEach((m) => Effect.sync(() => got.push(m.n))))
        )
        expect(error).toBeInstanceOf(Pipe.MessageError)
        expect(error).toMatchObject({ _tag: "MessageError", pipe: `Pipe(${ns})`, name: "p", raw: bad })
        expect(got).toEqual(bad === "not json" ? [1] : [])
      }
      expect((yield* collect(P.receive("p"))).map(ns_)).toEqual([3])
    }))

  it.scoped("a second receiver on the same name fails with PipeBusy; once the first stops, a new one gets in at once", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const P = Pipe.make<string, Msg>(ns, Msg, "10 seconds")
      const started = yield* Deferred.make<void>()
      const first = yield* Effect.fork(
        P.receive("p").pipe(Stream.runForEach(() => Deferred.succeed(started, undefined)))
      )
      yield* P.send("p", { n: 1 })
      yield* Deferred.await(started)
      for (const delivery of deliveries) {
        const error = yield* Effect.flip(collect(P.receive("p", { delivery })))
        expect(error).toBeInstanceOf(Pipe.PipeBusy)
        expect(error).toMatchObject({ _tag: "PipeBusy", pipe: `Pipe(${ns})`, name: "p", reason: "Held" })
      }
      // Another name is another pipe.
      yield* P.close("q")
      expect(yield* collect(P.receive("q"))).toEqual([])
      yield* Fiber.interrupt(first)
      yield* P.send("p", { n: 2 })
      yield* P.close("p")
      expect((yield* collect(P.receive("p"))).map(ns_)).toEqual([2])
    }))

  it.scoped("a lease lost under the receiver (its key deleted): PipeBusy (Lost), blocked or not, and nothing is lost", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const P = Pipe.make<string, Msg>(ns, Msg, "600 millis")
      // Blocked in BLMOVE (after a short batch it blocks at once, with no FETCH to see the lease): the
      // next renewal (a third of the TTL) finds the lease gone and cuts the connection off.
      yield* P.send("a", { n: 1 })
      const first = yield* Deferred.make<void>()
      const blocked = yield* Effect.fork(
        collect(P.receive("a").pipe(Stream.tap(() => Deferred.succeed(first, undefined))))
      )
      yield* Deferred.await(first)
      yield* command("DEL", keyOf(ns, "a", "receiver"))
      const start = Date.now()
      expect(yield* Effect.flip(Fiber.join(blocked))).toMatchObject({ _tag: "PipeBusy", reason: "Lost" })
      expect(Date.now() - start).toBeLessThan(500)

      // Handling a message (at-least-once): the next pull finds the lease gone; the message goes back.
      yield* P.send("b", { n: 1 })
      yield* P.send("b", { n: 2 })
      const handling = yield* Deferred.make<void>()
      const proceed = yield* Deferred.make<void>()
      const got: Array<number> = []
      const receiver = yield* Effect.fork(
        P.receive("b", { delivery: "at-least-once" }).pipe(
          Stream.runForEach((m) =>
            Effect.sync(() => got.push(m.n)).pipe(
              Effect.zipRight(Deferred.succeed(handling, undefined)),
              Effect.zipRight(Deferred.await(proceed))
            )
          )
        )
      )
      yield* Deferred.await(handling)
      yield* command("DEL", keyOf(ns, "b", "receiver"))
      yield* Deferred.succeed(proceed, undefined)
      expect(yield* Effect.flip(Fiber.join(receiver))).toMatchObject({ _tag: "PipeBusy", reason: "Lost" })
      expect(got).toEqual([1])
      // The handler of 1 had succeeded; its release still put back the rest (nobody else had opened the pipe).
      expect(yield* command("LRANGE", keyOf(ns, "b", "messages"), 0, -1)).toEqual([`{"n":2}`])
      yield* expectTtls(ns)
    }))

  it.scoped("hygiene: every key has a TTL, while receiving too; the lease and in-flight list live only as long as the receiver", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const P = Pipe.make<string, Msg>(ns, Msg, "3 seconds")
      yield* P.send("p", { n: 1 })
      yield* P.send("p", { n: 2 })
      const handling = yield* Deferred.make<void>()
      const receiver = yield* Effect.fork(
        P.receive("p", { delivery: "at-least-once" }).pipe(
          Stream.runForEach(() => Effect.zipRight(Deferred.succeed(handling, undefined), Effect.never))
        )
      )
      yield* Deferred.await(handling)
      const during = yield* expectTtls(ns)
      expect(Object.keys(during).sort()).toEqual(["inflight", "messages", "receiver"])
      expect(during["receiver"]).toBeLessThanOrEqual(3_000)
      expect(during["inflight"]).toBeLessThanOrEqual(6_000)
      expect(during["inflight"]).toBeGreaterThan(5_000)
      yield* Fiber.interrupt(receiver)
      // Both messages are back in the list; nothing else remains.
      expect(Object.keys(yield* expectTtls(ns))).toEqual(["messages"])
      expect(yield* command("LRANGE", keyOf(ns, "p", "messages"), 0, -1)).toEqual([`{"n":1}`, `{"n":2}`])
      yield* P.close("p")
      expect(Object.keys(yield* expectTtls(ns)).sort()).toEqual(["closed", "messages"])
    }))

  it.scoped("duplex: two pipes, one per direction; each end receives what the other sends", () =>
    Effect.gen(function*() {
      const ToServer = Pipe.make<string, Msg>(freshNamespace("up"), Msg, "10 seconds")
      const ToClient = Pipe.make<string, Frame>(freshNamespace("down"), Frame, "10 seconds")
      const server = Pipe.duplex(ToClient, ToServer)
      const client = server.flip
      expect(client.outgoing).toBe(ToServer)
      expect(client.incoming).toBe(ToClient)
      // The server answers every request, and closes its direction when the client closes its own.
      const serving = yield* Effect.fork(
        server.receive("s").pipe(
          Stream.runForEach((m) => server.send("s", new Frame({ text: `got ${m.n}` }))),
          Effect.zipRight(server.close("s"))
        )
      )
      for (let i = 0; i < 3; i++) yield* client.send("s", { n: i })
      yield* client.close("s")
      expect((yield* collect(client.receive("s"))).map((f) => f.text)).toEqual(["got 0", "got 1", "got 2"])
      yield* Fiber.join(serving)
      expect(() => Pipe.duplex(ToServer, ToServer)).toThrow(TypeError)
    }))

  it.scoped("bad input: a name that cannot be encoded and a message that does not encode are InvalidInput; a bad ttl throws", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const P = Pipe.make<string, Msg>(ns, Msg, "10 seconds")
      const badName = "\uD800"
      for (const attempt of [P.send(badName, { n: 1 }), P.close(badName), collect(P.receive(badName))]) {
        const error = yield* Effect.flip(attempt)
        expect(error).toBeInstanceOf(Redis.InvalidInput)
        expect(error).toMatchObject({ argument: "name" })
      }
      const Positive = Pipe.make<string, number>(ns, Schema.Number.pipe(Schema.positive()), "10 seconds")
      const unencodable = yield* Effect.flip(Positive.send("p", -1))
      expect(unencodable).toBeInstanceOf(Redis.InvalidInput)
      expect(unencodable).toMatchObject({ operation: `Pipe(${ns}).send`, argument: "message" })
      expect(yield* ttls(ns)).toEqual({})
      expect(() => Pipe.make(ns, Msg, 0)).toThrow(RangeError)
      expect(() => Pipe.make(ns, Msg, "0 seconds")).toThrow(RangeError)
      expect(() => Pipe.make(ns, Msg, Infinity)).toThrow(RangeError)
      expect(() => Pipe.make("a:b", Msg, "1 second")).toThrow(TypeError)
      expect(() => Pipe.heartbeat(P, "p", 0)).toThrow(RangeError)
      expect(String(P)).toBe(`Pipe(${ns}): ttl 10000 ms`)
    }))

  it.scoped("a message JSON would change is InvalidInput at send, saying where, and nothing is sent", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const Numbers = Pipe.make<string, number>(ns, Schema.Number, "10 seconds")
      const Anything = Pipe.make<string, unknown>(`${ns}-u`, Schema.Unknown, "10 seconds")
      const refused = (effect: Effect.Effect<void, Redis.RedisError | Redis.InvalidInput, Pipe.Requirements>) =>
        Effect.map(Effect.flip(effect), (error) =>
          error._tag === "InvalidInput"
            ? { _tag: error._tag, operation: error.operation, argument: error.argument, message: error.message }
            : error)
      const operation = `Pipe(${ns}).send`
      const wouldNotArrive = (what: string) => ({
        _tag: "InvalidInput",
        operation,
        argument: "message",
        message: `the message would not arrive as sent: ${what}`
      })
      expect(yield* refused(Numbers.send("p", NaN))).toEqual(
        wouldNotArrive("message is NaN, which JSON writes as null")
      )
      expect(yield* refused(Numbers.send("p", Infinity))).toEqual(
        wouldNotArrive("message is Infinity, which JSON writes as null")
      )
      expect(yield* refused(Numbers.send("p", -Infinity))).toEqual(
        wouldNotArrive("message is -Infinity, which JSON writes as null")
      )
      const unknown = (what: string) => ({ ...wouldNotArrive(what), operation: `Pipe(${ns}-u).send` })
      expect(yield* refused(Anything.send("p", { items: [1, 2, NaN] }))).toEqual(
        unknown("message.items[2] is NaN, which JSON writes as null")
      )
      expect(yield* refused(Anything.send("p", { a: undefined }))).toEqual(
        unknown("message.a is undefined, which JSON drops (omit it instead)")
      )
      expect(yield* refused(Anything.send("p", 1n))).toEqual(
        unknown("message is a bigint, which JSON cannot write (encode it as a string)")
      )
      expect(yield* refused(Anything.send("p", new Date(0)))).toEqual(
        unknown("message is an instance of Date, which JSON does not keep")
      )
      // eslint-disable-next-line no-sparse-arrays -- the hole is the input under test
      expect(yield* refused(Anything.send("p", [1, , 3]))).toEqual(
        unknown("message[1] is a hole, which JSON writes as null")
      )
      const loop: Record<string, unknown> = {}
      loop["self"] = loop
      expect(yield* refused(Anything.send("p", loop))).toEqual(
        unknown("message.self contains itself, which JSON cannot write")
      )
      expect(yield* ttls(ns)).toEqual({})
      expect(yield* ttls(`${ns}-u`)).toEqual({})
      // -0 travels, and arrives as 0.
      yield* Numbers.send("q", -0)
      yield* Numbers.close("q")
      expect(yield* collect(Numbers.receive("q"))).toEqual([0])
    }))
})

// What only a server has.
layer(RedisLive, { excludeTestServices: true })("Pipe on Redis only", (it) => {
  // Adopts an ioredis client with its own commandTimeout, which only the server backend has.
  it.scoped("the dedicated connection has no command timeout, even when the adopted client has one", () =>
    Effect.gen(function*() {
      const ns = freshNamespace()
      const P = Pipe.make<string, Msg>(ns, Msg, "1 second")
      const client = new IORedis(redisUrl, { commandTimeout: 200 })
      yield* Effect.addFinalizer(() => Effect.sync(() => client.disconnect()))
      const started = performance.now()
      const error = yield* Effect.flip(collect(P.receive("a")).pipe(Effect.provide(Redis.layerClient(client))))
      expect(error).toMatchObject({ _tag: "PipeAbandoned" })
      expect(performance.now() - started).toBeGreaterThanOrEqual(950)
    }))
})
