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
    testTimeout: 30_000,
    hookTimeout: 30_000,
    typecheck: {
      include: ["test/**/*.test-d.ts"],
      tsconfig: "./tsconfig.json"
    }
  }
})
