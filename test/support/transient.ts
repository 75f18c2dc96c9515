/**
 * A transient denial, made to happen exactly where a test wants it: the spend of another request's group that
 * is refunded (as a Cluster's split decision refunds the groups that allowed when another denied), seen by the
 * request under test in between.
 */
import { expect } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { Redis } from "wakuwaku"
import * as limits from "../../src/internal/limits.js"

/**
 * The store in context, which makes a transient denial happen: `spendElsewhere` spends `cost` from `limiter` on
 * `name` as another request's allowed group does (Limits.acquire alone on its slot); the next script call of this
 * service that touches that key runs, and right after it returns that other request's refund lands. `calls`: the
 * names of the scripts run through this service, in order.
 */
export const transient = Effect.gen(function*() {
  const redis = yield* Redis.Redis
  let refundAfter: { readonly key: string; readonly refund: Effect.Effect<number, Redis.RedisError> } | undefined
  const calls: Array<string> = []
  const service: Redis.Service = {
    ...redis,
    script: (script, keys, args) => {
      calls.push(script.name)
      const armed = refundAfter
      if (armed === undefined || !keys.includes(armed.key)) return redis.script(script, keys, args)
      refundAfter = undefined
      return Effect.tap(redis.script(script, keys, args), () => Effect.orDie(armed.refund))
    }
  }
  const spendElsewhere = (limiter: limits.AnyLimiter, name: string, cost: number) =>
    Effect.gen(function*() {
      const key = limiter.keyOf("acquire", name) as string
      const spec = limits.specOfLimiter(limiter)
      const spent = yield* redis.script(limits.scripts().acquire, [key], [String(cost), spec])
      expect(spent.allowed).toBe(true)
      refundAfter = {
        key,
        refund: redis.script(limits.scripts().refund, [key], [String(cost), spec, String(spent.starts[0]!)])
      }
    })
  return { layer: Layer.succeed(Redis.Redis, service), calls, spendElsewhere }
})
