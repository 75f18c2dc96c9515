/**
 * Crash claims across OS processes: a receiver in at-least-once mode is SIGKILLed in the middle of a
 * handler, twice (once where the test chooses, once wherever it happens to be), and a third one runs to
 * the end. Nothing is lost, the order holds, and the only duplicates are messages that Redis held in
 * flight at a kill.
 */
import { Effect, Fiber, Schema } from "effect"
import { Redis as IORedis } from "ioredis"
import { type ChildProcessWithoutNullStreams, spawn } from "node:child_process"
import { createInterface } from "node:readline"
import { fileURLToPath } from "node:url"
import { afterAll, describe, expect, it } from "vitest"
import { Pipe } from "wakuwaku"
import { freshNamespace, RedisLive, redisUrl } from "./support/redis.js"
import { nodeArgs } from "./support/spawn.js"

/**
 * Bundled here, before the test: bundling blocks this thread for a second or more (longer under CI's load),
 * and in the test it stopped the sender's heartbeat long enough for the waiting messages to expire.
 */
const receiverArgs = nodeArgs(fileURLToPath(new URL("./support/pipeReceiver.ts", import.meta.url)))
const raw = new IORedis(redisUrl)
afterAll(() => raw.quit())

const MESSAGES = 400
/** Long enough that this thread or a receiver starved of CPU by the rest of the suite still beats and renews. */
const TTL = 2000
/** How long a receiver may go without the line awaited before the test fails, saying where it stopped. */
const STALL = 40_000

/** A receiver process, its stdout lines (awaitable), and its exit. */
const start = (args: ReadonlyArray<string | number>) => {
  const child: ChildProcessWithoutNullStreams = spawn(
    process.execPath,
    [...receiverArgs, ...args.map(String)],
    { stdio: ["pipe", "pipe", "pipe"] }
  )
  let stderr = ""
  child.stderr.on("data", (chunk) => (stderr += chunk))
  const waiting: Array<{ readonly test: (line: string) => boolean; readonly resolve: () => void }> = []
  createInterface({ input: child.stdout }).on("line", (line) => {
    for (const w of [...waiting]) {
      if (w.test(line)) {
        waiting.splice(waiting.indexOf(w), 1)
        w.resolve()
      }
    }
  })
  // "close", not "exit": it comes once stdout has ended, so every line the process printed has been seen.
  const exited = new Promise<number | null>((resolve) => child.on("close", (code) => resolve(code)))
  let last = "(none)"
  createInterface({ input: child.stdout }).on("line", (line) => (last = line))
  return {
    line: (test: (line: string) => boolean) => {
      let timer: ReturnType<typeof setTimeout> | undefined
      return Promise.race([
        new Promise<void>((resolve) => waiting.push({ test, resolve })),
        exited.then((code) => Promise.reject(new Error(`receiver exited ${code}: ${stderr}`))),
        new Promise<never>((_, reject) => {
          timer = setTimeout(() => reject(new Error(`receiver stalled ${STALL} ms after the line ${last}`)), STALL)
        })
      ]).finally(() => clearTimeout(timer))
    },
    kill: async () => {
      child.kill("SIGKILL")
      await exited
    },
    finished: async () => {
      const code = await exited
      if (code !== 0) throw new Error(`receiver exited ${code}: ${stderr}`)
    }
  }
}

const numbers = async (key: string) => (await raw.lrange(key, 0, -1)).map(Number)

describe("Pipe across OS processes", () => {
  it(
    "at-least-once: receivers SIGKILLed mid-handler lose nothing; the duplicates are only the in-flight ones",
    async () => {
      const ns = freshNamespace()
      const name = "jobs"
      const inflightKey = `@@wakuwaku:Pipe:{${ns}:${name}}:inflight`
      const P = Pipe.make<string, { readonly n: number }>(ns, Schema.Struct({ n: Schema.Number }), TTL)
      const run = <A, E>(effect: Effect.Effect<A, E, Pipe.Requirements>) =>
        effect.pipe(Effect.provide(RedisLive), Effect.runPromise)
      // Every message waits in Redis from the start, kept there by the sender's heartbeat (a receiver
      // process takes longer than a TTL to start), beating from before the first send so that no gap
      // lets them expire; the pipe is closed once the last one is being handled.
      const heartbeat = Effect.runFork(Pipe.heartbeat(P, name, "200 millis").pipe(Effect.provide(RedisLive)))
      await run(Effect.gen(function*() {
        for (let n = 0; n < MESSAGES; n++) yield* P.send(name, { n })
      }))

      const inFlightAtKill: Array<Array<string>> = []
      const killAfter = async (receiver: ReturnType<typeof start>, reached: Promise<void>, pause: number) => {
        await reached
        if (pause > 0) await new Promise((resolve) => setTimeout(resolve, pause))
        await receiver.kill()
        inFlightAtKill.push(await raw.lrange(inflightKey, 1, -1))
      }

      // 1. Killed where we choose: stalled in the handler of message 100.
      const first = start([redisUrl, ns, name, TTL, `${ns}:1`, 100])
      await killAfter(first, first.line((l) => l === "started 100"), 0)
      expect(inFlightAtKill[0]).toEqual([`{"n":100}`])

      // 2. Killed wherever it is, a few milliseconds after it got going again (it first waits for the
      //    dead receiver's lease to run out).
      const second = start([redisUrl, ns, name, TTL, `${ns}:2`, -1])
      await killAfter(second, second.line((l) => l === "started 150"), 7)

      // 3. Runs to the end.
      const third = start([redisUrl, ns, name, TTL, `${ns}:3`, -1])
      await third.line((l) => l === `started ${MESSAGES - 1}`)
      // Awaited from before the close: the receiver may print it and exit before the close's reply arrives.
      const done = third.line((l) => l === "done")
      await run(P.close(name))
      await done
      await third.finished()
      await Effect.runPromise(Fiber.interrupt(heartbeat))

      const started = [
        await numbers(`${ns}:1:started`),
        await numbers(`${ns}:2:started`),
        await numbers(`${ns}:3:started`)
      ]
      const finished = [
        await numbers(`${ns}:1:finished`),
        await numbers(`${ns}:2:finished`),
        await numbers(`${ns}:3:finished`)
      ]
      const all = Array.from({ length: MESSAGES }, (_, n) => n)

      // Zero lost: every message's handler finished in some run.
      expect([...new Set(finished.flat())].sort((a, b) => a - b)).toEqual(all)
      // In order: each restart began with the message the killed run had in flight.
      expect(started[0]).toEqual(all.slice(0, 101))
      expect(started[1]![0]).toBe(100)
      const runs = started.flat()
      expect(runs.filter((n, i) => i === 0 || runs[i - 1] !== n)).toEqual(all)
      // The duplicates are only messages Redis held in flight when a receiver was killed: at most one a kill.
      const duplicates = runs.filter((n, i) => i > 0 && runs[i - 1] === n)
      const inFlight = inFlightAtKill.flat().map((payload) => (JSON.parse(payload) as { n: number }).n)
      expect(inFlightAtKill.every((items) => items.length <= 1)).toBe(true)
      expect(duplicates).toContain(100)
      expect(duplicates.every((n) => inFlight.includes(n))).toBe(true)
      expect(runs).toHaveLength(MESSAGES + duplicates.length)
      console.info(
        `${MESSAGES} messages, 2 kills: in flight at the kills ${JSON.stringify(inFlight)}, duplicates ${
          JSON.stringify(duplicates)
        }`
      )
      await raw.del(
        `${ns}:1:started`,
        `${ns}:2:started`,
        `${ns}:3:started`,
        `${ns}:1:finished`,
        `${ns}:2:finished`,
        `${ns}:3:finished`
      )
    },
    // Three receiver processes start one after another, each waiting out its predecessor's lease.
    120_000
  )
})
