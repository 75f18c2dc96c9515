/** @internal The middleware: key and cost a request, ask the {@link decision.Limit}, render its verdict. */
import * as HttpApp from "@effect/platform/HttpApp"
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Tracer from "effect/Tracer"
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

/** The span attributes of a verdict. */
const attributesOf = (policy: string, verdict: decision.Verdict, units: number): Record<string, unknown> => ({
  "ratelimit.policy": policy,
  "ratelimit.decision": verdict.decision,
  "ratelimit.cost": units,
  ...(verdict.remaining !== undefined ? { "ratelimit.remaining": verdict.remaining } : {}),
  ...(verdict.retryAfter !== undefined ? { "ratelimit.retry_after": verdict.retryAfter } : {})
})

/**
 * Sets the attributes on the current span, without `Effect.annotateCurrentSpan`'s cost when there is no span (a
 * server with its tracer disabled): that one fails internally with a `NoSuchElementException`, stack trace and all.
 */
const annotate = (policy: string, verdict: decision.Verdict, units: number): Effect.Effect<void> =>
  Effect.map(Effect.serviceOption(Tracer.ParentSpan), (span) => {
    if (Option.isNone(span) || span.value._tag !== "Span") return
    const attributes = attributesOf(policy, verdict, units)
    for (const name in attributes) span.value.attribute(name, attributes[name])
  })

const evaluate = <A, E, R>(value: A | Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.isEffect(value) ? value : Effect.succeed(value)

/** @internal */
export const middleware = <LR, KE, KR, CE, CR>(options: RateLimit.Options<LR, KE, KR, CE, CR>) => {
  const limit = decision.make(options)
  const { policy } = limit
  const key: RateLimit.Key<KE, KR> = options.key ?? clientIpKey()
  const cost = options.cost

  const withFields = (response: HttpServerResponse.HttpServerResponse, item: string | undefined) => {
    const withPolicy = HttpServerResponse.setHeader(
      response,
      "ratelimit-policy",
      fields.appendItem(response.headers["ratelimit-policy"], policy.field)
    )
    return item === undefined
      ? withPolicy
      : HttpServerResponse.setHeader(withPolicy, "ratelimit", fields.appendItem(response.headers["ratelimit"], item))
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

    return Effect.gen(function*() {
      const request = yield* HttpServerRequest.HttpServerRequest
      const name = yield* evaluate(key(request))
      const units = cost === undefined ? 1 : yield* evaluate(cost(request))
      const verdict = limit.recall(name, units) ?? (yield* limit.decide(name, units))
      yield* annotate(policy.name, verdict, units)
      return verdict.pass ? yield* pass(verdict.limit) : refusal(verdict)
    })
  }
}
