/**
 * @internal Semaphore: its scripts (acquire, release and extend, each batched; the withdraw of an intent is
 * lease.ts's), the semaphore value, and its scoped form.
 */
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Inspectable from "effect/Inspectable"
import * as Option from "effect/Option"
import type * as Scope from "effect/Scope"
import * as Capability from "../Capability.js"
import type * as Lock from "../Lock.js"
import type * as Redis from "../Redis.js"
import type * as Script from "../Script.js"
import type * as Semaphore from "../Semaphore.js"
import { bounded, toMillis } from "./duration.js"
import { fence, FENCE_FUNCTION, fenceReply } from "./fence.js"
import * as keepAlive from "./keepAlive.js"
import * as key from "./key.js"
import * as lease from "./lease.js"
import * as access from "./redis.js"
import { call, defineCall, flag, type Strings } from "./script.js"
import * as core from "./service.js"
import { notCount } from "./validate.js"

const KIND = "Semaphore"

/** @internal */
export const TypeId: Semaphore.TypeId = Symbol.for("wakuwaku/Semaphore") as Semaphore.TypeId

/** @internal */
export const isSemaphore = (u: unknown): u is Semaphore.Semaphore<never> =>
  typeof u === "object" && u !== null && TypeId in u

/** @internal */
export const entity: Semaphore.Entity = Capability.entity(KIND)

/**
 * @internal The Semaphore functions, which every Semaphore script defines. The holders are a sorted
 * set: one member `<n>:<token>` per holder, scored by the end of its lease in server µs, and the member
 * `#`, scored minus the permits held in all (negative: it sorts first, and the range of lease ends from
 * 0 that prune drops never includes it); the set is deleted when nothing is held. Leases are in ms;
 * `member` is `<n>:<token>`, and `n` is read from it.
 * - `clock()` is the server's time in µs;
 * - `prune(holders, now)` drops the holders whose lease ended by `now`, takes their permits off the
 *   count, and returns the permits still held; one ZRANGEBYSCORE up to `now` reads both, `#` (the
 *   lowest score) first;
 * - `acquire(holders, intent, fenceKey, member, permits, lease, intend)` grants the member's `n` of
 *   `permits` if they are free and, when a waiter other than `member` left an intent for `k`, `k` stay
 *   free after the grant; it returns the fence (a decimal string), or false when refused, leaving
 *   `member`'s intent for a lease if `intend` is '1' and no other intent stands;
 * - `free(holders, member)` gives a live holder's permits back (1, or 0 if it is not one);
 * - `renew(holders, member, lease)` restarts a live holder's lease (1 or 0).
 */
const FUNCTIONS = `${FENCE_FUNCTION}local function clock()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local function prune(holders, now)
  local due = redis.call('ZRANGEBYSCORE', holders, '-inf', now, 'WITHSCORES')
  if #due == 0 then return 0 end
  local held = -tonumber(due[2])
  if #due == 2 then return held end
  for i = 3, #due, 2 do held = held - tonumber(string.match(due[i], '^%d+')) end
  if held == 0 then
    redis.call('DEL', holders)
  else
    redis.call('ZREMRANGEBYSCORE', holders, 0, now)
    redis.call('ZADD', holders, string.format('%d', -held), '#')
  end
  return held
end
local function acquire(holders, intent, fenceKey, member, permits, lease, intend)
  local now = clock()
  local held = prune(holders, now)
  local n = tonumber(string.match(member, '^%d+'))
  local waiting = redis.call('GET', intent)
  local reserve = 0
  if waiting and waiting ~= member then reserve = tonumber(string.match(waiting, '^%d+')) end
  if held + n + reserve > tonumber(permits) then
    if intend == '1' and (not waiting or waiting == member) then redis.call('SET', intent, member, 'PX', lease) end
    return false
  end
  redis.call('ZADD', holders, string.format('%d', now + tonumber(lease) * 1000), member,
    string.format('%d', -(held + n)), '#')
  if held > 0 then redis.call('PEXPIRE', holders, lease, 'GT') else redis.call('PEXPIRE', holders, lease) end
  if waiting == member then redis.call('DEL', intent) end
  return fence(fenceKey, now, lease)
end
local function free(holders, member)
  local score = redis.call('ZSCORE', holders, member)
  if not score or tonumber(score) <= clock() then return 0 end
  if tonumber(redis.call('ZINCRBY', holders, string.match(member, '^%d+'), '#')) == 0 then
    redis.call('DEL', holders)
  else
    redis.call('ZREM', holders, member)
  end
  return 1
end
local function renew(holders, member, lease)
  local score = redis.call('ZSCORE', holders, member)
  if not score then return 0 end
  local now = clock()
  if tonumber(score) <= now then return 0 end
  redis.call('ZADD', holders, string.format('%d', now + tonumber(lease) * 1000), member)
  redis.call('PEXPIRE', holders, lease, 'GT')
  return 1
end
`

/** The permits a member or an intent (`<n>:<token>`) stands for. */
const permitsOf = (member: string): number => Number(/^\d+/.exec(member)?.[0])

/** The twins of FUNCTIONS. */
const prune = (db: Script.Keyspace, holders: string): number => {
  const all = db.zrangeWithScores(holders, 0, -1)
  if (all.length === 0) return 0
  let held = -Number(all[1])
  const ended: Array<string> = []
  for (let i = 2; i < all.length && Number(all[i + 1]) <= db.now; i += 2) ended.push(all[i]!)
  if (ended.length === 0) return held
  for (const member of ended) held -= permitsOf(member)
  if (held === 0) {
    db.del(holders)
  } else {
    for (const member of ended) db.zrem(holders, member)
    db.zadd(holders, -held, "#")
  }
  return held
}
const acquire: Script.Twin = (db, [holders, intent, fenceKey], [member, permits, leaseMs, intend]) => {
  const held = prune(db, holders!)
  const k = permitsOf(member!)
  const waiting = db.get(intent!)
  const reserve = waiting !== null && waiting !== member ? permitsOf(waiting) : 0
  if (held + k + reserve > Number(permits)) {
    if (intend === "1" && (waiting === null || waiting === member)) db.set(intent!, member!, { px: leaseMs! })
    return null
  }
  db.zadd(holders!, db.now + Number(leaseMs) * 1000, member!)
  db.zadd(holders!, -(held + k), "#")
  db.pexpire(holders!, leaseMs!, held > 0)
  if (waiting === member) db.del(intent!)
  return fence(db, fenceKey!, db.now, leaseMs!)
}
const free: Script.Twin = (db, [holders], [member]) => {
  const score = db.zscore(holders!, member!)
  if (score === null || Number(score) <= db.now) return 0
  const left = Number(db.zscore(holders!, "#")) + permitsOf(member!)
  if (left === 0) {
    db.del(holders!)
  } else {
    db.zadd(holders!, left, "#")
    db.zrem(holders!, member!)
  }
  return 1
}
const renew: Script.Twin = (db, [holders], [member, leaseMs]) => {
  const score = db.zscore(holders!, member!)
  if (score === null || Number(score) <= db.now) return 0
  db.zadd(holders!, db.now + Number(leaseMs) * 1000, member!)
  db.pexpire(holders!, leaseMs!, true)
  return 1
}

/**
 * @internal Takes n permits if free. KEYS[1] the holders, KEYS[2] the intent, KEYS[3] the fence; ARGV[1]
 * the member `<n>:<token>`, ARGV[2] the permits per name, ARGV[3] the lease (ms), ARGV[4] "1" to leave an
 * intent when refused (a waiter for n > 1). Returns the fence (a decimal string) when granted, nil when
 * refused. Batched.
 */
export const ACQUIRE = defineCall({
  name: "Semaphore.acquire",
  keys: 3,
  args: 4,
  functions: FUNCTIONS,
  fn: "acquire",
  twin: acquire,
  decode: fenceReply,
  batched: true
})

/**
 * @internal Gives a live holder's permits back. KEYS[1] the holders; ARGV[1] the member `<n>:<token>`.
 * Returns 1, or 0 if its lease had ended. Batched.
 */
export const RELEASE = defineCall({
  name: "Semaphore.release",
  keys: 1,
  args: 1,
  functions: FUNCTIONS,
  fn: "free",
  twin: free,
  decode: flag,
  batched: true
})

/**
 * @internal Restarts a live holder's lease. KEYS[1] the holders; ARGV[1] the member `<n>:<token>`,
 * ARGV[2] the lease (ms). Returns 1, or 0 if it had ended. Batched.
 */
export const EXTEND = defineCall({
  name: "Semaphore.extend",
  keys: 1,
  args: 2,
  functions: FUNCTIONS,
  fn: "renew",
  twin: renew,
  decode: flag,
  batched: true
})

/**
 * @internal A permit. Its member (and in it the secret) is a private field: no property, `toString`,
 * `inspect` or JSON shows it; only its own `release` and `extend` use it.
 */
export class Permit implements lease.Lease<Semaphore.Requirements>, Inspectable.Inspectable {
  readonly #member: string
  readonly #keys: Keys
  readonly #leaseMillis: string
  constructor(
    readonly namespace: string,
    readonly name: string,
    readonly permits: number,
    readonly fence: bigint,
    member: string,
    keys: Keys,
    leaseMillis: string
  ) {
    this.#member = member
    this.#keys = keys
    this.#leaseMillis = leaseMillis
    Object.freeze(this)
  }
  get release(): Effect.Effect<boolean, Redis.RedisError, Semaphore.Requirements> {
    return access.write(entity, (redis) => call(redis, RELEASE, this.#keys.holders, [this.#member]))
  }
  get extend(): Effect.Effect<boolean, Redis.RedisError, Semaphore.Requirements> {
    return access.write(entity, (redis) => call(redis, EXTEND, this.#keys.holders, [this.#member, this.#leaseMillis]))
  }
  toJSON() {
    return {
      _id: "Permit",
      namespace: this.namespace,
      name: this.name,
      permits: this.permits,
      fence: String(this.fence)
    }
  }
  toString() {
    return `Permit(${this.namespace}:${this.name}, permits ${this.permits}, fence ${this.fence})`
  }
  [Inspectable.NodeInspectSymbol]() {
    return this.toJSON()
  }
}

/** The encoded name and the KEYS of each script, built once per call. */
interface Keys {
  readonly name: string
  /** The holders, the intent, the fence. */
  readonly acquire: Strings<3>
  /** The holders alone. */
  readonly holders: Strings<1>
  /** The intent alone. */
  readonly intent: Strings<1>
}

class SemaphoreImpl<Name extends Redis.KeyName> implements Semaphore.Semaphore<Name> {
  readonly [TypeId]: Semaphore.TypeId = TypeId
  readonly label: string
  readonly leaseMillis: string
  readonly permitsArg: string
  constructor(readonly namespace: string, readonly permits: number, readonly ttl: Duration.Duration) {
    this.label = `Semaphore(${namespace})`
    this.leaseMillis = String(toMillis(ttl))
    this.permitsArg = String(permits)
    Object.freeze(this)
  }

  /** The keys of `name`, or why `name` or `n` is bad input. */
  keys(operation: string, name: Name, n: number): Either.Either<Keys, Redis.InvalidInput> {
    const problem = notCount("n", n, 1, show) ??
      (n > this.permits ? `n must be at most the ${this.permits} permits of a name, got ${n}` : undefined)
    if (problem !== undefined) {
      return Either.left(
        new core.InvalidInput({ operation: `${this.label}.${operation}`, argument: "n", message: problem })
      )
    }
    return Either.map(key.encodeNameOf(this.label, operation, name), (encoded) => {
      const holders = key.taggedKey(KIND, this.namespace, encoded, "holders")
      const intent = key.taggedKey(KIND, this.namespace, encoded, "intent")
      return {
        name: encoded,
        acquire: [holders, intent, key.taggedKey(KIND, this.namespace, encoded, "fence")],
        holders: [holders],
        intent: [intent]
      }
    })
  }

  /**
   * One attempt, under the secret `secret()` gives when it runs; `intend`: leave an intent when refused
   * (a waiter for n > 1).
   */
  attempt(
    keys: Keys,
    n: number,
    intend: boolean,
    secret: () => string
  ): Effect.Effect<Option.Option<Permit>, Redis.RedisError, Semaphore.Requirements> {
    const prefix = `${n}:`
    const flag = intend ? "1" : "0"
    return access.write(entity, (redis) => {
      const member = prefix + secret()
      return Effect.map(
        call(redis, ACQUIRE, keys.acquire, [member, this.permitsArg, this.leaseMillis, flag]),
        (fence) =>
          Option.isNone(fence)
            ? Option.none()
            : Option.some(new Permit(this.namespace, keys.name, n, fence.value, member, keys, this.leaseMillis))
      )
    })
  }

  readonly tryAcquire = (
    name: Name,
    n: number = 1
  ): Effect.Effect<Option.Option<Semaphore.Permit>, Redis.RedisError | Redis.InvalidInput, Semaphore.Requirements> => {
    const keys = this.keys("tryAcquire", name, n)
    if (Either.isLeft(keys)) return Effect.fail(keys.left)
    // A fresh secret each time the Effect runs, not when it is built: one value may run many times.
    return this.attempt(keys.right, n, false, lease.secret)
  }

  readonly release = (permit: Semaphore.Permit): Effect.Effect<boolean, Redis.RedisError, Semaphore.Requirements> =>
    permit instanceof Permit ? permit.release : notAPermit("release")

  readonly extend = (permit: Semaphore.Permit): Effect.Effect<boolean, Redis.RedisError, Semaphore.Requirements> =>
    permit instanceof Permit ? permit.extend : notAPermit("extend")

  /** Withdraws the intent `member` may have left. */
  withdraw(keys: Keys, member: string): Effect.Effect<void, never, Semaphore.Requirements> {
    return access.write(entity, (redis) => Effect.ignore(call(redis, lease.WITHDRAW, keys.intent, [member])))
  }

  toString() {
    return `${this.label}: ${this.permits} permits, lease ${this.leaseMillis} ms`
  }
}

/** A count as a message shows it: a number as JavaScript prints it, anything else as {@link key.preview} does. */
const show = (count: unknown): string => typeof count === "number" ? String(count) : key.preview(count)

/** Only a cast can pass something else for a permit: a bug of the caller. */
const notAPermit = (operation: string) =>
  Effect.dieMessage(`wakuwaku: Semaphore.${operation} takes a permit granted by tryAcquire, withPermits or scoped`)

/** @internal */
export const make = <Name extends Redis.KeyName>(
  namespace: string,
  permits: number,
  ttl: Duration.DurationInput
): Semaphore.Semaphore<Name> => {
  key.validateNamespace(KIND, namespace)
  const problem = notCount(`wakuwaku: Semaphore(${namespace}) permits`, permits, 1, show)
  if (problem !== undefined) throw new RangeError(problem)
  return new SemaphoreImpl<Name>(namespace, permits, bounded(ttl, `Semaphore(${namespace}) ttl`))
}

/**
 * @internal A waiter for n > 1 leaves an intent on each refused attempt, and withdraws it if it does not
 * get in (gives up, fails or is interrupted). Its secret is drawn when the Effect runs.
 */
export const scoped = <Name extends Redis.KeyName>(
  sem: Semaphore.Semaphore<Name>,
  name: Name,
  n: number,
  options: Lock.Options | undefined
): Effect.Effect<
  { readonly permit: Semaphore.Permit; readonly lost: Effect.Effect<never, Lock.LeaseLost> },
  Lock.LeaseUnavailable | Redis.RedisError | Redis.InvalidInput,
  Semaphore.Requirements | Scope.Scope
> => {
  const impl = sem as SemaphoreImpl<Name>
  // Options are checked now, when the scoped form is applied, never inside the Effect.
  const renewEvery = keepAlive.every(sem.ttl, options?.renewEvery, "renewEvery")
  const keys = impl.keys("withPermits", name, n)
  if (Either.isLeft(keys)) return Effect.fail(keys.left)
  const policy = options?.acquire ?? lease.wait()
  const waits = policy._tag === "Wait" && n > 1
  return Effect.suspend(() => {
    const secret = lease.secret()
    return Effect.flatMap(
      lease.acquire<Permit, Redis.RedisError, Semaphore.Requirements>(
        impl.attempt(keys.right, n, waits, () => secret),
        policy,
        sem.ttl,
        () => new lease.LeaseUnavailable({ lock: impl.label, name: keys.right.name })
      ),
      (granted) =>
        Effect.map(
          lease.hold<Permit, Semaphore.Requirements>(
            granted,
            sem.ttl,
            renewEvery,
            (reason) =>
              new lease.LeaseLost({ lock: impl.label, name: keys.right.name, fence: granted.token.fence, reason })
          ),
          ({ lost, token }) => ({ permit: token, lost })
        )
    ).pipe(Effect.onError(() => waits ? impl.withdraw(keys.right, `${n}:${secret}`) : Effect.void))
  })
}

/** @internal */
export const withPermits = <Name extends Redis.KeyName, A, E, R>(
  sem: Semaphore.Semaphore<Name>,
  name: Name,
  n: number,
  options: Lock.Options | undefined,
  effect: Effect.Effect<A, E, R>
) => Effect.scoped(Effect.flatMap(scoped(sem, name, n, options), (held) => lease.using(held, effect)))
