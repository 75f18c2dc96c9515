/**
 * @internal The forwarding app of the reverse proxy: one request to the upstream, its response back.
 *
 * It forwards with node:http itself rather than @effect/platform's `HttpClient`, which cost about
 * 0.84 ms of CPU per request here (docs/http.md, "Overhead"): the client's body is piped from the raw
 * Node request into an `http.request` on the keep-alive agent of `NodeHttpClient.HttpAgent`, and the
 * upstream's `IncomingMessage` becomes a raw response body, which the platform's Node server pipes into
 * the raw Node response after the middleware has added its headers. Node's streams give backpressure
 * both ways. (An Effect `Stream` response body, `HttpServerResponse.stream`, measured about 0.35 ms
 * more per request than the raw one.)
 */
import * as NodeHttpClient from "@effect/platform-node/NodeHttpClient"
import * as NodeHttpServerRequest from "@effect/platform-node/NodeHttpServerRequest"
import type * as HttpApp from "@effect/platform/HttpApp"
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Runtime from "effect/Runtime"
import * as Http from "node:http"
import * as Https from "node:https"
import { Readable } from "node:stream"
import * as Proxy from "../../Proxy.js"
import { positive } from "../duration.js"
import { trustList } from "../http/address.js"
import { endToEnd, normalizeAddress } from "./headers.js"
import { parseUpstream, type Upstream, upstreamPath } from "./target.js"

/** @internal The name this proxy gives itself in `Proxy-Status` (RFC 9209). */
export const NAME = "wakuwaku"

/** @internal The RFC 9209 error type and the response status of each reason. */
export const STATUS: Record<
  Proxy.ProxyErrorReason,
  { readonly status: number; readonly type: string; readonly text: string }
> = {
  Refused: { status: 502, type: "connection_refused", text: "the upstream refused the connection" },
  Reset: { status: 502, type: "connection_terminated", text: "the upstream closed the connection without a response" },
  Unresolved: { status: 502, type: "dns_error", text: "the upstream's host name did not resolve" },
  Unreachable: { status: 502, type: "destination_unavailable", text: "the upstream could not be reached" },
  Protocol: { status: 502, type: "http_protocol_error", text: "the upstream's response was not valid HTTP" },
  ConnectTimeout: { status: 504, type: "connection_timeout", text: "connecting to the upstream timed out" },
  Timeout: { status: 504, type: "http_response_timeout", text: "the upstream did not respond in time" },
  RequestBody: { status: 400, type: "http_request_error", text: "the request body could not be read" }
}

const codeOf = (cause: unknown): string | undefined => {
  if (typeof cause !== "object" || cause === null) return undefined
  const code = (cause as { readonly code?: unknown }).code
  if (typeof code === "string") return code
  // AggregateError (happy eyeballs) and wrapped causes.
  const inner = cause as { readonly cause?: unknown; readonly errors?: ReadonlyArray<unknown> }
  return codeOf(inner.cause) ?? (Array.isArray(inner.errors) ? codeOf(inner.errors[0]) : undefined)
}

/** @internal Sorts a failure of the upstream request (a Node error, by its `code`) into a reason. */
export const classify = (cause: unknown): Proxy.ProxyError => {
  const code = codeOf(cause) ?? ""
  const reason: Proxy.ProxyErrorReason = code === "ECONNREFUSED"
    ? "Refused"
    : code === "ECONNRESET" || code === "EPIPE" || code === "ECONNABORTED"
    ? "Reset"
    : code === "ENOTFOUND" || code === "EAI_AGAIN" || code === "EAI_NONAME"
    ? "Unresolved"
    : code === "EHOSTUNREACH" || code === "ENETUNREACH" || code === "EADDRNOTAVAIL" || code === "EHOSTDOWN"
    ? "Unreachable"
    : code === "ETIMEDOUT" || code === "UND_ERR_CONNECT_TIMEOUT"
    ? "ConnectTimeout"
    : "Protocol"
  return new Proxy.ProxyError({ reason, cause })
}

/** @internal The `Proxy-Status` member of a response this proxy made itself. */
export const generatedStatus = (type: string, details?: string): string =>
  `${NAME}; error=${type}${details === undefined ? "" : `; details=${JSON.stringify(details)}`}`

/** @internal The short response of a failure; `Proxy-Status` says the proxy made it, and why. */
export const errorResponse = (error: Proxy.ProxyError): HttpServerResponse.HttpServerResponse => {
  const { status, text, type } = STATUS[error.reason]
  const code = codeOf(error.cause)
  return HttpServerResponse.text(`${status} ${text}\n`, {
    status,
    headers: { "proxy-status": generatedStatus(type, code), "cache-control": "no-store" }
  })
}

/** @internal Appends a member to a `Proxy-Status` value, after those of the intermediaries nearer the origin. */
const appendMember = (existing: string | undefined, member: string): string =>
  existing === undefined || existing.trim() === "" ? member : `${existing}, ${member}`

/** @internal The last member's name in a `Proxy-Status` value (the one nearest the client). */
const lastMember = (value: string | undefined): string | undefined => value?.split(",").at(-1)?.split(";")[0]?.trim()

/**
 * @internal Marks every response that did not come from the upstream (a 429 of a limiter, an error of a
 * middleware) as this proxy's own, with a `Proxy-Status` member carrying an error type.
 */
export const identify = <E, R>(app: HttpApp.Default<E, R>): HttpApp.Default<E, R> =>
  Effect.map(app, (response) => {
    const proxyStatus = response.headers["proxy-status"]
    if (lastMember(proxyStatus) === NAME) return response
    const type = response.status === 429 ? "http_request_denied" : "proxy_internal_response"
    return HttpServerResponse.setHeader(response, "proxy-status", appendMember(proxyStatus, generatedStatus(type)))
  })

/** @internal Options of {@link make}, resolved. */
interface Resolved {
  readonly upstream: Upstream
  readonly timeout: Duration.Duration
  /** `timeout` for `setTimeout`: whole milliseconds, at least 1, at most 2^31 - 1 (about 24.8 days). */
  readonly timeoutMs: number
  readonly trusted: (address: string) => boolean
}

/** @internal Whether the peer is a trusted proxy: listed, or any peer when a hop count above 0 is given. */
const trustedPeer = (trusted: ReadonlyArray<string> | number | undefined): (address: string) => boolean => {
  if (typeof trusted === "number") {
    if (!Number.isSafeInteger(trusted) || trusted < 0) {
      throw new RangeError(`wakuwaku/Proxy: trustedProxies must be a list or a hop count of 0 or more, got ${trusted}`)
    }
    return () => trusted > 0
  }
  try {
    return trustList(trusted ?? [])
  } catch (error) {
    throw new RangeError(`wakuwaku/Proxy: trustedProxies: ${(error as Error).message}`)
  }
}

/** @internal */
export const make = (options: Proxy.Options): HttpApp.Default<never, NodeHttpClient.HttpAgent> => {
  let upstream: Upstream
  try {
    upstream = parseUpstream(options.upstream)
  } catch (error) {
    throw new TypeError(`wakuwaku/Proxy: ${(error as Error).message}`)
  }
  const timeout = positive(options.timeout ?? "30 seconds", "the proxy's timeout")
  const resolved: Resolved = {
    upstream,
    timeout,
    timeoutMs: Math.min(Math.max(1, Math.ceil(Duration.toMillis(timeout))), 2 ** 31 - 1),
    trusted: trustedPeer(options.trustedProxies)
  }
  // The server runs apps uninterruptibly; forwarding opts in, so that a timeout or a client that goes away
  // interrupts the upstream request (which aborts it) instead of waiting for it.
  return Effect.flatMap(
    Effect.runtime<HttpServerRequest.HttpServerRequest | NodeHttpClient.HttpAgent>(),
    (runtime) => Effect.interruptible(forward(runtime, resolved))
  )
}

/** @internal The request headers the upstream gets: end-to-end ones, `Host` its own, `X-Forwarded-*` set. */
const forwardedHeaders = (
  request: HttpServerRequest.HttpServerRequest,
  hasBody: boolean,
  options: Resolved
): Record<string, string> => {
  const incoming = request.headers
  const headers = endToEnd<string>(incoming)
  // The upstream gets its own Host (node:http adds it from the URL); the client's travels in X-Forwarded-Host.
  delete headers["host"]
  // This server has already answered `Expect: 100-continue`.
  delete headers["expect"]
  // A body of unknown length is sent chunked, whatever the method (node:http would not frame a GET's body).
  if (hasBody && headers["content-length"] === undefined) headers["transfer-encoding"] = "chunked"

  const peer = Option.map(request.remoteAddress, normalizeAddress)
  const fromTrusted = Option.exists(peer, options.trusted)
  if (Option.isSome(peer)) {
    headers["x-forwarded-for"] = incoming["x-forwarded-for"] === undefined
      ? peer.value
      : `${incoming["x-forwarded-for"]}, ${peer.value}`
  }
  // A trusted proxy in front (a TLS load balancer) knows the original scheme and host; anyone else's claim is replaced.
  if (!(fromTrusted && incoming["x-forwarded-proto"] !== undefined)) headers["x-forwarded-proto"] = "http"
  if (!(fromTrusted && incoming["x-forwarded-host"] !== undefined)) {
    if (incoming["host"] === undefined) delete headers["x-forwarded-host"]
    else headers["x-forwarded-host"] = incoming["host"]
  }
  return headers
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
  const contentLength = request.headers["content-length"]
  const hasBody = request.headers["transfer-encoding"] !== undefined ||
    (contentLength !== undefined && contentLength !== "0")
  const { upstream } = options
  const requestOptions: Http.RequestOptions = {
    protocol: upstream.protocol,
    hostname: upstream.hostname,
    port: upstream.port,
    method: request.method,
    path: upstreamPath(upstream, request.url),
    headers: forwardedHeaders(request, hasBody, options),
    agent: upstream.protocol === "https:" ? agents.https : agents.http
  }
  return Effect.async<Http.IncomingMessage, Proxy.ProxyError>((resume) =>
    exchange(source, hasBody, requestOptions, options, resume)
  ).pipe(
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
 * @internal Sends one request to the upstream: the head, then the client's body piped in (with Node's
 * backpressure), and resumes with the response's head, or a failure. The timeout starts once the whole
 * request has been handed to the connection (`finish`). The returned canceller (interruption: the
 * client went away, or the server shuts down) aborts the upstream request.
 */
const exchange = (
  source: Http.IncomingMessage,
  hasBody: boolean,
  requestOptions: Http.RequestOptions,
  options: Resolved,
  resume: (effect: Effect.Effect<Http.IncomingMessage, Proxy.ProxyError>) => void
): Effect.Effect<void> => {
  let settled = false
  let timer: ReturnType<typeof setTimeout> | undefined
  const settle = (effect: Effect.Effect<Http.IncomingMessage, Proxy.ProxyError>): void => {
    if (settled) return
    settled = true
    if (timer !== undefined) clearTimeout(timer)
    resume(effect)
  }
  let outgoing: Http.ClientRequest
  try {
    outgoing = (options.upstream.protocol === "https:" ? Https.request : Http.request)(requestOptions)
  } catch (cause) {
    // node:http refused the request itself (a header value or path it will not send).
    settle(Effect.fail(new Proxy.ProxyError({ reason: "Protocol", cause })))
    return Effect.void
  }
  // Stays attached after the response came: a late socket error must not be an unhandled 'error'.
  outgoing.on("error", (cause) => settle(Effect.fail(classify(cause))))
  outgoing.once("response", (response) => settle(Effect.succeed(response)))
  outgoing.once("finish", () => {
    if (settled) return
    timer = setTimeout(() => {
      settle(
        Effect.failSync(() =>
          new Proxy.ProxyError({ reason: "Timeout", cause: `no response within ${Duration.format(options.timeout)}` })
        )
      )
      outgoing.destroy()
    }, options.timeoutMs)
  })
  if (hasBody) {
    // `pipe`, not `pipeline`: an upstream that fails must not destroy the client's request, whose
    // connection still has to carry the 502.
    source.once("error", (cause) => {
      settle(Effect.fail(new Proxy.ProxyError({ reason: "RequestBody", cause })))
      outgoing.destroy()
    })
    source.pipe(outgoing)
  } else {
    outgoing.end()
  }
  return Effect.sync(() => {
    settled = true
    if (timer !== undefined) clearTimeout(timer)
    if (hasBody) source.unpipe(outgoing)
    outgoing.destroy()
  })
}

/**
 * @internal The upstream's response as the server's: end-to-end headers, `Proxy-Status` appended, the
 * body the upstream's `IncomingMessage` itself, which the Node server pipes into the client's response
 * once the middleware has added its headers.
 */
const respond = (
  runtime: Runtime.Runtime<never>,
  request: HttpServerRequest.HttpServerRequest,
  response: Http.IncomingMessage
): HttpServerResponse.HttpServerResponse => {
  const { "set-cookie": setCookie, ...headers } = endToEnd(response.headers)
  const status = response.statusCode ?? 502
  headers["proxy-status"] = appendMember(
    typeof headers["proxy-status"] === "string" ? headers["proxy-status"] : undefined,
    `${NAME}; received-status=${status}`
  )
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
  let out: HttpServerResponse.HttpServerResponse
  if (request.method === "HEAD") {
    // No body to send; read the (empty) one so that the upstream connection goes back to the pool.
    response.resume()
    out = HttpServerResponse.empty({ status, headers })
  } else {
    // No content type is given: no `Content-Type` is added; the upstream's, if any, is in `headers`.
    out = HttpServerResponse.raw(response, { status, headers })
  }
  if (setCookie !== undefined && setCookie.length > 0) {
    // One `Set-Cookie` line per cookie: Node's `writeHead` takes an array for a repeated header.
    out = HttpServerResponse.setHeader(out, "set-cookie", (setCookie.length === 1 ? setCookie[0] : setCookie) as string)
  }
  return out
}
