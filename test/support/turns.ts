/**
 * Turns of throttled calls on the server's clock, for the tests of the throttle's bound: which
 * reservation a throttled effect runs under, its turn, and the bound checked over every window.
 */
import { Effect, FiberRef, Layer } from "effect"
import { Redis, type TokenBucket } from "wakuwaku"

/** The Granted this fiber's last `TokenBucket.reserve` replied, as {@link recordingGrants} records it. */
export const lastGrant = FiberRef.unsafeMake<TokenBucket.Granted | undefined>(undefined)

/**
 * The `Redis` service in context, recording on each fiber the Granted its reservations reply: a throttled
 * effect runs on the fiber that reserved, so it reads its own reservation from {@link lastGrant}.
 */
export const recordingGrants: Layer.Layer<Redis.Redis, never, Redis.Redis> = Layer.effect(
  Redis.Redis,
  Effect.map(Redis.Redis, (redis): Redis.Service => ({
    ...redis,
    script: (script, keys, args) =>
      script.name === "TokenBucket.reserve"
        ? Effect.tap(redis.script(script, keys, args), (reply) => {
          const reservation = reply as TokenBucket.Reservation
          return reservation._tag === "Granted" ? FiberRef.set(lastGrant, reservation) : Effect.void
        })
        : redis.script(script, keys, args)
  }))
)

/**
 * When a reservation may start: the server time (µs) when the refill has paid its debt, its turn, or
 * when it was granted if it owed nothing.
 */
export const startOf = (bucket: TokenBucket.TokenBucket<never>, granted: TokenBucket.Granted): number =>
  granted.grantedAt + Math.max(0, -granted.level) * bucket.rate.periodMicros / bucket.rate.tokens

/**
 * The worst window of `turns` (server µs, any order): the most that the calls starting in [t_i, t_j]
 * exceed capacity + rate × (t_j − t_i) by, over every pair of starts (≤ 0: the bound holds everywhere).
 * A µs of slack forgives the rounding of a turn (a quarter of a µs at today's epoch), never a token.
 */
export const worstWindow = (
  turns: ReadonlyArray<number>,
  bucket: TokenBucket.TokenBucket<never>
): { readonly excess: number; readonly from: number; readonly to: number; readonly starts: number } => {
  const sorted = [...turns].sort((a, b) => a - b)
  const perMicro = bucket.rate.tokens / bucket.rate.periodMicros
  let worst = { excess: -Infinity, from: 0, to: 0, starts: 0 }
  for (let i = 0; i < sorted.length; i++) {
    for (let j = i; j < sorted.length; j++) {
      const excess = j - i + 1 - (bucket.capacity + perMicro * (sorted[j]! - sorted[i]! + 1))
      if (excess > worst.excess) worst = { excess, from: sorted[i]!, to: sorted[j]!, starts: j - i + 1 }
    }
  }
  return worst
}
