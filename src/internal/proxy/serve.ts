/** @internal Running an app on a Node HTTP server, with a graceful, bounded shutdown. */
import * as NodeHttpClient from "@effect/platform-node/NodeHttpClient"
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import type * as HttpApp from "@effect/platform/HttpApp"
import * as HttpServer from "@effect/platform/HttpServer"
import type * as HttpServerError from "@effect/platform/HttpServerError"
import type * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schedule from "effect/Schedule"
import type * as Scope from "effect/Scope"
import * as Http from "node:http"
import type * as Proxy from "../../Proxy.js"
import { identify } from "./forward.js"

/**
 * @internal The agents the proxy forwards over: node:http and node:https keep-alive agents, so connections
 * to the upstream are reused; destroyed (their sockets closed) when the layer's scope closes.
 */
export const layerClient: Layer.Layer<NodeHttpClient.HttpAgent> = NodeHttpClient.makeAgentLayer({ keepAlive: true })

/**
 * @internal Stops accepting, closes idle connections (again and again, as in-flight responses finish and
 * leave their keep-alive connections idle), and after `grace` drops whatever is still open.
 */
const drain = (server: Http.Server, grace: Duration.Duration): Effect.Effect<void> =>
  Effect.gen(function*() {
    if (!server.listening) return
    const closed = Effect.async<void>((resume) => {
      server.close(() => resume(Effect.void))
    })
    // Repeats until the race ends: in-flight responses that finish leave keep-alive connections idle.
    const closeIdle = Effect.sync(() => server.closeIdleConnections()).pipe(Effect.repeat(Schedule.spaced("20 millis")))
    const dropAll = Effect.sleep(grace).pipe(Effect.zipRight(Effect.sync(() => server.closeAllConnections())))
    // Only `closed` succeeds; the others run beside it until it does.
    yield* Effect.raceAll([closed, Effect.zipRight(closeIdle, Effect.never), Effect.zipRight(dropAll, Effect.never)])
  })

/** @internal */
export const serve = <E, R>(
  app: HttpApp.Default<E, R>,
  options: Proxy.ServeOptions
): Layer.Layer<
  HttpServer.HttpServer,
  HttpServerError.ServeError,
  Exclude<R, NodeHttpClient.HttpAgent | HttpServerRequest.HttpServerRequest | Scope.Scope>
> =>
  Layer.scoped(
    HttpServer.HttpServer,
    Effect.gen(function*() {
      const grace = Duration.decode(options.shutdownTimeout ?? "10 seconds")
      const server = Http.createServer()
      const listen = options.host === undefined ? { port: options.port } : { port: options.port, host: options.host }
      const httpServer = yield* NodeHttpServer.make(() => server, listen)
      yield* httpServer.serve(identify(app))
      // Added last, so it runs first on shutdown: in-flight requests finish before the handler goes.
      yield* Effect.addFinalizer(() => drain(server, grace))
      return httpServer
    })
  ).pipe(Layer.provide(layerClient)) as Layer.Layer<
    HttpServer.HttpServer,
    HttpServerError.ServeError,
    // The same set as the nested `Exclude`s the compiler computes, which it cannot prove equal for a generic R.
    Exclude<R, NodeHttpClient.HttpAgent | HttpServerRequest.HttpServerRequest | Scope.Scope>
  >
