/**
 * @internal The proxy's own front end, `Proxy.layer`: a node:http server whose request handler keys the
 * request, asks the rate limit (a remembered denial at once; otherwise the store, on the Effect runtime the
 * layer was built in) and forwards with exchange.ts, writing straight to Node's response. No fiber runs
 * for a remembered denial, and one per request otherwise (the limiter's).
 *
 * It also holds what both front ends' Node servers share ({@link configure}): every header line counted
 * (431 past the cap, never a line dropped), Node's own 400/408/431/417 answered with `Proxy-Status`, and a
 * refusal that leaves a request body unread closing the connection after a small bound.
 */
import * as Cause from "effect/Cause"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Runtime from "effect/Runtime"
import * as Schedule from "effect/Schedule"
import type * as Scope from "effect/Scope"
import { createHash } from "node:crypto"
import * as Http from "node:http"
import * as Https from "node:https"
import type * as Net from "node:net"
import type { Pool } from "undici"
import type * as Proxy from "../../Proxy.js"
import type * as RateLimit from "../../RateLimit.js"
import type * as Redis from "../../Redis.js"
import { positive, toMillis } from "../duration.js"
import * as clientIp from "../http/clientIp.js"
import * as decision from "../http/decision.js"
import type * as denials from "../http/denials.js"
import * as failure from "../http/failure.js"
import { appendItem } from "../http/fields.js"
import * as render from "../http/render.js"
import * as shadow from "../shadow.js"
import * as admin from "./admin.js"
import * as delay from "./delay.js"
import * as dispatch from "./dispatch.js"
import * as ProxyModule from "./errors.js"
import * as exchange from "./exchange.js"
import * as observe from "./observe.js"
import * as reload from "./reload.js"
import * as routes from "./routes.js"
import { targetPath, underBase } from "./target.js"

/**
 * @internal The most header lines a request may have by default: Apache's `LimitRequestFields`, which leaves room below
 * any upstream's own cap (Node drops lines past about 1000 silently) for the lines the proxy adds.
 */
export const MAX_HEADER_LINES = 100

/** @internal How much of an unread request body the proxy reads after refusing it before it closes the connection. */
export const DRAIN_BOUND = 64 * 1024

/** A list field's lines as one value (RFC 9651 §4.2: joined with commas). */
const joined = (value: string | ReadonlyArray<string> | undefined): string | undefined =>
  typeof value === "object" ? value.join(", ") : value

/** The head of a response the proxy makes itself on a raw socket (Node's own errors). */
const rawResponse = (status: number, reason: string, type: string, text: string): string => {
  const body = `${status} ${text}\n`
  return `HTTP/1.1 ${status} ${reason}\r\nContent-Type: text/plain\r\nContent-Length: ${Buffer.byteLength(body)}\r\n` +
    `Proxy-Status: ${exchange.generatedStatus(type)}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n${body}`
}

const CLIENT_ERRORS: Record<string, string> = {
  HPE_HEADER_OVERFLOW: rawResponse(
    431,
    "Request Header Fields Too Large",
    "http_request_error",
    "the request head is too large"
  ),
  ERR_HTTP_REQUEST_TIMEOUT: rawResponse(408, "Request Timeout", "http_request_error", "the request took too long"),
  HPE_CHUNK_EXTENSIONS_OVERFLOW: rawResponse(
    413,
    "Payload Too Large",
    "http_request_error",
    "chunk extensions too large"
  )
}
const BAD_REQUEST = rawResponse(400, "Bad Request", "http_request_error", "the request is not valid HTTP/1.1")

/** @internal Writes a response the proxy makes itself, with `Proxy-Status`, and refuses an unread body. */
export const answer = (
  request: Http.IncomingMessage,
  response: Http.ServerResponse,
  status: number,
  headers: Record<string, string>,
  body: string
): void => {
  if (!request.complete && exchange.hasBody(request.headers)) refuseBody(request, response)
  response.writeHead(status, { ...headers, "content-length": String(Buffer.byteLength(body)) })
  response.end(body)
}

/**
 * @internal The request's body will not be forwarded: the response closes the connection, and at most
 * {@link DRAIN_BOUND} more bytes of the body are read (a client that sends the rest anyway has its
 * connection destroyed, not drained for as long as it likes).
 */
export const refuseBody = (request: Http.IncomingMessage, response: Http.ServerResponse): void => {
  response.shouldKeepAlive = false
  response.setHeader("connection", "close")
  let read = 0
  request.on("data", (chunk: Buffer) => {
    read += chunk.length
    if (read > DRAIN_BOUND) request.socket.destroy()
  })
  // Past the response, whatever is left of the body is the client's problem, not this process's.
  response.once("finish", () => {
    if (!request.complete) setImmediate(() => request.socket.destroy())
  })
}

/** Connections that close once the response in flight is sent (see {@link closeAfter}). */
const closingAfter = new WeakSet<Net.Socket>()

/**
 * What follows a whole request on its connection is not valid HTTP, while that request is being answered
 * (forwarded, perhaps already executed upstream): it gets its own response, and the connection closes
 * after it. An error response sent now would be read as that request's; nothing after it is answered.
 */
const closeAfter = (message: Http.ServerResponse, socket: Net.Socket): void => {
  if (closingAfter.has(socket)) return
  closingAfter.add(socket)
  if (!message.headersSent) message.shouldKeepAlive = false
  else message.once("finish", () => socket.end())
}

/**
 * @internal What both front ends' servers share: no line of a request head dropped (Node's
 * `maxHeadersCount` silently keeps only the first ~1000; here every line is kept and {@link tooManyLines}
 * refuses the request), Node's own error responses carrying `Proxy-Status` (never one that would pass for
 * the answer to a request still in flight), and an `Expect` other than `100-continue` answered 417 the same
 * way.
 */
export const configure = (server: Http.Server): void => {
  server.maxHeadersCount = 0
  server.on("clientError", (error: Error & { readonly code?: string }, socket: Net.Socket) => {
    const message = (socket as Net.Socket & { _httpMessage?: Http.ServerResponse | null })._httpMessage
    if (error.code === "ECONNRESET" || !socket.writable) return void socket.destroy()
    if (message != null && !message.writableFinished) {
      // The error is past a whole request that is being answered; otherwise it is that request's own.
      if (message.req.complete) return closeAfter(message, socket)
      if (message.headersSent) return void socket.destroy()
    }
    socket.end(CLIENT_ERRORS[error.code ?? ""] ?? BAD_REQUEST)
  })
  server.on("checkExpectation", (request: Http.IncomingMessage, response: Http.ServerResponse) => {
    answer(
      request,
      response,
      417,
      { "content-type": "text/plain", "proxy-status": exchange.generatedStatus("http_request_error") },
      "417 the proxy meets no expectation but 100-continue\n"
    )
  })
}

/**
 * @internal Whether a request must be refused before anything else is read of it: a version other than
 * HTTP/1.x (an HTTP/0.9 request line, which has none, or a text request line that says HTTP/2.0), or more
 * than one `Host` line (RFC 9112 §3.2: a server MUST answer 400). Node's parser accepts both.
 */
export const malformed = (request: Http.IncomingMessage): boolean => {
  if (request.httpVersionMajor !== 1) return true
  const raw = request.rawHeaders
  let hosts = 0
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]!
    // The usual spellings first: no lowercase copy per line on the hot path.
    const host = name.length === 4 && (name === "Host" || name === "host" || name.toLowerCase() === "host")
    if (host && ++hosts > 1) return true
  }
  return false
}

/** @internal The 400 of a {@link malformed} request; the connection closes (its framing is not to be trusted). */
export const refuseMalformed = (request: Http.IncomingMessage, response: Http.ServerResponse): void => {
  response.shouldKeepAlive = false
  answer(
    request,
    response,
    400,
    {
      "content-type": "text/plain",
      "proxy-status": exchange.generatedStatus("http_request_error"),
      "connection": "close"
    },
    "400 the request is not valid HTTP/1.1\n"
  )
}

/** @internal Whether a request has more header lines than `max`. */
export const tooManyLines = (request: Http.IncomingMessage, max: number): boolean => request.rawHeaders.length > 2 * max

/** @internal The 431 of a request with too many header lines. */
export const refuseLines = (request: Http.IncomingMessage, response: Http.ServerResponse, max: number): void =>
  answer(
    request,
    response,
    431,
    {
      "content-type": "text/plain",
      "proxy-status": exchange.generatedStatus("http_request_error", "too many header lines"),
      "cache-control": "no-store"
    },
    `431 the request has more than ${max} header lines\n`
  )

/**
 * @internal A route as the handler takes it, made once by {@link layer}: what it matches, where it forwards,
 * its limit and the key of each of the limit's limiters.
 */
export interface RouteOptions<LR> {
  readonly name: string
  /** None: every request. */
  readonly match: routes.Match | undefined
  readonly forwarding: exchange.Resolved
  /** undici's pool to its upstream. */
  readonly pool: Pool
  readonly limit: decision.Limit<LR> | undefined
  /** Delay mode (./delay.ts): then `limit` is its reserving limit. */
  readonly delay: delay.Delay<LR> | undefined
  /** Each listed limiter's key, in the limit's order (shadow ones included); one when they all share it. */
  readonly keys: ReadonlyArray<Proxy.Key>
  /** Whether the limit has shadow limiters: their would-be denials are logged. */
  readonly shadows: boolean
}

/**
 * @internal What the handler needs: the default route's forwarding, limit and key, the routes tried before it,
 * the runtime the limits run on.
 */
export interface HandlerOptions<LR> {
  readonly forwarding: exchange.Resolved
  /** undici's pool to the upstream (the hot path), node:http's agents for what undici will not send. */
  readonly agents: { readonly pool: Pool; readonly http: Http.Agent; readonly https: Https.Agent }
  readonly limit: decision.Limit<LR> | undefined
  /** The default route's delay (./delay.ts), if it is in delay mode: then `limit` is its reserving limit. */
  readonly delay?: delay.Delay<LR> | undefined
  readonly key: Proxy.Key
  /** The routes, in order, tried before the default route (named `default`). */
  readonly routes?: ReadonlyArray<RouteOptions<LR>> | undefined
  readonly maxHeaderLines: number
  readonly runtime: Runtime.Runtime<LR>
  /** Whether the server is shutting down: new requests on kept-alive connections close them. */
  readonly closing: () => boolean
  /** What is told of each request: metrics, access log (./observe.ts). */
  readonly observer: observe.Observer
}

/** What the parts of a handler share for one route: its options, resolved once per server. */
interface Handling<LR> {
  /** The route's name (`default` for the default route). */
  readonly route: string
  readonly forwarding: exchange.Resolved
  readonly upstream: exchange.Resolved["upstream"]
  /** node:http's agent of the upstream's protocol, for what undici will not send. */
  readonly agent: Http.Agent | Https.Agent
  readonly pool: Pool
  readonly limit: decision.Limit<LR> | undefined
  readonly delay: delay.Delay<LR> | undefined
  /** The limit's `RateLimit-Policy`, if it has enforced limits. */
  readonly policyField: string | undefined
  /** The name (or one per listed limiter) a request is decided under. */
  readonly names: (input: Proxy.KeyInput) => decision.Names
  /** Whether a would-be denial is logged (the limit has shadow limiters). */
  readonly shadows: boolean
  readonly maxHeaderLines: number
  readonly runCallback: ReturnType<typeof Runtime.runCallback<LR>>
  readonly runFork: ReturnType<typeof Runtime.runFork<LR>>
  readonly closing: () => boolean
  readonly observer: observe.Observer
  /** The route as the observation counts it. */
  readonly observed: observe.Route
}

/** The names of a request for limiters keyed by `keys` (one per limiter, or one for all): each key run once. */
const namesOf = (keys: ReadonlyArray<Proxy.Key>): (input: Proxy.KeyInput) => decision.Names => {
  const distinct = [...new Set(keys)]
  if (distinct.length === 1) return distinct[0]!
  const at = keys.map((key) => distinct.indexOf(key))
  return (input) => {
    const values = distinct.map((key) => key(input))
    return at.map((i) => values[i]!)
  }
}

const handling = <LR>(
  options: HandlerOptions<LR>,
  route: Omit<RouteOptions<LR>, "match">
): Handling<LR> => {
  const { maxHeaderLines, runtime } = options
  const { forwarding, limit } = route
  const { upstream } = forwarding
  return {
    route: route.name,
    forwarding,
    upstream,
    agent: upstream.protocol === "https:" ? options.agents.https : options.agents.http,
    pool: route.pool,
    limit,
    delay: route.delay,
    policyField: limit === undefined || limit.field === "" ? undefined : limit.field,
    names: namesOf(route.keys),
    shadows: route.shadows,
    maxHeaderLines,
    runCallback: Runtime.runCallback(runtime),
    runFork: Runtime.runFork(runtime),
    closing: options.closing,
    observer: options.observer,
    observed: observe.route(options.observer, route.name)
  }
}

/** Logs a warning about `request` on the handler's runtime. */
const warn = <LR>(
  h: Handling<LR>,
  request: Http.IncomingMessage,
  message: string,
  annotations: Record<string, unknown>
): void => {
  h.runFork(
    Effect.logWarning(`proxy: ${request.method} ${request.url}: ${message}`).pipe(Effect.annotateLogs(annotations))
  )
}

/** `Proxy-Status` of the proxy's refusals: a 429's, the others' (413, 503). */
const REFUSED_STATUS = {
  tooMany: exchange.generatedStatus(exchange.RATE_LIMITED),
  other: exchange.generatedStatus("proxy_internal_response")
}

/** A refusal of the limit (429, 413, 503): the one rendering (../http/render.ts), the proxy's `Proxy-Status`. */
const refuse = <LR>(
  h: Handling<LR>,
  request: Http.IncomingMessage,
  response: Http.ServerResponse,
  verdict: decision.Verdict
): void => {
  observe.refused(response, verdict)
  // The parts of `render.refusal`, with no object around them: a flood of remembered 429s is a hot path too.
  const headers = render.refusalHeaders(h.policyField!, verdict)
  headers["proxy-status"] = verdict.status === 429 ? REFUSED_STATUS.tooMany : REFUSED_STATUS.other
  answer(request, response, verdict.status, headers, verdict.body ?? "")
}

/** The upstream failed, or gave no head in time: the proxy's own 502 or 504, with the limit's fields. */
const upstreamFailed = <LR>(
  h: Handling<LR>,
  request: Http.IncomingMessage,
  response: Http.ServerResponse,
  fields: decision.Verdict | undefined,
  error: Proxy.ProxyError
): void => {
  const { body, proxyStatus, status } = exchange.failure(error)
  warn(h, request, exchange.STATUS[error.reason].text, { reason: error.reason, cause: String(error.cause) })
  if (response.headersSent) return void response.destroy()
  const headers: Record<string, string> = {
    "content-type": "text/plain",
    "proxy-status": proxyStatus,
    "cache-control": "no-store"
  }
  if (h.policyField !== undefined) headers["ratelimit-policy"] = h.policyField
  if (fields?.limit !== undefined) headers["ratelimit"] = fields.limit
  answer(request, response, status, headers, body)
}

/**
 * Writes the client's head from the upstream's: end-to-end headers, the limit's fields after the upstream's
 * own (an intermediary must not make the policy look more permissive, draft §7.2), `Proxy-Status`.
 */
const writeHead = <LR>(
  h: Handling<LR>,
  response: Http.ServerResponse,
  fields: decision.Verdict | undefined,
  status: number,
  upstreamHeaders: Readonly<Record<string, string | Array<string> | undefined>>
): void => {
  const head = exchange.responseHead(status, upstreamHeaders)
  if (h.policyField !== undefined) {
    const headers = head.headers
    headers["ratelimit-policy"] = appendItem(joined(headers["ratelimit-policy"]), h.policyField)
    if (fields?.limit !== undefined) headers["ratelimit"] = appendItem(joined(headers["ratelimit"]), fields.limit)
  }
  if (h.closing()) head.headers["connection"] = "close"
  response.writeHead(head.status, head.headers)
  // A close-delimited body (its final coding not chunked) goes as it came, even when a coding named chunked
  // comes before the final one (which Node's header check would take for its own chunked framing).
  if (head.closeDelimited) response.chunkedEncoding = false
}

/**
 * Forwards `request` to the upstream (over undici, else node:http) with the limit's fields on the response.
 * One function, its state one closure's (as the handler's closure was): an allowed request allocates nothing
 * more for it than before the handler was split.
 */
const forward = <LR>(
  h: Handling<LR>,
  request: Http.IncomingMessage,
  response: Http.ServerResponse,
  path: string,
  fields: decision.Verdict | undefined
): void => {
  observe.forwarded(response, fields)
  const withBody = exchange.hasBody(request.headers)
  const viaUndici = dispatch.dispatchable(path, request.headers["transfer-encoding"])
  // Over undici no Transfer-Encoding is written: it frames a body of unknown length `chunked` itself.
  const headers = exchange.requestHeaders(
    request.headers,
    request.socket.remoteAddress,
    withBody && !viaUndici,
    h.forwarding
  )
  if (/^100-continue$/i.test(request.headers["expect"] ?? "")) response.writeContinue()
  let finished = false
  const fail = (error: Proxy.ProxyError) => {
    if (!finished) upstreamFailed(h, request, response, fields, error)
  }
  const { upstream } = h
  const abort = viaUndici
    ? dispatch.exchange(h.pool, request, withBody, { method: request.method!, path, headers }, response, h.forwarding, {
      head: (status, upstreamHeaders) => {
        if (!finished) writeHead(h, response, fields, status, upstreamHeaders)
      },
      fail
    })
    : exchange.exchange(
      request,
      withBody,
      {
        protocol: upstream.protocol,
        hostname: upstream.hostname,
        port: upstream.port,
        method: request.method,
        path,
        headers,
        agent: h.agent
      },
      h.forwarding,
      (settled) => {
        if (settled._tag === "Failure") return fail(settled.error)
        if (finished) return
        const upstreamResponse = settled.response
        // A body cut short by the upstream reaches the client cut short: its connection is dropped, not ended.
        upstreamResponse.once("error", () => {
          if (!response.writableFinished) response.destroy()
        })
        const status = upstreamResponse.statusCode ?? 502
        writeHead(h, response, fields, status, upstreamResponse.headers)
        if (request.method === "HEAD" || status === 204 || status === 304) {
          upstreamResponse.resume()
          response.end()
        } else {
          upstreamResponse.pipe(response)
        }
      }
    )
  response.once("close", () => {
    finished = true
    // The client went away before the whole response: abort the upstream request, or release its connection.
    if (!response.writableFinished) abort()
  })
}

/** A plain-text answer of the proxy's own (`Proxy-Status` of `type`), to a request it will not forward. */
const plain = (
  request: Http.IncomingMessage,
  response: Http.ServerResponse,
  status: number,
  type: string,
  text: string
): void =>
  answer(
    request,
    response,
    status,
    { "content-type": "text/plain", "proxy-status": exchange.generatedStatus(type) },
    text
  )

/** The limit could not decide: a name the store will not take (a key over 4096 bytes, from a header): 400; else 500. */
const undecided = <LR>(
  h: Handling<LR>,
  request: Http.IncomingMessage,
  response: Http.ServerResponse,
  cause: Cause.Cause<Redis.InvalidInput>
): void => {
  const invalid = Cause.failureOption(cause)
  warn(h, request, "the rate limit could not decide", { cause: Cause.pretty(cause) })
  return Option.isSome(invalid)
    ? plain(request, response, 400, "http_request_error", `400 ${invalid.value.message}\n`)
    : plain(request, response, 500, "proxy_internal_error", "500 the rate limit could not decide\n")
}

/** A name as a log may show it: each part that is not an address (a header's value) as a fingerprint. */
const shownName = (name: string): string =>
  name.split("\n").map((part) => {
    if (/^[0-9a-f.:]+(?:\/\d+)?$/i.test(part)) return part
    const eq = part.indexOf("=")
    const digest = createHash("sha256").update(eq < 0 ? part : part.slice(eq + 1)).digest("hex").slice(0, 12)
    return `${eq < 0 ? "" : part.slice(0, eq + 1)}#${digest}`
  }).join(" ")

/**
 * Logs what the route's shadow limits would have denied (counted already, by the decision): the route, each
 * limit with its retry-after, and whom (a header's value as a fingerprint, never as it came).
 */
const logWouldDeny = <LR>(h: Handling<LR>, request: Http.IncomingMessage, verdict: decision.Verdict): void => {
  for (const denial of verdict.wouldDeny) {
    const retryAfter = Option.match(denial.retryAfter, {
      onNone: () => "never (the cost is above its quota)",
      onSome: (d) => `${Math.ceil(Duration.toMillis(d) / 1000)} s`
    })
    h.runFork(
      Effect.logInfo(`proxy: route ${h.route}: ${denial.limit} would deny (retry after ${retryAfter})`).pipe(
        Effect.annotateLogs({
          "proxy.route": h.route,
          "ratelimit.policy": denial.limit,
          "ratelimit.retryAfter": Option.match(denial.retryAfter, {
            onNone: () => -1,
            onSome: (d) => Math.ceil(Duration.toMillis(d) / 1000)
          }),
          "ratelimit.key": shownName(denial.name),
          "http.method": request.method,
          "url.path": (request.url ?? "").split("?")[0]
        })
      )
    )
  }
}

/** Keys the request and asks the limit (a remembered denial at once, else the store), then forwards or refuses. */
const limited = <LR>(
  h: Handling<LR>,
  limit: decision.Limit<LR>,
  request: Http.IncomingMessage,
  response: Http.ServerResponse,
  path: string
): void => {
  // Only `set-cookie` is an array in a request's headers, and no key reads it.
  const headers = request.headers as Readonly<Record<string, string | undefined>>
  const names = h.names({ remoteAddress: request.socket.remoteAddress, headers })
  const remembered = limit.recall(names, 1)
  if (remembered !== undefined) return refuse(h, request, response, remembered)
  h.runCallback(limit.decide(names, 1), {
    onExit: (exit) => {
      if (response.destroyed) return
      if (Exit.isFailure(exit)) return undecided(h, request, response, exit.cause)
      const verdict = exit.value
      if (h.shadows && verdict.wouldDeny.length > 0) logWouldDeny(h, request, verdict)
      return verdict.pass ? forward(h, request, response, path, verdict) : refuse(h, request, response, verdict)
    }
  })
}

/**
 * Delay mode (./delay.ts): keys the request, refuses a remembered denial at once, else reserves its turn and
 * forwards it when the turn comes (or refuses it: 429, 413, or 503 past the bound of waiting requests). A
 * client whose connection closes while it waits interrupts its fiber, which gives the turn back.
 */
const delayed = <LR>(
  h: Handling<LR>,
  d: delay.Delay<LR>,
  request: Http.IncomingMessage,
  response: Http.ServerResponse,
  path: string
): void => {
  const headers = request.headers as Readonly<Record<string, string | undefined>>
  const names = h.names({ remoteAddress: request.socket.remoteAddress, headers })
  const remembered = d.limit.recall(names, 1)
  if (remembered !== undefined) return refuse(h, request, response, remembered)
  let settled = false
  let gone = false
  const cancel = h.runCallback(d.decide(names, 1), {
    onExit: (exit) => {
      settled = true
      if (gone || response.destroyed) return
      if (Exit.isFailure(exit)) return undecided(h, request, response, exit.cause)
      const outcome = exit.value
      if (outcome._tag === "Full") return answer(request, response, 503, d.full.headers(), d.full.body())
      const verdict = outcome.verdict
      if (verdict.pass && outcome.waitedMs > 0) observe.waited(response, outcome.waitedMs)
      return verdict.pass ? forward(h, request, response, path, verdict) : refuse(h, request, response, verdict)
    }
  })
  if (settled) return
  response.once("close", () => {
    gone = true
    if (!settled) cancel()
  })
}

/**
 * The routes: which route's handling a request takes, by its method, `Host` and {@link targetPath} (the
 * default's when there are no routes).
 */
type Router<LR> = (method: string, host: string | undefined, target: string) => Handling<LR>

/** Handles one request: refuses what cannot be forwarded, then forwards it, through its route's limit if any. */
const handle = <LR>(
  router: Router<LR>,
  maxHeaderLines: number,
  observer: observe.Observer,
  request: Http.IncomingMessage,
  response: Http.ServerResponse
): void => {
  observe.begin(observer, response)
  if (tooManyLines(request, maxHeaderLines)) return refuseLines(request, response, maxHeaderLines)
  if (malformed(request)) return refuseMalformed(request, response)
  const target = targetPath(request.url ?? "/", request.method)
  if (target === undefined) {
    return plain(request, response, 400, "http_request_error", "400 the request target cannot be forwarded\n")
  }
  const h = router(request.method!, request.headers.host, target)
  observe.routed(response, h.observed)
  const path = underBase(h.upstream, target)
  if (h.delay !== undefined) return delayed(h, h.delay, request, response, path)
  if (h.limit === undefined) return forward(h, request, response, path, undefined)
  limited(h, h.limit, request, response, path)
}

/** The router of a handler's routes (the default route's handling when there are none). */
const routerOf = <LR>(options: HandlerOptions<LR>): Router<LR> => {
  const fallback = handling(options, {
    name: "default",
    forwarding: options.forwarding,
    pool: options.agents.pool,
    limit: options.limit,
    delay: options.delay,
    keys: [options.key],
    shadows: false
  })
  const routed = (options.routes ?? []).map((route) => ({ match: route.match, h: handling(options, route) }))
  const choose = routes.compile<{ readonly match?: routes.Match | undefined; readonly h: Handling<LR> }>(routed, {
    h: fallback
  })
  return routed.length === 0 ? () => fallback : (method, host, target) => {
    const q = target.indexOf("?")
    return choose(method, host, q < 0 ? target : target.slice(0, q)).h
  }
}

/** @internal The request handler of `Proxy.layer` (of one configuration, never reloaded). */
export const handler = <LR>(options: HandlerOptions<LR>) => {
  const router = routerOf(options)
  const { maxHeaderLines, observer } = options
  return (request: Http.IncomingMessage, response: Http.ServerResponse): void =>
    handle(router, maxHeaderLines, observer, request, response)
}

/** @internal Stops accepting, closes idle connections as in-flight responses finish, after `grace` drops the rest. */
export const drain = (server: Http.Server, grace: Duration.Duration): Effect.Effect<void> =>
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

/** @internal Listens on the port for the scope (a `ListenError` if it cannot), draining on close. */
export const listen = (
  server: Http.Server,
  options: Proxy.ServeOptions
): Effect.Effect<Proxy.Address, Proxy.ListenError, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.async<Proxy.Address, Proxy.ListenError>((resume) => {
      const onError = (cause: Error) =>
        resume(Effect.fail(new ProxyModule.ListenError({ port: options.port, host: options.host, cause })))
      server.once("error", onError)
      server.listen(options.port, options.host, () => {
        server.off("error", onError)
        const address = server.address() as Net.AddressInfo
        resume(Effect.succeed({ host: address.address, port: address.port }))
      })
    }),
    () => drain(server, Duration.decode(options.shutdownTimeout ?? "10 seconds"))
  )

/** A route's name: a short word, as a namespace is, other than the default route's. */
const ROUTE_NAME = /^[A-Za-z0-9_.-]{1,64}$/

/** A route of the layer's options, checked and made ready for the handler (its pool apart). */
type Prepared<LR> = Omit<RouteOptions<LR>, "pool">

/** `routes[i]` of the options, checked (a `TypeError` or `RangeError` now) and made ready. */
const prepareRoute = <LR>(
  options: Proxy.LayerOptions<LR>,
  route: Proxy.Route<LR>,
  at: string,
  defaultKey: Proxy.Key,
  waiting: delay.Waiting
): Prepared<LR> => {
  if (typeof route.name !== "string" || !ROUTE_NAME.test(route.name)) {
    throw new TypeError(
      `wakuwaku/Proxy: ${at}.name must be 1 to 64 letters, digits, '_', '.' or '-', got ${JSON.stringify(route.name)}`
    )
  }
  routes.checkMatch(route.match ?? {}, at)
  const mode = route.mode ?? "enforce"
  if (mode !== "enforce" && mode !== "shadow" && mode !== "delay") {
    throw new TypeError(`wakuwaku/Proxy: ${at}.mode must be enforce, shadow or delay, got ${JSON.stringify(mode)}`)
  }
  const forwarding = exchange.resolve({
    upstream: route.upstream ?? options.upstream,
    timeout: route.timeout ?? options.timeout,
    trustedProxies: options.trustedProxies
  })
  const listed = route.limits ?? []
  if (listed.length === 0) {
    return {
      name: route.name,
      match: route.match,
      forwarding,
      limit: undefined,
      delay: undefined,
      keys: [],
      shadows: false
    }
  }
  const onStoreFailure = options.onStoreFailure ?? options.rateLimit?.onStoreFailure
  if (onStoreFailure === undefined) {
    throw new TypeError(`wakuwaku/Proxy: ${at} has limits: give onStoreFailure (or rateLimit's)`)
  }
  const shadowed = listed.map((l) => mode === "shadow" || l.shadow === true)
  const limitOptions: decision.LimitOptions<LR> = {
    limiter: listed.map((l, i) => shadowed[i] ? shadow.make(l.limiter) as RateLimit.Shadow<LR> : l.limiter),
    onStoreFailure,
    rememberDenials: options.rememberDenials ?? options.rateLimit?.rememberDenials,
    costs: listed.map((l) => l.cost ?? 1)
  }
  const delayed = mode === "delay" ? delayOf(limitOptions, route, at, waiting) : undefined
  const limit = delayed?.limit ?? decision.make<LR>(limitOptions, route.name)
  return {
    name: route.name,
    match: route.match,
    forwarding,
    limit,
    delay: delayed,
    keys: listed.map((l) => l.key ?? defaultKey),
    shadows: shadowed.some((s) => s)
  }
}

/**
 * Delay mode (nginx's `burst` with `delay`, ./delay.ts): a request over the rate waits its turn, up to the route's
 * `maxWait` (required), in its one limit, a token bucket (a `TypeError` otherwise).
 */
const delayOf = <LR>(
  limitOptions: decision.LimitOptions<LR>,
  route: Proxy.Route<LR>,
  at: string,
  waiting: delay.Waiting
): delay.Delay<LR> => {
  if (route.maxWait === undefined) {
    throw new TypeError(`wakuwaku/Proxy: ${at}.mode "delay" needs maxWait: the longest a request waits its turn`)
  }
  return delay.make(limitOptions, positive(route.maxWait, `${at}.maxWait`), waiting, route.name)
}

/** Whether a route matches every request: it has no match, or one with no field. */
const takesAll = (match: Proxy.RouteMatch | undefined): boolean =>
  match === undefined ||
  (match.methods === undefined && match.host === undefined && match.path === undefined && match.prefix === undefined)

/**
 * The routes of `options`, checked and made ready: names are distinct; only the last may take every request
 * (it is the default route then, and `rateLimit` would never apply); only that one may be named `default`.
 */
const prepareRoutes = <LR>(
  options: Proxy.LayerOptions<LR>,
  defaultKey: Proxy.Key,
  waiting: delay.Waiting,
  kept: (route: Proxy.Route<LR>) => Prepared<LR> | undefined
): ReadonlyArray<Prepared<LR>> => {
  const given = options.routes ?? []
  const prepared = given.map((route, i) =>
    kept(route) ?? prepareRoute(options, route, `routes[${i}]`, defaultKey, waiting)
  )
  const seen = new Set<string>()
  given.forEach((route, i) => {
    const at = `wakuwaku/Proxy: routes[${i}]`
    if (seen.has(route.name)) throw new TypeError(`${at}.name ${JSON.stringify(route.name)} is given twice`)
    seen.add(route.name)
    const last = i === given.length - 1
    if (takesAll(route.match)) {
      if (!last) {
        throw new TypeError(`${at} takes every request: only the last route may (the routes after it never would)`)
      }
      if (options.rateLimit !== undefined) {
        throw new TypeError(`${at} takes every request: rateLimit, the default route's limit, would never apply`)
      }
    } else if (route.name === "default") {
      throw new TypeError(
        `${at}.name "default" is the default route's: only a last route that takes every request has it`
      )
    }
  })
  return prepared
}

/** One undici pool per upstream origin, made when first needed (a reload may add origins), closed with the scope. */
const poolRegistry = Effect.acquireRelease(
  Effect.sync(() => {
    const pools = new Map<string, Pool>()
    const poolOf = (upstream: exchange.Resolved["upstream"]): Pool => {
      let pool = pools.get(upstream.origin)
      if (pool === undefined) pools.set(upstream.origin, pool = dispatch.pool(upstream))
      return pool
    }
    return { pools, poolOf }
  }),
  ({ pools }) =>
    // Closing is all a finalizer can do: a pool that fails to close has nothing left to release.
    Effect.promise(() => Promise.all([...pools.values()].map((pool) => pool.destroy().catch(() => undefined))))
)

/**
 * What one configuration of `Proxy.layer` makes for requests, checked and made in full before it is used (and,
 * on reload, before it replaces the running one: ./reload.ts).
 */
interface Configured<LR> {
  readonly options: Proxy.LayerOptions<LR>
  readonly forwarding: exchange.Resolved
  /** The default route's limit and delay. */
  readonly limit: decision.Limit<LR> | undefined
  readonly delay: delay.Delay<LR> | undefined
  readonly key: Proxy.Key
  /** The routes, in order, with the options each was made of. */
  readonly routes: ReadonlyArray<{ readonly source: Proxy.Route<LR>; readonly prepared: Prepared<LR> }>
  readonly maxWaiting: number
  readonly memories: ReadonlyArray<denials.Denials>
}

/**
 * `options` checked and made ready (a `TypeError` or `RangeError` now). With the running configuration
 * `previous` (a reload), the default route and each route equal to one of it are kept as they were made, with
 * their limits' denial memory and their delay (./reload.ts).
 */
const prepareConfiguration = <LR>(
  options: Proxy.LayerOptions<LR>,
  waiting: delay.Waiting,
  previous?: Configured<LR>
): Configured<LR> => {
  const forwarding = exchange.resolve(options)
  const maxWaiting = delay.validMaxWaiting(options.maxWaiting ?? delay.MAX_WAITING)
  const rateLimit = options.rateLimit
  const keepDefault = previous !== undefined && reload.sameRateLimit(previous.options, options)
  const delayed = keepDefault
    ? previous.delay
    : rateLimit?.delay === undefined
    ? undefined
    : delay.make(rateLimit, positive(rateLimit.delay.maxWait, "rateLimit.delay.maxWait"), waiting)
  const limit = keepDefault
    ? previous.limit
    : rateLimit === undefined
    ? undefined
    : delayed?.limit ?? decision.make(rateLimit)
  const defaultKey = clientIp.resolver({ trustedProxies: options.trustedProxies })
  const key = keepDefault ? previous.key : rateLimit?.key ?? defaultKey
  const kept = (route: Proxy.Route<LR>) =>
    previous?.routes.find((r) => reload.sameRoute(previous.options, r.source, options, route))?.prepared
  const prepared = prepareRoutes(options, defaultKey, waiting, kept)
  const routes = prepared.map((p, i) => ({ source: options.routes![i]!, prepared: p }))
  const memories = [limit, ...prepared.map((r) => r.limit)].flatMap((l) => l?.memories ?? [])
  return { options, forwarding, limit, delay: delayed, key, routes, maxWaiting, memories }
}

/**
 * @internal `Proxy.layer`, which also provides its {@link reload.Reloader}: `Proxy.layer` is this layer, typed with
 * `Proxy.Server` alone. With `admin`, `expose` offers the admin state: on a port of its own by default; a worker of
 * `wakuwaku proxy --workers` offers it to the primary instead (./fleet.ts).
 */
export const layerReloadable = <LR>(
  options: Proxy.LayerOptions<LR>,
  expose: admin.Expose = admin.serve
): Layer.Layer<Proxy.Server | reload.Reloader, Proxy.ListenError, LR> => {
  const maxHeaderLines = options.maxHeaderLines ?? MAX_HEADER_LINES
  if (!Number.isSafeInteger(maxHeaderLines) || maxHeaderLines < 1) {
    throw new RangeError(
      `wakuwaku/Proxy: maxHeaderLines must be a positive safe integer, got ${String(maxHeaderLines)}`
    )
  }
  const requestTimeout = Math.min(
    toMillis(positive(options.requestTimeout ?? "300 seconds", "requestTimeout")),
    2 ** 31 - 1
  )
  // The requests held waiting, bounded per server: every route in delay mode counts in it.
  const waiting = new delay.Waiting(delay.MAX_WAITING)
  const first = prepareConfiguration(options, waiting)
  waiting.max = first.maxWaiting
  // What a reload does not change (a restart does): the observation, the access log, the admin port.
  const observer = observe.make(options.accessLog)
  const adminOptions = options.admin === undefined ? undefined : admin.check(options.admin, options.port)
  const onStoreFailure = options.rateLimit?.onStoreFailure ?? options.onStoreFailure
  return Layer.scopedContext(
    Effect.gen(function*() {
      const built = yield* Effect.runtime<LR>()
      const runtime = adminOptions === undefined ? built : admin.withMetrics(built)
      const mode = onStoreFailure === undefined ? undefined : failure.fromOption(onStoreFailure).mode
      const ready = admin.readiness(runtime, mode)
      // Opened first, so it closes last: /readyz says 503 all through the drain.
      const adminAddress = adminOptions === undefined ? undefined : yield* expose(adminOptions, ready)
      // Runs once the listener has drained: the access log's last lines.
      yield* Effect.addFinalizer(() => Effect.sync(() => observe.flush(observer)))
      const { poolOf } = yield* poolRegistry
      const agents = yield* Effect.acquireRelease(
        Effect.sync(() => ({ http: new Http.Agent({ keepAlive: true }), https: new Https.Agent({ keepAlive: true }) })),
        (agents) =>
          Effect.sync(() => {
            agents.http.destroy()
            agents.https.destroy()
          })
      )
      let closing = false
      const routerFor = (c: Configured<LR>): Router<LR> =>
        routerOf({
          forwarding: c.forwarding,
          agents: { ...agents, pool: poolOf(c.forwarding.upstream) },
          limit: c.limit,
          delay: c.delay,
          key: c.key,
          routes: c.routes.map(({ prepared }) => ({ ...prepared, pool: poolOf(prepared.forwarding.upstream) })),
          maxHeaderLines,
          runtime,
          closing: () => closing,
          observer
        })
      // The one reference a reload swaps: each request reads it once, on arrival.
      let current = { configured: first, router: routerFor(first) }
      const server = Http.createServer(
        // Node checks its request timeouts every connectionsCheckingInterval (30 s by default).
        { requestTimeout, connectionsCheckingInterval: Math.max(10, Math.min(30_000, Math.ceil(requestTimeout / 4))) },
        (request, response) => handle(current.router, maxHeaderLines, observer, request, response)
      )
      configure(server)
      // Decided before the body is invited: `100 Continue` only once the limit lets the request through.
      server.on("checkContinue", (request, response) => server.emit("request", request, response))
      const address = yield* listen(server, options)
      // Added after the listener, so it runs first on shutdown: responses while draining close their connections.
      yield* Effect.addFinalizer(() => Effect.sync(() => (closing = true)))
      // Added last, so it runs first: unready, and still serving for the drain delay, before the listener closes.
      if (adminOptions !== undefined) {
        ready.serving = true
        yield* Effect.addFinalizer(() => admin.unready(adminOptions, ready))
      }
      const reloader: reload.Reloader = {
        reload: (next) => {
          // Made in full (or thrown) before anything changes.
          const previous = current.configured
          const configured = prepareConfiguration(next as Proxy.LayerOptions<LR>, waiting, previous)
          const router = routerFor(configured)
          current = { configured, router }
          waiting.max = configured.maxWaiting
          return {
            kept: [
              ...(configured.limit !== undefined && configured.limit === previous.limit ? ["default"] : []),
              ...configured.routes.filter((r) => previous.routes.some((p) => p.prepared === r.prepared)).map((r) =>
                r.prepared.name
              )
            ]
          }
        }
      }
      return Context.make(ProxyModule.Server, {
        address,
        admin: adminAddress,
        denials: () => current.configured.memories.reduce((n, memory) => n + memory.size, 0),
        waiting: () => waiting.count
      }).pipe(Context.add(reload.Reloader, reloader))
    })
  )
}

/** @internal */
export const layer = <LR>(options: Proxy.LayerOptions<LR>): Layer.Layer<Proxy.Server, Proxy.ListenError, LR> =>
  layerReloadable(options)

/** @internal */
export const headerKey = (name: string, options?: { readonly orElse?: Proxy.Key | undefined }): Proxy.Key =>
  clientIp.headerKey(name, options?.orElse ?? clientIp.resolver())
