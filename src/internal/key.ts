/**
 * @internal Keys. Every key the library writes is `@@wakuwaku:<Kind>:<namespace>:<name>`; an item made
 * of several keys wraps `{<namespace>:<name>}` as a cluster hash tag and adds one suffix per key, so all
 * of its keys live in one slot.
 */
import * as Either from "effect/Either"
import type * as Redis from "../Redis.js"
import * as core from "./service.js"

/** @internal */
export const PREFIX = "@@wakuwaku"

/** @internal The longest namespace, in characters. */
export const MAX_NAMESPACE = 64

const NAMESPACE = /^[A-Za-z0-9_.-]{1,64}$/

/** A value as an error message shows it: JSON, cut short when long. */
export const preview = (value: unknown): string => {
  if (typeof value === "string" && value.length > 80) return `a string of ${value.length} characters`
  if (typeof value === "bigint") {
    return `${value}n`.length > 80
      ? `a bigint of ${String(value).length} digits`
      : `${value}n`
  }
  try {
    const json = JSON.stringify(value)
    return json === undefined ? String(value) : json.length > 80 ? `${json.slice(0, 77)}...` : json
  } catch {
    return typeof value
  }
}

/**
 * @internal Throws at construction: a namespace is a short word (1 to 64 letters, digits, `_`, `.` or
 * `-`), so that `:` and `{}` stay separators and keys stay short. The CLI checks its `--namespace` here.
 */
export const validateNamespace = (kind: string, namespace: string): string => {
  if (typeof namespace !== "string" || !NAMESPACE.test(namespace)) {
    throw new TypeError(
      `wakuwaku: ${kind} namespace must be a non-empty string of at most ${MAX_NAMESPACE} letters, digits, ` +
        `'_', '.' or '-', got ${preview(namespace)}`
    )
  }
  return namespace
}

/** @internal The longest encoded name, in bytes (UTF-8, as Redis stores it). */
export const MAX_NAME_BYTES = 4096

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/

/**
 * @internal Encodes a name canonically: strings as they are (well-formed UTF-16 only, since a lone
 * surrogate would collide with U+FFFD in UTF-8), numbers as safe integers in decimal (`-0` is `0`),
 * bigints in decimal, bytes in lowercase hex. Left: why the name cannot be encoded.
 */
export const encodeName = (name: Redis.KeyName): Either.Either<string, string> => {
  switch (typeof name) {
    case "string":
      // A UTF-16 code unit takes 1 to 3 bytes of UTF-8: check the cheap bounds before the exact one.
      if (
        name.length > MAX_NAME_BYTES || (name.length * 3 > MAX_NAME_BYTES && Buffer.byteLength(name) > MAX_NAME_BYTES)
      ) {
        return Either.left(tooLong(Buffer.byteLength(name), "string"))
      }
      return LONE_SURROGATE.test(name)
        ? Either.left("a string name must be well-formed UTF-16 (it has a lone surrogate)")
        : Either.right(name)
    case "number":
      return Number.isSafeInteger(name)
        ? Either.right(String(name === 0 ? 0 : name))
        : Either.left(`a number name must be a safe integer, got ${name}`)
    case "bigint": {
      // Hex first (linear), so that a huge bigint is refused before its decimal form is computed.
      if (name.toString(16).length > MAX_NAME_BYTES) return Either.left(tooLong(undefined, "bigint"))
      const decimal = name.toString(10)
      return decimal.length > MAX_NAME_BYTES ? Either.left(tooLong(decimal.length, "bigint")) : Either.right(decimal)
    }
    default:
      if (!(name instanceof Uint8Array)) {
        return Either.left(
          `a name must be a string, a safe integer, a bigint or a Uint8Array, got ${
            name === null ? "null" : typeof name
          }`
        )
      }
      return 2 * name.byteLength > MAX_NAME_BYTES
        ? Either.left(tooLong(2 * name.byteLength, "Uint8Array, in hex"))
        : Either.right(Buffer.from(name.buffer, name.byteOffset, name.byteLength).toString("hex"))
  }
}

const SURROGATE = /[\uD800-\uDFFF]/

/**
 * @internal {@link encodeName} of the common names, with nothing allocated: a string of at most a third of
 * the bound in code units with no surrogate at all, or a safe integer. Undefined: take the full path.
 */
export const encodeNameFast = (name: Redis.KeyName): string | undefined => {
  if (typeof name === "string") {
    return name.length * 3 <= MAX_NAME_BYTES && !SURROGATE.test(name) ? name : undefined
  }
  return typeof name === "number" && Number.isSafeInteger(name) ? String(name === 0 ? 0 : name) : undefined
}

const tooLong = (bytes: number | undefined, what: string) =>
  `a name must encode to at most ${MAX_NAME_BYTES} bytes, got ${bytes === undefined ? "more" : bytes} (a ${what})`

/** @internal {@link encodeName}, failing with InvalidInput for `<label>.<operation>`. */
export const encodeNameOf = (
  label: string,
  operation: string,
  name: Redis.KeyName
): Either.Either<string, Redis.InvalidInput> =>
  Either.mapLeft(
    encodeName(name),
    (message) => new core.InvalidInput({ operation: `${label}.${operation}`, argument: "name", message })
  )

/** @internal A single-key item. */
export const itemKey = (kind: string, namespace: string, encodedName: string): string =>
  `${PREFIX}:${kind}:${namespace}:${encodedName}`

/** @internal One key of a multi-key item; every suffix of one item shares the hash tag. */
export const taggedKey = (kind: string, namespace: string, encodedName: string, suffix: string): string =>
  `${PREFIX}:${kind}:{${namespace}:${encodedName}}:${suffix}`
