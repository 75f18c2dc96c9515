/** @internal */
import * as Rate from "../Rate.js"
import type * as Redis from "../Redis.js"
import * as Script from "../Script.js"
import type * as TokenBucket from "../TokenBucket.js"
import * as key from "./key.js"
import * as limiter from "./limiter.js"
import { NOW_US } from "./lua.js"
import { define, manyLua, manyTwin } from "./script.js"

const KIND = "TokenBucket"

/** @internal */
export const entity = Object.freeze({ kind: KIND }) as TokenBucket.Entity

/** @internal */
export const TypeId: TokenBucket.TypeId = Symbol.for("wakuwaku/TokenBucket") as TokenBucket.TypeId

/** @internal */
export const isTokenBucket = (u: unknown): u is TokenBucket.TokenBucket<never> =>
  typeof u === "object" && u !== null && TypeId in u

/**
 * @internal Lua shared by the scripts. A bucket's parameters travel as one ARGV string, its shape:
 * "<capacity> <tokens per period> <period µs>", parsed once per script call (`shape`). State is one
 * string "<tokens> <ts>": tokens fractional (printed with %.17g, so a round trip is exact), ts the server
 * time in µs. An absent key is a full bucket.
 * - `level(key, b)` is the level at `now`. Refill multiplies before it divides, and retry times are
 *   checked with that same expression, so a retry exactly at retryAfter sees enough tokens.
 * - `take(key, b, cost)` is one acquire; it returns three values: allowed (0|1), retry_ms (0 when
 *   allowed, -1 when cost > capacity), floor(tokens left).
 */
const FUNCTIONS = `${NOW_US}local at = ' ' .. string.format('%d', now)
local shapes = {}
local function shape(s)
  local b = shapes[s]
  if b then return b end
  local capacity, k, period = string.match(s, '^(%d+) (%d+) (%d+)$')
  b = {capacity = tonumber(capacity), k = tonumber(k), period = tonumber(period)}
  shapes[s] = b
  return b
end
local function level(key, b)
  local state = redis.call('GET', key)
  if not state then return b.capacity end
  local sp = string.find(state, ' ', 1, true)
  local elapsed = now - tonumber(string.sub(state, sp + 1))
  if elapsed < 0 then elapsed = 0 end
  local tokens = tonumber(string.sub(state, 1, sp - 1)) + elapsed * b.k / b.period
  if tokens > b.capacity then return b.capacity end
  return tokens
end
local function take(key, b, cost)
  local capacity, k, period = b.capacity, b.k, b.period
  local tokens = level(key, b)
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
    redis.call('DEL', key)
  else
    local ttl = math.ceil((capacity - tokens) * period / k / 1000)
    if ttl < 1 then ttl = 1 end
    redis.call('SET', key, string.format('%.17g', tokens) .. at, 'PX', string.format('%d', ttl))
  end
  return allowed, retry, math.floor(tokens)
end
`

/** The twin of FUNCTIONS (memory.ts): the same arithmetic, in the same order, on the same doubles. */
interface Shape {
  readonly capacity: number
  readonly k: number
  readonly period: number
}
const shapeOf = (s: string): Shape => {
  const m = /^(\d+) (\d+) (\d+)$/.exec(s)
  if (m === null) throw new Script.ReplyError(`ERR bad bucket shape ${JSON.stringify(s)}`)
  return { capacity: Number(m[1]), k: Number(m[2]), period: Number(m[3]) }
}
const levelOf = (db: Script.Keyspace, key: string, b: Shape): number => {
  const state = db.get(key)
  if (state === null) return b.capacity
  const sp = state.indexOf(" ")
  let elapsed = db.now - Number(state.slice(sp + 1))
  if (elapsed < 0) elapsed = 0
  const tokens = Number(state.slice(0, sp)) + elapsed * b.k / b.period
  return tokens > b.capacity ? b.capacity : tokens
}
const take = (db: Script.Keyspace, key: string, b: Shape, cost: number): Script.Reply => {
  const { capacity, k, period } = b
  let tokens = levelOf(db, key, b)
  let allowed = 0
  let retry = 0
  if (cost > capacity) {
    retry = -1
  } else if (tokens >= cost) {
    tokens = tokens - cost
    allowed = 1
  } else {
    retry = Math.ceil((cost - tokens) * period / k / 1000)
    for (let i = 0; i < 3; i++) {
      if (tokens + (retry * 1000) * k / period >= cost) break
      retry = retry + 1
    }
  }
  if (tokens >= capacity) {
    db.del(key)
  } else {
    let ttl = Math.ceil((capacity - tokens) * period / k / 1000)
    if (ttl < 1) ttl = 1
    // String() round-trips a double exactly, as %.17g does in the Lua.
    db.set(key, `${String(tokens)} ${db.now}`, { px: ttl })
  }
  return [allowed, retry, Math.floor(tokens)]
}
const acquireTwin: Script.Twin = (db, keys, argv) => take(db, keys[0]!, shapeOf(argv[0]!), Number(argv[1]))

/**
 * @internal Takes `cost` tokens if the bucket holds that many, and stores the level, expiring the key
 * when the bucket is full again (deleting it if it is full now).
 * KEYS[1] the bucket; ARGV[1] its shape "<capacity> <tokens per period> <period µs>", ARGV[2] the cost
 * (whole tokens).
 * Returns {1, 0, floor(remaining)} if allowed, {0, retry_ms, floor(tokens)} if denied, retry_ms -1 when
 * cost > capacity (never). Calls made together are batched: its `many` variant runs many acquires at one server
 * time, each protected; it replies, per call, remaining when allowed (an integer, not a table: Redis replies about
 * 1 µs sooner), {0, retry_ms, remaining} when denied, or an error reply.
 */
export const ACQUIRE = define({
  name: "TokenBucket.acquire",
  keys: 1,
  lua: `${FUNCTIONS}return {take(KEYS[1], shape(ARGV[1]), tonumber(ARGV[2]))}
`,
  twin: acquireTwin,
  decode: limiter.admission,
  many: {
    lua: `${FUNCTIONS}${limiter.ACQUIRE_CALL("shape")}${manyLua("call", 1, 2)}`,
    twin: manyTwin(limiter.compact(acquireTwin), 1, 2)
  }
})

/**
 * @internal Reads the level without writing. KEYS[1] the bucket; ARGV[1] its shape. Returns
 * floor(tokens).
 */
export const PEEK = define({
  name: "TokenBucket.peek",
  keys: 1,
  readOnly: true,
  lua: `${FUNCTIONS}return math.floor(level(KEYS[1], shape(ARGV[1])))
`,
  twin: (db, keys, argv) => Math.floor(levelOf(db, keys[0]!, shapeOf(argv[0]!))),
  decode: limiter.count
})

class BucketImpl<Name extends Redis.KeyName> extends limiter.Limiter<Name, TokenBucket.Entity>
  implements TokenBucket.TokenBucket<Name>
{
  readonly [TypeId]: TokenBucket.TypeId = TypeId
  constructor(namespace: string, readonly capacity: number, readonly rate: Rate.Rate) {
    // The scripts take the bucket as "<capacity> <tokens per period> <period µs>".
    super(KIND, entity, namespace, `${capacity} ${rate.tokens} ${rate.periodMicros}`, { acquire: ACQUIRE, peek: PEEK })
    Object.freeze(this)
  }

  override toString() {
    return `${this.label}: capacity ${this.capacity}, ${String(this.rate)}`
  }
}

const MAX_FILL_MICROS = 1e17

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
  if (!Rate.isRate(rate)) {
    throw new TypeError(`wakuwaku: TokenBucket(${namespace}) needs a rate made by Rate.make or Rate.perSecond`)
  }
  // Times in the script (the TTL, retryAfter) stay whole milliseconds that Lua prints exactly.
  if (capacity * rate.periodMicros / rate.tokens > MAX_FILL_MICROS) {
    throw new RangeError(
      `wakuwaku: TokenBucket(${namespace}) would take more than 1e14 ms (about 3000 years) to fill: ` +
        `capacity ${capacity} at ${String(rate)}`
    )
  }
  return new BucketImpl<Name>(namespace, capacity, rate)
}
