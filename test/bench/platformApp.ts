/**
 * The middleware's benchmark: one @effect/platform-node `HttpServer` app answering a fixed text, with or
 * without `RateLimit.middleware` (an allow-everything token bucket per client IP on the embedded store), so
 * that the middleware's CPU per request is the difference of the two.
 *
 * `tsx test/bench/platformApp.ts <port> plain|limited|acquire`. `acquire`: the app runs
 * `TokenBucket.acquire` itself before answering, and nothing else of the middleware: the floor of any
 * middleware that asks this limiter. Prints `listening <url>` once ready; runs until SIGTERM or SIGINT.
 */
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as HttpMiddleware from "@effect/platform/HttpMiddleware"
import * as HttpServer from "@effect/platform/HttpServer"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import { Console, Effect, Layer } from "effect"
import { createServer } from "node:http"
import { Rate, Redis, TokenBucket } from "wakuwaku"
import { RateLimit } from "wakuwaku/http"

const [portArg, mode] = process.argv.slice(2)
if (portArg === undefined || (mode !== "plain" && mode !== "limited" && mode !== "acquire")) {
  console.error("usage: tsx test/bench/platformApp.ts <port> plain|limited|acquire")
  process.exit(2)
}
const hello = Effect.succeed(HttpServerResponse.text("hello, world\n"))
const limiter = TokenBucket.make<string>("bench", 1_000_000_000, Rate.make(1_000_000_000, "1 second"))
const app = mode === "plain"
  ? hello
  : mode === "acquire"
  ? Effect.zipRight(limiter.acquire("127.0.0.1", 1), hello)
  : RateLimit.middleware({ limiter, onStoreFailure: "fail-closed" })(hello)

HttpServer.serve(app).pipe(
  // No tracer is installed: the server's span per request would be made for nothing, in both apps alike.
  HttpMiddleware.withTracerDisabledWhen(() => true),
  Layer.provide(NodeHttpServer.layer(() => createServer(), { port: Number(portArg), host: "127.0.0.1" })),
  Layer.provide(Redis.layerMemory()),
  Layer.tap(() => Console.log(`listening http://127.0.0.1:${portArg}`)),
  Layer.launch,
  NodeRuntime.runMain
)
