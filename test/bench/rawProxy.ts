/**
 * The proxy benchmark's reference: the least a Node reverse proxy can do, with no Effect, no limiter
 * and no header rewriting: node:http in, `http.request` out on a keep-alive agent, bodies piped both
 * ways. It shows what forwarding alone costs on this machine.
 *
 * `tsx test/bench/rawProxy.ts <port> <upstream URL> [limited [redis URL] | undici]` prints `listening <url>`
 * once ready and runs until SIGTERM or SIGINT. With `limited`, each request first runs `TokenBucket.acquire`
 * (an allow-everything bucket keyed by the socket's address, on the embedded store, or on the Redis at the
 * URL given) on a prepared Effect runtime, as `wakuwaku proxy` does, and nothing else of it: the floor of a
 * Node proxy that asks this limiter. With `undici`, the request goes out over an undici `Pool` (keep-alive)
 * instead of `http.request`, each chunk of the response written straight to the client's: the floor of
 * forwarding as `wakuwaku proxy` does.
 */
import { Effect, Layer, Runtime, Scope } from "effect"
import * as http from "node:http"
import { Pool } from "undici"
import { Rate, Redis, TokenBucket } from "wakuwaku"

const [portArg, upstreamArg, mode, redisUrl] = process.argv.slice(2)
if (portArg === undefined || upstreamArg === undefined) {
  console.error("usage: tsx test/bench/rawProxy.ts <port> <upstream URL>")
  process.exit(2)
}
const upstream = new URL(upstreamArg)
const agent = new http.Agent({ keepAlive: true, maxSockets: Infinity })

const limiter = TokenBucket.make<string>("floor", 1_000_000_000, Rate.make(1_000_000_000, "1 second"))
const store = redisUrl === undefined ? Redis.layerMemory() : Redis.layer({ url: redisUrl })
const runtime = mode === "limited"
  ? await Effect.runPromise(Layer.toRuntime(store).pipe(Scope.extend(Effect.runSync(Scope.make()))))
  : undefined
const pool = mode === "undici" ? new Pool(upstream.origin, { pipelining: 1 }) : undefined

const server = http.createServer((request, response) => {
  if (pool !== undefined) return forwardUndici(pool, request, response)
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
/** GET only (the bench's requests): the client's headers but its Host and Connection, no body. */
const forwardUndici = (pool: Pool, request: http.IncomingMessage, response: http.ServerResponse) => {
  const { connection: _, host: __, ...headers } = request.headers
  let resume: () => void = () => {}
  pool.dispatch({ method: "GET", path: request.url ?? "/", headers }, {
    onConnect: () => {},
    onHeaders: (status, raw, resumeUpstream) => {
      resume = resumeUpstream
      const out: Array<string> = []
      for (let i = 0; i + 1 < raw.length; i += 2) out.push(raw[i]!.toString("latin1"), raw[i + 1]!.toString("latin1"))
      response.writeHead(status, out)
      return true
    },
    onData: (chunk) => response.write(chunk) || (response.once("drain", resume), false),
    onComplete: () => response.end(),
    onError: () => {
      if (!response.headersSent) response.writeHead(502)
      response.end()
    }
  })
}

server.keepAliveTimeout = 60_000
server.listen(Number(portArg), "127.0.0.1", () => console.log(`listening http://127.0.0.1:${portArg}`))
const stop = () => {
  server.close(() => process.exit(0))
  server.closeAllConnections()
}
process.once("SIGTERM", stop)
process.once("SIGINT", stop)
