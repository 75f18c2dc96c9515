/**
 * @internal Script definitions: making one (its SHA1 once), running one (the service, then the decoder,
 * with the one "unexpected reply" error), the batch helpers, and the registry of the library's own
 * scripts, which test/scripts.test.ts enumerates.
 */
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Exit from "effect/Exit"
import type * as Fiber from "effect/Fiber"
import type * as FiberStatus from "effect/FiberStatus"
import { createHash } from "node:crypto"
import type * as Redis from "../Redis.js"
import type * as Script from "../Script.js"
import * as core from "./service.js"

/** @internal */
export const TypeId: Script.TypeId = Symbol.for("wakuwaku/Script") as Script.TypeId

/** @internal An error reply with Redis's own words, as a twin throws it. */
export class ReplyError extends Error {}

/**
 * @internal `parse`, each text parsed once: a twin's parameters (a limiter's shape, a group's spec) are the same few
 * texts call after call. At most `max` are kept (all are forgotten when it is reached); a text that throws is not.
 * The values are shared: they must not be changed.
 */
export const parsedOnce = <A>(parse: (text: string) => A, max = 1024): (text: string) => A => {
  const parsed = new Map<string, A>()
  return (text) => {
    let found = parsed.get(text)
    if (found === undefined) {
      found = parse(text)
      if (parsed.size >= max) parsed.clear()
      parsed.set(text, found)
    }
    return found
  }
}

const asIs = (reply: unknown): Either.Either<unknown, string> => Either.right(reply)

/** @internal */
export const isScript = (u: unknown): u is Script.Script<unknown> => typeof u === "object" && u !== null && TypeId in u

const sha1 = (lua: string) => createHash("sha1").update(lua).digest("hex")

const check = (options: { readonly name: string; readonly keys: number }) => {
  if (typeof options.name !== "string" || options.name === "") {
    throw new TypeError(`wakuwaku: a script needs a name, got ${JSON.stringify(options.name)}`)
  }
  if (!Number.isSafeInteger(options.keys) || options.keys < 0) {
    throw new TypeError(
      `wakuwaku: script ${options.name} must declare a non-negative integer of keys, got ${String(options.keys)}`
    )
  }
}

/** @internal */
export const make = <A = unknown>(options: Script.Options<A>): Script.Script<A> => {
  check(options)
  const decode = (options.decode ?? asIs) as (reply: unknown) => Either.Either<A, string>
  const many: Script.Script<unknown> | undefined = options.many === undefined ? undefined : Object.freeze({
    [TypeId]: TypeId,
    name: `${options.name}Many`,
    lua: options.many.lua,
    keys: options.keys,
    sha1: sha1(options.many.lua),
    readOnly: options.readOnly === true,
    twin: options.many.twin,
    decode: asIs,
    many: undefined,
    variadic: true,
    shared: checkShared(options.name, options.many.shared)
  }) as Script.Script<unknown>
  return Object.freeze({
    [TypeId]: TypeId,
    name: options.name,
    lua: options.lua,
    keys: options.keys,
    sha1: sha1(options.lua),
    readOnly: options.readOnly === true,
    twin: options.twin,
    decode,
    many,
    variadic: false,
    shared: 0
  }) as Script.Script<A>
}

const checkShared = (name: string, shared: number | undefined): number => {
  if (shared === undefined) return 0
  if (!Number.isSafeInteger(shared) || shared < 0) {
    throw new TypeError(`wakuwaku: script ${name}: shared ARGV must be a non-negative integer, got ${String(shared)}`)
  }
  return shared
}

const library = new Set<Script.Script<unknown>>()

/** @internal {@link make}, for the library's own scripts: registered, so that a test can list them all. */
export const define = <A = unknown>(options: Script.Options<A>): Script.Script<A> => {
  const script = make(options)
  library.add(script)
  return script
}

/**
 * @internal {@link define} of a script that decides many items together, in one call: KEYS `keys` per item,
 * ARGV `shared` leading values common to all, then each item's own, laid end to end as a `many` variant's
 * calls are (so the key count is checked per item), but one decision, never a batch of calls: it has no
 * `many` and is sent as it is.
 */
export const defineOver = <A = unknown>(options: Script.Options<A> & { readonly shared: number }): Script.Script<A> => {
  const { shared, ...rest } = options
  const script = Object.freeze({ ...make(rest), variadic: true, shared: checkShared(options.name, shared) })
  library.add(script)
  return script
}

/** @internal A tuple of exactly `N` strings. */
export type Strings<N extends number, T extends ReadonlyArray<string> = readonly []> = T["length"] extends N ? T
  : Strings<N, readonly [...T, string]>

declare const Counts: unique symbol

/**
 * @internal A script with its KEYS and ARGV counts in its type, stated once where it is defined:
 * {@link call} takes exactly that many keys and arguments (a compile error otherwise).
 */
export interface Call<A, K extends number, V extends number> extends Script.Script<A> {
  readonly [Counts]?: { readonly keys: K; readonly args: V }
}

/**
 * @internal {@link define} of a script call, its KEYS and ARGV counts stated once. Either its whole
 * `lua`, or the Lua `functions` its module shares and the one `fn` it calls with KEYS[1..keys] and
 * ARGV[1..args], in which case `batched` also defines its `many` variant (manyLua and manyTwin).
 */
export const defineCall = <A, const K extends number, const V extends number>(
  options:
    & {
      readonly name: string
      readonly keys: K
      readonly args: V
      readonly twin: Script.Twin
      readonly decode: (reply: unknown) => Either.Either<A, string>
    }
    & (
      | { readonly lua: string }
      | { readonly functions: string; readonly fn: string; readonly batched?: boolean | undefined }
    )
): Call<A, K, V> => {
  const { args, decode, keys, name, twin } = options
  if ("lua" in options) return define({ name, keys, lua: options.lua, twin, decode })
  const params = [
    ...Array.from({ length: keys }, (_, i) => `KEYS[${i + 1}]`),
    ...Array.from({ length: args }, (_, i) => `ARGV[${i + 1}]`)
  ]
  return define({
    name,
    keys,
    lua: `${options.functions}return ${options.fn}(${params.join(", ")})\n`,
    twin,
    decode,
    many: options.batched === true
      ? { lua: `${options.functions}${manyLua(options.fn, keys, args)}`, twin: manyTwin(twin, keys, args) }
      : undefined
  })
}

/** @internal Runs a {@link Call} on `redis`, with exactly its KEYS and ARGV. */
export const call = <A, K extends number, V extends number>(
  redis: Redis.Service,
  script: Call<A, K, V>,
  keys: Strings<K>,
  args: Strings<V>
): Effect.Effect<A, Redis.RedisError> => redis.script(script, keys, args)

/** @internal Every script the library's modules loaded so far have defined (their `many` variants apart). */
export const registered = (): ReadonlyArray<Script.Script<unknown>> => [...library]

/** @internal The one error of a reply that is not what was expected: of a command, or of a script (`script <name>`). */
export const unexpectedReply = (operation: string, reply: unknown, expected: string): Redis.RedisError =>
  new core.RedisError({
    reason: "Reply",
    operation,
    cause: new Error(`unexpected reply ${show(reply)}: expected ${expected}`)
  })

/** @internal {@link unexpectedReply} of a script, as its decoder rejected the reply. */
export const unexpected = (script: Script.Script<unknown>, reply: unknown, expected: string): Redis.RedisError =>
  unexpectedReply(`script ${script.name}`, reply, expected)

/** @internal A value as an error message shows it: JSON when it has one. */
export const show = (reply: unknown): string => {
  try {
    return JSON.stringify(reply) ?? String(reply)
  } catch {
    return String(reply)
  }
}

/** @internal The key of a service's own entry point for a call made on a fiber it is handed. */
export const ScriptOnId: unique symbol = Symbol.for("wakuwaku/Redis/scriptOn")

/**
 * @internal A service that can run a script on the fiber it is handed (see `writeScript` in redis.ts), in one step. The
 * entry names the `script` it stands for: a service made by copying this one with another `script` (a
 * decorator) is called through its own `script`.
 */
export interface ScriptOn {
  readonly [ScriptOnId]: {
    readonly script: Redis.Service["script"]
    readonly on: <A>(
      fiber: Fiber.RuntimeFiber<unknown, unknown>,
      status: FiberStatus.Running,
      script: Script.Script<A>,
      keys: ReadonlyArray<string>,
      args: ReadonlyArray<string>
    ) => Effect.Effect<A, Redis.RedisError>
  }
}

/**
 * @internal A service's `script` and the entry behind it, from the function that runs a call on the fiber
 * making it.
 */
export const scriptEntry = (on: ScriptOn[typeof ScriptOnId]["on"]) => {
  const script: Redis.Service["script"] = (script, keys, args) =>
    Effect.withFiberRuntime((fiber, status) => on(fiber, status, script, keys, args))
  return { [ScriptOnId]: { script, on }, script } as const
}

/** @internal A reply of `script`, decoded, as an Exit for the fiber waiting for it to resume with. */
export const decodedReply = <A>(script: Script.Script<A>, reply: unknown): Exit.Exit<A, Redis.RedisError> => {
  const decoded = script.decode(reply)
  return Either.isRight(decoded)
    ? Exit.succeed(decoded.right)
    : Exit.fail(unexpected(script as Script.Script<unknown>, reply, decoded.left))
}

/** @internal Runs `script` on `redis`, which decodes the reply. */
export const runOn = <A>(
  redis: Redis.Service,
  script: Script.Script<A>,
  keys: ReadonlyArray<string>,
  args: ReadonlyArray<string>
): Effect.Effect<A, Redis.RedisError> => redis.script(script, keys, args)

/** @internal */
export const run = <A>(
  script: Script.Script<A>,
  keys: ReadonlyArray<string>,
  args: ReadonlyArray<string>
): Effect.Effect<A, Redis.RedisError, Redis.Redis> =>
  Effect.flatMap(core.Redis, (redis) => redis.script(script, keys, args))

/** @internal */
export const manyLua = (fn: string, keys: number, args: number, shared = 0): string => {
  const list = (name: string, per: number, from: number) =>
    Array.from({ length: per }, (_, j) => `${name}[${from > 0 ? `${from} + ` : ""}${per} * (i - 1) + ${j + 1}]`)
  const params = [
    ...list("KEYS", keys, 0),
    ...Array.from({ length: shared }, (_, j) => `ARGV[${j + 1}]`),
    ...list("ARGV", args, shared)
  ]
  return `local replies = {}
for i = 1, #KEYS / ${keys} do
  local ok, reply = pcall(${fn}, ${params.join(", ")})
  if ok then
    replies[i] = reply
  elseif type(reply) == 'table' and reply.err then
    replies[i] = reply
  else
    replies[i] = redis.error_reply(tostring(reply))
  end
end
return replies
`
}

/** @internal */
export const manyTwin =
  (twin: Script.Twin, keys: number, args: number, shared = 0): Script.Twin => (db, allKeys, allArgs) => {
    const replies: Array<Script.Reply> = []
    const common = allArgs.slice(0, shared)
    for (let i = 0; i < allKeys.length / keys; i++) {
      try {
        const own = allArgs.slice(shared + i * args, shared + (i + 1) * args)
        replies.push(twin(db, allKeys.slice(i * keys, (i + 1) * keys), shared > 0 ? [...common, ...own] : own))
      } catch (cause) {
        replies.push(cause instanceof Error ? cause : new Error(String(cause)))
      }
    }
    return replies
  }

// Common decoders.

/** @internal 1 or 0 as a boolean. */
export const flag = (reply: unknown): Either.Either<boolean, string> =>
  reply === 1 || reply === 0 ? Either.right(reply === 1) : Either.left("1 or 0")

/** @internal Any reply, ignored. */
export const ignore = (_: unknown): Either.Either<void, string> => Either.void

/**
 * @internal Why `keys` do not fit `script` (a bug of the caller, which dies), or undefined: a script
 * takes exactly its KEYS; a batch variant a whole number of calls' KEYS, at least one call's.
 */
export const checkKeys = (script: Script.Script<unknown>, keys: ReadonlyArray<string>): string | undefined =>
  (script.variadic ? keys.length === 0 || keys.length % script.keys !== 0 : keys.length !== script.keys)
    ? `wakuwaku: script ${script.name} declares ${script.keys} keys${
      script.variadic ? " per call" : ""
    }, got ${keys.length}`
    : undefined
