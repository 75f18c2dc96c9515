/**
 * @internal What the proxy sees of each request, told once its response is done: the metrics of
 * ./metrics.ts (requests by route, decision and status; the requests in flight; the upstream's time; a
 * delay-mode route's waits) and, when configured, the access log line (./accessLog.ts).
 *
 * The handler (./server.ts) calls {@link begin} when a request arrives, then at most a few setters as it
 * goes ({@link routed}, {@link forwarded}, {@link refused}, {@link waited}); the rest happens on the
 * response's `close`, which Node emits once per response, whether it was sent in full or the client left.
 * No fiber runs for it: per request, one small object, one listener, a few clock reads and counter updates
 * whose hooks are found by label arrays kept per route, decision and status.
 */
import * as MetricLabel from "effect/MetricLabel"
import type * as Http from "node:http"
import { performance } from "node:perf_hooks"
import type * as decision from "../http/decision.js"
import * as accessLog from "./accessLog.js"
import * as metrics from "./metrics.js"

/** @internal The status counted for a request whose client left before any response head was sent (nginx's). */
export const CLIENT_LEFT = 499

/** @internal The decision of a request no limit decided: no limit, or refused before it (400, 431). */
export const NO_DECISION = "none"

/** @internal What a route's requests are counted under, made once per route name. */
export interface Route {
  readonly name: string
  /** The label arrays of `requests`, by decision, then status. */
  readonly counted: Map<string, Map<number, ReadonlyArray<MetricLabel.MetricLabel>>>
  /** The label array of the histograms: `route` and `unit` = `s`. */
  readonly timed: ReadonlyArray<MetricLabel.MetricLabel>
  /** The label array of `delayed`. */
  readonly held: ReadonlyArray<MetricLabel.MetricLabel>
}

/** One request under observation. */
interface Observation {
  readonly observer: Observer
  route: Route
  /** When it arrived (ms, monotonic). */
  readonly started: number
  /** When it was handed to the upstream (ms, monotonic); -1 if it was not. */
  forwarded: number
  verdict: decision.Verdict | undefined
  waitedMs: number | undefined
}

/** @internal The access log as `Proxy.layer` takes it. */
export interface AccessLogOptions {
  readonly format: "json"
  readonly query?: boolean | undefined
  readonly write?: ((line: string) => void) | undefined
}

/** @internal The observation of one `Proxy.layer`: its routes' labels and its access log. */
export interface Observer {
  readonly routes: Map<string, Route>
  readonly log: accessLog.Sink | undefined
  readonly query: boolean
  /** The route of requests before one is chosen ("default"). */
  readonly fallback: Route
}

const OBSERVATION = Symbol.for("wakuwaku/Proxy/observation")

type Observed = Http.ServerResponse & { [OBSERVATION]?: Observation }

const NO_LABELS: ReadonlyArray<MetricLabel.MetricLabel> = []

/** @internal The observer of a `Proxy.layer` (an access log if `accessLog` is given; a `TypeError` for a bad one). */
export const make = (options: AccessLogOptions | undefined): Observer => {
  if (options !== undefined && options.format !== "json") {
    throw new TypeError(`wakuwaku/Proxy: accessLog.format must be "json", got ${String(options.format)}`)
  }
  const routes = new Map<string, Route>()
  // In the registry from the start (at 0), so that /metrics shows it before the first request.
  metrics.inFlight.unsafeModify(0, NO_LABELS)
  return {
    routes,
    log: options === undefined
      ? undefined
      : options.write === undefined
      ? accessLog.batched()
      : accessLog.direct(options.write),
    query: options?.query === true,
    fallback: routeOf(routes, "default")
  }
}

/** @internal The route named `name` of `observer`, made once (a reload that keeps a name keeps its labels). */
export const route = (observer: Observer, name: string): Route => routeOf(observer.routes, name)

const routeOf = (routes: Map<string, Route>, name: string): Route => {
  let found = routes.get(name)
  if (found === undefined) {
    const label = MetricLabel.make("route", name)
    found = {
      name,
      counted: new Map(),
      timed: [label, MetricLabel.make("unit", "s")],
      held: [label]
    }
    routes.set(name, found)
  }
  return found
}

/** The label array of `route`'s requests with `decision` and `status`, made once. */
const countedAs = (route: Route, decision: string, status: number): ReadonlyArray<MetricLabel.MetricLabel> => {
  let byStatus = route.counted.get(decision)
  if (byStatus === undefined) {
    route.counted.set(decision, byStatus = new Map<number, ReadonlyArray<MetricLabel.MetricLabel>>())
  }
  let found = byStatus.get(status)
  if (found === undefined) {
    found = [
      MetricLabel.make("route", route.name),
      MetricLabel.make("decision", decision),
      MetricLabel.make("status", String(status))
    ]
    byStatus.set(status, found)
  }
  return found
}

/** @internal A request has arrived: counted in flight until its response closes, under the default route. */
export const begin = (observer: Observer, response: Http.ServerResponse): void => {
  const observation: Observation = {
    observer,
    route: observer.fallback,
    started: performance.now(),
    forwarded: -1,
    verdict: undefined,
    waitedMs: undefined
  }
  ;(response as Observed)[OBSERVATION] = observation
  metrics.inFlight.unsafeModify(1, NO_LABELS)
  response.on("close", closed)
}

/** @internal The request's route is chosen. */
export const routed = (response: Http.ServerResponse, route: Route): void => {
  const observation = (response as Observed)[OBSERVATION]
  if (observation !== undefined) observation.route = route
}

/** @internal The request goes to the upstream now, with the limit's verdict if it had one. */
export const forwarded = (response: Http.ServerResponse, verdict: decision.Verdict | undefined): void => {
  const observation = (response as Observed)[OBSERVATION]
  if (observation === undefined) return
  observation.forwarded = performance.now()
  observation.verdict = verdict
}

/** @internal The limit refused the request with `verdict`. */
export const refused = (response: Http.ServerResponse, verdict: decision.Verdict): void => {
  const observation = (response as Observed)[OBSERVATION]
  if (observation !== undefined) observation.verdict = verdict
}

/** @internal A delay-mode route held the request `ms` milliseconds for its turn. */
export const waited = (response: Http.ServerResponse, ms: number): void => {
  const observation = (response as Observed)[OBSERVATION]
  if (observation !== undefined) observation.waitedMs = ms
}

/** The response's `close` (`this` is the response): the request is counted, timed and logged. */
function closed(this: Http.ServerResponse): void {
  const observation = (this as Observed)[OBSERVATION]
  if (observation === undefined) return
  const ended = performance.now()
  metrics.inFlight.unsafeModify(-1, NO_LABELS)
  const { route, verdict, waitedMs } = observation
  const status = this.headersSent ? this.statusCode : CLIENT_LEFT
  const decided = verdict === undefined ? NO_DECISION : verdict.decision
  metrics.requests.unsafeUpdate(1, countedAs(route, decided, status))
  const upstreamMs = observation.forwarded < 0 ? undefined : ended - observation.forwarded
  if (upstreamMs !== undefined) metrics.upstreamDuration.unsafeUpdate(upstreamMs / 1000, route.timed)
  if (waitedMs !== undefined) {
    metrics.delayed.unsafeUpdate(1, route.held)
    metrics.delayWait.unsafeUpdate(waitedMs / 1000, route.timed)
  }
  const { log } = observation.observer
  if (log !== undefined) log.write(entryLine(observation, this, status, decided, upstreamMs, ended))
}

/** The access log line of a request. */
const entryLine = (
  observation: Observation,
  response: Http.ServerResponse,
  status: number,
  decided: string,
  upstreamMs: number | undefined,
  ended: number
): string => {
  const request: Http.IncomingMessage = response.req
  const url = request.url ?? ""
  const mark = url.indexOf("?")
  const { verdict } = observation
  return accessLog.line(accessLog.now(), {
    method: request.method ?? "",
    path: mark < 0 ? url : url.slice(0, mark),
    query: mark < 0 ? undefined : url.slice(mark + 1),
    status,
    route: observation.route.name,
    decision: decided,
    deniedBy: verdict === undefined || verdict.pass || verdict.violated.length === 0 ? undefined : verdict.violated,
    retryAfter: verdict?.retryAfter,
    wouldDeny: verdict === undefined || verdict.wouldDeny.length === 0
      ? undefined
      : verdict.wouldDeny.map((denial) => denial.limit),
    upstreamMs,
    waitedMs: observation.waitedMs,
    totalMs: ended - observation.started
  }, observation.observer.query)
}

/** @internal Writes what the access log holds (on shutdown). */
export const flush = (observer: Observer): void => observer.log?.flush()
