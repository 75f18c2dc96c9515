/**
 * @internal What TokenBucket and FixedWindow share: one key per name, an acquire script replying
 * {allowed, ms, remaining} (a bucket's batch variant: an allowed call by its remaining alone), a
 * read-only peek script, and reset by DEL. Each passes its kind, entity, scripts and the parameters the
 * scripts take (its `shape`).
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import * as Admission_ from "../Admission.js"
import type * as Capability from "../Capability.js"
import * as Redis from "../Redis.js"
import type * as Script from "../Script.js"
import * as key from "./key.js"
import * as access from "./redis.js"
import { runOn, unexpectedReply } from "./script.js"
import * as telemetry from "./telemetry.js"

const { Admission } = Admission_
type Admission = Admission_.Admission
// Each access to a TaggedEnum's constructor builds it anew: take them once.
const { Allowed, Denied } = Admission

const isInt = (u: unknown): u is number => typeof u === "number" && Number.isSafeInteger(u)

/**
 * @internal The `call` of an acquire batch script, around the script's `take(key, params, cost)` (three
 * values: allowed, retry_ms, remaining), with `parse` applied to the call's parameter string and `more`
 * (Lua, such as ", 0") after the cost: an allowed call replies with its remaining alone (an integer, not a
 * table: Redis replies about 1 µs sooner).
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

/** Costs below this get a shared ARGV array each. */
const SMALL = 64

/** @internal The operations of a one-key-per-name limiter of `kind`. */
export class Limiter<Name extends Redis.KeyName, E extends Capability.AnyEntity> {
  readonly label: string
  /** Every key of this limiter: this, then the encoded name. */
  private readonly prefix: string
  constructor(
    /** `TokenBucket` or `FixedWindow`. */
    readonly kind: string,
    /** The entity its writes need the right to write. */
    readonly entity: E,
    readonly namespace: string,
    /** The limiter's parameters, as its scripts take them. */
    readonly shape: string,
    private readonly scripts: { readonly acquire: Script.Script<Admission>; readonly peek: Script.Script<number> }
  ) {
    this.label = `${kind}(${namespace})`
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
    if (!isInt(cost) || cost < 0) {
      return Effect.fail(
        new Redis.InvalidInput({
          operation: `${this.label}.${operation}`,
          argument: "cost",
          message: `cost must be a non-negative safe integer, got ${String(cost)}`
        })
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
