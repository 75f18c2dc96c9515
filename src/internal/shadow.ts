/**
 * @internal Shadow limits: a limiter marked to be decided and spent with the enforced ones, in the same
 * store call (./limits.ts), whose denial denies nothing. What it would have denied is a {@link WouldDeny},
 * counted in {@link wouldDenyCounter} (by `policy`) and set on the current span.
 */
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Metric from "effect/Metric"
import * as MetricLabel from "effect/MetricLabel"
import type * as Option from "effect/Option"
import type * as Limiter from "../Limiter.js"
import type * as Limits from "../Limits.js"
import * as limiter from "./limiter.js"

/** @internal */
export const ShadowTypeId: Limits.ShadowTypeId = Symbol.for("wakuwaku/Limits/Shadow") as Limits.ShadowTypeId

/** @internal */
export const isShadow = (u: unknown): u is Limits.Shadow<Limiter.Limiter<never, unknown>> =>
  typeof u === "object" && u !== null && ShadowTypeId in u

/** @internal Marks `limiter` shadow; throws a `TypeError` on a value no limiter kind made (or a shadow already). */
export const make = <L extends Limiter.Limiter<never, unknown>>(value: L): Limits.Shadow<L> => {
  if (!limiter.isLimiter(value)) {
    throw new TypeError(
      `wakuwaku: only a limiter can be made a shadow limit (made by a kind's make, such as TokenBucket.make), got ${
        isShadow(value) ? "a shadow limit" : String(value)
      }`
    )
  }
  return Object.freeze({ [ShadowTypeId]: ShadowTypeId, _tag: "Shadow", limiter: value } as const)
}

/** @internal One entry of a list of limits: the limiter, and whether it is a shadow one. */
export interface Entry<L> {
  readonly limiter: L
  readonly shadow: boolean
}

/** @internal A listed limit (a limiter or a shadow of one) as an {@link Entry}. */
export const entryOf = <L>(listed: L | Limits.Shadow<L>): Entry<L> =>
  isShadow(listed)
    ? { limiter: (listed as Limits.Shadow<L>).limiter, shadow: true }
    : { limiter: listed as L, shadow: false }

/** @internal */
export const wouldDeny = (
  limit: string,
  kind: string,
  name: string,
  retryAfter: Option.Option<Duration.Duration>
): Limits.WouldDeny => Object.freeze({ _tag: "WouldDeny", limit, kind, name, retryAfter })

/** @internal The span attribute that names the policies that would have denied (a list of names). */
export const ATTRIBUTE = "wakuwaku.shadow.would_deny"

/** @internal */
export const wouldDenyCounter = Metric.counter("wakuwaku_shadow_would_deny", {
  description: "Requests allowed that a shadow limit would have denied, by policy",
  incremental: true
})

// One label array per policy (and route), kept: the metric caches its hook by the array's identity.
const labels = new Map<string, ReadonlyArray<MetricLabel.MetricLabel>>()

const labelsOf = (policy: string, route: string | undefined): ReadonlyArray<MetricLabel.MetricLabel> => {
  const id = route === undefined ? policy : `${policy}\n${route}`
  let found = labels.get(id)
  if (found === undefined) {
    labels.set(
      id,
      found = route === undefined
        ? [MetricLabel.make("policy", policy)]
        : [MetricLabel.make("policy", policy), MetricLabel.make("route", route)]
    )
  }
  return found
}

/**
 * @internal Counts each would-be denial under its policy (and `route`, the proxy route whose limit it is, if
 * any) and names them on the current span, if any.
 */
export const report = (denials: ReadonlyArray<Limits.WouldDeny>, route?: string): Effect.Effect<void> =>
  denials.length === 0 ? Effect.void : Effect.suspend(() => {
    for (const denial of denials) wouldDenyCounter.unsafeUpdate(1, labelsOf(denial.limit, route))
    return Effect.annotateCurrentSpan(ATTRIBUTE, denials.map((denial) => denial.limit))
  })
