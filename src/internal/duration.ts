/** @internal Durations at the Redis boundary. */
import * as Duration from "effect/Duration"

/** @internal Whole milliseconds, rounded up, at least 1 (Redis reads 0 as "no timeout" or an error). */
export const toMillis = (input: Duration.DurationInput): number =>
  Math.max(1, Math.ceil(Duration.toMillis(Duration.decode(input))))
