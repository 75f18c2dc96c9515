/**
 * The docs' functions behave as the docs say when the layer is provided once, at the program's edge, as
 * README's "Provide a layer once" asks. Each block is loaded from its page as a module (the text
 * docs.test.ts type-checks), its functions are run many times under one layer, and the limit they
 * document holds: which it cannot if a function provides a layer of its own per call (a fresh memory
 * store per call never limits; a client per call is a connection per call).
 */
import { it as effectIt } from "@effect/vitest"
import { Effect, Exit, Fiber, Logger, Option, TestClock } from "effect"
import { Redis as IORedis } from "ioredis"
import { randomBytes } from "node:crypto"
import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { pathToFileURL } from "node:url"
import { afterAll, describe, expect, it } from "vitest"
import type { Lock, Pipe, Semaphore } from "wakuwaku"
import { Redis } from "wakuwaku"
import { RedisServer } from "wakuwaku/testing"
import { fencedBlocks } from "./support/npm.js"
import { ROOT } from "./support/proxy.js"

const TMP = join(ROOT, "test", ".docs-tmp", `layers-${process.pid}-${randomBytes(4).toString("hex")}`)
mkdirSync(TMP, { recursive: true })
afterAll(() => rmSync(TMP, { recursive: true, force: true }))

/** The one top-level ```ts block of `page` that holds `marker`, loaded as a module. */
const load = async (page: string, marker: string): Promise<unknown> => {
  const found = fencedBlocks(readFileSync(join(ROOT, page), "utf8"), "ts").filter((code) => code.includes(marker))
  if (found.length !== 1) throw new Error(`${page}: ${found.length} blocks hold ${JSON.stringify(marker)}`)
  const file = join(TMP, `${page.replace(/\W+/g, "-")}-${randomBytes(3).toString("hex")}.ts`)
  writeFileSync(file, found[0]!)
  return import(/* @vite-ignore */ pathToFileURL(file).href)
}

/** Runs `effect` with a logger that keeps each message's text, and succeeds with those texts. */
const logsOf = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.gen(function*() {
    const messages: Array<string> = []
    const logger = Logger.make(({ message }) =>
      messages.push(Array.isArray(message) ? message.map(String).join(" ") : String(message))
    )
    yield* Effect.provide(effect, Logger.replace(Logger.defaultLogger, logger))
    return messages
  })

type Verdict = { readonly _tag: "Proceed" } | { readonly _tag: "TooManyRequests" }

const tokenBucket = (await load("docs/token-bucket.md", "export const attemptsLeft")) as {
  readonly checkLogin: (address: string) => Effect.Effect<Verdict, unknown, Redis.ReadWrite>
  readonly attemptsLeft: (address: string) => Effect.Effect<number, unknown, Redis.ReadOnly>
}

describe("docs/token-bucket.md, Usage: checkLogin and attemptsLeft under one layer", () => {
  it("25 logins on one Redis.layerMemory(): 20 proceed, 5 are refused; attemptsLeft reads the same bucket: 0", async () => {
    const { attemptsLeft, checkLogin } = tokenBucket
    const program = Effect.gen(function*() {
      const verdicts: Array<string> = []
      for (let i = 0; i < 25; i++) verdicts.push((yield* checkLogin("203.0.113.7"))._tag)
      return { verdicts, left: yield* attemptsLeft("203.0.113.7"), other: yield* attemptsLeft("198.51.100.4") }
    })
    expect(await Effect.runPromise(program.pipe(Effect.provide(Redis.layerMemory())))).toEqual({
      verdicts: [...Array<string>(20).fill("Proceed"), ...Array<string>(5).fill("TooManyRequests")],
      left: 0,
      other: 20
    })
  })

  it("README's warning holds: provided per call, Redis.layerMemory() is a fresh store each time: 25 calls, 0 denied", async () => {
    const perCall = (address: string) => tokenBucket.checkLogin(address).pipe(Effect.provide(Redis.layerMemory()))
    const verdicts = await Effect.runPromise(Effect.forEach(Array.from({ length: 25 }, () => "203.0.113.7"), perCall))
    expect(verdicts.filter((verdict) => verdict._tag === "TooManyRequests")).toEqual([])
  })

  it("50 logins at once on one Redis.layer: one connection, the calls batched; a layer per call: 50 of each", async () => {
    const stats = async (client: IORedis) => ({
      connections: Number(/total_connections_received:(\d+)/.exec(await client.info("stats"))?.[1]),
      scriptCalls: Number(/cmdstat_evalsha:calls=(\d+)/.exec(await client.info("commandstats"))?.[1] ?? 0)
    })
    const addresses = Array.from({ length: 50 }, (_, i) => `203.0.113.${i % 5}`)
    // A server of its own: other test files cannot add to its counters.
    const measured = Effect.scoped(Effect.gen(function*() {
      const server = yield* RedisServer.make()
      // 50 clients connecting at once on a busy machine may take longer than the default 2 s: what is
      // counted here is connections, not how fast they come.
      const options = { url: server.url, connectTimeout: "30 seconds" } as const
      const inspector = yield* Effect.acquireRelease(
        Effect.promise(async () => {
          const client = new IORedis(server.url)
          await client.ping()
          return client
        }),
        (client) => Effect.promise(() => client.quit())
      )
      const counted = <A, E>(effect: Effect.Effect<ReadonlyArray<A>, E>) =>
        Effect.gen(function*() {
          const before = yield* Effect.promise(() => stats(inspector))
          const results = yield* effect
          const after = yield* Effect.promise(() => stats(inspector))
          return {
            calls: results.length,
            connections: after.connections - before.connections,
            scriptCalls: after.scriptCalls - before.scriptCalls
          }
        })
      const once = yield* counted(
        Effect.forEach(addresses, tokenBucket.checkLogin, { concurrency: "unbounded" }).pipe(
          Effect.provide(Redis.layer(options))
        )
      )
      const perCall = yield* counted(
        Effect.forEach(
          addresses,
          (address) => tokenBucket.checkLogin(address).pipe(Effect.provide(Redis.layer(options))),
          { concurrency: "unbounded" }
        )
      )
      return { once, perCall }
    }))
    const { once, perCall } = await Effect.runPromise(measured)
    expect({ calls: once.calls, connections: once.connections }).toEqual({ calls: 50, connections: 1 })
    // Concurrent calls on one connection go as one call of the batch script: fewer calls than logins.
    expect(once.scriptCalls).toBeLessThan(50)
    expect(perCall).toEqual({ calls: 50, connections: 50, scriptCalls: 50 })
  })
})

const semaphore = (await load("docs/semaphore.md", "export const exportFor")) as {
  readonly EXPORTS: Semaphore.Semaphore<string>
  readonly exportFor: (tenant: string) => Effect.Effect<void, never, Redis.ReadWrite>
}

describe("docs/semaphore.md, Scoped use: exportFor under one layer", () => {
  effectIt.effect(
    "with 5 exports running, exportFor waits its 30 seconds and gives up; with 4, it runs",
    () =>
      Effect.gen(function*() {
        const { EXPORTS, exportFor } = semaphore
        const held = yield* Effect.forEach([1, 2, 3, 4, 5], () => EXPORTS.tryAcquire("tenant-42"))
        expect(held.every(Option.isSome)).toBe(true)

        const waiting = yield* Effect.fork(logsOf(exportFor("tenant-42")))
        yield* TestClock.adjust("30 seconds")
        expect(yield* Fiber.join(waiting)).toEqual(["5 exports already running for tenant-42"])

        yield* EXPORTS.release(Option.getOrThrow(held[0]!))
        expect(yield* logsOf(exportFor("tenant-42"))).toEqual(["exporting for tenant-42"])
      }).pipe(Effect.provide(Redis.layerMemory()))
  )
})

type Order = { readonly sku: string }
const pipes = (await load("docs/pipes.md", "export const consume")) as {
  readonly ORDERS: Pipe.Pipe<number, Order>
  readonly consume: (shop: number) => Effect.Effect<void, never, Redis.ReadWrite>
}

describe("docs/pipes.md, at-least-once: consume under one layer", () => {
  it("receives what was sent on the same store, in order, and ends when the sender closes", async () => {
    const { consume, ORDERS } = pipes
    const program = Effect.gen(function*() {
      yield* ORDERS.send(42, { sku: "tea" })
      yield* ORDERS.send(42, { sku: "cups" })
      yield* ORDERS.close(42)
      return yield* logsOf(consume(42))
    })
    expect(await Effect.runPromise(program.pipe(Effect.provide(Redis.layerMemory())))).toEqual([
      "shipping tea",
      "shipping cups"
    ])
  })
})

const locks = (await load("docs/locks.md", "export const nightly")) as {
  readonly JOBS: Lock.Lock<string>
  readonly nightly: Effect.Effect<void, never, Redis.ReadWrite>
}

describe("docs/locks.md, Scoped use: nightly under one layer", () => {
  it("runs when the lock is free, and goes on when another replica holds it", async () => {
    const { JOBS, nightly } = locks
    const program = Effect.gen(function*() {
      const first = yield* logsOf(nightly)
      const other = yield* JOBS.tryLock("nightly-invoices")
      return { first, held: Option.isSome(other), second: yield* logsOf(nightly) }
    })
    const exit = await Effect.runPromiseExit(program.pipe(Effect.provide(Redis.layerMemory())))
    expect(exit).toEqual(Exit.succeed({
      first: ["sending invoices"],
      held: true,
      second: ["another replica is sending them"]
    }))
  })
})
