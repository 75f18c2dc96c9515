/**
 * @internal Several limiters decided as one, all or nothing: a request that any of them denies spends from
 * none. Token buckets and fixed windows mix freely; each is asked for a name and a cost, the same for every
 * one (`Limits.acquire`) or one per limiter (a proxy route's limits, keyed and costed each its own way).
 *
 * - **One script** (`Limits.acquire`, see {@link scripts}) reads `TIME` once, checks every limiter with the
 *   condition of its own acquire, and then either takes from every one (by its own acquire) or from none.
 *   The arithmetic is each structure's own: a structure registers its family ({@link Family}). On one
 *   Redis, and on a Cluster when the keys share a hash slot, that is atomic: nobody sees a limiter spent
 *   and another not.
 * - **A Cluster, keys in several slots**: one script cannot touch them (`CROSSSLOT`). The limiters are
 *   decided per slot, all slots at once, each slot's group atomically; if any group denies, the groups
 *   that allowed are refunded (`Limits.refund`). Between a group's spend and its refund (one round trip),
 *   a concurrent request sees that group's limiters spent: it may be denied, or told a lower `remaining`,
 *   where the final state would have allowed it. It is never allowed beyond any limiter's own limit, and
 *   when the refunds have landed, each limiter holds what it would hold had the request never come (a
 *   bucket's refill meanwhile included; a window that ended meanwhile has nothing to give back). A refund
 *   that fails (the store is down) is lost: those units come back with the refill or the window's end.
 *   The first cross-slot call on a cluster learns it is one from its `CROSSSLOT` (which spent nothing);
 *   later ones split at once.
 * - **Asking again** (`Limits.check`, {@link check}): when each limiter would allow the cost, writing nothing.
 *   Asked after a decision (and its refunds), it tells the denials the store repeats from those made by a
 *   spend refunded since; the HTTP denial memory keeps only the former (./http/denials.ts).
 */
import keySlot from "cluster-key-slot"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import * as Admission_ from "../Admission.js"
import type * as Capability from "../Capability.js"
import type * as Limits_ from "../Limits.js"
import * as Redis from "../Redis.js"
import type * as Script from "../Script.js"
import * as limiter from "./limiter.js"
import { NOW_US } from "./lua.js"
import * as access from "./redis.js"
import { defineOver, parsedOnce } from "./script.js"
import * as shadow from "./shadow.js"
import * as telemetry from "./telemetry.js"
import { isInt, notCount } from "./validate.js"

const { Allowed, Denied } = Admission_.Admission

/** @internal A limiter as the group sees it: a `TokenBucket` or a `FixedWindow` keyed by strings. */
export type AnyLimiter = limiter.Limiter<string, Capability.AnyEntity>

/**
 * @internal A kind of limiter that can be decided in a group: the structure registers it ({@link register}),
 * so that the group knows nothing of any structure's arithmetic.
 *
 * - `lua` runs in a block of its own, after `now` is set (server time, µs) and a table `families` is
 *   declared. It defines its functions and ends with `families['<letter>'] = {parse, wait, take, left,
 *   start, refund}`: `parse(s)` its parameters (the limiter's `shape`); `wait(key, p, cost)` when its own
 *   acquire would allow `cost` if nobody spent meanwhile, writing nothing: 0 now, else the ms its own denial
 *   replies (-1 never); `take(key, p, cost)` its own acquire (allowed, ms, remaining);
 *   `left(key, p)` the whole units it holds now; `start(p)` the window spent from (µs; 0 when none);
 *   `refund(key, p, cost, start)` gives `cost` back to what `take` spent at `start`.
 * - `twin` does the same on the embedded keyspace.
 */
export interface Family<P = unknown> {
  /** The structure's kind, as its limiters' `kind` says. */
  readonly kind: string
  /** The letter of its specs in the group's ARGV. */
  readonly letter: string
  readonly lua: string
  readonly twin: {
    readonly parse: (s: string) => P
    readonly wait: (db: Script.Keyspace, key: string, p: P, cost: number) => number
    readonly take: (db: Script.Keyspace, key: string, p: P, cost: number) => ReadonlyArray<number>
    readonly left: (db: Script.Keyspace, key: string, p: P) => number
    readonly start: (db: Script.Keyspace, p: P) => number
    readonly refund: (db: Script.Keyspace, key: string, p: P, cost: number, start: number) => void
  }
}

const families: Array<Family> = []

/** @internal Registers a kind of limiter; the group's scripts take every kind registered before they are made. */
export const register = <P>(family: Family<P>): void => {
  if (made !== undefined) throw new Error(`wakuwaku: ${family.kind} registered after the group scripts were made`)
  families.push(family as unknown as Family)
  // One order whatever the order of loading: the scripts' text (and SHA1) is the same in every process.
  families.sort((a, b) => (a.letter < b.letter ? -1 : 1))
}

const familyOf = (letter: string): Family => {
  const family = families.find((f) => f.letter === letter)
  if (family === undefined) throw new Error(`ERR no limiter family ${JSON.stringify(letter)}`)
  return family
}

/**
 * The costs of ARGV[1]: one (every limiter's) or one per limiter, comma-separated; `cost(i)` is the i-th
 * limiter's.
 */
const COSTS = `local costs = {}
for c in string.gmatch(ARGV[1], '[^,]+') do costs[#costs + 1] = tonumber(c) end
local function cost(i) return costs[i] or costs[1] end
`

/** The twin of {@link COSTS}: the i-th limiter's cost of ARGV[1] (0-based here). */
const costsOf = (units: string): (i: number) => number => {
  if (units.indexOf(",") < 0) {
    const cost = Number(units)
    return () => cost
  }
  const costs = units.split(",").map(Number)
  return (i) => costs[i] ?? costs[0]!
}

/** The families' blocks, after one `TIME`. */
const prelude = () =>
  `${NOW_US}local families = {}
${
    families.map((f) =>
      `do
${f.lua}end
`
    ).join("")
  }`

/** A spec parsed: its family, and the limiter's parameters as the family's twin reads them. */
interface Spec {
  readonly family: Family
  readonly params: unknown
}

const parseSpec = parsedOnce((spec: string): Spec => {
  const family = familyOf(spec[0] ?? "")
  return { family, params: family.twin.parse(spec.slice(2)) }
})

interface Scripts {
  readonly acquire: Script.Script<Outcome>
  readonly refund: Script.Script<number>
  readonly check: Script.Script<ReadonlyArray<number>>
}

let made: Scripts | undefined

/**
 * @internal The group's two scripts, made (and registered) the first time they are asked for, from the
 * families registered by then (the structures' modules register theirs when they load).
 *
 * Each script's ARGV[1] is the cost in whole units: one for every limiter, or one per limiter,
 * comma-separated (`1,10`).
 *
 * - `Limits.acquire` decides several limiters as one: takes `cost` from every one if every enforced one
 *   allows it, else from none. KEYS one per limiter; ARGV[1] the cost(s), then one spec per
 *   limiter (its family's letter, a space, or `?` for a shadow limiter, whose denial denies nothing; its
 *   parameters). Returns {all, then per limiter allowed, ms, remaining, start}: all 1 when every enforced
 *   one allowed and each that allowed was spent from (its own acquire's reply; a shadow one that denies
 *   replies as its own denial, and spends nothing); else all 0 and
 *   nothing spent: a limiter that denies replies as its own acquire does (allowed 0, ms until it would
 *   allow, -1 never; a bucket stores its refilled level, as a denial does), one that would allow replies
 *   allowed 1, ms 0, remaining what it holds now. An allowed window's ms is when it ends (its own acquire's
 *   reply). start: the window spent from (µs), 0 for a bucket.
 * - `Limits.refund` gives `cost` back to limiters that `Limits.acquire` spent from (the allowed groups of
 *   a decision another slot's group denied). KEYS one per limiter; ARGV[1] the cost(s), then per limiter its
 *   spec and the start `Limits.acquire` replied. Returns the number of limiters.
 * - `Limits.check` asks, writing nothing, when each limiter's own acquire would allow `cost`. KEYS one per
 *   limiter; ARGV[1] the cost(s), then one spec per limiter. Returns per limiter 0 (now), the ms until then, or
 *   -1 (never: the cost is above its quota).
 */
export const scripts = (): Scripts => {
  if (made !== undefined) return made
  const acquire = defineOver({
    name: "Limits.acquire",
    keys: 1,
    shared: 1,
    lua: `${prelude()}${COSTS}local found, all = {}, 1
for i = 1, #KEYS do
  local spec = ARGV[i + 1]
  local family = families[string.sub(spec, 1, 1)]
  local params = family.parse(string.sub(spec, 3))
  local ok = family.wait(KEYS[i], params, cost(i)) == 0
  found[i] = {family, params, ok}
  if not ok and string.sub(spec, 2, 2) ~= '?' then all = 0 end
end
local reply = {all}
for i = 1, #KEYS do
  local family, params, ok = found[i][1], found[i][2], found[i][3]
  local allowed, ms, remaining
  if all == 1 or not ok then
    allowed, ms, remaining = family.take(KEYS[i], params, cost(i))
  else
    allowed, ms, remaining = 1, 0, family.left(KEYS[i], params)
  end
  table.insert(reply, allowed)
  table.insert(reply, ms)
  table.insert(reply, remaining)
  table.insert(reply, family.start(params))
end
return reply
`,
    twin: (db, keys, argv) => {
      const cost = costsOf(argv[0]!)
      const found = new Array<Spec>(keys.length)
      const ok = new Array<boolean>(keys.length)
      let all = 1
      for (let i = 0; i < keys.length; i++) {
        const spec = argv[i + 1]!
        const parsed = found[i] = parseSpec(spec)
        ok[i] = parsed.family.twin.wait(db, keys[i]!, parsed.params, cost(i)) === 0
        if (!ok[i] && spec[1] !== SHADOW) all = 0
      }
      const reply: Array<number> = [all]
      for (let i = 0; i < keys.length; i++) {
        const { family, params } = found[i]!
        const key = keys[i]!
        if (all === 1 || !ok[i]) {
          const [allowed, ms, remaining] = family.twin.take(db, key, params, cost(i))
          reply.push(allowed!, ms!, remaining!)
        } else {
          reply.push(1, 0, family.twin.left(db, key, params))
        }
        reply.push(family.twin.start(db, params))
      }
      return reply
    },
    decode: decodeOutcome
  })
  const refund = defineOver({
    name: "Limits.refund",
    keys: 1,
    shared: 1,
    lua: `${prelude()}${COSTS}for i = 1, #KEYS do
  local spec = ARGV[2 * i]
  local family = families[string.sub(spec, 1, 1)]
  family.refund(KEYS[i], family.parse(string.sub(spec, 3)), cost(i), tonumber(ARGV[2 * i + 1]))
end
return #KEYS
`,
    twin: (db, keys, argv) => {
      const cost = costsOf(argv[0]!)
      keys.forEach((key, i) => {
        const { family, params } = parseSpec(argv[2 * i + 1]!)
        family.twin.refund(db, key, params, cost(i), Number(argv[2 * i + 2]))
      })
      return keys.length
    },
    decode: (reply) => typeof reply === "number" ? Either.right(reply) : Either.left("the number of limiters")
  })
  const check = defineOver({
    name: "Limits.check",
    keys: 1,
    shared: 1,
    readOnly: true,
    lua: `${prelude()}${COSTS}local reply = {}
for i = 1, #KEYS do
  local spec = ARGV[i + 1]
  local family = families[string.sub(spec, 1, 1)]
  reply[i] = family.wait(KEYS[i], family.parse(string.sub(spec, 3)), cost(i))
end
return reply
`,
    twin: (db, keys, argv) => {
      const cost = costsOf(argv[0]!)
      return keys.map((key, i) => {
        const { family, params } = parseSpec(argv[i + 1]!)
        return family.twin.wait(db, key, params, cost(i))
      })
    },
    decode: (reply) =>
      Array.isArray(reply) && reply.length > 0 && reply.every((ms) => isInt(ms) && ms >= -1)
        ? Either.right(reply as ReadonlyArray<number>)
        : Either.left("the ms until each limiter allows (0 now, -1 never)")
  })
  return made = { acquire, refund, check }
}

/** @internal What a group decided: every limiter's own verdict, and whether the request was spent from all. */
export interface Outcome {
  /**
   * Every enforced limiter allowed, and each limiter that allowed (shadow ones included) was spent from;
   * otherwise none was.
   */
  readonly allowed: boolean
  /**
   * Each limiter's own verdict, in order: `Denied` with its retry (None: never), or `Allowed` with what it
   * has left (after the spend when `allowed`; what it holds now, nothing spent, otherwise).
   */
  readonly admissions: ReadonlyArray<Admission_.Admission>
  /** Each fixed window's window start (server µs), 0 for a bucket: what a refund gives back to. */
  readonly starts: ReadonlyArray<number>
}

const decodeOutcome = (reply: unknown): Either.Either<Outcome, string> => {
  const expected = "{all, then allowed, ms, remaining, start per limiter}"
  if (!Array.isArray(reply) || reply.length < 5 || (reply.length - 1) % 4 !== 0 || !reply.every(isInt)) {
    return Either.left(expected)
  }
  const values = reply as ReadonlyArray<number>
  const admissions: Array<Admission_.Admission> = []
  const starts: Array<number> = []
  for (let i = 1; i < values.length; i += 4) {
    const allowed = values[i]!
    const ms = values[i + 1]!
    const remaining = values[i + 2]!
    const start = values[i + 3]!
    admissions.push(
      allowed === 1
        // An allowed window's ms is when it ends; a bucket's is 0.
        ? Allowed(ms > 0 ? { remaining, resetAfter: Duration.millis(ms) } : { remaining })
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

/** The second character of a shadow limiter's spec (an enforced one's is a space). */
const SHADOW = "?"

/**
 * @internal The spec of a limiter, as `Limits.acquire` takes it: its family's letter, a space (`?` for a
 * shadow limiter: decided and spent as the others, but its denial denies nothing), and its parameters.
 */
export const specOfLimiter = (limiter: AnyLimiter, shadow = false): string => {
  let found = limiterSpecs.get(limiter)
  if (found === undefined) {
    const family = families.find((f) => f.kind === limiter.kind)
    if (family === undefined) throw new TypeError(`wakuwaku: ${limiter.label} cannot be decided in a group`)
    limiterSpecs.set(
      limiter,
      found = [`${family.letter} ${limiter.shape}`, `${family.letter}${SHADOW}${limiter.shape}`]
    )
  }
  return found[shadow ? 1 : 0]
}
/** Each limiter's specs, enforced and as a shadow, made once (a limiter's kind and shape never change). */
const limiterSpecs = new WeakMap<AnyLimiter, readonly [enforced: string, shadow: string]>()

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

/** A call on a group of limiters: their keys and specs, and the cost(s) as ARGV takes them. */
interface Call {
  readonly keys: ReadonlyArray<string>
  readonly specs: ReadonlyArray<string>
  /** One cost for every limiter, or one per limiter, comma-separated (see {@link scripts}). */
  readonly units: string
  /** ARGV of `Limits.acquire` and `Limits.check`: `units`, then `specs`. */
  readonly args: ReadonlyArray<string>
  /** Each limiter's cost. */
  readonly costs: (i: number) => number
}

/** @internal A name for every limiter, or one per limiter (in their order). */
export type Names = string | ReadonlyArray<string>

/** @internal A cost for every limiter, or one per limiter (in their order). */
export type Costs = number | ReadonlyArray<number>

/** The i-th of `each` (one per limiter) or `each` itself (the same for every one). */
const nth = <A>(each: A | ReadonlyArray<A>, i: number): A => (Array.isArray(each) ? each[i] as A : each as A)

/** The costs as ARGV[1] takes them, or why they are not costs (one per limiter, each a non-negative safe integer). */
const unitsOf = (costs: Costs, count: number): string | { readonly wrong: string } => {
  if (!Array.isArray(costs)) {
    const wrong = notCount("cost", costs, 0)
    return wrong === undefined ? String(costs) : { wrong }
  }
  const each = costs as ReadonlyArray<number>
  if (each.length !== count) return { wrong: `one cost per limiter expected (${count}), got ${each.length}` }
  for (const cost of each) {
    const wrong = notCount("cost", cost, 0)
    if (wrong !== undefined) return { wrong }
  }
  return each.every((cost) => cost === each[0]) ? String(each[0]) : each.join(",")
}

/** `InvalidInput` of the group's `verb` for `argument`. */
const invalid = (limiters: ReadonlyArray<AnyLimiter>, verb: string, argument: string, message: string) =>
  Effect.fail(
    new Redis.InvalidInput({ operation: `${limiters.map((l) => l.label).join(" + ")}.${verb}`, argument, message })
  )

/**
 * Runs `f` on the call of `limiters` for `costs` on `names` (each the same for every limiter, or one per
 * limiter), once the costs (non-negative safe integers) and the names are checked (else `InvalidInput` of
 * `verb`, before anything is sent) and the right to write every limiter's entity is.
 */
const withCall = <A>(
  limiters: ReadonlyArray<AnyLimiter>,
  names: Names,
  costs: Costs,
  verb: string,
  f: (redis: Redis.Service, call: Call) => Effect.Effect<A, Redis.RedisError>,
  shadows?: ReadonlyArray<boolean>
): Effect.Effect<A, Redis.RedisError | Redis.InvalidInput, Redis.Redis> => {
  const units = unitsOf(costs, limiters.length)
  if (typeof units !== "string") return invalid(limiters, verb, "cost", units.wrong)
  const each = typeof names !== "string"
  if (each && names.length !== limiters.length) {
    return invalid(limiters, verb, "name", `one name per limiter expected (${limiters.length}), got ${names.length}`)
  }
  const keys: Array<string> = []
  const specs: Array<string> = []
  const args: Array<string> = [units]
  // The right to write each limiter's entity (each kind's once), checked before the call.
  const entities: Array<Capability.AnyEntity> = []
  for (let i = 0; i < limiters.length; i++) {
    const limiter = limiters[i]!
    const key = limiter.keyOf(verb, each ? names[i]! : names)
    if (typeof key !== "string") return Effect.fail(key)
    keys.push(key)
    const spec = specOfLimiter(limiter, shadows?.[i] === true)
    specs.push(spec)
    args.push(spec)
    if (!hasKind(entities, limiter.entity.kind)) entities.push(limiter.entity)
  }
  const call: Call = { keys, specs, units, args, costs: typeof costs === "number" ? () => costs : (i) => costs[i]! }
  return withWrites(entities, (redis) => f(redis, call))
}

const hasKind = (entities: ReadonlyArray<Capability.AnyEntity>, kind: string): boolean => {
  for (const entity of entities) if (entity.kind === kind) return true
  return false
}

/** `whole` on one server; on a Cluster (known, or learned from a `CROSSSLOT` of `whole`: it ran nothing), `split`. */
const slotted = <A>(
  redis: Redis.Service,
  whole: () => Effect.Effect<A, Redis.RedisError>,
  split: () => Effect.Effect<A, Redis.RedisError>
): Effect.Effect<A, Redis.RedisError> =>
  clusters.has(redis) ? split() : Effect.catchIf(whole(), isCrossSlot, () =>
    Effect.suspend(() => {
      clusters.add(redis)
      return split()
    }))

/**
 * @internal Asks every limiter for `cost` on `name`, all or nothing (see the module doc); `name` and `cost`
 * may also be one per limiter, in their order. Fails with `InvalidInput` for a cost that is not a
 * non-negative safe integer or a name the limiters cannot key (or lists of the wrong length), before
 * anything is sent; with `RedisError` when the store fails (any group that had spent is refunded first).
 * Needs the right to write every limiter's entity.
 *
 * `shadows[i]`: the i-th limiter is a shadow one. It is decided in the same call and spends as the others
 * do when the decision allows and it would allow too; its denial denies nothing (the all or nothing rule
 * is the enforced limiters'), and when the enforced limiters deny, it spends nothing either. Its admission
 * is in the outcome like any other's.
 */
export const acquire = (
  limiters: ReadonlyArray<AnyLimiter>,
  name: Names,
  cost: Costs,
  shadows?: ReadonlyArray<boolean>
): Effect.Effect<Outcome, Redis.RedisError | Redis.InvalidInput, Redis.Redis> =>
  telemetry.decide(
    decisionsOf(limiters),
    Array.isArray(cost) ? Math.max(0, ...cost as ReadonlyArray<number>) : cost as number,
    withCall(limiters, name, cost, "acquire", (redis, call) =>
      slotted(
        redis,
        () => redis.script(scripts().acquire, call.keys, call.args),
        () => split(redis, call)
      ), shadows)
  )

/**
 * A group's telemetry labels, made once per list of limiters: found by the list (a list kept, as a proxy route's),
 * else by its limiters' labels (a list written in the call, `Limits.acquire([A, B], name)`, new each time, is
 * not kept by the list).
 */
const decisionsOf = (limiters: ReadonlyArray<AnyLimiter>): telemetry.Decisions => {
  let found = byList.get(limiters)
  if (found !== undefined) return found
  const labels = limiters.map((l) => l.label).join(" + ")
  found = byLabels.get(labels)
  if (found !== undefined) return found
  // Bounded: limiters made at run time (not module-level values) must not grow it for ever.
  if (byLabels.size >= 1024) byLabels.clear()
  byLabels.set(labels, found = new telemetry.Decisions("Limits", limiters.flatMap((l) => l.decisions.policies)))
  byList.set(limiters, found)
  return found
}
const byList = new WeakMap<ReadonlyArray<AnyLimiter>, telemetry.Decisions>()
const byLabels = new Map<string, telemetry.Decisions>()

/**
 * @internal Asks every limiter, writing nothing, when its own acquire would allow `cost` on `name` (each the
 * same for every limiter, or one per limiter) if nobody spent meanwhile: per limiter, in order, 0 (now), the
 * ms until then (what its denial replies), or -1 (never). On a Cluster, one call per hash slot, all at once.
 * Asked after a decision's refunds have landed, it tells a denial the store repeats from one that another
 * request's spend, refunded since, made (see the module doc).
 * Fails as {@link acquire} does; needs the right to write every limiter's entity (it is part of an acquire).
 */
export const check = (
  limiters: ReadonlyArray<AnyLimiter>,
  name: Names,
  cost: Costs
): Effect.Effect<ReadonlyArray<number>, Redis.RedisError | Redis.InvalidInput, Redis.Redis> =>
  withCall(limiters, name, cost, "check", (redis, call) =>
    slotted(
      redis,
      () => redis.script(scripts().check, call.keys, call.args),
      () => {
        const groups = bySlot(call.keys)
        return Effect.map(
          Effect.forEach(groups, (group) => redis.script(scripts().check, ...groupArgs(call, group)), {
            concurrency: "unbounded"
          }),
          (replies) => {
            const waits = new Array<number>(call.keys.length)
            groups.forEach((group, g) => group.forEach((i, j) => (waits[i] = replies[g]![j]!)))
            return waits
          }
        )
      }
    ))

const withWrites = <A, E>(
  entities: ReadonlyArray<Capability.AnyEntity>,
  f: (redis: Redis.Service) => Effect.Effect<A, E>
): Effect.Effect<A, E, Redis.Redis> => {
  const [first, ...rest] = entities
  // Inside `access.write` the context holds the service: the inner checks need nothing more.
  const inner = rest.length === 0 ? f : () => withWrites(rest, f) as Effect.Effect<A, E>
  return access.write(first!, inner) as Effect.Effect<A, E, Redis.Redis>
}

/** The limiters' indexes grouped by the hash slot of their keys. */
const bySlot = (keys: ReadonlyArray<string>): Array<Array<number>> => {
  const groups = new Map<number, Array<number>>()
  keys.forEach((key, i) => {
    const slot = keySlot(key)
    const group = groups.get(slot)
    if (group === undefined) groups.set(slot, [i])
    else group.push(i)
  })
  return [...groups.values()]
}

/** The costs of the limiters at `indexes` of `call`, as ARGV[1] takes them. */
const unitsAt = (call: Call, indexes: ReadonlyArray<number>): string =>
  call.units.includes(",") ? indexes.map((i) => call.costs(i)).join(",") : call.units

/** The KEYS and ARGV of `group`'s part of `call` (for `Limits.acquire` or `Limits.check`). */
const groupArgs = (call: Call, group: ReadonlyArray<number>): [ReadonlyArray<string>, ReadonlyArray<string>] => [
  group.map((i) => call.keys[i]!),
  [unitsAt(call, group), ...group.map((i) => call.specs[i]!)]
]

/**
 * One `Limits.acquire` per hash slot, all at once; if any group denied or failed, the groups that spent are
 * refunded before the outcome (or the failure) is returned. Uninterruptible, so that a spend is never left
 * without its refund by a client that went away (it waits at most the command timeout).
 */
const split = (redis: Redis.Service, call: Call): Effect.Effect<Outcome, Redis.RedisError> => {
  const { keys, specs } = call
  const groups = bySlot(keys)
  if (groups.length === 1) return redis.script(scripts().acquire, keys, call.args)
  return Effect.uninterruptible(
    Effect.flatMap(
      Effect.forEach(groups, (group) => Effect.either(redis.script(scripts().acquire, ...groupArgs(call, group))), {
        concurrency: "unbounded"
      }),
      (results) => {
        const spent = groups.flatMap((group, g) => {
          const result = results[g]!
          return Either.isRight(result) && result.right.allowed ? [{ group, outcome: result.right }] : []
        })
        if (spent.length === groups.length) return Effect.succeed(merge(groups, spent.map((s) => s.outcome), false))
        const refunds = spent.flatMap(({ group, outcome }) => {
          // What the group spent from: every limiter that allowed (a shadow one that would deny spent nothing).
          const took = group.flatMap((_, j) => outcome.admissions[j]!._tag === "Allowed" ? [j] : [])
          return took.length === 0 ? [] : [Effect.ignore(
            redis.script(
              scripts().refund,
              took.map((j) => keys[group[j]!]!),
              [
                unitsAt(call, took.map((j) => group[j]!)),
                ...took.flatMap((j) => [specs[group[j]!]!, String(outcome.starts[j]!)])
              ]
            )
          )]
        })
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
                call.costs
              )
            )
        )
      }
    )
  )
}

/** The groups' outcomes as one, in the limiters' order; `refunded`: the allowed groups gave each its cost back. */
const merge = (
  groups: ReadonlyArray<ReadonlyArray<number>>,
  outcomes: ReadonlyArray<Outcome>,
  refunded: boolean,
  cost: (i: number) => number = () => 0
): Outcome => {
  const size = groups.reduce((n, group) => n + group.length, 0)
  const admissions = new Array<Admission_.Admission>(size)
  const starts = new Array<number>(size)
  groups.forEach((group, g) => {
    const outcome = outcomes[g]!
    group.forEach((i, j) => {
      const admission = outcome.admissions[j]!
      admissions[i] = refunded && outcome.allowed && admission._tag === "Allowed"
        ? Allowed({ ...admission, remaining: admission.remaining + cost(i) })
        : admission
      starts[i] = outcome.starts[j]!
    })
  })
  return { allowed: !refunded && outcomes.every((o) => o.allowed), admissions, starts }
}

/** @internal What `Limits.acquire` decided (see `Limits.Decision`). */
export interface Decision {
  readonly allowed: boolean
  readonly admissions: ReadonlyArray<Admission_.Admission>
  readonly wouldDeny: ReadonlyArray<Limits_.WouldDeny>
}

const invalidList = (message: string) =>
  Effect.fail(new Redis.InvalidInput({ operation: "Limits.acquire", argument: "limits", message }))

/**
 * @internal `Limits.acquire`: the listed limits (limiters, and shadows of limiters) checked (else
 * `InvalidInput`, before anything is sent), decided in one call ({@link acquire}), and the would-be denials
 * of the shadow ones, when the enforced ones allowed, counted and set on the current span.
 */
export const decideListed = (
  listed: ReadonlyArray<unknown>,
  name: string,
  cost: number
): Effect.Effect<Decision, Redis.RedisError | Redis.InvalidInput, Redis.Redis> =>
  Effect.suspend(() => {
    if (!Array.isArray(listed) || listed.length === 0) {
      return invalidList("limits must be a non-empty list of limiters (and shadow limits)")
    }
    const entries = listed.map(shadow.entryOf)
    const strange = entries.findIndex((e) =>
      !limiter.isLimiter(e.limiter) || !families.some((f) => f.kind === (e.limiter as AnyLimiter).kind)
    )
    if (strange >= 0) {
      return invalidList(
        `every limit must be a limiter of a kind decided in a group (such as TokenBucket.make) or a shadow of ` +
          `one (Limits.shadow): the one at index ${strange} is not`
      )
    }
    const limiters = entries.map((e) => e.limiter as AnyLimiter)
    const twice = checkGroup(limiters)
    if (twice !== undefined) return invalidList(twice)
    const shadows = entries.map((e) => e.shadow)
    return Effect.flatMap(acquire(limiters, name, cost, shadows), (outcome) => {
      const wouldDeny = outcome.allowed ? wouldDenyOf(limiters, shadows, outcome, name) : []
      const decision: Decision = { allowed: outcome.allowed, admissions: outcome.admissions, wouldDeny }
      return Effect.as(shadow.report(wouldDeny), decision)
    })
  })

/**
 * @internal The denials of the shadow limiters of an outcome, as {@link Limits_.WouldDeny} values (`name`: the
 * same for every limiter, or one per limiter).
 */
export const wouldDenyOf = (
  limiters: ReadonlyArray<{ readonly namespace: string; readonly kind: string }>,
  shadows: ReadonlyArray<boolean>,
  outcome: Outcome,
  name: Names
): ReadonlyArray<Limits_.WouldDeny> => {
  const found: Array<Limits_.WouldDeny> = []
  outcome.admissions.forEach((admission, i) => {
    if (shadows[i] === true && admission._tag === "Denied") {
      found.push(shadow.wouldDeny(limiters[i]!.namespace, limiters[i]!.kind, nth(name, i), admission.retryAfter))
    }
  })
  return found
}
