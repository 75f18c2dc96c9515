/**
 * @internal Keys. Every key the library writes is `@@wakuwaku:<Kind>:<namespace>:<name>`; an item made
 * of several keys wraps `{<namespace>:<name>}` as a cluster hash tag and adds one suffix per key, so all
 * of its keys live in one slot.
 */
import * as Either from "effect/Either"
import * as Redis from "../Redis.js"

/** @internal */
export const PREFIX = "@@wakuwaku"

const NAMESPACE = /^[A-Za-z0-9_.\-]+$/

/** @internal Throws at construction: a namespace is a short word, so that `:` and `{}` stay separators. */
export const validateNamespace = (kind: string, namespace: string): string => {
  if (typeof namespace !== "string" || !NAMESPACE.test(namespace)) {
    throw new TypeError(
      `wakuwaku: ${kind} namespace must be a non-empty string of letters, digits, '_', '.' or '-', got ${
        JSON.stringify(namespace)
      }`
    )
  }
  return namespace
}

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/

/**
 * @internal Encodes a name canonically: strings as they are (well-formed UTF-16 only, since a lone
 * surrogate would collide with U+FFFD in UTF-8), numbers as safe integers in decimal (`-0` is `0`),
 * bigints in decimal, bytes in lowercase hex. Left: why the name cannot be encoded.
 */
export const encodeName = (name: Redis.KeyName): Either.Either<string, string> => {
  switch (typeof name) {
    case "string":
      return LONE_SURROGATE.test(name)
        ? Either.left("a string name must be well-formed UTF-16 (it has a lone surrogate)")
        : Either.right(name)
    case "number":
      return Number.isSafeInteger(name)
        ? Either.right(String(name === 0 ? 0 : name))
        : Either.left(`a number name must be a safe integer, got ${name}`)
    case "bigint":
      return Either.right(name.toString(10))
    default:
      return name instanceof Uint8Array
        ? Either.right(Buffer.from(name.buffer, name.byteOffset, name.byteLength).toString("hex"))
        : Either.left(`a name must be a string, a safe integer, a bigint or a Uint8Array, got ${typeof name}`)
  }
}

/** @internal {@link encodeName}, failing with InvalidInput for `<label>.<operation>`. */
export const encodeNameOf = (
  label: string,
  operation: string,
  name: Redis.KeyName
): Either.Either<string, Redis.InvalidInput> =>
  Either.mapLeft(
    encodeName(name),
    (message) => new Redis.InvalidInput({ operation: `${label}.${operation}`, argument: "name", message })
  )

/** @internal A single-key item. */
export const itemKey = (kind: string, namespace: string, encodedName: string): string =>
  `${PREFIX}:${kind}:${namespace}:${encodedName}`

/** @internal One key of a multi-key item; every suffix of one item shares the hash tag. */
export const taggedKey = (kind: string, namespace: string, encodedName: string, suffix: string): string =>
  `${PREFIX}:${kind}:{${namespace}:${encodedName}}:${suffix}`
