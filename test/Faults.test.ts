/**
 * Real faults on loopback, no root needed: a server killed and restarted, paused past the command
 * timeout, a connection reset while a reply is in flight, a stall under a blocked pipe receiver, and a
 * full server. Each asserts the exact typed reason, the time to surface, recovery, and what the data
 * says afterwards.
 */
import { describe, expect, it } from "@effect/vitest"
import { Cause, Chunk, Effect, Exit, Fiber, Layer, Schema, Stream } from "effect"
import { Redis as IORedis } from "ioredis"
import { createServer, Socket } from "node:net"
import { Pipe, Rate, Redis, TokenBucket } from "wakuwaku"
import { RedisServer } from "wakuwaku/testing"
import { request, startProxy, upstream } from "./support/proxy.js"
import { freshNamespace } from "./support/redis.js"

const failureOf = <A, E>(exit: Exit.Exit<A, E>): E => {
  if (Exit.isSuccess(exit)) throw new Error("expected a failure")
  const failure = exit.cause._tag === "Fail" ? exit.cause.error : undefined
  if (failure === undefined) throw new Error(`expected a typed failure, got ${exit.cause._tag}`)
  return failure
}

const { Allowed } = TokenBucket.Admission

/** Retries `effect` every 20 ms until it succeeds, for at most `ms`; returns how long that took. */
const recovered = <A, E, R>(effect: Effect.Effect<A, E, R>, ms: number) =>
  Effect.gen(function*() {
    const started = performance.now()
    while (true) {
      const exit = yield* Effect.exit(effect)
      if (Exit.isSuccess(exit)) return { value: exit.value, after: performance.now() - started }
      if (performance.now() - started > ms) {
        return yield* Effect.die(new Error(`no recovery within ${ms} ms: ${Cause.pretty(exit.cause)}`))
      }
      yield* Effect.sleep("20 millis")
    }
  })

/**
 * A TCP relay in front of a server that, once armed, resets the client's connection when the next reply
 * arrives from the server, instead of passing it on: a reply lost in flight, after the command ran.
 */
const resettingRelay = (port: number) =>
  Effect.acquireRelease(
    Effect.async<{ port: number; arm: () => void; resets: () => number; close: () => void }>((resume) => {
      let armed = false
      let resets = 0
      const sockets = new Set<Socket>()
      const server = createServer((client) => {
        const upstream = new Socket()
        sockets.add(client).add(upstream)
        upstream.connect(port, "127.0.0.1")
        client.on("data", (chunk: Buffer) => upstream.write(chunk))
        upstream.on("data", (chunk: Buffer) => {
          if (armed) {
            armed = false
            resets++
            client.resetAndDestroy()
            upstream.destroy()
          } else client.write(chunk)
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
          arm: () => (armed = true),
          resets: () => resets,
          close: () => {
            for (const socket of sockets) socket.destroy()
            server.close()
          }
        }))
      })
    }),
    (relay) => Effect.sync(() => relay.close())
  )

describe("Faults", () => {
  it.live(
    "SIGKILL, then a restart on the same port: the structures work again with no manual action",
    () =>
      Effect.gen(function*() {
        const server = yield* RedisServer.make()
        const B = TokenBucket.make<string>(freshNamespace(), 5, Rate.make(1, "1 hour"))
        yield* Effect.gen(function*() {
          expect(yield* B.acquire("a", 1)).toEqual(Allowed({ remaining: 4 }))
          process.kill(server.pid, "SIGKILL")
          const started = performance.now()
          const error = failureOf(yield* Effect.exit(B.acquire("a", 1))) as Redis.RedisError
          const surfaced = performance.now() - started
          expect(error).toBeInstanceOf(Redis.RedisError)
          expect(error).toMatchObject({
            _tag: "RedisError",
            reason: "Connection",
            operation: "script TokenBucket.acquire"
          })
          // What the socket said (the server refused the reconnection, the kill reset the connection), or that
          // the connection was lost: never ioredis's own "Reached the max retries …".
          console.info(`SIGKILL: ${error.message}`)
          expect(error.message).toMatch(
            new RegExp(
              "^Redis script TokenBucket\\.acquire failed \\(Connection\\): " +
                `(connect ECONNREFUSED 127\\.0\\.0\\.1:${server.port}|read ECONNRESET|the connection to the server was lost)$`
            )
          )
          expect(surfaced).toBeLessThan(500 + 200)
          // The same port again: a new, empty server (no persistence), which the client finds by itself.
          yield* RedisServer.make({ port: server.port })
          const { after, value } = yield* recovered(B.acquire("a", 1), 5000)
          expect(value).toEqual(Allowed({ remaining: 4 }))
          console.info(
            `SIGKILL: ${error.reason} after ${surfaced.toFixed(0)} ms; working again ${
              after.toFixed(0)
            } ms after the restart`
          )
        }).pipe(Effect.provide(Redis.layer({ url: server.url, commandTimeout: "500 millis" })))
      }).pipe(Effect.scoped),
    20_000
  )

  it.live(
    "SIGSTOP past the command timeout with a batch in flight: every caller of the batch gets a typed Timeout in time",
    () =>
      Effect.gen(function*() {
        const server = yield* RedisServer.make()
        const B = TokenBucket.make<string>(freshNamespace(), 5, Rate.make(1, "1 hour"))
        yield* Effect.gen(function*() {
          expect(yield* B.acquire("warm", 1)).toEqual(Allowed({ remaining: 4 }))
          process.kill(server.pid, "SIGSTOP")
          const started = performance.now()
          // The first goes alone; the 19 made while it is in flight go as one batch.
          const exits = yield* Effect.all(Array.from({ length: 20 }, (_, i) => Effect.exit(B.acquire(`n${i}`, 1))), {
            concurrency: "unbounded"
          })
          const surfaced = performance.now() - started
          process.kill(server.pid, "SIGCONT")
          for (const exit of exits) {
            expect(failureOf(exit)).toMatchObject({
              _tag: "RedisError",
              reason: "Timeout",
              operation: "script TokenBucket.acquire"
            })
          }
          expect(surfaced).toBeGreaterThanOrEqual(390)
          expect(surfaced).toBeLessThan(400 + 200)
        }).pipe(Effect.provide(Redis.layer({ url: server.url, commandTimeout: "400 millis" })))
      }).pipe(Effect.scoped),
    20_000
  )

  it.live(
    "SIGSTOP past the command timeout: a typed Timeout in time; after SIGCONT the timed-out acquire turns out to have run",
    () =>
      Effect.gen(function*() {
        const server = yield* RedisServer.make()
        const B = TokenBucket.make<string>(freshNamespace(), 5, Rate.make(1, "1 hour"))
        yield* Effect.gen(function*() {
          expect(yield* B.acquire("a", 1)).toEqual(Allowed({ remaining: 4 }))
          process.kill(server.pid, "SIGSTOP")
          const started = performance.now()
          const exit = yield* Effect.exit(B.acquire("a", 1))
          const surfaced = performance.now() - started
          // Stopped a while longer than the timeout, then resumed.
          yield* Effect.sleep("200 millis")
          process.kill(server.pid, "SIGCONT")
          expect(failureOf(exit)).toMatchObject({
            _tag: "RedisError",
            reason: "Timeout",
            operation: "script TokenBucket.acquire"
          })
          expect(surfaced).toBeGreaterThanOrEqual(390)
          expect(surfaced).toBeLessThan(400 + 200)
          // What the caller cannot conclude from a Timeout: that nothing was taken. The script sat in the
          // socket buffer and ran when the server woke: two tokens are gone, not one.
          expect(yield* B.peek("a")).toBe(3)
          expect(yield* B.acquire("a", 1)).toEqual(Allowed({ remaining: 2 }))
        }).pipe(Effect.provide(Redis.layer({ url: server.url, commandTimeout: "400 millis" })))
      }).pipe(Effect.scoped),
    20_000
  )

  it.live(
    "a connection reset while the reply is in flight: a typed Timeout, never re-sent, so charged exactly once",
    () =>
      Effect.gen(function*() {
        const server = yield* RedisServer.make()
        const relay = yield* resettingRelay(server.port)
        const B = TokenBucket.make<string>(freshNamespace(), 5, Rate.make(1, "1 hour"))
        yield* Effect.gen(function*() {
          expect(yield* B.acquire("a", 1)).toEqual(Allowed({ remaining: 4 }))
          relay.arm()
          const started = performance.now()
          const error = failureOf(yield* Effect.exit(B.acquire("a", 1)))
          const surfaced = performance.now() - started
          expect(relay.resets()).toBe(1)
          // The reply was lost; the command is never sent again (autoResendUnfulfilledCommands: false).
          expect(error).toMatchObject({ _tag: "RedisError", reason: "Timeout" })
          expect(surfaced).toBeLessThan(400 + 200)
          const { value } = yield* recovered(B.acquire("a", 1), 5000)
          // It ran once on the server (4 → 3), and the next acquire takes the third token: 2 left, not 1.
          expect(value).toEqual(Allowed({ remaining: 2 }))
        }).pipe(Effect.provide(Redis.layer({ url: `redis://127.0.0.1:${relay.port}`, commandTimeout: "400 millis" })))
        // Straight to the server: the bucket holds exactly what the three acquires that ran took.
        const direct = new IORedis(server.url)
        yield* Effect.addFinalizer(() => Effect.sync(() => direct.disconnect()))
        expect(yield* B.peek("a").pipe(Effect.provide(Redis.layerClient(direct)))).toBe(2)
      }).pipe(Effect.scoped),
    20_000
  )

  it.live(
    "a stall under a blocked at-least-once receiver: shorter than the TTL it recovers; longer, it fails typed and a new receiver loses nothing",
    () =>
      Effect.gen(function*() {
        const server = yield* RedisServer.make()
        const Msg = Schema.Number
        // The TTL leaves the first stall (600 ms) a margin of seconds even on a loaded machine.
        const ttl = 2500
        const P = Pipe.make<string, number>(freshNamespace(), Msg, `${ttl} millis`)
        const layer = Layer.fresh(Redis.layer({ url: server.url, commandTimeout: "300 millis" }))
        const received: Array<number> = []
        /** Whether a client of the server waits in a BLMOVE now (CLIENT LIST's `cmd`). */
        const blockedInBlmove = Effect.map(
          Effect.flatMap(Redis.Redis, (redis) => redis.command("CLIENT", ["LIST"])),
          (list) => String(list).includes("cmd=blmove")
        )
        yield* Effect.gen(function*() {
          const receiving = yield* Effect.fork(
            P.receive("p", { delivery: "at-least-once" }).pipe(
              Stream.runForEach((n) => Effect.sync(() => received.push(n)))
            )
          )
          /** Waits until `done`, failing at once (with why) if the receiver has ended meanwhile. */
          const until = (done: () => boolean, what: string) =>
            Effect.gen(function*() {
              while (!done()) {
                const ended = receiving.unsafePoll()
                if (ended !== null) {
                  const how = Exit.isFailure(ended) ? Cause.pretty(ended.cause) : "with no error"
                  return yield* Effect.dieMessage(`the receiver ended before ${what}: ${how}`)
                }
                yield* Effect.sleep("10 millis")
              }
            })
          yield* P.send("p", 0)
          yield* until(() => received.length >= 1, "the first message")
          // As below: the stall starts once the receiver waits in its BLMOVE, which has no command timeout; a
          // FETCH caught by it would fail on its own (on a loaded machine the receiver may still be in one).
          while (!(yield* blockedInBlmove)) yield* Effect.sleep("10 millis")
          // A stall of 600 ms, longer than the command timeout, shorter than the TTL: renewals may time
          // out, but one is confirmed within the TTL, so the stream goes on.
          process.kill(server.pid, "SIGSTOP")
          yield* Effect.sleep("600 millis")
          process.kill(server.pid, "SIGCONT")
          for (let i = 1; i <= 50; i++) yield* P.send("p", i)
          yield* until(() => received.length >= 51, "51 messages, after a stall shorter than the TTL")
          expect(received).toEqual(Array.from({ length: 51 }, (_, i) => i))
          // A stall of a TTL and a second: the receiver cannot confirm its lease and fails, typed. It
          // starts once the receiver waits in its BLMOVE (the FETCH that acknowledges message 50 has returned):
          // a FETCH caught by the stall would fail on its command timeout instead, a RedisError of its own.
          while (!(yield* blockedInBlmove)) yield* Effect.sleep("10 millis")
          process.kill(server.pid, "SIGSTOP")
          const stalled = performance.now()
          const exit = yield* Fiber.await(receiving)
          const failedAfter = performance.now() - stalled
          yield* Effect.sleep(Math.max(0, ttl + 1000 - failedAfter))
          process.kill(server.pid, "SIGCONT")
          const error = failureOf(exit)
          expect(error).toMatchObject({ _tag: "PipeBusy", reason: "Lost" })
          // Unconfirmed for a TTL after the last renewal, then the release's two calls, each bounded by
          // the command timeout, before the stream's end is seen.
          expect(failedAfter).toBeLessThan(ttl + 2 * 300 + 300)
          // Nothing is lost: messages sent after the stall all reach the next receiver, in order.
          for (let i = 51; i <= 100; i++) yield* P.send("p", i)
          yield* P.close("p")
          const rest = yield* P.receive("p", { delivery: "at-least-once" }).pipe(Stream.runCollect)
          const all = [...received, ...Chunk.toArray(rest)]
          expect([...new Set(all)].sort((a, b) => a - b)).toEqual(Array.from({ length: 101 }, (_, i) => i))
          console.info(
            `pipe stall: ${error._tag}${"reason" in error ? ` (${String(error.reason)})` : ""} after ${
              failedAfter.toFixed(0)
            } ms; ` +
              `${Chunk.size(rest)} received by the next receiver, ${all.length - 101} repeated`
          )
        }).pipe(Effect.provide(layer))
      }).pipe(Effect.scoped),
    30_000
  )

  it.live(
    "maxmemory with noeviction reached: the limiter fails with OutOfMemory, and reset (DEL) still works",
    () =>
      Effect.gen(function*() {
        const server = yield* RedisServer.make()
        const raw = new IORedis(server.url)
        yield* Effect.addFinalizer(() => Effect.sync(() => raw.disconnect()))
        const B = TokenBucket.make<string>(freshNamespace(), 5, Rate.make(1, "1 hour"))
        yield* Effect.gen(function*() {
          expect(yield* B.acquire("a", 2)).toEqual(Allowed({ remaining: 3 }))
          // Fill memory first, then lower maxmemory: the deterministic order.
          yield* Effect.promise(() => raw.set("filler", "x".repeat(1 << 20)))
          yield* Effect.promise(() => raw.config("SET", "maxmemory-policy", "noeviction"))
          yield* Effect.promise(() => raw.config("SET", "maxmemory", "1"))
          expect(failureOf(yield* Effect.exit(B.acquire("b", 1)))).toMatchObject({
            _tag: "RedisError",
            reason: "OutOfMemory"
          })
          expect(yield* B.reset("a")).toBe(true)
          expect(yield* B.peek("a")).toBe(5)
        }).pipe(Effect.provide(Redis.layer({ url: server.url })))
      }).pipe(Effect.scoped),
    20_000
  )

  for (
    const [policy, expected] of [
      ["fail-closed", { 503: 8 }],
      ["fail-open", { 200: 8 }],
      // The fallback limits in the proxy's own memory meanwhile: a fresh bucket of 5.
      ["fallback", { 200: 5, 429: 3 }]
    ] as const
  ) {
    it.live(
      `the HTTP proxy with Redis killed mid-run, --on-store-failure ${policy}: the statuses the docs state`,
      () =>
        Effect.gen(function*() {
          const server = yield* RedisServer.make()
          const origin = yield* Effect.acquireRelease(
            Effect.promise(() => upstream((_, res) => res.end("ok"))),
            (u) => Effect.promise(() => u.close())
          )
          const proxy = yield* Effect.acquireRelease(
            Effect.promise(() =>
              startProxy([
                "--upstream",
                origin.url,
                "--redis",
                server.url,
                "--on-store-failure",
                policy,
                "--capacity",
                "5",
                "--refill",
                "1/1h",
                "--store-timeout",
                "300ms"
              ])
            ),
            (p) => Effect.promise(() => (p.child.kill("SIGTERM"), p.exited))
          )
          const tally = async () => {
            const counts: Record<number, number> = {}
            for (let i = 0; i < 8; i++) {
              const { status } = await request(proxy.port)
              counts[status] = (counts[status] ?? 0) + 1
            }
            return counts
          }
          // On Redis: 5 allowed, then denied.
          expect(yield* Effect.promise(tally)).toEqual({ 200: 5, 429: 3 })
          process.kill(server.pid, "SIGKILL")
          const during = yield* Effect.promise(tally)
          console.info(`proxy with Redis killed, ${policy}: ${JSON.stringify(during)}`)
          expect(during).toEqual(expected)
        }).pipe(Effect.scoped),
      30_000
    )
  }

  it.live(
    "the HTTP proxy logs an outage twice (gone, back), not per request, with the reason and the URL masked",
    () =>
      Effect.gen(function*() {
        const password = "Outage-S3cret"
        const args = ["--requirepass", password]
        const server = yield* RedisServer.make({ args })
        const url = `redis://:${password}@127.0.0.1:${server.port}`
        const origin = yield* Effect.acquireRelease(
          Effect.promise(() => upstream((_, res) => res.end("ok"))),
          (u) => Effect.promise(() => u.close())
        )
        const proxy = yield* Effect.acquireRelease(
          Effect.promise(() =>
            startProxy(["--upstream", origin.url, "--redis", url, "--capacity", "1000", "--store-timeout", "300ms"])
          ),
          (p) => Effect.promise(() => (p.child.kill("SIGTERM"), p.exited))
        )
        let output = ""
        proxy.child.stdout?.on("data", (chunk: Buffer) => (output += chunk.toString()))
        proxy.child.stderr?.on("data", (chunk: Buffer) => (output += chunk.toString()))
        const statuses = (n: number) =>
          Effect.promise(async () => {
            const seen = new Set<number>()
            for (let i = 0; i < n; i++) seen.add((await request(proxy.port)).status)
            return [...seen]
          })
        // Requests until one has reached Redis: the proxy's client is ready (on a loaded machine it may not
        // be within the store timeout of its start, which is an outage of its own, logged before the kill).
        const raw = yield* Effect.acquireRelease(
          Effect.sync(() => new IORedis(server.port, "127.0.0.1", { password })),
          (client) => Effect.sync(() => client.disconnect())
        )
        const started = performance.now()
        while ((yield* Effect.promise(() => raw.dbsize())) === 0 && performance.now() - started < 15_000) {
          expect(yield* statuses(1)).toEqual([200])
        }
        expect(yield* statuses(10)).toEqual([200])
        const before = output.length
        process.kill(server.pid, "SIGKILL")
        // 40 requests while Redis is down, decided by the fallback.
        expect(yield* statuses(40)).toEqual([200])
        yield* RedisServer.make({ port: server.port, args })
        // Until a request reaches Redis again (the client reconnects with a backoff of its own).
        const restarted = performance.now()
        while (!output.slice(before).includes("answers again") && performance.now() - restarted < 15_000) {
          expect(yield* statuses(1)).toEqual([200])
          yield* Effect.sleep("25 millis")
        }
        expect(yield* statuses(10)).toEqual([200])
        proxy.child.kill("SIGTERM")
        yield* Effect.promise(() => proxy.exited)
        // Log entries (Effect's pretty logger): a head line, then the annotations indented.
        const entries = output.slice(before).split(/\n(?=\S)/).filter((entry) =>
          entry.includes("the rate limiter's store")
        )
        console.info(`outage log:\n${entries.join("\n")}`)
        expect(entries, output).toHaveLength(2)
        // The first failure: a call refused, or one whose reply the kill lost, which times out.
        // The socket's words: the kill reset the connection, or a reconnection was refused, or (ioredis) a call
        // came while the closed socket was not yet replaced.
        const lost = `(connect ECONNREFUSED 127\\.0\\.0\\.1:${server.port}|read ECONNRESET|` +
          "the connection to the server was lost|Stream isn't writeable and enableOfflineQueue options is false)"
        const reason = `(Connection: ${lost}|Timeout: Command timed out after 300 ms \\(the connection: ${lost}\\))`
        expect(entries[0]).toMatch(
          new RegExp(
            `^\\[[\\d:.]+\\] WARN \\(#\\d+\\): wakuwaku/http: the rate limiter's store failed \\(${reason}\\); ` +
              "the local fallback decides until it answers\n"
          )
        )
        expect(entries[1]).toMatch(
          new RegExp(
            `^\\[[\\d:.]+\\] INFO \\(#\\d+\\): wakuwaku/http: the rate limiter's store answers again, after ` +
              `\\d+ failed calls \\(${reason}\\)\n`
          )
        )
        for (const entry of entries) {
          expect(entry).toContain(`\n  ratelimit.store: redis://***@127.0.0.1:${server.port}\n`)
        }
        expect(output).not.toContain(password)
      }).pipe(Effect.scoped),
    45_000
  )

  // Last in the file (tests in a file run in order): every fault above has ended, and nothing of them
  // still runs. Fibers forked into a scope (renewals, receivers, sweeps) are roots while they live.
  it.effect("no fiber outlives the faults: only this test's own fiber is left", () =>
    Effect.gen(function*() {
      const roots = yield* Fiber.roots
      expect(roots.length).toBe(1)
    }))
})
