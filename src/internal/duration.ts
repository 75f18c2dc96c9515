/** @internal Durations at the Redis boundary. */
import * as Duration from "effect/Duration"

/** @internal Whole milliseconds, rounded up, at least 1 (Redis reads 0 as "no timeout" or an error). */
export const toMillis = (input: Duration.DurationInput): number =>
  Math.max(1, Math.ceil(Duration.toMillis(Duration.decode(input))))

type NonPositive<S extends string> = S extends "0" | `-${string}` ? true : false

/**
 * @internal `P` itself when it may be a positive duration; otherwise `Message`, which the compiler then
 * shows as the expected parameter type.
 */
export type Positive<P extends Duration.DurationInput, Message extends string> = P extends Duration.Duration ? P
  : P extends number ? number extends P ? P : NonPositive<`${P}`> extends true ? Message : P
  : P extends bigint ? bigint extends P ? P : NonPositive<`${P}`> extends true ? Message : P
  // [seconds, nanos]
  : P extends readonly [infer S extends number, infer N extends number] ?
    number extends S | N ? P : NonPositive<`${S}`> extends true ? NonPositive<`${N}`> extends true ? Message : P : P
  // "0.0 seconds" and the like, which do not read back as a number literal
  : P extends `${"" | "-"}${"0" | "."}${infer Rest} ${string}` ? AllZeros<Rest> extends true ? Message : Literal<P, Message>
  : Literal<P, Message>

type Literal<P, Message extends string> = P extends `${infer V extends number} ${string}` ?
  number extends V ? P : NonPositive<`${V}`> extends true ? Message : P
  : P

type AllZeros<S extends string> = S extends "" ? true : S extends `${"0" | "."}${infer Rest}` ? AllZeros<Rest> : false

/** @internal Decodes a duration that must be finite and longer than zero, or throws `what must be …`. */
export const positive = (input: Duration.DurationInput, what: string): Duration.Duration => {
  if ((typeof input === "number" || typeof input === "bigint") && !(input > 0)) {
    throw new RangeError(`wakuwaku: ${what} must be longer than zero, got ${String(input)} ms`)
  }
  const duration = Duration.decode(input)
  if (!Duration.isFinite(duration)) {
    throw new RangeError(`wakuwaku: ${what} must be finite, got ${Duration.format(duration)}`)
  }
  if (Duration.unsafeToNanos(duration) <= 0n) {
    throw new RangeError(`wakuwaku: ${what} must be longer than zero, got ${Duration.format(duration)}`)
  }
  return duration
}
