import { fileURLToPath } from "node:url"
import { defineConfig } from "vitest/config"

export default defineConfig({
  resolve: {
    alias: [
      { find: /^wakuwaku$/, replacement: fileURLToPath(new URL("./src/index.ts", import.meta.url)) },
      { find: /^wakuwaku\/(.*)$/, replacement: fileURLToPath(new URL("./src/$1.ts", import.meta.url)) }
    ]
  },
  test: {
    include: ["test/**/*.test.ts"],
    globalSetup: ["test/support/globalSetup.ts"],
    // Most files wait on servers and child processes, not on this process's CPU: vitest's default of one
    // worker per core but one (a single worker on 2 cores) ran them one after another.
    maxWorkers: 4,
    minWorkers: 1,
    testTimeout: 30_000,
    hookTimeout: 30_000
  }
})
