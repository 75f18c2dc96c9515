/**
 * @internal TokenBucket: its scripts (acquire, with its batch variant; peek; reserve; cancel; refund) and their
 * twins, the bucket value, and `throttle`.
 */
import * as Data from "effect/Data"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import * as Capability from "../Capability.js"
import * as Rate from "../Rate.js"
import type * as Redis from "../Redis.js"
import type * as Script from "../Script.js"
import type * as TokenBucket from "../TokenBucket.js"
import { FUNCTIONS, FUNCTIONS_AT_NOW, levelOf, retry, type Shape, shapeOf, store, take } from "./bucket.js"
import { MAX_MICROS, parseText, waitMillis } from "./duration.js"
import * as key from "./key.js"
import * as limiter from "./limiter.js"
import * as limits from "./limits.js"
import * as metered_ from "./metered.js"
import { define, flag, manyLua, manyTwin, show } from "./script.js"
import * as core from "./service.js"
import * as telemetry from "./telemetry.js"
import { isInt, notCount } from "./validate.js"

const KIND = "TokenBucket"

/** @internal */
export const entity: TokenBucket.Entity = Capability.entity(KIND)

/** @internal */
export const TypeId: TokenBucket.TypeId = Symbol.for("wakuwaku/TokenBucket") as TokenBucket.TypeId

/** @internal */
export const Reservation: Data.TaggedEnum.Constructor<TokenBucket.Reservation> = Data.taggedEnum<
  TokenBucket.Reservation
>()

/** @internal */
export const isTokenBucket = (u: unknown): u is TokenBucket.TokenBucket<never> =>
  typeof u === "object" && u !== null && TypeId in u

const acquireTwin: Script.Twin = (db, keys, argv) =>
  take(db, keys[0]!, shapeOf(argv[0]!), Number(argv[1]), 0).slice(0, 3)

/**
 * The bucket as a member of several limits decided as one (./limits.ts): its own functions, its own
 * acquire's condition and wait (`take` with max_wait 0: it allows iff cost ≤ capacity and the level less the
 * cost is ≥ 0; else its retry, -1 when cost > capacity), and a refund as REFUND's, capped at capacity (no
 * window: `start` is 0).
 */
limits.register<Shape>({
  kind: KIND,
  letter: "T",
  lua: `${FUNCTIONS_AT_NOW}families['T'] = {
  parse = shape,
  wait = function(key, b, cost)
    if cost > b.capacity then return -1 end
    local tokens = level(key, b)
    if tokens - cost >= 0 then return 0 end
    return retry(b, tokens, cost, 0, 0)
  end,
  take = function(key, b, cost) return take(key, b, cost, 0) end,
  left = function(key, b) return math.floor(level(key, b)) end,
  start = function() return 0 end,
  refund = function(key, b, cost)
    local tokens = level(key, b) + cost
    if tokens > b.capacity then tokens = b.capacity end
    store(key, b, tokens)
  end
}
`,
  twin: {
    parse: shapeOf,
    wait: (db, key, b, cost) => {
      if (cost > b.capacity) return -1
      const tokens = levelOf(db, key, b)
      return tokens - cost >= 0 ? 0 : retry(b, tokens, cost, 0, 0)
    },
    take: (db, key, b, cost) => take(db, key, b, cost, 0).slice(0, 3),
    left: (db, key, b) => Math.floor(levelOf(db, key, b)),
    start: () => 0,
    refund: (db, key, b, cost) => {
      let tokens = levelOf(db, key, b) + cost
      if (tokens > b.capacity) tokens = b.capacity
      store(db, key, b, tokens)
    }
  }
})

/**
 * @internal Takes `cost` tokens if the bucket holds that many (a reservation that may not wait), and
 * stores the level, expiring the key when the bucket is full again (deleting it if it is full now).
 * KEYS[1] the bucket; ARGV[1] its shape "<capacity> <tokens per period> <period µs>", ARGV[2] the cost
 * (whole tokens).
 * Returns {1, 0, floor(remaining)} if allowed, {0, retry_ms, floor(tokens)} if denied, retry_ms -1 when
 * cost > capacity (never). Calls made together are batched: its `many` variant runs many acquires of one
 * bucket at one server time, each protected: KEYS the buckets, ARGV[1] the shape (once), then each call's
 * cost; it replies, per call, remaining when allowed (an integer, not a table, which Redis replies
 * sooner), {0, retry_ms, remaining} when denied, or an error reply.
 */
export const ACQUIRE = define({
  name: "TokenBucket.acquire",
  keys: 1,
  lua: `${FUNCTIONS}local allowed, ms, left = take(KEYS[1], shape(ARGV[1]), tonumber(ARGV[2]), 0)
return {allowed, ms, left}
`,
  twin: acquireTwin,
  decode: limiter.admission,
  many: {
    lua: `${FUNCTIONS}${limiter.ACQUIRE_CALL("shape", ", 0")}${manyLua("call", 1, 1, 1)}`,
    twin: manyTwin(limiter.compact(acquireTwin), 1, 1, 1),
    // The bucket's parameters go once per batch, not once per call.
    shared: 1
  }
})

const { Granted, Refused } = Reservation

/**
 * @internal Decodes {1, wait_ms, cost, granted_at, level} (level a string: Lua hands Redis its numbers as
 * integers, truncated) or {0, retry_ms} (-1: never).
 */
const reservation = (reply: unknown): Either.Either<TokenBucket.Reservation, string> => {
  if (Array.isArray(reply) && reply.length === 2 && reply[0] === 0 && isInt(reply[1])) {
    const ms = reply[1]
    return Either.right(Refused({ retryAfter: ms < 0 ? Option.none() : Option.some(Duration.millis(ms)) }))
  }
  if (Array.isArray(reply) && reply.length === 5 && reply[0] === 1 && reply.slice(1, 4).every(isInt)) {
    const [, ms, cost, grantedAt, level] = reply as [1, number, number, number, unknown]
    const tokens = typeof level === "string" ? Number(level) : Number.NaN
    if (ms >= 0 && cost >= 0 && Number.isFinite(tokens)) {
      // + 0: the level is a place in the queue, where -0 and 0 are one.
      return Either.right(Granted({ wait: Duration.millis(ms), cost, grantedAt, level: tokens + 0 }))
    }
  }
  return Either.left("{1, wait_ms, cost, granted_at, level} or {0, retry_ms}")
}

/**
 * @internal Takes `cost` tokens if the tokens left would be at least -(rate × maxWait): the bucket may
 * go into debt, and the caller waits until the debt is paid. KEYS[1] the bucket; ARGV[1] its shape,
 * ARGV[2] the cost (whole tokens), ARGV[3] maxWait (whole ms). Returns {1, wait_ms, cost, now µs, level}
 * if granted (wait_ms at most maxWait; level the tokens left, negative in debt, as a %.17g string: with
 * now, the reservation's place in the queue, which CANCEL reads), {0, retry_ms} if refused (nothing taken;
 * retry_ms until the same reservation would be granted, -1 when cost > capacity). Not batched: one call
 * per reservation.
 */
export const RESERVE = define({
  name: "TokenBucket.reserve",
  keys: 1,
  lua: `${FUNCTIONS}local cost = tonumber(ARGV[2])
local granted, ms, _, tokens = take(KEYS[1], shape(ARGV[1]), cost, tonumber(ARGV[3]))
if granted == 0 then return {0, ms} end
return {1, ms, cost, now, string.format('%.17g', tokens)}
`,
  twin: (db, keys, argv) => {
    const cost = Number(argv[1])
    const [granted, ms, , tokens] = take(db, keys[0]!, shapeOf(argv[0]!), cost, Number(argv[2]))
    // String() round-trips a double exactly, as %.17g does in the Lua.
    return granted === 0 ? [0, ms] : [1, ms, cost, db.now, String(tokens)]
  },
  decode: reservation
})

/**
 * @internal Gives a granted reservation back if its turn is still the end of the queue, so that no turn is
 * handed out twice (docs/token-bucket.md, "Giving a turn back", has the proof). KEYS[1] the bucket; ARGV[1]
 * its shape, ARGV[2] the reservation's cost, ARGV[3] its granted_at (µs), ARGV[4] its level (as RESERVE
 * replied them). Returns 1 if reclaimed (the level gains `cost`, never beyond capacity, which moves the
 * end back onto the turn before it), else 0 (nothing written: the turn lapses).
 *
 * The end of the queue (GCRA's theoretical arrival time) is ts − tokens × period / k, a function of the
 * state alone, and the reservation's turn is that of the state it stored. `past` is their distance in
 * tokens, where the doubles are small (in µs they are rounded to the epoch's ulp, a quarter of a µs, more
 * than a token's time at fast rates): a reservation of cost ≥ 1 still held after it puts the end a whole
 * token later, and its own give-back its cost earlier, so half a token tells them apart whatever the
 * rounding of the stores in between.
 */
export const CANCEL = define({
  name: "TokenBucket.cancel",
  keys: 1,
  lua: `${FUNCTIONS}local b = shape(ARGV[1])
local state = redis.call('GET', KEYS[1])
if not state then return 0 end
local sp = string.find(state, ' ', 1, true)
local past = tonumber(ARGV[4]) - tonumber(string.sub(state, 1, sp - 1))
  + (tonumber(string.sub(state, sp + 1)) - tonumber(ARGV[3])) * b.k / b.period
if past < -0.5 or past > 0.5 then return 0 end
local tokens = level(KEYS[1], b) + tonumber(ARGV[2])
if tokens > b.capacity then tokens = b.capacity end
store(KEYS[1], b, tokens)
return 1
`,
  twin: (db, keys, argv) => {
    const b = shapeOf(argv[0]!)
    const state = db.get(keys[0]!)
    if (state === null) return 0
    const sp = state.indexOf(" ")
    const past = Number(argv[3]) - Number(state.slice(0, sp)) +
      (Number(state.slice(sp + 1)) - Number(argv[2])) * b.k / b.period
    if (past < -0.5 || past > 0.5) return 0
    let tokens = levelOf(db, keys[0]!, b) + Number(argv[1])
    if (tokens > b.capacity) tokens = b.capacity
    store(db, keys[0]!, b, tokens)
    return 1
  },
  decode: flag
})

/**
 * @internal Gives `cost` tokens back, paying any debt first, capped at capacity. KEYS[1] the bucket;
 * ARGV[1] its shape, ARGV[2] the cost (whole tokens). Returns the whole tokens the bucket holds after,
 * 0 while it is still in debt.
 */
export const REFUND = define({
  name: "TokenBucket.refund",
  keys: 1,
  lua: `${FUNCTIONS}local b = shape(ARGV[1])
local tokens = level(KEYS[1], b) + tonumber(ARGV[2])
if tokens > b.capacity then tokens = b.capacity end
store(KEYS[1], b, tokens)
return math.max(0, math.floor(tokens))
`,
  twin: (db, keys, argv) => {
    const b = shapeOf(argv[0]!)
    let tokens = levelOf(db, keys[0]!, b) + Number(argv[1])
    if (tokens > b.capacity) tokens = b.capacity
    store(db, keys[0]!, b, tokens)
    return Math.max(0, Math.floor(tokens))
  },
  decode: limiter.count
})

/**
 * @internal Reads the level without writing. KEYS[1] the bucket; ARGV[1] its shape. Returns
 * floor(tokens), 0 while the bucket is in debt.
 */
export const PEEK = define({
  name: "TokenBucket.peek",
  keys: 1,
  readOnly: true,
  lua: `${FUNCTIONS}return math.max(0, math.floor(level(KEYS[1], shape(ARGV[1]))))
`,
  twin: (db, keys, argv) => Math.max(0, Math.floor(levelOf(db, keys[0]!, shapeOf(argv[0]!)))),
  decode: limiter.count
})

/**
 * A bucket's policy: q = capacity, w = the time to refill it from empty; a client that spends at most q in
 * every w is never denied. After an allowed request, the time until the bucket is full again:
 * (capacity - remaining) tokens, rounded up to the µs (`remaining` is the floor of the fractional level, so
 * it is never early).
 */
const describe = (capacity: number, rate: Rate.Rate) => {
  const period = BigInt(rate.periodMicros)
  const tokens = BigInt(rate.tokens)
  const refilling = (count: number) => Duration.micros((BigInt(Math.max(0, count)) * period + tokens - 1n) / tokens)
  return {
    quota: capacity,
    window: refilling(capacity),
    resetAfter: (allowed: { readonly remaining: number }) => refilling(capacity - allowed.remaining)
  }
}

class BucketImpl<Name extends Redis.KeyName> extends limiter.Limiter<Name, TokenBucket.Entity>
  implements TokenBucket.TokenBucket<Name>
{
  readonly [TypeId]: TokenBucket.TypeId = TypeId
  constructor(namespace: string, readonly capacity: number, readonly rate: Rate.Rate) {
    // The scripts take the bucket as "<capacity> <tokens per period> <period µs>".
    super(
      KIND,
      entity,
      namespace,
      `${capacity} ${rate.tokens} ${rate.periodMicros}`,
      { acquire: ACQUIRE, peek: PEEK },
      describe(capacity, rate)
    )
    Object.freeze(this)
  }

  /** Reservations' telemetry: a `TokenBucket.reserve` decision (throttle and metered reserve through it). */
  private readonly reserving = new telemetry.Decisions(KIND, [{ kind: KIND, policy: this.namespace }], "reserve")

  readonly reserve = (
    name: Name,
    cost: number,
    maxWait: Duration.DurationInput
  ): Effect.Effect<
    TokenBucket.Reservation,
    Redis.RedisError | Redis.InvalidInput,
    TokenBucket.Requirements<"write">
  > => {
    const ms = waitMillis(maxWait, "maxWait")
    return typeof ms === "string"
      ? Effect.fail(new core.InvalidInput({ operation: `${this.label}.reserve`, argument: "maxWait", message: ms }))
      : telemetry.decide(this.reserving, cost, this.spend("reserve", RESERVE, name, cost, [String(ms)]))
  }

  readonly cancel = (
    name: Name,
    reservation: TokenBucket.Granted
  ): Effect.Effect<boolean, Redis.RedisError | Redis.InvalidInput, TokenBucket.Requirements<"write">> => {
    if (!isGranted(reservation)) {
      return Effect.fail(
        new core.InvalidInput({
          operation: `${this.label}.cancel`,
          argument: "reservation",
          message: `reservation must be a Granted reservation as reserve made it, got ${show(reservation)}`
        })
      )
    }
    const { cost, grantedAt, level } = reservation
    return this.spend("cancel", CANCEL, name, cost, [String(grantedAt), String(level)])
  }

  readonly refund = (
    name: Name,
    cost: number
  ): Effect.Effect<number, Redis.RedisError | Redis.InvalidInput, TokenBucket.Requirements<"write">> =>
    this.spend("refund", REFUND, name, cost)

  readonly metered = <A, E, R>(
    name: Name,
    options: TokenBucket.MeteredOptions,
    f: (settle: TokenBucket.Settle) => Effect.Effect<A, E, R>
  ): Effect.Effect<
    A,
    E | TokenBucket.RateLimited | Redis.RedisError | Redis.InvalidInput,
    R | TokenBucket.Requirements<"write">
  > => metered(this, name, options, f)

  override toString() {
    return `${this.label}: capacity ${this.capacity}, ${String(this.rate)}`
  }
}

/** A Granted as reserve makes it: a whole cost, a server time in whole µs, a finite level. */
const isGranted = (u: unknown): u is TokenBucket.Granted => {
  if (typeof u !== "object" || u === null) return false
  const { _tag, cost, grantedAt, level } = u as Partial<Record<string, unknown>>
  return _tag === "Granted" && isInt(cost) && cost >= 0 && isInt(grantedAt) && grantedAt >= 0 &&
    typeof level === "number" && Number.isFinite(level)
}

/** @internal The longest wait a reservation may take, throttle's default: 10^11 ms. */
export const MAX_WAIT = Duration.micros(MAX_MICROS)

/**
 * @internal TokenBucket.throttle: reserves, sleeps the wait on Effect's Clock, runs `effect`. The
 * reservation is made uninterruptibly, so that one the caller gave up on while it was in flight is
 * still known and given back; interrupted before `effect` starts, it cancels the reservation, which
 * reclaims its tokens only if its turn is still the end of the queue (a failed cancel is lost: the
 * tokens come back with the refill). Refused, it fails with `refused(retryAfter)`.
 */
export const throttle = <Name extends Redis.KeyName, A, E, R, L>(
  effect: Effect.Effect<A, E, R>,
  bucket: TokenBucket.TokenBucket<Name>,
  name: Name,
  options: TokenBucket.ThrottleOptions | undefined,
  refused: (retryAfter: Option.Option<Duration.Duration>) => L
): Effect.Effect<A, E | L | Redis.RedisError | Redis.InvalidInput, R | TokenBucket.Requirements<"write">> => {
  // Only undefined means "the default": a null is bad input, refused by reserve.
  const cost = options?.cost === undefined ? 1 : options.cost
  const reserve = bucket.reserve(name, cost, options?.maxWait === undefined ? MAX_WAIT : options.maxWait)
  return Effect.uninterruptibleMask((restore) =>
    Effect.flatMap(reserve, (reservation): Effect.Effect<A, E | L, R | TokenBucket.Requirements<"write">> => {
      if (reservation._tag === "Refused") return Effect.fail(refused(reservation.retryAfter))
      const waited = restore(Duration.isZero(reservation.wait) ? Effect.void : Effect.sleep(reservation.wait))
      return Effect.zipRight(
        Effect.onInterrupt(waited, () => Effect.ignore(bucket.cancel(name, reservation))),
        restore(effect)
      )
    })
  )
}

/**
 * @internal The errors of metered calls, the public module's classes: set by TokenBucket.ts when it loads (it
 * loads this module, so this one cannot load it back).
 */
let errors: metered_.Errors<TokenBucket.RateLimited, TokenBucket.AlreadySettled> | undefined

/** @internal */
export const useErrors = (made: metered_.Errors<TokenBucket.RateLimited, TokenBucket.AlreadySettled>): void => {
  errors = made
}

/**
 * @internal TokenBucket.metered: reserves `estimate`, waits its turn, runs `f(settle)`, settles the difference
 * with the actual cost in one store call, and gives an unsettled reservation back when `f` fails or is
 * interrupted (./metered.ts).
 */
export const metered = <Name extends Redis.KeyName, A, E, R>(
  bucket: TokenBucket.TokenBucket<Name>,
  name: Name,
  options: TokenBucket.MeteredOptions,
  f: (settle: TokenBucket.Settle) => Effect.Effect<A, E, R>
): Effect.Effect<
  A,
  E | TokenBucket.RateLimited | Redis.RedisError | Redis.InvalidInput,
  R | TokenBucket.Requirements<"write">
> => {
  // Only undefined means "the default": a null is bad input, refused with the estimate's other faults.
  const estimate = typeof options === "object" && options !== null ? options.estimate : undefined
  const maxWait = options?.maxWait === undefined ? MAX_WAIT : options.maxWait
  return metered_.meteredMany(
    [bucket as metered_.Metered<Name>],
    name,
    [estimate as number],
    maxWait,
    (settleMany) => f((actual) => Effect.map(settleMany([actual]), (given) => given[0]!)),
    errors!
  )
}

const MAX_FILL_MICROS = 1e17

/** @internal */
export const make = <Name extends Redis.KeyName>(
  namespace: string,
  capacity: number,
  rate: Rate.Rate
): TokenBucket.TokenBucket<Name> => {
  key.validateNamespace(KIND, namespace)
  const wrong = notCount("capacity", capacity, 0)
  if (wrong !== undefined) throw new RangeError(`wakuwaku: TokenBucket(${namespace}) ${wrong}`)
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

/** `N/DURATION`, such as `1/3s` or `10/1m`; `1/s` is one per second. */
const parseRefill = (text: string): { readonly tokens: number; readonly period: Duration.Duration } | undefined => {
  const refill = /^\s*(\d+)\s*\/\s*(.+)$/.exec(text)
  const tokens = refill?.[1] === undefined ? NaN : Number(refill[1])
  const periodText = refill?.[2]?.trim() ?? ""
  const period = parseText(/^[a-z]+$/i.test(periodText) ? `1${periodText}` : periodText)
  return Number.isSafeInteger(tokens) && tokens >= 1 && period !== undefined && Duration.toMillis(period) > 0
    ? { tokens, period }
    : undefined
}

/** The command line's `--algorithm token-bucket`. */
limiter.registerAlgorithm<{
  readonly capacity: number
  readonly refill: { readonly tokens: number; readonly period: Duration.Duration }
}>({
  name: "token-bucket",
  title: "token bucket",
  example: "--capacity 10 --refill 1/s",
  flags: {
    capacity: { ...limiter.values.count, value: "N", env: "WAKUWAKU_CAPACITY", default: "20", help: "the burst" },
    refill: {
      value: "N/DURATION",
      env: "WAKUWAKU_REFILL",
      default: "1/3s",
      help: "N tokens back every DURATION",
      expected: "expected N/DURATION with N at least 1, such as 1/3s or 10/1m",
      parse: parseRefill
    }
  },
  make: (namespace, { capacity, refill }) => make<string>(namespace, capacity, Rate.make(refill.tokens, refill.period)),
  summary: ({ capacity, refill }) => `burst ${capacity}, ${refill.tokens} per ${Duration.format(refill.period)}`,
  burst: ({ capacity }) => capacity
})
