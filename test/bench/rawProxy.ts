/**
 * The proxy benchmark's reference: the least a Node reverse proxy can do, with no Effect, no limiter
 * and no header rewriting: node:http in, `http.request` out on a keep-alive agent, bodies piped both
 * ways. It shows what forwarding alone costs on this machine.
 *
 * `tsx test/bench/rawProxy.ts <port> <upstream URL> [limited]` prints `listening <url>` once ready and runs
 * until SIGTERM or SIGINT. With `limited`, each request first runs `TokenBucket.acquire` (an allow-everything
 * bucket on the embedded store, keyed by the socket's address) on a prepared Effect runtime, as
 * `wakuwaku proxy` does, and nothing else of it: the floor of a Node proxy that asks this limiter.
 */
import { Effect, Layer, Runtime, Scope } from "effect"
import * as http from "node:http"
import { Rate, Redis, TokenBucket } from "wakuwaku"

const [portArg, upstreamArg, mode] = process.argv.slice(2)
if (portArg === undefined || upstreamArg === undefined) {
  console.error("usage: tsx test/bench/rawProxy.ts <port> <upstream URL>")
  process.exit(2)
}
const upstream = new URL(upstreamArg)
const agent = new http.Agent({ keepAlive: true, maxSockets: Infinity })

const limiter = TokenBucket.make<string>("floor", 1_000_000_000, Rate.make(1_000_000_000, "1 second"))
const runtime = mode === "limited"
  ? await Effect.runPromise(Layer.toRuntime(Redis.layerMemory()).pipe(Scope.extend(Effect.runSync(Scope.make()))))
  : undefined

const server = http.createServer((request, response) => {
  if (runtime === undefined) return forward(request, response)
  Runtime.runCallback(runtime)(limiter.acquire(request.socket.remoteAddress ?? "unknown", 1), {
    onExit: () => forward(request, response)
  })
})

const forward = (request: http.IncomingMessage, response: http.ServerResponse) => {
  const forward = http.request(
    {
      host: upstream.hostname,
      port: upstream.port,
      method: request.method,
      path: request.url,
      headers: request.headers,
      agent
    },
    (reply) => {
      response.writeHead(reply.statusCode ?? 502, reply.headers)
      reply.pipe(response)
    }
  )
  forward.on("error", () => {
    response.writeHead(502)
    response.end()
  })
  request.pipe(forward)
}
server.keepAliveTimeout = 60_000
server.listen(Number(portArg), "127.0.0.1", () => console.log(`listening http://127.0.0.1:${portArg}`))
const stop = () => {
  server.close(() => process.exit(0))
  server.closeAllConnections()
}
process.once("SIGTERM", stop)
process.once("SIGINT", stop)
