/**
 * @internal The middlewares: key and cost a request (or let `choose` pick its limiter and key), ask the
 * {@link decision.Limit}, render its verdict: on an `HttpApp` ({@link middleware}), or as an `HttpApi`
 * middleware ({@link apiMiddleware}).
 */
import * as HttpApp from "@effect/platform/HttpApp"
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import type * as Tracer from "effect/Tracer"
import type * as ClientIp from "../../ClientIp.js"
import type * as RateLimit from "../../RateLimit.js"
import type * as Redis from "../../Redis.js"
import * as telemetry from "../telemetry.js"
import * as clientIp from "./clientIp.js"
import * as decision from "./decision.js"
import * as fields from "./fields.js"
import * as render from "./render.js"

/** @internal */
export const FallbackTypeId: RateLimit.FallbackTypeId = decision.FallbackTypeId

/** @internal */
export const { decisions, denialMemoryHits, fallback, storeFailures } = decision

/** @internal */
export const clientIpKey = (options?: ClientIp.Options): RateLimit.Key => clientIp.make(options)

/** @internal */
export const header = <E = never, R = never>(
  name: string,
  options?: { readonly orElse?: RateLimit.Key<E, R> | undefined }
): RateLimit.Key<E, R> => clientIp.headerKey(name, options?.orElse ?? clientIpKey())

/** Sets a verdict's attributes on the span, if there is one (a server with its tracer disabled has none). */
const annotate = (span: Tracer.AnySpan | undefined, verdict: decision.Verdict, units: number) => {
  if (span === undefined || span._tag !== "Span") return
  span.attribute("ratelimit.policy", verdict.policy)
  span.attribute("ratelimit.decision", verdict.decision)
  span.attribute("ratelimit.cost", units)
  if (verdict.remaining !== undefined) span.attribute("ratelimit.remaining", verdict.remaining)
  if (verdict.retryAfter !== undefined) span.attribute("ratelimit.retry_after", verdict.retryAfter)
}

const evaluate = <A, E, R>(value: A | Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.isEffect(value) ? value : Effect.succeed(value)

/** What a request was decided: the limit asked (its `field` is `RateLimit-Policy`), the verdict, the cost. */
interface Decided {
  readonly field: string
  readonly verdict: decision.Verdict
  readonly units: number
}

type AnyOptions =
  | RateLimit.Options<RateLimit.Limiters, unknown, unknown, unknown, unknown>
  | RateLimit.ChooseOptions<RateLimit.Choice | Effect.Effect<RateLimit.Choice, unknown, unknown>, unknown, unknown>

/** @internal How a request is decided: what keying and costing fail with (`XE`), what they and limiters need (`XR`). */
export type Decide<XE, XR> = (request: HttpServerRequest.HttpServerRequest) => Effect.Effect<Decided, XE, XR>

/** @internal The options of a limit for every request, as the implementation reads them, every part's types kept. */
export interface LimitedOptions<LR, KE, KR, CE, CR> extends RateLimit.CommonOptions<CE, CR> {
  readonly limiter: RateLimit.Limiters<LR> | ReadonlyArray<RateLimit.Limiter<LR> | RateLimit.Shadow<LR>>
  readonly key?: RateLimit.Key<KE, KR> | undefined
}

/** @internal The options of a limit chosen per request, as the implementation reads them. */
export interface ChosenOptions<PE, PR, CE, CR> extends RateLimit.CommonOptions<CE, CR> {
  readonly choose: (
    request: HttpServerRequest.HttpServerRequest
  ) => RateLimit.Choice<RateLimit.Limiters<PR>> | Effect.Effect<RateLimit.Choice<RateLimit.Limiters<PR>>, PE, PR>
}

/** A name and a cost decided by `limit`: a denial remembered needs no store. */
const decideWith = <LR>(limit: decision.Limit<LR>, name: string, units: number) => {
  const remembered = limit.recall(name, units)
  const decided = remembered !== undefined
    ? Effect.succeed<Decided>({ field: limit.field, verdict: remembered, units })
    : Effect.map(limit.decide(name, units), (verdict): Decided => ({ field: limit.field, verdict, units }))
  return telemetry.verdict(decided, (d) => d.verdict)
}

/**
 * @internal The decision of a request by the static limiter(s) and key, from options checked now (a
 * `TypeError` or a `RangeError`). Plain keys and costs need no Effect.
 */
export const limitedDecider = <LR, KE, KR, CE, CR>(
  options: LimitedOptions<LR, KE, KR, CE, CR>
): Decide<KE | CE | Redis.InvalidInput, LR | KR | CR> => {
  const cost = options.cost
  const limit = decision.make(options)
  const key: RateLimit.Key<KE, KR> = options.key ?? clientIpKey()
  return (request) => {
    const name = key(request)
    const units = cost === undefined ? 1 : cost(request)
    if (!Effect.isEffect(name) && !Effect.isEffect(units)) return decideWith(limit, name, units)
    return Effect.flatMap(
      Effect.zip(evaluate(name), evaluate(units)),
      ([name, units]) => decideWith(limit, name, units)
    )
  }
}

/** @internal The decision of a request by what `choose` picks, from options checked now. */
export const chosenDecider = <PE, PR, CE, CR>(
  options: ChosenOptions<PE, PR, CE, CR>
): Decide<PE | CE | Redis.InvalidInput, PR | CR> => {
  const cost = options.cost
  const limitOf = decision.registry(options)
  const choose = options.choose
  if (typeof choose !== "function") {
    throw new TypeError(`wakuwaku/http: choose must be a function of the request, got ${String(choose)}`)
  }
  return (request) => {
    const chosen = choose(request)
    const units = cost === undefined ? 1 : cost(request)
    return Effect.flatMap(
      Effect.zip(evaluate(chosen), evaluate(units)),
      ([choice, units]) => decideWith(limitOf(choice.limiter), choice.key, units)
    )
  }
}

/**
 * The decision of a request, from either kind of options (checked now). Reads the request and the span from
 * the fiber.
 */
const decider = (options: AnyOptions): Decide<unknown, unknown> =>
  options.choose === undefined ? limitedDecider(options) : chosenDecider(options)

const refusal = (field: string, verdict: decision.Verdict) => {
  const { body, headers, status } = render.refusal(field, verdict)
  return HttpServerResponse.text(body, { status, headers })
}

/** `response` with the fields appended to those it has (of other policies), and `Retry-After` if given. */
const withFields = (
  response: HttpServerResponse.HttpServerResponse,
  field: string,
  item: string | undefined,
  retryAfter?: number
) => {
  // Shadow limiters only: no enforced policy to state.
  if (field === "") return response
  // setHeader per field, not setHeaders: its copy through Object.entries costs more (docs/performance.md).
  const policed = HttpServerResponse.setHeader(
    response,
    "ratelimit-policy",
    fields.appendItem(response.headers["ratelimit-policy"], field)
  )
  if (item === undefined) return policed
  const limited = HttpServerResponse.setHeader(
    policed,
    "ratelimit",
    fields.appendItem(response.headers["ratelimit"], item)
  )
  return retryAfter === undefined ? limited : HttpServerResponse.setHeader(limited, "retry-after", String(retryAfter))
}

const isInvalidInput = (u: unknown): u is Redis.InvalidInput =>
  typeof u === "object" && u !== null && (u as { readonly _tag?: unknown })._tag === "InvalidInput"

/** A name (the request's key) the store will not take. */
const isBadName = (u: unknown): u is Redis.InvalidInput => isInvalidInput(u) && u.argument === "name"

/** The client's 400: a problem (RFC 9457) of the generic type, whose title is the status's (§4.2.1). */
const badRequest = (error: Redis.InvalidInput) =>
  HttpServerResponse.text(
    JSON.stringify({ type: "about:blank", title: "Bad Request", status: 400, detail: error.message }),
    { status: 400, contentType: render.PROBLEM_JSON }
  )

/** @internal The middleware of a decision: the app's errors and needs, and the decision's. */
export const limiting =
  <XE, XR>(decide: Decide<XE, XR>) => <E, R>(app: HttpApp.Default<E, R>): HttpApp.Default<E | XE, R | XR> => {
    /** Runs the app and puts the fields on its response, or on the error response the server makes of its failure. */
    const pass = (field: string, item: string | undefined) =>
      Effect.map(
        Effect.tapErrorCause(
          app,
          () =>
            HttpApp.appendPreResponseHandler((_request, response) => Effect.succeed(withFields(response, field, item)))
        ),
        (response) => withFields(response, field, item)
      )
    const respond = (span: Tracer.AnySpan | undefined, { field, units, verdict }: Decided) => {
      annotate(span, verdict, units)
      return verdict.pass ? pass(field, verdict.limit) : Effect.succeed(refusal(field, verdict))
    }
    // One step reads the request and the span from the fiber.
    return Effect.withFiberRuntime((fiber) => {
      const request = Context.unsafeGet(fiber.currentContext, HttpServerRequest.HttpServerRequest)
      const span = fiber.currentSpan
      return Effect.matchEffect(decide(request), {
        onSuccess: (decided) => respond(span, decided),
        // A key the store will not take (over 4096 bytes, from a header) is the client's error: a 400, as the
        // proxy answers it (RFC 9110 §15.5.1; a 5xx is the server's fault). A bad cost stays a failure.
        onFailure: (error) => isBadName(error) ? Effect.succeed(badRequest(error)) : Effect.fail(error)
      })
    })
  }

/**
 * The limiters of `L` as they are read: needing what {@link RateLimit.LimiterRequirements} says they need, which
 * is what it reads off their `acquire` (the one step the compiler cannot follow through a generic `L`).
 */
const needing = <L extends RateLimit.Limiters>(limiter: L) =>
  limiter as RateLimit.Limiters<RateLimit.LimiterRequirements<L>>

/** `choose` as it is read: failing with {@link RateLimit.ChooseError}, needing {@link RateLimit.ChooseRequirements}. */
const choosing = <P extends RateLimit.Choice | Effect.Effect<RateLimit.Choice, unknown, unknown>>(
  choose: (request: HttpServerRequest.HttpServerRequest) => P
) => choose as ChosenOptions<RateLimit.ChooseError<P>, RateLimit.ChooseRequirements<P>, never, never>["choose"]

/** @internal `RateLimit.middleware(options)` with a limiter for every request. */
export const limited = <const L extends RateLimit.Limiters, KE = never, KR = never, CE = never, CR = never>(
  options: RateLimit.Options<L, KE, KR, CE, CR>
) => limiting(limitedDecider({ ...options, limiter: needing(options.limiter) }))

/** @internal `RateLimit.middleware(options)` with `choose`. */
export const chosen = <
  P extends RateLimit.Choice | Effect.Effect<RateLimit.Choice, unknown, unknown>,
  CE = never,
  CR = never
>(
  options: RateLimit.ChooseOptions<P, CE, CR>
) => limiting(chosenDecider({ ...options, choose: choosing(options.choose) }))

/** @internal `RateLimit.middleware(app, options)` with a limiter for every request. */
export const limitedOn = <E, R, const L extends RateLimit.Limiters, KE = never, KR = never, CE = never, CR = never>(
  app: HttpApp.Default<E, R>,
  options: RateLimit.Options<L, KE, KR, CE, CR>
) => limited(options)(app)

/** @internal `RateLimit.middleware(app, options)` with `choose`. */
export const chosenOn = <
  E,
  R,
  P extends RateLimit.Choice | Effect.Effect<RateLimit.Choice, unknown, unknown>,
  CE = never,
  CR = never
>(
  app: HttpApp.Default<E, R>,
  options: RateLimit.ChooseOptions<P, CE, CR>
) => chosen(options)(app)

/**
 * @internal `RateLimit.middleware`: `(options)` giving the middleware, or `(app, options)`, each with a limiter
 * for every request or `choose`. Its type is the four typed forms' (an overloaded function), which the facade's
 * declared signature must be assignable from: a drift between them is a compile error. The forms are told apart
 * as Effect's duals are (an app is an Effect), then by `choose`. Not `Function.dual`, whose data-last form would
 * check the options only when applied: here they are checked when it is made.
 */
export const dualMiddleware = (
  (...args: [AnyOptions] | [HttpApp.Default<unknown, unknown>, AnyOptions]) =>
    Effect.isEffect(args[0]) ? formOf(args[1]!)(args[0]) : formOf(args[0])
) as unknown as Middleware

/** The data-last form of either kind of options. */
const formOf = (options: AnyOptions) => options.choose === undefined ? limited(options) : chosen(options)

/**
 * @internal The type of {@link dualMiddleware}: its four typed forms. The dispatch above is their one
 * implementation, told apart at run time as the forms' parameters are.
 */
export type Middleware = typeof limited & typeof chosen & typeof limitedOn & typeof chosenOn

/**
 * @internal The `HttpApi` middleware of `tag`: allowed, the fields go on the response (a pre-response
 * handler); denied, they do too, with `Retry-After`, and the request fails with `RateLimitExceeded`, which
 * the API encodes as its 429; a 413 or a 503 (fail-closed) is answered as the plain middleware answers it,
 * and a key the store will not take (or a bad cost) with a 400 problem, as the proxy does (responses the
 * server sends as they are: the API's schema does not describe them). The layer captures the
 * limiters' context when built; services listed in `fromRequest` are read from the request's context, where
 * a middleware that ran before provided them.
 */
export const apiMiddleware = (
  tag: Context.Tag<unknown, unknown>,
  options: AnyOptions & { readonly fromRequest?: ReadonlyArray<Context.Tag<unknown, unknown>> | undefined },
  RateLimitExceeded: new(args: {
    readonly policy: string
    readonly retryAfter: Duration.Duration
    readonly violatedPolicies: ReadonlyArray<string>
  }) => unknown
): Layer.Layer<unknown, never, unknown> => {
  const decide = decider(options)
  const fromRequest = options.fromRequest ?? []
  const label = `RateLimit.apiMiddleware(${tag.key})`
  const missing = (service: Context.Tag<unknown, unknown>) =>
    `${label}: ${service.key}, which the key, the cost or choose reads from the request, is not there. The HttpApi middleware ` +
    `that provides it must run first: declare it after ${tag.key} (\`.middleware(${tag.key}).middleware(…)\`), ` +
    `as @effect/platform runs the middleware declared last first.`

  const render = (span: Tracer.AnySpan | undefined, { field, units, verdict }: Decided) => {
    annotate(span, verdict, units)
    if (verdict.pass) {
      return HttpApp.appendPreResponseHandler((_request, response) =>
        Effect.succeed(withFields(response, field, verdict.limit))
      )
    }
    if (verdict.status !== 429) return Effect.die(refusal(field, verdict))
    return Effect.zipRight(
      HttpApp.appendPreResponseHandler((_request, response) =>
        Effect.succeed(withFields(response, field, verdict.limit, verdict.retryAfter))
      ),
      Effect.fail(
        new RateLimitExceeded({
          policy: verdict.policy,
          retryAfter: Duration.seconds(verdict.retryAfter!),
          violatedPolicies: verdict.violated
        })
      )
    )
  }

  return Layer.effect(
    tag,
    Effect.map(Effect.context<unknown>(), (built) =>
      Effect.withFiberRuntime<void, unknown, unknown>((fiber) => {
        const context = fiber.currentContext
        for (const service of fromRequest) {
          if (!context.unsafeMap.has(service.key)) return Effect.dieMessage(missing(service))
        }
        const request = Context.unsafeGet(context, HttpServerRequest.HttpServerRequest)
        const span = fiber.currentSpan
        return Effect.flatMap(
          Effect.catchAll(decide(request), (error) =>
            // A name the store will not take (a key over 4096 bytes, from a header) or a bad cost: the
            // client's 400, as the proxy answers it. Anything else (a key, a cost or a choice typed never
            // fails otherwise): a defect, a 500.
            Effect.die(isInvalidInput(error) ? badRequest(error) : error)),
          (decided) => render(span, decided)
        ).pipe(
          // The limiters' services are the layer's: they win over any the request carries.
          Effect.provide(built)
        )
      }))
  )
}
