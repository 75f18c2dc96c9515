/**
 * @internal The verdict rendered, once for every front end: the problem documents (RFC 9457) of a refusal
 * (429, 413, 503), and a refusal's status, header lines and body ({@link refusal}), which the middlewares
 * hand to `HttpServerResponse` and the proxy writes as a raw node:http head (with its own `Proxy-Status`).
 * A leaf: it knows verdicts by their type only.
 */
import type { Verdict } from "./decision.js"

/** @internal */
export const PROBLEM_JSON = "application/problem+json"

/**
 * @internal The problem types of the verdicts (RFC 9457), each with its one title (§3.1.3): the draft's
 * quota-exceeded, as it registers it for a 429 (§10.2.1), and our own for a cost above the quota (a 413).
 */
export const PROBLEMS = {
  quotaExceeded: { type: "https://iana.org/assignments/http-problem-types#quota-exceeded", title: "Quota Exceeded" },
  costAboveQuota: { type: "tag:wakuwaku,2026:cost-above-quota", title: "Cost Above the Quota" }
} as const

/** @internal The 429's body: the policies that denied. */
export const deniedBody = (names: ReadonlyArray<string>): string =>
  JSON.stringify({ ...PROBLEMS.quotaExceeded, status: 429, "violated-policies": names })

/** @internal The 413's body: a cost of `units` above the smallest `quota` of the policies `names`. */
export const tooLargeBody = (units: number, quota: number, names: ReadonlyArray<string>): string =>
  JSON.stringify({
    ...PROBLEMS.costAboveQuota,
    status: 413,
    detail: `This request costs ${units} and the policy allows at most ${quota} at once: split it.`,
    cost: units,
    quota,
    "violated-policies": names
  })

/** @internal The 503's body, under fail-closed. */
export const UNAVAILABLE_BODY = JSON.stringify({
  type: "about:blank",
  title: "Service Unavailable",
  status: 503,
  detail: "The rate limiter's store is unavailable."
})

/** @internal A refusal as it goes on the wire. */
export interface Refusal {
  readonly status: number
  /** The header lines, names in lowercase: a new object per refusal, to which a front end may add its own. */
  readonly headers: Record<string, string>
  readonly body: string
}

/**
 * @internal The header lines of a refused verdict (429, 413, 503) of a limit whose `RateLimit-Policy` is
 * `field`: the problem document's type, the fields, and for a 429 `Retry-After`. A new object per call.
 */
export const refusalHeaders = (field: string, verdict: Verdict): Record<string, string> => {
  const headers: Record<string, string> = { "content-type": PROBLEM_JSON, "ratelimit-policy": field }
  if (verdict.limit !== undefined) headers["ratelimit"] = verdict.limit
  if (verdict.retryAfter !== undefined) headers["retry-after"] = String(verdict.retryAfter)
  return headers
}

/** @internal A refused verdict as it goes on the wire: its status, {@link refusalHeaders}, its problem document. */
export const refusal = (field: string, verdict: Verdict): Refusal => ({
  status: verdict.status,
  headers: refusalHeaders(field, verdict),
  body: verdict.body ?? ""
})
