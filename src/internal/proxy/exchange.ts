/**
 * @internal One exchange with the upstream over node:http, shared by the proxy's two front ends (its own
 * node:http server, `Proxy.layer`, and the `HttpApp` of `Proxy.make`): the request's target and headers,
 * the request itself with the client's body piped in, the failures sorted into RFC 9209 types, and the
 * response's head. Free of @effect/platform.
 */
import * as Duration from "effect/Duration"
import type * as Http from "node:http"
import * as HttpModule from "node:http"
import * as Https from "node:https"
import type * as Proxy from "../../Proxy.js"
import { positive } from "../duration.js"
import { trustList } from "../http/address.js"
import { ProxyError, STATUS } from "./errors.js"
import { endToEnd, normalizeAddress } from "./headers.js"
import { parseUpstream, type Upstream } from "./target.js"

/** @internal The name this proxy gives itself in `Proxy-Status` (RFC 9209). */
export const NAME = "wakuwaku"

export { STATUS }

/** @internal The `code` of a Node error, also inside an AggregateError (happy eyeballs) or a wrapped cause. */
export const codeOf = (cause: unknown): string | undefined => {
  if (typeof cause !== "object" || cause === null) return undefined
  const code = (cause as { readonly code?: unknown }).code
  if (typeof code === "string") return code
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
  return new ProxyError({ reason, cause })
}

/**
 * @internal The RFC 9209 error type of a 429 the proxy makes (a rate limit refused the request):
 * `http_request_error`, a client error met in processing the request, which RFC 9209's own example of a
 * 429 carries (§2). Not `http_request_denied` (a refusal by policy), whose recommended status is 403 (§2.3).
 */
export const RATE_LIMITED = "http_request_error"

/** @internal The `Proxy-Status` member of a response this proxy made itself. */
export const generatedStatus = (type: string, details?: string): string =>
  `${NAME}; error=${type}${details === undefined ? "" : `; details=${JSON.stringify(details)}`}`

/** @internal Appends a member to a `Proxy-Status` value, after those of the intermediaries nearer the origin. */
export const appendMember = (existing: string | undefined, member: string): string =>
  existing === undefined || existing.trim() === "" ? member : `${existing}, ${member}`

/** @internal The last member's name in a `Proxy-Status` value (the one nearest the client). */
export const lastMember = (value: string | undefined): string | undefined =>
  value?.split(",").at(-1)?.split(";")[0]?.trim()

/** @internal The status, the one-line body and the `Proxy-Status` of a failure. */
export const failure = (error: Proxy.ProxyError) => {
  const { status, text, type } = STATUS[error.reason]
  return { status, body: `${status} ${text}\n`, proxyStatus: generatedStatus(type, codeOf(error.cause)) }
}

/** @internal Options of the forwarding, resolved. */
export interface Resolved {
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

/** @internal Checks the options of the forwarding (a `TypeError` or `RangeError` now). */
export const resolve = (options: Proxy.Options): Resolved => {
  let upstream: Upstream
  try {
    upstream = parseUpstream(options.upstream)
  } catch (error) {
    throw new TypeError(`wakuwaku/Proxy: ${(error as Error).message}`)
  }
  const timeout = positive(options.timeout ?? "30 seconds", "the proxy's timeout")
  return {
    upstream,
    timeout,
    timeoutMs: Math.min(Math.max(1, Math.ceil(Duration.toMillis(timeout))), 2 ** 31 - 1),
    trusted: trustedPeer(options.trustedProxies)
  }
}

/**
 * Headers the proxy sets itself, never copied: the upstream gets its own `Host` (node:http adds it from the
 * URL, the client's travels in `X-Forwarded-Host`); `Expect` the proxy answers itself, once the limit has let
 * the request through; the `X-Forwarded-*` it writes below.
 */
const SET_BY_PROXY: ReadonlySet<string> = new Set([
  "host",
  "expect",
  "x-forwarded-for",
  "x-forwarded-proto",
  "x-forwarded-host"
])

/** …and, from a peer that is not trusted, the forwarding headers it could write to claim an origin. */
const SET_BY_PROXY_OR_CLAIMED: ReadonlySet<string> = new Set([
  ...SET_BY_PROXY,
  "x-real-ip",
  "x-forwarded-port",
  "x-forwarded-prefix"
])

/** @internal Whether a request carries a body: a `Transfer-Encoding`, or a `Content-Length` above 0. */
export const hasBody = (headers: Http.IncomingHttpHeaders): boolean => {
  const length = headers["content-length"]
  return headers["transfer-encoding"] !== undefined || (length !== undefined && length !== "0")
}

/**
 * @internal The request headers the upstream gets: end-to-end ones, `Host` its own, `X-Forwarded-*` set.
 * `peer` is the socket's address; `X-Real-IP`, `X-Forwarded-Port` and `X-Forwarded-Prefix` pass only from a
 * trusted peer, as `X-Forwarded-Proto` and `X-Forwarded-Host` do.
 */
export const requestHeaders = (
  incoming: Http.IncomingHttpHeaders,
  peerAddress: string | undefined,
  withBody: boolean,
  options: Resolved
): Record<string, string | Array<string>> => {
  const peer = peerAddress === undefined ? undefined : normalizeAddress(peerAddress)
  const fromTrusted = peer !== undefined && options.trusted(peer)
  const headers = endToEnd<string | Array<string>>(incoming, fromTrusted ? SET_BY_PROXY : SET_BY_PROXY_OR_CLAIMED)
  // The transfer codings are kept (`gzip, chunked`: the body is still gzip-coded); node:http frames it chunked,
  // which it must end with. A body of unknown length is sent chunked, whatever the method.
  const transferEncoding = incoming["transfer-encoding"]
  if (withBody) {
    if (transferEncoding !== undefined) headers["transfer-encoding"] = transferEncoding
    else if (headers["content-length"] === undefined) headers["transfer-encoding"] = "chunked"
  }
  const chain = incoming["x-forwarded-for"]
  if (peer !== undefined) headers["x-forwarded-for"] = chain === undefined ? peer : `${String(chain)}, ${peer}`
  else if (chain !== undefined) headers["x-forwarded-for"] = chain
  // A trusted proxy in front (a TLS load balancer) knows the original scheme and host; anyone else's claim is replaced.
  const proto = incoming["x-forwarded-proto"]
  headers["x-forwarded-proto"] = fromTrusted && proto !== undefined ? proto : "http"
  const forwardedHost = fromTrusted && incoming["x-forwarded-host"] !== undefined
    ? incoming["x-forwarded-host"]
    : incoming["host"]
  if (forwardedHost !== undefined) headers["x-forwarded-host"] = forwardedHost
  return headers
}

/** A list of transfer codings whose last is `chunked`: the body is framed by its chunks. */
const CHUNKED_LAST = /(?:^|,)\s*chunked\s*$/i

/**
 * @internal The upstream's response head as the client gets it: end-to-end headers, its transfer codings
 * other than `chunked` kept (the body is still coded), no `Content-Length` on a 204, `Proxy-Status`
 * appended. A body whose final transfer coding is not `chunked` ends only when the upstream closes its
 * connection (RFC 9112 §6.3): it is `closeDelimited`, relayed as it came, and the client's connection
 * closes after it (`Connection: close`), so that nothing can follow it on that connection.
 */
export const responseHead = (
  status: number,
  upstream: Readonly<Record<string, string | Array<string> | undefined>>
): {
  readonly status: number
  readonly headers: Record<string, string | Array<string>>
  readonly closeDelimited: boolean
} => {
  const headers = endToEnd<string | Array<string>>(upstream)
  const te = upstream["transfer-encoding"]
  const codings = typeof te === "string" ? te : te?.join(", ")
  let closeDelimited = false
  if (status === 204 || status === 304) {
    // RFC 9110 §8.6: no Content-Length in a 204; a 304 has no body to frame either.
    if (status === 204) delete headers["content-length"]
  } else if (codings !== undefined && !/^\s*chunked\s*$/i.test(codings)) {
    headers["transfer-encoding"] = codings
    if (!CHUNKED_LAST.test(codings)) {
      closeDelimited = true
      headers["connection"] = "close"
    }
  }
  const existing = headers["proxy-status"]
  headers["proxy-status"] = appendMember(
    typeof existing === "string" ? existing : existing?.join(", "),
    `${NAME}; received-status=${status}`
  )
  return { status, headers, closeDelimited }
}

/** @internal What {@link exchange} ends with: the response's head arrived, or a failure. */
export type Settled =
  | { readonly _tag: "Response"; readonly response: Http.IncomingMessage }
  | { readonly _tag: "Failure"; readonly error: Proxy.ProxyError }

/**
 * @internal Sends one request to the upstream: the head, then the client's body piped in (with Node's
 * backpressure), and calls `settle` once with the response's head, or a failure. The timeout starts once
 * the whole request has been handed to the connection (`finish`). The returned function (the client went
 * away, or the server shuts down) aborts the upstream request.
 */
export const exchange = (
  source: Http.IncomingMessage,
  withBody: boolean,
  requestOptions: Http.RequestOptions,
  options: Resolved,
  done: (settled: Settled) => void
): () => void => {
  let settled = false
  let timer: ReturnType<typeof setTimeout> | undefined
  const settle = (value: Settled): void => {
    if (settled) return
    settled = true
    if (timer !== undefined) clearTimeout(timer)
    done(value)
  }
  const fail = (error: Proxy.ProxyError) => settle({ _tag: "Failure", error })
  let outgoing: Http.ClientRequest
  try {
    outgoing = (options.upstream.protocol === "https:" ? Https.request : HttpModule.request)(requestOptions)
  } catch (cause) {
    // node:http refused the request itself (a header value or path it will not send).
    fail(new ProxyError({ reason: "Protocol", cause }))
    return () => {}
  }
  // Stays attached after the response came: a late socket error must not be an unhandled 'error'.
  outgoing.on("error", (cause) => fail(classify(cause)))
  outgoing.once("response", (response) => settle({ _tag: "Response", response }))
  // A 101 to a request that asked for no upgrade (none is ever forwarded): not HTTP this proxy can relay.
  outgoing.once("upgrade", (_response, socket) => {
    socket.destroy()
    fail(new ProxyError({ reason: "Protocol", cause: "the upstream switched protocols (101) unasked" }))
  })
  outgoing.once("finish", () => {
    if (settled) return
    timer = setTimeout(() => {
      fail(new ProxyError({ reason: "Timeout", cause: `no response within ${Duration.format(options.timeout)}` }))
      outgoing.destroy()
    }, options.timeoutMs)
  })
  if (withBody) {
    // `pipe`, not `pipeline`: an upstream that fails must not destroy the client's request, whose
    // connection still has to carry the 502.
    source.once("error", (cause) => {
      fail(new ProxyError({ reason: "RequestBody", cause }))
      outgoing.destroy()
    })
    source.pipe(outgoing)
  } else {
    outgoing.end()
  }
  return () => {
    settled = true
    if (timer !== undefined) clearTimeout(timer)
    if (withBody) source.unpipe(outgoing)
    outgoing.destroy()
  }
}
