/**
 * A refill rate: `tokens` every `period`, added continuously (fractionally) rather than in steps.
 *
 * A rate must refill at least one token over a period longer than zero. With literal arguments that is
 * checked by the compiler, and the error says so:
 *
 * ```text
 * Rate.make(0, "3 seconds")  // Argument of type '0' is not assignable to parameter of type
 *                            // '"a rate must refill at least one token"'
 * ```
 *
 * Arguments known only at run time are checked when the rate is made, which throws a `RangeError`
 * with the same words. Declare rates (and the structures that use them) as module-level constants, so
 * a bad one fails at start-up rather than on the first request.
 *
 * The period is held as whole microseconds, rounded up, at least 1.
 *
 * @since 0.1.0
 */
import * as Duration from "effect/Duration"
import { positive } from "./internal/duration.js"
import { isCount } from "./internal/validate.js"

/**
 * @since 0.1.0
 * @category models
 */
export interface Rate {
  readonly [TypeId]: TypeId
  /** Such as `5 per 1 minute`. */
  toString(): string
  /** Tokens added per period: a positive safe integer. */
  readonly tokens: number
  /** The period. */
  readonly period: Duration.Duration
  /** The period in whole microseconds, rounded up, at least 1. */
  readonly periodMicros: number
}

/**
 * @since 0.1.0
 * @category type ids
 */
export const TypeId: unique symbol = Symbol.for("wakuwaku/Rate")

/**
 * @since 0.1.0
 * @category type ids
 */
export type TypeId = typeof TypeId

/**
 * Whether a value is a rate made by {@link make} or {@link perSecond} (and so a valid one).
 *
 * @since 0.1.0
 * @category guards
 */
export const isRate = (u: unknown): u is Rate => typeof u === "object" && u !== null && TypeId in u

/**
 * The message of a rate that refills nothing.
 *
 * @since 0.1.0
 * @category errors
 */
export type ZeroTokens = "a rate must refill at least one token"

/**
 * The message of a period that is zero or negative.
 *
 * @since 0.1.0
 * @category errors
 */
export type ZeroPeriod = "a rate's period must be longer than zero"

/**
 * `N` itself when it may be a valid token count; otherwise the message, which the compiler then shows.
 *
 * @since 0.1.0
 * @category type-level
 */
export type ValidTokens<N extends number> = number extends N ? N
  : `${N}` extends "0" | `-${string}` | `${string}.${string}` ? ZeroTokens
  : N

type NonPositive<S extends string> = S extends "0" | `-${string}` ? true : false

/**
 * `P` itself when it may be a positive duration; otherwise `Message`, which the compiler then
 * shows as the expected parameter type.
 */
type Positive<P extends Duration.DurationInput, Message extends string> = P extends Duration.Duration ? P
  : P extends number ? number extends P ? P : NonPositive<`${P}`> extends true ? Message : P
  : P extends bigint ? bigint extends P ? P : NonPositive<`${P}`> extends true ? Message : P
  // [seconds, nanos]
  : P extends readonly [infer S extends number, infer N extends number] ?
    number extends S | N ? P : NonPositive<`${S}`> extends true ? NonPositive<`${N}`> extends true ? Message : P : P
  // "0.0 seconds" and the like, which do not read back as a number literal
  : P extends `${"" | "-"}${"0" | "."}${infer Rest} ${string}` ?
    AllZeros<Rest> extends true ? Message : Literal<P, Message>
  : Literal<P, Message>

type Literal<P, Message extends string> = P extends `${infer V extends number} ${string}` ?
  number extends V ? P : NonPositive<`${V}`> extends true ? Message : P
  : P

type AllZeros<S extends string> = S extends "" ? true : S extends `${"0" | "."}${infer Rest}` ? AllZeros<Rest> : false

/**
 * `P` itself when it may be a valid period; otherwise the message.
 *
 * @since 0.1.0
 * @category type-level
 */
export type ValidPeriod<P extends Duration.DurationInput> = Positive<P, ZeroPeriod>

const MAX_MICROS = BigInt(Number.MAX_SAFE_INTEGER)

const unsafeMake = (tokens: number, input: Duration.DurationInput): Rate => {
  if (!isCount(tokens, 1)) {
    throw new RangeError(
      `wakuwaku: a rate must refill at least one token (a positive safe integer), got ${String(tokens)}`
    )
  }
  const period = positive(input, "a rate's period")
  const micros = (Duration.unsafeToNanos(period) + 999n) / 1000n
  if (micros > MAX_MICROS) {
    throw new RangeError(
      `wakuwaku: a rate's period must be at most 2^53 - 1 microseconds, got ${Duration.format(period)}`
    )
  }
  return Object.freeze({
    [TypeId]: TypeId as TypeId,
    tokens,
    period,
    periodMicros: Number(micros),
    toString: () => `${tokens} per ${Duration.format(period)}`
  })
}

/**
 * `tokens` every `period`.
 *
 * @example
 * ```ts
 * import { Rate } from "wakuwaku"
 *
 * export const ONE_EVERY_3S = Rate.make(1, "3 seconds")
 * ```
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = <const N extends number, const P extends Duration.DurationInput>(
  tokens: ValidTokens<N>,
  period: ValidPeriod<P>
): Rate => unsafeMake(tokens as number, period)

/**
 * `n` tokens every second.
 *
 * @since 0.1.0
 * @category constructors
 */
export const perSecond = <const N extends number>(n: ValidTokens<N>): Rate => unsafeMake(n as number, "1 second")
