/**
 * @internal Keeping a lease alive: the one renewal loop of every leased thing (Lock, RwLock and Semaphore
 * holders, the Pipe receiver), which also owns the decision that the lease is lost.
 *
 * The lease's end is counted on the client's clock, from when the request that took it, or the last
 * renewal confirmed, was sent: the server started it no earlier, so the holder stops before the server
 * can grant it to anyone else. The loop never sleeps past that end. A renewal is due `every` after the
 * last confirmed one was sent (so a slow answer brings the next one forward), or `every` after one that
 * failed; each waits no longer than the time left. The lease is lost when a renewal says it was no longer
 * ours (`Expired`), or when its end comes with none confirmed (`Unconfirmed`: Redis did not answer, or
 * refused, or answered too late to prove anything), at that end.
 */
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import type * as Scope from "effect/Scope"
import { positive, toMillis } from "./duration.js"

/** @internal Why a lease was lost. */
export type Lost = "Expired" | "Unconfirmed"

/** @internal The default renewal period: a third of the lease (as Redis holds it: whole ms, at least 1). */
export const defaultEvery = (ttl: Duration.Duration): Duration.Duration => Duration.millis(toMillis(ttl) / 3)

/**
 * @internal The renewal period: the option, checked, or a third of the lease. A `RangeError` names `what`
 * unless it is a duration longer than zero and shorter than half the lease: a renewal that fails (sent
 * `every` after the grant) can then be tried again (`every` later) before the lease ends.
 */
export const every = (
  ttl: Duration.Duration,
  option: Duration.DurationInput | undefined,
  what: string
): Duration.Duration => {
  if (option === undefined) return defaultEvery(ttl)
  const period = positive(option, what)
  const lease = Duration.millis(toMillis(ttl))
  if (Duration.toMillis(period) * 2 >= Duration.toMillis(lease)) {
    throw new RangeError(
      `wakuwaku: ${what} must be shorter than half the lease (${Duration.format(lease)}), so that a failed ` +
        `renewal can be retried before the lease ends; got ${Duration.format(period)}`
    )
  }
  return period
}

/** @internal */
export interface Options<E, R> {
  readonly ttl: Duration.Duration
  readonly every: Duration.Duration
  /**
   * The client's time (ms) just before the request that took the lease was sent: the lease ran from then, at the
   * latest.
   */
  readonly since: number
  /** Restarts the lease: true when renewed, false when it was no longer ours. */
  readonly renew: Effect.Effect<boolean, E, R>
  /** Runs once, when the lease is lost while the loop runs; the loop then ends. */
  readonly onLost: (reason: Lost) => Effect.Effect<void>
}

/**
 * @internal Keeps the lease alive: the renewal loop, forked in the scope (it stops when the scope closes).
 * A grant answered after its lease would have ended is lost already, before anything runs under it: then
 * no loop starts, `onLost` is not called, and the reason is returned for the caller to act on at once
 * (else undefined).
 */
export const keepAlive = <E, R>(options: Options<E, R>): Effect.Effect<Lost | undefined, never, R | Scope.Scope> =>
  Effect.flatMap(Clock.currentTimeMillis, (now) =>
    now >= options.since + toMillis(options.ttl)
      ? Effect.succeed("Unconfirmed" as const)
      : Effect.as(Effect.forkScoped(renewals(options)), undefined))

const renewals = <E, R>(options: Options<E, R>): Effect.Effect<void, never, R> =>
  Effect.gen(function*() {
    const ttl = toMillis(options.ttl)
    const every = Duration.toMillis(options.every)
    let confirmed = options.since
    let due = confirmed + every
    while (true) {
      const end = confirmed + ttl
      const now = yield* Clock.currentTimeMillis
      if (now >= end) return yield* options.onLost("Unconfirmed")
      // Never asleep past the end. A renewal due only then could confirm nothing: the lease ends instead.
      if (now < due || due >= end) {
        yield* Effect.sleep(Duration.millis(Math.min(due, end) - now))
        continue
      }
      // An answer that comes after the end would prove nothing in time: wait no longer.
      const renewed = yield* Effect.timeoutOption(Effect.either(options.renew), Duration.millis(end - now))
      if (Option.isNone(renewed)) {
        due = end
      } else if (Either.isRight(renewed.value)) {
        if (!renewed.value.right) return yield* options.onLost("Expired")
        confirmed = now
        due = now + every
      } else {
        // Refused or failed: try again a period later (if that is before the end).
        due = (yield* Clock.currentTimeMillis) + every
      }
    }
  })
