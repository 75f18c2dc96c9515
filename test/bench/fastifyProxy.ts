/**
 * The proxy benchmark's Node contender: what a TypeScript team would install instead of `wakuwaku proxy`,
 * fastify 5 with @fastify/rate-limit (per client IP, an allow-everything limit, so every request is counted
 * and allowed) and @fastify/http-proxy (undici, keep-alive) in front of one upstream.
 *
 * `tsx test/bench/fastifyProxy.ts <port> <upstream URL> [redis URL]`: with a Redis URL, @fastify/rate-limit
 * keeps its counters there (ioredis); otherwise in memory. Prints `listening <url>` once ready; runs until
 * SIGTERM or SIGINT.
 */
import proxy from "@fastify/http-proxy"
import rateLimit from "@fastify/rate-limit"
import fastify from "fastify"
import { Redis } from "ioredis"

const [portArg, upstream, redisUrl] = process.argv.slice(2)
if (portArg === undefined || upstream === undefined) {
  console.error("usage: tsx test/bench/fastifyProxy.ts <port> <upstream URL> [redis URL]")
  process.exit(2)
}
const redis = redisUrl === undefined ? undefined : new Redis(redisUrl)
const app = fastify({ logger: false })
await app.register(rateLimit, {
  max: 1_000_000_000,
  timeWindow: 1000,
  ...(redis === undefined ? {} : { redis })
})
await app.register(proxy, { upstream })
await app.listen({ port: Number(portArg), host: "127.0.0.1" })
console.log(`listening http://127.0.0.1:${portArg}`)
const stop = () => {
  void app.close().then(() => {
    redis?.disconnect()
    process.exit(0)
  })
}
process.once("SIGTERM", stop)
process.once("SIGINT", stop)
