import { Effect, Layer, ManagedRuntime } from "effect"
import * as Base from "/tmp/base/dist/index.js"
import { Rate, Redis, Telemetry, TokenBucket } from "wakuwaku"
const N = 100_000
const names = Array.from({ length: 1000 }, (_, i) => `u${i}`)
const mk = (TB: typeof TokenBucket, R: typeof Rate) => {
  const b = TB.make<string>("seq", 1_000_000_000, R.perSecond(1000))
  return Effect.gen(function*() { for (let i = 0; i < N; i++) yield* b.acquire(names[i % 1000]!, 1) })
}
const cases = [
  ["baseline (no hooks)", mk(Base.TokenBucket as any, Base.Rate as any), ManagedRuntime.make((Base.Redis as any).layerMemory() as Layer.Layer<never>)],
  ["off", mk(TokenBucket, Rate), ManagedRuntime.make(Layer.merge(Redis.layerMemory(), Telemetry.layer({ metrics: false })))],
  ["metrics", mk(TokenBucket, Rate), ManagedRuntime.make(Layer.merge(Redis.layerMemory(), Telemetry.layer({ metrics: true })))]
] as const
const res: Array<Array<number>> = cases.map(() => [])
for (let r = 0; r < 12; r++) for (let i = 0; i < cases.length; i++) {
  const c = process.cpuUsage(); await (cases[i]![2] as any).runPromise(cases[i]![1]); const u = process.cpuUsage(c)
  if (r >= 2) res[i]!.push((u.user + u.system) / N)
}
cases.forEach(([n], i) => { const s = [...res[i]!].sort((a, b) => a - b); console.log(n, "min", s[0]!.toFixed(3), "median", s[5]!.toFixed(3)) })
