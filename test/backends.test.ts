/** The harness itself: each block of `forEachBackend` really runs on its own backend. */
import { Effect, Exit } from "effect"
import { expect } from "vitest"
import { command, forEachBackend } from "./support/backends.js"

forEachBackend("the test harness", (it, backend) => {
  it.effect("the block's service is its backend's (INFO exists only on Redis)", () =>
    Effect.gen(function*() {
      const exit = yield* Effect.exit(command("INFO", "server"))
      expect(Exit.isSuccess(exit)).toBe(backend.name === "Redis")
    }))
})
