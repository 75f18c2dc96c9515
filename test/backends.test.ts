/** The harness itself: each block of `forEachBackend` really runs on its own backend. */
import { Effect, Exit } from "effect"
import { expect } from "vitest"
import { command, forEachBackend } from "./support/backends.js"

forEachBackend("the test harness", (it, backend) => {
  it.effect("the block's service is its backend's (INFO only on servers, CLUSTER INFO only on the cluster)", () =>
    Effect.gen(function*() {
      const info = yield* Effect.exit(command("INFO", "server"))
      expect(Exit.isSuccess(info)).toBe(backend.name !== "memory")
      const cluster = yield* Effect.exit(command("CLUSTER", "INFO"))
      expect(Exit.isSuccess(cluster)).toBe(backend.name === "cluster")
    }))
})
