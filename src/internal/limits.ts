/**
 * @internal Several limiters decided as one, all or nothing: a request that any of them denies spends from
 * none. Token buckets and fixed windows mix freely; every one is asked for the same name and cost.
 *
 * - **One script**: {@link ACQUIRE} reads `TIME` once, checks every limiter with the arithmetic of its own
 *   acquire, and then either takes from every one (each by its own script's `take`) or from none. On one
 *   Redis, and on a Cluster when the keys share a hash slot, that is atomic: nobody sees a limiter spent
 *   and another not.
 * - **A Cluster, keys in several slots**: one script cannot touch them (`CROSSSLOT`). The limiters are
 *   decided per slot, all slots at once, each slot's group atomically; if any group denies, the groups
 *   that allowed are refunded ({@link REFUND}). Between a group's spend and its refund (one round trip),
 *   a concurrent request sees that group's limiters spent: it may be denied, or told a lower `remaining`,
 *   where the final state would have allowed it. It is never allowed beyond any limiter's own limit, and
 *   when the refunds have landed, each limiter holds what it would hold had the request never come (a
 *   bucket's refill meanwhile included; a window that ended meanwhile has nothing to give back). A refund
 *   that fails (the store is down) is lost: those units come back with the refill or the window's end.
 *   The first cross-slot call on a cluster learns it is one from its `CROSSSLOT` (which spent nothing);
 *   later ones split at once.
 */
import keySlot from "cluster-key-slot"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import * as Admission_ from "../Admission.js"
import type * as Capability from "../Capability.js"
import * as Redis from "../Redis.js"
import * as fixedWindow from "./fixedWindow.js"
import type * as limiter from "./limiter.js"
import { NOW_US } from "./lua.js"
import * as access from "./redis.js"
import { defineOver } from "./script.js"
import * as tokenBucket from "./tokenBucket.js"

const { Allowed, Denied } = Admission_.Admission

/** @internal A limiter as the group sees it: a `TokenBucket` or a `FixedWindow` keyed by strings. */
export type AnyLimiter = limiter.Limiter<string, Capability.AnyEntity>

/**
 * The two families' functions, each in a block of its own (both define `take`), after one `TIME`. Each
 * item's ARGV, its spec, is its kind, `T` (a token bucket) or `W` (a fixed window), a space, and the
 * parameters its own scripts take.
 */
const FUNCTIONS = `${NOW_US}local tb = {}
do
${tokenBucket.FUNCTIONS_AT_NOW}tb.shape, tb.level, tb.store, tb.take = shape, level, store, take
end
local fw = {}
do
${fixedWindow.FUNCTIONS_AT_NOW}fw.window, fw.used, fw.take = window, used, take
end
`

interface Spec {
  readonly kind: "T" | "W"
  readonly params: string
}

const specOf = (s: string): Spec => ({ kind: s[0] === "T" ? "T" : "W", params: s.slice(2) })

/**
 * Whether limiter `i` alone would allow `cost` now, by the condition of its own acquire (a reservation
 * that may not wait; a window's count within its limit), and its parameters.
 */
const FITS = `local function fits(i, cost)
  local spec = ARGV[i + 1]
  local params = string.sub(spec, 3)
  if string.sub(spec, 1, 1) == 'T' then
    local b = tb.shape(params)
    return not (cost > b.capacity) and tb.level(KEYS[i], b) - cost >= 0, b
  end
  local w = fw.window(params)
  local remaining = math.max(0, w.limit - fw.used(KEYS[i], now - math.fmod(now, w.size)))
  return not (cost > w.limit) and not (cost > remaining), w
end
`

/**
 * @internal Decides several limiters as one: takes `cost` from every one if every one allows it, else from
 * none. KEYS one per limiter; ARGV[1] the cost (whole units), then one spec per limiter ("T <capacity>
 * <tokens per period> <period µs>" or "W <limit> <window µs>"). Returns {all, then per limiter allowed,
 * ms, remaining, start}: all 1 when every one allowed and each was spent from (allowed 1, remaining left
 * after); else all 0 and nothing spent: a limiter that denies says so as its own acquire does (allowed
 * 0, ms until it would allow, -1 never; a bucket stores its refilled level, as a denial does), one that
 * would allow says allowed 1, ms 0, remaining what it holds now. start is a fixed window's window (µs of
 * server time), 0 for a bucket: what {@link REFUND} gives back to.
 */
export const ACQUIRE = defineOver({
  name: "Limits.acquire",
  keys: 1,
  shared: 1,
  lua: `${FUNCTIONS}${FITS}local cost = tonumber(ARGV[1])
local found, all = {}, 1
for i = 1, #KEYS do
  local ok, params = fits(i, cost)
  found[i] = {ok, params}
  if not ok then all = 0 end
end
local reply = {all}
for i = 1, #KEYS do
  local ok, params = found[i][1], found[i][2]
  local bucket = string.sub(ARGV[i + 1], 1, 1) == 'T'
  local allowed, ms, remaining
  if all == 1 or not ok then
    if bucket then
      allowed, ms, remaining = tb.take(KEYS[i], params, cost, 0)
    else
      allowed, ms, remaining = fw.take(KEYS[i], params, cost)
    end
  elseif bucket then
    allowed, ms, remaining = 1, 0, math.floor(tb.level(KEYS[i], params))
  else
    allowed, ms = 1, 0
    remaining = math.max(0, params.limit - fw.used(KEYS[i], now - math.fmod(now, params.size)))
  end
  local start = 0
  if not bucket then start = now - math.fmod(now, params.size) end
  table.insert(reply, allowed)
  table.insert(reply, ms)
  table.insert(reply, remaining)
  table.insert(reply, start)
end
return reply
`,
  twin: (db, keys, argv) => {
    const cost = Number(argv[0])
    const specs = keys.map((_, i) => specOf(argv[i + 1]!))
    const found = specs.map((spec, i) => {
      if (spec.kind === "T") {
        const b = tokenBucket.twin.shape(spec.params)
        return { ok: !(cost > b.capacity) && tokenBucket.twin.level(db, keys[i]!, b) - cost >= 0, b, w: undefined }
      }
      const w = fixedWindow.twin.window(spec.params)
      const remaining = Math.max(0, w.limit - fixedWindow.twin.used(db, keys[i]!, db.now - db.now % w.size))
      return { ok: !(cost > w.limit) && !(cost > remaining), b: undefined, w }
    })
    const all = found.every((f) => f.ok) ? 1 : 0
    const reply: Array<number> = [all]
    found.forEach(({ b, ok, w }, i) => {
      const key = keys[i]!
      let item: ReadonlyArray<number>
      if (all === 1 || !ok) {
        item = b !== undefined
          ? tokenBucket.twin.take(db, key, b, cost, 0)
          : fixedWindow.twin.take(db, key, w!, cost) as ReadonlyArray<number>
      } else {
        item = b !== undefined
          ? [1, 0, Math.floor(tokenBucket.twin.level(db, key, b))]
          : [1, 0, Math.max(0, w!.limit - fixedWindow.twin.used(db, key, db.now - db.now % w!.size))]
      }
      reply.push(...item, w === undefined ? 0 : db.now - db.now % w.size)
    })
    return reply
  },
  decode: (reply) => decodeOutcome(reply)
})

/**
 * @internal Gives `cost` back to limiters that {@link ACQUIRE} spent from (the allowed groups of a decision
 * that another slot's group denied). KEYS one per limiter; ARGV[1] the cost, then per limiter its spec and
 * the `start` ACQUIRE replied. A bucket takes it back as `TokenBucket.refund` does (capped at capacity); a
 * window only while it is the window spent from (its count less the cost, never below 0; a window that has
 * ended has nothing to give back). Returns the number of limiters.
 */
export const REFUND = defineOver({
  name: "Limits.refund",
  keys: 1,
  shared: 1,
  lua: `${FUNCTIONS}local cost = tonumber(ARGV[1])
for i = 1, #KEYS do
  local spec = ARGV[2 * i]
  local params = string.sub(spec, 3)
  if string.sub(spec, 1, 1) == 'T' then
    local b = tb.shape(params)
    local tokens = tb.level(KEYS[i], b) + cost
    if tokens > b.capacity then tokens = b.capacity end
    tb.store(KEYS[i], b, tokens)
  else
    local w = fw.window(params)
    local start = tonumber(ARGV[2 * i + 1])
    local count = fw.used(KEYS[i], start)
    local left = math.ceil((start + w.size - now) / 1000)
    if count > 0 and left > 0 then
      count = math.max(0, count - cost)
      if count == 0 then
        redis.call('DEL', KEYS[i])
      else
        redis.call('SET', KEYS[i], string.format('%d', start) .. ' ' .. string.format('%d', count), 'PX',
          string.format('%d', left))
      end
    end
  end
end
return #KEYS
`,
  twin: (db, keys, argv) => {
    const cost = Number(argv[0])
    keys.forEach((key, i) => {
      const spec = specOf(argv[2 * i + 1]!)
      if (spec.kind === "T") {
        const b = tokenBucket.twin.shape(spec.params)
        let tokens = tokenBucket.twin.level(db, key, b) + cost
        if (tokens > b.capacity) tokens = b.capacity
        tokenBucket.twin.store(db, key, b, tokens)
        return
      }
      const w = fixedWindow.twin.window(spec.params)
      const start = Number(argv[2 * i + 2])
      let count = fixedWindow.twin.used(db, key, start)
      const left = Math.ceil((start + w.size - db.now) / 1000)
      if (count > 0 && left > 0) {
        count = Math.max(0, count - cost)
        if (count === 0) db.del(key)
        else db.set(key, `${start} ${count}`, { px: left })
      }
    })
    return keys.length
  },
  decode: (reply) => typeof reply === "number" ? Either.right(reply) : Either.left("the number of limiters")
})

/** @internal What a group decided: every limiter's own verdict, and whether the request was spent from all. */
export interface Outcome {
  /** Every limiter allowed, and each was spent from; otherwise none was. */
  readonly allowed: boolean
  /**
   * Each limiter's own verdict, in order: `Denied` with its retry (None: never), or `Allowed` with what it
   * has left (after the spend when `allowed`; what it holds now, nothing spent, otherwise).
   */
  readonly admissions: ReadonlyArray<Admission_.Admission>
  /** Each fixed window's window start (server µs), 0 for a bucket: what a refund gives back to. */
  readonly starts: ReadonlyArray<number>
}

const isInt = (u: unknown): u is number => typeof u === "number" && Number.isSafeInteger(u)

const decodeOutcome = (reply: unknown): Either.Either<Outcome, string> => {
  const expected = "{all, then allowed, ms, remaining, start per limiter}"
  if (!Array.isArray(reply) || reply.length < 5 || (reply.length - 1) % 4 !== 0 || !reply.every(isInt)) {
    return Either.left(expected)
  }
  const values = reply as ReadonlyArray<number>
  const admissions: Array<Admission_.Admission> = []
  const starts: Array<number> = []
  for (let i = 1; i < values.length; i += 4) {
    const [allowed, ms, remaining, start] = [values[i]!, values[i + 1]!, values[i + 2]!, values[i + 3]!]
    admissions.push(
      allowed === 1
        ? Allowed({ remaining })
        : Denied({ retryAfter: ms < 0 ? Option.none() : Option.some(Duration.millis(ms)) })
    )
    starts.push(start)
  }
  return Either.right({ allowed: values[0] === 1, admissions, starts })
}

/** Services (clients) found to be a Cluster by a `CROSSSLOT` reply: their cross-slot groups split at once. */
const clusters = new WeakSet<Redis.Service>()

const isCrossSlot = (error: Redis.RedisError): boolean => {
  const cause = error.cause as { readonly message?: unknown } | undefined
  return typeof cause?.message === "string" && cause.message.startsWith("CROSSSLOT")
}

/** @internal The spec of a limiter, as {@link ACQUIRE} takes it. */
export const specOfLimiter = (limiter: AnyLimiter): string =>
  `${limiter.kind === "TokenBucket" ? "T" : "W"} ${limiter.shape}`

/** @internal Why a group cannot be decided as one (a `TypeError` now), or undefined: no two limiters share a key. */
export const checkGroup = (limiters: ReadonlyArray<AnyLimiter>): string | undefined => {
  const seen = new Set<string>()
  for (const limiter of limiters) {
    if (seen.has(limiter.label)) {
      return `wakuwaku: ${limiter.label} is listed twice among the limits of one request (they would share its keys)`
    }
    seen.add(limiter.label)
  }
  return undefined
}

/**
 * @internal Asks every limiter for `cost` on `name`, all or nothing (see the module doc). Fails with
 * `InvalidInput` for a cost that is not a non-negative safe integer or a name the limiters cannot key,
 * before anything is sent; with `RedisError` when the store fails (any group that had spent is refunded
 * first). Needs the right to write every limiter's entity.
 */
export const acquire = (
  limiters: ReadonlyArray<AnyLimiter>,
  name: string,
  cost: number
): Effect.Effect<Outcome, Redis.RedisError | Redis.InvalidInput, Redis.Redis> => {
  const operation = `${limiters.map((l) => l.label).join(" + ")}.acquire`
  if (!isInt(cost) || cost < 0) {
    return Effect.fail(
      new Redis.InvalidInput({
        operation,
        argument: "cost",
        message: `cost must be a non-negative safe integer, got ${String(cost)}`
      })
    )
  }
  const keys: Array<string> = []
  for (const limiter of limiters) {
    const key = limiter.keyOf("acquire", name)
    if (typeof key !== "string") return Effect.fail(key)
    keys.push(key)
  }
  const specs = limiters.map(specOfLimiter)
  const units = String(cost)
  const decide = (redis: Redis.Service): Effect.Effect<Outcome, Redis.RedisError> =>
    clusters.has(redis)
      ? split(redis, keys, specs, units)
      : Effect.catchIf(
        redis.script(ACQUIRE, keys, [units, ...specs]),
        isCrossSlot,
        () =>
          Effect.suspend(() => {
            clusters.add(redis)
            return split(redis, keys, specs, units)
          })
      )
  // The right to write each limiter's entity, checked before the call.
  const entities = [...new Map(limiters.map((l) => [l.entity.kind, l.entity])).values()]
  return withWrites(entities, decide)
}

const withWrites = <A, E>(
  entities: ReadonlyArray<Capability.AnyEntity>,
  f: (redis: Redis.Service) => Effect.Effect<A, E>
): Effect.Effect<A, E, Redis.Redis> => {
  const [first, ...rest] = entities
  // Inside `access.write` the context holds the service: the inner checks need nothing more.
  const inner = rest.length === 0 ? f : () => withWrites(rest, f) as Effect.Effect<A, E>
  return access.write(first!, inner) as Effect.Effect<A, E, Redis.Redis>
}

/**
 * One {@link ACQUIRE} per hash slot, all at once; if any group denied or failed, the groups that spent are
 * refunded before the outcome (or the failure) is returned. Uninterruptible, so that a spend is never left
 * without its refund by a client that went away (it waits at most the command timeout).
 */
const split = (
  redis: Redis.Service,
  keys: ReadonlyArray<string>,
  specs: ReadonlyArray<string>,
  units: string
): Effect.Effect<Outcome, Redis.RedisError> => {
  const bySlot = new Map<number, Array<number>>()
  keys.forEach((key, i) => {
    const slot = keySlot(key)
    const group = bySlot.get(slot)
    if (group === undefined) bySlot.set(slot, [i])
    else group.push(i)
  })
  const groups = [...bySlot.values()]
  if (groups.length === 1) return redis.script(ACQUIRE, keys, [units, ...specs])
  return Effect.uninterruptible(
    Effect.flatMap(
      Effect.forEach(
        groups,
        (group) =>
          Effect.either(redis.script(ACQUIRE, group.map((i) => keys[i]!), [units, ...group.map((i) => specs[i]!)])),
        { concurrency: "unbounded" }
      ),
      (results) => {
        const spent = groups.flatMap((group, g) => {
          const result = results[g]!
          return Either.isRight(result) && result.right.allowed ? [{ group, outcome: result.right }] : []
        })
        if (spent.length === groups.length) return Effect.succeed(merge(groups, spent.map((s) => s.outcome), false))
        const refunds = spent.map(({ group, outcome }) =>
          Effect.ignore(
            redis.script(
              REFUND,
              group.map((i) => keys[i]!),
              [units, ...group.flatMap((i, j) => [specs[i]!, String(outcome.starts[j]!)])]
            )
          )
        )
        const failed = results.find(Either.isLeft)
        return Effect.zipRight(
          Effect.all(refunds, { concurrency: "unbounded", discard: true }),
          failed !== undefined
            ? Effect.fail(failed.left)
            : Effect.succeed(
              merge(
                groups,
                results.map((r) => (r as Either.Right<Redis.RedisError, Outcome>).right),
                true,
                Number(units)
              )
            )
        )
      }
    )
  )
}

/** The groups' outcomes as one, in the limiters' order; `refunded`: the allowed groups gave `cost` back. */
const merge = (
  groups: ReadonlyArray<ReadonlyArray<number>>,
  outcomes: ReadonlyArray<Outcome>,
  refunded: boolean,
  cost = 0
): Outcome => {
  const size = groups.reduce((n, group) => n + group.length, 0)
  const admissions = new Array<Admission_.Admission>(size)
  const starts = new Array<number>(size)
  groups.forEach((group, g) => {
    const outcome = outcomes[g]!
    group.forEach((i, j) => {
      const admission = outcome.admissions[j]!
      admissions[i] = refunded && outcome.allowed && admission._tag === "Allowed"
        ? Allowed({ remaining: admission.remaining + cost })
        : admission
      starts[i] = outcome.starts[j]!
    })
  })
  return { allowed: !refunded && outcomes.every((o) => o.allowed), admissions, starts }
}
