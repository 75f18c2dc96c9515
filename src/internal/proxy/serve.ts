/** @internal Running an app on a Node HTTP server, with a graceful, bounded shutdown. */
import * as NodeHttpClient from "@effect/platform-node/NodeHttpClient"
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import * as NodeHttpServerRequest from "@effect/platform-node/NodeHttpServerRequest"
import type * as HttpApp from "@effect/platform/HttpApp"
import * as HttpServer from "@effect/platform/HttpServer"
import type * as HttpServerError from "@effect/platform/HttpServerError"
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import type * as Scope from "effect/Scope"
import * as Http from "node:http"
import type * as Proxy from "../../Proxy.js"
import { hasBody, NAME } from "./exchange.js"
import { identify, ownResponse } from "./forward.js"
import { configure, drain, malformed, MAX_HEADER_LINES, refuseBody, tooManyLines } from "./server.js"

/**
 * @internal The agents the proxy forwards over: node:http and node:https keep-alive agents, so connections
 * to the upstream are reused; destroyed (their sockets closed) when the layer's scope closes.
 */
export const layerClient: Layer.Layer<NodeHttpClient.HttpAgent> = NodeHttpClient.makeAgentLayer({ keepAlive: true })

/**
 * @internal The checks of the proxy's own server (server.ts) around an app: too many header lines is a 431, and
 * a request that is not HTTP/1.x or has two `Host` lines a 400, before the app runs; a response not from the
 * upstream that leaves the request body unread closes the connection.
 */
const guard = <E, R>(app: HttpApp.Default<E, R>): HttpApp.Default<E, R> =>
  Effect.flatMap(HttpServerRequest.HttpServerRequest, (request) => {
    const source = NodeHttpServerRequest.toIncomingMessage(request)
    const response = NodeHttpServerRequest.toServerResponse(request)
    if (tooManyLines(source, MAX_HEADER_LINES)) {
      refuseBody(source, response)
      return Effect.succeed(
        ownResponse(431, "http_request_error", `the request has more than ${MAX_HEADER_LINES} header lines`)
      )
    }
    if (malformed(source)) {
      // refuseBody closes the connection too: the request's framing is not to be trusted.
      refuseBody(source, response)
      return Effect.succeed(ownResponse(400, "http_request_error", "the request is not valid HTTP/1.1"))
    }
    return Effect.map(identify(app), (out) => {
      const fromUpstream = (out.headers["proxy-status"] ?? "").includes(`${NAME}; received-status=`)
      if (!fromUpstream && !source.complete && hasBody(source.headers)) refuseBody(source, response)
      return out
    })
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
      configure(server)
      // The app decides before the body is invited: the forwarding sends `100 Continue` (forward.ts).
      server.on("checkContinue", (request, response) => server.emit("request", request, response))
      const listen = options.host === undefined ? { port: options.port } : { port: options.port, host: options.host }
      const httpServer = yield* NodeHttpServer.make(() => server, listen)
      yield* httpServer.serve(guard(app))
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
