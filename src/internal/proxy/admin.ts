/**
 * @internal The admin port of `Proxy.layer` (`admin: { port, host, drainDelay }`, `wakuwaku proxy
 * --admin-port`): a node:http server of its own, on loopback unless told otherwise and never on the public
 * port, serving
 *
 * - `/metrics`: Effect's metric registry in the Prometheus text format (./prometheus.ts);
 * - `/healthz`: 200 while the process serves at all;
 * - `/readyz`: 200 when the public listener is up and the store answers a PING (within
 *   {@link READY_TIMEOUT}), or does not but the store-failure policy serves without it (fail-open, a
 *   fallback); 503 otherwise: before the listener is up, under fail-closed with the store silent, and from
 *   the start of shutdown, `drainDelay` before the public listener closes, so that a load balancer polling
 *   it stops sending first.
 *
 * With the admin port on, the library's telemetry metrics (store latency `db.client.operation.duration`,
 * limiter decisions) are turned on in the proxy's runtime, unless the application set them itself
 * (`Telemetry.layer`).
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as FiberRefs from "effect/FiberRefs"
import * as Option from "effect/Option"
import * as Runtime from "effect/Runtime"
import type * as Scope from "effect/Scope"
import * as Http from "node:http"
import type * as Net from "node:net"
import type * as Proxy from "../../Proxy.js"
import * as Redis from "../../Redis.js"
import { waitMillis } from "../duration.js"
import type * as failure from "../http/failure.js"
import * as telemetry from "../telemetry.js"
import * as errors from "./errors.js"
import * as prometheus from "./prometheus.js"
import { hostForUrl } from "./target.js"

/** @internal How long `/readyz` waits for the store's PING. */
export const READY_TIMEOUT = "1 second"

/** @internal The admin host by default: loopback, so that metrics are not served to the world by mistake. */
export const DEFAULT_HOST = "127.0.0.1"

/** @internal The admin options, checked: a `RangeError` for the public port or a bad port or delay. */
export interface Admin {
  readonly port: number
  readonly host: string
  readonly drainDelayMs: number
}

/** @internal Checks `Proxy.layer`'s `admin` option against its public `port`. */
export const check = (options: Proxy.AdminOptions, publicPort: number): Admin => {
  const { port } = options
  if (!Number.isSafeInteger(port) || port < 0 || port > 65_535) {
    throw new RangeError(`wakuwaku/Proxy: admin.port must be a port number from 0 to 65535, got ${String(port)}`)
  }
  if (port !== 0 && port === publicPort) {
    throw new RangeError(
      `wakuwaku/Proxy: admin.port must not be the public port (${port}): metrics and health are never served to clients`
    )
  }
  const drainDelayMs = waitMillis(options.drainDelay ?? 0, "admin.drainDelay")
  if (typeof drainDelayMs === "string") throw new RangeError(`wakuwaku/Proxy: ${drainDelayMs}`)
  return { port, host: options.host ?? DEFAULT_HOST, drainDelayMs }
}

/** @internal The banner's line for the admin port at `address`. */
export const bannerLine = (address: Proxy.Address): string =>
  `  admin:    http://${hostForUrl(address.host)}:${address.port}/metrics, /healthz, /readyz`

/** @internal What `/readyz` reads: whether the public listener serves, the store, the store-failure policy. */
export interface Readiness {
  /** False until the public listener is up, and from the start of shutdown. */
  serving: boolean
  /** The store the limits ask, if any. */
  readonly store: Redis.Service | undefined
  /** The store-failure policy, if there is a limit. */
  readonly mode: failure.Mode | undefined
}

/** @internal The readiness of a proxy built on `runtime` (its store, if it has one) with policy `mode`. */
export const readiness = <R>(runtime: Runtime.Runtime<R>, mode: failure.Mode | undefined): Readiness => ({
  serving: false,
  store: mode === undefined ? undefined : Option.getOrUndefined(Context.getOption(runtime.context, Redis.Redis)),
  mode
})

/** @internal `runtime` with the library's metrics on, unless its telemetry was set by the application. */
export const withMetrics = <R>(runtime: Runtime.Runtime<R>): Runtime.Runtime<R> =>
  FiberRefs.getOrDefault(runtime.fiberRefs, telemetry.currentSettings) === telemetry.DEFAULT
    ? Runtime.setFiberRef(runtime, telemetry.currentSettings, { spans: false, metrics: true })
    : runtime

const PING = (store: Redis.Service) =>
  store.command("PING", []).pipe(Effect.timeout(READY_TIMEOUT), Effect.exit, Effect.map(Exit.isSuccess))

/** @internal How an answer of `/readyz` is given: its status and text. */
export type ReadyReply = (status: number, text: string) => void

/** @internal `/readyz`'s status and text for this process, then `reply` with them. */
export const ready = (state: Readiness, reply: ReadyReply): void => {
  if (!state.serving) return reply(503, "not ready: not serving (starting or shutting down)\n")
  const { mode, store } = state
  if (store === undefined) return reply(200, "ready\n")
  Effect.runCallback(PING(store), {
    onExit: (exit) => {
      if (Exit.isSuccess(exit) && exit.value) return reply(200, "ready\n")
      if (mode === "fail-closed") return reply(503, "not ready: the store does not answer (fail-closed)\n")
      reply(200, `ready: the store does not answer; ${mode} decides meanwhile\n`)
    }
  })
}

const send = (response: Http.ServerResponse, status: number, type: string, body: string, head: boolean) => {
  response.writeHead(status, {
    "content-type": type,
    "content-length": String(Buffer.byteLength(body)),
    "cache-control": "no-store"
  })
  response.end(head ? undefined : body)
}

/**
 * @internal What the admin port serves: `/metrics`' text and `/readyz`'s answer, given to a callback. One process's
 * ({@link local}), or with `--workers` the primary's, which asks its workers (./fleet.ts).
 */
export interface Source {
  readonly metrics: (reply: (text: string) => void) => void
  readonly ready: (reply: ReadyReply) => void
}

/** @internal This process's registry and readiness. */
export const local = (state: Readiness): Source => ({
  metrics: (reply) => reply(prometheus.render()),
  ready: (reply) => ready(state, reply)
})

/**
 * @internal How `Proxy.layer` offers its admin state for the scope: on a port of its own ({@link serve}, by
 * default), or, in a worker of `wakuwaku proxy --workers`, to the primary, which serves the one admin port
 * (./fleet.ts); then there is no address.
 */
export type Expose = (
  admin: Admin,
  state: Readiness
) => Effect.Effect<Proxy.Address | undefined, Proxy.ListenError, Scope.Scope>

/** @internal The admin server's handler. */
export const handler = (source: Source) => (request: Http.IncomingMessage, response: Http.ServerResponse) => {
  const url = request.url ?? "/"
  const path = url.split("?", 1)[0]
  const head = request.method === "HEAD"
  const text = (status: number, body: string) => send(response, status, "text/plain; charset=utf-8", body, head)
  if (path !== "/metrics" && path !== "/healthz" && path !== "/readyz") {
    return text(404, "not found: /metrics, /healthz or /readyz\n")
  }
  if (request.method !== "GET" && !head) {
    response.setHeader("allow", "GET, HEAD")
    return text(405, "method not allowed: GET or HEAD\n")
  }
  if (path === "/metrics") return source.metrics((body) => send(response, 200, prometheus.CONTENT_TYPE, body, head))
  if (path === "/healthz") return text(200, "ok\n")
  source.ready(text)
}

/**
 * @internal Serves the admin port for the scope (a `ListenError` if it cannot), with this process's registry and
 * readiness, or `source`'s; closed when the scope closes.
 */
export const serve = (
  admin: Pick<Admin, "port" | "host">,
  state: Readiness | Source
): Effect.Effect<Proxy.Address, Proxy.ListenError, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.async<{ readonly server: Http.Server; readonly address: Proxy.Address }, Proxy.ListenError>((resume) => {
      const server = Http.createServer(handler("metrics" in state ? state : local(state)))
      const onError = (cause: Error) =>
        resume(Effect.fail(new errors.ListenError({ port: admin.port, host: admin.host, cause })))
      server.once("error", onError)
      server.listen(admin.port, admin.host, () => {
        server.off("error", onError)
        const address = server.address() as Net.AddressInfo
        resume(Effect.succeed({ server, address: { host: address.address, port: address.port } }))
      })
    }),
    ({ server }) =>
      Effect.async<void>((resume) => {
        server.close(() => resume(Effect.void))
        server.closeAllConnections()
      })
  ).pipe(Effect.map(({ address }) => address))

/**
 * @internal The start of shutdown, run before the public listener drains: `/readyz` answers 503 from now,
 * and the proxy goes on serving for `drainDelayMs`, so that a load balancer sees it and stops sending.
 */
export const unready = (admin: Admin, state: Readiness): Effect.Effect<void> =>
  Effect.zipRight(
    Effect.sync(() => (state.serving = false)),
    admin.drainDelayMs > 0 ? Effect.sleep(admin.drainDelayMs) : Effect.void
  )
