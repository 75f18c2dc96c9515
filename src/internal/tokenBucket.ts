/** @internal */
import * as Data from "effect/Data"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import * as Rate from "../Rate.js"
import * as Redis from "../Redis.js"
import type * as TokenBucket from "../TokenBucket.js"
import * as capability from "./capability.js"
import * as key from "./key.js"
import { NOW_US } from "./lua.js"

const KIND = "TokenBucket"

/** @internal */
export const entity = Object.freeze({ kind: KIND }) as TokenBucket.Entity

/**
 * @internal Refill, shared by both scripts. State is one string "<tokens> <ts>": tokens fractional
 * (printed with %.17g, so a round trip is exact), ts the server time in µs. An absent key is a full
 * bucket. Sets `tokens` to the level at `now`. Refill multiplies before it divides, and retry times are
 * checked with this same expression, so a retry exactly at retryAfter sees enough tokens.
 */
const REFILL = `${NOW_US}local capacity = tonumber(ARGV[1])
local k = tonumber(ARGV[2])
local period = tonumber(ARGV[3])
local tokens = capacity
local state = redis.call('GET', KEYS[1])
if state then
  local sp = string.find(state, ' ', 1, true)
  local elapsed = now - tonumber(string.sub(state, sp + 1))
  if elapsed < 0 then elapsed = 0 end
  tokens = tonumber(string.sub(state, 1, sp - 1)) + elapsed * k / period
  if tokens > capacity then tokens = capacity end
end
`

/**
 * @internal Takes `cost` tokens if the bucket holds that many, and stores the level, expiring the key
 * when the bucket is full again (deleting it if it is full now).
 * KEYS[1] the bucket; ARGV[1] capacity (whole tokens), ARGV[2] tokens per period, ARGV[3] period (µs),
 * ARGV[4] cost (whole tokens).
 * Returns {1, 0, floor(remaining)} if allowed, {0, retry_ms, floor(tokens)} if denied, retry_ms -1 when
 * cost > capacity (never).
 */
export const ACQUIRE = Redis.script({
  name: "TokenBucket.acquire",
  keys: 1,
  lua: `${REFILL}local cost = tonumber(ARGV[4])
local allowed, retry = 0, 0
if cost > capacity then
  retry = -1
elseif tokens >= cost then
  tokens = tokens - cost
  allowed = 1
else
  retry = math.ceil((cost - tokens) * period / k / 1000)
  for _ = 1, 3 do
    if tokens + (retry * 1000) * k / period >= cost then break end
    retry = retry + 1
  end
end
if tokens >= capacity then
  redis.call('DEL', KEYS[1])
else
  local ttl = math.ceil((capacity - tokens) * period / k / 1000)
  if ttl < 1 then ttl = 1 end
  redis.call('SET', KEYS[1], string.format('%.17g', tokens) .. ' ' .. string.format('%d', now), 'PX', ttl)
end
return {allowed, retry, math.floor(tokens)}
`
})

/**
 * @internal Reads the level without writing. KEYS[1] the bucket; ARGV[1] capacity, ARGV[2] tokens per
 * period, ARGV[3] period (µs). Returns floor(tokens).
 */
export const PEEK = Redis.script({
  name: "TokenBucket.peek",
  keys: 1,
  lua: `${REFILL}return math.floor(tokens)
`
})

/** @internal */
export const Admission = Data.taggedEnum<TokenBucket.Admission>()

const isInt = (u: unknown): u is number => typeof u === "number" && Number.isSafeInteger(u)

type Failure = Redis.RedisError | Redis.InvalidInput

class BucketImpl<Name extends Redis.KeyName> implements TokenBucket.TokenBucket<Name> {
  private readonly args: ReadonlyArray<string>
  private readonly label: string
  constructor(readonly namespace: string, readonly capacity: number, readonly rate: Rate.Rate) {
    this.args = [String(capacity), String(rate.tokens), String(rate.periodMicros)]
    this.label = `TokenBucket(${namespace})`
    Object.freeze(this)
  }

  private keyOf(operation: string, name: Name): Effect.Effect<string, Redis.InvalidInput> {
    const encoded = key.encodeName(name)
    return Either.isRight(encoded)
      ? Effect.succeed(key.itemKey(KIND, this.namespace, encoded.right))
      : Effect.fail(
        new Redis.InvalidInput({ operation: `${this.label}.${operation}`, argument: "name", message: encoded.left })
      )
  }

  readonly acquire = (
    name: Name,
    cost: number
  ): Effect.Effect<TokenBucket.Admission, Failure, TokenBucket.Requirements<"write">> => {
    if (!isInt(cost) || cost < 0) {
      return Effect.fail(
        new Redis.InvalidInput({
          operation: `${this.label}.acquire`,
          argument: "cost",
          message: `cost must be a non-negative safe integer, got ${String(cost)}`
        })
      )
    }
    const args = [...this.args, String(cost)]
    return Effect.flatMap(this.keyOf("acquire", name), (k) =>
      capability.ensureWrite(entity).pipe(
        Effect.zipRight(Redis.Redis),
        Effect.flatMap((redis) => redis.script(ACQUIRE, [k], args)),
        Effect.flatMap(decodeAdmission)
      ))
  }

  readonly reset = (name: Name): Effect.Effect<boolean, Failure, TokenBucket.Requirements<"write">> =>
    Effect.flatMap(this.keyOf("reset", name), (k) =>
      capability.ensureWrite(entity).pipe(
        Effect.zipRight(Redis.Redis),
        Effect.flatMap((redis) => redis.command("DEL", [k])),
        Effect.flatMap((reply) =>
          reply === 0 || reply === 1 ? Effect.succeed(reply === 1) : Effect.fail(unexpected("DEL", reply))
        )
      ))

  readonly peek = (name: Name): Effect.Effect<number, Failure, TokenBucket.Requirements<"read">> =>
    Effect.flatMap(this.keyOf("peek", name), (k) =>
      capability.ensureRead(entity).pipe(
        Effect.zipRight(Redis.Redis),
        Effect.flatMap((redis) => redis.script(PEEK, [k], this.args)),
        Effect.flatMap((reply) =>
          isInt(reply) ? Effect.succeed(reply) : Effect.fail(unexpected(`script ${PEEK.name}`, reply))
        )
      ))

  toString() {
    return `${this.label}: capacity ${this.capacity}, ${String(this.rate)}`
  }
}

const unexpected = (operation: string, reply: unknown) =>
  new Redis.RedisError({ reason: "Reply", operation, cause: new Error(`unexpected reply ${JSON.stringify(reply)}`) })

const decodeAdmission = (reply: unknown): Effect.Effect<TokenBucket.Admission, Redis.RedisError> => {
  if (Array.isArray(reply) && reply.length === 3 && isInt(reply[0]) && isInt(reply[1]) && isInt(reply[2])) {
    const [allowed, retry, remaining] = reply as [number, number, number]
    if (allowed === 1) return Effect.succeed(Admission.Allowed({ remaining }))
    return Effect.succeed(Admission.Denied({ retryAfter: retry < 0 ? Option.none() : Option.some(Duration.millis(retry)) }))
  }
  return Effect.fail(unexpected(`script ${ACQUIRE.name}`, reply))
}

/** @internal */
export const make = <Name extends Redis.KeyName>(
  namespace: string,
  capacity: number,
  rate: Rate.Rate
): TokenBucket.TokenBucket<Name> => {
  key.validateNamespace(KIND, namespace)
  if (typeof capacity !== "number" || !Number.isSafeInteger(capacity) || capacity < 0) {
    throw new RangeError(
      `wakuwaku: TokenBucket(${namespace}) capacity must be a non-negative safe integer, got ${String(capacity)}`
    )
  }
  if (typeof rate !== "object" || rate === null || !Number.isSafeInteger(rate.periodMicros)) {
    throw new TypeError(`wakuwaku: TokenBucket(${namespace}) needs a rate made by Rate.make or Rate.perSecond`)
  }
  return new BucketImpl<Name>(namespace, capacity, rate)
}
