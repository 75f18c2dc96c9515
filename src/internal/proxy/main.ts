/**
 * @internal `wakuwaku proxy`: builds the limiter, the store and the proxy (`Proxy.layer`) from a checked
 * configuration, and runs them.
 */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Cause from "effect/Cause"
import * as Console from "effect/Console"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Runtime from "effect/Runtime"
import type * as Scope from "effect/Scope"
import { Redis as IORedis } from "ioredis"
import * as ClientIp from "../../ClientIp.js"
import * as FixedWindow from "../../FixedWindow.js"
import * as Proxy from "../../Proxy.js"
import * as Rate from "../../Rate.js"
import * as RateLimit from "../../RateLimit.js"
import * as Redis from "../../Redis.js"
import * as TokenBucket from "../../TokenBucket.js"
import { toMillis } from "../duration.js"
import type { Config } from "./cli.js"
import { demoUpstream } from "./demo.js"

/** @internal A URL as it may be printed, logged or put on a span: its userinfo (a password) replaced by `***`. */
export const redact = (url: string): string => {
  try {
    const parsed = new URL(url)
    if (parsed.username === "" && parsed.password === "") return url
    return url.replace(/^([a-z][a-z0-9+.-]*:\/\/)[^@/]*@/i, "$1***@")
  } catch {
    return url.replace(/\/\/[^@/]*@/, "//***@")
  }
}

/** @internal A failure as one line. */
const oneLine = (cause: Cause.Cause<unknown>): string => {
  const error = Cause.squash(cause)
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

/** @internal The rate limit of a configuration; throws on options the structures reject. */
export const rateLimitOf = (config: Config) => {
  const limiter: RateLimit.Limiter<TokenBucket.Requirements<"write"> | FixedWindow.Requirements<"write">> =
    config.limiter.algorithm === "token-bucket"
      ? TokenBucket.make<string>(
        config.namespace,
        config.limiter.capacity,
        Rate.make(config.limiter.refill.tokens, config.limiter.refill.period)
      )
      : FixedWindow.make<string>(config.namespace, config.limiter.limit, config.limiter.window)
  const ip = ClientIp.resolve({ trustedProxies: config.trustedProxies, ipv6Prefix: config.ipv6Prefix })
  const key = config.key._tag === "ip" ? ip : Proxy.header(config.key.name, { orElse: ip })
  const onStoreFailure = config.onStoreFailure === "fallback"
    ? RateLimit.fallback({ maxEntries: config.maxEntries })
    : config.onStoreFailure
  return { limiter, key, onStoreFailure, rememberDenials: config.rememberDenials }
}

/** @internal The proxy's layer; throws on options the structures or the proxy reject. */
export const build = (config: Config, upstream: string) =>
  Proxy.layer({
    upstream,
    timeout: config.timeout,
    trustedProxies: config.trustedProxies,
    port: config.port,
    host: config.host,
    shutdownTimeout: config.shutdownTimeout,
    rateLimit: rateLimitOf(config)
  })

/**
 * A Redis that need not answer at start (`fallback`, `fail-open`): the client keeps reconnecting in the
 * background, and while it is down every command fails at once (no offline queue), so the policy decides
 * without waiting. Logs when it is down at start and when it answers.
 */
const resilientStore = (config: Config, url: string) =>
  Effect.gen(function*() {
    const timeout = toMillis(config.storeTimeout)
    const runtime = yield* Effect.runtime<never>()
    const client = yield* Effect.acquireRelease(
      Effect.sync(() => {
        const client = new IORedis(url, {
          lazyConnect: true,
          enableOfflineQueue: false,
          maxRetriesPerRequest: 1,
          autoResendUnfulfilledCommands: false,
          connectTimeout: timeout,
          commandTimeout: timeout
        })
        client.on("error", () => {})
        return client
      }),
      (client) =>
        Effect.promise(() => client.quit().catch(() => "OK")).pipe(
          Effect.timeout("1 second"),
          Effect.ignore,
          Effect.ensuring(Effect.sync(() => client.disconnect()))
        )
    )
    const answered = yield* Effect.promise(() => client.connect().then(() => true, () => false)).pipe(
      Effect.timeout(Duration.millis(timeout)),
      Effect.catchAll(() => Effect.succeed(false))
    )
    const shown = redact(url)
    if (!answered) {
      yield* Effect.logWarning(
        `wakuwaku proxy: Redis at ${shown} does not answer; applying --on-store-failure ${config.onStoreFailure} ` +
          "until it does"
      )
      client.once("ready", () =>
        Runtime.runFork(runtime)(
          Effect.logInfo(`wakuwaku proxy: Redis at ${shown} answers; limits are shared again`)
        ))
    }
    return {
      layer: Redis.layerClient(client),
      line: `Redis at ${shown}, on failure: ${config.onStoreFailure}${
        answered ? "" : ` (NOT ANSWERING at start: ${config.onStoreFailure} applies until it does)`
      }`
    }
  })

/** The store, and its line in the banner. Under fail-closed a Redis that does not answer fails the start. */
const storeOf = (
  config: Config
): Effect.Effect<
  { readonly layer: Layer.Layer<Redis.ReadWrite>; readonly line: string },
  Redis.RedisError,
  Scope.Scope
> => {
  if (config.redis === undefined) {
    return Effect.succeed({
      layer: Redis.layerMemory({ store: Redis.makeMemoryStore({ maxKeys: config.maxEntries }) }),
      line: "embedded (this process only; --redis URL or REDIS_URL to share limits)"
    })
  }
  const url = config.redis
  if (config.onStoreFailure !== "fail-closed") return resilientStore(config, url)
  return Effect.map(
    Layer.build(Redis.layer({ url, commandTimeout: config.storeTimeout, connectTimeout: config.storeTimeout })),
    (context) => ({
      layer: Layer.succeedContext(context),
      line: `Redis at ${redact(url)}, on failure: ${config.onStoreFailure}`
    })
  )
}

const program = (config: Config, limiter: string) =>
  Effect.scoped(Effect.gen(function*() {
    const upstream = config.upstream._tag === "Url" ? config.upstream.url : yield* demoUpstream
    const store = yield* storeOf(config)
    const context = yield* Layer.build(build(config, upstream).pipe(Layer.provide(store.layer)))
    const { port } = Context.get(context, Proxy.Server).address
    const wildcard = config.host === undefined || config.host === "0.0.0.0" || config.host === "::"
    const shown = wildcard ? "localhost" : config.host!.includes(":") ? `[${config.host}]` : config.host!
    const base = `${shown}:${port}`
    yield* Console.log(
      [
        `wakuwaku proxy listening on http://${base}${wildcard ? " (every interface)" : ""}`,
        `  upstream: ${upstream}${config.upstream._tag === "Demo" ? " (the built-in demo upstream)" : ""}, timeout ${
          Duration.format(config.timeout)
        }`,
        `  limit:    ${limiter}`,
        `  store:    ${store.line}`,
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
  try {
    // Checks the options now (the structures and the proxy throw on bad ones), not when the first request comes.
    if (config.upstream._tag === "Url") build(config, config.upstream.url)
    else rateLimitOf(config)
  } catch (error) {
    process.stderr.write(`wakuwaku proxy: ${error instanceof Error ? error.message : String(error)}\n`)
    process.exitCode = 2
    return
  }
  program(config, describeLimiter(config)).pipe(
    Effect.tapErrorCause((cause) =>
      Cause.isInterruptedOnly(cause) ? Effect.void : Console.error(`wakuwaku proxy: ${oneLine(cause)}`)
    ),
    NodeRuntime.runMain({ disableErrorReporting: true })
  )
}
