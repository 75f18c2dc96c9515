/**
 * RateLimit: rate limits for `@effect/platform` servers, backed by any limiter (`TokenBucket`, `FixedWindow`, …): a
 * {@link middleware} around an `HttpApp`, and {@link apiMiddleware}, the implementation of an `HttpApi`
 * middleware, whose 429 ({@link RateLimitExceeded}) the API, its OpenAPI document and its typed client
 * know. Part of `wakuwaku/http`, which the core never loads.
 *
 * `RateLimit.middleware({ limiter, key, cost, onStoreFailure })(app)` keys each request (by default
 * the client's IP, see {@link ClientIp}), spends `cost` (default 1) from the limiter, and answers:
 *
 * - **Allowed**: the app answers, and its response carries `RateLimit-Policy` and `RateLimit`.
 * - **Denied**: `429 Too Many Requests`, `Retry-After` in whole seconds rounded up (never early), the
 *   same two fields (`r=0`, `t` equal to `Retry-After`), and a short `application/problem+json` body
 *   of the draft's `quota-exceeded` type. The app does not run.
 * - **Cost above the quota** (a token bucket's capacity, a window's limit): `413`, no `Retry-After`
 *   (waiting never helps: split the request), `RateLimit-Policy`, and a problem body of a type of its own
 *   (`tag:wakuwaku,2026:cost-above-quota`) naming the cost.
 * - **A key the store will not take** (over 4096 bytes, such as a long header): the client's `400`, a problem
 *   whose `detail` is the reason; nothing is spent.
 * - **The store failed** (`RedisError`): what `onStoreFailure` says, an explicit choice with no
 *   default: `"fail-closed"` answers `503`; `"fail-open"` lets the request through (with
 *   `RateLimit-Policy` only); {@link fallback} decides on a local limiter, the same policy on an
 *   embedded memory store capped at `maxEntries` names. Every failure is counted in {@link storeFailures};
 *   the log has two lines per outage, not one per request: a warning at its first failure, with the
 *   store's reason (`Connection: connect ECONNREFUSED 127.0.0.1:6379`), and a line when the store answers
 *   a request again, with the count of failed calls in between.
 *
 * **Several limits, one decision.** `limiter: [PER_SECOND, PER_HOUR]` decides the limiters as one, all or
 * nothing: a request any of them denies spends from none. On one Redis, and on a Cluster when the keys
 * share a hash slot (a key holding a hash tag, such as `{user-42}`), one script decides them, atomically.
 * Keys in several slots are decided per slot and the slots that allowed are refunded when another
 * denies: until the refund lands (one round trip) a concurrent request may see those limiters spent, and
 * be denied or told less, never allowed more. `RateLimit-Policy` lists every policy; `RateLimit` the
 * most restrictive, the one closest to exhaustion (the least `r`, then the longest `t`), as the draft's
 * example with several windows does. A denial's `Retry-After` is the longest retry of the policies that
 * denied, and its body names them all.
 *
 * **A policy per request.** `choose: (request) => Effect.map(CurrentUser, (user) => ({ limiter:
 * PLANS[user.plan], key: user.id }))` in place of `limiter` and `key` picks the limiter (or several)
 * and the key of each request; as an Effect it can read the user an authenticating middleware in front
 * provided. The fields, the metrics and the 429 name the policy applied; the result's type carries every
 * limiter `choose` may pick. Each limiter is prepared (its metric labels, its denial memory) when first
 * chosen, and kept while it lives.
 *
 * **HttpApi.** Declare the middleware with platform's own `HttpApiMiddleware.Tag` and `failure:
 * RateLimit.RateLimitExceeded`; `apiMiddleware(Tag, options)`, with the same options, is its layer. The
 * endpoints and groups with `.middleware(Tag)` answer a denial with a 429 the API encodes, list it in
 * their OpenAPI responses, and a client made from the API fails with `RateLimitExceeded`, typed.
 *
 * **Denial memory** (`rememberDenials: n`, off by default). A denial the store repeats is remembered in
 * this process, for the same name and cost, until its `retryAfter`: further requests of that client are
 * answered 429 from memory, with no store call. Before a denial is remembered the store is asked again,
 * read-only, once the request's own refunds have landed, and only the limiters that still deny are
 * remembered, with the retry they give then: on a Cluster, a denial made by another request's per-slot
 * spend, refunded since, is not kept (it would have kept, say, an hour-long window's `Retry-After`). This
 * changes no decision: a token bucket cannot refill into an earlier allowance, a fixed window's count only
 * grows until it ends, and other replicas can only spend more. The exceptions are what gives back: a
 * `reset` (or a bucket's `refund`) of the name elsewhere, which this process does not see until the
 * remembered denial ends, and on a Cluster another request's per-slot spend still in flight when the store
 * is asked again. The memory holds at most `n` names (past it, the one remembered longest ago is dropped);
 * a denial ends no later than the store's and its `Retry-After` is never earlier.
 *
 * **Header fields.** The fields of draft-ietf-httpapi-ratelimit-headers-11 ({@link draft}), Structured
 * Field Lists named by the limiter's namespace: `RateLimit-Policy: "login";q=20;w=60` and
 * `RateLimit: "login";r=19;t=3`. Stacked middlewares each append their item, so a response lists
 * every policy. A token bucket maps to the draft's quota and window as: `q` = capacity, `w` = the
 * seconds to refill it from empty (rounded up), `t` after an allowed request = the seconds until the
 * bucket is full again (rounded up). A fixed window: `q` = limit, `w` = the window, and `t` after an
 * allowed request = the seconds left in the current window (rounded up), which a 429's `Retry-After` then
 * names too. Either way `t` is when the quota is whole again if the client spends nothing more.
 *
 * **Requirements stay visible.** The result is an `HttpApp.Default<E | …, R | LR | …>`: the limiters'
 * requirements (`Redis | Write<TokenBucket.Entity>`) join the app's, so a server layer built on it
 * does not compile with only a read-only replica. Never annotate the middleware with the
 * `HttpMiddleware` interface of `@effect/platform`: it returns `HttpApp.Default<any, any>`, which
 * erases `R` and the capability check with it.
 *
 * **Observability.** Each decision increments {@link decisions} (tags `policy`, `decision`) and
 * annotates the current span (the server's request span) with `ratelimit.policy`,
 * `ratelimit.decision`, `ratelimit.cost`, and `ratelimit.remaining` or `ratelimit.retry_after`. With
 * several limiters, an allowed request counts under every policy, a denied one under those that denied
 * only (the others spent nothing), and the span names the policy in `RateLimit`.
 *
 * **Caveats.**
 * - An app that fails gets the fields on the error response the server makes of its failure (through a
 *   pre-response handler); a surrounding `HttpApp.withPreResponseHandler` scope may drop them.
 * - A key or cost that fails, or a cost that is not a non-negative safe integer (`InvalidInput`),
 *   fails the request in the error channel: nothing is spent. (A key the store will not take is the
 *   client's 400, above.)
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
import type * as HttpApiMiddleware from "@effect/platform/HttpApiMiddleware"
import type * as HttpApp from "@effect/platform/HttpApp"
import type * as HttpRouter from "@effect/platform/HttpRouter"
import type * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import type * as Cause from "effect/Cause"
import type * as Context from "effect/Context"
import type * as Duration from "effect/Duration"
import type * as Effect from "effect/Effect"
import type * as Layer from "effect/Layer"
import type * as Metric from "effect/Metric"
import * as Schema from "effect/Schema"
import type * as AST from "effect/SchemaAST"
import type * as ClientIp from "./ClientIp.js"
import * as fields from "./internal/http/fields.js"
import * as openApi from "./internal/http/openApi.js"
import * as internal from "./internal/http/rateLimit.js"
import type * as Limiter_ from "./Limiter.js"
import * as Limits from "./Limits.js"
import type * as Redis from "./Redis.js"

/**
 * The draft whose header fields the middleware writes.
 *
 * @since 0.1.0
 * @category constants
 */
export const draft: "draft-ietf-httpapi-ratelimit-headers-11" = fields.DRAFT

/**
 * What the middleware needs of a limiter: one of any kind (`TokenBucket<string>`, `FixedWindow<string>`, …)
 * keyed by strings, needing `R`. It is told apart by the shared type id (`Limiter.TypeId`), whose value
 * describes its policy: an object of this shape that no kind made does not compile (and is refused at run
 * time).
 *
 * @since 0.1.0
 * @category models
 */
export interface Limiter<R> extends Limiter_.Limiter<string, R> {}

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
 * `maxEntries` names (past it, each new name removes the expired ones of the next 16 its sweep looks
 * at, then evicts the least recently written, which start afresh; the same cost at any size).
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
 * A limiter marked shadow ({@link shadow}): decided with the others, never denying.
 *
 * @since 0.2.0
 * @category models
 */
export interface Shadow<R> extends Limits.Shadow<Limiter<R>> {}

/**
 * Marks a limiter shadow in a middleware's list: `limiter: [LOGINS, RateLimit.shadow(LOGINS_STRICT)]`. It is
 * decided in the same store call as the enforced limiters, spends its own state when it would allow, and
 * never denies: what it would have denied is counted (`Limits.wouldDenyCounter`, tagged `policy`) and set
 * on the request's span (`wakuwaku.shadow.would_deny`). The response, its fields (`RateLimit-Policy` and
 * `RateLimit` name the enforced policies only), the counts of {@link decisions} and the denial memory are
 * what they would be without it. `Limits.shadow`, for the middlewares; see docs/http.md, "Shadow limits".
 *
 * @since 0.2.0
 * @category policies
 */
export const shadow: <R>(limiter: Limiter<R>) => Shadow<R> = Limits.shadow

/**
 * One limiter, or several decided as one (all or nothing, see the module doc), listed in a non-empty array;
 * any of them may be a {@link shadow} one.
 *
 * @since 0.1.0
 * @category models
 */
export type Limiters<R = unknown> =
  | Limiter<R>
  | Shadow<R>
  | readonly [Limiter<R> | Shadow<R>, ...Array<Limiter<R> | Shadow<R>>]

/**
 * What the limiters `L` need (`Redis` and the right to write each one's entity), as a union.
 *
 * @since 0.1.0
 * @category models
 */
export type LimiterRequirements<L> = L extends ReadonlyArray<infer One> ? LimiterRequirements<One>
  : L extends Limits.Shadow<infer X> ? LimiterRequirements<X>
  : L extends {
    readonly acquire: (name: string, cost: number) => Effect.Effect<infer _A, infer _E, infer R>
  } ? R
  : never

/**
 * What {@link Options.choose} picks for a request: the limiter (or several, decided as one) and the name to
 * key it by. Each limiter's namespace names its policy in the fields, the metrics and the 429.
 *
 * @since 0.1.0
 * @category models
 */
export interface Choice<L extends Limiters = Limiters> {
  readonly limiter: L
  readonly key: string
}

/**
 * What the options of the middlewares share: the cost, the store-failure policy and the denial memory.
 *
 * @since 0.1.0
 * @category models
 */
export interface CommonOptions<CE = never, CR = never> {
  /** What a request costs. Default 1. */
  readonly cost?: Cost<CE, CR> | undefined
  /** What to do when the store fails. Required: the choice is the caller's. */
  readonly onStoreFailure: OnStoreFailure
  /**
   * The denial memory: how many names' denials to remember in this process, per limiter, until their
   * `retryAfter`, so that a client over its limit is answered without a store call (see the module doc).
   * Default 0: none.
   */
  readonly rememberDenials?: number | undefined
}

/**
 * The options of {@link middleware} (and {@link apiMiddleware}) with a limiter, or several, for every
 * request.
 *
 * @since 0.1.0
 * @category models
 */
export interface Options<L extends Limiters, KE = never, KR = never, CE = never, CR = never>
  extends CommonOptions<CE, CR>
{
  /**
   * The limiter: one of any kind keyed by strings (a `TokenBucket<string>`, …), whose namespace names the
   * policy; or a non-empty array of them, decided as one (all or nothing; see the module doc).
   */
  readonly limiter: L
  /** How requests are keyed. Default {@link clientIp}`()`: the socket address, no proxy trusted. */
  readonly key?: Key<KE, KR> | undefined
  readonly choose?: undefined
}

/**
 * The options of {@link middleware} (and {@link apiMiddleware}) with a policy per request: `choose` picks
 * the limiter(s) and the key of each request, plainly or as an Effect, which may need services (such as the
 * user an authenticating middleware in front provided) and fail.
 *
 * @since 0.1.0
 * @category models
 */
export interface ChooseOptions<P extends Choice | Effect.Effect<Choice, unknown, unknown>, CE = never, CR = never>
  extends CommonOptions<CE, CR>
{
  /** The limiter(s) and the key of a request. */
  readonly choose: (request: HttpServerRequest.HttpServerRequest) => P
  readonly limiter?: undefined
  readonly key?: undefined
}

/**
 * How a `choose` of {@link ChooseOptions} fails.
 *
 * @since 0.1.0
 * @category models
 */
export type ChooseError<P> = P extends Effect.Effect<infer _A, infer E, infer _R> ? E : never

/**
 * What a `choose` of {@link ChooseOptions} needs: its own requirements and those of every limiter it may
 * choose.
 *
 * @since 0.1.0
 * @category models
 */
export type ChooseRequirements<P> = P extends Effect.Effect<infer C, infer _E, infer R>
  ? R | LimiterRequirements<C extends Choice ? C["limiter"] : never>
  : P extends Choice ? LimiterRequirements<P["limiter"]>
  : never

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
 * The policy of a limiter, as it describes itself. Throws a `TypeError` on a value that no limiter kind made.
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
 * kind, a list that is empty or names one limiter twice, or an `onStoreFailure` that is not one of the
 * three, throws a `TypeError`). The result keeps the app's `R` and adds the limiters' (for `choose`: of
 * every limiter it may choose), the key's and the cost's; its errors add `InvalidInput` (a bad cost)
 * and those of the key (or `choose`) and the cost. Dual: `middleware(options)(app)` or
 * `middleware(app, options)`.
 *
 * @since 0.1.0
 * @category middleware
 */
export const middleware: {
  <const L extends Limiters, KE = never, KR = never, CE = never, CR = never>(
    options: Options<L, KE, KR, CE, CR>
  ): <E, R>(
    app: HttpApp.Default<E, R>
  ) => HttpApp.Default<E | KE | CE | Redis.InvalidInput, R | LimiterRequirements<L> | KR | CR>
  <P extends Choice | Effect.Effect<Choice, unknown, unknown>, CE = never, CR = never>(
    options: ChooseOptions<P, CE, CR>
  ): <E, R>(
    app: HttpApp.Default<E, R>
  ) => HttpApp.Default<E | ChooseError<P> | CE | Redis.InvalidInput, R | ChooseRequirements<P> | CR>
  <E, R, const L extends Limiters, KE = never, KR = never, CE = never, CR = never>(
    app: HttpApp.Default<E, R>,
    options: Options<L, KE, KR, CE, CR>
  ): HttpApp.Default<E | KE | CE | Redis.InvalidInput, R | LimiterRequirements<L> | KR | CR>
  <E, R, P extends Choice | Effect.Effect<Choice, unknown, unknown>, CE = never, CR = never>(
    app: HttpApp.Default<E, R>,
    options: ChooseOptions<P, CE, CR>
  ): HttpApp.Default<E | ChooseError<P> | CE | Redis.InvalidInput, R | ChooseRequirements<P> | CR>
} = internal.dualMiddleware

/**
 * `RateLimitExceeded.retryAfter`: a `Duration`, which travels as whole seconds (the `Retry-After` of the
 * 429 it came with), in JSON an integer from 0 to 10^11 (`int64`): no limiter can ask a longer wait (a token
 * bucket fills in at most 10^14 ms).
 *
 * @since 0.1.0
 * @category errors
 */
export const RetryAfterSeconds: Schema.Schema<Duration.Duration, number> = openApi.RetryAfterSeconds

const exceededFields = {
  /** The policy (a limiter's namespace) whose wait is the longest: the one in `Retry-After` and `RateLimit`. */
  policy: openApi.PolicyName,
  /** How long until the request may pass, if nothing else spends: `Retry-After`, in whole seconds. */
  retryAfter: RetryAfterSeconds,
  /** Every policy that denied the request (several limits are decided as one). */
  violatedPolicies: Schema.Array(openApi.PolicyName)
}

/**
 * {@link RateLimitExceeded} as it travels: an RFC 9457 problem document of the draft's `quota-exceeded` type,
 * with the typed fields as extension members (`retryAfter` in whole seconds).
 *
 * @since 0.1.0
 * @category models
 */
export interface RateLimitExceededEncoded {
  readonly type: "https://iana.org/assignments/http-problem-types#quota-exceeded"
  readonly title: "Quota Exceeded"
  readonly status: 429
  readonly detail: string
  readonly policy: string
  readonly retryAfter: number
  readonly "violated-policies": ReadonlyArray<string>
}

/** The class's static side, with the encoded type it travels as: the problem document. */
interface ExceededClass extends
  Schema.Class<
    RateLimitExceeded,
    typeof exceededFields & { readonly _tag: Schema.tag<"RateLimitExceeded"> },
    RateLimitExceededEncoded,
    never,
    Schema.Struct.Constructor<typeof exceededFields>,
    {},
    Cause.YieldableError
  >
{
  readonly _tag: "RateLimitExceeded"
}

const DESCRIPTION = "Too Many Requests: a rate limit denied the request; retry after retryAfter seconds"

/**
 * The failure of a request that a rate limit denied, as {@link apiMiddleware} fails with it: an `HttpApi`
 * error of status 429, so that the API's OpenAPI documents it on the endpoints the middleware is on, and
 * a client made from the API (`HttpApiClient`) fails with it, typed. It travels as an RFC 9457 problem
 * (`application/problem+json`) of the draft's `quota-exceeded` type, the plain middleware's and the proxy's
 * 429 with `detail` and the typed fields as extension members:
 *
 * ```json
 * {"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Quota Exceeded","status":429,
 *  "detail":"The quota of login is spent: retry after 3 s.","policy":"login","retryAfter":3,
 *  "violated-policies":["login"]}
 * ```
 *
 * @since 0.1.0
 * @category errors
 */
export class RateLimitExceeded
  extends (Schema.TaggedError<RateLimitExceeded>()("RateLimitExceeded", exceededFields) as unknown as ExceededClass)
{
  static {
    // The class's schema, as `Schema`, `HttpApi` and `OpenApi` read it (its `ast`): the problem document, which
    // carries no `_tag` (RFC 9457 §4: an extension member's name starts with a letter), to the error and back.
    // The base class's `ast` (the fields' struct to the instance) gives the instances.
    let base = Object.getPrototypeOf(this) as object
    while (!Object.hasOwn(base, "ast")) base = Object.getPrototypeOf(base) as object
    const descriptor: { readonly get?: (this: unknown) => AST.AST } = Object.getOwnPropertyDescriptor(base, "ast")!
    const own = descriptor.get!
    let ast: AST.Transformation | undefined
    Object.defineProperty(this, "ast", {
      get: () =>
        ast ??= openApi.problemAst(
          Schema.typeSchema(Schema.make<RateLimitExceeded>(own.call(this))),
          (exceeded) => new this(exceeded, true),
          { description: DESCRIPTION }
        )
    })
  }

  override get message(): string {
    return `rate limit ${this.policy} exceeded: retry after ${fields.ceilSeconds(this.retryAfter)} s`
  }
}

/**
 * Declares the fields on the limited operations of an OpenAPI document (`OpenApi.fromApi`): those whose 429 is
 * {@link RateLimitExceeded}. Their 429 gets `Retry-After`, `RateLimit` and `RateLimit-Policy`, all required;
 * their 2xx `RateLimit-Policy` (required) and `RateLimit` (not: a store that fails open sends none); their other
 * 4xx both, not required (present when the limit ran before the error). Install it on the API:
 * `HttpApi.make("shop").annotate(OpenApi.Transform, RateLimit.openApiFields)` (compose it with a transform of
 * your own). Headers the document already declares are kept.
 *
 * @since 0.1.0
 * @category HttpApi
 */
export const openApiFields: (spec: Record<string, unknown>) => Record<string, unknown> = openApi.openApiFields

/**
 * The options of {@link apiMiddleware}: those of {@link middleware} (a key, a cost or a `choose` that can
 * fail is not allowed: the middleware's failure is {@link RateLimitExceeded} alone), and `fromRequest`.
 *
 * @since 0.1.0
 * @category models
 */
export interface FromRequest<S extends ReadonlyArray<RequestService>> {
  /**
   * Services the key, the cost or `choose` read from the request's context, where an `HttpApi` middleware
   * that runs before this one provided them (its `provides`, such as the authenticated user). They are not
   * asked of the layer. A request that arrives without one is a defect naming it (and the order to declare
   * the middlewares in: @effect/platform runs the middleware declared last first).
   */
  readonly fromRequest?: S | undefined
}

/**
 * A service's tag, as {@link FromRequest} lists it.
 *
 * @since 0.1.0
 * @category models
 */
export interface RequestService {
  readonly key: string
  readonly Identifier: unknown
}

/**
 * The `HttpApi` middleware that `apiMiddleware` implements: one declared with `HttpApiMiddleware.Tag`
 * and `failure: RateLimit.RateLimitExceeded`.
 *
 * @since 0.1.0
 * @category models
 */
export type ApiMiddlewareTag<I> = Context.Tag<I, HttpApiMiddleware.HttpApiMiddleware<void, RateLimitExceeded>>

/**
 * Implements an `HttpApi` middleware, declared with platform's own `HttpApiMiddleware.Tag` and
 * `failure: RateLimit.RateLimitExceeded`, as a rate limit with the options of {@link middleware} (the same
 * keys, costs, several limiters or a `choose` per request, store-failure policies and denial memory):
 *
 * - an endpoint or group with `.middleware(Tag)` answers a denial with a 429 ({@link RateLimitExceeded},
 *   encoded by the API as an `application/problem+json` problem), `Retry-After` and the fields; an allowed
 *   response carries the fields too;
 * - the API's OpenAPI lists the 429 on those endpoints only ({@link openApiFields} declares the fields
 *   there), and `HttpApiClient` fails with the error;
 * - a cost above the quota (413) and a fail-closed store failure (503) are answered as {@link middleware}
 *   answers them, and a key the store will not take (over 4096 bytes, from a header) or a bad cost
 *   (`InvalidInput`) with a `400` problem, as the proxy does: the API's schema does not describe these (a
 *   client made from the API sees a `ResponseError`).
 *
 * The layer needs what the limiters need (`Redis | Write<TokenBucket.Entity>`), and what the key, the cost
 * and `choose` need but the request's context provides (see {@link FromRequest}). The options are checked
 * now, as {@link middleware}'s are.
 *
 * @since 0.1.0
 * @category middleware
 */
export const apiMiddleware: {
  <I, const L extends Limiters, KR = never, CR = never, const S extends ReadonlyArray<RequestService> = readonly []>(
    tag: ApiMiddlewareTag<I>,
    options: Options<L, never, KR, never, CR> & FromRequest<S>
  ): Layer.Layer<
    I,
    never,
    Exclude<LimiterRequirements<L> | KR | CR, S[number]["Identifier"] | HttpRouter.HttpRouter.Provided>
  >
  <
    I,
    P extends Choice | Effect.Effect<Choice, never, unknown>,
    CR = never,
    const S extends ReadonlyArray<RequestService> = readonly []
  >(
    tag: ApiMiddlewareTag<I>,
    options: ChooseOptions<P, never, CR> & FromRequest<S>
  ): Layer.Layer<
    I,
    never,
    Exclude<ChooseRequirements<P> | CR, S[number]["Identifier"] | HttpRouter.HttpRouter.Provided>
  >
} =
  ((tag: Context.Tag<unknown, unknown>, options: never) =>
    internal.apiMiddleware(tag, options, RateLimitExceeded)) as never

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
 * A header's keys are `<name>=<value>` (the name lowercase), which no address key can be, so a client that
 * sends `X-Api-Key: 203.0.113.7` does not spend the bucket of the client at 203.0.113.7; `Proxy.header` keys
 * the same way. Throws a `TypeError` for a name that is not a header name (a token, RFC 9110 §5.1). The
 * client writes its headers: use this only for a header that something in front checks.
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
 * Store failures per policy: a counter tagged `policy` and `reason` (the `RedisError` reason:
 * `Connection`, `Authentication`, `Timeout`, …). Counted per failed call, where the log says only when an
 * outage begins and ends.
 *
 * @since 0.1.0
 * @category observability
 */
export const storeFailures: Metric.Metric.Counter<number> = internal.storeFailures

/**
 * Requests refused from the denial memory (`rememberDenials`), without asking the store: a counter tagged
 * `policy`, once per remembered policy that refused (they count in {@link decisions} as `denied` too).
 *
 * @since 0.2.0
 * @category observability
 */
export const denialMemoryHits: Metric.Metric.Counter<number> = internal.denialMemoryHits
