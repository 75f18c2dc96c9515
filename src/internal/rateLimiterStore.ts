/**
 * @internal RateLimiterStore: @effect/experimental's `RateLimiterStore` contract over two scripts (its fixed
 * window, and a token bucket on ./bucket.ts's arithmetic) and their twins, with the checks of its input.
 */
import { RateLimiterStore, RateLimitStoreError } from "@effect/experimental/RateLimiter"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Layer from "effect/Layer"
import * as Capability from "../Capability.js"
import type * as Store from "../RateLimiterStore.js"
import type * as Redis from "../Redis.js"
import type * as Script from "../Script.js"
import { FUNCTIONS, levelOf, shapeOf, store, take } from "./bucket.js"
import { MAX_MICROS, MAX_TEXT } from "./duration.js"
import * as key from "./key.js"
import { NOW_US } from "./lua.js"
import * as access from "./redis.js"
import { define, manyLua, manyTwin, ReplyError } from "./script.js"
import * as core from "./service.js"
import { isInt, notCount } from "./validate.js"

const KIND = "RateLimiterStore"

/** @internal */
export const entity: Store.Entity = Capability.entity(KIND)

/** The longest a window may reach ahead of now, in µs: the bound of every duration the library keeps. */
const MAX_AHEAD = Number(MAX_MICROS)

/**
 * The contract's fixed window, one call: `window(key, refill, limit, tokens)` (refill in whole µs, limit ""
 * for none, as ARGV strings) counts the tokens and pushes the window's end back by refill × tokens, unless
 * the count would pass the limit. Returns {count after the tokens, ms until the end, rounded up}, or an
 * error reply when the end would be more than 10^11 ms ahead.
 */
const WINDOW = `local function window(key, refill, limit, tokens)
  tokens, refill = tonumber(tokens), tonumber(refill)
  local count, ends = 0, now
  local state = redis.call('GET', key)
  if state then
    local sp = string.find(state, ' ', 1, true)
    local at = tonumber(string.sub(state, 1, sp - 1))
    if at > now then count, ends = tonumber(string.sub(state, sp + 1)), at end
  end
  count = count + tokens
  if limit ~= '' and count > tonumber(limit) then return {count, math.ceil((ends - now) / 1000)} end
  ends = ends + refill * tokens
  if ends - now > ${MAX_AHEAD} then
    return redis.error_reply('ERR the window would end more than ${MAX_TEXT} from now')
  end
  local ttl = math.ceil((ends - now) / 1000)
  if ttl > 0 then
    redis.call('SET', key, string.format('%d', ends) .. ' ' .. string.format('%d', count), 'PX',
      string.format('%d', ttl))
  end
  return {count, ttl}
end
`

/** The twin of WINDOW's call, on the same ARGV. */
const windowTwin: Script.Twin = (db, keys, argv) => {
  const refill = Number(argv[0])
  const tokens = Number(argv[2])
  let count = 0
  let ends = db.now
  const state = db.get(keys[0]!)
  if (state !== null) {
    const sp = state.indexOf(" ")
    const at = Number(state.slice(0, sp))
    if (at > db.now) {
      count = Number(state.slice(sp + 1))
      ends = at
    }
  }
  count = count + tokens
  if (argv[1] !== "" && count > Number(argv[1])) return [count, Math.ceil((ends - db.now) / 1000)]
  ends = ends + refill * tokens
  if (ends - db.now > MAX_AHEAD) throw new ReplyError(`ERR the window would end more than ${MAX_TEXT} from now`)
  const ttl = Math.ceil((ends - db.now) / 1000)
  if (ttl > 0) db.set(keys[0]!, `${ends} ${count}`, { px: ttl })
  return [count, ttl]
}

/**
 * @internal The contract's fixed window: a counter that opens at its first count and lasts `refill` per token
 * counted, so that after n tokens it ends n × refill after it opened (a full window after `limit` tokens).
 * KEYS[1] the counter, holding "<end µs> <count>"; ARGV[1] refill (whole µs), ARGV[2] the limit ("" for
 * none), ARGV[3] the tokens (whole). Counts the tokens and pushes the end back by refill × tokens, unless
 * the count would pass the limit (then writes nothing). Returns {count after the tokens, ms until the end,
 * rounded up}; an error reply when the end would be more than 10^11 ms ahead. Calls made together with
 * the same refill and limit are batched: its `many` variant runs them at one server time (KEYS the
 * counters, ARGV refill and limit once, then each call's tokens) and replies with each call's reply.
 */
export const FIXED_WINDOW = define({
  name: "RateLimiterStore.fixedWindow",
  keys: 1,
  lua: `${NOW_US}${WINDOW}return window(KEYS[1], ARGV[1], ARGV[2], ARGV[3])
`,
  twin: windowTwin,
  decode: (reply) =>
    Array.isArray(reply) && reply.length === 2 && isInt(reply[0]) && isInt(reply[1]) && reply[1] >= 0
      ? Either.right([reply[0], reply[1]] as const)
      : Either.left("{count, ttl_ms}"),
  many: { lua: `${NOW_US}${WINDOW}${manyLua("window", 1, 1, 2)}`, twin: manyTwin(windowTwin, 1, 1, 2), shared: 2 }
})

/** One call of the contract's token bucket, after ./bucket.ts's FUNCTIONS (see TOKEN_BUCKET). */
const BUCKET = `local function bucket(key, s, cost, overflow)
  local b = shape(s)
  cost = tonumber(cost)
  if overflow == '1' then
    local tokens = level(key, b) - cost
    store(key, b, tokens)
    return math.floor(tokens)
  end
  local allowed, _, left = take(key, b, cost, 0)
  if allowed == 1 then return left end
  return left - cost
end
`

/** The twin of BUCKET's call, on the same ARGV. */
const bucketTwin: Script.Twin = (db, keys, argv) => {
  const b = shapeOf(argv[0]!)
  const cost = Number(argv[1])
  if (argv[2] === "1") {
    const tokens = levelOf(db, keys[0]!, b) - cost
    store(db, keys[0]!, b, tokens)
    // Lua hands Redis its numbers as integers: -0 becomes 0.
    return Math.floor(tokens) + 0
  }
  const [allowed, , left] = take(db, keys[0]!, b, cost, 0)
  return allowed === 1 ? left : left - cost
}

/**
 * @internal The contract's token bucket, on TokenBucket's arithmetic (./bucket.ts: continuous refill, the
 * key expiring when the bucket is full again). KEYS[1] the bucket; ARGV[1] its shape "<capacity> <tokens
 * per period> <period µs>", ARGV[2] the cost (whole tokens), ARGV[3] "1" to allow overflow, else "0".
 * Overflow: takes the cost whatever the level, into debt. Otherwise an acquire: takes it only if the bucket
 * holds that many. Returns floor(level - cost), negative when the bucket could not cover the cost (then,
 * without overflow, nothing was taken). Calls made together on one shape are batched: its `many` variant
 * runs them at one server time (KEYS the buckets, ARGV the shape once, then each call's cost and
 * overflow) and replies with each call's reply.
 */
export const TOKEN_BUCKET = define({
  name: "RateLimiterStore.tokenBucket",
  keys: 1,
  lua: `${FUNCTIONS}${BUCKET}return bucket(KEYS[1], ARGV[1], ARGV[2], ARGV[3])
`,
  twin: bucketTwin,
  decode: (reply) => isInt(reply) ? Either.right(reply) : Either.left("an integer"),
  many: { lua: `${FUNCTIONS}${BUCKET}${manyLua("bucket", 1, 2, 1)}`, twin: manyTwin(bucketTwin, 1, 2, 1), shared: 1 }
})

/** The bucket's longest fill time, in µs, as TokenBucket.make bounds it: its TTLs stay whole ms Lua prints exactly. */
const MAX_FILL_MICROS = 1e17

/** `refillRate` in whole µs, rounded `down` or up, or why it is not one from 1 µs to MAX_MICROS. */
const refillMicros = (refill: unknown, down: boolean): number | string => {
  const nanos = Duration.isDuration(refill) && Duration.isFinite(refill) ? Duration.unsafeToNanos(refill) : undefined
  if (nanos === undefined || nanos < 1000n || nanos > MAX_MICROS * 1000n) {
    return `refillRate must be a duration from 1 µs to ${MAX_TEXT}, got ${
      Duration.isDuration(refill) ? Duration.format(refill) : key.preview(refill)
    }`
  }
  return Number(down ? nanos / 1000n : (nanos + 999n) / 1000n)
}

/** Why `value`, the argument `what`, is not a count (a non-negative safe integer), or undefined. */
const countProblem = (value: unknown, what: string): readonly [string, string] | undefined => {
  const problem = notCount(what, value, 0, key.preview)
  return problem === undefined ? undefined : [what, problem]
}

type Operation = "fixedWindow" | "tokenBucket"

/** The store's failure of bad input: nothing was sent. */
const invalid = (operation: Operation, argument: string, message: string) => {
  const cause = new core.InvalidInput({ operation: `RateLimiterStore.${operation}`, argument, message })
  return Effect.fail(new RateLimitStoreError({ message: `${cause.operation}: ${message}`, cause }))
}

const failed = (operation: Operation) => (cause: Redis.RedisError) =>
  new RateLimitStoreError({ message: `RateLimiterStore.${operation}: ${cause.message}`, cause })

type Service = RateLimiterStore["Type"]

/** The key under `prefix` of the contract's `key`, or why it has none (the InvalidInput's message). */
const keyOf = (prefix: string, name: string): Either.Either<string, string> => {
  const encoded = key.encodeNameFast(name)
  return encoded === undefined
    ? Either.map(key.encodeName(name), (e) => prefix + e)
    : Either.right(prefix + encoded)
}

const fixedWindow = (prefix: string, redis: Redis.Service): Service["fixedWindow"] => (options) => {
  const k = keyOf(prefix, options.key)
  if (Either.isLeft(k)) return invalid("fixedWindow", "key", k.left)
  const bad = countProblem(options.tokens, "tokens") ??
    (options.limit === undefined ? undefined : countProblem(options.limit, "limit"))
  if (bad !== undefined) return invalid("fixedWindow", ...bad)
  // Rounded up: the window lasts at least what the contract says, so a wait computed from it is never short.
  const refill = refillMicros(options.refillRate, false)
  if (typeof refill === "string") return invalid("fixedWindow", "refillRate", refill)
  const args = [String(refill), options.limit === undefined ? "" : String(options.limit), String(options.tokens)]
  return Effect.mapError(redis.script(FIXED_WINDOW, [k.right], args), failed("fixedWindow"))
}

const tokenBucket = (prefix: string, redis: Redis.Service): Service["tokenBucket"] => (options) => {
  const k = keyOf(prefix, options.key)
  if (Either.isLeft(k)) return invalid("tokenBucket", "key", k.left)
  const bad = countProblem(options.tokens, "tokens") ?? countProblem(options.limit, "limit")
  if (bad !== undefined) return invalid("tokenBucket", ...bad)
  // Rounded down: the bucket refills at least as fast as the contract says, so a wait computed from it
  // (refillRate × the tokens missing) is never short.
  const period = refillMicros(options.refillRate, true)
  if (typeof period === "string") return invalid("tokenBucket", "refillRate", period)
  if (options.limit * period > MAX_FILL_MICROS) {
    return invalid(
      "tokenBucket",
      "limit",
      `the bucket would take more than 1e14 ms (about 3000 years) to fill: limit ${options.limit}, ` +
        `refillRate ${Duration.format(options.refillRate)}`
    )
  }
  const args = [`${options.limit} 1 ${period}`, String(options.tokens), options.allowOverflow ? "1" : "0"]
  return Effect.mapError(redis.script(TOKEN_BUCKET, [k.right], args), failed("tokenBucket"))
}

/** @internal */
export const make = (
  options: Store.Options = {}
): Effect.Effect<RateLimiterStore["Type"], never, Store.Requirements> => {
  const namespace = key.validateNamespace(KIND, options.namespace ?? "ratelimiter")
  // The grant is checked once, here: the service keeps the connection it was built with. Its keys are
  // @@wakuwaku:RateLimiterStore:<namespace>:<algorithm>:<key>.
  return access.write(entity, (redis) =>
    Effect.succeed(RateLimiterStore.of({
      fixedWindow: fixedWindow(key.itemKey(KIND, namespace, "fixed-window:"), redis),
      tokenBucket: tokenBucket(key.itemKey(KIND, namespace, "token-bucket:"), redis)
    })))
}

/** @internal */
export const layer = (options?: Store.Options): Layer.Layer<RateLimiterStore, never, Store.Requirements> =>
  Layer.effect(RateLimiterStore, make(options))
