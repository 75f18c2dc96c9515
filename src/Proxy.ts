/**
 * Proxy: a rate-limiting reverse proxy, to put a `TokenBucket` or a `FixedWindow` in front of a service
 * that has none. Import it from `wakuwaku/Proxy`; it needs `@effect/platform` and `@effect/platform-node`
 * (optional peers, which the core `wakuwaku` never loads). It has two front ends over one forwarding core:
 *
 * - {@link layer}: what `wakuwaku proxy` runs. A scoped `Layer` that serves the proxy on a **node:http
 *   server of its own**: each request is checked, keyed, decided by the rate limit and forwarded with
 *   **undici** (a keep-alive `Pool` to the upstream, as @fastify/http-proxy forwards), each chunk of the
 *   response written straight to Node's response (node:http's `request` for the two requests undici will
 *   not send as they came: `OPTIONS *`, and a transfer coding other than `chunked`). The limiter runs on
 *   the Effect runtime the layer is built in, so its requirements (`Redis`, `Write<TokenBucket.Entity>`)
 *   stay in the layer's type, and the layer has the graceful shutdown of {@link serve}. A denial the store
 *   repeats may be remembered until its `retryAfter` (`rateLimit.rememberDenials`), and then a flood of
 *   requests over the limit is answered without running any Effect or calling the store.
 * - {@link make} and {@link serve}: the forwarding as an @effect/platform `HttpApp`, served on
 *   @effect/platform-node's `HttpServer`, for composing with other platform middleware
 *   (`RateLimit.middleware`). The same forwarding, headers and failures; a fiber and the platform's
 *   request and response objects per request cost more CPU (docs/http.md, "Overhead").
 *
 * **Routes** (`layer`'s `routes`, {@link Route}): tried in order, the first whose methods, host and path
 * match takes a request, with its own limits (decided as one, each with its key and cost), its mode
 * (`enforce`, or `shadow`: decided and counted, never denying) and optionally its own upstream and timeout;
 * a request no route matches takes the default route (`upstream`, `timeout`, `rateLimit`). The path matched
 * is the one the upstream may read ({@link RouteMatch}), so another spelling of it does not dodge its route.
 * `wakuwaku proxy --config FILE` reads routes from a JSON file (docs/http.md).
 *
 * **Why undici and node:http, not @effect/platform, for `layer`.** Forwarding through @effect/platform's
 * `HttpClient` cost far more CPU per request, and serving on the platform's `HttpServer` alone costs more
 * than a bare node:http proxy does in all; undici's client costs less per request than node:http's
 * `request`. docs/performance.md ("Figures behind design choices") and docs/http.md have the figures.
 *
 * **What it checks first.** A request with more header lines than `maxHeaderLines` (default 100) is a
 * 431: every line is counted, none is dropped (Node's own `maxHeadersCount` silently drops lines past
 * about 1000). A target whose path climbs with dot segments is forwarded with them removed (RFC 3986
 * §5.2.4, `%2e` and `..;x` counting as dots), so it stays under the upstream's base path; one that hides a
 * dot segment behind `%2F`, `%5C` or `\` is a 400. So are a request with two `Host` lines (RFC 9112 §3.2)
 * and one that is not HTTP/1.x (an HTTP/0.9 request line), and their connections are closed. Bytes that do
 * not parse after a whole request get no response of their own: that request is answered, then the
 * connection closes. `OPTIONS *` is forwarded as it is. A request is decided before its body is invited
 * (`100 Continue` only once the limit lets it through), and a refusal that leaves a body unread closes the
 * connection after reading at most 64 KiB more of it.
 *
 * **What it forwards.** The method, the path and query (after the upstream URL's own path, dot segments
 * removed), the headers and the body. Bodies stream in both directions, never buffered, with backpressure both ways:
 * an upstream that reads an upload slowly slows the client down, and a client that reads a download
 * slowly slows the upstream. Memory stays bounded however large the bodies are (see docs/http.md for
 * the measurements). `Content-Length` is kept when the sender gave one; otherwise the body is chunked
 * (undici, under {@link layer}, gives the length instead when the whole body came before the request
 * was written).
 *
 * **What it changes.**
 * - Hop-by-hop headers (RFC 9110 §7.6.1) are dropped in both directions: `Connection` and every header
 *   it names, `Keep-Alive`, `Proxy-Connection`, `TE`, `Trailer`, `Transfer-Encoding`, `Upgrade`,
 *   `Proxy-Authorization` and `Proxy-Authenticate`. Node's own framing (`Transfer-Encoding: chunked`,
 *   `Connection: keep-alive`) is then added per connection, on each side.
 * - The request's `Host` becomes the upstream's; the client's `Host` travels in `X-Forwarded-Host`.
 *   `X-Forwarded-Proto` is `http`. Both are kept as they came when the peer is one of `trustedProxies`
 *   (a TLS load balancer in front knows the original scheme and host). `X-Real-IP`, `X-Forwarded-Port`
 *   and `X-Forwarded-Prefix` pass from trusted proxies only; anyone else's are dropped.
 * - Transfer codings other than `chunked` (`Transfer-Encoding: gzip, chunked`) are kept, both ways: the
 *   body is still coded, and Node re-frames it chunked. A response whose final coding is not `chunked`
 *   ends when the upstream closes (RFC 9112 §6.3): it is relayed as it came, and the client's connection
 *   closes after it. A 204 loses its `Content-Length`; a 304 keeps it (RFC 9110 §8.6); neither has a body.
 * - Under {@link layer}, the upstream's `RateLimit-Policy` and `RateLimit` are kept and the limit's list
 *   members appended after them (draft-ietf-httpapi-ratelimit-headers §7.2: an intermediary must not make
 *   the policy look more permissive), as `RateLimit.middleware` does; its `Retry-After` is never replaced.
 * - The peer's address (IPv4-mapped IPv6 written as IPv4) is appended to `X-Forwarded-For`, whoever the
 *   peer is; which entry to believe is the limiter's business (`RateLimit.clientIp({ trustedProxies })`).
 * - `Expect` is dropped: the proxy answers `100-continue` itself, once the limit has let the request in.
 *
 * **Telling the proxy's responses from the upstream's: `Proxy-Status` (RFC 9209).** Every response
 * carries a `Proxy-Status` member named `wakuwaku`, appended after any that nearer intermediaries set:
 * - a forwarded response: `wakuwaku; received-status=503` (the upstream answered 503);
 * - a response the proxy made: `wakuwaku; error=<type>`, with a short `text/plain` body.
 *
 * | failure | status | `Proxy-Status` error |
 * | --- | --- | --- |
 * | the upstream refuses the connection | 502 | `connection_refused` |
 * | it resets or closes it before a response | 502 | `connection_terminated` |
 * | its host name does not resolve / it cannot be reached | 502 | `dns_error` / `destination_unavailable` |
 * | its response is not valid HTTP, or a 101 nobody asked for | 502 | `http_protocol_error` |
 * | connecting times out (`layer`: undici's 10 s; `make`: the OS's) | 504 | `connection_timeout` |
 * | no response head within `timeout` of the request being sent | 504 | `http_response_timeout` |
 * | a limiter's 429 (any response not from the upstream, under {@link serve}) | 429 | `http_request_error` |
 * | any other response that did not come from the upstream | as made | `proxy_internal_response` |
 * | not HTTP/1.x, two `Host` lines, or a target that cannot be forwarded | 400 | `http_request_error` |
 * | a request not received within `requestTimeout` | 408 | `http_request_error` |
 * | too many header lines (`details="too many header lines"`), or a head over 16 KiB | 431 | `http_request_error` |
 * | an `Expect` other than `100-continue` | 417 | `http_request_error` |
 *
 * So an upstream's own 502 says `received-status=502`, and the proxy's says `error=…`.
 *
 * **What it reports.** Every request {@link layer} answers is counted when its response is done
 * ({@link requests}: by route, decision and status; {@link inFlight}; {@link upstreamDuration}), always,
 * as the middleware's counters are. With `admin`, a server of its own (loopback by default, never the
 * public port) serves them and every other Effect Metric at `/metrics` in the Prometheus text format, with
 * `/healthz` and `/readyz` ({@link AdminOptions}); with `accessLog`, one JSON line per request, without any
 * header value or (unless asked) query string ({@link AccessLogOptions}).
 *
 * **Caveats.**
 * - `timeout` bounds the wait for the response's head, counted from when the request (its body
 *   included) has been handed to the upstream connection. A response body that stalls halfway, or an
 *   upstream that stops reading a request body, is bounded only by the client and by the server's
 *   `requestTimeout` (300 s by default, an option of {@link layer}) for receiving a whole request.
 * - A remembered denial (`rememberDenials`) is not lifted by a `reset` of its name elsewhere until it
 *   ends (at most its `retryAfter`); see `RateLimit`'s module doc for this and its other exception.
 * - A response body cut short by the upstream reaches the client cut short: the client's connection is
 *   dropped rather than ended, so it cannot mistake the part for the whole.
 * - Upgrades (WebSocket) and `CONNECT` are not proxied: `Upgrade` is a hop-by-hop header, so an
 *   upgrade request reaches the upstream as a plain request.
 * - Trailers are not forwarded (`Trailer` is hop-by-hop), and repeated request headers arrive joined
 *   as Node joins them; repeated `Set-Cookie` response headers stay one line per cookie.
 * - Only HTTP/1.1 on the client side; the upstream may be `http://` or `https://`.
 *
 * @example
 * ```ts
 * import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
 * import { Layer } from "effect"
 * import { ClientIp } from "wakuwaku/http"
 * import { Rate, Redis, TokenBucket } from "wakuwaku"
 * import * as Proxy from "wakuwaku/Proxy"
 *
 * const trustedProxies = ["10.0.0.0/8"]
 *
 * // Serves until SIGINT or SIGTERM, then drains for up to 10 seconds.
 * Proxy.layer({
 *   upstream: "http://127.0.0.1:3000",
 *   port: 8080,
 *   trustedProxies,
 *   rateLimit: {
 *     limiter: TokenBucket.make<string>("edge", 20, Rate.make(1, "3 seconds")),
 *     key: ClientIp.resolve({ trustedProxies }),
 *     onStoreFailure: "fail-closed",
 *     rememberDenials: 10_000
 *   }
 * }).pipe(
 *   Layer.provide(Redis.layer({ url: "redis://127.0.0.1:6379", commandTimeout: "500 millis" })),
 *   Layer.launch,
 *   NodeRuntime.runMain
 * )
 * ```
 *
 * @since 0.1.0
 */
import type * as NodeHttpClient from "@effect/platform-node/NodeHttpClient"
import type * as HttpApp from "@effect/platform/HttpApp"
import type * as HttpServer from "@effect/platform/HttpServer"
import type * as HttpServerError from "@effect/platform/HttpServerError"
import type * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import type * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import type * as Cause from "effect/Cause"
import type * as Context from "effect/Context"
import type * as Duration from "effect/Duration"
import { dual } from "effect/Function"
import type * as Layer from "effect/Layer"
import type * as Metric from "effect/Metric"
import type * as Schema from "effect/Schema"
import type * as Scope from "effect/Scope"
import type * as ClientIp from "./ClientIp.js"
import * as errors from "./internal/proxy/errors.js"
import * as internal from "./internal/proxy/forward.js"
import * as internalMetrics from "./internal/proxy/metrics.js"
import * as internalServe from "./internal/proxy/serve.js"
import * as internalServer from "./internal/proxy/server.js"
import type * as RateLimit from "./RateLimit.js"

/**
 * Options of {@link make}.
 *
 * @since 0.1.0
 * @category models
 */
export interface Options {
  /**
   * The upstream: an absolute `http://` or `https://` URL with no query. A path in it is prefixed to
   * every request's path (`http://api:3000/v1` sends `/users?x=1` to `/v1/users?x=1`).
   */
  readonly upstream: string | URL
  /**
   * How long the upstream has to send its response's head once the request has been sent in full;
   * after it, 504. Default 30 seconds.
   */
  readonly timeout?: Duration.DurationInput | undefined
  /**
   * The proxies in front of this one, as `ClientIp` takes them: addresses and CIDR blocks
   * (`10.0.0.0/8`, `::1`), or how many proxies every request passes through (then the peer is always
   * one). A trusted peer's `X-Forwarded-Proto` and `X-Forwarded-Host` are kept. Default none.
   */
  readonly trustedProxies?: ReadonlyArray<string> | number | undefined
}

/**
 * A forwarding app. Throws when `upstream` is not an absolute http(s) URL without query, a trusted
 * proxy is not an address or CIDR block, or `timeout` is not a positive duration.
 *
 * Its error channel is empty: every failure of the upstream becomes a response (see the table in the
 * module documentation). It needs the `NodeHttpClient.HttpAgent` it forwards over; {@link serve}
 * provides keep-alive ones ({@link layerClient}), and `NodeHttpClient.makeAgentLayer(options)` makes
 * others (TLS options for an `https://` upstream, `maxSockets`).
 *
 * It forwards the raw Node request and response, so it runs on @effect/platform-node's HTTP server
 * ({@link serve}, `NodeHttpServer`), where a middleware may still change the response's status and
 * headers (not its body).
 *
 * @since 0.1.0
 * @category constructors
 */
export const make: (options: Options) => HttpApp.Default<never, NodeHttpClient.HttpAgent> = internal.make

/**
 * Options of {@link serve}.
 *
 * @since 0.1.0
 * @category models
 */
export interface ServeOptions {
  /** The port to listen on; 0 picks a free one (read it from the `HttpServer`'s address). */
  readonly port: number
  /** The address to listen on. Default: every interface. */
  readonly host?: string | undefined
  /**
   * On shutdown, how long in-flight requests may take to finish before their connections are dropped.
   * New connections are refused at once, idle ones closed. Default 10 seconds.
   */
  readonly shutdownTimeout?: Duration.DurationInput | undefined
}

/**
 * Runs `app` (typically {@link make} wrapped in a limiter middleware) on a Node HTTP server for the
 * layer's lifetime, providing it {@link layerClient}. Every response that did not come from the
 * upstream is marked with a `Proxy-Status` error member (`http_request_error` for a 429).
 *
 * Closing the layer (SIGINT or SIGTERM under `NodeRuntime.runMain`) shuts down gracefully: the server
 * stops accepting, idle connections close, in-flight requests get up to `shutdownTimeout` to finish.
 * Dual: `serve(app, options)` or `app.pipe(serve(options))`.
 *
 * @since 0.1.0
 * @category layers
 */
export const serve: {
  (options: ServeOptions): <E, R>(
    app: HttpApp.Default<E, R>
  ) => Layer.Layer<
    HttpServer.HttpServer,
    HttpServerError.ServeError,
    Exclude<R, NodeHttpClient.HttpAgent | HttpServerRequest.HttpServerRequest | Scope.Scope>
  >
  <E, R>(
    app: HttpApp.Default<E, R>,
    options: ServeOptions
  ): Layer.Layer<
    HttpServer.HttpServer,
    HttpServerError.ServeError,
    Exclude<R, NodeHttpClient.HttpAgent | HttpServerRequest.HttpServerRequest | Scope.Scope>
  >
} = dual(2, internalServe.serve)

/**
 * The agents {@link serve} provides {@link make} for the upstream: node:http and node:https
 * `Agent`s with keep-alive (`NodeHttpClient.makeAgentLayer({ keepAlive: true })`), destroyed with the
 * layer. Provide it when serving {@link make} another way.
 *
 * @since 0.1.0
 * @category layers
 */
export const layerClient: Layer.Layer<NodeHttpClient.HttpAgent> = internalServe.layerClient

/**
 * Marks the responses of `app` that do not carry this proxy's `Proxy-Status` member (those not from the
 * upstream) as the proxy's own: `wakuwaku; error=http_request_error` for a 429 (docs/http.md says why),
 * `wakuwaku; error=proxy_internal_response` otherwise. {@link serve} applies it; use it when serving
 * {@link make} another way.
 *
 * @since 0.1.0
 * @category combinators
 */
export const identify: <E, R>(app: HttpApp.Default<E, R>) => HttpApp.Default<E, R> = internal.identify

/**
 * Why the proxy answered instead of the upstream.
 *
 * - `Refused`: the upstream refused the connection (502).
 * - `Reset`: it reset or closed the connection before a complete response head (502).
 * - `Unresolved`: its host name did not resolve (502).
 * - `Unreachable`: no route to it (502).
 * - `Protocol`: its response was not valid HTTP, or another transport failure (502).
 * - `ConnectTimeout`: the operating system gave up connecting (504).
 * - `Timeout`: no response head within `timeout` of the request being sent (504).
 * - `RequestBody`: the client's request body could not be read (400).
 *
 * @since 0.1.0
 * @category errors
 */
export type ProxyErrorReason = ProxyErrorReasonSchema["Type"]

/**
 * The type of the schema {@link ProxyErrorReason}.
 *
 * @since 0.2.0
 * @category errors
 */
export type ProxyErrorReasonSchema = Schema.Literal<
  ["Refused", "Reset", "Unresolved", "Unreachable", "Protocol", "ConnectTimeout", "Timeout", "RequestBody"]
>

/**
 * The schema of {@link ProxyErrorReason}.
 *
 * @since 0.2.0
 * @category errors
 */
export const ProxyErrorReason: ProxyErrorReasonSchema = errors.ProxyErrorReason

/**
 * A request the proxy could not forward, or whose response did not come. {@link make} turns it into a
 * response (see {@link response}) and logs it at warning level; it never reaches the error channel. A
 * `Schema.TaggedError`.
 *
 * @since 0.1.0
 * @category errors
 */
export interface ProxyError extends Cause.YieldableError {
  readonly _tag: "ProxyError"
  /** Why. */
  readonly reason: ProxyErrorReason
  /** What the client or the socket said (`Schema.Defect` encodes it across an API). */
  readonly cause: unknown
  /** The status the proxy answers with: 502, 504 or 400. */
  readonly status: number
}

/**
 * The class of {@link ProxyError}, and its schema.
 *
 * @since 0.1.0
 * @category errors
 */
export const ProxyError: Schema.TaggedErrorClass<ProxyError, "ProxyError", {
  readonly _tag: Schema.tag<"ProxyError">
  readonly reason: ProxyErrorReasonSchema
  readonly cause: typeof Schema.Defect
}> = errors.ProxyError

/**
 * The response the proxy sends for a failure: its status, a one-line `text/plain` body, and
 * `Proxy-Status: wakuwaku; error=<type>; details="<code>"`.
 *
 * @since 0.1.0
 * @category errors
 */
export const response: (error: ProxyError) => HttpServerResponse.HttpServerResponse = internal.errorResponse

/**
 * What a {@link Key} reads of a request: the socket's address and the request headers (lowercase names),
 * as `ClientIp.resolve` takes them.
 *
 * @since 0.1.0
 * @category models
 */
export type KeyInput = ClientIp.Input

/**
 * How {@link layer} keys a request for its rate limit: a name, computed at once. `ClientIp.resolve(options)`
 * is one; {@link header} another.
 *
 * @since 0.1.0
 * @category models
 */
export type Key = (request: KeyInput) => string

/**
 * Keys by a request header's value; without it (or when empty), by `orElse` (default the client's IP,
 * `ClientIp.resolve()`). A header's keys are `<name>=<value>`, which no address key can be, so a client
 * that sends `X-Api-Key: 127.0.0.5` does not spend the bucket of the client at 127.0.0.5; `RateLimit.header`
 * keys the same way. Throws a `TypeError` for a name that is not a header name (a token, RFC 9110 §5.1). The
 * client writes its headers: use this only for a header that something in front checks.
 *
 * @since 0.1.0
 * @category keys
 */
export const header: (name: string, options?: { readonly orElse?: Key | undefined }) => Key = internalServer.headerKey

/**
 * The rate limit of {@link layer}: what `RateLimit.middleware` takes, with a {@link Key} that reads the
 * raw request (cost 1 per request).
 *
 * @since 0.1.0
 * @category models
 */
export interface RateLimitOptions<LR> {
  /** The limiter: one of any kind keyed by strings (a `TokenBucket<string>`, a `FixedWindow<string>`, …). */
  readonly limiter: RateLimit.Limiter<LR>
  /** How requests are keyed. Default the client's IP, believing `X-Forwarded-For` from `trustedProxies`. */
  readonly key?: Key | undefined
  /** What to do when the store fails. */
  readonly onStoreFailure: RateLimit.OnStoreFailure
  /** The denial memory (see `RateLimit.Options`): how many names' denials to remember. Default 0: none. */
  readonly rememberDenials?: number | undefined
  /**
   * Delay instead of refusing at once, as nginx's `limit_req` with `burst` and `delay`: a request over the rate
   * waits its turn, up to `maxWait`, then is forwarded (see {@link DelayOptions}). The limiter must be one
   * `TokenBucket`, which reserves turns; another is a `TypeError`. Default: none, a request over the rate
   * is refused (429).
   */
  readonly delay?: DelayOptions | undefined
}

/**
 * The delay mode of a rate limit ({@link RateLimitOptions}). Each request reserves its turn in the token
 * bucket (`TokenBucket.reserve`: one store call per request), sleeps until it, and is forwarded. A request
 * whose turn is further than `maxWait` away is refused with a 429 whose `Retry-After` says when the same
 * wait would be granted. Turns are on the store's clock (Redis `TIME`), so the starts of every process sharing
 * the bucket keep to its bound: at most capacity + rate × T in any interval T. A client that disconnects while
 * it waits gives its turn back (`TokenBucket.cancel`). The requests one server holds waiting are bounded
 * ({@link LayerOptions}' `maxWaiting`): past the bound, 503 with `Proxy-Status`.
 *
 * @since 0.3.0
 * @category models
 */
export interface DelayOptions {
  /** The longest a request waits for its turn (counted in whole milliseconds, rounded down). */
  readonly maxWait: Duration.DurationInput
}

/**
 * What a {@link Route} matches: every field given must match, and a field not given matches anything.
 *
 * The path matched is the path as an upstream may read it, so that spelling it another way does not dodge
 * the route: its dot segments removed (as it is forwarded), every `%XX` decoded (`/%6cogin` is `/login`, an
 * encoded slash is a slash), `\` read as `/`, empty segments dropped (`//login`), each segment's
 * `;parameters` dropped (`/login;jsessionid=1`), lowercase (`/LOGIN`) and without a trailing slash
 * (`/login/`). A pattern is read the same way; the query is never matched.
 *
 * @since 0.2.0
 * @category models
 */
export interface RouteMatch {
  /** Methods, such as `["POST"]`; a list with `GET` takes `HEAD` too. Default: any. */
  readonly methods?: ReadonlyArray<string> | undefined
  /**
   * The `Host` header without its port, case aside: a name (`api.example.com`), or every name below one
   * (`*.example.com`). Default: any.
   */
  readonly host?: string | undefined
  /** A path, exactly; a segment that is `*` matches any one segment (`/users/*`). Not with `prefix`. */
  readonly path?: string | undefined
  /**
   * A path and every path below it, segment by segment (`/api` matches `/api` and `/api/users`, not
   * `/apix`); a segment that is `*` matches any one segment. Not with `path`.
   */
  readonly prefix?: string | undefined
}

/**
 * One limit of a {@link Route}: a limiter, how requests are keyed for it, and what a request costs it. A
 * route's limits are decided as one, all or nothing, in one store call.
 *
 * @since 0.2.0
 * @category models
 */
export interface RouteLimit<LR> {
  /** The limiter; its namespace names the policy in `RateLimit-Policy`. */
  readonly limiter: RateLimit.Limiter<LR>
  /** How requests are keyed for it. Default the client's IP, believing `X-Forwarded-For` from `trustedProxies`. */
  readonly key?: Key | undefined
  /** What a request costs it: a positive safe integer. Default 1. */
  readonly cost?: number | undefined
  /**
   * A shadow limit: decided and spent with the others in the same store call, never denying; what it would
   * deny is counted (`wakuwaku_shadow_would_deny`, with the route's name) and logged. Default false.
   */
  readonly shadow?: boolean | undefined
}

/**
 * How a {@link Route} applies its limits.
 *
 * - `enforce`: a request any of its (enforced) limits denies is refused (429), with the IETF fields.
 * - `shadow`: every limit is decided and spent, and nothing is denied: a would-be denial is counted and
 *   logged with the route, the limit and its retry-after, and the response carries no rate-limit field.
 * - `delay`: a request over the rate waits its turn, up to `maxWait`.
 *
 * @since 0.2.0
 * @category models
 */
export type RouteMode = "enforce" | "shadow" | "delay"

/**
 * A route of {@link layer}: the requests it matches, its limits, how it applies them, and optionally an
 * upstream and a timeout of its own. Routes are tried in order, and the first that matches takes the
 * request; a request that matches none takes the default route (`upstream`, `timeout` and `rateLimit` of
 * {@link LayerOptions}). A route with no limits forwards every request it takes, as a health check needs.
 *
 * @since 0.2.0
 * @category models
 */
export interface Route<LR> {
  /** Its name (1 to 64 letters, digits, `_`, `.` or `-`), in logs and metrics. */
  readonly name: string
  /**
   * What it matches. None: every request; only the last route may have none, and it is then the default route
   * (named `default`, or another name), with no `rateLimit` beside it.
   */
  readonly match?: RouteMatch | undefined
  /** Its limits, decided as one; none: every request passes. */
  readonly limits?: ReadonlyArray<RouteLimit<LR>> | undefined
  /** Default `enforce`. */
  readonly mode?: RouteMode | undefined
  /** Under `delay`, the longest a request may wait for its turn. */
  readonly maxWait?: Duration.DurationInput | undefined
  /** Its upstream; default {@link LayerOptions}' `upstream`. */
  readonly upstream?: string | URL | undefined
  /** Its upstream's timeout; default {@link LayerOptions}' `timeout`. */
  readonly timeout?: Duration.DurationInput | undefined
}

/**
 * Options of {@link layer}: the forwarding ({@link Options}), the server ({@link ServeOptions}) and an
 * optional rate limit.
 *
 * @since 0.1.0
 * @category models
 */
export interface LayerOptions<LR> extends Options, ServeOptions {
  /** The rate limit in front of the upstream (of the default route, when there are routes); none: no limit. */
  readonly rateLimit?: RateLimitOptions<LR> | undefined
  /**
   * Routes, tried in order before the default route (see {@link Route}). Default none: every request takes the
   * default route.
   *
   * @since 0.2.0
   */
  readonly routes?: ReadonlyArray<Route<LR>> | undefined
  /**
   * The store-failure policy of the routes' limits. Default `rateLimit`'s; a route with limits needs one of
   * the two.
   *
   * @since 0.2.0
   */
  readonly onStoreFailure?: RateLimit.OnStoreFailure | undefined
  /**
   * The denial memory of the routes' limits: how many names' denials each limit remembers (see
   * `RateLimit.Options`). Default `rateLimit`'s, else 0: none.
   *
   * @since 0.2.0
   */
  readonly rememberDenials?: number | undefined
  /** The most header lines a request may have; past it, 431. Default 100 (Apache's `LimitRequestFields`). */
  readonly maxHeaderLines?: number | undefined
  /** How long a client has to send a whole request (head and body); past it, 408. Default 300 seconds. */
  readonly requestTimeout?: Duration.DurationInput | undefined
  /**
   * In delay mode ({@link DelayOptions}), the most requests this server holds waiting for their turn, from
   * their reservation asked until they are forwarded or refused; past it, a request is answered 503 with
   * `Proxy-Status: wakuwaku; error=proxy_internal_response` at once, without asking the store. Default 1000.
   */
  readonly maxWaiting?: number | undefined
  /** The admin port: `/metrics`, `/healthz` and `/readyz` on a server of their own. Default none. */
  readonly admin?: AdminOptions | undefined
  /** One JSON line per request (see {@link AccessLogOptions}). Default none. */
  readonly accessLog?: AccessLogOptions | undefined
}

/**
 * The admin port of {@link layer}: a node:http server of its own, never the public port (the same port is a
 * `RangeError`), serving
 *
 * - `GET /metrics`: every Effect Metric of the process in the Prometheus text format (0.0.4), named as
 *   `@opentelemetry/exporter-prometheus` names them (`_total` after a counter's name): this module's
 *   {@link requests}, {@link inFlight}, {@link upstreamDuration}, {@link delayed} and {@link delayWait};
 *   `RateLimit.decisions`, `RateLimit.storeFailures`, `RateLimit.denialMemoryHits`,
 *   `Limits.wouldDenyCounter`; and the library's telemetry metrics (`Telemetry.storeDuration`, the store's
 *   latency, and `Telemetry.decisions`), which the admin port turns on unless the application set
 *   `Telemetry.layer` itself;
 * - `GET /healthz`: 200 while the process serves;
 * - `GET /readyz`: 200 once the proxy listens, when the store answers a PING within 1 second, or does not
 *   and the store-failure policy serves without it (fail-open, a fallback); 503 under fail-closed with
 *   the store silent, and from the start of shutdown: the layer's closing first turns `/readyz` to 503,
 *   serves on for `drainDelay`, then closes the public listener (drained as {@link ServeOptions} says), and
 *   the admin port last.
 *
 * @since 0.2.0
 * @category models
 */
export interface AdminOptions {
  /** The admin port; 0 picks a free one (read it from {@link Server}'s `admin`). */
  readonly port: number
  /** The address it listens on. Default `127.0.0.1`: loopback only. */
  readonly host?: string | undefined
  /**
   * On shutdown, how long `/readyz` answers 503 while the proxy still serves, before its listener closes:
   * the time a load balancer polling `/readyz` needs to stop sending. Default 0.
   */
  readonly drainDelay?: Duration.DurationInput | undefined
}

/**
 * The access log of {@link layer}: one JSON object per line and per request, once its response is done,
 * with the keys `time` (ISO 8601, when it ended), `method`, `path` (the request target without its query),
 * `status` (499: the client left before the response began), `route`, `decision` (the rate limit's, as
 * `RateLimit.Decision`, or `none`), `deniedBy` (the policies that refused it, else `null`), `retryAfter`
 * (seconds, else `null`), `upstreamMs` (from forwarding to the end of the upstream's response, else `null`)
 * and `totalMs`; `query` when `query` is on, `wouldDeny` (shadow policies) and `waitedMs` (delay mode) when
 * they apply. No header value is ever written, and the query string only when `query` is on: both are where
 * credentials travel.
 *
 * @since 0.2.0
 * @category models
 */
export interface AccessLogOptions {
  readonly format: "json"
  /** Whether to write the query string (`query`, without `?`). Default false. */
  readonly query?: boolean | undefined
  /**
   * Where each line goes (with its line feed). Default stdout, the lines of one turn of the event loop in
   * one write.
   */
  readonly write?: ((line: string) => void) | undefined
}

/**
 * Where a server listens.
 *
 * @since 0.1.0
 * @category models
 */
export interface Address {
  readonly host: string
  readonly port: number
}

/**
 * The proxy {@link layer} runs: where it listens, how many denials it remembers and how many requests wait
 * their turn now.
 *
 * @since 0.1.0
 * @category tags
 */
export interface Server extends
  Context.TagClassShape<"wakuwaku/Proxy/Server", {
    readonly address: Address
    /** Where the admin port listens, if there is one. */
    readonly admin: Address | undefined
    /** How many names the denial memory holds now. */
    readonly denials: () => number
    /** How many requests wait their turn now (delay mode, {@link DelayOptions}); 0 otherwise. */
    readonly waiting: () => number
  }>
{}

/**
 * The tag of {@link Server}: `yield* Proxy.Server` gives its address and denial count.
 *
 * @since 0.1.0
 * @category tags
 */
export const Server: Context.Tag<Server, Server["Type"]> = errors.Server

/**
 * The server could not listen (the port is taken, the address is not this host's).
 *
 * @since 0.1.0
 * @category errors
 */
export interface ListenError extends Cause.YieldableError {
  readonly _tag: "ListenError"
  readonly port: number
  readonly host?: string | undefined
  readonly cause: unknown
}

/**
 * The class of {@link ListenError}, and its schema.
 *
 * @since 0.1.0
 * @category errors
 */
export const ListenError: Schema.TaggedErrorClass<ListenError, "ListenError", {
  readonly _tag: Schema.tag<"ListenError">
  readonly port: typeof Schema.Number
  readonly host: Schema.optional<typeof Schema.String>
  readonly cause: typeof Schema.Defect
}> = errors.ListenError

/**
 * The rate-limiting reverse proxy on a node:http server of its own, for the layer's lifetime: what
 * `wakuwaku proxy` runs. Each request is checked (header lines, target), keyed and decided by the rate
 * limit, and forwarded as {@link make} forwards it, with the same headers, `Proxy-Status` and failures;
 * the limit's refusals carry the middleware's fields and bodies.
 *
 * It is built on node:http and undici directly, not on @effect/platform's `HttpServer` and `HttpClient`,
 * for speed: the limiter runs on the Effect runtime the layer is built in (its requirements `LR` stay in
 * the layer's type), a remembered denial is answered without running any Effect, and the request goes to
 * the upstream over an undici `Pool` (keep-alive), each chunk of the response written straight to Node.
 * A request is decided before its body is invited (`100 Continue` only once allowed); a refusal that
 * leaves a body unread closes the connection instead of reading it. Throws on bad options, as
 * {@link make} and `RateLimit.middleware` do.
 *
 * Closing the layer shuts down as {@link serve} does.
 *
 * @since 0.1.0
 * @category layers
 */
export const layer: <LR = never>(options: LayerOptions<LR>) => Layer.Layer<Server, ListenError, LR> =
  internalServer.layer

/**
 * The proxy's metric names, by role.
 *
 * @since 0.2.0
 * @category metrics
 */
export interface MetricNames {
  readonly requests: "wakuwaku_proxy_requests"
  readonly inFlight: "wakuwaku_proxy_requests_in_flight"
  readonly upstreamDuration: "wakuwaku_proxy_upstream_duration_seconds"
  readonly delayed: "wakuwaku_proxy_delayed"
  readonly delayWait: "wakuwaku_proxy_delay_wait_seconds"
  /** `wakuwaku proxy --workers`: the primary's count of workers replaced ({@link workerRestarts}). */
  readonly workerRestarts: "wakuwaku_proxy_worker_restarts"
  /** `wakuwaku proxy --workers`: a gauge of each scrape, the workers serving the port. */
  readonly workers: "wakuwaku_proxy_workers"
  /** `wakuwaku proxy --workers`: a gauge of each scrape, the workers that did not answer it in time. */
  readonly workersUnanswered: "wakuwaku_proxy_workers_unanswered"
}

/**
 * The proxy's metric names ({@link layer}'s: always on, as the HTTP middleware's counters are).
 *
 * @since 0.2.0
 * @category metrics
 */
export const MetricNames: MetricNames = internalMetrics.MetricName

/**
 * Requests {@link layer} answered: a counter labelled `route` (`default` without routes), `decision` (the
 * rate limit's `RateLimit.Decision`, or `none`: no limit, or refused before it, such as a 431) and
 * `status` (the status sent; `499` when the client left before the response began). Counted when the
 * response is done.
 *
 * @since 0.2.0
 * @category metrics
 */
export const requests: Metric.Metric.Counter<number> = internalMetrics.requests

/**
 * Requests received and not yet answered in full, across every {@link layer} of the process: a gauge.
 *
 * @since 0.2.0
 * @category metrics
 */
export const inFlight: Metric.Metric.Gauge<number> = internalMetrics.inFlight

/**
 * From handing a request to the upstream to the end of its response (its last byte relayed, or the
 * failure), in seconds: a histogram labelled `route` and `unit` = `s`, buckets from 1 ms doubling to
 * about 33 s.
 *
 * @since 0.2.0
 * @category metrics
 */
export const upstreamDuration: Metric.Metric.Histogram<number> = internalMetrics.upstreamDuration

/**
 * Requests a delay-mode route held for their turn before forwarding them: a counter labelled `route`.
 *
 * @since 0.2.0
 * @category metrics
 */
export const delayed: Metric.Metric.Counter<number> = internalMetrics.delayed

/**
 * How long each held request waited for its turn, in seconds: a histogram labelled `route` and `unit` =
 * `s`.
 *
 * @since 0.2.0
 * @category metrics
 */
export const delayWait: Metric.Metric.Histogram<number> = internalMetrics.delayWait

/**
 * Worker processes of `wakuwaku proxy --workers N` that died and were replaced: a counter without labels, kept
 * by the primary, which shows it on the one admin port beside the workers' metrics added up. A worker's counters
 * die with it (the sums drop by its share, which Prometheus's `rate()` reads as a reset): this counter says when.
 *
 * @since 0.2.0
 * @category metrics
 */
export const workerRestarts: Metric.Metric.Counter<number> = internalMetrics.workerRestarts
