import { describe, expect, it } from "@effect/vitest"
import { Effect, Exit, Scope } from "effect"
import { Redis as IORedis } from "ioredis"
import { spawn } from "node:child_process"
import { createServer } from "node:net"
import { createInterface } from "node:readline"
import { RedisServer } from "wakuwaku/testing"
import { nodeArgs } from "./support/spawn.js"

const alive = (pid: number) => {
  try {
    process.kill(pid, 0)
    return true
  } catch {
    return false
  }
}

/** Waits, in steps of 10 ms for at most `ms`, until process `pid` is gone. */
const gone = (pid: number, ms: number) =>
  Effect.gen(function*() {
    for (let waited = 0; waited < ms; waited += 10) {
      if (!alive(pid)) return true
      yield* Effect.sleep("10 millis")
    }
    return !alive(pid)
  })

describe("RedisServer", () => {
  it.live("starts on a free loopback port, answers, and stops when its scope closes", () =>
    Effect.gen(function*() {
      const scope = yield* Scope.make()
      const server = yield* Scope.extend(RedisServer.make(), scope)
      expect(server.host).toBe("127.0.0.1")
      expect(server.url).toBe(`redis://127.0.0.1:${server.port}`)
      const client = new IORedis(server.url)
      expect(yield* Effect.promise(() => client.config("GET", "save"))).toEqual(["save", ""])
      expect(yield* Effect.promise(() => client.config("GET", "appendonly"))).toEqual(["appendonly", "no"])
      client.disconnect()
      yield* Scope.close(scope, Exit.void)
      expect(alive(server.pid)).toBe(false)
    }))

  it.live("dies with the process that started it, even when that process is SIGKILLed", () =>
    Effect.gen(function*() {
      const child = spawn(process.execPath, nodeArgs("test/support/orphan.ts"), {
        stdio: ["ignore", "pipe", "inherit"]
      })
      const pid = yield* Effect.async<number>((resume) => {
        createInterface({ input: child.stdout }).once("line", (line) => resume(Effect.succeed(Number(line))))
      })
      expect(alive(pid)).toBe(true)
      child.kill("SIGKILL")
      expect(yield* gone(pid, 2000)).toBe(true)
    }))

  it.live("a fixed port that is taken fails with StartFailed, saying so", () =>
    Effect.gen(function*() {
      const blocker = createServer()
      const port = yield* Effect.async<number>((resume) => {
        blocker.listen(0, "127.0.0.1", () => {
          const address = blocker.address()
          resume(Effect.succeed(typeof address === "object" && address ? address.port : 0))
        })
      })
      const error = yield* Effect.flip(Effect.scoped(RedisServer.make({ port })))
      blocker.close()
      expect(error).toBeInstanceOf(RedisServer.RedisServerError)
      expect(error.reason).toBe("StartFailed")
      expect(error.message).toContain("Address already in use")
    }))

  it.live("a missing binary fails with NotInstalled", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(Effect.scoped(RedisServer.make({ binary: "no-such-redis-server" })))
      expect(error).toMatchObject({ _tag: "RedisServerError", reason: "NotInstalled" })
      expect(error.message).toContain("apt-get install redis-server")
    }))
})
