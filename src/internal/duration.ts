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
  : P extends `${infer V extends number} ${string}` ? number extends V ? P
    : NonPositive<`${V}`> extends true ? Message
    : P
  : P

/** @internal Decodes a duration that must be finite and longer than zero, or throws `what must be …`. */
export const positive = (input: Duration.DurationInput, what: string): Duration.Duration => {
  const duration = Duration.decode(input)
  if (!Duration.isFinite(duration)) {
    throw new RangeError(`wakuwaku: ${what} must be finite, got ${Duration.format(duration)}`)
  }
  if (Duration.unsafeToNanos(duration) <= 0n) {
    throw new RangeError(`wakuwaku: ${what} must be longer than zero, got ${Duration.format(duration)}`)
  }
  return duration
}
