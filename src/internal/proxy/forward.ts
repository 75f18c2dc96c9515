/** @internal The forwarding app of the reverse proxy: one request to the upstream, its response back. */
import * as HttpBody from "@effect/platform/HttpBody"
import * as HttpClient from "@effect/platform/HttpClient"
import type * as HttpClientError from "@effect/platform/HttpClientError"
import * as HttpClientRequest from "@effect/platform/HttpClientRequest"
import type * as HttpClientResponse from "@effect/platform/HttpClientResponse"
import * as Headers from "@effect/platform/Headers"
import type * as HttpApp from "@effect/platform/HttpApp"
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import * as NodeHttpServerRequest from "@effect/platform-node/NodeHttpServerRequest"
import * as Chunk from "effect/Chunk"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Stream from "effect/Stream"
import * as Proxy from "../../Proxy.js"
import { positive } from "../duration.js"
import { endToEnd, normalizeAddress, splitSetCookie, trustList } from "./headers.js"
import { parseUpstream, type Upstream, upstreamUrl } from "./target.js"

/** @internal The name this proxy gives itself in `Proxy-Status` (RFC 9209). */
export const NAME = "wakuwaku"

/** @internal The RFC 9209 error type and the response status of each reason. */
export const STATUS: Record<Proxy.ProxyErrorReason, { readonly status: number; readonly type: string; readonly text: string }> = {
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
  const inner = (cause as { readonly cause?: unknown; readonly errors?: ReadonlyArray<unknown> })
  return codeOf(inner.cause) ?? (Array.isArray(inner.errors) ? codeOf(inner.errors[0]) : undefined)
}

/** @internal Sorts a client failure into a reason. */
export const classify = (error: HttpClientError.HttpClientError): Proxy.ProxyError => {
  if (error._tag === "RequestError" && error.reason === "Encode") {
    return new Proxy.ProxyError({ reason: "RequestBody", cause: error.cause })
  }
  const code = codeOf(error.cause) ?? ""
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
  return new Proxy.ProxyError({ reason, cause: error.cause })
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
const lastMember = (value: string | undefined): string | undefined =>
  value?.split(",").at(-1)?.split(";")[0]?.trim()

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

const EMPTY = new Uint8Array(0)

/**
 * @internal Ends every chunk of a request body with an empty item. @effect/platform-node writes a chunk's
 * items to the upstream request one by one and waits for `drain` only between items: after the last
 * item it moves on even when the socket is full, so a slow upstream would make the proxy buffer a
 * whole upload. With an empty last item, that wait comes after every real one. Writing no bytes sends
 * nothing (Node never writes an empty chunk, which would end a chunked body).
 */
const withDrainCheck = (chunk: Chunk.Chunk<Uint8Array>): Chunk.Chunk<Uint8Array> => Chunk.append(chunk, EMPTY)

/** @internal Options of {@link make}, resolved. */
interface Resolved {
  readonly upstream: Upstream
  readonly timeout: Duration.Duration
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
export const make = (options: Proxy.Options): HttpApp.Default<never, HttpClient.HttpClient> => {
  let upstream: Upstream
  try {
    upstream = parseUpstream(options.upstream)
  } catch (error) {
    throw new TypeError(`wakuwaku/Proxy: ${(error as Error).message}`)
  }
  const resolved: Resolved = {
    upstream,
    timeout: positive(options.timeout ?? "30 seconds", "the proxy's timeout"),
    trusted: trustedPeer(options.trustedProxies)
  }
  // The server runs apps uninterruptibly; forwarding opts in, so that a timeout or a client that goes away
  // interrupts the upstream request (which aborts it) instead of waiting for it.
  return Effect.flatMap(HttpServerRequest.HttpServerRequest, (request) => Effect.interruptible(forward(request, resolved)))
}

const forward = (
  request: HttpServerRequest.HttpServerRequest,
  options: Resolved
): Effect.Effect<HttpServerResponse.HttpServerResponse, never, HttpClient.HttpClient> =>
  Effect.gen(function*() {
    const client = HttpClient.withTracerPropagation(yield* HttpClient.HttpClient, false)
    const incoming = request.headers
    const headers = endToEnd<string>(incoming)
    // The upstream gets its own Host (from the URL); the client's travels in X-Forwarded-Host.
    delete headers["host"]
    // This server has already answered `Expect: 100-continue`.
    delete headers["expect"]

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

    // The timeout runs from the moment the whole request has been handed to the upstream connection.
    const sent = yield* Deferred.make<void>()
    const contentLength = incoming["content-length"]
    const hasBody = incoming["transfer-encoding"] !== undefined ||
      (contentLength !== undefined && contentLength !== "0")
    let upstreamRequest = HttpClientRequest.make(request.method)(
      upstreamUrl(options.upstream, request.url),
      { headers }
    )
    if (hasBody) {
      const length = contentLength === undefined ? undefined : Number(contentLength)
      upstreamRequest = HttpClientRequest.setBody(
        upstreamRequest,
        HttpBody.stream(
          Stream.concat(Stream.mapChunks(request.stream, withDrainCheck), Stream.execute(Deferred.succeed(sent, undefined))),
          // An empty content type adds no `Content-Type` header: the client's, if any, is in `headers`.
          "",
          length !== undefined && Number.isSafeInteger(length) ? length : undefined
        )
      )
    } else {
      yield* Deferred.succeed(sent, undefined)
    }

    const deadline = Deferred.await(sent).pipe(
      Effect.zipRight(Effect.sleep(options.timeout)),
      Effect.zipRight(Effect.fail(new Proxy.ProxyError({ reason: "Timeout", cause: `no response within ${Duration.format(options.timeout)}` })))
    )
    return yield* client.execute(upstreamRequest).pipe(
      Effect.mapError(classify),
      Effect.raceFirst(deadline),
      Effect.flatMap((response) => respond(request, response)),
      Effect.catchAll((error) =>
        Effect.as(
          Effect.logWarning(`proxy: ${request.method} ${request.url}: ${STATUS[error.reason].text}`).pipe(
            Effect.annotateLogs({ reason: error.reason, cause: String(error.cause) })
          ),
          errorResponse(error)
        )
      )
    )
  })

const respond = (
  request: HttpServerRequest.HttpServerRequest,
  response: HttpClientResponse.HttpClientResponse
): Effect.Effect<HttpServerResponse.HttpServerResponse> =>
  Effect.gen(function*() {
    const { "set-cookie": setCookie, ...headers } = endToEnd<string>(response.headers)
    headers["proxy-status"] = appendMember(headers["proxy-status"], `${NAME}; received-status=${response.status}`)
    // A body cut short by the upstream must reach the client cut short: the connection is dropped rather
    // than ended cleanly, which the client would take for a complete body.
    const body = Stream.tapErrorCause(response.stream, (cause) =>
      Effect.zipRight(
        Effect.logWarning(`proxy: ${request.method} ${request.url}: the upstream's response body failed`, cause),
        Effect.sync(() => NodeHttpServerRequest.toServerResponse(request).destroy())
      ))
    if (request.method === "HEAD") {
      // No body to send; read the (empty) one so that the upstream connection goes back to the pool.
      yield* Stream.runDrain(body).pipe(Effect.ignore)
    }
    let out = HttpServerResponse.setBody(
      HttpServerResponse.empty({ status: response.status, headers: Headers.unsafeFromRecord(headers) }),
      // An empty content type adds no `Content-Type` header: the upstream's, if any, is in `headers`.
      HttpBody.stream(request.method === "HEAD" ? Stream.empty : body, "")
    )
    if (setCookie !== undefined) {
      const cookies = splitSetCookie(setCookie)
      // One `Set-Cookie` line per cookie: Node's `writeHead` takes an array for a repeated header.
      out = HttpServerResponse.setHeader(out, "set-cookie", (cookies.length === 1 ? cookies[0] : cookies) as string)
    }
    return out
  })
