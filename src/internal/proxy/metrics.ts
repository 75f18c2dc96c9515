/**
 * @internal The proxy's own Effect Metrics (a leaf: it imports only effect), exported by `wakuwaku/Proxy` so
 * that a library user of `Proxy.layer` reads the same names the admin port's `/metrics` shows. They are
 * always on, as the HTTP middleware's counters are: one counter update per request and a gauge moved twice,
 * each a lookup of a hook cached by the identity of its label array (./observe.ts keeps the arrays).
 */
import * as Metric from "effect/Metric"
import * as MetricBoundaries from "effect/MetricBoundaries"

/** @internal The names, by role (a public contract: `Proxy.MetricNames`). */
export const MetricName = {
  requests: "wakuwaku_proxy_requests",
  inFlight: "wakuwaku_proxy_requests_in_flight",
  upstreamDuration: "wakuwaku_proxy_upstream_duration_seconds",
  delayed: "wakuwaku_proxy_delayed",
  delayWait: "wakuwaku_proxy_delay_wait_seconds",
  workerRestarts: "wakuwaku_proxy_worker_restarts",
  workers: "wakuwaku_proxy_workers",
  workersUnanswered: "wakuwaku_proxy_workers_unanswered"
} as const

/** From 1 ms, doubling 16 times (about 33 s), then +Inf. */
const seconds = MetricBoundaries.exponential({ start: 0.001, factor: 2, count: 16 })

/** @internal Requests answered, by `route`, `decision` and `status`. */
export const requests: Metric.Metric.Counter<number> = Metric.counter(MetricName.requests, {
  description: "Requests the proxy answered, by route, decision and status (499: the client left first)",
  incremental: true
})

/** @internal Requests received and not yet answered in full (no label). */
export const inFlight: Metric.Metric.Gauge<number> = Metric.gauge(MetricName.inFlight, {
  description: "Requests the proxy has received and not yet answered in full"
})

/** @internal From handing a request to the upstream to the end of its response, in seconds: `route`, `unit`. */
export const upstreamDuration: Metric.Metric.Histogram<number> = Metric.histogram(
  MetricName.upstreamDuration,
  seconds,
  "Time from forwarding a request to the end of the upstream's response, in seconds, by route"
)

/** @internal Requests a delay-mode route held before forwarding them: `route`. */
export const delayed: Metric.Metric.Counter<number> = Metric.counter(MetricName.delayed, {
  description: "Requests a delay-mode route held for their turn, by route",
  incremental: true
})

/** @internal How long each held request waited, in seconds: `route`, `unit`. */
export const delayWait: Metric.Metric.Histogram<number> = Metric.histogram(
  MetricName.delayWait,
  seconds,
  "Time delay-mode requests waited for their turn, in seconds, by route"
)

/** @internal Workers of `wakuwaku proxy --workers` that died and were replaced, counted by the primary (no label). */
export const workerRestarts: Metric.Metric.Counter<number> = Metric.counter(MetricName.workerRestarts, {
  description: "Worker processes of the proxy that died and were replaced (--workers)",
  incremental: true
})

/** @internal The descriptions of the two gauges the primary of `--workers` adds to each scrape (./fleet.ts). */
export const scrapeGauges = {
  workers: "Worker processes serving the port when /metrics was read (--workers); the sums are theirs",
  workersUnanswered: "Of those workers, those that did not answer this scrape in time: their counts are missing from it"
} as const
