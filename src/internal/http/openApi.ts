/**
 * @internal What an `HttpApi` client and its OpenAPI document see of a rate limit: `RateLimitExceeded` on the
 * wire, an RFC 9457 problem of the draft's quota-exceeded type (`application/problem+json`), and the fields
 * (`Retry-After`, `RateLimit`, `RateLimit-Policy`) declared on the responses of the limited operations.
 */
import * as HttpApiSchema from "@effect/platform/HttpApiSchema"
import * as Duration from "effect/Duration"
import * as Schema from "effect/Schema"
import type * as AST from "effect/SchemaAST"
import type * as RateLimit from "../../RateLimit.js"
import { MAX_NAMESPACE } from "../key.js"
import * as fields from "./fields.js"
import * as render from "./render.js"

/**
 * @internal The longest `Retry-After` a limiter can ask, in seconds: a token bucket takes at most 10^17 µs to
 * fill (../tokenBucket.ts), a window lasts at most 10^14 µs (../duration.ts).
 */
export const MAX_RETRY_SECONDS = 100_000_000_000

/** @internal */
export const RetryAfterSeconds: Schema.Schema<Duration.Duration, number> = Schema.transform(
  Schema.Int.pipe(Schema.between(0, MAX_RETRY_SECONDS)).annotations({
    jsonSchema: { type: "integer", format: "int64", minimum: 0, maximum: MAX_RETRY_SECONDS }
  }),
  Schema.DurationFromSelf,
  { strict: true, decode: (seconds) => Duration.seconds(seconds), encode: fields.ceilSeconds }
).annotations({
  identifier: "RetryAfterSeconds",
  description: "Whole seconds until the request may be retried, as the Retry-After of the response"
})

/** @internal A policy's name: its limiter's namespace. */
export const PolicyName: Schema.Schema<string> = Schema.String.pipe(
  Schema.minLength(1),
  Schema.maxLength(MAX_NAMESPACE),
  Schema.pattern(/^[A-Za-z0-9_.-]+$/)
).annotations({
  identifier: "PolicyName",
  title: "PolicyName",
  description: "A rate limit's policy: its limiter's namespace"
})

const QUOTA_EXCEEDED = render.PROBLEMS.quotaExceeded

/** The 429 on the wire: the problem's members, then the typed fields as extension members. */
const Problem = Schema.Struct({
  type: Schema.Literal(QUOTA_EXCEEDED.type),
  title: Schema.Literal(QUOTA_EXCEEDED.title),
  status: Schema.Literal(429).annotations({ jsonSchema: { type: "integer", enum: [429] } }),
  detail: Schema.String,
  policy: PolicyName,
  retryAfter: RetryAfterSeconds,
  "violated-policies": Schema.Array(PolicyName)
})

/**
 * @internal `RateLimitExceeded` as it travels is what the public `RateLimitExceededEncoded` says: this type fails to
 * compile if the two differ.
 */
export type EncodedIsPublic = Is<
  [typeof Problem.Encoded] extends [RateLimit.RateLimitExceededEncoded]
    ? [RateLimit.RateLimitExceededEncoded] extends [typeof Problem.Encoded] ? true : false
    : false
>
type Is<T extends true> = T

/** What `RateLimitExceeded` holds, and makes it from. */
interface Exceeded {
  readonly policy: string
  readonly retryAfter: Duration.Duration
  readonly violatedPolicies: ReadonlyArray<string>
}

/** @internal The one-sentence explanation of a 429, for `detail`. */
export const detail = (policy: string, retryAfter: Duration.Duration): string =>
  `The quota of ${policy} is spent: retry after ${fields.ceilSeconds(retryAfter)} s.`

/**
 * @internal The schema of `RateLimitExceeded` (`instances`: the class's own, instance to instance; `make`: a new
 * one, unchecked): the problem document to the error and back, annotated for `HttpApi` (status 429, the
 * problem's media type) and named for OpenAPI.
 */
export const problemAst = <E extends Exceeded>(
  instances: Schema.Schema<E>,
  make: (fields: Exceeded) => E,
  annotations: { readonly description: string }
): AST.Transformation =>
  Schema.transform(Problem, instances, {
    strict: true,
    decode: (problem) =>
      make({ policy: problem.policy, retryAfter: problem.retryAfter, violatedPolicies: problem["violated-policies"] }),
    encode: (error) => ({
      ...QUOTA_EXCEEDED,
      status: 429 as const,
      detail: detail(error.policy, error.retryAfter),
      policy: error.policy,
      retryAfter: error.retryAfter,
      "violated-policies": error.violatedPolicies
    })
  }).annotations({
    identifier: "RateLimitExceeded",
    ...HttpApiSchema.annotations({ status: 429, description: annotations.description }),
    [HttpApiSchema.AnnotationEncoding]: { kind: "Json", contentType: render.PROBLEM_JSON }
  }).ast as AST.Transformation

// The fields in the OpenAPI document.

type Json = Record<string, unknown>

const DRAFT_FIELDS = `a Structured Field List of ${fields.DRAFT}`

const header = (required: boolean, description: string, schema: Json) => ({ description, required, schema })

const rateLimit = (required: boolean) =>
  header(required, `The policy closest to exhaustion, \`"<policy>";r=<left>;t=<seconds>\` (${DRAFT_FIELDS}, §4)`, {
    type: "string"
  })
const rateLimitPolicy = (required: boolean) =>
  header(required, `The operation's policies, \`"<policy>";q=<quota>;w=<seconds>\` (${DRAFT_FIELDS}, §3)`, {
    type: "string"
  })

const retryAfter = header(true, "Whole seconds until the request may pass, if nothing else spends (RFC 9110 §10.2.3)", {
  $ref: "#/components/schemas/RetryAfterSeconds"
})

/**
 * The headers of a limited operation's response of `status`: a 429 carries all three; a 2xx the policy always,
 * `RateLimit` unless the store failed open; any other 4xx both, when the limit ran before the error did (a
 * handler's error, a request that did not decode), and neither when a middleware that runs first refused it.
 */
const headersOf = (status: string): Json | undefined =>
  status === "429"
    ? { "Retry-After": retryAfter, "RateLimit": rateLimit(true), "RateLimit-Policy": rateLimitPolicy(true) }
    : status.startsWith("2")
    ? { "RateLimit": rateLimit(false), "RateLimit-Policy": rateLimitPolicy(true) }
    : status.startsWith("4")
    ? { "RateLimit": rateLimit(false), "RateLimit-Policy": rateLimitPolicy(false) }
    : undefined

const REF = "#/components/schemas/RateLimitExceeded"

/** Whether `schema` is, or is one of a union of, `RateLimitExceeded`. */
const refersToExceeded = (schema: unknown): boolean => {
  if (typeof schema !== "object" || schema === null) return false
  const { $ref, anyOf } = schema as { readonly $ref?: unknown; readonly anyOf?: unknown }
  return $ref === REF || (Array.isArray(anyOf) && anyOf.some(refersToExceeded))
}

/** Whether an operation's responses are a limited operation's: its 429 may be `RateLimitExceeded`. */
const isLimited = (responses: Record<string, Json>): boolean => {
  const content = responses["429"]?.["content"] as Record<string, Json> | undefined
  return content !== undefined && Object.values(content).some((media) => refersToExceeded(media["schema"]))
}

/** @internal `RateLimit.openApiFields`: the fields declared on every limited operation of `spec`, in place. */
export const openApiFields = (spec: Record<string, unknown>): Record<string, unknown> => {
  const paths = (spec["paths"] ?? {}) as Record<string, Record<string, Json>>
  for (const item of Object.values(paths)) {
    for (const operation of Object.values(item)) {
      const responses = operation["responses"] as Record<string, Json> | undefined
      if (typeof responses !== "object" || responses === null || !isLimited(responses)) continue
      for (const [status, response] of Object.entries(responses)) {
        const headers = headersOf(status)
        // The operation's own declarations win over ours.
        if (headers !== undefined) response["headers"] = { ...headers, ...(response["headers"] as Json | undefined) }
      }
    }
  }
  return spec
}
