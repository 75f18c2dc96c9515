/**
 * @internal The per-request decision of a rate limit, free of any HTTP server: the limiter (or several,
 * decided as one), the store-failure policy, the denial memory, the metrics and the IETF fields. Every
 * front end (the `RateLimit` middlewares, the proxy's node:http server) keys and costs a request its own
 * way, then asks a {@link Limit} for a {@link Verdict} and renders it.
 *
 * Several limiters are decided all or nothing (../limits.ts). Their verdict names:
 * - allowed: every policy counts `allowed`; the `RateLimit` item is the most restrictive one, the one
 *   closest to being exhausted (the least remaining; on a tie, the longest `t`; then the first listed), as
 *   the draft's example with several windows does;
 * - denied: only the policies that denied count `denied` and are named in the problem body; `Retry-After` is
 *   the longest of their retries, and the `RateLimit` item the policy it comes from (`r=0`, `t` = it);
 * - a cost above a quota (413) names the policies it exceeds, and the smallest of their quotas.
 *
 * Shadow limiters (`RateLimit.shadow`) are decided in the same call (../limits.ts) and named nowhere in the
 * verdict but its `wouldDeny`, when the enforced ones allowed: not in the fields, the counts, the problem
 * body, nor the denial memory, so that every verdict is what it would be without them.
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Metric from "effect/Metric"
import * as MetricLabel from "effect/MetricLabel"
import * as Option from "effect/Option"
import type * as Limits from "../../Limits.js"
import type * as RateLimit from "../../RateLimit.js"
import * as Redis from "../../Redis.js"
import type * as TokenBucket from "../../TokenBucket.js"
import * as limits from "../limits.js"
import * as memory from "../memory.js"
import * as shadow from "../shadow.js"
import * as denials from "./denials.js"
import * as failure from "./failure.js"
import * as fields from "./fields.js"
import * as render from "./render.js"

/** @internal */
export const decisions = Metric.counter("wakuwaku_ratelimit_decisions", {
  description: "Rate-limit decisions of wakuwaku/http, by policy and decision",
  incremental: true
})

/** @internal */
export const storeFailures = Metric.counter("wakuwaku_ratelimit_store_failures", {
  description: "Failures of the rate limiter's store seen by wakuwaku/http, by policy and RedisError reason",
  incremental: true
})

/** @internal */
export const denialMemoryHits = Metric.counter("wakuwaku_ratelimit_denial_memory_hits", {
  description: "Requests wakuwaku/http refused from its denial memory without asking the store, by policy",
  incremental: true
})

/**
 * Every decision, once, keyed by {@link RateLimit.Decision}: the compiler refuses a decision missing here or
 * one the type does not name, and {@link DECISIONS} is derived from it.
 */
const EVERY_DECISION: { readonly [D in RateLimit.Decision]: null } = {
  "allowed": null,
  "denied": null,
  "unsplittable": null,
  "fallback-allowed": null,
  "fallback-denied": null,
  "fallback-unsplittable": null,
  "fail-open": null,
  "fail-closed": null
}

/** @internal Every {@link RateLimit.Decision}. */
export const DECISIONS = Object.keys(EVERY_DECISION) as ReadonlyArray<RateLimit.Decision>

/** @internal */
export const FallbackTypeId: RateLimit.FallbackTypeId = failure.FallbackTypeId

/** @internal */
export const fallback = (options: { readonly maxEntries: number }): RateLimit.Fallback => {
  const { maxEntries } = options
  if (!Number.isSafeInteger(maxEntries) || maxEntries < 1) {
    throw new RangeError(
      `wakuwaku/http: a fallback's maxEntries must be a positive safe integer, got ${String(maxEntries)}`
    )
  }
  const value: RateLimit.Fallback = {
    _tag: "Fallback",
    [FallbackTypeId]: FallbackTypeId,
    maxEntries,
    store: Redis.makeMemoryStore({ maxKeys: maxEntries })
  }
  return Object.freeze(value)
}

/**
 * @internal What to answer. `pass`: the request goes on, and its response gets `RateLimit-Policy` and, when
 * decided, the `RateLimit` item. Otherwise `status` (429, 413 or 503), `body` (a problem document), and for
 * a 429 `retryAfter` (whole seconds).
 */
export interface Verdict {
  readonly decision: RateLimit.Decision
  readonly pass: boolean
  readonly status: number
  /** The `RateLimit` item, when there is one. */
  readonly limit: string | undefined
  readonly retryAfter: number | undefined
  readonly body: string | undefined
  /** The remaining quota of an allowed request (of the policy in `limit`). */
  readonly remaining: number | undefined
  /** The policy applied: the one in `limit`, or (a 413, a 503, fail-open) the first concerned. */
  readonly policy: string
  /** A 429's or a 413's policies, those that denied. */
  readonly violated: ReadonlyArray<string>
  /** The shadow limiters that would have denied an allowed request (counted and on the span already). */
  readonly wouldDeny: ReadonlyArray<Limits.WouldDeny>
  /** The proxy route whose limit decided, when it is a route's and something would have denied. */
  readonly route?: string | undefined
  /**
   * A reserving limit's grant ({@link reserving}, the proxy's delay mode): how long the request waits for its
   * turn, and what a client gone before it gives back.
   */
  readonly granted?: TokenBucket.Granted | undefined
}

const NONE: ReadonlyArray<Limits.WouldDeny> = []

/** @internal The options a {@link Limit} is made of. */
export interface LimitOptions<LR> {
  /** A limiter, or several decided as one (all or nothing); shadow ones among them. */
  readonly limiter: RateLimit.Limiters<LR> | ReadonlyArray<RateLimit.Limiter<LR> | RateLimit.Shadow<LR>>
  readonly onStoreFailure: RateLimit.OnStoreFailure
  /** The most names whose denial is remembered, per limiter; 0 or none: no memory. */
  readonly rememberDenials?: number | undefined
  /**
   * What one unit of a request costs each listed limiter (in the list's order, shadow ones included), each a
   * positive safe integer; none: 1 each. A request of `units` costs the i-th limiter `units × costs[i]`.
   */
  readonly costs?: ReadonlyArray<number> | undefined
}

/**
 * @internal The name a request is decided under: the same for every listed limiter, or one per listed limiter
 * (in the list's order, shadow ones included), such as a proxy route's limits keyed each its own way.
 */
export type Names = limits.Names

/** @internal A rate limit made ready for requests: one limiter, or several decided as one. */
export interface Limit<LR> {
  /** The (first enforced) limiter's policy (a shadow one's when there is none). */
  readonly policy: fields.Described
  /** `RateLimit-Policy`: every enforced limiter's item ("" when there is none). */
  readonly field: string
  /** The (first enforced) limiter's denial memory, if any. */
  readonly denials: denials.Denials | undefined
  /** Every enforced limiter's denial memory. */
  readonly memories: ReadonlyArray<denials.Denials>
  /** A remembered denial of `name` at `units`, decided now without the store; undefined if none. */
  readonly recall: (name: Names, units: number) => Verdict | undefined
  /** Asks the store (or the store-failure policy) and remembers a denial. */
  readonly decide: (name: Names, units: number) => Effect.Effect<Verdict, Redis.InvalidInput, LR>
}

/** The i-th of `names` (one per listed limiter), or `names` itself (the same for every one). */
const nameAt = (names: Names, i: number): string => typeof names === "string" ? names : names[i]!

/** A limiter made ready: its policy, its metric labels, its denial memory, its 429 alone. */
interface Unit {
  readonly limiter: RateLimit.Limiter<unknown>
  /** A shadow limiter: decided, never denying, named only in `wouldDeny`. */
  readonly shadow: boolean
  readonly policy: fields.Described
  readonly name: string
  readonly quoted: string
  readonly policyLabel: MetricLabel.MetricLabel
  /** `[policyLabel]`, kept: {@link denialMemoryHits}'s labels. */
  readonly policyOnly: ReadonlyArray<MetricLabel.MetricLabel>
  readonly memo: denials.Denials | undefined
  readonly count: (decision: RateLimit.Decision) => void
  /** `[name]`: the violated policies of a 429 or a 413 of this limiter alone. */
  readonly alone: ReadonlyArray<string>
  /** The body of a 429 of this limiter alone. */
  readonly deniedBody: string
}

const unit = (listed: RateLimit.Limiter<unknown> | RateLimit.Shadow<unknown>, remember: number): Unit => {
  const { limiter, shadow: isShadow } = shadow.entryOf(listed)
  const policy = fields.describe(limiter)
  const name = policy.name
  // One label array per decision, kept: the metric caches its hook by the array's identity, so an update is a
  // lookup, not a new tagged key hashed in the registry per request.
  const policyLabel = MetricLabel.make("policy", name)
  const labels = Object.fromEntries(
    DECISIONS.map((decision) => [decision, [policyLabel, MetricLabel.make("decision", decision)]])
  ) as unknown as Record<RateLimit.Decision, ReadonlyArray<MetricLabel.MetricLabel>>
  return {
    limiter,
    shadow: isShadow,
    policy,
    name,
    quoted: fields.sfString(name),
    policyLabel,
    policyOnly: [policyLabel],
    // A shadow limiter's denial denies nothing: it is never remembered.
    memo: remember > 0 && !isShadow ? new denials.Denials(remember) : undefined,
    count: (decision) => decisions.unsafeUpdate(1, labels[decision]),
    alone: [name],
    deniedBody: render.deniedBody([name])
  }
}

const countAll = (units: ReadonlyArray<Unit>, decision: RateLimit.Decision): void => {
  for (let i = 0; i < units.length; i++) units[i]!.count(decision)
}

/** A store outage as the decisions saw it: the failure that began it, and how many calls failed since. */
interface Outage {
  readonly first: Redis.RedisError
  failures: number
}

/**
 * What the limits of one middleware (or proxy) share: the store-failure policy (normalized, ./failure.ts),
 * its fallback's store, and the outage under way, if any (one per middleware, whichever of its limiters saw
 * it).
 */
interface Shared {
  readonly failure: failure.StoreFailure
  readonly local: Redis.Service | undefined
  readonly remember: number
  outage: Outage | undefined
}

const shared = (options: Omit<LimitOptions<unknown>, "limiter" | "costs">): Shared => {
  const policy = failure.fromOption(options.onStoreFailure)
  return {
    failure: policy,
    remember: denials.validMaxEntries(options.rememberDenials ?? 0, "wakuwaku/http: rememberDenials"),
    local: policy.fallback === undefined ? undefined : memory.make(policy.fallback.store),
    outage: undefined
  }
}

/** The server's or the socket's words, with the reason: `Connection: connect ECONNREFUSED 127.0.0.1:6379`. */
const storeReason = (error: Redis.RedisError): string =>
  `${error.reason}: ${error.cause instanceof Error ? error.cause.message : String(error.cause)}`

/**
 * A store failure: the first of an outage is logged (a warning, with the store's reason), the rest only
 * counted, so that an outage under load is one line, not one per request.
 */
const failed = (context: Shared, error: Redis.RedisError, names: string): Effect.Effect<void> => {
  if (context.outage !== undefined) {
    context.outage.failures++
    return Effect.void
  }
  context.outage = { first: error, failures: 1 }
  const mode = context.failure.mode
  return Effect.logWarning(
    `wakuwaku/http: the rate limiter's store failed (${storeReason(error)}); ${failure.POLICIES[mode].meanwhile}`
  ).pipe(
    Effect.annotateLogs({
      "ratelimit.policy": names,
      "ratelimit.onStoreFailure": mode,
      "ratelimit.storeError": error.message
    })
  )
}

/** The store answered: the end of the outage under way, if any, is logged (with what began it), once. */
const answered = (context: Shared, names: string): Effect.Effect<void> =>
  Effect.suspend(() => {
    const outage = context.outage
    if (outage === undefined) return Effect.void
    context.outage = undefined
    return Effect.logInfo(
      `wakuwaku/http: the rate limiter's store answers again, after ${outage.failures} failed ${
        outage.failures === 1 ? "call" : "calls"
      } (${storeReason(outage.first)})`
    ).pipe(
      Effect.annotateLogs({
        "ratelimit.policy": names,
        "ratelimit.onStoreFailure": context.failure.mode,
        "ratelimit.storeError": outage.first.message
      })
    )
  })

const verdict = (
  decision: RateLimit.Decision,
  pass: boolean,
  status: number,
  policy: string,
  fields: { limit?: string; retryAfter?: number; body?: string; remaining?: number; violated?: ReadonlyArray<string> }
): Verdict => ({
  decision,
  pass,
  status,
  limit: fields.limit,
  retryAfter: fields.retryAfter,
  body: fields.body,
  remaining: fields.remaining,
  policy,
  violated: fields.violated ?? [],
  wouldDeny: NONE
})

/** Allowed by every one of `units`: the `RateLimit` item is `applied`'s, with `r` left and `t`. */
const allowed = (units: ReadonlyArray<Unit>, applied: Unit, r: number, t: number, viaFallback: boolean): Verdict => {
  const decision = viaFallback ? "fallback-allowed" : "allowed"
  countAll(units, decision)
  return verdict(decision, true, 0, applied.name, { limit: `${applied.quoted};r=${r};t=${t}`, remaining: r })
}

/** A limiter placed in a limit's list: its position, and what one unit of a request costs it. */
interface Placed extends Unit {
  readonly at: number
  readonly weight: number
}

/** What a request of `units` costs `u`. */
const costOf = (u: Placed, units: number): number => u.weight === 1 ? units : units * u.weight

/** A 413: a cost above the quota of each of `never`; the body names the smallest of their quotas, and its cost. */
const unsplittable = (never: ReadonlyArray<Placed>, units: number, viaFallback: boolean): Verdict => {
  const decision = viaFallback ? "fallback-unsplittable" : "unsplittable"
  countAll(never, decision)
  const violated = never.length === 1 ? never[0]!.alone : never.map((u) => u.name)
  let smallest = never[0]!
  for (const u of never) if (u.policy.quota < smallest.policy.quota) smallest = u
  return verdict(decision, false, 413, never[0]!.name, {
    body: render.tooLargeBody(costOf(smallest, units), smallest.policy.quota, violated),
    violated
  })
}

/** A 429 of the policies `by`, with their retries in whole seconds: the longest names the `RateLimit` item. */
const denied = (by: ReadonlyArray<Unit>, seconds: ReadonlyArray<number>, decision: RateLimit.Decision): Verdict => {
  let longest = 0
  for (let i = 1; i < by.length; i++) if (seconds[i]! > seconds[longest]!) longest = i
  const applied = by[longest]!
  countAll(by, decision)
  const alone = by.length === 1
  const violated = alone ? applied.alone : by.map((u) => u.name)
  return verdict(decision, false, 429, applied.name, {
    limit: `${applied.quoted};r=0;t=${seconds[longest]!}`,
    retryAfter: seconds[longest]!,
    body: alone ? applied.deniedBody : render.deniedBody(violated),
    violated
  })
}

/** One limiter's admission as a verdict; `only` is `[that limiter]`, made once. */
const fromAdmission = (
  only: readonly [Placed],
  admission: TokenBucket.Admission,
  units: number,
  viaFallback: boolean
): Verdict => {
  const u = only[0]
  if (admission._tag === "Allowed") {
    return allowed(only, u, admission.remaining, u.policy.effectiveWindow(admission), viaFallback)
  }
  if (Option.isNone(admission.retryAfter)) return unsplittable(only, units, viaFallback)
  return denied(only, [fields.ceilSeconds(admission.retryAfter.value)], viaFallback ? "fallback-denied" : "denied")
}

/** Several limiters' outcome as one verdict (see the module doc). */
const fromOutcome = (
  units: ReadonlyArray<Placed>,
  outcome: limits.Outcome,
  cost: number,
  viaFallback: boolean
): Verdict => {
  const { admissions } = outcome
  if (outcome.allowed) {
    // The most restrictive: the least remaining, then the longest t, then the first.
    let best = 0
    let bestT = -1
    let bestR = Infinity
    admissions.forEach((admission, i) => {
      const allowed = admission as fields.Allowed
      const r = allowed.remaining
      const t = units[i]!.policy.effectiveWindow(allowed)
      if (r < bestR || (r === bestR && t > bestT)) [best, bestR, bestT] = [i, r, t]
    })
    return allowed(units, units[best]!, bestR, bestT, viaFallback)
  }
  const never = units.filter((_, i) => {
    const a = admissions[i]!
    return a._tag === "Denied" && Option.isNone(a.retryAfter)
  })
  if (never.length > 0) return unsplittable(never, cost, viaFallback)
  const by: Array<Unit> = []
  const seconds: Array<number> = []
  admissions.forEach((admission, i) => {
    if (admission._tag === "Allowed" || Option.isNone(admission.retryAfter)) return
    by.push(units[i]!)
    seconds.push(fields.ceilSeconds(admission.retryAfter.value))
  })
  return denied(by, seconds, viaFallback ? "fallback-denied" : "denied")
}

/**
 * How a limit asks a store: one limiter (its admission) or several decided as one (their outcome), for a
 * request of `units` under `names`. `judge` makes the verdict of an answer; `deniers` are the limiters an
 * answer denied.
 */
interface Asking<A> {
  readonly ask: (names: Names, units: number) => Effect.Effect<A, Redis.RedisError | Redis.InvalidInput, unknown>
  readonly judge: (answer: A, names: Names, units: number, viaFallback: boolean) => Verdict
  readonly deniers: (answer: A) => ReadonlyArray<Placed>
  /** Remembers a denial of this answer; none: the store asked again ({@link remember}). */
  readonly remember?: (answer: A, names: Names, units: number) => Effect.Effect<void, never, Redis.Redis>
}

const one = (u: Placed): Asking<TokenBucket.Admission> => {
  const only = [u] as const
  return {
    ask: (names, units) => u.limiter.acquire(nameAt(names, 0), costOf(u, units)),
    judge: (admission, _names, units, viaFallback) => fromAdmission(only, admission, units, viaFallback),
    deniers: () => only
  }
}

/** Each limiter's cost of a request of `units`: one for all when every weight is 1. */
const costsOf = (units: ReadonlyArray<Placed>): (n: number) => limits.Costs =>
  units.every((u) => u.weight === 1) ? (n) => n : (n) => units.map((u) => costOf(u, n))

const several = (units: ReadonlyArray<Placed>, route: string | undefined): Asking<limits.Outcome> => {
  const limiters = units.map((u) => u.limiter) as unknown as ReadonlyArray<limits.AnyLimiter>
  const costs = costsOf(units)
  if (!units.some((u) => u.shadow)) {
    return {
      ask: (names, n) => limits.acquire(limiters, names, costs(n)),
      judge: (outcome, _names, n, viaFallback) => fromOutcome(units, outcome, n, viaFallback),
      deniers: (outcome) => units.filter((_, i) => outcome.admissions[i]!._tag === "Denied")
    }
  }
  const shadows = units.map((u) => u.shadow)
  // The enforced limiters' indexes: their verdict is judged alone, as it would be without the shadow ones.
  const at = units.flatMap((u, i) => (u.shadow ? [] : [i]))
  const enforced = at.map((i) => units[i]!)
  return {
    ask: (names, n) => limits.acquire(limiters, names, costs(n), shadows),
    judge: (outcome, names, n, viaFallback) => {
      const decided = enforced.length === 0
        ? verdict(viaFallback ? "fallback-allowed" : "allowed", true, 0, "", {})
        : fromOutcome(enforced, { ...outcome, admissions: at.map((i) => outcome.admissions[i]!) }, n, viaFallback)
      if (!outcome.allowed) return decided
      const wouldDeny = limits.wouldDenyOf(limiters, shadows, outcome, names)
      return wouldDeny.length === 0 ? decided : { ...decided, wouldDeny, route }
    },
    deniers: (outcome) => enforced.filter((_, j) => outcome.admissions[at[j]!]!._tag === "Denied")
  }
}

/** A reservation, with when it was asked and when its answer came (the denial memory's two instants). */
interface Reserved {
  readonly reservation: TokenBucket.Reservation
  readonly sentAt: number
  readonly receivedAt: number
}

/**
 * How a reserving limit asks (one token bucket, {@link reserving}): a reservation of up to `maxWait`. Granted,
 * it is allowed (`r` the whole tokens left, 0 in debt; `t` until the bucket is full again, its debt paid
 * first) and carries its grant; refused, a 429 whose `Retry-After` is when the same reservation would be
 * granted, or a 413 for a cost above the capacity. A refusal is remembered as it came: the store repeats it
 * until then, as it repeats an acquire's denial (./denials.ts), unless a turn ahead is given back.
 */
const reserveOne = (u: Placed, maxWait: Duration.Duration): Asking<Reserved> => {
  const bucket = u.limiter as unknown as TokenBucket.TokenBucket<string>
  const only = [u] as const
  return {
    ask: (names, units) =>
      Effect.suspend(() => {
        const sentAt = denials.now()
        return Effect.map(
          bucket.reserve(nameAt(names, 0), costOf(u, units), maxWait),
          (reservation): Reserved => ({ reservation, sentAt, receivedAt: denials.now() })
        )
      }),
    judge: ({ reservation }, _names, units, viaFallback) => {
      if (reservation._tag === "Refused") {
        const { retryAfter } = reservation
        if (Option.isNone(retryAfter)) return unsplittable(only, units, viaFallback)
        return denied(only, [fields.ceilSeconds(retryAfter.value)], viaFallback ? "fallback-denied" : "denied")
      }
      // Whole tokens (rounded down): t until the bucket is full again, a debt (a negative level) paid first.
      const level = Math.floor(reservation.level)
      const t = u.policy.effectiveWindow({ _tag: "Allowed", remaining: level })
      return { ...allowed(only, u, Math.max(0, level), t, viaFallback), granted: reservation }
    },
    deniers: () => only,
    remember: ({ receivedAt, reservation, sentAt }, names, units) =>
      Effect.sync(() => {
        if (reservation._tag === "Refused" && Option.isSome(reservation.retryAfter)) {
          const ms = Duration.toMillis(reservation.retryAfter.value)
          u.memo?.remember(nameAt(names, 0), units, ms, sentAt, receivedAt)
        }
      })
  }
}

/** A verdict, once its would-be denials (if any) are counted (with its route, if any) and set on the span. */
const reported = (decided: Verdict): Effect.Effect<Verdict> =>
  decided.wouldDeny.length === 0
    ? Effect.succeed(decided)
    : Effect.as(shadow.report(decided.wouldDeny, decided.route), decided)

/**
 * The store failed: count it, log it if it begins an outage, and apply the store-failure policy: its fixed
 * verdict (fail-open, fail-closed), or the fallback's store asked as the store would have been.
 */
const onStoreFailure = <A>(asking: Asking<A>, units: ReadonlyArray<Placed>, context: Shared, policies: string) => {
  const first = units[0]
  if (first === undefined) {
    // Shadow limiters only: a request is always allowed, whatever the store does.
    const open = verdict("fail-open", true, 0, "", {})
    return (error: Redis.RedisError): Effect.Effect<Verdict, Redis.InvalidInput, unknown> =>
      Effect.as(failed(context, error, policies), open)
  }
  const policy = failure.POLICIES[context.failure.mode]
  const closed = verdict("fail-closed", false, 503, first.name, { body: render.UNAVAILABLE_BODY })
  const fixed = policy.decision === undefined
    ? undefined
    : policy.pass
    ? verdict(policy.decision, true, 0, first.name, {})
    : verdict(policy.decision, false, 503, first.name, { body: render.UNAVAILABLE_BODY })
  const refuse = Effect.sync(() => {
    countAll(units, "fail-closed")
    return closed
  })
  const local = context.local
  return (
    error: Redis.RedisError,
    names: Names,
    n: number
  ): Effect.Effect<Verdict, Redis.InvalidInput, unknown> => {
    for (const u of units) storeFailures.unsafeUpdate(1, [u.policyLabel, MetricLabel.make("reason", error.reason)])
    const logged = failed(context, error, policies)
    if (fixed !== undefined || local === undefined) {
      const decided = fixed ?? closed
      return Effect.zipRight(
        logged,
        Effect.sync(() => {
          countAll(units, decided.decision)
          return decided
        })
      )
    }
    return Effect.zipRight(
      logged,
      asking.ask(names, n).pipe(
        Effect.flatMap((answer) => reported(asking.judge(answer, names, n, true))),
        Effect.provideService(Redis.Redis, local),
        // The embedded store does not fail for want of a server; if it ever does, refuse.
        Effect.catchTag("RedisError", () => refuse)
      )
    )
  }
}

/**
 * Remembers the store's denial of `names` at `n` units by the limiters `by`, as the store repeats it when
 * asked again (`limits.check`), now that this request's own refunds have landed: only the limiters that
 * still deny, each with the retry it gives then. A denial that another request's spend made, refunded since
 * (a Cluster's split decision, ../limits.ts), is not kept. If the check fails, nothing is remembered.
 */
const remember = (by: ReadonlyArray<Placed>, names: Names, n: number): Effect.Effect<void, never, Redis.Redis> =>
  Effect.suspend(() => {
    const sentAt = denials.now()
    const byNames = typeof names === "string" ? names : by.map((u) => nameAt(names, u.at))
    const costs = by.map((u) => costOf(u, n))
    return limits.check(by.map((u) => u.limiter) as unknown as ReadonlyArray<limits.AnyLimiter>, byNames, costs).pipe(
      Effect.map((waits) => {
        const receivedAt = denials.now()
        waits.forEach((ms, i) => {
          const u = by[i]!
          if (ms > 0) u.memo?.remember(nameAt(names, u.at), costs[i]!, ms, sentAt, receivedAt)
        })
      }),
      Effect.ignore
    )
  })

/** A remembered denial of `names` at `n` units by any of `units`, decided now without the store; undefined if none. */
const recall = (units: ReadonlyArray<Placed>, names: Names, n: number): Verdict | undefined => {
  let by: Array<Unit> | undefined
  let seconds: Array<number> | undefined
  for (const u of units) {
    const ms = u.memo?.recall(nameAt(names, u.at), costOf(u, n))
    if (ms === undefined) continue
    denialMemoryHits.unsafeUpdate(1, u.policyOnly)
    ;(by ??= []).push(u)
    ;(seconds ??= []).push(Math.max(1, Math.ceil(ms / 1000)))
  }
  return by === undefined ? undefined : denied(by, seconds!, "denied")
}

/**
 * The decision of a request: the store asked (during an outage, its answer ends it), its denial (a 429, not
 * a 413) remembered if the memory is on, its failure given to the store-failure policy.
 */
const decider = <A>(asking: Asking<A>, units: ReadonlyArray<Placed>, context: Shared, policies: string) => {
  const remembering = units.some((u) => u.memo !== undefined)
  const back = answered(context, policies)
  const failedOver = onStoreFailure(asking, units, context, policies)
  const keep = asking.remember ??
    ((answer: A, names: Names, n: number) => remember(asking.deniers(answer), names, n))
  const settle = (answer: A, names: Names, n: number) => {
    const decided = asking.judge(answer, names, n, false)
    return decided.decision === "denied" && remembering
      ? Effect.as(keep(answer, names, n), decided)
      : reported(decided)
  }
  return (names: Names, n: number): Effect.Effect<Verdict, Redis.InvalidInput, unknown> =>
    Effect.suspend(() => {
      const asked = asking.ask(names, n)
      // During an outage, an answer ends it; otherwise nothing is added to the hot path.
      return (context.outage === undefined ? asked : Effect.zipLeft(asked, back)).pipe(
        Effect.flatMap((answer) => settle(answer, names, n)),
        Effect.catchTag("RedisError", (error) => failedOver(error, names, n))
      )
    })
}

/**
 * The limit of `listed` (one or more limiters), with `context`'s store-failure policy; `costs`: what one unit
 * costs each (1 each when none); `route`: the proxy route it is a limit of, if any.
 */
const limitOf = <LR>(
  listed: ReadonlyArray<Unit>,
  context: Shared,
  costs?: ReadonlyArray<number>,
  route?: string
): Limit<LR> => {
  const units: ReadonlyArray<Placed> = listed.map((u, at) => ({ ...u, at, weight: costs?.[at] ?? 1 }))
  // The enforced limiters: those the fields, the counts, the store-failure policy and the memory know.
  const enforced = units.filter((u) => !u.shadow)
  const first = enforced[0] ?? units[0]!
  const policies = enforced.map((u) => u.name).join(", ")
  const remembering = enforced.some((u) => u.memo !== undefined)
  const decide = units.length > 1 || first.shadow
    ? decider(several(units, route), enforced, context, policies)
    : decider(one(first), units, context, policies)
  return {
    policy: first.policy,
    field: enforced.map((u) => u.policy.field).join(", "),
    denials: enforced[0]?.memo,
    memories: enforced.flatMap((u) => u.memo === undefined ? [] : [u.memo]),
    recall: (names, n) => remembering ? recall(enforced, names, n) : undefined,
    // The limiters need LR: what they were given as.
    decide: decide as (names: Names, units: number) => Effect.Effect<Verdict, Redis.InvalidInput, LR>
  }
}

type Listed<LR> = RateLimit.Limiter<LR> | RateLimit.Shadow<LR>

/** `Array.isArray`, which narrows a readonly list to `any[]`, for a list of limiters. */
const isList = <A>(u: A | ReadonlyArray<A>): u is ReadonlyArray<A> => Array.isArray(u)

/** The limiters (and shadow ones) of `limiter`: one, or a non-empty list of distinct ones (else a `TypeError`). */
const listOf = <LR>(limiter: Listed<LR> | ReadonlyArray<Listed<LR>>): ReadonlyArray<Listed<LR>> => {
  if (!isList(limiter)) {
    fields.describe(shadow.entryOf(limiter).limiter)
    return [limiter]
  }
  if (limiter.length === 0) throw new TypeError("wakuwaku/http: a list of limiters must not be empty")
  const plain = limiter.map((l) => shadow.entryOf(l).limiter)
  for (const l of plain) fields.describe(l)
  // Every member was described above, so a kind made it: the class the group engine decides.
  const twice = limits.checkGroup(plain as unknown as ReadonlyArray<limits.AnyLimiter>)
  if (twice !== undefined) throw new TypeError(twice)
  return limiter
}

/** The costs of `options`, checked against its list of `count` limiters (a `TypeError` or `RangeError` now). */
const checkedCosts = (costs: ReadonlyArray<number> | undefined, count: number): ReadonlyArray<number> | undefined => {
  if (costs === undefined) return undefined
  if (costs.length !== count) {
    throw new TypeError(`wakuwaku/http: one cost per limiter expected (${count}), got ${costs.length}`)
  }
  for (const cost of costs) {
    if (!Number.isSafeInteger(cost) || cost < 1) {
      throw new RangeError(`wakuwaku/http: a limiter's cost must be a positive safe integer, got ${String(cost)}`)
    }
  }
  return costs
}

/**
 * @internal Prepares a limit: checks the options (a `TypeError` or `RangeError` now), counters, bodies. `route`:
 * the proxy route it is a limit of, whose name its would-be denials are counted with.
 */
/**
 * @internal A limit that reserves instead of acquiring (the proxy's delay mode, ../proxy/delay.ts): one token
 * bucket (else a `TypeError`), each request a reservation of up to `maxWait` in one store call, its verdict
 * carrying the grant. The store-failure policy, the denial memory and the counts are the other limits'.
 */
export const reserving = <LR>(options: LimitOptions<LR>, maxWait: Duration.Duration, route?: string): Limit<LR> => {
  const context = shared(options)
  const listed = listOf(options.limiter)
  const only = listed.length === 1 ? listed[0]! : undefined
  if (only === undefined || shadow.entryOf(only).shadow || !canReserve(only)) {
    const got = only === undefined
      ? `${listed.length} limiters`
      : shadow.entryOf(only).shadow
      ? "a shadow limiter"
      : `a ${fields.describe(shadow.entryOf(only).limiter).kind}`
    throw new TypeError(
      "wakuwaku/http: a request waits its turn (delay) in one token bucket's reservation: the limiter must be " +
        `one TokenBucket, got ${got}`
    )
  }
  const costs = checkedCosts(options.costs, 1)
  // One unit, so that the limit's recall and the reservation's refusals share its denial memory.
  const made = unit(only, context.remember)
  const limit = limitOf<LR>([made], context, costs, route)
  const u: Placed = { ...made, at: 0, weight: costs?.[0] ?? 1 }
  const decide = decider(reserveOne(u, maxWait), [u], context, u.name)
  return { ...limit, decide: decide as Limit<LR>["decide"] }
}

/** @internal Whether a limiter reserves turns (`reserve` and `cancel`, as a token bucket does). */
export const canReserve = (limiter: unknown): boolean =>
  typeof limiter === "object" && limiter !== null &&
  typeof (limiter as { readonly reserve?: unknown }).reserve === "function" &&
  typeof (limiter as { readonly cancel?: unknown }).cancel === "function"

export const make = <LR>(options: LimitOptions<LR>, route?: string): Limit<LR> => {
  const context = shared(options)
  const listed = listOf(options.limiter)
  return limitOf(
    listed.map((l) => unit(l, context.remember)),
    context,
    checkedCosts(options.costs, listed.length),
    route
  )
}

/**
 * @internal The limits of a middleware whose limiter is chosen per request: the store-failure policy checked
 * now; each limiter made ready once, when first chosen, and kept while it is (a weak map: a limiter made per
 * request costs its preparation each time, and its denial memory lasts as long as it does); a list chosen
 * again (the same array) is the same limit.
 */
export const registry = (options: Omit<LimitOptions<unknown>, "limiter" | "costs">) => {
  const context = shared(options)
  const units = new WeakMap<object, Unit>()
  const lists = new WeakMap<object, Limit<unknown>>()
  const unitOf = (limiter: Listed<unknown>) => {
    let found = units.get(limiter)
    if (found === undefined) units.set(limiter, found = unit(limiter, context.remember))
    return found
  }
  return <LR>(limiter: Listed<LR> | ReadonlyArray<Listed<LR>>): Limit<LR> => {
    if (typeof limiter !== "object" || limiter === null) {
      throw new TypeError(`wakuwaku/http: a policy chose no limiter, got ${String(limiter)}`)
    }
    let found = lists.get(limiter)
    if (found === undefined) lists.set(limiter, found = limitOf(listOf(limiter).map(unitOf), context))
    return found as Limit<LR>
  }
}
