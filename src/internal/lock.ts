/**
 * @internal Lock: three scripts (grant, release, extend, each with a batch variant), the lock value,
 * and its scoped form.
 */
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import * as Capability from "../Capability.js"
import type * as Lock from "../Lock.js"
import type * as Redis from "../Redis.js"
import type * as Script from "../Script.js"
import { bounded, toMillis } from "./duration.js"
import { fence, FENCE_FUNCTION, fenceReply } from "./fence.js"
import * as keepAlive from "./keepAlive.js"
import * as key from "./key.js"
import * as lease from "./lease.js"
import * as access from "./redis.js"
import { call, defineCall, flag } from "./script.js"

const KIND = "Lock"

/** @internal */
export const TypeId: Lock.TypeId = Symbol.for("wakuwaku/Lock") as Lock.TypeId

/** @internal */
export const isLock = (u: unknown): u is Lock.Lock<never> => typeof u === "object" && u !== null && TypeId in u

/** @internal */
export const entity: Lock.Entity = Capability.entity(KIND)

/**
 * @internal The Lock functions, which every Lock script defines:
 * - `grant(owner, fenceKey, token, lease)` takes the lock if free and returns its fence (a decimal
 *   string), or false when held; only a grant reads the server's time, for the fence;
 * - `free(owner, token)` deletes the lock if the token holds it (1 or 0);
 * - `renew(owner, token, lease)` restarts its lease if the token holds it (1 or 0).
 * Leases are in ms.
 */
const FUNCTIONS = `${FENCE_FUNCTION}local function grant(owner, fenceKey, token, lease)
  if not redis.call('SET', owner, token, 'NX', 'PX', lease) then return false end
  local t = redis.call('TIME')
  return fence(fenceKey, tonumber(t[1]) * 1000000 + tonumber(t[2]), lease)
end
local function free(owner, token)
  if redis.call('GET', owner) ~= token then return 0 end
  redis.call('DEL', owner)
  return 1
end
local function renew(owner, token, lease)
  if redis.call('GET', owner) ~= token then return 0 end
  redis.call('PEXPIRE', owner, lease)
  return 1
end
`

/** The twins of FUNCTIONS. */
const grant: Script.Twin = (db, [owner, fenceKey], [token, leaseMs]) =>
  db.set(owner!, token!, { nx: true, px: leaseMs! }) === null ? null : fence(db, fenceKey!, db.now, leaseMs!)
const free: Script.Twin = (db, [owner], [token]) => {
  if (db.get(owner!) !== token) return 0
  db.del(owner!)
  return 1
}
const renew: Script.Twin = (db, [owner], [token, leaseMs]) => {
  if (db.get(owner!) !== token) return 0
  db.pexpire(owner!, leaseMs!)
  return 1
}

/**
 * @internal Takes the lock if free. KEYS[1] the owner key, KEYS[2] the fence key; ARGV[1] the token,
 * ARGV[2] the lease (ms). Returns the fence (a decimal string) when granted, nil when held. Batched.
 */
export const ACQUIRE = defineCall({
  name: "Lock.acquire",
  keys: 2,
  args: 2,
  functions: FUNCTIONS,
  fn: "grant",
  twin: grant,
  decode: fenceReply,
  batched: true
})

/**
 * @internal Deletes the lock if the token holds it. KEYS[1] the owner key; ARGV[1] the token. Returns 1 or 0.
 * Batched.
 */
export const RELEASE = defineCall({
  name: "Lock.release",
  keys: 1,
  args: 1,
  functions: FUNCTIONS,
  fn: "free",
  twin: free,
  decode: flag,
  batched: true
})

/**
 * @internal Restarts the lease if the token holds the lock. KEYS[1] the owner key; ARGV[1] the token,
 * ARGV[2] the lease (ms). Returns 1 or 0. Batched.
 */
export const EXTEND = defineCall({
  name: "Lock.extend",
  keys: 1,
  args: 2,
  functions: FUNCTIONS,
  fn: "renew",
  twin: renew,
  decode: flag,
  batched: true
})

class LockImpl<Name extends Redis.KeyName> implements Lock.Lock<Name> {
  readonly [TypeId]: Lock.TypeId = TypeId
  readonly label: string
  readonly leaseMillis: string
  constructor(readonly namespace: string, readonly ttl: Duration.Duration) {
    this.label = `Lock(${namespace})`
    this.leaseMillis = String(toMillis(ttl))
    Object.freeze(this)
  }

  readonly tryLock = (
    name: Name
  ): Effect.Effect<Option.Option<Lock.LockToken>, Redis.RedisError | Redis.InvalidInput, Lock.Requirements> => {
    const encoded = key.encodeNameOf(this.label, "tryLock", name)
    if (Either.isLeft(encoded)) return Effect.fail(encoded.left)
    const owner = key.taggedKey(KIND, this.namespace, encoded.right, "owner")
    const fenceKey = key.taggedKey(KIND, this.namespace, encoded.right, "fence")
    return access.write(entity, (redis) => {
      // A fresh secret each time the Effect runs, not when it is built: one value may run many times.
      const secret = lease.secret()
      return call(redis, ACQUIRE, [owner, fenceKey], [secret, this.leaseMillis]).pipe(
        Effect.map(Option.map((fence): Lock.LockToken =>
          new lease.Token(
            "LockToken",
            this.namespace,
            encoded.right,
            fence,
            access.write(entity, (redis) => call(redis, RELEASE, [owner], [secret])),
            access.write(entity, (redis) => call(redis, EXTEND, [owner], [secret, this.leaseMillis]))
          ) as Lock.LockToken
        ))
      )
    })
  }

  toString() {
    return `${this.label}: lease ${this.leaseMillis} ms`
  }
}

/** @internal */
export const make = <Name extends Redis.KeyName>(namespace: string, ttl: Duration.DurationInput): Lock.Lock<Name> =>
  new LockImpl<Name>(key.validateNamespace(KIND, namespace), bounded(ttl, `Lock(${namespace}) ttl`))

/** @internal */
export const wait = lease.wait

/** @internal */
export const scoped = <Name extends Redis.KeyName>(
  lock: Lock.Lock<Name>,
  name: Name,
  options: Lock.Options | undefined
) => {
  const label = `Lock(${lock.namespace})`
  const renewEvery = keepAlive.every(lock.ttl, options?.renewEvery, "renewEvery")
  const encoded = key.encodeNameOf(label, "withLock", name)
  if (Either.isLeft(encoded)) return Effect.fail(encoded.left)
  const lostError = (token: Lock.LockToken) => (reason: Lock.LeaseLost["reason"]) =>
    new lease.LeaseLost({ lock: label, name: encoded.right, fence: token.fence, reason })
  return Effect.flatMap(
    lease.acquire<Lock.LockToken, Redis.RedisError | Redis.InvalidInput, Lock.Requirements>(
      lock.tryLock(name),
      options?.acquire ?? lease.wait(),
      lock.ttl,
      () => new lease.LeaseUnavailable({ lock: label, name: encoded.right })
    ),
    (granted) => lease.hold<Lock.LockToken, Lock.Requirements>(granted, lock.ttl, renewEvery, lostError(granted.token))
  )
}

/** @internal */
export const withLock = <Name extends Redis.KeyName, A, E, R>(
  lock: Lock.Lock<Name>,
  name: Name,
  options: Lock.Options | undefined,
  effect: Effect.Effect<A, E, R>
) => lease.scopedUse(scoped(lock, name, options), effect)
