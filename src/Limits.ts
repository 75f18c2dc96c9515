/**
 * Limits: several limits decided as one, all or nothing.
 *
 * {@link acquire} asks several limiters (any kinds: token buckets, fixed windows, sliding windows) for a cost
 * in one store call, all or nothing, and {@link shadow} marks a limit that is decided and spent in that same
 * call but never denies: what it would have denied is reported ({@link WouldDeny}), counted
 * ({@link wouldDenyCounter}) and set on the current span, so that a new limit can be seen before it is
 * enforced.
 *
 * {@link metered} runs a call against several budgets at once (requests, tokens and money, say), each a
 * {@link TokenBucket.TokenBucket}: it reserves every estimate in one store call, and either every bucket grants
 * it or none takes anything; it waits for the latest of the turns; then the call settles each budget with its
 * actual cost, in one store call again.
 *
 * **What lives in Redis.** Nothing of its own: each bucket's key, as {@link TokenBucket} describes it.
 *
 * **Guarantees.**
 * - All or nothing: one script checks every bucket, then takes from every one or from none (a refusal writes
 *   nothing). On one Redis, and on a Cluster when the keys share a hash slot, that is atomic.
 * - Each bucket keeps the rules of {@link TokenBucket.metered}: more than the estimate is taken at once (into
 *   debt), what was not used comes back only while the call's turn is the end of that bucket's queue, and a
 *   call that fails or is interrupted before it settles gives every reservation back, by the same rule.
 * - Each bucket's turns keep its bound (capacity + rate × T over any interval T); the call starts at the
 *   latest of its turns, so the starts within any interval T cost each bucket at most
 *   capacity + rate × (T + maxWait) (docs/token-bucket.md, "Several budgets as one").
 *
 * **Caveats.**
 * - On a Cluster, the buckets' keys must share a hash slot: keys in several slots fail with `RedisError`
 *   (`CROSSSLOT`), and nothing is taken.
 * - Every bucket is keyed by the same name.
 *
 * @since 0.2.0
 */
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import type * as Metric from "effect/Metric"
import type * as Option from "effect/Option"
import type * as Admission from "./Admission.js"
import * as limits from "./internal/limits.js"
import * as internal from "./internal/metered.js"
import * as shadowInternal from "./internal/shadow.js"
import type * as Limiter from "./Limiter.js"
import * as Redis from "./Redis.js"
import * as TokenBucket from "./TokenBucket.js"

/**
 * One number per bucket of `Buckets`, in its order.
 *
 * @since 0.2.0
 * @category models
 */
export type PerBucket<Buckets extends ReadonlyArray<unknown>> = { readonly [K in keyof Buckets]: number }

/**
 * Options of {@link metered}.
 *
 * @since 0.2.0
 * @category models
 */
export interface MeteredOptions<Buckets extends ReadonlyArray<unknown>> {
  /**
   * The tokens reserved from each bucket before the call, in the buckets' order (each a non-negative safe
   * integer, at most that bucket's capacity).
   */
  readonly estimate: PerBucket<Buckets>
  /** The longest the call may wait for its turns: default as long as it takes (10^11 ms). */
  readonly maxWait?: Duration.DurationInput | undefined
}

/**
 * What a call metered on several buckets is handed: `settle(actual)` settles each bucket with its actual cost,
 * in the buckets' order, in one store call, and succeeds with the tokens each gave back (see
 * {@link TokenBucket.Settle}). Once only: a second settle fails with {@link TokenBucket.AlreadySettled}.
 *
 * @since 0.2.0
 * @category models
 */
export type Settle<Buckets extends ReadonlyArray<unknown>> = (
  actual: PerBucket<Buckets>
) => Effect.Effect<PerBucket<Buckets>, TokenBucket.AlreadySettled | Redis.RedisError | Redis.InvalidInput>

/**
 * {@link TokenBucket.metered} over several buckets as one, all or nothing, keyed by one name: reserves each
 * bucket's estimate in one store call (every bucket grants it, or none takes anything: {@link
 * TokenBucket.RateLimited} with the longest retry), waits for the latest turn, runs `f(settle)`, and settles
 * every bucket with its actual cost in one store call. A call that fails or is interrupted before it settles
 * gives every reservation back (one store call), without fail. Bad input (a list that is empty or not of
 * token buckets, one estimate per bucket missing, an estimate that is not a non-negative safe integer or is
 * above its bucket's capacity) fails with `InvalidInput`, and nothing is written.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { Limits, Rate, TokenBucket } from "wakuwaku"
 *
 * const REQUESTS = TokenBucket.make<string>("llm-requests", 60, Rate.make(60, "1 minute"))
 * const TOKENS = TokenBucket.make<string>("llm-tokens", 90_000, Rate.make(90_000, "1 minute"))
 * const CENTS = TokenBucket.make<string>("llm-cents", 500, Rate.make(500, "1 day"))
 *
 * declare const complete: (prompt: string) => Effect.Effect<{ tokens: number; cents: number }>
 *
 * export const ask = (tenant: string, prompt: string) =>
 *   Limits.metered([REQUESTS, TOKENS, CENTS], tenant, { estimate: [1, 2_000, 4] }, (settle) =>
 *     Effect.tap(complete(prompt), (usage) => settle([1, usage.tokens, usage.cents])))
 * ```
 *
 * @since 0.2.0
 * @category combinators
 */
export const metered = <
  const Buckets extends readonly [TokenBucket.TokenBucket<Name>, ...ReadonlyArray<TokenBucket.TokenBucket<Name>>],
  Name extends Redis.KeyName,
  A,
  E,
  R
>(
  buckets: Buckets,
  name: Name,
  options: MeteredOptions<Buckets>,
  f: (settle: Settle<Buckets>) => Effect.Effect<A, E, R>
): Effect.Effect<
  A,
  E | TokenBucket.RateLimited | Redis.RedisError | Redis.InvalidInput,
  R | TokenBucket.Requirements<"write">
> =>
  Effect.suspend(() => {
    const list = buckets as unknown as ReadonlyArray<internal.Metered<Name>>
    const strange = Array.isArray(list) ? list.findIndex((b) => !TokenBucket.isTokenBucket(b)) : 0
    if (strange >= 0) {
      return Effect.fail(
        new Redis.InvalidInput({ operation: "Limits.metered", argument: "limits", message: notBuckets })
      )
    }
    const estimate = typeof options === "object" && options !== null ? options.estimate : undefined
    return internal.meteredMany(
      list,
      name,
      estimate as unknown as ReadonlyArray<number>,
      options?.maxWait === undefined ? internal.MAX_WAIT : options.maxWait,
      (settle) => f(settle as unknown as Settle<Buckets>),
      {
        refused: (retryAfter) => new TokenBucket.RateLimited({ retryAfter }),
        twice: (settled, actual) => new TokenBucket.AlreadySettled({ settled, actual })
      }
    )
  })

const notBuckets = "limits must be a non-empty list of token buckets (TokenBucket.make)"

/**
 * @since 0.2.0
 * @category type ids
 */
export const ShadowTypeId: unique symbol = shadowInternal.ShadowTypeId

/**
 * @since 0.2.0
 * @category type ids
 */
export type ShadowTypeId = typeof ShadowTypeId

/**
 * A limiter marked shadow ({@link shadow}): listed with the enforced limiters of {@link acquire} (or of
 * `RateLimit.middleware`), it is decided in the same store call and spends its own state as an enforced
 * limiter would, but its denial denies nothing.
 *
 * @since 0.2.0
 * @category models
 */
export interface Shadow<L> {
  readonly [ShadowTypeId]: ShadowTypeId
  readonly _tag: "Shadow"
  /** The limiter decided in the shadow. */
  readonly limiter: L
}

/**
 * Marks a limiter shadow, to see whom it would deny before it denies anyone (see {@link acquire}):
 *
 * - it is decided in the same store call (the same script) as the enforced limits, and on a Cluster by the
 *   same per-slot rules (a slot's group that spent is refunded when another slot's enforced limits deny);
 * - when the enforced limits allow a request and it would allow it too, it spends the cost, as its enforced
 *   twin would; when it would deny, it spends nothing and the request goes on: a {@link WouldDeny}, counted
 *   in {@link wouldDenyCounter} and named on the current span (`wakuwaku.shadow.would_deny`);
 * - when the enforced limits deny, nothing is spent anywhere (the shadow included) and the shadow says
 *   nothing: the enforced decision, its cost and (over HTTP) its header fields are what they would be
 *   without it, and its denial never enters the denial memory;
 * - with only shadow limits, every request is allowed.
 *
 * Throws a `TypeError` on a value that no limiter kind made. A shadow limiter needs a namespace of its own:
 * listed beside its enforced twin of the same kind and namespace, the two would share keys (refused, as a
 * limiter listed twice is).
 *
 * @since 0.2.0
 * @category constructors
 */
export const shadow: <L extends Limiter.Limiter<never, unknown>>(limiter: L) => Shadow<L> = shadowInternal.make

/**
 * A request that the enforced limits allowed and a shadow limit would have denied.
 *
 * @since 0.2.0
 * @category models
 */
export interface WouldDeny {
  readonly _tag: "WouldDeny"
  /** The shadow limit's policy: its limiter's namespace. */
  readonly limit: string
  /** Its limiter's kind, such as `"TokenBucket"`. */
  readonly kind: string
  /** The name (the key) the request was decided for. */
  readonly name: string
  /** When the shadow limit would have allowed the request; None: never (the cost is above its quota). */
  readonly retryAfter: Option.Option<Duration.Duration>
}

/**
 * Would-be denials of shadow limits: a counter, `wakuwaku_shadow_would_deny`, tagged `policy` (the shadow
 * limiter's namespace), incremented once per {@link WouldDeny}.
 *
 * @since 0.2.0
 * @category observability
 */
export const wouldDenyCounter: Metric.Metric.Counter<number> = shadowInternal.wouldDenyCounter

/**
 * A limit as {@link acquire} lists it: a limiter keyed by `Name`, or a shadow of one.
 *
 * @since 0.2.0
 * @category models
 */
export type Limit<Name extends Redis.KeyName = string> =
  | Limiter.Limiter<Name, unknown>
  | Shadow<Limiter.Limiter<Name, unknown>>

/**
 * What the limits `L` (as {@link acquire} lists them) need, as a union.
 *
 * @since 0.2.0
 * @category models
 */
export type Requirements<L> = L extends ReadonlyArray<infer One> ? Requirements<One>
  : L extends Shadow<infer X> ? Requirements<X>
  : L extends { readonly acquire: (name: never, cost: number) => Effect.Effect<infer _A, infer _E, infer R> } ? R
  : never

/**
 * What {@link acquire} decided.
 *
 * @since 0.2.0
 * @category models
 */
export interface Decision<L extends ReadonlyArray<unknown> = ReadonlyArray<unknown>> {
  /**
   * Every enforced limit allowed the cost: each was spent from, and each shadow limit that would allow it
   * too. Otherwise nothing was spent anywhere.
   */
  readonly allowed: boolean
  /**
   * Each listed limit's own verdict, in the order listed: `Denied` with its retry (None: never), or
   * `Allowed` with what it has left (after the spend when `allowed`; what it holds now otherwise). A shadow
   * limit's is what it would have decided.
   */
  readonly admissions: { readonly [K in keyof L]: Admission.Admission }
  /** When `allowed`: the shadow limits that would have denied, in the order listed. Otherwise empty. */
  readonly wouldDeny: ReadonlyArray<WouldDeny>
}

/**
 * Asks several limiters (of any kinds decided in a group) for `cost` (default 1) on `name`, in one store
 * call, all or nothing: when every enforced limit allows it, each is spent from; otherwise none is. Listed
 * limits made {@link shadow} are decided in the same call and never deny (see {@link shadow}); what they
 * would have denied is in {@link Decision.wouldDeny}. On a Cluster, keys in one hash slot are decided by one
 * script, atomically; keys in several are decided per slot and the slots that spent are refunded when
 * another denies (docs/http.md, "Several limits, one decision"). Bad input (a list that is empty or holds
 * something else, a limiter listed twice, a cost that is not a non-negative safe integer, a name the
 * limiters cannot key) fails with `InvalidInput`, and nothing is written.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { FixedWindow, Limits, Rate, TokenBucket } from "wakuwaku"
 *
 * const LOGINS = TokenBucket.make<string>("login", 20, Rate.make(1, "3 seconds"))
 * // A stricter limit to roll out: see whom it would deny before it denies anyone.
 * const LOGINS_STRICT = FixedWindow.make<string>("login-strict", 5, "1 minute")
 *
 * export const login = (user: string) =>
 *   Effect.tap(Limits.acquire([LOGINS, Limits.shadow(LOGINS_STRICT)], user), (decision) =>
 *     decision.wouldDeny.length > 0 ? Effect.logInfo(`login-strict would deny ${user}`) : Effect.void)
 * ```
 *
 * @since 0.2.0
 * @category combinators
 */
export const acquire = <
  const L extends readonly [Limit<Name>, ...ReadonlyArray<Limit<Name>>],
  Name extends Redis.KeyName
>(
  limits_: L,
  name: Name,
  cost: number = 1
): Effect.Effect<Decision<L>, Redis.RedisError | Redis.InvalidInput, Requirements<L>> =>
  limits.decideListed(limits_, name as string, cost) as unknown as Effect.Effect<
    Decision<L>,
    Redis.RedisError | Redis.InvalidInput,
    Requirements<L>
  >
