/**
 * The batcher inside the Redis service (src/internal/client/batch.ts), with a recording `send` in place of
 * a server: what goes into one call of the batch script, and that an interrupted call is left out whichever
 * way interruption is detected (asking the fiber at flush time, or the canceler fallback).
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Either, Exit, Fiber, type Scheduler } from "effect"
import { Script } from "wakuwaku"
import * as batch from "../src/internal/client/batch.js"

const immediate: Scheduler.Scheduler = { scheduleTask: (task) => task(), shouldYield: () => false }

/** Replies with its calls' own ARGV (after the shared ones): each call sees the reply that is its own. */
const ECHO = Script.make({
  name: "test.echo",
  keys: 1,
  lua: "return ARGV[2]",
  decode: (reply) => typeof reply === "string" ? Either.right(reply) : Either.left("a string"),
  many: { lua: "return ARGV", shared: 1 }
})

const recorder = () => {
  const sent: Array<{ script: string; keys: ReadonlyArray<string>; args: ReadonlyArray<string> }> = []
  const send: batch.SendScript = (script, keys, args, settle) => {
    sent.push({ script: script.name, keys, args })
    const own = script.variadic ? args.slice(script.shared) : [args[1]!]
    setTimeout(() => settle({ reply: script.variadic ? own : own[0] }), 1)
  }
  return { sent, send }
}

const modes = [
  ["asking the fiber", undefined],
  ["the canceler fallback", (_: unknown): _ is never => false]
] as const

describe("the batcher", () => {
  for (const [mode, ask] of modes) {
    it.effect(`calls of one turn go in one call, shared ARGV once; an interrupted one is left out (${mode})`, () =>
      Effect.gen(function*() {
        const { send, sent } = recorder()
        const on = ask === undefined ? batch.make(send, () => false, false) : batch.make(send, () => false, false, ask)
        const call = (key: string, shape: string, own: string) =>
          Effect.withFiberRuntime<unknown, never>((fiber, status) =>
            Effect.orDie(on(fiber, status, ECHO as Script.Script<unknown>, [key], [shape, own]))
          )
        const [a, b, c, d] = yield* Effect.all([
          Effect.fork(call("k1", "S", "1")),
          Effect.fork(call("k2", "S", "2")),
          Effect.fork(call("k3", "S", "3")),
          Effect.fork(call("k4", "T", "4"))
        ])
        expect(yield* Fiber.interrupt(b)).toSatisfy(Exit.isInterrupted)
        expect(yield* Fiber.join(a)).toBe("1")
        expect(yield* Fiber.join(c)).toBe("3")
        expect(yield* Fiber.join(d)).toBe("4")
        expect(sent).toEqual([
          // Equal shared ARGV go together, once; the interrupted call is not in the batch.
          { script: "test.echoMany", keys: ["k1", "k3"], args: ["S", "1", "3"] },
          // A batch of one goes as the script itself, with its whole ARGV.
          { script: "test.echo", keys: ["k4"], args: ["T", "4"] }
        ])
      }).pipe(Effect.withScheduler(immediate)))
  }
})
