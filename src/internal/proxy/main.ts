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
import * as Metric from "effect/Metric"
import * as Runtime from "effect/Runtime"
import type * as Scope from "effect/Scope"
import * as ClientIp from "../../ClientIp.js"
import * as Proxy from "../../Proxy.js"
import * as RateLimit from "../../RateLimit.js"
import * as Redis from "../../Redis.js"
import * as failure from "../http/failure.js"
import type { AnyRequirements } from "../limiter.js"
import { acquireTolerant } from "../redis.js"
import { mask } from "../url.js"
import * as admin from "./admin.js"
import { type Config, parse } from "./cli.js"
import type * as configFile from "./config.js"
import { describeRoute } from "./config.js"
import { demoUpstream } from "./demo.js"
import * as fleet from "./fleet.js"
import * as reload from "./reload.js"
import * as server from "./server.js"
import { hostForUrl, parseUpstream, upstreamPath } from "./target.js"
import * as workers from "./workers.js"

/**
 * @internal Why the start failed, as one line. A port in use says which and how to choose another: the
 * usual reason is a second `npm start`, or another server on 8080.
 */
export const startFailure = (cause: Cause.Cause<unknown>): string => {
  const error = Cause.squash(cause)
  if (error instanceof Proxy.ListenError && (error.cause as { readonly code?: unknown }).code === "EADDRINUSE") {
    const where = error.host === undefined ? `port ${error.port}` : `${hostForUrl(error.host)}:${error.port}`
    return `cannot listen on ${where}: the port is already in use (EADDRINUSE); choose another with --port ` +
      "(0 picks a free one)"
  }
  const message = error instanceof Error ? error.message : String(error)
  return message.split("\n")[0] ?? message
}

const describeLimiter = (config: Config): string => {
  const { limiter } = config
  const who = config.key._tag === "ip" ? "per client IP" : `per ${config.key.name} header (client IP without it)`
  const policy = `${limiter.title} "${config.namespace}": ${limiter.summary}`
  const trust = typeof config.trustedProxies === "number"
    ? config.trustedProxies > 0 ? `, behind ${config.trustedProxies} trusted proxies` : ""
    : config.trustedProxies.length > 0
    ? `, trusting X-Forwarded-For from ${config.trustedProxies.join(", ")}`
    : ""
  const { maxWait } = config.defaultRoute
  const delay = maxWait === undefined
    ? ""
    : `; over the rate a request waits its turn up to ${Duration.format(maxWait)} (at most ${config.maxWaiting} ` +
      "waiting)"
  return `${policy}, ${who}${trust}${delay}`
}

/**
 * Values made once per definition for the life of the process (limiters, keys, a fallback): a reload that leaves a
 * route as it was then gives the proxy the very same values, by which it knows to keep that route's state
 * (./reload.ts). Limiters and keys are immutable; the map grows only by the definitions ever loaded.
 */
const made = new Map<string, unknown>()

/** The value made of definition `id`, made by `make` the first time. */
const once = <A>(id: string, make: () => A): A => {
  if (made.has(id)) return made.get(id) as A
  const value = make()
  made.set(id, value)
  return value
}

/** A limiter of `algorithm` named `name`, once per definition. */
const limiterOf = (algorithm: Config["limiter"], name: string): RateLimit.Limiter<AnyRequirements> =>
  once(
    `limiter ${algorithm.algorithm} ${name} ${JSON.stringify(algorithm.params)}`,
    (): RateLimit.Limiter<AnyRequirements> => algorithm.make(name)
  )

/** @internal The rate limit of a configuration; throws on options the structures reject. */
export const rateLimitOf = (config: Config) => {
  const limiter = limiterOf(config.limiter, config.namespace)
  const ip = ipOf(config)
  const by = config.key
  const key = by._tag === "ip"
    ? ip
    : once(`key ${by.name} ${ipId(config)}`, () => Proxy.header(by.name, { orElse: ip }))
  const onStoreFailure = onStoreFailureOf(config)
  const { maxWait } = config.defaultRoute
  const delay = config.defaultRoute.mode === "delay" && maxWait !== undefined ? { maxWait } : undefined
  return { limiter, key, onStoreFailure, rememberDenials: config.rememberDenials, delay }
}

/** What the client's address key depends on. */
const ipId = (config: Config): string => `${JSON.stringify(config.trustedProxies)} ${config.ipv6Prefix}`

/** The client's address as the configuration keys it (its trusted proxies, its IPv6 prefix). */
const ipOf = (config: Config): Proxy.Key =>
  once(
    `ip ${ipId(config)}`,
    (): Proxy.Key => ClientIp.resolve({ trustedProxies: config.trustedProxies, ipv6Prefix: config.ipv6Prefix })
  )

/** The store-failure policy of the configuration, as the proxy's options take it (one fallback for all). */
const onStoreFailureOf = (config: Config): RateLimit.OnStoreFailure =>
  once(
    `failure ${config.onStoreFailure} ${config.maxEntries}`,
    () => failure.toOption(config.onStoreFailure, () => RateLimit.fallback({ maxEntries: config.maxEntries }))
  )

/**
 * The routes of a configuration file as `Proxy.layer` takes them, the file's default route last (it matches
 * every request) when it has limits; none without a file. Limits of one name share one limiter, and keys of one
 * spelling one function, so that a request is keyed once per key.
 */
export const routesOf = (config: Config): ReadonlyArray<Proxy.Route<AnyRequirements>> => {
  if (config.configFile === undefined) return []
  const ip = ipOf(config)
  const keyOf = (parts: ReadonlyArray<configFile.KeyPart>): Proxy.Key =>
    once(`key ${JSON.stringify(parts)} ${ipId(config)}`, (): Proxy.Key => {
      const each = parts.map((part) => part._tag === "ip" ? ip : Proxy.header(part.name, { orElse: ip }))
      // Several parts: one name of every part's value, a line each (no header value holds a line break).
      return each.length === 1 ? each[0]! : (input) => each.map((key) => key(input)).join("\n")
    })
  const limitOf = (limit: configFile.RouteLimit, shadow: boolean): Proxy.RouteLimit<AnyRequirements> => ({
    limiter: limiterOf(limit.algorithm, limit.name),
    key: keyOf(limit.key),
    cost: limit.cost,
    shadow
  })
  const routeOf = (route: configFile.Route): Proxy.Route<AnyRequirements> => ({
    name: route.name,
    match: route.match,
    limits: [...route.limits.map((l) => limitOf(l, false)), ...route.shadow.map((l) => limitOf(l, true))],
    mode: route.mode,
    maxWait: route.maxWait,
    upstream: route.upstream,
    timeout: route.timeout
  })
  const { defaultRoute } = config
  const hasDefault = defaultRoute.limits.length > 0 || defaultRoute.shadow.length > 0
  return [...config.routes, ...(hasDefault ? [defaultRoute] : [])].map(routeOf)
}

/** How each of a table's options is made from the configuration. */
type FromConfig<T> = { readonly [K in keyof T]-?: (config: Config) => T[K] }

/**
 * `Proxy.layer`'s options from the configuration, one row per option: an option added to `Proxy.LayerOptions`
 * is a compile error here until it has its row. The upstream (a URL, or the demo's once it runs) and the rate
 * limit ({@link rateLimitOf}) are given apart.
 */
const LAYER_OPTIONS: FromConfig<Omit<Proxy.LayerOptions<AnyRequirements>, "upstream" | "rateLimit">> = {
  timeout: (config) => config.timeout,
  trustedProxies: (config) => config.trustedProxies,
  port: (config) => config.port,
  host: (config) => config.host,
  shutdownTimeout: (config) => config.shutdownTimeout,
  admin: (config) => config.admin,
  accessLog: (config) => config.accessLog === undefined ? undefined : { format: "json", query: config.accessLog.query },
  maxWaiting: (config) => config.maxWaiting,
  // No flag: the layer's defaults.
  maxHeaderLines: () => undefined,
  requestTimeout: () => undefined,
  routes: routesOf,
  onStoreFailure: (config) => config.configFile === undefined ? undefined : onStoreFailureOf(config),
  rememberDenials: (config) => config.configFile === undefined ? undefined : config.rememberDenials
}

/** The options of `table`, made from `config`. */
const fromConfig = <T>(table: FromConfig<T>, config: Config): T =>
  Object.fromEntries(
    Object.entries<(config: Config) => unknown>(table).map(([name, option]) => [name, option(config)])
  ) as T

/**
 * @internal The proxy's layer; throws on options the structures or the proxy reject. Without a configuration
 * file, its one limit is the flags' (`rateLimit`); with one, the file's routes and default route hold the limits.
 */
export const build = (config: Config, upstream: string) =>
  // A worker of --workers offers its metrics and readiness to the primary, which serves the one admin port.
  server.layerReloadable(layerOptions(config, upstream), workers.isWorker() ? fleet.answer : admin.serve)

/**
 * @internal {@link build}'s options of `Proxy.layer`, forwarding to `upstream`; throws on options the structures
 * reject.
 */
export const layerOptions = (config: Config, upstream: string): Proxy.LayerOptions<AnyRequirements> => ({
  upstream,
  ...fromConfig(LAYER_OPTIONS, config),
  rateLimit: config.configFile === undefined ? rateLimitOf(config) : undefined
})

/**
 * The store, and its line in the banner. A misconfiguration (a refused password, a URL that cannot be
 * used) fails the start under every policy. A Redis that cannot be reached fails it under fail-closed;
 * under fallback and fail-open the proxy starts, and the client keeps reconnecting in the background
 * with no offline queue, so that while it is down every command fails at once and the policy decides
 * without waiting. The decisions log the outage, once when the store fails and once when it answers.
 */
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
  const options = { url: config.redis, commandTimeout: config.storeTimeout, connectTimeout: config.storeTimeout }
  const line = `Redis at ${mask(config.redis)}, on failure: ${config.onStoreFailure}`
  if (failure.POLICIES[config.onStoreFailure].needsStoreAtStart) {
    return Effect.map(Layer.build(Redis.layer(options)), (context) => ({ layer: Layer.succeedContext(context), line }))
  }
  return Effect.map(acquireTolerant({ ...options, enableOfflineQueue: false }), ({ down, layer }) => ({
    layer,
    line: down === undefined ? line : `${line} (NOT ANSWERING at start: ${causeOf(down)}; ${config.onStoreFailure} ` +
      "applies until it does)"
  }))
}

/** What the server or the socket said. */
const causeOf = (error: Redis.RedisError): string =>
  error.cause instanceof Error ? error.cause.message : String(error.cause)

const program = (config: Config) =>
  Effect.scoped(Effect.gen(function*() {
    const upstream = config.upstream._tag === "Url" ? config.upstream.url : yield* demoUpstream
    const store = yield* storeOf(config)
    // The store's URL, masked, on every log line of the proxy (the outage's two among them).
    const context = yield* Layer.build(build(config, upstream).pipe(Layer.provide(store.layer))).pipe(
      Effect.annotateLogs("ratelimit.store", config.redis === undefined ? "embedded" : mask(config.redis))
    )
    const server = Context.get(context, Proxy.Server)
    yield* onHangup(config, upstream, Context.get(context, reload.Reloader))
    // A worker of --workers tells the primary, which prints one banner for them all.
    yield* workers.listening(
      banner(config, { port: server.address.port, upstream, store: store.line, admin: server.admin })
    )
    return yield* Effect.never
  }))

/** The settings a reload cannot change (the server's and the store's, made once at start), by their flags. */
const RESTART_ONLY: ReadonlyArray<readonly [string, (config: Config) => unknown]> = [
  ["--host", (config) => config.host],
  ["--port", (config) => config.port],
  ["--shutdown-timeout", (config) => Duration.toMillis(config.shutdownTimeout)],
  ["--redis", (config) => config.redis],
  ["--store-timeout", (config) => Duration.toMillis(config.storeTimeout)],
  ["--max-entries", (config) => config.maxEntries],
  ["--upstream", (config) => config.upstream._tag === "Url" ? config.upstream.url : "demo"]
]

/**
 * One reload, on SIGHUP: the command line read again (so the file is), and its configuration swapped in
 * (./reload.ts), or refused with the reason (the file's problems, path-named, or what the proxy rejects), logged
 * and counted. Settings that only a restart changes are named in a warning and keep their running values.
 */
const reloadOnce = (started: Config, upstream: string, reloader: reload.Reloader): Effect.Effect<void> =>
  Effect.suspend(() => {
    const file = started.configFile
    if (file === undefined) {
      return Effect.logInfo("proxy: SIGHUP: no configuration file to read again (--config FILE); nothing changed")
    }
    const refuse = (reason: string) =>
      Effect.zipRight(
        Metric.increment(Metric.tagged(reload.reloads, "result", "refused")),
        Effect.logWarning(`proxy: SIGHUP: ${file} refused, the running configuration stays: ${reason}`)
      )
    const command = parse(process.argv.slice(2), process.env)
    if (command._tag !== "Proxy") {
      return refuse(command._tag === "Invalid" ? command.message.replace(/^wakuwaku proxy: /, "") : command._tag)
    }
    const next = { ...command.config, upstream: started.upstream }
    let kept: ReadonlyArray<string>
    try {
      // The proxy runs its limits on the runtime it was built in, which provides what these need.
      kept = reloader.reload(layerOptions(next, upstream) as Proxy.LayerOptions<never>).kept
    } catch (error) {
      return refuse(error instanceof Error ? error.message : String(error))
    }
    const unchanged = RESTART_ONLY.filter(([, of]) =>
      JSON.stringify(of(started)) !== JSON.stringify(of(command.config))
    )
      .map(([flag]) => flag)
    const routes = next.routes.length
    return Effect.all([
      Metric.increment(Metric.tagged(reload.reloads, "result", "applied")),
      Effect.logInfo(
        `proxy: SIGHUP: ${file} reloaded: ${routes} ${routes === 1 ? "route" : "routes"} and the default route; ` +
          `kept as they were: ${kept.length === 0 ? "none" : kept.join(", ")}`
      ),
      unchanged.length === 0 ? Effect.void : Effect.logWarning(
        `proxy: SIGHUP: ${unchanged.join(", ")} changed in ${file}: only a restart applies ` +
          `${unchanged.length === 1 ? "it" : "them"}; the running ${
            unchanged.length === 1 ? "value stays" : "values stay"
          }`
      )
    ], { discard: true })
  })

/**
 * Reloads on SIGHUP for the scope, one reload at a time (a signal during a reload is served after it). Without a
 * handler, SIGHUP would end the process: with one, it never does.
 */
const onHangup = (started: Config, upstream: string, reloader: reload.Reloader) =>
  Effect.gen(function*() {
    const runFork = Runtime.runFork(yield* Effect.runtime<never>())
    const one = yield* Effect.makeSemaphore(1)
    const reloading = one.withPermits(1)(reloadOnce(started, upstream, reloader))
    const handler = () => void runFork(reloading)
    yield* Effect.acquireRelease(
      Effect.sync(() => process.on("SIGHUP", handler)),
      () => Effect.sync(() => process.off("SIGHUP", handler))
    )
  })

/**
 * @internal What `wakuwaku proxy` prints once it listens: where, in front of what, its limit and store,
 * and how to try it with this configuration: a burst of the limit plus 5, and a request with the URL it
 * is forwarded to.
 */
export const banner = (
  config: Config,
  running: {
    readonly port: number
    readonly upstream: string
    readonly store: string
    readonly admin?: Proxy.Address | undefined
  }
): string => {
  const wildcard = config.host === undefined || config.host === "0.0.0.0" || config.host === "::"
  const base = `${wildcard ? "localhost" : hostForUrl(config.host)}:${running.port}`
  const demo = config.upstream._tag === "Demo"
  const burst = config.limiter.burst + 5
  // The demo upstream answers any path; /hello shows it in its reply. Another upstream gets its root.
  const path = demo ? "/hello" : "/"
  const target = parseUpstream(running.upstream)
  // Quoted when it holds brackets (an IPv6 address), which a shell would read as a glob.
  const url = (p: string) => base.startsWith("[") ? `'${base}${p}'` : `${base}${p}`
  const file = config.configFile
  const limits = file === undefined
    ? [`  limit:    ${describeLimiter(config)}`]
    : [
      `  config:   ${file}`,
      ...[...config.routes, config.defaultRoute].map((route, i) =>
        `${i === 0 ? "  routes:   " : "            "}${describeRoute(route)}`
      )
    ]
  const tryIt = file === undefined
    ? [
      `Try it: a burst of ${burst} requests from one address; past the limit the proxy answers 429.`,
      `  for i in $(seq ${burst}); do curl -s -o /dev/null -w '%{http_code}\\n' ${url("/")}; done`
    ]
    : ["Try it:"]
  return [
    `wakuwaku proxy listening on http://${base}${wildcard ? " (every interface)" : ""}`,
    `  upstream: ${mask(running.upstream)}${demo ? " (the built-in demo upstream)" : ""}, timeout ${
      Duration.format(config.timeout)
    }`,
    ...limits,
    `  store:    ${running.store}`,
    ...(running.admin === undefined ? [] : [admin.bannerLine(running.admin)]),
    ...(config.accessLog === undefined ? [] : [
      `  log:      one JSON line per request on stdout${config.accessLog.query ? ", with its query string" : ""}`
    ]),
    "",
    ...tryIt,
    `  curl -i ${url(path)}    # forwarded to ${target.origin}${upstreamPath(target, path)}`,
    "Responses the proxy makes itself (429, 502, 504) carry Proxy-Status: wakuwaku; error=…",
    "Stop with Ctrl-C (SIGINT) or SIGTERM.",
    ""
  ].join("\n")
}

/** Checks the options now (the structures and the proxy throw on bad ones): the reason, or undefined. */
const refused = (config: Config): string | undefined => {
  try {
    // The demo's upstream is not running yet: any URL checks the rest.
    build(config, config.upstream._tag === "Url" ? config.upstream.url : "http://127.0.0.1:1")
    return undefined
  } catch (error) {
    return error instanceof Error ? error.message : String(error)
  }
}

/**
 * @internal `--check-config FILE`: the configuration checked as the proxy would be made of it; `text` (what
 * the file holds) on stdout and exit code 0, or the reason on stderr and exit code 1.
 */
export const check = (config: Config, text: string): void => {
  const reason = refused(config)
  if (reason === undefined) {
    process.stdout.write(text)
    return
  }
  process.stderr.write(`wakuwaku proxy: ${reason}\n`)
  process.exitCode = 1
}

/**
 * @internal Runs `wakuwaku proxy` until SIGINT or SIGTERM: one process, or with `--workers` above 1 the primary
 * of that many (./workers.ts), each worker running this again. Bad options: one line on stderr, exit code 2.
 */
export const run = (config: Config): void => {
  // Checks the options now (the structures and the proxy throw on bad ones), not when the first request comes.
  const reason = refused(config)
  if (reason !== undefined) {
    process.stderr.write(`wakuwaku proxy: ${reason}\n`)
    process.exitCode = 2
    return
  }
  if (config.workers > 1 && !workers.isWorker()) {
    workers.primary(config).pipe(
      Effect.tapErrorCause((cause) =>
        Cause.isInterruptedOnly(cause) ? Effect.void : Console.error(`wakuwaku proxy: ${workers.primaryFailure(cause)}`)
      ),
      NodeRuntime.runMain({ disableErrorReporting: true })
    )
    return
  }
  program(config).pipe(
    Effect.tapErrorCause((cause) =>
      Cause.isInterruptedOnly(cause) ? Effect.void : Console.error(`wakuwaku proxy: ${startFailure(cause)}`)
    ),
    NodeRuntime.runMain({ disableErrorReporting: true })
  )
}
