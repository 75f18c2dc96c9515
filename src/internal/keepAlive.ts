/**
 * @internal Keeping a lease alive: the one renewal loop of every leased thing (Lock and RwLock holders,
 * the Pipe receiver), which also owns the decision that the lease is lost.
 *
 * Every `every`, it renews. The lease is lost when a renewal says it was no longer ours (`Expired`), or
 * when no renewal could be confirmed for a whole `ttl` (`Unconfirmed`: Redis did not answer, or answered
 * too late to prove anything). Each renewal waits no longer than the time the lease has left, as the
 * client's clock counts it from the last confirmation; the client's clock only makes this conservative:
 * the lease itself is Redis's.
 */
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import type * as Scope from "effect/Scope"
import { positive } from "./duration.js"

/** @internal Why a lease was lost. */
export type Lost = "Expired" | "Unconfirmed"

/** @internal The default renewal period: a third of the lease, at least 1 ms. */
export const defaultEvery = (ttl: Duration.Duration): Duration.Duration =>
  Duration.millis(Math.max(1, Math.floor(Duration.toMillis(ttl) / 3)))

/** @internal The renewal period: the option, checked (a `RangeError` names `what`), or a third of the lease. */
export const every = (
  ttl: Duration.Duration,
  option: Duration.DurationInput | undefined,
  what: string
): Duration.Duration => option === undefined ? defaultEvery(ttl) : positive(option, what)

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
  /** Runs once, when the lease is lost; the loop then ends. */
  readonly onLost: (reason: Lost) => Effect.Effect<void>
}

/** @internal The renewal loop, forked in the scope (it stops when the scope closes). */
export const keepAlive = <E, R>(options: Options<E, R>): Effect.Effect<void, never, R | Scope.Scope> => {
  const ttl = Duration.toMillis(options.ttl)
  const every = Duration.toMillis(options.every)
  const loop = Effect.gen(function*() {
    let confirmed = options.since
    while (true) {
      yield* Effect.sleep(options.every)
      const sent = yield* Clock.currentTimeMillis
      // An answer that comes after the lease would have ended proves nothing: wait no longer.
      const left = confirmed + ttl - sent
      const renewed = left <= 0
        ? Option.none()
        : yield* Effect.timeoutOption(Effect.either(options.renew), Duration.millis(left))
      if (Option.isSome(renewed) && renewed.value._tag === "Right") {
        if (!renewed.value.right) return yield* options.onLost("Expired")
        confirmed = sent
      } else if (Option.isNone(renewed) || (yield* Clock.currentTimeMillis) + every >= confirmed + ttl) {
        // No answer in time, or a failure with no time for another try: the lease may run out unseen.
        return yield* options.onLost("Unconfirmed")
      }
    }
  })
  return Effect.asVoid(Effect.forkScoped(loop))
}
