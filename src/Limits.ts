/**
 * Limits: several limits decided as one, all or nothing.
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
import * as internal from "./internal/metered.js"
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
