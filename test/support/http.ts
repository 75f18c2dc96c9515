/**
 * Real HTTP over loopback sockets for the middleware's tests: `serve` (an `HttpApp`) and `serveApi` (an
 * `HttpApi`) start a Node server on a free port for the scope, listening on both IPv4 and IPv6, and `get`
 * sends a request with plain `fetch`.
 */
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import type * as HttpApi from "@effect/platform/HttpApi"
import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import type * as HttpApp from "@effect/platform/HttpApp"
import * as HttpMiddleware from "@effect/platform/HttpMiddleware"
import * as HttpServer from "@effect/platform/HttpServer"
import { expect } from "@effect/vitest"
import { Context, Effect, Layer, Tracer } from "effect"
import { createServer } from "node:http"

/** The server's base URLs, over IPv4 (the socket address reads `::ffff:127.0.0.1`) and over IPv6 (`::1`). */
export interface Served {
  readonly v4: string
  readonly v6: string
}

/** Serves `app` on a free port until the scope closes. */
export const serve = <E, R>(app: HttpApp.Default<E, R>) =>
  Effect.gen(function*() {
    const context = yield* Layer.build(
      HttpServer.serve(app).pipe(Layer.provideMerge(NodeHttpServer.layer(() => createServer(), { port: 0 })))
    )
    const address = Context.get(context, HttpServer.HttpServer).address
    if (address._tag !== "TcpAddress") return yield* Effect.dieMessage("expected a TCP address")
    return { v4: `http://127.0.0.1:${address.port}`, v6: `http://[::1]:${address.port}` } satisfies Served
  })

/**
 * Serves an `HttpApi` (the layer of `HttpApiBuilder.api(…)`, its handlers and middlewares provided) on a free
 * port; with `logged`, through `HttpMiddleware.logger`, which logs every response and the cause of a failure.
 */
export const serveApi = <E, R>(api: Layer.Layer<HttpApi.Api, E, R>, logged = false) =>
  Effect.gen(function*() {
    const context = yield* Layer.build(
      HttpApiBuilder.serve(logged ? HttpMiddleware.logger : undefined).pipe(
        Layer.provide(api),
        Layer.provideMerge(NodeHttpServer.layer(() => createServer(), { port: 0 }))
      )
    )
    const address = Context.get(context, HttpServer.HttpServer).address
    if (address._tag !== "TcpAddress") return yield* Effect.dieMessage("expected a TCP address")
    return { v4: `http://127.0.0.1:${address.port}`, v6: `http://[::1]:${address.port}` } satisfies Served
  })

/** A response, read whole. */
export interface Reply {
  readonly status: number
  readonly headers: Readonly<Record<string, string>>
  readonly body: string
}

/** GET `url` with `headers`. */
export const get = (url: string, headers: Record<string, string> = {}): Effect.Effect<Reply> =>
  Effect.promise(async () => {
    const response = await fetch(url, { headers })
    return { status: response.status, headers: Object.fromEntries(response.headers), body: await response.text() }
  })

/** The rate-limit fields of a reply (`undefined` when absent). */
export const fields = (reply: Reply) => ({
  status: reply.status,
  policy: reply.headers["ratelimit-policy"],
  limit: reply.headers["ratelimit"],
  retryAfter: reply.headers["retry-after"]
})

/** A tracer that records every span it makes, delegating to the current one. */
export const recordingTracer = Effect.map(Effect.tracer, (native) => {
  const spans: Array<Tracer.Span> = []
  const tracer = Tracer.make({
    span: (...args) => {
      const span = native.span(...args)
      spans.push(span)
      return span
    },
    context: (f, fiber) => native.context(f, fiber)
  })
  return { tracer, spans }
})

/** A fixed window's seconds left at `nowMs` (rounded up, as the fields round), its windows aligned to 0. */
export const secondsLeft = (windowSeconds: number, nowMs: number) =>
  Math.ceil((windowSeconds * 1000 - (nowMs % (windowSeconds * 1000))) / 1000)

/**
 * Checks a fixed window's `t` (or `Retry-After`) for a request sent at `before` and answered at `after` (ms, this
 * machine's clock, which the store's is): between the seconds left in the window then and now.
 */
export const expectWindowT = (t: unknown, windowSeconds: number, before: number, after: number) => {
  // The store reads its clock in µs: up to a millisecond after `after`'s reading.
  const [early, late] = [secondsLeft(windowSeconds, before), secondsLeft(windowSeconds, after + 1)]
  // A window that ended in between: anything from `early` down to 1, or from w down to `late`.
  const possible = typeof t === "number" && (late <= early ? t >= late && t <= early : t <= early || t >= late)
  expect({ t, possible }).toEqual({ t, possible: true })
}
