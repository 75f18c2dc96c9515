/**
 * @internal What every limiter kind (TokenBucket, FixedWindow, …) shares: one key per name, an acquire script
 * replying {allowed, ms, remaining} (a bucket's batch variant: an allowed call by its remaining alone), a
 * read-only peek script, and reset by DEL. Each passes its kind, entity, scripts, the parameters the
 * scripts take (its `shape`) and its description (the shared type id's value: its IETF policy).
 *
 * Each kind also contributes its algorithm to `wakuwaku proxy` ({@link registerAlgorithm}): its name, its
 * flags and how it makes a limiter of them. The layers above the structures ask a limiter (or the table)
 * and never name a kind.
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import * as Admission_ from "../Admission.js"
import type * as Capability from "../Capability.js"
import type * as Limiter_ from "../Limiter.js"
import * as Redis from "../Redis.js"
import type * as Script from "../Script.js"
import { parseText } from "./duration.js"
import * as key from "./key.js"
import * as access from "./redis.js"
import { runOn, unexpectedReply } from "./script.js"
import * as telemetry from "./telemetry.js"
import { isInt, notCount } from "./validate.js"

const { Admission } = Admission_
type Admission = Admission_.Admission
// Each access to a TaggedEnum's constructor builds it anew: take them once.
const { Allowed, Denied } = Admission

/**
 * @internal The `call` of an acquire batch script, around the script's `take(key, params, cost)` (three
 * values: allowed, retry_ms, remaining), with `parse` applied to the call's parameter string and `more`
 * (Lua, such as ", 0") after the cost: an allowed call replies with its remaining alone (an integer, not a
 * table: Redis replies sooner; docs/performance.md, "Figures behind design choices").
 */
export const ACQUIRE_CALL = (parse: string, more = "") =>
  `local function call(key, params, cost)
  local allowed, retry, remaining = take(key, ${parse}(params), tonumber(cost)${more})
  if allowed == 1 then return remaining end
  return {allowed, retry, remaining}
end
`

/** @internal The twin of {@link ACQUIRE_CALL}, around the twin of a single acquire. */
export const compact = (acquire: Script.Twin): Script.Twin => (db, keys, argv) => {
  const [allowed, retry, remaining] = acquire(db, keys, argv) as [number, number, number]
  return allowed === 1 ? remaining : [allowed, retry, remaining]
}

/** @internal Decodes {allowed, retry_ms, remaining} (retry_ms -1: never), or a bare remaining (allowed in a batch). */
export const admission = (reply: unknown): Either.Either<Admission, string> => {
  // A batch reply may say "allowed" by the remaining count alone.
  if (isInt(reply) && reply >= 0) return Either.right(Allowed({ remaining: reply }))
  if (Array.isArray(reply) && reply.length === 3 && isInt(reply[0]) && isInt(reply[1]) && isInt(reply[2])) {
    const [allowed, retry, remaining] = reply as [number, number, number]
    if (allowed === 1) return Either.right(Allowed({ remaining }))
    return Either.right(Denied({ retryAfter: retry < 0 ? Option.none() : Option.some(Duration.millis(retry)) }))
  }
  return Either.left("{allowed, retry_ms, remaining} or a remaining count")
}

/** @internal Decodes a peek's whole count. */
export const count = (reply: unknown): Either.Either<number, string> =>
  isInt(reply) ? Either.right(reply) : Either.left("an integer")

type Failure = Redis.RedisError | Redis.InvalidInput

/** @internal The type id every limiter carries; its value is the limiter's description. */
export const LimiterTypeId: Limiter_.TypeId = Symbol.for("wakuwaku/Limiter") as Limiter_.TypeId

/** @internal */
export const isLimiter = (u: unknown): u is Limiter_.Limiter<never, unknown> =>
  typeof u === "object" && u !== null && LimiterTypeId in u

/** Costs below this get a shared ARGV array each. */
const SMALL = 64

/** @internal The operations of a one-key-per-name limiter of `kind`. */
export class Limiter<Name extends Redis.KeyName, E extends Capability.AnyEntity> {
  readonly label: string
  readonly [LimiterTypeId]: Limiter_.Description
  /** Every key of this limiter: this, then the encoded name. */
  private readonly prefix: string
  constructor(
    /** Its kind: `TokenBucket`, `FixedWindow`, … */
    readonly kind: string,
    /** The entity its writes need the right to write. */
    readonly entity: E,
    readonly namespace: string,
    /** The limiter's parameters, as its scripts take them. */
    readonly shape: string,
    private readonly scripts: { readonly acquire: Script.Script<Admission>; readonly peek: Script.Script<number> },
    /** What it says of itself (its IETF policy), but its kind. */
    description: Omit<Limiter_.Description, "kind">
  ) {
    this.label = `${kind}(${namespace})`
    this[LimiterTypeId] = Object.freeze({ kind, ...description })
    this.decisions = new telemetry.Decisions(kind, [{ kind, policy: namespace }])
    this.prefix = key.itemKey(kind, namespace, "")
  }

  /** ARGV [shape, cost], the same array for every call of a small cost (the batcher only reads it). */
  private argsOf(cost: number): ReadonlyArray<string> {
    if (cost >= SMALL) return [this.shape, String(cost)]
    return this.small[cost] ??= [this.shape, String(cost)]
  }
  private readonly small: Array<ReadonlyArray<string>> = []
  /** Its telemetry's labels and attributes. */
  readonly decisions: telemetry.Decisions

  /** The key of `name`, or why it has none (an `InvalidInput` of `operation`). */
  keyOf(operation: string, name: Name): string | Redis.InvalidInput {
    const fast = key.encodeNameFast(name)
    if (fast !== undefined) return this.prefix + fast
    const encoded = key.encodeNameOf(this.label, operation, name)
    return Either.isRight(encoded) ? this.prefix + encoded.right : encoded.left
  }

  /**
   * Runs `script` on `name`'s key, with ARGV the shape, `cost` and `more`, once the cost (a non-negative
   * safe integer) and the name are checked, in that order, and the right to write is.
   */
  protected spend<A>(
    operation: string,
    script: Script.Script<A>,
    name: Name,
    cost: number,
    more?: ReadonlyArray<string>
  ): Effect.Effect<A, Failure, Redis.Redis | Capability.Write<E>> {
    const wrong = notCount("cost", cost, 0)
    if (wrong !== undefined) {
      return Effect.fail(
        new Redis.InvalidInput({ operation: `${this.label}.${operation}`, argument: "cost", message: wrong })
      )
    }
    const k = this.keyOf(operation, name)
    if (typeof k !== "string") return Effect.fail(k)
    return access.writeScript(
      this.entity,
      script,
      [k],
      more === undefined ? this.argsOf(cost) : [this.shape, String(cost), ...more]
    )
  }

  readonly acquire = (
    name: Name,
    cost: number
  ): Effect.Effect<Admission, Failure, Redis.Redis | Capability.Write<E>> =>
    telemetry.decide(this.decisions, cost, this.spend("acquire", this.scripts.acquire, name, cost))

  readonly reset = (name: Name): Effect.Effect<boolean, Failure, Redis.Redis | Capability.Write<E>> => {
    const k = this.keyOf("reset", name)
    if (typeof k !== "string") return Effect.fail(k)
    return access.write(
      this.entity,
      (redis) =>
        Effect.flatMap(redis.command("DEL", [k]), (reply) =>
          reply === 0 || reply === 1
            ? Effect.succeed(reply === 1)
            : Effect.fail(unexpectedReply("DEL", reply, "1 or 0")))
    )
  }

  readonly peek = (name: Name): Effect.Effect<number, Failure, Redis.Redis | Capability.Read<E>> => {
    const k = this.keyOf("peek", name)
    if (typeof k !== "string") return Effect.fail(k)
    return access.read(this.entity, (redis) => runOn(redis, this.scripts.peek, [k], [this.shape]))
  }
}

/** @internal What a limiter made by the command line needs: the store, and the right to write any entity. */
export type AnyRequirements = Redis.Redis | Capability.Write<Capability.AnyEntity>

/** @internal A flag of `wakuwaku proxy` that an algorithm reads (its name is its key in `Algorithm.flags`). */
export interface Flag<A> {
  /** What follows the flag in the help, such as `N`. */
  readonly value: string
  /** The environment variable read when the flag is not given. */
  readonly env: string
  /** The default, as the help shows it and as `parse` reads it. */
  readonly default: string
  /** Its help line, after the names of the algorithms that read it. */
  readonly help: string
  /** What a bad value is told, such as `expected a positive whole number`. */
  readonly expected: string
  /** The value, or undefined when the text is not one. */
  readonly parse: (text: string) => A | undefined
  /** What a configuration file (JSON) writes it as: a number (`integer`), or text as the flag takes it (default). */
  readonly json?: "integer" | "string" | undefined
}

/**
 * @internal A kind's algorithm for `wakuwaku proxy --algorithm <name>`: its flags, each parsed into its
 * parameter of the same name, and the limiter made of them. Two algorithms may share a flag (the same name,
 * variable and default), such as `--limit` and `--window`.
 */
export interface Algorithm<P extends object> {
  /** Its name on the command line, such as `fixed-window`. */
  readonly name: string
  /** Its name in prose, such as `fixed window`. */
  readonly title: string
  readonly flags: { readonly [K in keyof P]: Flag<P[K]> }
  /** Its flags in the help's example, such as `--limit 5 --window 10s`. */
  readonly example: string
  /** Throws (a `RangeError`) on parameters its kind refuses. */
  readonly make: (namespace: string, params: P) => Limiter_.Limiter<string, AnyRequirements>
  /** The policy in a few words, such as `burst 20, 1 per 3 seconds`. */
  readonly summary: (params: P) => string
  /** The most requests a client may send at once. */
  readonly burst: (params: P) => number
}

/** @internal An algorithm with its parameters read: what the command line configures. */
export interface Configured {
  readonly algorithm: string
  readonly title: string
  readonly params: Readonly<Record<string, unknown>>
  readonly summary: string
  readonly burst: number
  readonly make: (namespace: string) => Limiter_.Limiter<string, AnyRequirements>
}

type AnyAlgorithm = Algorithm<Record<string, unknown>>

const algorithms: Array<AnyAlgorithm> = []

/** @internal Adds a kind's algorithm to the command line's table (its module does, when it loads). */
export const registerAlgorithm = <P extends object>(algorithm: Algorithm<P>): void => {
  if (algorithms.some((a) => a.name === algorithm.name)) {
    throw new Error(`wakuwaku: the algorithm ${algorithm.name} is registered twice`)
  }
  algorithms.push(algorithm as unknown as AnyAlgorithm)
}

/**
 * @internal The algorithms of every kind in `loaded`, the package's index (whose loading registered them: a
 * kind exported from the package is a kind the command line offers), `first` first, then by name.
 */
export const algorithmsOf = (loaded: object, first: string): ReadonlyArray<AnyAlgorithm> => {
  if (Object.keys(loaded).length === 0) throw new Error("wakuwaku: no limiter kind is loaded")
  const rank = (a: AnyAlgorithm) => (a.name === first ? "" : a.name)
  return [...algorithms].sort((a, b) => (rank(a) < rank(b) ? -1 : 1))
}

/** @internal `algorithm` with its parameters read. */
export const configure = (algorithm: AnyAlgorithm, params: Readonly<Record<string, unknown>>): Configured => ({
  algorithm: algorithm.name,
  title: algorithm.title,
  params,
  summary: algorithm.summary(params),
  burst: algorithm.burst(params),
  make: (namespace) => algorithm.make(namespace, params)
})

const positiveCount = (text: string): number | undefined => {
  const n = /^\d+$/.test(text.trim()) ? Number(text.trim()) : NaN
  return Number.isSafeInteger(n) && n >= 1 ? n : undefined
}

const positiveDuration = (text: string): Duration.Duration | undefined => {
  const d = parseText(text)
  return d !== undefined && Duration.toMillis(d) > 0 ? d : undefined
}

/** @internal The value languages algorithms' flags share: a positive whole number, a positive duration. */
export const values = {
  count: { expected: "expected a positive whole number", parse: positiveCount, json: "integer" },
  duration: { expected: "expected a positive duration such as 500ms, 30s or 2m", parse: positiveDuration }
} as const
