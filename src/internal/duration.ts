/** @internal Durations at the Redis boundary. */
import * as Duration from "effect/Duration"

/** @internal Whole milliseconds, rounded up, at least 1 (Redis reads 0 as "no timeout" or an error). */
export const toMillis = (input: Duration.DurationInput): number =>
  Math.max(1, Math.ceil(Duration.toMillis(Duration.decode(input))))

const show = (input: unknown): string => {
  try {
    return typeof input === "string" ? JSON.stringify(input) : typeof input === "bigint" ? `${input}n` : String(input)
  } catch {
    return typeof input
  }
}

/**
 * @internal Decodes a duration that must be finite and longer than zero, or throws a `RangeError` saying
 * `what must be …` (also for input that is no duration at all, such as `"garbage"`).
 */
export const positive = (input: Duration.DurationInput, what: string): Duration.Duration => {
  if ((typeof input === "number" || typeof input === "bigint") && !(input > 0)) {
    throw new RangeError(`wakuwaku: ${what} must be longer than zero, got ${show(input)} ms`)
  }
  const decoded = Duration.decodeUnknown(input)
  if (decoded._tag === "None") {
    throw new RangeError(
      `wakuwaku: ${what} must be a duration (milliseconds, "<n> <unit>" such as "30 seconds", or a Duration), got ${
        show(input)
      }`
    )
  }
  const duration = decoded.value
  if (!Duration.isFinite(duration)) {
    throw new RangeError(`wakuwaku: ${what} must be finite, got ${Duration.format(duration)}`)
  }
  if (Duration.unsafeToNanos(duration) <= 0n) {
    throw new RangeError(`wakuwaku: ${what} must be longer than zero, got ${Duration.format(duration)}`)
  }
  return duration
}

/**
 * @internal The longest duration a structure keeps in Redis, given to its `make`: a lease, a TTL, a
 * window. 10^14 µs (10^11 ms, about 3.2 years): every time the scripts and their twins derive from it
 * (server time in µs plus it, twice it in ms, it in seconds) stays an integer a double holds exactly and
 * Redis accepts as an expiry.
 */
export const MAX_MICROS = 10n ** 14n

/** @internal {@link MAX_MICROS} in words, for messages and docs. */
export const MAX_TEXT = "10^11 ms (about 3.2 years)"

/** @internal {@link positive}, and at most {@link MAX_MICROS}; throws a `RangeError` naming the bound. */
export const bounded = (input: Duration.DurationInput, what: string): Duration.Duration => {
  const duration = positive(input, what)
  if (Duration.unsafeToNanos(duration) > MAX_MICROS * 1000n) {
    throw new RangeError(`wakuwaku: ${what} must be at most ${MAX_TEXT}, got ${Duration.format(duration)}`)
  }
  return duration
}

const negative = (input: unknown): boolean =>
  (typeof input === "number" && !(input >= 0)) || (typeof input === "bigint" && input < 0n) ||
  (typeof input === "string" && input.startsWith("-")) ||
  (Array.isArray(input) && input.some((part) => typeof part === "number" && !(part >= 0)))

/**
 * @internal A wait an operation takes (`maxWait`): a duration from zero to {@link MAX_MICROS}, in whole
 * milliseconds rounded down (so that a whole-millisecond wait within it never exceeds it), or, as a
 * string, why it is not one (for the operation's `InvalidInput`). Negative input is refused, where
 * `Duration.decode` would read it as zero.
 */
export const waitMillis = (input: unknown, what: string): number | string => {
  const decoded = negative(input) ? undefined : Duration.decodeUnknown(input)
  const nanos = decoded?._tag === "Some" && Duration.isFinite(decoded.value)
    ? Duration.unsafeToNanos(decoded.value)
    : undefined
  if (nanos === undefined || nanos > MAX_MICROS * 1000n) {
    const shown = decoded?._tag === "Some"
      ? Duration.format(decoded.value)
      : typeof input === "string" && input.length > 80
      ? `a string of ${input.length} characters`
      : show(input)
    return `${what} must be a duration from 0 to ${MAX_TEXT}, got ${shown}`
  }
  return Number(nanos / 1_000_000n)
}

const UNITS: Record<string, number> = {
  ms: 1,
  millis: 1,
  milli: 1,
  s: 1_000,
  sec: 1_000,
  second: 1_000,
  seconds: 1_000,
  m: 60_000,
  min: 60_000,
  minute: 60_000,
  minutes: 60_000,
  h: 3_600_000,
  hour: 3_600_000,
  hours: 3_600_000
}

/**
 * @internal A duration as the command line writes it, such as `500ms`, `30s`, `1.5m`, `2 hours`; undefined
 * when it is not one. The one parser of that language: the CLI's own flags and the limiter kinds' use it.
 */
export const parseText = (text: string): Duration.Duration | undefined => {
  const match = /^(\d+(?:\.\d+)?|\.\d+)\s*([a-z]+)$/i.exec(text.trim())
  const unit = match?.[2] === undefined ? undefined : UNITS[match[2].toLowerCase()]
  if (match === null || unit === undefined) return undefined
  return Duration.millis(Number(match[1]) * unit)
}
