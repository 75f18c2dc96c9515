/**
 * TokenBucket: a rate limiter whose buckets live in Redis and refill continuously on the Redis
 * server's clock.
 *
 * Each name has a bucket holding at most `capacity` tokens, refilled at a constant {@link Rate.Rate}.
 * A request takes `cost` tokens and is denied if the bucket holds fewer; a denied request takes
 * nothing. Buckets start full, so a name seen for the first time gets its whole burst. Because the
 * state is in Redis, the limit holds across every replica of a service.
 *
 * A caller that would rather wait than be refused {@link TokenBucket.reserve}s: the bucket may go into
 * debt by up to the refill of `maxWait`, and the caller starts when the debt is paid. {@link throttle}
 * does this around an effect, for outbound calls shared by every replica ("at most 100 calls a second
 * to the partner's API").
 *
 * **What lives in Redis.** One string per name that is not full:
 * `@@wakuwaku:TokenBucket:<namespace>:<name>` holding `"<tokens> <ts>"` (tokens fractional, negative while
 * the bucket is in debt, ts in server microseconds). Its TTL is the time until the bucket is full
 * again; a full bucket has no key. Idle names use no memory.
 *
 * **Guarantees.**
 * - Atomic: one Lua script reads, refills, takes and stores. However many replicas call at once, no
 *   token is ever spent twice.
 * - One clock: `now` is the Redis server's `TIME`, read inside the script, never the client's clock, so
 *   skew between replicas cannot bend the rate. This relies on script effects replication, the default
 *   since Redis 5.
 * - `Denied.retryAfter` is exact: a retry after that long succeeds if nothing else takes tokens.
 * - Reservations queue in the order Redis ran them, from every replica: each waits for the debt of
 *   those before it, so over any interval T the turns granted (when each may start, on the server's
 *   clock) are at most capacity + rate × T, and they are spread evenly. One script call per
 *   reservation, no retry loop.
 * - The bound holds whatever callers give up, in any order, from any number of replicas:
 *   {@link TokenBucket.cancel} reclaims a reservation's tokens only while its turn is the end of the
 *   queue, so no turn is ever handed out twice. Tokens given back by {@link TokenBucket.refund} or
 *   {@link TokenBucket.reset} are outside it: they count as refill.
 *
 * **Caveats.**
 * - `acquire` always writes (even a denial stores the refilled level), so it needs
 *   `Write<TokenBucket.Entity>`; a replica cannot serve it. {@link TokenBucket.peek} only reads.
 * - Effect's `TestClock` cannot move Redis time: test with short real periods.
 * - A reply lost to a dropped connection fails with `RedisError` (`Timeout`); the script may have run.
 *
 * @example
 * ```ts
 * import { Duration, Effect, Option } from "effect"
 * import { Rate, Redis, TokenBucket } from "wakuwaku"
 *
 * // Bursts of 20 logins per address, one more every 3 seconds.
 * export const LOGINS = TokenBucket.make<string>("login", 20, Rate.make(1, "3 seconds"))
 *
 * export const checkLogin = (address: string) =>
 *   Effect.map(LOGINS.acquire(address, 1), (admission) =>
 *     TokenBucket.Admission.$match(admission, {
 *       Allowed: () => "proceed",
 *       Denied: ({ retryAfter }) =>
 *         Option.match(retryAfter, {
 *           onNone: () => "too large: split the request",
 *           onSome: (wait) => `too many requests, retry in ${Math.ceil(Duration.toSeconds(wait))} s`
 *         })
 *     }))
 *
 * checkLogin("203.0.113.7").pipe(Effect.provide(Redis.layer({ url: "redis://127.0.0.1:6379" })))
 * ```
 *
 * @since 0.1.0
 */
import type * as Data from "effect/Data"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import { dual } from "effect/Function"
import type * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as Admission_ from "./Admission.js"
import type * as Capability from "./Capability.js"
import * as internal from "./internal/tokenBucket.js"
import type * as Limiter from "./Limiter.js"
import type * as Rate from "./Rate.js"
import type * as Redis from "./Redis.js"

/**
 * @since 0.1.0
 * @category type ids
 */
export const TypeId: unique symbol = internal.TypeId

/**
 * @since 0.1.0
 * @category type ids
 */
export type TypeId = typeof TypeId

/**
 * Whether a value is a limiter made by {@link make}.
 *
 * @since 0.1.0
 * @category guards
 */
export const isTokenBucket: (u: unknown) => u is TokenBucket<never> = internal.isTokenBucket

/**
 * The entity that token-bucket operations read and write.
 *
 * @since 0.1.0
 * @category capabilities
 */
export type Entity = Capability.Entity<"TokenBucket">

/**
 * @since 0.1.0
 * @category capabilities
 */
export const entity: Entity = internal.entity

/**
 * What an operation needs: `Redis` and the right to write (`Requirements<"write">`, the default) or read
 * token buckets, as every structure's `Requirements` says it.
 *
 * @since 0.1.0
 * @category capabilities
 */
export type Requirements<Access extends "read" | "write" = "write"> =
  | Redis.Redis
  // Spelled out rather than through the `Entity` alias, so that compile errors name the entity.
  | (Access extends "write" ? Capability.Write<Capability.Entity<"TokenBucket">>
    : Capability.Read<Capability.Entity<"TokenBucket">>)

/**
 * The outcome of an acquire (the `Admission` module's, shared by every limiter).
 *
 * - `Allowed`: the tokens were taken. `remaining` is the whole tokens left.
 * - `Denied`: nothing was taken. `retryAfter` is how long until the request would succeed if nothing
 *   else takes tokens (whole milliseconds, rounded up), or `None` when it can never succeed because
 *   `cost` exceeds `capacity`: split the request instead of retrying.
 *
 * @since 0.1.0
 * @category models
 */
export type Admission = Admission_.Admission

/**
 * Constructors and matchers of {@link Admission}: `Admission.Allowed({ remaining })`, `Admission.$is`,
 * `Admission.$match`.
 *
 * @since 0.1.0
 * @category models
 */
export const Admission: Data.TaggedEnum.Constructor<Admission> = Admission_.Admission

/**
 * The outcome of a {@link TokenBucket.reserve}.
 *
 * - `Granted`: the tokens were taken, perhaps into debt.
 *   - `wait` is how long the caller must wait before it starts, until the debt is paid (whole
 *     milliseconds, rounded up; zero when the bucket held enough; never more than `maxWait`).
 *   - `cost` is the tokens it took.
 *   - `grantedAt` is the server time it was granted at (Redis `TIME`, whole microseconds since the
 *     epoch; Effect's `Clock` on the embedded backend).
 *   - `level` is the tokens the bucket held just after it took them: fractional, negative while in
 *     debt. With `grantedAt`, its place in the queue, which {@link TokenBucket.cancel} reads: its turn
 *     (the end of the queue just after it) is `grantedAt − level / rate`, and it may start from
 *     `max(grantedAt, turn)` (in µs: `grantedAt + max(0, −level) × rate.periodMicros / rate.tokens`).
 * - `Refused`: nothing was taken. `retryAfter` is how long until the same reservation would be granted
 *   if nothing else takes tokens (whole milliseconds), or `None` when `cost` exceeds `capacity`.
 *
 * @since 0.1.0
 * @category models
 */
export type Reservation = Data.TaggedEnum<{
  Granted: {
    readonly wait: Duration.Duration
    readonly cost: number
    readonly grantedAt: number
    readonly level: number
  }
  Refused: { readonly retryAfter: Option.Option<Duration.Duration> }
}>

/**
 * A granted {@link Reservation}: what {@link TokenBucket.cancel} gives back.
 *
 * @since 0.1.0
 * @category models
 */
export type Granted = Data.TaggedEnum.Value<Reservation, "Granted">

/**
 * Constructors and matchers of {@link Reservation}: `Reservation.Granted({ wait, cost, grantedAt, level })`,
 * `Reservation.$is`, `Reservation.$match`.
 *
 * @since 0.1.0
 * @category models
 */
export const Reservation: Data.TaggedEnum.Constructor<Reservation> = internal.Reservation

/**
 * A token-bucket limiter: a plain immutable value, declared once as a module-level constant.
 *
 * @since 0.1.0
 * @category models
 */
export interface TokenBucket<in Name extends Redis.KeyName> {
  readonly [TypeId]: TypeId
  /** What it says of itself, as every limiter does: its kind and its policy (`Limiter.Description`). */
  readonly [Limiter.TypeId]: Limiter.Description
  /** A one-line description for logs. */
  toString(): string
  /** Keeps this limiter's keys apart from every other's. */
  readonly namespace: string
  /** The most tokens a bucket holds: the burst. */
  readonly capacity: number
  /** How fast a bucket refills. */
  readonly rate: Rate.Rate
  /**
   * Takes `cost` tokens (a non-negative safe integer) from `name`'s bucket if it holds that many.
   * Always writes. Bad input fails with `InvalidInput` and sends nothing.
   */
  readonly acquire: (
    name: Name,
    cost: number
  ) => Effect.Effect<Admission, Redis.RedisError | Redis.InvalidInput, Requirements<"write">>
  /**
   * Takes `cost` tokens (a non-negative safe integer) from `name`'s bucket if the tokens left would be
   * at least −(rate × `maxWait`): the bucket may go into debt, and the caller is told to wait until the
   * refill has paid it. `maxWait` is a duration from 0 to 10^11 ms, counted in whole milliseconds
   * (rounded down); with 0 this is {@link TokenBucket.acquire}. Reservations queue behind one another
   * in the order Redis runs them, whichever replica makes them. A reservation given up on goes back by
   * {@link TokenBucket.cancel}. One script call; always writes. Bad input fails with `InvalidInput` and
   * sends nothing.
   */
  readonly reserve: (
    name: Name,
    cost: number,
    maxWait: Duration.DurationInput
  ) => Effect.Effect<Reservation, Redis.RedisError | Redis.InvalidInput, Requirements<"write">>
  /**
   * Gives back a reservation that `reserve(name, …)` granted and that will not start: its caller gave up
   * while it waited. Its tokens come back (never beyond `capacity`) only if its turn is still the end of
   * `name`'s queue, that is, every reservation granted after it has been given back already; otherwise
   * nothing is written and its turn lapses, unused, so that no turn is ever handed out twice. Give back
   * the last first, and each reclaims in turn. Succeeds with whether its tokens came back (false for a
   * bucket that is full again). Give each reservation back once: a second cancel of one that was
   * reclaimed may reclaim the turn of a reservation granted since. A reservation that is not a `Granted`
   * as `reserve` made it fails with `InvalidInput` (argument `reservation`) and sends nothing.
   */
  readonly cancel: (
    name: Name,
    reservation: Granted
  ) => Effect.Effect<boolean, Redis.RedisError | Redis.InvalidInput, Requirements<"write">>
  /**
   * Gives `cost` tokens (a non-negative safe integer) back to `name`'s bucket: paying its debt first,
   * never beyond `capacity`. For work acquired (by {@link TokenBucket.acquire}) that was not done after
   * all; a reservation given up on goes back by {@link TokenBucket.cancel}. These tokens count as refill:
   * each may start one call more than the bound of reservations allows. Succeeds with the whole tokens the
   * bucket holds afterwards, 0 while it is still in debt (as {@link TokenBucket.peek} would say).
   */
  readonly refund: (
    name: Name,
    cost: number
  ) => Effect.Effect<number, Redis.RedisError | Redis.InvalidInput, Requirements<"write">>
  /**
   * {@link TokenBucket.metered} on this bucket: `bucket.metered(name, { estimate, maxWait }, (settle) => effect)`.
   */
  readonly metered: <A, E, R>(
    name: Name,
    options: MeteredOptions,
    f: (settle: Settle) => Effect.Effect<A, E, R>
  ) => Effect.Effect<A, E | RateLimited | Redis.RedisError | Redis.InvalidInput, R | Requirements<"write">>
  /**
   * Deletes `name`'s bucket, so the next request sees it full. Succeeds with whether it existed (was
   * not full).
   */
  readonly reset: (name: Name) => Effect.Effect<boolean, Redis.RedisError | Redis.InvalidInput, Requirements<"write">>
  /**
   * The whole tokens `name`'s bucket holds now (0 while it is in debt), without taking any. Only reads,
   * so a replica can serve it (replicas lag their primary).
   */
  readonly peek: (name: Name) => Effect.Effect<number, Redis.RedisError | Redis.InvalidInput, Requirements<"read">>
}

/**
 * Declares a limiter. Throws on a namespace that is not a short word, or a capacity that is not a
 * non-negative safe integer. A capacity of 0 lets only cost-0 requests through.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make: <Name extends Redis.KeyName = string>(
  namespace: string,
  capacity: number,
  rate: Rate.Rate
) => TokenBucket<Name> = internal.make

/**
 * {@link TokenBucket.acquire} as a module function,
 * beside the method `bucket.acquire(name, cost)`.
 * Dual: `acquire(bucket, name, cost)` or `acquire(name, cost)(bucket)`.
 *
 * @since 0.2.0
 * @category operations
 */
export const acquire: {
  <Name extends Redis.KeyName>(
    name: Name,
    cost: number
  ): (
    bucket: TokenBucket<Name>
  ) => Effect.Effect<Admission, Redis.RedisError | Redis.InvalidInput, Requirements<"write">>
  <Name extends Redis.KeyName>(
    bucket: TokenBucket<Name>,
    name: Name,
    cost: number
  ): Effect.Effect<Admission, Redis.RedisError | Redis.InvalidInput, Requirements<"write">>
} = dual(
  (args) => internal.isTokenBucket(args[0]),
  <Name extends Redis.KeyName>(
    bucket: TokenBucket<Name>,
    name: Name,
    cost: number
  ): Effect.Effect<Admission, Redis.RedisError | Redis.InvalidInput, Requirements<"write">> =>
    bucket.acquire(name, cost)
)

/**
 * {@link TokenBucket.reserve} as a module function,
 * beside the method `bucket.reserve(name, cost, maxWait)`.
 * Dual: `reserve(bucket, name, cost, maxWait)` or `reserve(name, cost, maxWait)(bucket)`.
 *
 * @since 0.2.0
 * @category operations
 */
export const reserve: {
  <Name extends Redis.KeyName>(
    name: Name,
    cost: number,
    maxWait: Duration.DurationInput
  ): (
    bucket: TokenBucket<Name>
  ) => Effect.Effect<Reservation, Redis.RedisError | Redis.InvalidInput, Requirements<"write">>
  <Name extends Redis.KeyName>(
    bucket: TokenBucket<Name>,
    name: Name,
    cost: number,
    maxWait: Duration.DurationInput
  ): Effect.Effect<Reservation, Redis.RedisError | Redis.InvalidInput, Requirements<"write">>
} = dual(
  (args) => internal.isTokenBucket(args[0]),
  <Name extends Redis.KeyName>(
    bucket: TokenBucket<Name>,
    name: Name,
    cost: number,
    maxWait: Duration.DurationInput
  ): Effect.Effect<Reservation, Redis.RedisError | Redis.InvalidInput, Requirements<"write">> =>
    bucket.reserve(name, cost, maxWait)
)

/**
 * {@link TokenBucket.cancel} as a module function,
 * beside the method `bucket.cancel(name, reservation)`.
 * Dual: `cancel(bucket, name, reservation)` or `cancel(name, reservation)(bucket)`.
 *
 * @since 0.2.0
 * @category operations
 */
export const cancel: {
  <Name extends Redis.KeyName>(
    name: Name,
    reservation: Granted
  ): (bucket: TokenBucket<Name>) => Effect.Effect<boolean, Redis.RedisError | Redis.InvalidInput, Requirements<"write">>
  <Name extends Redis.KeyName>(
    bucket: TokenBucket<Name>,
    name: Name,
    reservation: Granted
  ): Effect.Effect<boolean, Redis.RedisError | Redis.InvalidInput, Requirements<"write">>
} = dual(
  (args) => internal.isTokenBucket(args[0]),
  <Name extends Redis.KeyName>(
    bucket: TokenBucket<Name>,
    name: Name,
    reservation: Granted
  ): Effect.Effect<boolean, Redis.RedisError | Redis.InvalidInput, Requirements<"write">> =>
    bucket.cancel(name, reservation)
)

/**
 * {@link TokenBucket.refund} as a module function,
 * beside the method `bucket.refund(name, cost)`.
 * Dual: `refund(bucket, name, cost)` or `refund(name, cost)(bucket)`.
 *
 * @since 0.2.0
 * @category operations
 */
export const refund: {
  <Name extends Redis.KeyName>(
    name: Name,
    cost: number
  ): (bucket: TokenBucket<Name>) => Effect.Effect<number, Redis.RedisError | Redis.InvalidInput, Requirements<"write">>
  <Name extends Redis.KeyName>(
    bucket: TokenBucket<Name>,
    name: Name,
    cost: number
  ): Effect.Effect<number, Redis.RedisError | Redis.InvalidInput, Requirements<"write">>
} = dual(
  (args) => internal.isTokenBucket(args[0]),
  <Name extends Redis.KeyName>(
    bucket: TokenBucket<Name>,
    name: Name,
    cost: number
  ): Effect.Effect<number, Redis.RedisError | Redis.InvalidInput, Requirements<"write">> => bucket.refund(name, cost)
)

/**
 * {@link TokenBucket.reset} as a module function,
 * beside the method `bucket.reset(name)`. Dual: `reset(bucket, name)` or `reset(name)(bucket)`.
 *
 * @since 0.2.0
 * @category operations
 */
export const reset: {
  <Name extends Redis.KeyName>(
    name: Name
  ): (bucket: TokenBucket<Name>) => Effect.Effect<boolean, Redis.RedisError | Redis.InvalidInput, Requirements<"write">>
  <Name extends Redis.KeyName>(
    bucket: TokenBucket<Name>,
    name: Name
  ): Effect.Effect<boolean, Redis.RedisError | Redis.InvalidInput, Requirements<"write">>
} = dual(
  (args) => internal.isTokenBucket(args[0]),
  <Name extends Redis.KeyName>(
    bucket: TokenBucket<Name>,
    name: Name
  ): Effect.Effect<boolean, Redis.RedisError | Redis.InvalidInput, Requirements<"write">> => bucket.reset(name)
)

/**
 * {@link TokenBucket.peek} as a module function,
 * beside the method `bucket.peek(name)`. Dual: `peek(bucket, name)` or `peek(name)(bucket)`.
 *
 * @since 0.2.0
 * @category operations
 */
export const peek: {
  <Name extends Redis.KeyName>(
    name: Name
  ): (bucket: TokenBucket<Name>) => Effect.Effect<number, Redis.RedisError | Redis.InvalidInput, Requirements<"read">>
  <Name extends Redis.KeyName>(
    bucket: TokenBucket<Name>,
    name: Name
  ): Effect.Effect<number, Redis.RedisError | Redis.InvalidInput, Requirements<"read">>
} = dual(
  (args) => internal.isTokenBucket(args[0]),
  <Name extends Redis.KeyName>(
    bucket: TokenBucket<Name>,
    name: Name
  ): Effect.Effect<number, Redis.RedisError | Redis.InvalidInput, Requirements<"read">> => bucket.peek(name)
)

/**
 * Options of {@link throttle}.
 *
 * @since 0.1.0
 * @category models
 */
export interface ThrottleOptions {
  /** Tokens per call; default 1. */
  readonly cost?: number | undefined
  /**
   * The longest the call may wait for its turn; refused beyond it. Default: as long as it takes (the
   * bound, 10^11 ms); bound the wait here, or with a timeout around the call, which gives the
   * reservation back ({@link TokenBucket.cancel}).
   */
  readonly maxWait?: Duration.DurationInput | undefined
}

/**
 * A throttled call was refused: its turn would come later than `maxWait` allows. `retryAfter` is how
 * long until the same call would be granted, or `None` when its cost exceeds the bucket's capacity.
 *
 * @since 0.1.0
 * @category errors
 */
export class RateLimited extends Schema.TaggedError<RateLimited>("wakuwaku/RateLimited")("RateLimited", {
  /** `{ _tag: "Some", value: { _tag: "Millis", millis } }` or `{ _tag: "None" }` in JSON. */
  retryAfter: Schema.Option(Schema.Duration)
}) {
  override get message(): string {
    return this.retryAfter._tag === "None"
      ? "rate limited: the cost exceeds the bucket's capacity"
      : `rate limited: retry after ${Math.ceil(Duration.toMillis(this.retryAfter.value))} ms`
  }
}

/**
 * Runs `effect` at its turn on `name`'s bucket: reserves `cost` tokens with `maxWait`, sleeps the wait
 * on Effect's `Clock`, then runs `effect`. Every replica's calls queue on the one bucket, so together
 * their turns come at most capacity + rate × T over any interval T, spread evenly: no herd of retries.
 * One Redis call per call. Interrupted while it waits (a timeout around it included), it gives its
 * reservation back ({@link TokenBucket.cancel}): its tokens return if no one queued behind it since, and
 * otherwise its turn lapses, so whatever callers give up, the bound holds. Refused, it fails with
 * {@link RateLimited}.
 * Dual: `throttle(bucket, name, options)(effect)` or `throttle(effect, bucket, name, options)`.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { Rate, TokenBucket } from "wakuwaku"
 *
 * // At most 100 calls a second to the partner's API, whichever replica makes them.
 * const PARTNER = TokenBucket.make<string>("partner-api", 100, Rate.perSecond(100))
 *
 * export const callPartner = <A, E, R>(call: Effect.Effect<A, E, R>) =>
 *   call.pipe(TokenBucket.throttle(PARTNER, "orders", { maxWait: "10 seconds" }))
 * ```
 *
 * @since 0.1.0
 * @category combinators
 */
export const throttle: {
  <Name extends Redis.KeyName>(
    bucket: TokenBucket<Name>,
    name: Name,
    options?: ThrottleOptions
  ): <A, E, R>(
    effect: Effect.Effect<A, E, R>
  ) => Effect.Effect<A, E | RateLimited | Redis.RedisError | Redis.InvalidInput, R | Requirements<"write">>
  <A, E, R, Name extends Redis.KeyName>(
    effect: Effect.Effect<A, E, R>,
    bucket: TokenBucket<Name>,
    name: Name,
    options?: ThrottleOptions
  ): Effect.Effect<A, E | RateLimited | Redis.RedisError | Redis.InvalidInput, R | Requirements<"write">>
} = dual(
  (args) => Effect.isEffect(args[0]),
  <A, E, R, Name extends Redis.KeyName>(
    effect: Effect.Effect<A, E, R>,
    bucket: TokenBucket<Name>,
    name: Name,
    options?: ThrottleOptions
  ) => internal.throttle(effect, bucket, name, options, (retryAfter) => new RateLimited({ retryAfter }))
)

/**
 * Options of {@link metered}.
 *
 * @since 0.2.0
 * @category models
 */
export interface MeteredOptions {
  /**
   * The tokens reserved before the call (a non-negative safe integer, at most `capacity`): what the call is
   * expected to cost. The call waits its turn for these.
   */
  readonly estimate: number
  /** The longest the call may wait for its turn, as {@link ThrottleOptions.maxWait}: default as long as it takes. */
  readonly maxWait?: Duration.DurationInput | undefined
}

/**
 * What a metered call is handed: `settle(actual)` settles the call with its actual cost (a non-negative safe
 * integer, above the estimate or below it) in one store call, and succeeds with the tokens that came back (0
 * when more was taken, or when the unused tokens lapsed because others queued behind it since; never the
 * call's turn, one token, which a call that started keeps). Once only:
 * a second settle fails with {@link AlreadySettled} and writes nothing. Uninterruptible: once sent, it lands.
 *
 * @since 0.2.0
 * @category models
 */
export type Settle = (actual: number) => Effect.Effect<number, AlreadySettled | Redis.RedisError | Redis.InvalidInput>

/**
 * A metered call was settled already: by an earlier `settle`, or, when the settle came after the call ended,
 * by the call's end (its estimate kept if it succeeded, given back — zeros here — if it failed). Nothing was
 * written. `settled` is the actual costs it was settled with, `actual` those of the refused settle (one per
 * bucket: one for {@link TokenBucket.metered}).
 *
 * @since 0.2.0
 * @category errors
 */
export class AlreadySettled extends Schema.TaggedError<AlreadySettled>("wakuwaku/AlreadySettled")("AlreadySettled", {
  settled: Schema.Array(Schema.Number),
  actual: Schema.Array(Schema.Number)
}) {
  override get message(): string {
    return `already settled with ${this.settled.join(", ")}: a call settles once (refused: ${this.actual.join(", ")})`
  }
}

internal.useErrors({
  refused: (retryAfter) => new RateLimited({ retryAfter }),
  twice: (settled, actual) => new AlreadySettled({ settled, actual })
})

/**
 * Runs a call whose cost is known only once it has run (an LLM call metered in tokens), on `name`'s bucket:
 *
 * 1. reserves `estimate` tokens, waiting its turn as {@link throttle} does (refused beyond `maxWait`:
 *    {@link RateLimited}; bad input: `InvalidInput`, nothing written);
 * 2. runs `f(settle)`; the call settles with `settle(actual)` when it knows what it cost;
 * 3. `settle` takes the difference, or gives it back, in one store call. More than the estimate is taken at
 *    once, and may put the bucket in debt: later callers wait for it. What was not used comes back only while
 *    the call's turn is still the end of the queue (nobody reserved since), as {@link TokenBucket.cancel}
 *    reclaims; otherwise it lapses. A call that started keeps its turn, one token (of an estimate of one or
 *    more), whatever it settles with. So the start bound of `throttle` holds (docs/token-bucket.md, "Metered
 *    calls").
 *
 * A call that fails or is interrupted before it settles gives its reservation back, by the same rule,
 * without fail (all of it while it waits or before `f` starts; all but its turn inside `f`): the release
 * runs uninterruptibly, when the call ends. A call that succeeds without settling keeps its estimate as its
 * cost. A settle sent lands even if the call is interrupted meanwhile; a second settle fails with
 * {@link AlreadySettled}.
 *
 * Data-first, `metered(bucket, name, options, f)`, or data-last, `metered(name, options, f)(bucket)`.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { Rate, TokenBucket } from "wakuwaku"
 *
 * // 90 000 LLM tokens a minute, shared by every replica.
 * const LLM_TOKENS = TokenBucket.make<string>("llm-tokens", 90_000, Rate.make(90_000, "1 minute"))
 *
 * declare const complete: (prompt: string) => Effect.Effect<{ text: string; usage: { total: number } }>
 *
 * export const ask = (tenant: string, prompt: string) =>
 *   TokenBucket.metered(LLM_TOKENS, tenant, { estimate: 2_000, maxWait: "30 seconds" }, (settle) =>
 *     Effect.tap(complete(prompt), (reply) => settle(reply.usage.total)))
 * ```
 *
 * @since 0.2.0
 * @category combinators
 */
export const metered: {
  <Name extends Redis.KeyName, A, E, R>(
    name: Name,
    options: MeteredOptions,
    f: (settle: Settle) => Effect.Effect<A, E, R>
  ): (
    bucket: TokenBucket<Name>
  ) => Effect.Effect<A, E | RateLimited | Redis.RedisError | Redis.InvalidInput, R | Requirements<"write">>
  <Name extends Redis.KeyName, A, E, R>(
    bucket: TokenBucket<Name>,
    name: Name,
    options: MeteredOptions,
    f: (settle: Settle) => Effect.Effect<A, E, R>
  ): Effect.Effect<A, E | RateLimited | Redis.RedisError | Redis.InvalidInput, R | Requirements<"write">>
} = dual(
  4,
  <Name extends Redis.KeyName, A, E, R>(
    bucket: TokenBucket<Name>,
    name: Name,
    options: MeteredOptions,
    f: (settle: Settle) => Effect.Effect<A, E, R>
  ) => internal.metered(bucket, name, options, f)
)
