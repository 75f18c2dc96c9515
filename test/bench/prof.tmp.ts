import { Effect, Layer, Option } from "effect"
import { Lock, Redis, Semaphore } from "wakuwaku"
import { RedisServer } from "wakuwaku/testing"
import { plainClient, processTicks } from "./measure.js"
import { effectContender, type Plan } from "./roundTrips.js"

const plan: Plan = {
  loops: Array.from({ length: 64 }, (_, i) => `n-${i % 16}`),
  throughputOps: 20_000,
  latencyOps: 10,
  rounds: 1
}
const lockPlan: Plan = { ...plan, loops: Array.from({ length: 64 }, (_, i) => `n-${i}`) }
const SEM = Semaphore.make<string>("p", 4, 30_000)
const JOBS = Lock.make<string>("p", 30_000)
const semRt = (name: string) =>
  Effect.flatMap(SEM.tryAcquire(name), (p) => Option.isNone(p) ? Effect.die("no") : Effect.asVoid(SEM.release(p.value)))
const lockRt = (name: string) =>
  Effect.flatMap(JOBS.tryLock(name), (p) => Option.isNone(p) ? Effect.die("no") : Effect.asVoid(p.value.release))
const mode = process.argv[2] ?? "both"
Effect.runPromise(Effect.scoped(Effect.gen(function*() {
  const server = yield* RedisServer.make()
  const env = yield* Layer.build(Redis.layer({ url: server.url }))
  const client = yield* plainClient(server.url)
  const sem = effectContender("sem", plan, env, semRt)
  const lock = effectContender("lock", lockPlan, env, lockRt)
  const sem1 = effectContender("sem, 64 names", lockPlan, env, semRt)
  const list = mode === "sem" ? [sem] : mode === "lock" ? [lock] : [lock, sem, sem1]
  for (let r = 0; r < 12; r++) {
    for (const c of list) {
      yield* Effect.promise(() => client.flushall())
      const cpu = process.cpuUsage()
      const rt = processTicks(server.pid)
      const t = performance.now()
      yield* Effect.promise(() => c.throughput())
      const el = performance.now() - t
      const u = process.cpuUsage(cpu)
      console.log(
        `${c.label}: ${Math.round(20000 / el * 1000)}/s node ${((u.user + u.system) / 20000).toFixed(1)} µs redis ${
          ((processTicks(server.pid) - rt) * 1e4 / 20000).toFixed(1)
        } µs`
      )
    }
  }
}))).catch((e) => {
  console.error(e)
  process.exit(1)
})
