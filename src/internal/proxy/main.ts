/**
 * @internal `wakuwaku proxy`: builds the limiter, the store and the proxy from a checked configuration, and runs
 * them.
 */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as HttpMiddleware from "@effect/platform/HttpMiddleware"
import * as HttpServer from "@effect/platform/HttpServer"
import * as Cause from "effect/Cause"
import * as Console from "effect/Console"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as FixedWindow from "../../FixedWindow.js"
import * as Proxy from "../../Proxy.js"
import * as Rate from "../../Rate.js"
import * as RateLimit from "../../RateLimit.js"
import * as Redis from "../../Redis.js"
import * as TokenBucket from "../../TokenBucket.js"
import type { Config } from "./cli.js"
import { demoUpstream } from "./demo.js"

/** @internal A failure as one line. */
const oneLine = (cause: Cause.Cause<unknown>): string => {
  const error = Cause.squash(cause)
  if (typeof error === "object" && error !== null && "_tag" in error && error._tag === "ServeError") {
    const inner = (error as { readonly cause?: unknown }).cause
    return `cannot listen: ${inner instanceof Error ? inner.message : String(inner)}`
  }
  const message = error instanceof Error ? error.message : String(error)
  return message.split("\n")[0] ?? message
}

const describeLimiter = (config: Config): string => {
  const { limiter } = config
  const who = config.key._tag === "ip" ? "per client IP" : `per ${config.key.name} header (client IP without it)`
  const policy = limiter.algorithm === "token-bucket"
    ? `token bucket "${config.namespace}": burst ${limiter.capacity}, ${limiter.refill.tokens} per ${
      Duration.format(limiter.refill.period)
    }`
    : `fixed window "${config.namespace}": ${limiter.limit} per ${Duration.format(limiter.window)}`
  const trust = typeof config.trustedProxies === "number"
    ? config.trustedProxies > 0 ? `, behind ${config.trustedProxies} trusted proxies` : ""
    : config.trustedProxies.length > 0
    ? `, trusting X-Forwarded-For from ${config.trustedProxies.join(", ")}`
    : ""
  return `${policy}, ${who}${trust}`
}

/** @internal The proxy's layer and what to print about it; throws on options the structures reject. */
export const build = (config: Config) => {
  const limiter: RateLimit.Limiter<TokenBucket.Requirements<"write"> | FixedWindow.Requirements<"write">> =
    config.limiter.algorithm === "token-bucket"
      ? TokenBucket.make<string>(
        config.namespace,
        config.limiter.capacity,
        Rate.make(config.limiter.refill.tokens, config.limiter.refill.period)
      )
      : FixedWindow.make<string>(config.namespace, config.limiter.limit, config.limiter.window)
  const ip = RateLimit.clientIp({ trustedProxies: config.trustedProxies, ipv6Prefix: config.ipv6Prefix })
  const key = config.key._tag === "ip" ? ip : RateLimit.header(config.key.name, { orElse: ip })
  const onStoreFailure = config.onStoreFailure === "fallback"
    ? RateLimit.fallback({ maxEntries: config.maxEntries })
    : config.onStoreFailure
  const store = config.redis === undefined
    ? Redis.layerMemory({ store: Redis.makeMemoryStore({ maxKeys: config.maxEntries }) })
    : Redis.layer({ url: config.redis, commandTimeout: config.storeTimeout, connectTimeout: config.storeTimeout })
  const proxy = (upstream: string) =>
    Proxy.make({ upstream, timeout: config.timeout, trustedProxies: config.trustedProxies }).pipe(
      RateLimit.middleware({ limiter, key, onStoreFailure })
    )
  // Checks the upstream now (it throws on a bad one), not when the first request comes.
  if (config.upstream._tag === "Url") proxy(config.upstream.url)
  const serve = (upstream: string) =>
    Proxy.serve(proxy(upstream), {
      port: config.port,
      host: config.host,
      shutdownTimeout: config.shutdownTimeout
    }).pipe(
      Layer.provide(store),
      // The CLI installs no tracer, so the server's span per request (attributes for every header, the
      // URL parsed) would be made for nothing.
      HttpMiddleware.withTracerDisabledWhen(() => true)
    )
  return { serve, limiter: describeLimiter(config) }
}

const program = (config: Config, built: ReturnType<typeof build>) =>
  Effect.scoped(Effect.gen(function*() {
    const upstream = config.upstream._tag === "Url" ? config.upstream.url : yield* demoUpstream
    const context = yield* Layer.build(built.serve(upstream))
    const address = Context.get(context, HttpServer.HttpServer).address
    const port = address._tag === "TcpAddress" ? address.port : 0
    const wildcard = config.host === undefined || config.host === "0.0.0.0" || config.host === "::"
    const shown = wildcard ? "localhost" : config.host!.includes(":") ? `[${config.host}]` : config.host!
    const base = `${shown}:${port}`
    yield* Console.log(
      [
        `wakuwaku proxy listening on http://${base}${wildcard ? " (every interface)" : ""}`,
        `  upstream: ${upstream}${config.upstream._tag === "Demo" ? " (the built-in demo upstream)" : ""}, timeout ${
          Duration.format(config.timeout)
        }`,
        `  limit:    ${built.limiter}`,
        `  store:    ${
          config.redis === undefined
            ? "embedded (this process only; --redis URL or REDIS_URL to share limits)"
            : `Redis at ${config.redis}, on failure: ${config.onStoreFailure}`
        }`,
        "",
        "Try it: a burst of 25 requests from one address; past the limit the proxy answers 429.",
        `  for i in $(seq 25); do curl -s -o /dev/null -w '%{http_code}\\n' ${base}/; done`,
        `  curl -i ${base}/hello`,
        "Responses the proxy makes itself (429, 502, 504) carry Proxy-Status: wakuwaku; error=…",
        "Stop with Ctrl-C (SIGINT) or SIGTERM.",
        ""
      ].join("\n")
    )
    return yield* Effect.never
  }))

/** @internal Runs `wakuwaku proxy` until SIGINT or SIGTERM. Bad options: one line on stderr, exit code 2. */
export const run = (config: Config): void => {
  let built: ReturnType<typeof build>
  try {
    built = build(config)
  } catch (error) {
    process.stderr.write(`wakuwaku proxy: ${error instanceof Error ? error.message : String(error)}\n`)
    process.exitCode = 2
    return
  }
  program(config, built).pipe(
    Effect.tapErrorCause((cause) =>
      Cause.isInterruptedOnly(cause) ? Effect.void : Console.error(`wakuwaku proxy: ${oneLine(cause)}`)
    ),
    NodeRuntime.runMain({ disableErrorReporting: true })
  )
}
