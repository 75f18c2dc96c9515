/** @internal RwLock: its scripts, the lock value, and its scoped forms. */
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import * as Capability from "../Capability.js"
import type * as Lock from "../Lock.js"
import type * as Redis from "../Redis.js"
import type * as RwLock from "../RwLock.js"
import type * as Script from "../Script.js"
import { bounded, toMillis } from "./duration.js"
import { fence, FENCE_FUNCTION, fenceReply } from "./fence.js"
import * as keepAlive from "./keepAlive.js"
import * as key from "./key.js"
import * as lease from "./lease.js"
import { NOW_US } from "./lua.js"
import * as access from "./redis.js"
import { call, defineCall, flag } from "./script.js"

const KIND = "RwLock"

/** @internal */
export const TypeId: RwLock.TypeId = Symbol.for("wakuwaku/RwLock") as RwLock.TypeId

/** @internal */
export const isRwLock = (u: unknown): u is RwLock.RwLock<never> => typeof u === "object" && u !== null && TypeId in u

/** @internal */
export const entity: RwLock.Entity = Capability.entity(KIND)

/**
 * @internal Lua of the reader set, which every script that touches it defines after NOW_US (`now`, the
 * server's time in µs): `prune(readers, now)` drops the readers whose lease ended (scores are lease ends
 * in server µs); `keep(readers, now)` makes the set live as long as its longest lease.
 */
const READERS = `local function prune(readers, now)
  redis.call('ZREMRANGEBYSCORE', readers, '-inf', now)
end
local function keep(readers, now)
  local longest = redis.call('ZRANGE', readers, -1, -1, 'WITHSCORES')[2]
  if longest then redis.call('PEXPIRE', readers, math.max(1, math.ceil((tonumber(longest) - now) / 1000))) end
end
`

/** The twins of READERS. */
const prune = (db: Script.Keyspace, readers: string) => db.zremrangebyscore(readers, db.now)
const keep = (db: Script.Keyspace, readers: string) => {
  const longest = db.zrangeWithScores(readers, -1, -1)[1]
  if (longest !== undefined) db.pexpire(readers, Math.max(1, Math.ceil((Number(longest) - db.now) / 1000)))
}
const leaseEnd = (db: Script.Keyspace, leaseMs: string) => db.now + Number(leaseMs) * 1000

/**
 * @internal A read lease, granted when there is no writer and no writer waiting. KEYS[1] the writer,
 * KEYS[2] the readers, KEYS[3] the writer intent; ARGV[1] the token, ARGV[2] the lease (ms).
 * Returns 1 when granted, 0 when not.
 */
export const READ = defineCall({
  name: "RwLock.read",
  keys: 3,
  args: 2,
  lua: `${NOW_US}${READERS}prune(KEYS[2], now)
if redis.call('EXISTS', KEYS[1]) == 1 or redis.call('EXISTS', KEYS[3]) == 1 then return 0 end
redis.call('ZADD', KEYS[2], string.format('%d', now + tonumber(ARGV[2]) * 1000), ARGV[1])
keep(KEYS[2], now)
return 1
`,
  twin: (db, [writer, readers, intent], [token, leaseMs]) => {
    prune(db, readers!)
    if (db.exists(writer!) === 1 || db.exists(intent!) === 1) return 0
    db.zadd(readers!, leaseEnd(db, leaseMs!), token!)
    keep(db, readers!)
    return 1
  },
  decode: flag
})

/**
 * @internal The write lease, granted when there is no writer and no live reader. KEYS[1] the writer,
 * KEYS[2] the readers, KEYS[3] the writer intent, KEYS[4] the fence; ARGV[1] the token, ARGV[2] the
 * lease (ms), ARGV[3] "1" to leave an intent when refused, which holds new readers back for a lease
 * (unless another writer's intent is there). Returns the fence (a decimal string), or nil when refused.
 */
export const WRITE = defineCall({
  name: "RwLock.write",
  keys: 4,
  args: 3,
  lua: `${NOW_US}${READERS}${FENCE_FUNCTION}prune(KEYS[2], now)
if redis.call('EXISTS', KEYS[1]) == 1 or redis.call('ZCARD', KEYS[2]) > 0 then
  if ARGV[3] == '1' then
    local waiting = redis.call('GET', KEYS[3])
    if not waiting or waiting == ARGV[1] then redis.call('SET', KEYS[3], ARGV[1], 'PX', ARGV[2]) end
  end
  return false
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
if redis.call('GET', KEYS[3]) == ARGV[1] then redis.call('DEL', KEYS[3]) end
return fence(KEYS[4], now, ARGV[2])
`,
  twin: (db, [writer, readers, intent, fenceKey], [token, leaseMs, intend]) => {
    prune(db, readers!)
    if (db.exists(writer!) === 1 || db.zcard(readers!) > 0) {
      if (intend === "1") {
        const waiting = db.get(intent!)
        if (waiting === null || waiting === token) db.set(intent!, token!, { px: leaseMs! })
      }
      return null
    }
    db.set(writer!, token!, { px: leaseMs! })
    if (db.get(intent!) === token) db.del(intent!)
    return fence(db, fenceKey!, db.now, leaseMs!)
  },
  decode: fenceReply
})

/** @internal Ends a read lease. KEYS[1] the readers; ARGV[1] the token. Returns 1, or 0 if it had run out. */
export const READ_RELEASE = defineCall({
  name: "RwLock.readRelease",
  keys: 1,
  args: 1,
  lua: `${NOW_US}${READERS}prune(KEYS[1], now)
return redis.call('ZREM', KEYS[1], ARGV[1])
`,
  twin: (db, [readers], [token]) => {
    prune(db, readers!)
    return db.zrem(readers!, token!)
  },
  decode: flag
})

/**
 * @internal Restarts a read lease. KEYS[1] the readers; ARGV[1] the token, ARGV[2] the lease (ms).
 * Returns 1, or 0 if it had run out.
 */
export const READ_EXTEND = defineCall({
  name: "RwLock.readExtend",
  keys: 1,
  args: 2,
  lua: `${NOW_US}${READERS}prune(KEYS[1], now)
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[1], 'XX', string.format('%d', now + tonumber(ARGV[2]) * 1000), ARGV[1])
keep(KEYS[1], now)
return 1
`,
  twin: (db, [readers], [token, leaseMs]) => {
    prune(db, readers!)
    if (db.zscore(readers!, token!) === null) return 0
    db.zadd(readers!, leaseEnd(db, leaseMs!), token!, true)
    keep(db, readers!)
    return 1
  },
  decode: flag
})

/** @internal Ends the write lease. KEYS[1] the writer, KEYS[2] the readers; ARGV[1] the token. Returns 1 or 0. */
export const WRITE_RELEASE = defineCall({
  name: "RwLock.writeRelease",
  keys: 2,
  args: 1,
  lua: `${NOW_US}${READERS}prune(KEYS[2], now)
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
return 1
`,
  twin: (db, [writer, readers], [token]) => {
    prune(db, readers!)
    if (db.get(writer!) !== token) return 0
    db.del(writer!)
    return 1
  },
  decode: flag
})

/**
 * @internal Restarts the write lease. KEYS[1] the writer, KEYS[2] the readers; ARGV[1] the token,
 * ARGV[2] the lease (ms). Returns 1 or 0.
 */
export const WRITE_EXTEND = defineCall({
  name: "RwLock.writeExtend",
  keys: 2,
  args: 2,
  lua: `${NOW_US}${READERS}prune(KEYS[2], now)
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
`,
  twin: (db, [writer, readers], [token, leaseMs]) => {
    prune(db, readers!)
    if (db.get(writer!) !== token) return 0
    db.pexpire(writer!, leaseMs!)
    return 1
  },
  decode: flag
})

interface Keys {
  readonly name: string
  readonly writer: string
  readonly readers: string
  readonly intent: string
  readonly fence: string
}

class RwLockImpl<Name extends Redis.KeyName> implements RwLock.RwLock<Name> {
  readonly [TypeId]: RwLock.TypeId = TypeId
  readonly label: string
  readonly leaseMillis: string
  constructor(readonly namespace: string, readonly ttl: Duration.Duration) {
    this.label = `RwLock(${namespace})`
    this.leaseMillis = String(toMillis(ttl))
    Object.freeze(this)
  }

  keys(operation: string, name: Name): Either.Either<Keys, Redis.InvalidInput> {
    return Either.map(key.encodeNameOf(this.label, operation, name), (encoded) => ({
      name: encoded,
      writer: key.taggedKey(KIND, this.namespace, encoded, "writer"),
      readers: key.taggedKey(KIND, this.namespace, encoded, "readers"),
      intent: key.taggedKey(KIND, this.namespace, encoded, "intent"),
      fence: key.taggedKey(KIND, this.namespace, encoded, "fence")
    }))
  }

  readonly tryRead = (
    name: Name
  ): Effect.Effect<Option.Option<RwLock.ReadToken>, Redis.RedisError | Redis.InvalidInput, RwLock.Requirements> => {
    const keys = this.keys("tryRead", name)
    if (Either.isLeft(keys)) return Effect.fail(keys.left)
    const { intent, name: encoded, readers, writer } = keys.right
    return access.write(entity, (redis) => {
      // A fresh secret each time the Effect runs, not when it is built: one value may run many times.
      const secret = lease.secret()
      return call(redis, READ, [writer, readers, intent], [secret, this.leaseMillis]).pipe(
        Effect.map((granted) =>
          granted
            ? Option.some(
              new lease.Token(
                "ReadToken",
                this.namespace,
                encoded,
                undefined,
                access.write(entity, (redis) => call(redis, READ_RELEASE, [readers], [secret])),
                access.write(entity, (redis) => call(redis, READ_EXTEND, [readers], [secret, this.leaseMillis]))
              ) as RwLock.ReadToken
            )
            : Option.none()
        )
      )
    })
  }

  /** @internal `intend`: leave a writer intent when refused (a waiting writer). */
  write(
    name: Name,
    operation: string,
    intend: boolean,
    secret: string
  ): Effect.Effect<Option.Option<RwLock.WriteToken>, Redis.RedisError | Redis.InvalidInput, RwLock.Requirements> {
    const keys = this.keys(operation, name)
    if (Either.isLeft(keys)) return Effect.fail(keys.left)
    const { fence, intent, name: encoded, readers, writer } = keys.right
    return access.write(
      entity,
      (redis) =>
        call(redis, WRITE, [writer, readers, intent, fence], [secret, this.leaseMillis, intend ? "1" : "0"]).pipe(
          Effect.map(Option.map((fence): RwLock.WriteToken =>
            new lease.Token(
              "LockToken",
              this.namespace,
              encoded,
              fence,
              access.write(entity, (redis) => call(redis, WRITE_RELEASE, [writer, readers], [secret])),
              access.write(entity, (redis) => call(redis, WRITE_EXTEND, [writer, readers], [secret, this.leaseMillis]))
            ) as RwLock.WriteToken
          ))
        )
    )
  }

  readonly tryWrite = (
    name: Name
  ): Effect.Effect<Option.Option<RwLock.WriteToken>, Redis.RedisError | Redis.InvalidInput, RwLock.Requirements> =>
    Effect.suspend(() => this.write(name, "tryWrite", false, lease.secret()))

  /** @internal Withdraws the intent `secret` may have left. */
  withdraw(name: Name, secret: string): Effect.Effect<void, never, RwLock.Requirements> {
    const keys = this.keys("withdraw", name)
    if (Either.isLeft(keys)) return Effect.void
    return access.write(entity, (redis) => Effect.ignore(call(redis, lease.WITHDRAW, [keys.right.intent], [secret])))
  }

  toString() {
    return `${this.label}: lease ${this.leaseMillis} ms`
  }
}

/** @internal */
export const make = <Name extends Redis.KeyName>(namespace: string, ttl: Duration.DurationInput): RwLock.RwLock<Name> =>
  new RwLockImpl<Name>(key.validateNamespace(KIND, namespace), bounded(ttl, `RwLock(${namespace}) ttl`))

const held = <Name extends Redis.KeyName, T extends lease.Lease<RwLock.Requirements>>(
  rw: RwLock.RwLock<Name>,
  name: Name,
  side: "read" | "write",
  options: Lock.Options | undefined,
  attempt: Effect.Effect<Option.Option<T>, Redis.RedisError | Redis.InvalidInput, RwLock.Requirements>,
  fence: (token: T) => bigint | undefined
) => {
  const label = `RwLock(${rw.namespace}).${side}`
  const renewEvery = keepAlive.every(rw.ttl, options?.renewEvery, "renewEvery")
  const encoded = key.encodeNameOf(`RwLock(${rw.namespace})`, side === "read" ? "withRead" : "withWrite", name)
  if (Either.isLeft(encoded)) return Effect.fail(encoded.left)
  return Effect.flatMap(
    lease.acquire<T, Redis.RedisError | Redis.InvalidInput, RwLock.Requirements>(
      attempt,
      options?.acquire ?? lease.wait(),
      rw.ttl,
      () => new lease.LeaseUnavailable({ lock: label, name: encoded.right })
    ),
    (granted) =>
      lease.hold<T, RwLock.Requirements>(
        granted,
        rw.ttl,
        renewEvery,
        (reason) => new lease.LeaseLost({ lock: label, name: encoded.right, fence: fence(granted.token), reason })
      )
  )
}

/** @internal */
export const scopedRead = <Name extends Redis.KeyName>(
  rw: RwLock.RwLock<Name>,
  name: Name,
  options: Lock.Options | undefined
) => held(rw, name, "read", options, rw.tryRead(name), () => undefined)

/**
 * @internal A waiting writer leaves an intent on each refused attempt, and withdraws it if it does not
 * get in (gives up, fails or is interrupted). Its secret is drawn when the Effect runs.
 */
export const scopedWrite = <Name extends Redis.KeyName>(
  rw: RwLock.RwLock<Name>,
  name: Name,
  options: Lock.Options | undefined
) => {
  // Options are checked now, when the scoped form is applied, as for reads (never inside the Effect).
  keepAlive.every(rw.ttl, options?.renewEvery, "renewEvery")
  return Effect.suspend(() => {
    const impl = rw as RwLockImpl<Name>
    const secret = lease.secret()
    const waits = (options?.acquire ?? lease.wait())._tag === "Wait"
    return held(rw, name, "write", options, impl.write(name, "withWrite", waits, secret), (token) => token.fence).pipe(
      Effect.onError(() => waits ? impl.withdraw(name, secret) : Effect.void)
    )
  })
}

/** @internal */
export const withRead = <Name extends Redis.KeyName, A, E, R>(
  rw: RwLock.RwLock<Name>,
  name: Name,
  options: Lock.Options | undefined,
  effect: Effect.Effect<A, E, R>
) => lease.scopedUse(scopedRead(rw, name, options), effect)

/** @internal */
export const withWrite = <Name extends Redis.KeyName, A, E, R>(
  rw: RwLock.RwLock<Name>,
  name: Name,
  options: Lock.Options | undefined,
  effect: Effect.Effect<A, E, R>
) => lease.scopedUse(scopedWrite(rw, name, options), effect)
