import { describe, expect, it } from "@effect/vitest"
import { Config, ConfigProvider, Effect, Exit, Layer, Redacted, Schema, Scope } from "effect"
import { Redis as IORedis } from "ioredis"
import { createServer, type Server, type Socket } from "node:net"
import { inspect } from "node:util"
import { Rate, Redis, TokenBucket } from "wakuwaku"
import { RedisServer } from "wakuwaku/testing"
import { freshNamespace, redisUrl } from "./support/redis.js"

const bucket = () => TokenBucket.make<string>(freshNamespace(), 5, Rate.perSecond(1))

const PASSWORD = "Hunter2-right"
const WRONG = "Hunter2-wrong"
const ENCODE = "percent-encode a password's / ? # and @ (%2F %3F %23 %40)"

const failureOf = <A, E>(exit: Exit.Exit<A, E>): E => {
  if (Exit.isSuccess(exit)) throw new Error("expected a failure")
  const failure = exit.cause._tag === "Fail" ? exit.cause.error : undefined
  if (failure === undefined) throw new Error(`expected a typed failure, got ${exit.cause._tag}`)
  return failure
}

/** A TCP port that accepts connections and never answers: what a hung server looks like. */
const silentServer = Effect.acquireRelease(
  Effect.async<{ server: Server; sockets: Set<Socket>; port: number }>((resume) => {
    const sockets = new Set<Socket>()
    // It reads (and drops) what it is sent, so it sees the client close.
    const server = createServer((socket) => {
      sockets.add(socket)
      socket.resume()
    })
    server.listen(0, "127.0.0.1", () => {
      const address = server.address()
      resume(Effect.succeed({ server, sockets, port: typeof address === "object" && address ? address.port : 0 }))
    })
  }),
  ({ server, sockets }) =>
    Effect.async<void>((resume) => {
      for (const socket of sockets) socket.destroy()
      server.close(() => resume(Effect.void))
    })
)

/** A port nothing listens on. */
const closedPort = Effect.map(silentServer, ({ port }) => port).pipe(Effect.scoped)

describe("Redis", () => {
  it.live("an unreachable server fails the layer with a typed RedisError, at once", () =>
    Effect.gen(function*() {
      const port = yield* closedPort
      const started = performance.now()
      const exit = yield* Effect.exit(
        bucket().acquire("a", 1).pipe(Effect.provide(Redis.layer({ url: `redis://127.0.0.1:${port}` })))
      )
      const error = failureOf(exit)
      expect(error).toBeInstanceOf(Redis.RedisError)
      expect(error).toMatchObject({ _tag: "RedisError", reason: "Connection", operation: "connect" })
      // The socket's own words, not ioredis's "Connection is closed.".
      expect(error.message).toBe(`Redis connect failed (Connection): connect ECONNREFUSED 127.0.0.1:${port}`)
      expect((error.cause as { code?: string }).code).toBe("ECONNREFUSED")
      expect(performance.now() - started).toBeLessThan(1000)
    }))

  it.live("a server that accepts but never answers fails within the configured timeouts, not a hang", () =>
    Effect.gen(function*() {
      const { port } = yield* silentServer
      const started = performance.now()
      const exit = yield* Effect.exit(
        bucket().acquire("a", 1).pipe(
          Effect.provide(
            Redis.layer({
              url: `redis://127.0.0.1:${port}`,
              connectTimeout: "300 millis",
              commandTimeout: "300 millis"
            })
          )
        )
      )
      const elapsed = performance.now() - started
      expect(failureOf(exit)).toMatchObject({ _tag: "RedisError", reason: "Connection", operation: "connect" })
      expect(failureOf(exit).message).toBe(
        "Redis connect failed (Connection): connect ETIMEDOUT: not ready within 300 ms"
      )
      expect(elapsed).toBeGreaterThanOrEqual(290)
      expect(elapsed).toBeLessThan(1000)
    }).pipe(Effect.scoped))

  it.live("a server that stops answering mid-run gives a typed Timeout within commandTimeout, then recovers", () =>
    Effect.gen(function*() {
      const server = yield* RedisServer.make()
      const B = bucket()
      const layer = Redis.layer({ url: server.url, commandTimeout: "400 millis" })
      yield* Effect.gen(function*() {
        expect(yield* B.acquire("a", 1)).toEqual(TokenBucket.Admission.Allowed({ remaining: 4 }))
        process.kill(server.pid, "SIGSTOP")
        const started = performance.now()
        const exit = yield* Effect.exit(B.acquire("a", 1))
        const elapsed = performance.now() - started
        process.kill(server.pid, "SIGCONT")
        expect(failureOf(exit)).toMatchObject({
          _tag: "RedisError",
          reason: "Timeout",
          operation: "script TokenBucket.acquire"
        })
        expect(elapsed).toBeGreaterThanOrEqual(390)
        expect(elapsed).toBeLessThan(1000)
        // The connection is still usable once the server answers again.
        const next = yield* B.acquire("a", 1)
        expect(next._tag).toBe("Allowed")
      }).pipe(Effect.provide(layer))
    }).pipe(Effect.scoped))

  it.live("scripts survive SCRIPT FLUSH: EVALSHA falls back to EVAL on NOSCRIPT", () =>
    Effect.gen(function*() {
      const B = bucket()
      const redis = yield* Redis.Redis
      expect(yield* B.acquire("a", 1)).toEqual(TokenBucket.Admission.Allowed({ remaining: 4 }))
      expect(yield* redis.command("SCRIPT", ["FLUSH"])).toBe("OK")
      expect(yield* B.acquire("a", 1)).toEqual(TokenBucket.Admission.Allowed({ remaining: 3 }))
      expect(yield* B.acquire("a", 1)).toEqual(TokenBucket.Admission.Allowed({ remaining: 2 }))
      // A server of its own: SCRIPT FLUSH empties the cache of every client of a server.
    }).pipe(Effect.provide(RedisServer.layer())))

  it.live("closing the scope quits within quitTimeout, even when the server does not answer", () =>
    Effect.gen(function*() {
      const server = yield* RedisServer.make()
      const scope = yield* Scope.make()
      const context = yield* Layer.buildWithScope(Redis.layer({ url: server.url, quitTimeout: "300 millis" }), scope)
      expect(yield* bucket().acquire("a", 1).pipe(Effect.provide(context))).toEqual(
        TokenBucket.Admission.Allowed({ remaining: 4 })
      )
      process.kill(server.pid, "SIGSTOP")
      const started = performance.now()
      yield* Scope.close(scope, Exit.void)
      const elapsed = performance.now() - started
      process.kill(server.pid, "SIGCONT")
      expect(elapsed).toBeGreaterThanOrEqual(290)
      expect(elapsed).toBeLessThan(1500)
    }).pipe(Effect.scoped))

  it.live("a layer build that is interrupted while connecting leaves no client behind", () =>
    Effect.gen(function*() {
      const { port, sockets } = yield* silentServer
      const exit = yield* Effect.exit(
        bucket().acquire("a", 1).pipe(
          Effect.provide(Redis.layer({ url: `redis://127.0.0.1:${port}`, connectTimeout: "10 seconds" })),
          Effect.timeout("200 millis")
        )
      )
      expect(failureOf(exit)).toMatchObject({ _tag: "TimeoutException" })
      // The client's socket closes: nothing keeps reconnecting.
      yield* Effect.promise(() =>
        Promise.all([...sockets].map((socket) =>
          new Promise((resolve) => socket.closed ? resolve(0) : socket.once("close", resolve))
        ))
      )
      expect([...sockets].every((socket) =>
        socket.closed
      )).toBe(true)
    }).pipe(Effect.scoped))

  it.live("reasons: a script failure is Script, a write to a replica is ReadOnly, a full server is OutOfMemory", () =>
    Effect.gen(function*() {
      const primary = yield* RedisServer.make()
      const replica = yield* RedisServer.make({ args: ["--replicaof", "127.0.0.1", String(primary.port)] })
      const B = bucket()
      const raw = new IORedis(primary.url)
      yield* Effect.addFinalizer(() => Effect.sync(() => raw.disconnect()))
      // A key of the wrong type where the bucket should be.
      yield* Effect.promise(() => raw.hset(`@@wakuwaku:TokenBucket:${B.namespace}:hash`, "f", "v"))
      const onPrimary = <A, E>(effect: Effect.Effect<A, E, TokenBucket.Requirements<"write">>) =>
        effect.pipe(Effect.provide(Redis.layer({ url: primary.url })))
      const script = yield* Effect.flip(onPrimary(B.acquire("hash", 1)))
      expect(script).toMatchObject({ _tag: "RedisError", reason: "Script", operation: "script TokenBucket.acquire" })
      expect(String(script.cause)).toContain("WRONGTYPE")
      // A write forced onto a replica.
      const unchecked = B.acquire("a", 1) as Effect.Effect<TokenBucket.Admission, Redis.RedisError, Redis.Redis>
      const replicaClient = new IORedis(replica.url, { lazyConnect: true })
      yield* Effect.addFinalizer(() => Effect.sync(() => replicaClient.disconnect()))
      const readOnly = yield* Effect.flip(unchecked.pipe(Effect.provide(Redis.layerClient(replicaClient))))
      expect(readOnly).toMatchObject({ _tag: "RedisError", reason: "ReadOnly" })
      expect(readOnly.message).toContain("READONLY You can't write against a read only replica")
      // Over maxmemory, with nothing to evict.
      yield* Effect.promise(() => raw.set("filler", "x".repeat(1 << 20)))
      yield* Effect.promise(() => raw.config("SET", "maxmemory", "1"))
      const oom = yield* Effect.flip(onPrimary(B.acquire("b", 1)))
      expect(oom).toMatchObject({ _tag: "RedisError", reason: "OutOfMemory" })
      expect(oom.message).toContain("OOM command not allowed")
    }).pipe(Effect.scoped))

  describe("the server's or the socket's reason, never ioredis's \"Connection is closed.\"", () => {
    /** A server that wants a password. */
    const guarded = RedisServer.make({ args: ["--requirepass", PASSWORD] })
    const connect = (options: Redis.Options) =>
      Effect.flip(Effect.scoped(Layer.build(Redis.layer({ connectTimeout: "1 second", ...options }))))

    it.live("a wrong password: Authentication, with the server's WRONGPASS, and the password nowhere in the error", () =>
      Effect.gen(function*() {
        const server = yield* guarded
        const error = yield* connect({ url: `redis://:${WRONG}@127.0.0.1:${server.port}` })
        expect(error).toMatchObject({ _tag: "RedisError", reason: "Authentication", operation: "connect" })
        expect(error.message).toBe(
          "Redis connect failed (Authentication): WRONGPASS invalid username-password pair or user is disabled."
        )
        expect((error.cause as Error).message).toBe("WRONGPASS invalid username-password pair or user is disabled.")
        // ioredis's ReplyError keeps the AUTH command, with the password as its argument: not kept here.
        const printed = [inspect(error, { depth: 10 }), JSON.stringify(Schema.encodeSync(Redis.RedisError)(error))]
        for (const text of printed) expect(text).not.toContain(WRONG)
      }).pipe(Effect.scoped))

    it.live("no password: Authentication, with the server's NOAUTH", () =>
      Effect.gen(function*() {
        const server = yield* guarded
        const error = yield* connect({ url: server.url })
        expect(error).toMatchObject({ _tag: "RedisError", reason: "Authentication", operation: "connect" })
        expect(error.message).toBe("Redis connect failed (Authentication): NOAUTH Authentication required.")
      }).pipe(Effect.scoped))

    it.live("a host that does not resolve: Connection, with getaddrinfo's words", () =>
      Effect.gen(function*() {
        const error = yield* connect({ url: "redis://wakuwaku-nowhere.invalid:6379" })
        expect(error).toMatchObject({ _tag: "RedisError", reason: "Connection", operation: "connect" })
        // ENOTFOUND where a resolver answers; EAI_AGAIN on a machine with none.
        expect(error.message).toMatch(
          /^Redis connect failed \(Connection\): getaddrinfo (ENOTFOUND|EAI_AGAIN) wakuwaku-nowhere\.invalid$/
        )
      }))

    it.live("a URL that cannot be used: Url, found before connecting, the URL masked in the message", () =>
      Effect.gen(function*() {
        for (
          const [url, message] of [
            // The password "hun@ter/2": a URL parser takes "hun" for it, "ter" for the host and the rest for the path.
            [`redis://:hun@ter/2@127.0.0.1:6379`, `an @ after the host: ${ENCODE}, got "redis://***@127.0.0.1:6379"`],
            // The password "hun/ter2": no host before the "/", so no URL at all.
            [`redis://:hun/ter2@127.0.0.1:6379`, `not a URL: ${ENCODE}, got "redis://***@127.0.0.1:6379"`],
            [`redis://:hun?ter2@127.0.0.1:6379`, `not a URL: ${ENCODE}, got "redis://***@127.0.0.1:6379"`],
            [
              `http://:hunter2@127.0.0.1:6379`,
              `expected a redis:// or rediss:// URL, got "http://***@127.0.0.1:6379/"`
            ],
            [`redis://:hunter2`, `expected a redis:// or rediss:// URL, got "redis://***"`],
            [
              `redis://:hunter2@127.0.0.1/zero`,
              `expected a database number after the host, such as /0, got ${
                JSON.stringify("redis://***@127.0.0.1/zero")
              }`
            ]
          ] as const
        ) {
          const error = yield* connect({ url: Redacted.make(url) })
          expect(error).toMatchObject({ _tag: "RedisError", reason: "Url", operation: "connect" })
          expect(error.message).toBe(`Redis connect failed (Url): ${message}`)
          expect(inspect(error, { depth: 10 })).not.toMatch(/hun|ter2|ter\//)
        }
      }))

    it.live("a password with an unencoded @ is read as the whole password", () =>
      Effect.gen(function*() {
        const server = yield* RedisServer.make({ args: ["--requirepass", "p@ss"] })
        const admission = yield* bucket().acquire("a", 1).pipe(
          Effect.provide(Redis.layer({ url: `redis://:p@ss@127.0.0.1:${server.port}` }))
        )
        expect(admission).toEqual(TokenBucket.Admission.Allowed({ remaining: 4 }))
      }).pipe(Effect.scoped))

    it.live("layerConfig reads REDIS_URL as a Redacted; a Redacted password beside a URL wins over the URL's", () =>
      Effect.gen(function*() {
        const server = yield* guarded
        const withUrl = ConfigProvider.fromMap(
          new Map([["REDIS_URL", `redis://:${PASSWORD}@127.0.0.1:${server.port}`]])
        )
        expect(
          yield* bucket().acquire("a", 1).pipe(
            Effect.provide(Redis.layerConfig().pipe(Layer.provide(Layer.setConfigProvider(withUrl))))
          )
        ).toEqual(TokenBucket.Admission.Allowed({ remaining: 4 }))
        const beside = ConfigProvider.fromMap(
          new Map([["MY_URL", `redis://:${WRONG}@127.0.0.1:${server.port}`], ["MY_PASSWORD", PASSWORD]])
        )
        const live = Redis.layerConfig({ url: Config.redacted("MY_URL"), password: Config.redacted("MY_PASSWORD") })
        expect(
          yield* bucket().acquire("a", 1).pipe(
            Effect.provide(live.pipe(Layer.provide(Layer.setConfigProvider(beside))))
          )
        ).toEqual(TokenBucket.Admission.Allowed({ remaining: 4 }))
        // A plain string beside the URL wins too (the options' documented order).
        expect(
          yield* bucket().acquire("a", 1).pipe(
            Effect.provide(Redis.layer({ url: `redis://:${WRONG}@127.0.0.1:${server.port}`, password: PASSWORD }))
          )
        ).toEqual(TokenBucket.Admission.Allowed({ remaining: 4 }))
      }).pipe(Effect.scoped))
  })

  it.live("a server error reply is a typed RedisError carrying the command", () =>
    Effect.gen(function*() {
      const redis = yield* Redis.Redis
      const error = yield* Effect.flip(redis.command("NOSUCHCOMMAND", []))
      expect(error).toMatchObject({ _tag: "RedisError", reason: "Server", operation: "NOSUCHCOMMAND" })
      expect(error.message).toContain("unknown command")
    }).pipe(Effect.provide(Redis.layer({ url: redisUrl }))))

  it.live("an owned client quits when its scope closes", () =>
    Effect.gen(function*() {
      const name = `wakuwaku-${freshNamespace()}`
      const clients = () =>
        Effect.flatMap(Redis.Redis, (redis) => redis.command("CLIENT", ["LIST"])).pipe(
          Effect.map((list) => String(list).split("\n").filter((line) => line.includes(`name=${name}`)).length),
          Effect.provide(Redis.layer({ url: redisUrl }))
        )
      yield* Effect.gen(function*() {
        expect(yield* clients()).toBe(1)
      }).pipe(Effect.provide(Redis.layer({ url: redisUrl, connectionName: name })))
      expect(yield* clients()).toBe(0)
    }))

  it.live("layerConfig reads REDIS_URL through Effect Config", () =>
    Effect.gen(function*() {
      const admission = yield* bucket().acquire("a", 5).pipe(
        Effect.provide(
          Redis.layerConfig().pipe(
            Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map([["REDIS_URL", redisUrl]]))))
          )
        )
      )
      expect(admission).toEqual(TokenBucket.Admission.Allowed({ remaining: 0 }))
      const missing = yield* Effect.exit(
        bucket().acquire("a", 1).pipe(
          Effect.provide(
            Redis.layerConfig().pipe(Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map()))))
          )
        )
      )
      expect(failureOf(missing)).toMatchObject({ _tag: "ConfigError" })
    }))

  it.live("layerConfig takes each option as a Config: the URL and the connection name from the provider", () =>
    Effect.gen(function*() {
      const name = `wakuwaku-${freshNamespace()}`
      const provider = ConfigProvider.fromMap(new Map([["MY_REDIS", redisUrl], ["MY_NAME", name]]))
      const live = Redis.layerConfig({ url: Config.string("MY_REDIS"), connectionName: Config.string("MY_NAME") })
      const named = yield* Effect.flatMap(Redis.Redis, (redis) => redis.command("CLIENT", ["LIST"])).pipe(
        Effect.map((list) => String(list).split("\n").filter((line) => line.includes(`name=${name}`)).length),
        Effect.provide(live.pipe(Layer.provide(Layer.setConfigProvider(provider))))
      )
      expect(named).toBe(1)
    }))

  it.live("layerClient adopts a client without owning it", () =>
    Effect.gen(function*() {
      const client = new IORedis(redisUrl)
      try {
        const admission = yield* bucket().acquire("a", 1).pipe(Effect.provide(Redis.layerClient(client)))
        expect(admission).toEqual(TokenBucket.Admission.Allowed({ remaining: 4 }))
        expect(client.status).toBe("ready")
        expect(yield* Effect.promise(() => client.ping())).toBe("PONG")
      } finally {
        client.disconnect()
      }
    }))
})
