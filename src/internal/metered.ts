/**
 * @internal Budgets settled with the actual cost: `TokenBucket.metered` (one bucket) and `Limits.metered` (several
 * buckets as one, all or nothing). A call reserves its estimate as `throttle` does, waits its turn, runs, and
 * settles the difference with the actual cost in one store call: more is taken at once (into debt, if need
 * be), and what was not used comes back only while the reservation's turn is still the end of the queue, as
 * `cancel` reclaims (docs/token-bucket.md, "Metered calls", has the proof that the start bound holds).
 * A call that fails or is interrupted before it settles gives its reservation back by the same rule; once it has
 * started it keeps its turn, one token, so that every start owns one and the start bound counts it.
 *
 * Not a structure's internals: both `TokenBucket` and `Limits` load it. It knows the buckets through their
 * public interface and their shape only.
 */
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import type * as Exit from "effect/Exit"
import * as Option from "effect/Option"
import * as Redis from "../Redis.js"
import type * as Script from "../Script.js"
import type * as TokenBucket from "../TokenBucket.js"
import { FUNCTIONS, levelOf, retry, type Shape, shapeOf, store, take } from "./bucket.js"
import { MAX_MICROS, waitMillis } from "./duration.js"
import * as access from "./redis.js"
import { define, defineOver } from "./script.js"
import { isCount, isInt, notCount } from "./validate.js"

/** @internal The longest wait of a metered call, its default: 10^11 ms, as `throttle`'s. */
export const MAX_WAIT = Duration.micros(MAX_MICROS)

/** A bucket as this module sees it: its public face, its key and its shape (as its scripts take it). */
export interface Metered<Name extends Redis.KeyName> extends TokenBucket.TokenBucket<Name> {
  readonly label: string
  readonly shape: string
  readonly entity: TokenBucket.Entity
  readonly keyOf: (operation: string, name: Name) => string | Redis.InvalidInput
}

/**
 * Lua: `settle(key, b, estimate, granted_at, held, actual)` settles a reservation of `estimate` tokens, granted
 * at `granted_at` (µs) leaving the level `held`, with its `actual` cost. Above the estimate, it takes the
 * difference at once (the level may go, or go further, into debt), and returns 0. Below it, it gives the
 * difference back (never beyond capacity) only if the reservation's turn is still the end of the queue (the
 * test of CANCEL: the end, ts − tokens × period / k, within half a token of its turn), and returns the tokens
 * given back; otherwise it writes nothing and returns 0 (those tokens lapse). Equal: nothing, 0.
 */
const SETTLE_FUNCTION = `local function settle(key, b, estimate, granted_at, held, actual)
  if actual > estimate then
    store(key, b, level(key, b) - (actual - estimate))
    return 0
  end
  if actual == estimate then return 0 end
  local state = redis.call('GET', key)
  if not state then return 0 end
  local sp = string.find(state, ' ', 1, true)
  local past = held - tonumber(string.sub(state, 1, sp - 1))
    + (tonumber(string.sub(state, sp + 1)) - granted_at) * b.k / b.period
  if past < -0.5 or past > 0.5 then return 0 end
  local tokens = level(key, b) + (estimate - actual)
  if tokens > b.capacity then tokens = b.capacity end
  store(key, b, tokens)
  return estimate - actual
end
`

/** The twin of {@link SETTLE_FUNCTION}. */
const settleTwin = (
  db: Script.Keyspace,
  key: string,
  b: Shape,
  estimate: number,
  grantedAt: number,
  held: number,
  actual: number
): number => {
  if (actual > estimate) {
    store(db, key, b, levelOf(db, key, b) - (actual - estimate))
    return 0
  }
  if (actual === estimate) return 0
  const state = db.get(key)
  if (state === null) return 0
  const sp = state.indexOf(" ")
  const past = held - Number(state.slice(0, sp)) + (Number(state.slice(sp + 1)) - grantedAt) * b.k / b.period
  if (past < -0.5 || past > 0.5) return 0
  let tokens = levelOf(db, key, b) + (estimate - actual)
  if (tokens > b.capacity) tokens = b.capacity
  store(db, key, b, tokens)
  return estimate - actual
}

const returned = (reply: unknown): Either.Either<number, string> =>
  isInt(reply) && reply >= 0 ? Either.right(reply) : Either.left("the tokens given back (≥ 0)")

/**
 * @internal Settles a reservation with its actual cost (see {@link SETTLE_FUNCTION}). KEYS[1] the bucket; ARGV[1]
 * its shape, ARGV[2] the reservation's cost (the estimate), ARGV[3] its granted_at (µs), ARGV[4] its level (as
 * RESERVE replied them), ARGV[5] the actual cost (whole tokens). Returns the tokens given back (0 when more was
 * taken, none was due, or the unused tokens lapsed).
 */
export const SETTLE = define({
  name: "TokenBucket.settle",
  keys: 1,
  lua: `${FUNCTIONS}${SETTLE_FUNCTION}return settle(KEYS[1], shape(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]),
  tonumber(ARGV[4]), tonumber(ARGV[5]))
`,
  twin: (db, keys, argv) =>
    settleTwin(
      db,
      keys[0]!,
      shapeOf(argv[0]!),
      Number(argv[1]),
      Number(argv[2]),
      Number(argv[3]),
      Number(argv[4])
    ),
  decode: returned
})

/** What {@link RESERVE_ALL} replied. */
type Reserved =
  | { readonly granted: false; readonly retry: number }
  | {
    readonly granted: true
    readonly grantedAt: number
    readonly waits: ReadonlyArray<number>
    readonly levels: ReadonlyArray<number>
  }

/** A reservation of one call, on one bucket or several. */
type Reservation =
  | { readonly granted: false; readonly retryAfter: Option.Option<Duration.Duration> }
  | {
    readonly granted: true
    readonly wait: Duration.Duration
    readonly grantedAt: number
    readonly levels: ReadonlyArray<number>
  }

const ofOne = (r: TokenBucket.Reservation): Reservation =>
  r._tag === "Refused"
    ? { granted: false, retryAfter: r.retryAfter }
    : { granted: true, wait: r.wait, grantedAt: r.grantedAt, levels: [r.level] }

/**
 * @internal Reserves from several buckets as one, all or nothing: each takes its cost if the tokens it would
 * have left are at least −(its rate × maxWait), and if any would not, none takes anything and nothing is
 * written. KEYS one per bucket; ARGV[1] maxWait (whole ms), then per bucket its shape and its cost (whole
 * tokens). Returns {1, now µs, then per bucket wait_ms, level} if granted (level as a %.17g string: with now,
 * each reservation's place in its queue), {0, retry_ms} if refused (retry_ms the longest of the refusing
 * buckets' waits until the same reservation would be granted, -1 when any cost is above its capacity).
 */
export const RESERVE_ALL = defineOver<Reserved>({
  name: "Limits.reserve",
  keys: 1,
  shared: 1,
  lua: `${FUNCTIONS}local max_wait = tonumber(ARGV[1])
local found, refused, later = {}, false, 0
for i = 1, #KEYS do
  local b, cost = shape(ARGV[2 * i]), tonumber(ARGV[2 * i + 1])
  found[i] = {b, cost}
  if cost > b.capacity then return {0, -1} end
  local tokens = level(KEYS[i], b)
  local allowance = 0
  if max_wait > 0 then allowance = (max_wait * 1000) * b.k / b.period end
  if (tokens - cost) + allowance < 0 then
    refused = true
    local ms = retry(b, tokens, cost, max_wait, allowance)
    if ms > later then later = ms end
  end
end
if refused then return {0, later} end
local reply = {1, now}
for i = 1, #KEYS do
  local _, ms, _, tokens = take(KEYS[i], found[i][1], found[i][2], max_wait)
  table.insert(reply, ms)
  table.insert(reply, string.format('%.17g', tokens))
end
return reply
`,
  twin: (db, keys, argv) => {
    const maxWait = Number(argv[0])
    const found: Array<[Shape, number]> = []
    let refused = false
    let later = 0
    for (let i = 0; i < keys.length; i++) {
      const b = shapeOf(argv[2 * i + 1]!)
      const cost = Number(argv[2 * i + 2])
      found.push([b, cost])
      if (cost > b.capacity) return [0, -1]
      const tokens = levelOf(db, keys[i]!, b)
      let allowance = 0
      if (maxWait > 0) allowance = (maxWait * 1000) * b.k / b.period
      if ((tokens - cost) + allowance < 0) {
        refused = true
        const ms = retry(b, tokens, cost, maxWait, allowance)
        if (ms > later) later = ms
      }
    }
    if (refused) return [0, later]
    const reply: Array<Script.Reply> = [1, db.now]
    found.forEach(([b, cost], i) => {
      const [, ms, , tokens] = take(db, keys[i]!, b, cost, maxWait)
      // String() round-trips a double exactly, as %.17g does in the Lua.
      reply.push(ms, String(tokens))
    })
    return reply
  },
  decode: (reply): Either.Either<Reserved, string> => {
    if (Array.isArray(reply) && reply.length === 2 && reply[0] === 0 && isInt(reply[1]) && reply[1] >= -1) {
      return Either.right({ granted: false, retry: reply[1] } as const)
    }
    if (Array.isArray(reply) && reply.length >= 4 && reply.length % 2 === 0 && reply[0] === 1 && isInt(reply[1])) {
      const waits: Array<number> = []
      const levels: Array<number> = []
      for (let i = 2; i < reply.length; i += 2) {
        const ms: unknown = reply[i]
        const level = typeof reply[i + 1] === "string" ? Number(reply[i + 1]) : Number.NaN
        if (!isInt(ms) || ms < 0 || !Number.isFinite(level)) break
        waits.push(ms)
        // + 0: the level is a place in the queue, where -0 and 0 are one.
        levels.push(level + 0)
      }
      if (waits.length * 2 === reply.length - 2) {
        return Either.right({ granted: true, grantedAt: reply[1], waits, levels } as const)
      }
    }
    return Either.left("{1, now, then wait_ms and level per bucket} or {0, retry_ms}")
  }
})

/**
 * @internal Settles reservations that {@link RESERVE_ALL} granted together, each by {@link SETTLE_FUNCTION}. KEYS one
 * per bucket; ARGV[1] their granted_at (µs), then per bucket its shape, its estimate, its level (as RESERVE_ALL
 * replied it) and its actual cost. Returns the tokens given back, per bucket.
 */
export const SETTLE_ALL = defineOver<ReadonlyArray<number>>({
  name: "Limits.settle",
  keys: 1,
  shared: 1,
  lua: `${FUNCTIONS}${SETTLE_FUNCTION}local granted_at = tonumber(ARGV[1])
local reply = {}
for i = 1, #KEYS do
  local j = 4 * i - 2
  reply[i] = settle(KEYS[i], shape(ARGV[j]), tonumber(ARGV[j + 1]), granted_at, tonumber(ARGV[j + 2]),
    tonumber(ARGV[j + 3]))
end
return reply
`,
  twin: (db, keys, argv) => {
    const grantedAt = Number(argv[0])
    return keys.map((key, i) => {
      const j = 4 * i + 1
      return settleTwin(
        db,
        key,
        shapeOf(argv[j]!),
        Number(argv[j + 1]),
        grantedAt,
        Number(argv[j + 2]),
        Number(argv[j + 3])
      )
    })
  },
  decode: (reply) =>
    Array.isArray(reply) && reply.length > 0 && reply.every((n) => isInt(n) && n >= 0)
      ? Either.right(reply as ReadonlyArray<number>)
      : Either.left("the tokens given back, per bucket")
})

/** The errors a metered call makes of a refusal and of a second settle (the public modules' classes). */
export interface Errors<L, T> {
  readonly refused: (retryAfter: Option.Option<Duration.Duration>) => L
  readonly twice: (first: ReadonlyArray<number>, second: ReadonlyArray<number>) => T
}

/** A checked cost: a non-negative safe integer within `capacity` (when given), else the message. */
const costProblem = (what: string, cost: unknown, capacity?: number): string | undefined =>
  !isCount(cost, 0)
    ? notCount(what, cost, 0)
    : capacity !== undefined && cost > capacity
    ? `${what} ${cost} is above the bucket's capacity ${capacity}: it could never be granted (split the call)`
    : undefined

/**
 * One call's reservations (one per bucket) and what became of them: `settled` is the actual costs once
 * settled (or released: the whole estimate given back), undefined until then.
 */
interface Call<Name extends Redis.KeyName> {
  readonly buckets: ReadonlyArray<Metered<Name>>
  readonly keys: ReadonlyArray<string>
  readonly estimates: ReadonlyArray<number>
  readonly grantedAt: number
  readonly levels: ReadonlyArray<number>
  settled: ReadonlyArray<number> | undefined
  /** Whether the body has started: the call then keeps its turn (see {@link kept}). */
  started: boolean
}

const operationOf = (buckets: ReadonlyArray<Metered<never>>, verb: string) =>
  `${buckets.map((b) => b.label).join(" + ")}.${verb}`

const invalid = (buckets: ReadonlyArray<Metered<never>>, verb: string, argument: string, message: string) =>
  new Redis.InvalidInput({ operation: operationOf(buckets, verb), argument, message })

/**
 * What `call` is charged for `actuals`: once it has started, at least one token of each bucket whose estimate
 * is one or more, its turn. A call that started has used its turn (it made its request), so the turn is never
 * handed out again and every start owns at least one token: the start bound of `throttle` counts it
 * (docs/token-bucket.md, "Why the bound still holds"). Before it starts, everything may go back.
 */
const kept = <Name extends Redis.KeyName>(call: Call<Name>, actuals: ReadonlyArray<number>): ReadonlyArray<number> =>
  call.started ? actuals.map((actual, i) => Math.max(actual, Math.min(1, call.estimates[i]!))) : actuals

/** The tokens each bucket gave back when `call` was settled with `actuals`: one store call (none if no change). */
const settleCall = <Name extends Redis.KeyName>(
  call: Call<Name>,
  actuals: ReadonlyArray<number>
): Effect.Effect<ReadonlyArray<number>, Redis.RedisError, TokenBucket.Requirements<"write">> => {
  if (actuals.every((actual, i) => actual === call.estimates[i])) {
    return Effect.succeed(actuals.map(() => 0))
  }
  const { buckets, estimates, grantedAt, keys, levels } = call
  const entity = buckets[0]!.entity
  if (buckets.length === 1) {
    return Effect.map(
      access.writeScript(entity, SETTLE, keys, [
        buckets[0]!.shape,
        String(estimates[0]),
        String(grantedAt),
        String(levels[0]),
        String(actuals[0])
      ]),
      (n) => [n]
    )
  }
  return access.writeScript(entity, SETTLE_ALL, keys, [
    String(grantedAt),
    ...buckets.flatMap((b, i) => [b.shape, String(estimates[i]), String(levels[i]), String(actuals[i])])
  ])
}

/** What a metered body is handed: settles the call with its actual costs, once. */
export type SettleMany<T> = (
  actuals: ReadonlyArray<number>
) => Effect.Effect<ReadonlyArray<number>, T | Redis.RedisError | Redis.InvalidInput>

/**
 * @internal Metered over `buckets` (one or more, one entity): checks the input (nothing sent on bad input),
 * reserves every estimate in one call (all or nothing), sleeps the longest wait on Effect's Clock, runs
 * `f(settle)`, and releases what was not settled when the body ends. The reservation is made uninterruptibly,
 * and released by `onExit` (uninterruptible): interrupted or failed before it settled, the call gives its whole
 * reservation back (reclaimed only while its turn is the end of each queue; all but its turn once `f` started).
 * `settle` is uninterruptible and marks the call settled before it is sent, so an interrupt during it lets it
 * land, and nothing is given back twice. A body that succeeds without settling keeps its estimates as the actual costs.
 */
export const meteredMany = <Name extends Redis.KeyName, A, E, R, L, T>(
  buckets: ReadonlyArray<Metered<Name>>,
  name: Name,
  estimates: ReadonlyArray<number>,
  maxWait: Duration.DurationInput,
  f: (settle: SettleMany<T>) => Effect.Effect<A, E, R>,
  errors: Errors<L, T>
): Effect.Effect<A, E | L | Redis.RedisError | Redis.InvalidInput, R | TokenBucket.Requirements<"write">> =>
  Effect.suspend((): Effect.Effect<
    A,
    E | L | Redis.RedisError | Redis.InvalidInput,
    R | TokenBucket.Requirements<"write">
  > => {
    const verb = "metered"
    if (!Array.isArray(buckets as unknown) || buckets.length === 0) {
      return Effect.fail(
        new Redis.InvalidInput({ operation: "Limits.metered", argument: "limits", message: "no bucket to meter" })
      )
    }
    if (!Array.isArray(estimates as unknown) || estimates.length !== buckets.length) {
      return Effect.fail(
        invalid(buckets, verb, "estimate", `one estimate per bucket (${buckets.length}), got ${String(estimates)}`)
      )
    }
    for (let i = 0; i < buckets.length; i++) {
      const problem = costProblem("estimate", estimates[i], buckets[i]!.capacity)
      if (problem !== undefined) return Effect.fail(invalid(buckets, verb, "estimate", problem))
    }
    const ms = waitMillis(maxWait, "maxWait")
    if (typeof ms === "string") return Effect.fail(invalid(buckets, verb, "maxWait", ms))
    const keys: Array<string> = []
    for (const bucket of buckets) {
      const key = bucket.keyOf(verb, name)
      if (typeof key !== "string") return Effect.fail(key)
      keys.push(key)
    }
    const reserve: Effect.Effect<
      Reservation,
      Redis.RedisError | Redis.InvalidInput,
      TokenBucket.Requirements<"write">
    > = buckets.length === 1
      ? Effect.map(buckets[0]!.reserve(name, estimates[0]!, Duration.millis(ms)), ofOne)
      : Effect.map(
        access.writeScript(buckets[0]!.entity, RESERVE_ALL, keys, [
          String(ms),
          ...buckets.flatMap((b, i) => [b.shape, String(estimates[i])])
        ]),
        (r): Reservation =>
          r.granted
            ? { granted: true, wait: Duration.millis(Math.max(...r.waits)), grantedAt: r.grantedAt, levels: r.levels }
            : { granted: false, retryAfter: r.retry < 0 ? Option.none() : Option.some(Duration.millis(r.retry)) }
      )
    return Effect.flatMap(
      Effect.context<TokenBucket.Requirements<"write">>(),
      (context) =>
        Effect.uninterruptibleMask((restore) =>
          Effect.flatMap(reserve, (reservation): Effect.Effect<A, E | L, R | TokenBucket.Requirements<"write">> => {
            if (!reservation.granted) return Effect.fail(errors.refused(reservation.retryAfter))
            const call: Call<Name> = {
              buckets,
              keys,
              estimates,
              grantedAt: reservation.grantedAt,
              levels: reservation.levels,
              settled: undefined,
              started: false
            }
            const settle: SettleMany<T> = (actuals) =>
              Effect.suspend((): Effect.Effect<ReadonlyArray<number>, T | Redis.RedisError | Redis.InvalidInput> => {
                if (!Array.isArray(actuals as unknown) || actuals.length !== buckets.length) {
                  return Effect.fail(
                    invalid(
                      buckets,
                      "settle",
                      "actual",
                      `one actual cost per bucket (${buckets.length}), got ${String(actuals)}`
                    )
                  )
                }
                for (const actual of actuals) {
                  const problem = costProblem("actual", actual)
                  if (problem !== undefined) return Effect.fail(invalid(buckets, "settle", "actual", problem))
                }
                if (call.settled !== undefined) return Effect.fail(errors.twice(call.settled, actuals))
                // Settled from here on, whatever happens to the call: an interrupt waits for it to land.
                call.settled = [...actuals]
                return Effect.provide(settleCall(call, kept(call, actuals)), context)
              }).pipe(Effect.uninterruptible)
            const body = Effect.zipRight(
              restore(Duration.isZero(reservation.wait) ? Effect.void : Effect.sleep(reservation.wait)),
              restore(Effect.suspend(() => {
                call.started = true
                return f(settle)
              }))
            )
            return Effect.onExit(body, (exit) => release(call, exit, context))
          })
        )
    )
  })

/**
 * When the body ends: a call not settled gives its whole reservation back if the body failed or was
 * interrupted (a store failure here is lost: its turn lapses, its tokens come back with the refill), and keeps
 * its estimates if it succeeded. Either way it is settled after, so a `settle` kept past the body fails.
 */
const release = <Name extends Redis.KeyName>(
  call: Call<Name>,
  exit: Exit.Exit<unknown, unknown>,
  context: Context.Context<TokenBucket.Requirements<"write">>
): Effect.Effect<void> => {
  if (call.settled !== undefined) return Effect.void
  const actuals = exit._tag === "Success" ? call.estimates : call.estimates.map(() => 0)
  call.settled = actuals
  return exit._tag === "Success"
    ? Effect.void
    : Effect.ignore(Effect.provide(settleCall(call, kept(call, actuals)), context))
}
