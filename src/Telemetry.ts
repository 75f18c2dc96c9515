/**
 * Telemetry: what every structure reports through Effect's tracing and Effect Metrics, so that
 * `@effect/opentelemetry` (or any other exporter of Effect's tracer and metric registry) exports it.
 *
 * - **Off by default.** With nothing provided, an operation pays one FiberRef read (about 3% of an embedded
 *   acquire's CPU, less on Redis), and reports nothing. Effect makes a span even with no tracer installed
 *   (its built-in tracer), and metrics cost about a fifth of an embedded acquire: a service that does not
 *   export them should not pay for them. docs/observability.md has the figures.
 * - **`Telemetry.layer({})`** turns metrics on: each limiter decision, store request, lease and pipe message
 *   updates an Effect Metric in the process's registry, which an exporter (`@effect/opentelemetry`'s
 *   `NodeSdk` with a metric reader) reads.
 * - **`Telemetry.layer({ spans: true })`** adds a span per operation, through the fiber's tracer.
 * - **With spans on**, each decision is a span (`TokenBucket.acquire`, `FixedWindow.acquire`,
 *   `Limits.acquire`, `Lock.acquire`, `Lock.hold`, `Semaphore.acquire`, `RwLock.acquire`, `Pipe.send`,
 *   `Pipe.receive`), the parent of the client span of its store request. One Redis request serves several
 *   calls when the library batches them: its span's parent is the first call's span, and the others' are its
 *   links; `db.operation.batch.size` says how many calls it carried.
 *
 * The names below (spans, attributes, metrics and their labels) are a stable contract: they change only
 * with a changelog entry. OpenTelemetry's semantic conventions are followed where one exists (the
 * database client's span and duration metric); the rest are `wakuwaku.*`.
 *
 * @since 0.1.0
 */
import type * as Effect from "effect/Effect"
import type * as Layer from "effect/Layer"
import type * as Metric from "effect/Metric"
import * as internal from "./internal/telemetry.js"

/**
 * What to turn on, once {@link layer} is provided: `spans` (default false), per-operation spans; `metrics`
 * (default true). With no layer at all, both are off.
 *
 * @since 0.1.0
 * @category models
 */
export interface Options {
  readonly spans?: boolean | undefined
  readonly metrics?: boolean | undefined
}

/**
 * Sets what the effects it is provided to report (a FiberRef, read once per operation). For example
 * `Telemetry.layer({ spans: true })` beside an `@effect/opentelemetry` layer. Throws a `TypeError` for an
 * option that is not a boolean.
 *
 * @since 0.1.0
 * @category layers
 */
export const layer: (options: Options) => Layer.Layer<never> = internal.layer

/**
 * {@link layer} for one effect.
 *
 * @since 0.1.0
 * @category combinators
 */
export const withSettings: (options: Options) => <A, E, R>(self: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R> =
  internal.withSettings

/**
 * The span attribute names, by role.
 *
 * @since 0.1.0
 * @category names
 */
export interface AttributeNames {
  readonly dbSystemName: "db.system.name"
  readonly dbOperationName: "db.operation.name"
  readonly dbOperationBatchSize: "db.operation.batch.size"
  readonly dbQuerySummary: "db.query.summary"
  readonly serverAddress: "server.address"
  readonly serverPort: "server.port"
  readonly errorType: "error.type"
  readonly script: "wakuwaku.script"
  readonly kind: "wakuwaku.kind"
  readonly policy: "wakuwaku.policy"
  readonly decision: "wakuwaku.decision"
  readonly cost: "wakuwaku.cost"
  readonly remaining: "wakuwaku.remaining"
  readonly retryAfterMs: "wakuwaku.retry_after_ms"
  readonly deniedBy: "wakuwaku.denied_by"
  readonly storeFailure: "wakuwaku.store.failure"
  readonly onStoreFailure: "wakuwaku.store.on_failure"
  readonly shadowWouldDeny: "wakuwaku.shadow.would_deny"
  readonly lock: "wakuwaku.lock"
  readonly leaseOutcome: "wakuwaku.lease.outcome"
  readonly leaseWaitMs: "wakuwaku.lease.wait_ms"
  readonly leaseLostReason: "wakuwaku.lease.lost_reason"
  readonly pipe: "wakuwaku.pipe"
  readonly pipeOperation: "wakuwaku.pipe.operation"
}

/**
 * The metric names, by role.
 *
 * @since 0.1.0
 * @category names
 */
export interface MetricNames {
  readonly decisions: "wakuwaku_limiter_decisions"
  readonly storeDuration: "db.client.operation.duration"
  readonly leaseWait: "wakuwaku_lease_wait_seconds"
  readonly leaseHold: "wakuwaku_lease_hold_seconds"
  readonly leaseLost: "wakuwaku_lease_lost"
  readonly pipeMessages: "wakuwaku_pipe_messages"
}

/**
 * Span attribute names. OpenTelemetry's database conventions: `db.system.name` (`redis`, or
 * `wakuwaku.memory` for the embedded backend), `db.operation.name` (`EVALSHA`, `EVALSHA_RO` or a command
 * such as `DEL`), `db.operation.batch.size` (set when a request carries 2 calls or more),
 * `db.query.summary` (the operation and the script's name), `server.address`, `server.port` (a standalone
 * Redis), `error.type` (a `RedisError`'s reason). wakuwaku's own: see docs/observability.md for each one's
 * value.
 *
 * @since 0.1.0
 * @category names
 */
export const Attributes: AttributeNames = internal.Attr

/**
 * Metric names.
 *
 * @since 0.1.0
 * @category names
 */
export const MetricNames: MetricNames = internal.MetricName

/**
 * Limiter decisions: a counter labelled `kind` (`TokenBucket`, `FixedWindow`), `policy` (the limiter's
 * namespace) and `decision` (`allowed`, `denied`, `failed`). A group (`Limits`) counts its decision once per
 * limiter. Read one with
 * `Metric.value(Telemetry.decisions.pipe(Metric.tagged("kind", "TokenBucket"), Metric.tagged("policy", "api"),
 * Metric.tagged("decision", "denied")))`.
 *
 * @since 0.1.0
 * @category metrics
 */
export const decisions: Metric.Metric.Counter<number> = internal.decisions

/**
 * `db.client.operation.duration`: each store request's duration in seconds (a batch is one request),
 * labelled `db.system.name`, `db.operation.name` and `unit` = `s`.
 *
 * @since 0.1.0
 * @category metrics
 */
export const storeDuration: Metric.Metric.Histogram<number> = internal.storeDuration

/**
 * How long lease acquisitions waited, in seconds, labelled `kind` (`Lock`, `RwLock.read`, `RwLock.write`,
 * `Semaphore`), `policy` (the namespace), `outcome` (`acquired`, `unavailable`, `failed`, `interrupted`)
 * and `unit` = `s`.
 *
 * @since 0.1.0
 * @category metrics
 */
export const leaseWait: Metric.Metric.Histogram<number> = internal.leaseWait

/**
 * How long leases were held, in seconds, labelled `kind`, `policy` and `unit` = `s`.
 *
 * @since 0.1.0
 * @category metrics
 */
export const leaseHold: Metric.Metric.Histogram<number> = internal.leaseHeld

/**
 * Leases lost while held: a counter labelled `kind`, `policy` and `reason` (`Expired`, `Unconfirmed`).
 *
 * @since 0.1.0
 * @category metrics
 */
export const leaseLost: Metric.Metric.Counter<number> = internal.leaseLostCount

/**
 * Pipe messages: a counter labelled `policy` (the pipe's namespace) and `operation` (`send`, `receive`,
 * `abandoned`: a receive that ended with `PipeAbandoned`).
 *
 * @since 0.1.0
 * @category metrics
 */
export const pipeMessages: Metric.Metric.Counter<number> = internal.pipeMessages
