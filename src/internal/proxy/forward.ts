/**
 * @internal The forwarding `HttpApp` of `Proxy.make`: one exchange with the upstream (exchange.ts), its
 * response handed to @effect/platform-node's server as a raw body.
 *
 * The client's body is piped from the raw Node request into an `http.request` on the keep-alive agent of
 * `NodeHttpClient.HttpAgent`, and the upstream's `IncomingMessage` becomes a raw response body, which the
 * platform's Node server pipes into the raw Node response after the middleware has added its headers.
 * Node's streams give backpressure both ways.
 */
import * as NodeHttpClient from "@effect/platform-node/NodeHttpClient"
import * as NodeHttpServerRequest from "@effect/platform-node/NodeHttpServerRequest"
import type * as HttpApp from "@effect/platform/HttpApp"
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Runtime from "effect/Runtime"
import type * as Http from "node:http"
import { Readable } from "node:stream"
import type * as Proxy from "../../Proxy.js"
import {
  exchange,
  failure,
  generatedStatus,
  hasBody,
  lastMember,
  NAME,
  RATE_LIMITED,
  requestHeaders,
  resolve,
  type Resolved,
  responseHead,
  STATUS
} from "./exchange.js"
import { upstreamPath } from "./target.js"

export { STATUS }

/** @internal The short response of a failure; `Proxy-Status` says the proxy made it, and why. */
export const errorResponse = (error: Proxy.ProxyError): HttpServerResponse.HttpServerResponse => {
  const { body, proxyStatus, status } = failure(error)
  return HttpServerResponse.text(body, {
    status,
    headers: { "proxy-status": proxyStatus, "cache-control": "no-store" }
  })
}

/** @internal A response the proxy makes itself, `text/plain`, with its `Proxy-Status` error member. */
export const ownResponse = (status: number, type: string, text: string): HttpServerResponse.HttpServerResponse =>
  HttpServerResponse.text(`${status} ${text}\n`, {
    status,
    headers: { "proxy-status": generatedStatus(type), "cache-control": "no-store" }
  })

/**
 * @internal Marks every response that did not come from the upstream (a 429 of a limiter, an error of a
 * middleware) as this proxy's own, with a `Proxy-Status` member carrying an error type.
 */
export const identify = <E, R>(app: HttpApp.Default<E, R>): HttpApp.Default<E, R> =>
  Effect.map(app, (response) => {
    const proxyStatus = response.headers["proxy-status"]
    if (lastMember(proxyStatus) === NAME) return response
    const type = response.status === 429 ? RATE_LIMITED : "proxy_internal_response"
    const member = generatedStatus(type)
    return HttpServerResponse.setHeader(
      response,
      "proxy-status",
      proxyStatus === undefined || proxyStatus.trim() === "" ? member : `${proxyStatus}, ${member}`
    )
  })

/** @internal */
export const make = (options: Proxy.Options): HttpApp.Default<never, NodeHttpClient.HttpAgent> => {
  const resolved = resolve(options)
  // The server runs apps uninterruptibly; forwarding opts in, so that a timeout or a client that goes away
  // interrupts the upstream request (which aborts it) instead of waiting for it.
  return Effect.flatMap(
    Effect.runtime<HttpServerRequest.HttpServerRequest | NodeHttpClient.HttpAgent>(),
    (runtime) => Effect.interruptible(forward(runtime, resolved))
  )
}

const forward = (
  runtime: Runtime.Runtime<HttpServerRequest.HttpServerRequest | NodeHttpClient.HttpAgent>,
  options: Resolved
): Effect.Effect<HttpServerResponse.HttpServerResponse> => {
  const request = Context.get(runtime.context, HttpServerRequest.HttpServerRequest)
  const agents = Context.get(runtime.context, NodeHttpClient.HttpAgent)
  const source = NodeHttpServerRequest.toIncomingMessage(request)
  if (!(source instanceof Readable)) {
    return Effect.dieMessage(
      "wakuwaku/Proxy: make forwards Node requests: serve it with @effect/platform-node's HTTP server"
    )
  }
  const { upstream } = options
  const path = upstreamPath(upstream, request.url, request.method)
  if (path === undefined) {
    return Effect.succeed(ownResponse(400, "http_request_error", "the request target cannot be forwarded"))
  }
  const withBody = hasBody(source.headers)
  const requestOptions: Http.RequestOptions = {
    protocol: upstream.protocol,
    hostname: upstream.hostname,
    port: upstream.port,
    method: request.method,
    path,
    headers: requestHeaders(source.headers, Option.getOrUndefined(request.remoteAddress), withBody, options),
    agent: upstream.protocol === "https:" ? agents.https : agents.http
  }
  // The limiter in front has decided: now the body may come.
  if (/^100-continue$/i.test(source.headers["expect"] ?? "")) {
    NodeHttpServerRequest.toServerResponse(request).writeContinue()
  }
  return Effect.async<Http.IncomingMessage, Proxy.ProxyError>((resume) => {
    const abort = exchange(
      source,
      withBody,
      requestOptions,
      options,
      (settled) => resume(settled._tag === "Response" ? Effect.succeed(settled.response) : Effect.fail(settled.error))
    )
    return Effect.sync(abort)
  }).pipe(
    Effect.map((response) => respond(runtime, request, response)),
    Effect.catchAll((error) =>
      Effect.as(
        Effect.logWarning(`proxy: ${request.method} ${request.url}: ${STATUS[error.reason].text}`).pipe(
          Effect.annotateLogs({ reason: error.reason, cause: String(error.cause) })
        ),
        errorResponse(error)
      )
    )
  )
}

/**
 * @internal The upstream's response as the server's: its head (exchange.ts), the body the upstream's
 * `IncomingMessage` itself, which the Node server pipes into the client's response once the middleware has
 * added its headers.
 */
const respond = (
  runtime: Runtime.Runtime<never>,
  request: HttpServerRequest.HttpServerRequest,
  response: Http.IncomingMessage
): HttpServerResponse.HttpServerResponse => {
  const { headers: all, status } = responseHead(response.statusCode ?? 502, response.headers)
  const { "set-cookie": setCookie, ...headers } = all
  const client = NodeHttpServerRequest.toServerResponse(request)
  let clientClosed = false
  client.once("close", () => {
    clientClosed = true
    // The client went away, or got another response (a middleware's): release the upstream connection.
    if (!response.complete) response.destroy()
  })
  // A body cut short by the upstream must reach the client cut short: the connection is dropped rather
  // than ended cleanly, which the client would take for a complete body.
  response.once("error", (cause) => {
    if (clientClosed) return
    client.destroy()
    Runtime.runFork(runtime)(
      Effect.logWarning(`proxy: ${request.method} ${request.url}: the upstream's response body failed`, cause)
    )
  })
  const single = headers as Record<string, string>
  let out: HttpServerResponse.HttpServerResponse
  if (request.method === "HEAD" || status === 204 || status === 304) {
    // No body to send; read the (empty) one so that the upstream connection goes back to the pool.
    response.resume()
    out = HttpServerResponse.empty({ status, headers: single })
  } else {
    // No content type is given: no `Content-Type` is added; the upstream's, if any, is in `headers`.
    out = HttpServerResponse.raw(response, { status, headers: single })
  }
  if (setCookie !== undefined && setCookie.length > 0) {
    // One `Set-Cookie` line per cookie: Node's `writeHead` takes an array for a repeated header.
    out = HttpServerResponse.setHeader(out, "set-cookie", (setCookie.length === 1 ? setCookie[0] : setCookie) as string)
  }
  return out
}
