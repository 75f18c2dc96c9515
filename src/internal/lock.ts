/** @internal */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import type * as Schedule from "effect/Schedule"
import * as Lock from "../Lock.js"
import * as Redis from "../Redis.js"
import * as access from "./access.js"
import { bounded, positive, toMillis } from "./duration.js"
import * as key from "./key.js"
import * as lease from "./lease.js"
import { MANY } from "./lua.js"
import * as memory from "./memory.js"

const KIND = "Lock"

/**
 * @internal Fence, for a grant: sets `fence` to the server time in µs (`now`, from NOW_US), or to the
 * last fence of KEYS[fenceKey] plus one if that is larger, and stores it there for `lease` (ms).
 */
export const FENCE = (fenceKey: number) =>
  `local fence = now
local last = redis.call('GET', KEYS[${fenceKey}])
if last and tonumber(last) >= fence then fence = tonumber(last) + 1 end
fence = string.format('%d', fence)
redis.call('SET', KEYS[${fenceKey}], fence, 'PX', lease)
`

/** @internal The twin of {@link FENCE}: the fence for a grant at `db.now`, stored for `lease` ms. */
export const fenceTwin = (db: memory.Db, fenceKey: string, lease: string): string => {
  let fence = db.now
  const last = db.get(fenceKey)
  if (last !== null && Number(last) >= fence) fence = Number(last) + 1
  const decimal = String(fence)
  db.set(fenceKey, decimal, { px: lease })
  return decimal
}

/**
 * @internal The Lock functions: `grant(owner, fenceKey, token, lease)` takes the lock if free and
 * returns its fence (a decimal string), or false when held; `free(owner, token)` deletes the lock if
 * the token holds it (1 or 0); `renew(owner, token, lease)` restarts its lease if the token holds it
 * (1 or 0). Leases are in ms; the fence starts from the server time in µs, read only on a grant.
 */
const FUNCTIONS = `local function grant(owner, fenceKey, token, lease)
  if not redis.call('SET', owner, token, 'NX', 'PX', lease) then return false end
  local t = redis.call('TIME')
  local fence = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local last = redis.call('GET', fenceKey)
  if last and tonumber(last) >= fence then fence = tonumber(last) + 1 end
  fence = string.format('%d', fence)
  redis.call('SET', fenceKey, fence, 'PX', lease)
  return fence
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

/** The twins of FUNCTIONS (memory.ts). */
const grant: memory.Twin = (db, [owner, fenceKey], [token, lease]) =>
  db.set(owner!, token!, { nx: true, px: lease! }) === null ? null : fenceTwin(db, fenceKey!, lease!)
const free: memory.Twin = (db, [owner], [token]) => {
  if (db.get(owner!) !== token) return 0
  db.del(owner!)
  return 1
}
const renew: memory.Twin = (db, [owner], [token, lease]) => {
  if (db.get(owner!) !== token) return 0
  db.pexpire(owner!, lease!)
  return 1
}

/** @internal {@link ACQUIRE} for many calls at once (batched). */
export const ACQUIRE_MANY = memory.twin(
  Redis.script({
    name: "Lock.acquireMany",
    keys: 2,
    variadic: true,
    lua: `${FUNCTIONS}${MANY("grant", 2, 2)}`
  }),
  memory.many(grant, 2, 2)
)

/**
 * @internal Takes the lock if free. KEYS[1] the owner key, KEYS[2] the fence key; ARGV[1] the token,
 * ARGV[2] the lease (ms). Returns the fence (a decimal string) when granted, nil when held.
 */
export const ACQUIRE = memory.twin(
  Redis.script({
    name: "Lock.acquire",
    keys: 2,
    many: ACQUIRE_MANY,
    lua: `${FUNCTIONS}return grant(KEYS[1], KEYS[2], ARGV[1], ARGV[2])
`
  }),
  grant
)

/** @internal {@link RELEASE} for many calls at once (batched). */
export const RELEASE_MANY = memory.twin(
  Redis.script({
    name: "Lock.releaseMany",
    keys: 1,
    variadic: true,
    lua: `${FUNCTIONS}${MANY("free", 1, 1)}`
  }),
  memory.many(free, 1, 1)
)

/** @internal Deletes the lock if the token holds it. KEYS[1] the owner key; ARGV[1] the token. Returns 1 or 0. */
export const RELEASE = memory.twin(
  Redis.script({
    name: "Lock.release",
    keys: 1,
    many: RELEASE_MANY,
    lua: `${FUNCTIONS}return free(KEYS[1], ARGV[1])
`
  }),
  free
)

/** @internal {@link EXTEND} for many calls at once (batched). */
export const EXTEND_MANY = memory.twin(
  Redis.script({
    name: "Lock.extendMany",
    keys: 1,
    variadic: true,
    lua: `${FUNCTIONS}${MANY("renew", 1, 2)}`
  }),
  memory.many(renew, 1, 2)
)

/**
 * @internal Restarts the lease if the token holds the lock. KEYS[1] the owner key; ARGV[1] the token,
 * ARGV[2] the lease (ms). Returns 1 or 0.
 */
export const EXTEND = memory.twin(
  Redis.script({
    name: "Lock.extend",
    keys: 1,
    many: EXTEND_MANY,
    lua: `${FUNCTIONS}return renew(KEYS[1], ARGV[1], ARGV[2])
`
  }),
  renew
)

/** @internal Decodes a 1/0 reply. */
export const flag = (operation: string) => (reply: unknown): Effect.Effect<boolean, Redis.RedisError> =>
  reply === 1 || reply === 0
    ? Effect.succeed(reply === 1)
    : Effect.fail(
      new Redis.RedisError({
        reason: "Reply",
        operation,
        cause: new Error(`unexpected reply ${JSON.stringify(reply)}`)
      })
    )

/** @internal Decodes a fence reply: a decimal string when granted, null when refused. */
export const fenceOf = (operation: string) => (reply: unknown): Effect.Effect<Option.Option<bigint>, Redis.RedisError> =>
  reply === null
    ? Effect.succeed(Option.none())
    : typeof reply === "string" && /^\d+$/.test(reply)
    ? Effect.succeed(Option.some(BigInt(reply)))
    : Effect.fail(
      new Redis.RedisError({
        reason: "Reply",
        operation,
        cause: new Error(`unexpected reply ${JSON.stringify(reply)}`)
      })
    )

class LockImpl<Name extends Redis.KeyName> implements Lock.Lock<Name> {
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
    return access.write(Lock.entity, (redis) => {
      // A fresh secret each time the Effect runs, not when it is built: one value may run many times.
      const secret = lease.secret()
      return redis.script(ACQUIRE, [owner, fenceKey], [secret, this.leaseMillis]).pipe(
        Effect.flatMap(fenceOf(`script ${ACQUIRE.name}`)),
        Effect.map(Option.map((fence): Lock.LockToken =>
          new lease.Token(
            "LockToken",
            this.namespace,
            encoded.right,
            fence,
            access.write(Lock.entity, (redis) =>
              Effect.flatMap(redis.script(RELEASE, [owner], [secret]), flag(`script ${RELEASE.name}`))),
            access.write(Lock.entity, (redis) =>
              Effect.flatMap(redis.script(EXTEND, [owner], [secret, this.leaseMillis]), flag(`script ${EXTEND.name}`)))
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

/** @internal {@link Lock.wait}, its deadline checked now. */
export const wait = (options: {
  readonly schedule?: Schedule.Schedule<unknown> | undefined
  readonly deadline?: Duration.DurationInput | undefined
}): Lock.Acquire => ({
  _tag: "Wait",
  ...options,
  ...(options.deadline === undefined ? {} : { deadline: positive(options.deadline, "Lock.wait deadline") })
})

/** @internal A third of the lease, or the option; throws a `RangeError` on an option that is no positive duration. */
export const renewal = (ttl: Duration.Duration, options: Lock.Options | undefined): Duration.Duration =>
  options?.renewEvery === undefined
    ? Duration.millis(Math.max(1, Math.floor(Duration.toMillis(ttl) / 3)))
    : positive(options.renewEvery, "renewEvery")

/** @internal */
export const scoped = <Name extends Redis.KeyName>(lock: Lock.Lock<Name>, name: Name, options: Lock.Options | undefined) => {
  const label = `Lock(${lock.namespace})`
  const renewEvery = renewal(lock.ttl, options)
  const encoded = key.encodeNameOf(label, "withLock", name)
  if (Either.isLeft(encoded)) return Effect.fail(encoded.left)
  const lostError = (token: Lock.LockToken) => (reason: Lock.LockLost["reason"]) =>
    new Lock.LockLost({ lock: label, name: encoded.right, fence: token.fence, reason })
  return Effect.flatMap(
    lease.acquire<Lock.LockToken, Redis.RedisError | Redis.InvalidInput, Lock.Requirements>(
      lock.tryLock(name),
      options?.acquire ?? Lock.wait(),
      lock.ttl,
      () => new Lock.LockUnavailable({ lock: label, name: encoded.right })
    ),
    (granted) =>
      lease.hold<Lock.LockToken, Lock.Requirements>(granted, lock.ttl, renewEvery, lostError(granted.token))
  )
}

/** @internal */
export const withLock = <Name extends Redis.KeyName, A, E, R>(
  lock: Lock.Lock<Name>,
  name: Name,
  options: Lock.Options | undefined,
  effect: Effect.Effect<A, E, R>
) => lease.scopedUse(scoped(lock, name, options), effect)
