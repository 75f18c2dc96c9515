#!/usr/bin/env node
/**
 * The `wakuwaku` command. `wakuwaku proxy --help` lists the flags of the rate-limiting reverse proxy.
 *
 * Flags are read before the server is loaded, so `--help` and bad flags answer at once (bad flags with
 * one line on stderr and exit code 2; a Redis URL that cannot be used, exit code 1). The proxy needs
 * `@effect/platform` and `@effect/platform-node` (optional peers of wakuwaku).
 *
 * @since 0.1.0
 */
import { parse } from "./internal/proxy/cli.js"

const command = parse(process.argv.slice(2), process.env)
switch (command._tag) {
  case "Help": {
    process.stdout.write(command.text)
    break
  }
  case "Invalid": {
    process.stderr.write(`${command.message}\n`)
    process.exitCode = command.code
    break
  }
  case "Proxy":
  case "Check": {
    let main: typeof import("./internal/proxy/main.js")
    try {
      main = await import("./internal/proxy/main.js")
    } catch (error) {
      const code = (error as { readonly code?: unknown }).code
      process.stderr.write(
        code === "ERR_MODULE_NOT_FOUND"
          ? "wakuwaku proxy: needs @effect/platform and @effect/platform-node: " +
            "npm install @effect/platform@~0.97.2 @effect/platform-node@~0.108.2\n"
          : `wakuwaku proxy: ${error instanceof Error ? error.message : String(error)}\n`
      )
      process.exitCode = 1
      break
    }
    if (command._tag === "Check") main.check(command.config, command.text)
    else main.run(command.config)
  }
}
