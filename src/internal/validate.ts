/**
 * @internal The one check of a count: a safe integer of at least 0 or 1, and the one wording of its failure
 * (`<what> must be a non-negative safe integer, got <value>`, or "positive" for at least 1). A leaf: it
 * imports nothing.
 */

/** @internal A safe integer (a number: never a string or a bigint). */
export const isInt = (u: unknown): u is number => typeof u === "number" && Number.isSafeInteger(u)

/** @internal A safe integer of at least `min`: 0 (non-negative) or 1 (positive). */
export const isCount = (u: unknown, min: 0 | 1): u is number => isInt(u) && u >= min

/**
 * @internal Why `value`, the argument `what`, is not a safe integer of at least `min`, or undefined. `show`
 * prints the value in the message (default `String`).
 */
export const notCount = (
  what: string,
  value: unknown,
  min: 0 | 1,
  show: (u: unknown) => string = String
): string | undefined =>
  isCount(value, min)
    ? undefined
    : `${what} must be a ${min === 0 ? "non-negative" : "positive"} safe integer, got ${show(value)}`
