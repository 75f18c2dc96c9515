/** @internal The middleware: key and cost a request, ask the {@link decision.Limit}, render its verdict. */
import * as HttpApp from "@effect/platform/HttpApp"
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import type * as Tracer from "effect/Tracer"
import type * as ClientIp from "../../ClientIp.js"
import type * as RateLimit from "../../RateLimit.js"
import type * as Redis from "../../Redis.js"
import * as clientIp from "./clientIp.js"
import * as decision from "./decision.js"
import * as fields from "./fields.js"

/** @internal */
export const FallbackTypeId: RateLimit.FallbackTypeId = decision.FallbackTypeId

/** @internal */
export const { decisions, fallback, storeFailures } = decision

/** @internal */
export const clientIpKey = (options?: ClientIp.Options): RateLimit.Key => clientIp.make(options)

/** @internal */
export const header = <E = never, R = never>(
  name: string,
  options?: { readonly orElse?: RateLimit.Key<E, R> | undefined }
): RateLimit.Key<E, R> => {
  const lower = name.toLowerCase()
  const orElse: RateLimit.Key<E, R> = options?.orElse ?? clientIpKey()
  return (request) => {
    const value = request.headers[lower]
    return value === undefined || value === "" ? orElse(request) : value
  }
}

/** Sets a verdict's attributes on the span, if there is one (a server with its tracer disabled has none). */
const annotate = (span: Tracer.AnySpan | undefined, policy: string, verdict: decision.Verdict, units: number) => {
  if (span === undefined || span._tag !== "Span") return
  span.attribute("ratelimit.policy", policy)
  span.attribute("ratelimit.decision", verdict.decision)
  span.attribute("ratelimit.cost", units)
  if (verdict.remaining !== undefined) span.attribute("ratelimit.remaining", verdict.remaining)
  if (verdict.retryAfter !== undefined) span.attribute("ratelimit.retry_after", verdict.retryAfter)
}

const evaluate = <A, E, R>(value: A | Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.isEffect(value) ? value : Effect.succeed(value)

/** @internal */
export const middleware = <LR, KE, KR, CE, CR>(options: RateLimit.Options<LR, KE, KR, CE, CR>) => {
  const limit = decision.make(options)
  const { policy } = limit
  const key: RateLimit.Key<KE, KR> = options.key ?? clientIpKey()
  const cost = options.cost

  // Two setHeader calls, not setHeaders: its copy through Object.entries costs about 10 times as much.
  const withFields = (response: HttpServerResponse.HttpServerResponse, item: string | undefined) => {
    const policed = HttpServerResponse.setHeader(
      response,
      "ratelimit-policy",
      fields.appendItem(response.headers["ratelimit-policy"], policy.field)
    )
    return item === undefined
      ? policed
      : HttpServerResponse.setHeader(policed, "ratelimit", fields.appendItem(response.headers["ratelimit"], item))
  }

  const refusal = (verdict: decision.Verdict) =>
    withFields(
      HttpServerResponse.text(verdict.body ?? "", {
        status: verdict.status,
        contentType: decision.PROBLEM_JSON,
        headers: verdict.retryAfter === undefined ? {} : { "retry-after": String(verdict.retryAfter) }
      }),
      verdict.limit
    )

  return <E, R>(app: HttpApp.Default<E, R>): HttpApp.Default<E | KE | CE | Redis.InvalidInput, R | LR | KR | CR> => {
    /** Runs the app and puts the fields on its response, or on the error response the server makes of its failure. */
    const pass = (item: string | undefined) =>
      Effect.map(
        Effect.tapErrorCause(
          app,
          () => HttpApp.appendPreResponseHandler((_request, response) => Effect.succeed(withFields(response, item)))
        ),
        (response) => withFields(response, item)
      )

    const respond = (span: Tracer.AnySpan | undefined, verdict: decision.Verdict, units: number) => {
      annotate(span, policy.name, verdict, units)
      return verdict.pass ? pass(verdict.limit) : Effect.succeed(refusal(verdict))
    }
    const decide = (span: Tracer.AnySpan | undefined, name: string, units: number) => {
      const remembered = limit.recall(name, units)
      return remembered !== undefined
        ? respond(span, remembered, units)
        : Effect.flatMap(limit.decide(name, units), (verdict) => respond(span, verdict, units))
    }

    // One step reads the request and the span from the fiber; plain keys and costs need no more.
    return Effect.withFiberRuntime((fiber) => {
      const request = Context.unsafeGet(fiber.currentContext, HttpServerRequest.HttpServerRequest)
      const span = fiber.currentSpan
      const name = key(request)
      const units = cost === undefined ? 1 : cost(request)
      if (!Effect.isEffect(name) && !Effect.isEffect(units)) return decide(span, name, units)
      return Effect.flatMap(
        Effect.zip(evaluate(name), evaluate(units)),
        ([name, units]) => decide(span, name, units)
      )
    })
  }
}

/**
 * @internal {@link middleware}, dual: `(app, options)`, or `(options)` giving the middleware. Not `Function.dual`,
 * whose data-last form would check the options only when applied: here they are checked when it is made.
 */
export const dualMiddleware = (
  ...args: [RateLimit.Options<unknown, unknown, unknown, unknown, unknown>] | [
    HttpApp.Default<unknown, unknown>,
    RateLimit.Options<unknown, unknown, unknown, unknown, unknown>
  ]
) =>
  Effect.isEffect(args[0])
    ? middleware(args[1]!)(args[0])
    : middleware(args[0] as RateLimit.Options<unknown, unknown, unknown, unknown, unknown>)
