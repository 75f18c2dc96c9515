/**
 * @internal What leased holders (Lock, RwLock, Semaphore) share: lease tokens, the acquisition policy, their
 * two errors, and holding a lease in a scope (release on every exit, renewal in the background by
 * keepAlive.ts, loss detection). A leaf under Lock.ts: it imports the public modules for types only.
 */
import * as Clock from "effect/Clock"
import * as Deferred from "effect/Deferred"
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Inspectable from "effect/Inspectable"
import * as Option from "effect/Option"
import * as Schedule from "effect/Schedule"
import * as Schema from "effect/Schema"
import type * as Scope from "effect/Scope"
import { randomFillSync } from "node:crypto"
import type * as Lock from "../Lock.js"
import type * as Redis from "../Redis.js"
import { positive } from "./duration.js"
import { keepAlive } from "./keepAlive.js"
import { defineCall, flag } from "./script.js"

/** @internal */
export class LeaseUnavailable extends Schema.TaggedError<Lock.LeaseUnavailable>("wakuwaku/LeaseUnavailable")(
  "LeaseUnavailable",
  { lock: Schema.String, name: Schema.String }
) {
  override get message(): string {
    return `${this.lock} ${JSON.stringify(this.name)} is held by someone else`
  }
}

/** @internal */
export const LeaseLostReason: Lock.LeaseLostReasonSchema = Schema.Literal("Expired", "Unconfirmed")

/** @internal */
export class LeaseLost extends Schema.TaggedError<Lock.LeaseLost>("wakuwaku/LeaseLost")("LeaseLost", {
  lock: Schema.String,
  name: Schema.String,
  fence: Schema.UndefinedOr(Schema.BigInt),
  reason: LeaseLostReason
}) {
  override get message(): string {
    return `${this.lock} ${JSON.stringify(this.name)} was lost while held (${this.reason})`
  }
}

/**
 * @internal Withdraws a waiter's intent, as RwLock's writers and Semaphore's waiters for n > 1 leave one.
 * KEYS[1] the intent; ARGV[1] what the waiter left there (a token, or a member `<n>:<token>`). Returns 1 or 0.
 */
export const WITHDRAW = defineCall({
  name: "Lease.withdraw",
  keys: 1,
  args: 1,
  lua: `if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
return 1
`,
  twin: (db, [intent], [left]) => {
    if (db.get(intent!) !== left) return 0
    db.del(intent!)
    return 1
  },
  decode: flag
})

/** @internal `Lock.wait`, its deadline checked now. */
export const wait = (options: {
  readonly schedule?: Schedule.Schedule<unknown> | undefined
  readonly deadline?: Duration.DurationInput | undefined
} = {}): Lock.Acquire => ({
  _tag: "Wait",
  ...options,
  ...(options.deadline === undefined ? {} : { deadline: positive(options.deadline, "Lock.wait deadline") })
})
import * as telemetry from "./telemetry.js"

/**
 * @internal A fresh token: 128 random bits from `crypto`, base64url. Drawn from a pool refilled 4 KiB
 * at a time, as `crypto.randomUUID` does: a `randomBytes` call per token costs far more (docs/performance.md,
 * "Figures behind design choices").
 */
export const secret = (): string => {
  if (poolAt + 16 > pool.length) {
    randomFillSync(pool)
    poolAt = 0
  }
  poolAt += 16
  return pool.toString("base64url", poolAt - 16, poolAt)
}
const pool = Buffer.alloc(4096)
let poolAt = pool.length

/** @internal Something held under a lease. */
export interface Lease<R> {
  readonly release: Effect.Effect<boolean, Redis.RedisError, R>
  readonly extend: Effect.Effect<boolean, Redis.RedisError, R>
}

/**
 * @internal The default wait: jittered exponential backoff from 10 ms, each pause at most 200 ms (capped after the
 * jitter).
 */
export const backoff: Schedule.Schedule<unknown> = Schedule.exponential("10 millis").pipe(
  Schedule.jittered,
  Schedule.union(Schedule.spaced("200 millis"))
)

class Busy {
  readonly _tag = "Busy"
}

/**
 * @internal Acquires in the scope, as the policy says: `attempt` once, or following the policy's
 * schedule until its deadline. A successful attempt registers its release in the scope in the same
 * uninterruptible step; the waits between attempts can be interrupted.
 */
export const acquire = <T extends Lease<R>, E, R>(
  attempt: Effect.Effect<Option.Option<T>, E, R>,
  policy: Lock.Acquire,
  ttl: Duration.Duration,
  unavailable: () => Lock.LeaseUnavailable
): Effect.Effect<Granted<T>, E | Lock.LeaseUnavailable, R | Scope.Scope> => {
  const once = Effect.uninterruptible(
    Effect.flatMap(Clock.currentTimeMillis, (sent) =>
      Effect.flatMap(attempt, (token) =>
        Option.isSome(token)
          ? Effect.as(Effect.addFinalizer(() => release(token.value, ttl)), { token: token.value, sent })
          : Effect.fail(new Busy())))
  )
  const tried = policy._tag === "Try"
    ? once
    : Effect.retry(once, {
      schedule: (policy.schedule ?? backoff).pipe(Schedule.upTo(policy.deadline ?? ttl)),
      while: (error) => error instanceof Busy
    })
  const result = Effect.catchIf(
    tried,
    (error): error is Busy => error instanceof Busy,
    () => Effect.fail(unavailable())
  )
  return telemetry.leaseAcquire(() => unavailable().lock, result)
}

/**
 * The release when the scope closes. Waiting longer than a lease for a server that does not answer
 * would be pointless (the lease has run out by then), so the wait is bounded by one.
 */
const release = <R>(token: Lease<R>, ttl: Duration.Duration) =>
  token.release.pipe(Effect.interruptible, Effect.timeout(ttl), Effect.ignore)

/** @internal A granted lease, and the client time just before the request that got it was sent. */
export interface Granted<T> {
  readonly token: T
  readonly sent: number
}

/**
 * @internal A lease held in a scope, and an Effect that fails with LeaseLost once the lease is lost: an `Exit`
 * when it was lost before it was handed over (its grant came after it would have ended).
 */
export interface Held<T> {
  readonly token: T
  readonly lost: Effect.Effect<never, Lock.LeaseLost>
}

/**
 * @internal Keeps `token` held until the scope closes: renews it every `renewEvery` (keepAlive.ts), and
 * fails `lost` once the lease is lost.
 */
export const hold = <T extends Lease<R>, R>(
  granted: Granted<T>,
  ttl: Duration.Duration,
  renewEvery: Duration.Duration,
  lostError: (reason: Lock.LeaseLost["reason"]) => Lock.LeaseLost
): Effect.Effect<Held<T>, never, R | Scope.Scope> =>
  Effect.gen(function*() {
    const { token } = granted
    const lost = yield* Deferred.make<never, Lock.LeaseLost>()
    const traced = yield* telemetry.leaseHold(() => lostError("Expired").lock)
    const early = yield* keepAlive({
      ttl,
      every: renewEvery,
      since: granted.sent,
      renew: token.extend,
      onLost: (reason) =>
        Effect.zipRight(Effect.sync(() => telemetry.leaseLost(traced, reason)), Deferred.fail(lost, lostError(reason)))
    })
    if (early !== undefined) telemetry.leaseLost(traced, early)
    return { token, lost: early === undefined ? Deferred.await(lost) : Exit.fail(lostError(early)) }
  })

/**
 * @internal Runs `effect` while the lease is held; a lost lease interrupts it and fails with LeaseLost. One
 * lost before it was handed over fails at once: `effect` does not start.
 */
export const using = <A, E, R>(
  held: { readonly lost: Effect.Effect<never, Lock.LeaseLost> },
  effect: Effect.Effect<A, E, R>
): Effect.Effect<A, E | Lock.LeaseLost, R> => Exit.isExit(held.lost) ? held.lost : Effect.raceFirst(effect, held.lost)

/** @internal A token: its secret lives only in the closures of `release` and `extend`. */
export class Token<R> implements Lease<R>, Inspectable.Inspectable {
  constructor(
    readonly kind: string,
    readonly namespace: string,
    readonly name: string,
    readonly fence: bigint | undefined,
    readonly release: Effect.Effect<boolean, Redis.RedisError, R>,
    readonly extend: Effect.Effect<boolean, Redis.RedisError, R>
  ) {
    Object.freeze(this)
  }
  toJSON() {
    return this.fence === undefined
      ? { _id: this.kind, namespace: this.namespace, name: this.name }
      : { _id: this.kind, namespace: this.namespace, name: this.name, fence: String(this.fence) }
  }
  toString() {
    return `${this.kind}(${this.namespace}:${this.name}${this.fence === undefined ? "" : `, fence ${this.fence}`})`
  }
  [Inspectable.NodeInspectSymbol]() {
    return this.toJSON()
  }
}

/** @internal Runs `effect` in a scope while the lease that `held` acquires is held. */
export const scopedUse = <T, A, E, R, E2, R2>(
  held: Effect.Effect<Held<T>, E2, R2>,
  effect: Effect.Effect<A, E, R>
): Effect.Effect<A, E | E2 | Lock.LeaseLost, R | Exclude<R2, Scope.Scope>> =>
  Effect.scoped(Effect.flatMap(held, (held) => using(held, effect)))
