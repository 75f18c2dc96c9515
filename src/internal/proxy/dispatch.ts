/**
 * @internal The hot path of `Proxy.layer` to the upstream: one exchange over undici's HTTP/1.1 client, a
 * keep-alive `Pool` per upstream (what @fastify/http-proxy forwards with), with no stream object on the
 * way back: the upstream's head is handed over as it is parsed, and each chunk of its body is written
 * straight to the client's response, the upstream connection paused while the client's is full. The
 * client's body, if any, is piped in through a `PassThrough`, with backpressure too.
 *
 * undici will not send a `Transfer-Encoding` header (it frames a body of unknown length `chunked`
 * itself) nor the asterisk form (`OPTIONS *`): {@link dispatchable} says which requests it can send as
 * they came; the others go over node:http (exchange.ts), as `Proxy.make` forwards every request.
 */
import * as Duration from "effect/Duration"
import type * as Http from "node:http"
import { PassThrough } from "node:stream"
import { type Dispatcher, Pool } from "undici"
import type * as Proxy from "../../Proxy.js"
import { ProxyError } from "./errors.js"
import { classify, type Resolved } from "./exchange.js"
import type { Upstream } from "./target.js"

/**
 * @internal The keep-alive pool to an upstream: no limit on connections (as node:http's agent), one
 * request at a time on each, no timeouts of undici's own (the proxy keeps its `timeout` itself, from the
 * end of the request, as over node:http).
 */
export const pool = (upstream: Upstream): Pool =>
  new Pool(upstream.origin, { pipelining: 1, headersTimeout: 0, bodyTimeout: 0 })

const CHUNKED = /^\s*chunked\s*$/i

/** @internal Whether undici can send a request as it came: not `*`, and no transfer coding but `chunked`. */
export const dispatchable = (path: string, transferEncoding: string | undefined): boolean =>
  path !== "*" && (transferEncoding === undefined || CHUNKED.test(transferEncoding))

/**
 * @internal A response head from undici's raw list (names and values as Buffers, in order): lowercase
 * names, latin1 values as Node's parser reads them, a repeated header as an array (one line each).
 */
export const headersOf = (raw: ReadonlyArray<Buffer>): Record<string, string | Array<string>> => {
  const out: Record<string, string | Array<string>> = {}
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const name = raw[i]!.toString("latin1").toLowerCase()
    const value = raw[i + 1]!.toString("latin1")
    const existing = out[name]
    if (existing === undefined) out[name] = value
    else if (typeof existing === "string") out[name] = [existing, value]
    else existing.push(value)
  }
  return out
}

/** @internal What the front end does with the exchange's outcome. */
export interface Events {
  /** The upstream's head arrived: write the client's (`writeHead`); its body follows through `target`. */
  readonly head: (status: number, headers: Record<string, string | Array<string>>) => void
  /** No head came: the request failed, timed out, or its body could not be read. */
  readonly fail: (error: Proxy.ProxyError) => void
}

/** @internal One request to the upstream: what undici needs besides the client's body. */
export interface Outgoing {
  readonly method: string
  readonly path: string
  readonly headers: Record<string, string | Array<string>>
}

/**
 * The handler of one exchange, in undici's handler interface of `onConnect` … `onComplete` (the one its
 * own `request()` implements, and the only one told when the request has been sent: `onRequestSent`).
 */
class Exchange implements Dispatcher.DispatchHandler {
  /** The head arrived, or the exchange failed: what comes after is the body's, or nothing. */
  settled = false
  /** The client went away, or the server shuts down. */
  aborted = false
  /** The client's response is whole (a 204 or a 304): nothing more goes to it. */
  ended = false
  timer: ReturnType<typeof setTimeout> | undefined = undefined
  abortUpstream: ((error?: Error) => void) | undefined = undefined
  resume: (() => void) | undefined = undefined

  constructor(
    readonly target: Http.ServerResponse,
    readonly options: Resolved,
    readonly events: Events
  ) {}

  fail(error: Proxy.ProxyError): void {
    if (this.settled) return
    this.settled = true
    if (this.timer !== undefined) clearTimeout(this.timer)
    this.events.fail(error)
  }

  /** Ends the exchange from this side: the upstream request is aborted (its connection closed) if it runs. */
  abort(): void {
    this.aborted = true
    this.settled = true
    if (this.timer !== undefined) clearTimeout(this.timer)
    this.abortUpstream?.(new Error("the proxy ended the exchange"))
  }

  onConnect(abort: (error?: Error) => void): void {
    if (this.aborted) return abort(new Error("the proxy ended the exchange"))
    this.abortUpstream = abort
  }

  /** The whole request has been written to the connection: the timeout starts. */
  onRequestSent(): void {
    if (this.settled) return
    this.timer = setTimeout(() => {
      this.fail(
        new ProxyError({
          reason: "Timeout",
          cause: `no response within ${Duration.format(this.options.timeout)}`
        })
      )
      this.abortUpstream?.(new Error("the upstream did not respond in time"))
    }, this.options.timeoutMs)
  }

  onHeaders(status: number, raw: Array<Buffer>, resume: () => void): boolean {
    // 1xx (103 Early Hints) are the upstream's to this hop: the final head follows.
    if (status < 200 || this.settled) return true
    this.settled = true
    if (this.timer !== undefined) clearTimeout(this.timer)
    this.resume = resume
    this.events.head(status, headersOf(raw))
    if (status === 204 || status === 304) {
      // No body, whatever the head says: the response is whole now. undici then fails a Content-Length (which
      // RFC 9110 §8.6 allows a 304) with ResponseContentLengthMismatchError and drops the upstream connection;
      // ended here, the client has its response before that error, which is ignored.
      this.ended = true
      this.target.end()
    }
    return true
  }

  onData(chunk: Buffer): boolean {
    if (this.aborted) return true
    if (this.target.write(chunk)) return true
    // The client's connection is full: the upstream's waits until it drains.
    this.target.once("drain", this.resume!)
    return false
  }

  onComplete(): void {
    if (!this.aborted && !this.ended) this.target.end()
  }

  onError(error: Error): void {
    if (this.aborted || this.ended) return
    if (!this.settled) return this.fail(failureOf(error))
    // A body cut short by the upstream reaches the client cut short: its connection is dropped, not ended.
    if (!this.target.writableFinished) this.target.destroy()
  }
}

/** undici's errors as the proxy's reasons: a connection closed before the response is a reset. */
const failureOf = (error: Error): Proxy.ProxyError => {
  const code = (error as { readonly code?: unknown }).code
  if (code === "UND_ERR_SOCKET") {
    return new ProxyError({
      // A 101 to a request that asked for no upgrade (none is ever forwarded): not HTTP this proxy can relay.
      reason: error.message === "bad upgrade" ? "Protocol" : "Reset",
      cause: error
    })
  }
  return classify(error)
}

/**
 * @internal Sends one request to the upstream over `pool`, the client's body (when `withBody`) piped in,
 * and calls `events.head` once with the response's head, whose body then goes to `target`, or
 * `events.fail` once. The timeout starts once the whole request has been written. The returned function
 * (the client went away, or the server shuts down) aborts the upstream request.
 */
export const exchange = (
  pool: Pool,
  source: Http.IncomingMessage,
  withBody: boolean,
  outgoing: Outgoing,
  target: Http.ServerResponse,
  options: Resolved,
  events: Events
): () => void => {
  const handler = new Exchange(target, options, events)
  let body: PassThrough | null = null
  if (withBody) {
    // Not the client's request itself: undici destroys the body it was given when the exchange fails, and the
    // client's connection still has to carry the 502.
    body = new PassThrough()
    body.on("error", () => {})
    source.once("error", (cause) => {
      handler.fail(new ProxyError({ reason: "RequestBody", cause }))
      handler.abort()
    })
    source.pipe(body)
  }
  pool.dispatch(
    { method: outgoing.method, path: outgoing.path, headers: outgoing.headers, body },
    handler
  )
  return () => {
    if (body !== null) source.unpipe(body)
    handler.abort()
  }
}
