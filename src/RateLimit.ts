/**
 * RateLimit: a middleware that puts a `TokenBucket` or a `FixedWindow` in front of an `@effect/platform`
 * `HttpApp`. Part of `wakuwaku/http`, which the core never loads.
 *
 * `RateLimit.middleware({ limiter, key, cost, onStoreFailure })(app)` keys each request (by default
 * the client's IP, see {@link ClientIp}), spends `cost` (default 1) from the limiter, and answers:
 *
 * - **Allowed**: the app answers, and its response carries `RateLimit-Policy` and `RateLimit`.
 * - **Denied**: `429 Too Many Requests`, `Retry-After` in whole seconds rounded up (never early), the
 *   same two fields (`r=0`, `t` equal to `Retry-After`), and a short `application/problem+json` body
 *   of the draft's `quota-exceeded` type. The app does not run.
 * - **Cost above the quota** (a token bucket's capacity, a window's limit): `413`, no `Retry-After`
 *   (waiting never helps: split the request), `RateLimit-Policy`, and a problem body naming the cost.
 * - **The store failed** (`RedisError`): what `onStoreFailure` says, an explicit choice with no
 *   default: `"fail-closed"` answers `503`; `"fail-open"` lets the request through (with
 *   `RateLimit-Policy` only); {@link fallback} decides on a local limiter, the same policy on an
 *   embedded memory store capped at `maxEntries` names. Every failure is logged (a warning, per
 *   request) and counted in {@link storeFailures}.
 *
 * **Denial memory** (`rememberDenials: n`, off by default). A denial the store returned is remembered in
 * this process, for the same name and cost, until its `retryAfter`: further requests of that client are
 * answered 429 from memory, with no store call. This changes no decision: a token bucket cannot refill
 * into an earlier allowance, a fixed window's count only grows until it ends, and other replicas can only
 * spend more. The one exception is a `reset` of the name elsewhere, which this process does not see until
 * the remembered denial ends. The memory holds at most `n` names (past it, the one remembered longest ago
 * is dropped); a denial ends no later than the store's and its `Retry-After` is never earlier.
 *
 * **Header fields.** The fields of draft-ietf-httpapi-ratelimit-headers-11 ({@link draft}), Structured
 * Field Lists named by the limiter's namespace: `RateLimit-Policy: "login";q=20;w=60` and
 * `RateLimit: "login";r=19;t=3`. Stacked middlewares each append their item, so a response lists
 * every policy. A token bucket maps to the draft's quota and window as: `q` = capacity, `w` = the
 * seconds to refill it from empty (rounded up), `t` after an allowed request = the seconds until the
 * bucket is full again (rounded up). A fixed window: `q` = limit, `w` = the window, and `t` = `w` after
 * an allowed request (the window ends within it; the decision does not say when).
 *
 * **Requirements stay visible.** The result is an `HttpApp.Default<E | …, R | LR | …>`: the limiter's
 * requirements (`Redis | Write<TokenBucket.Entity>`) join the app's, so a server layer built on it
 * does not compile with only a read-only replica. Never annotate the middleware with the
 * `HttpMiddleware` interface of `@effect/platform`: it returns `HttpApp.Default<any, any>`, which
 * erases `R` and the capability check with it.
 *
 * **Observability.** Each decision increments {@link decisions} (tags `policy`, `decision`) and
 * annotates the current span (the server's request span) with `ratelimit.policy`,
 * `ratelimit.decision`, `ratelimit.cost`, and `ratelimit.remaining` or `ratelimit.retry_after`.
 *
 * **Caveats.**
 * - An app that fails gets the fields on the error response the server makes of its failure (through a
 *   pre-response handler); a surrounding `HttpApp.withPreResponseHandler` scope may drop them.
 * - A key or cost that fails, or a cost that is not a non-negative safe integer (`InvalidInput`),
 *   fails the request in the error channel: nothing is spent.
 * - While the store is down every request waits for the failure, up to the client's
 *   `commandTimeout` (2 s by default): lower it for a limiter in the request path.
 * - The fallback is per process: during an outage each replica grants the whole policy on its own.
 * - A custom header key is whatever the client sends: use one only if something in front
 *   authenticates it, or clients choose their buckets.
 *
 * @example
 * ```ts
 * import * as HttpServer from "@effect/platform/HttpServer"
 * import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
 * import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
 * import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
 * import { Effect, Layer } from "effect"
 * import { createServer } from "node:http"
 * import { Rate, Redis, TokenBucket } from "wakuwaku"
 * import { RateLimit } from "wakuwaku/http"
 *
 * const LOGINS = TokenBucket.make<string>("login", 20, Rate.make(1, "3 seconds"))
 *
 * const limited = RateLimit.middleware({
 *   limiter: LOGINS,
 *   key: RateLimit.clientIp({ trustedProxies: ["10.0.0.0/8"] }),
 *   onStoreFailure: RateLimit.fallback({ maxEntries: 10_000 })
 * })(Effect.succeed(HttpServerResponse.text("welcome")))
 *
 * HttpServer.serve(limited).pipe(
 *   Layer.provide(NodeHttpServer.layer(() => createServer(), { port: 8080 })),
 *   Layer.provide(Redis.layer({ url: "redis://127.0.0.1:6379", commandTimeout: "200 millis" })),
 *   Layer.launch,
 *   NodeRuntime.runMain
 * )
 * ```
 *
 * @since 0.1.0
 */
import type * as HttpApp from "@effect/platform/HttpApp"
import type * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import type * as Duration from "effect/Duration"
import type * as Effect from "effect/Effect"
import type * as Metric from "effect/Metric"
import type * as ClientIp from "./ClientIp.js"
import * as fields from "./internal/http/fields.js"
import * as internal from "./internal/http/rateLimit.js"
import type * as Rate from "./Rate.js"
import type * as Redis from "./Redis.js"
import type * as TokenBucket from "./TokenBucket.js"

/**
 * The draft whose header fields the middleware writes.
 *
 * @since 0.1.0
 * @category constants
 */
export const draft: "draft-ietf-httpapi-ratelimit-headers-11" = fields.DRAFT

/**
 * What the middleware needs of a token bucket: a `TokenBucket<string>`, told apart by its type id
 * (`TokenBucket.isTokenBucket`), so an object of this shape that `TokenBucket.make` did not make is refused.
 *
 * @since 0.1.0
 * @category models
 */
export interface TokenBucketLimiter<R> {
  readonly namespace: string
  readonly capacity: number
  readonly rate: Rate.Rate
  readonly acquire: (
    name: string,
    cost: number
  ) => Effect.Effect<TokenBucket.Admission, Redis.RedisError | Redis.InvalidInput, R>
}

/**
 * What the middleware needs of a fixed window: a `FixedWindow<string>`, told apart by its type id
 * (`FixedWindow.isFixedWindow`).
 *
 * @since 0.1.0
 * @category models
 */
export interface FixedWindowLimiter<R> {
  readonly namespace: string
  readonly limit: number
  readonly window: Duration.Duration
  readonly acquire: (
    name: string,
    cost: number
  ) => Effect.Effect<TokenBucket.Admission, Redis.RedisError | Redis.InvalidInput, R>
}

/**
 * A limiter keyed by strings, needing `R`.
 *
 * @since 0.1.0
 * @category models
 */
export type Limiter<R> = TokenBucketLimiter<R> | FixedWindowLimiter<R>

/**
 * How a request is keyed: a name, or an Effect of one.
 *
 * @since 0.1.0
 * @category models
 */
export type Key<E = never, R = never> = (
  request: HttpServerRequest.HttpServerRequest
) => string | Effect.Effect<string, E, R>

/**
 * What a request costs: a non-negative safe integer, or an Effect of one.
 *
 * @since 0.1.0
 * @category models
 */
export type Cost<E = never, R = never> = (
  request: HttpServerRequest.HttpServerRequest
) => number | Effect.Effect<number, E, R>

/**
 * A bounded local fallback: the same policy decided on an embedded memory store that holds at most
 * `maxEntries` names (past it, expired names are swept, then the oldest evicted, which start afresh).
 * Make it with {@link fallback}.
 *
 * @since 0.1.0
 * @category models
 */
export interface Fallback {
  readonly [FallbackTypeId]: FallbackTypeId
  readonly _tag: "Fallback"
  /** The most names the fallback store holds. */
  readonly maxEntries: number
  /** The fallback's store (its `size` is how many names it holds now). */
  readonly store: Redis.MemoryStore
}

/**
 * @since 0.1.0
 * @category type ids
 */
export const FallbackTypeId: unique symbol = internal.FallbackTypeId

/**
 * @since 0.1.0
 * @category type ids
 */
export type FallbackTypeId = typeof FallbackTypeId

/**
 * What to do when the store fails: `"fail-closed"` (503), `"fail-open"` (let the request through), or a
 * {@link Fallback}.
 *
 * @since 0.1.0
 * @category models
 */
export type OnStoreFailure = "fail-closed" | "fail-open" | Fallback

/**
 * The options of {@link middleware}.
 *
 * @since 0.1.0
 * @category models
 */
export interface Options<LR, KE = never, KR = never, CE = never, CR = never> {
  /** The limiter: a `TokenBucket<string>` or a `FixedWindow<string>`. Its namespace names the policy. */
  readonly limiter: Limiter<LR>
  /** How requests are keyed. Default {@link clientIp}`()`: the socket address, no proxy trusted. */
  readonly key?: Key<KE, KR> | undefined
  /** What a request costs. Default 1. */
  readonly cost?: Cost<CE, CR> | undefined
  /** What to do when the store fails. Required: the choice is the caller's. */
  readonly onStoreFailure: OnStoreFailure
  /**
   * The denial memory: how many names' denials to remember in this process until their `retryAfter`, so
   * that a client over its limit is answered without a store call (see the module doc). Default 0: none.
   */
  readonly rememberDenials?: number | undefined
}

/**
 * A decision, as counted in {@link decisions} and set as the `ratelimit.decision` span attribute.
 * `fallback-*` are the decisions of a {@link Fallback}; `unsplittable` is a cost above the quota.
 *
 * @since 0.1.0
 * @category models
 */
export type Decision =
  | "allowed"
  | "denied"
  | "unsplittable"
  | "fallback-allowed"
  | "fallback-denied"
  | "fallback-unsplittable"
  | "fail-open"
  | "fail-closed"

/**
 * A limiter's policy as the header fields state it.
 *
 * @since 0.1.0
 * @category models
 */
export interface Policy {
  /** The limiter's namespace. */
  readonly name: string
  /** `q`: a token bucket's capacity, a window's limit. */
  readonly quota: number
  /** `w`, whole seconds: the time to refill a token bucket from empty (rounded up), or the window (rounded up). */
  readonly window: Duration.Duration
  /** The `RateLimit-Policy` item, such as `"login";q=20;w=60`. */
  readonly field: string
}

/**
 * The policy of a limiter. Throws a `TypeError` on something that is neither kind of limiter.
 *
 * @since 0.1.0
 * @category policies
 */
export const policy = <R>(limiter: Limiter<R>): Policy => {
  const { field, name, quota, window } = fields.describe(limiter)
  return { name, quota, window, field }
}

/**
 * The rate-limit middleware; see the module doc. The options are checked now (a limiter of neither
 * kind, or an `onStoreFailure` that is not one of the three, throws a `TypeError`). The result keeps
 * the app's `R` and adds the limiter's, the key's and the cost's; its errors add `InvalidInput` (a bad
 * cost) and those of the key and the cost. Dual: `middleware(options)(app)` or `middleware(app, options)`.
 *
 * @since 0.1.0
 * @category middleware
 */
export const middleware: {
  <LR, KE = never, KR = never, CE = never, CR = never>(
    options: Options<LR, KE, KR, CE, CR>
  ): <E, R>(app: HttpApp.Default<E, R>) => HttpApp.Default<E | KE | CE | Redis.InvalidInput, R | LR | KR | CR>
  <E, R, LR, KE = never, KR = never, CE = never, CR = never>(
    app: HttpApp.Default<E, R>,
    options: Options<LR, KE, KR, CE, CR>
  ): HttpApp.Default<E | KE | CE | Redis.InvalidInput, R | LR | KR | CR>
} = internal.dualMiddleware as never

/**
 * The default key: the client's IP, as {@link ClientIp.resolve} finds it with these options (no
 * proxy trusted unless told; IPv6 by its /56).
 *
 * @since 0.1.0
 * @category keys
 */
export const clientIp: (options?: ClientIp.Options) => Key = internal.clientIpKey

/**
 * Keys by a request header's value; without it (or when empty), by `orElse` (default {@link clientIp}`()`).
 * The client writes its headers: use this only for a header that something in front checks.
 *
 * @since 0.1.0
 * @category keys
 */
export const header: <E = never, R = never>(
  name: string,
  options?: { readonly orElse?: Key<E, R> | undefined }
) => Key<E, R> = internal.header

/**
 * A bounded local fallback for `onStoreFailure`. Throws a `RangeError` unless `maxEntries` is a
 * positive safe integer. Each call makes its own store; middlewares given the same fallback share it
 * (their keys stay apart by namespace).
 *
 * @since 0.1.0
 * @category store failure
 */
export const fallback: (options: { readonly maxEntries: number }) => Fallback = internal.fallback

/**
 * Decisions per policy: a counter tagged `policy` (the limiter's namespace) and `decision` (a
 * {@link Decision}). Read one with
 * `Metric.value(RateLimit.decisions.pipe(Metric.tagged("policy", "login"), Metric.tagged("decision", "denied")))`.
 *
 * @since 0.1.0
 * @category observability
 */
export const decisions: Metric.Metric.Counter<number> = internal.decisions

/**
 * Store failures per policy: a counter tagged `policy` and `reason` (the `RedisError` reason).
 *
 * @since 0.1.0
 * @category observability
 */
export const storeFailures: Metric.Metric.Counter<number> = internal.storeFailures
