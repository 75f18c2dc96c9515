/**
 * @internal The library's telemetry, in one leaf module (it imports nothing of the library): the span,
 * attribute and metric names (a public contract, documented in src/Telemetry.ts and
 * docs/observability.md), the setting that turns spans and metrics on or off (a FiberRef, read once per
 * operation), and the hooks the shared choke points call:
 *
 * - {@link decide}: a limiter decision (internal/limiter.ts, internal/limits.ts);
 * - {@link traceOf} / {@link storeCall} / {@link storeSync}: a call to the store, one per Redis request
 *   (a batch of calls is one request: internal/client/batch.ts, internal/client.ts, internal/memory.ts);
 * - {@link leaseAcquire} / {@link leaseHold} / {@link leaseLost}: a lease (internal/lease.ts);
 * - {@link pipeMessage}: a pipe's message sent, received or abandoned (internal/pipe.ts).
 *
 * All is off unless `layer` (or `withSettings`) turns it on. Metrics are Effect Metrics: an update is a lookup of
 * a hook cached by the identity of its label array, kept per policy and outcome. Spans are made through the
 * fiber's `Tracer` (so `@effect/opentelemetry` exports them) only with `layer({ spans: true })`.
 */
import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import type * as Fiber from "effect/Fiber"
import * as FiberRef from "effect/FiberRef"
import { globalValue } from "effect/GlobalValue"
import * as Layer from "effect/Layer"
import * as Metric from "effect/Metric"
import * as MetricBoundaries from "effect/MetricBoundaries"
import * as MetricLabel from "effect/MetricLabel"
import * as Option from "effect/Option"
import type * as Tracer from "effect/Tracer"
import type * as Telemetry from "../Telemetry.js"

// The contract: span names, attribute names and metric names.

/** @internal Attribute names: OpenTelemetry's database conventions where they exist, `wakuwaku.*` elsewhere. */
export const Attr: Telemetry.AttributeNames = {
  dbSystemName: "db.system.name",
  dbOperationName: "db.operation.name",
  dbOperationBatchSize: "db.operation.batch.size",
  dbQuerySummary: "db.query.summary",
  serverAddress: "server.address",
  serverPort: "server.port",
  errorType: "error.type",
  script: "wakuwaku.script",
  kind: "wakuwaku.kind",
  policy: "wakuwaku.policy",
  decision: "wakuwaku.decision",
  cost: "wakuwaku.cost",
  remaining: "wakuwaku.remaining",
  retryAfterMs: "wakuwaku.retry_after_ms",
  deniedBy: "wakuwaku.denied_by",
  storeFailure: "wakuwaku.store.failure",
  onStoreFailure: "wakuwaku.store.on_failure",
  shadowWouldDeny: "wakuwaku.shadow.would_deny",
  lock: "wakuwaku.lock",
  leaseOutcome: "wakuwaku.lease.outcome",
  leaseWaitMs: "wakuwaku.lease.wait_ms",
  leaseLostReason: "wakuwaku.lease.lost_reason",
  pipe: "wakuwaku.pipe",
  pipeOperation: "wakuwaku.pipe.operation"
}

/** @internal `db.system.name` of each backend: Redis, and the embedded one (no server). */
export const SYSTEM = { redis: "redis", memory: "wakuwaku.memory" } as const

/** @internal Metric names. */
export const MetricName: Telemetry.MetricNames = {
  decisions: "wakuwaku_limiter_decisions",
  storeDuration: "db.client.operation.duration",
  leaseWait: "wakuwaku_lease_wait_seconds",
  leaseHold: "wakuwaku_lease_hold_seconds",
  leaseLost: "wakuwaku_lease_lost",
  pipeMessages: "wakuwaku_pipe_messages"
}

/** @internal A limiter decision's counter: labels `kind`, `policy`, `decision` (allowed, denied, failed). */
export const decisions: Metric.Metric.Counter<number> = Metric.counter(MetricName.decisions, {
  description: "Limiter decisions of wakuwaku, by kind, policy and decision (allowed, denied, failed)",
  incremental: true
})

const seconds = (start: number, count: number) => MetricBoundaries.exponential({ start, factor: 2, count })

/**
 * @internal Each store request's duration, in seconds (OpenTelemetry's database client metric). The histograms'
 * `unit` label (which `@effect/opentelemetry` reads as the unit) is in each update's labels, not added with
 * `Metric.tagged`: a tagged metric builds a new label array per update, which misses the hook cache.
 */
export const storeDuration: Metric.Metric.Histogram<number> = Metric.histogram(
  MetricName.storeDuration,
  seconds(0.0001, 16),
  "Duration of wakuwaku's store requests (a batch is one), in seconds"
)

/** @internal How long each lease acquisition waited, in seconds: labels `kind`, `policy`, `outcome`. */
export const leaseWait: Metric.Metric.Histogram<number> = Metric.histogram(
  MetricName.leaseWait,
  seconds(0.001, 20),
  "Time wakuwaku's lock, read-write lock and semaphore acquisitions waited, in seconds"
)

/** @internal How long each lease was held, in seconds: labels `kind`, `policy`. */
export const leaseHeld: Metric.Metric.Histogram<number> = Metric.histogram(
  MetricName.leaseHold,
  seconds(0.001, 20),
  "Time wakuwaku's leases were held, in seconds"
)

/** @internal Leases lost while held: labels `kind`, `policy`, `reason` (Expired, Unconfirmed). */
export const leaseLostCount: Metric.Metric.Counter<number> = Metric.counter(MetricName.leaseLost, {
  description: "Leases of wakuwaku lost while held, by kind, policy and reason",
  incremental: true
})

/** @internal Pipe messages: labels `policy` (the pipe's namespace), `operation` (send, receive, abandoned). */
export const pipeMessages: Metric.Metric.Counter<number> = Metric.counter(MetricName.pipeMessages, {
  description: "Messages of wakuwaku's pipes sent, received and abandoned, by pipe",
  incremental: true
})

// The setting.

/** @internal What is on. */
export interface Settings {
  readonly spans: boolean
  readonly metrics: boolean
}

/**
 * @internal The default: all off, so that a service that never asked pays one FiberRef read per operation
 * (docs/observability.md has the figures: metrics cost about a fifth of an embedded acquire's CPU).
 */
export const DEFAULT: Settings = Object.freeze({ spans: false, metrics: false })

/** @internal The fiber's setting; read once per operation. */
export const currentSettings: FiberRef.FiberRef<Settings> = globalValue(
  Symbol.for("wakuwaku/Telemetry/currentSettings"),
  () => FiberRef.unsafeMake<Settings>(DEFAULT)
)

/** @internal */
export const layer = (options: { readonly spans?: boolean | undefined; readonly metrics?: boolean | undefined }) =>
  Layer.locallyScoped(currentSettings, settingsOf(options))

/** @internal */
export const withSettings: {
  (options: { readonly spans?: boolean | undefined; readonly metrics?: boolean | undefined }): <A, E, R>(
    self: Effect.Effect<A, E, R>
  ) => Effect.Effect<A, E, R>
} = (options) => Effect.locally(currentSettings, settingsOf(options))

const settingsOf = (options: { readonly spans?: boolean | undefined; readonly metrics?: boolean | undefined }) => {
  for (const [name, value] of Object.entries(options)) {
    if (value !== undefined && typeof value !== "boolean") {
      throw new TypeError(`wakuwaku: Telemetry option ${name} must be a boolean, got ${String(value)}`)
    }
  }
  // Asking for telemetry turns metrics on unless told otherwise; spans only when asked for.
  return Object.freeze({ spans: options.spans ?? false, metrics: options.metrics ?? true })
}

// Labels, kept: a metric caches its hook by the identity of the label array.

const labelCache = new Map<string, ReadonlyArray<MetricLabel.MetricLabel>>()

/** @internal The label array of `pairs` (name, value, name, value…), the same array for the same pairs. */
export const labels = (...pairs: ReadonlyArray<string>): ReadonlyArray<MetricLabel.MetricLabel> => {
  const id = pairs.join("\u0000")
  let found = labelCache.get(id)
  if (found === undefined) {
    const made: Array<MetricLabel.MetricLabel> = []
    for (let i = 0; i < pairs.length; i += 2) made.push(MetricLabel.make(pairs[i]!, pairs[i + 1]!))
    labelCache.set(id, found = made)
  }
  return found
}

const spanOptions = (attributes: Record<string, unknown>, kind: Tracer.SpanKind = "internal") => ({
  kind,
  attributes
})

const byStore = new Map<string, Map<string, ReadonlyArray<MetricLabel.MetricLabel>>>()

/** The store duration's labels, found without building a string (the hot path of every request). */
const storeLabels = (system: string, operation: string) => {
  let bySystem = byStore.get(system)
  if (bySystem === undefined) byStore.set(system, bySystem = new Map<string, ReadonlyArray<MetricLabel.MetricLabel>>())
  let found = bySystem.get(operation)
  if (found === undefined) {
    bySystem.set(operation, found = labels(Attr.dbSystemName, system, Attr.dbOperationName, operation, "unit", "s"))
  }
  return found
}

// Limiter decisions.

/** What a decision is, as a limiter's acquire and a group's both reply. */
interface Admission {
  readonly _tag: "Allowed" | "Denied"
}
interface Allowed {
  readonly _tag: "Allowed"
  readonly remaining: number
}
interface Denied {
  readonly _tag: "Denied"
  readonly retryAfter: Option.Option<Duration.Duration>
}

/** @internal The labels and attributes of one limiter (or one group of them), made once. */
export class Decisions {
  readonly span: string
  readonly attributes: Record<string, unknown>
  private readonly counts: Record<
    "allowed" | "denied" | "failed",
    ReadonlyArray<ReadonlyArray<MetricLabel.MetricLabel>>
  >
  constructor(
    /** `TokenBucket`, `FixedWindow`, or `Limits` for a group. */
    readonly kind: string,
    /** The policy: a limiter's namespace. */
    readonly policies: ReadonlyArray<{ readonly kind: string; readonly policy: string }>,
    /** The decision's operation: `acquire`, or `reserve` (a bucket's reservation, as throttle and metered make). */
    operation: "acquire" | "reserve" = "acquire"
  ) {
    this.span = `${kind}.${operation}`
    this.attributes = {
      [Attr.kind]: kind,
      [Attr.policy]: policies.map((p) => p.policy).join(",")
    }
    const of = (decision: string) =>
      policies.map((p) => labels("kind", p.kind, "policy", p.policy, "decision", decision))
    this.counts = { allowed: of("allowed"), denied: of("denied"), failed: of("failed") }
  }
  count(decision: "allowed" | "denied" | "failed") {
    for (const l of this.counts[decision]) decisions.unsafeUpdate(1, l)
  }
}

/** A bucket's reservation, as {@link decisionOf} reads it. */
type Reserved =
  | { readonly _tag: "Granted"; readonly level: number }
  | { readonly _tag: "Refused"; readonly retryAfter: Option.Option<Duration.Duration> }

/**
 * @internal The decision of one limiter's reply, a group's (`{ allowed, admissions }`), or a reservation's
 * (granted: allowed, what it left the tokens it did not owe; refused: denied, with its retry-after).
 */
const decisionOf = (reply: unknown): { readonly allowed: boolean; readonly admissions: ReadonlyArray<Admission> } => {
  const r = reply as
    | Admission
    | Reserved
    | { readonly allowed: boolean; readonly admissions: ReadonlyArray<Admission> }
  if (!("_tag" in r)) return r
  switch (r._tag) {
    case "Granted":
      return {
        allowed: true,
        admissions: [{ _tag: "Allowed", remaining: Math.max(0, Math.floor(r.level)) } as Allowed]
      }
    case "Refused":
      return { allowed: false, admissions: [{ _tag: "Denied", retryAfter: r.retryAfter } as Denied] }
    default:
      return { allowed: r._tag === "Allowed", admissions: [r] }
  }
}

const annotateDecision = (span: Tracer.Span, d: Decisions, reply: unknown) => {
  const { admissions, allowed } = decisionOf(reply)
  span.attribute(Attr.decision, allowed ? "allowed" : "denied")
  if (allowed) {
    const remaining = Math.min(...admissions.map((a) => (a as Allowed).remaining))
    span.attribute(Attr.remaining, remaining)
    return
  }
  const denied: Array<string> = []
  let retry: number | undefined = 0
  admissions.forEach((a, i) => {
    if (a._tag !== "Denied") return
    denied.push(d.policies[i]?.policy ?? "")
    const after = (a as Denied).retryAfter
    retry = retry === undefined || Option.isNone(after) ? undefined : Math.max(retry, Duration.toMillis(after.value))
  })
  span.attribute(Attr.deniedBy, denied.join(","))
  span.attribute(Attr.retryAfterMs, retry ?? -1)
}

const counted = (d: Decisions) => <A>(exit: Exit.Exit<A, unknown>) => {
  if (Exit.isFailure(exit)) {
    if (!Cause.isInterruptedOnly(exit.cause)) d.count("failed")
  } else d.count(decisionOf(exit.value).allowed ? "allowed" : "denied")
}

/** `effect`, its outcome counted: one continuation (no `onExit`, whose uninterruptible region costs more). */
const countedOnly = <A, E, R>(d: Decisions, effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.matchCauseEffect(effect, {
    onFailure: (cause) => {
      if (!Cause.isInterruptedOnly(cause)) d.count("failed")
      return Effect.failCause(cause)
    },
    onSuccess: (a) => {
      d.count(isAllowed(a) ? "allowed" : "denied")
      return Exit.succeed(a)
    }
  })

const isAllowed = (reply: unknown): boolean => {
  const r = reply as { readonly _tag?: unknown; readonly allowed?: unknown }
  return r._tag === undefined ? r.allowed === true : r._tag === "Allowed" || r._tag === "Granted"
}

/**
 * @internal A limiter decision (one limiter's `Admission`, or a group's outcome): counted when metrics are on,
 * and run in a span (`<kind>.acquire`, the parent of its store request's) when spans are.
 */
export const decide = <A, E, R>(d: Decisions, cost: number, effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.withFiberRuntime((fiber) => {
    const settings = fiber.getFiberRef(currentSettings)
    if (!settings.spans) {
      return settings.metrics ? countedOnly(d, effect) : effect
    }
    return Effect.useSpan(
      d.span,
      spanOptions({ ...d.attributes, [Attr.cost]: cost }),
      (span) =>
        Effect.withParentSpan(effect, span).pipe(
          Effect.onExit((exit) =>
            Effect.sync(() => {
              if (settings.metrics) counted(d)(exit)
              if (Exit.isSuccess(exit)) annotateDecision(span, d, exit.value)
              else {
                const failure = Cause.failureOption(exit.cause)
                if (Option.isSome(failure)) span.attribute(Attr.storeFailure, reasonOf(failure.value))
              }
            })
          )
        )
    )
  })

const reasonOf = (error: unknown): string => {
  const e = error as { readonly _tag?: unknown; readonly reason?: unknown }
  return typeof e.reason === "string" ? e.reason : typeof e._tag === "string" ? e._tag : "unknown"
}

/** @internal What an HTTP verdict says, as {@link verdict} reads it. */
export interface Verdict {
  readonly decision: string
  readonly policy: string
  readonly violated: ReadonlyArray<string>
  readonly retryAfter: number | undefined
  readonly remaining: number | undefined
}

const STORE_FAILURE_POLICY: Record<string, string> = {
  "fail-open": "fail-open",
  "fail-closed": "fail-closed",
  "fallback-allowed": "fallback",
  "fallback-denied": "fallback",
  "fallback-unsplittable": "fallback"
}

/**
 * @internal When spans are on, annotates the current span (the HTTP request's) with the verdict `effect` decides:
 * the decision (`allowed`, `denied`, `fail-open`, …), the policy applied, those that denied, the retry-after
 * (whole seconds, as the response says it) and, when the store failed, the store-failure policy applied.
 */
export const verdict = <A, E, R>(effect: Effect.Effect<A, E, R>, of: (a: A) => Verdict): Effect.Effect<A, E, R> =>
  Effect.withFiberRuntime((fiber) => {
    if (!fiber.getFiberRef(currentSettings).spans) return effect
    return Effect.tap(effect, (a) => {
      const v = of(a)
      const onFailure = STORE_FAILURE_POLICY[v.decision]
      return Effect.annotateCurrentSpan({
        [Attr.decision]: v.decision,
        [Attr.policy]: v.policy,
        ...(v.violated.length > 0 ? { [Attr.deniedBy]: v.violated.join(",") } : {}),
        ...(v.retryAfter === undefined ? {} : { [Attr.retryAfterMs]: v.retryAfter * 1000 }),
        ...(v.remaining === undefined ? {} : { [Attr.remaining]: v.remaining }),
        ...(onFailure === undefined ? {} : { [Attr.onStoreFailure]: onFailure })
      })
    })
  })

// Store requests.

/** @internal What a call to the store needs for its telemetry, taken from its fiber; undefined when all is off. */
export interface Trace {
  readonly metrics: boolean
  readonly tracer: Tracer.Tracer | undefined
  readonly parent: Tracer.AnySpan | undefined
  readonly clock: Clock.Clock | undefined
}

const METRICS_ONLY: Trace = { metrics: true, tracer: undefined, parent: undefined, clock: undefined }

/** @internal The trace of a call `fiber` makes: one FiberRef read, and nothing allocated unless spans are on. */
export const traceOf = (fiber: Fiber.RuntimeFiber<unknown, unknown>): Trace | undefined => {
  const settings = fiber.getFiberRef(currentSettings)
  if (!settings.spans) return settings.metrics ? METRICS_ONLY : undefined
  return {
    metrics: settings.metrics,
    tracer: fiber.currentTracer,
    parent: fiber.currentSpan,
    clock: Context.get(fiber.currentDefaultServices, Clock.Clock)
  }
}

/** @internal Where a store is: a server's address and port, when it has one. */
export interface Server {
  readonly system: string
  readonly address?: string | undefined
  readonly port?: number | undefined
}

/** @internal A store request under way: `end` it once with its outcome. */
export interface Call {
  readonly end: (failure: { readonly reason: string } | undefined) => void
}

const NOTHING: Call = { end: () => {} }

/**
 * @internal A store request made for `traces` (one per call it carries, in order; undefined entries are calls
 * that had telemetry off): `operation` (EVALSHA, …) of `script` (its name, or a command's), `size` calls.
 * Its span's parent is the first call's span; the others' are links.
 */
export const storeCall = (
  traces: ReadonlyArray<Trace | undefined>,
  server: Server,
  operation: string,
  script: string | undefined,
  size: number
): Call => {
  let first: Trace | undefined
  for (const t of traces) if (t !== undefined && (first === undefined || first.tracer === undefined)) first = t
  if (first === undefined) return NOTHING
  const started = performance.now()
  const span = first.tracer === undefined ? undefined : startSpan(first, traces, server, operation, script, size)
  const metrics = first.metrics
  const labelled = metrics ? storeLabels(server.system, operation) : undefined
  return {
    end: (failure) => {
      if (labelled !== undefined) storeDuration.unsafeUpdate((performance.now() - started) / 1000, labelled)
      if (span === undefined) return
      if (failure !== undefined) span.attribute(Attr.errorType, failure.reason)
      span.end(first.clock!.unsafeCurrentTimeNanos(), failure === undefined ? Exit.void : Exit.fail(failure))
    }
  }
}

const startSpan = (
  first: Trace,
  traces: ReadonlyArray<Trace | undefined>,
  server: Server,
  operation: string,
  script: string | undefined,
  size: number
): Tracer.Span => {
  const links: Array<Tracer.SpanLink> = []
  for (const t of traces) {
    if (t !== undefined && t !== first && t.parent !== undefined) {
      links.push({ _tag: "SpanLink", span: t.parent, attributes: {} })
    }
  }
  const summary = script === undefined ? operation : `${operation} ${script}`
  const span = first.tracer!.span(
    summary,
    Option.fromNullable(first.parent),
    Context.empty(),
    links,
    first.clock!.unsafeCurrentTimeNanos(),
    "client"
  )
  span.attribute(Attr.dbSystemName, server.system)
  span.attribute(Attr.dbOperationName, operation)
  span.attribute(Attr.dbQuerySummary, summary)
  if (script !== undefined) span.attribute(Attr.script, script)
  if (size > 1) span.attribute(Attr.dbOperationBatchSize, size)
  if (server.address !== undefined) span.attribute(Attr.serverAddress, server.address)
  if (server.port !== undefined) span.attribute(Attr.serverPort, server.port)
  return span
}

/** @internal A synchronous store request of `fiber` (the embedded backend): `run`, timed and traced. */
export const storeSync = <A, E extends { readonly reason: string }>(
  fiber: Fiber.RuntimeFiber<unknown, unknown>,
  server: Server,
  operation: string,
  script: string | undefined,
  run: () => Effect.Effect<A, E>
): Effect.Effect<A, E> => {
  const trace = traceOf(fiber)
  if (trace === undefined) return run()
  const call = storeCall([trace], server, operation, script, 1)
  const result = run()
  call.end(
    Exit.isExit(result) && Exit.isFailure(result)
      ? Option.getOrUndefined(Cause.failureOption(result.cause as Cause.Cause<E>))
      : undefined
  )
  return result
}

// Leases.

interface LeaseLabels {
  readonly kind: string
  readonly policy: string
  readonly lock: string
}

const leaseLabels = (lock: string): LeaseLabels => {
  // `Lock(ns)`, `RwLock(ns).write`, `Semaphore(ns)`.
  const open = lock.indexOf("(")
  const close = lock.lastIndexOf(")")
  return open < 0 || close < open
    ? { kind: lock, policy: "", lock }
    : { kind: lock.slice(0, open) + lock.slice(close + 1), policy: lock.slice(open + 1, close), lock }
}

/**
 * @internal A lease's acquisition (`lock` its label, read lazily, as its errors name it: `Lock(ns)`,
 * `RwLock(ns).write`, `Semaphore(ns)`): its wait timed by outcome (acquired, unavailable, failed), in a span
 * `<kind>.acquire` when spans are on.
 */
export const leaseAcquire = <A, E, R>(lock: () => string, effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.withFiberRuntime((fiber) => {
    const settings = fiber.getFiberRef(currentSettings)
    if (!settings.spans && !settings.metrics) return effect
    const l = leaseLabels(lock())
    const started = performance.now()
    const record = (exit: Exit.Exit<A, E>, span: Tracer.Span | undefined) =>
      Effect.sync(() => {
        const outcome = Exit.isSuccess(exit)
          ? "acquired"
          : Option.match(Cause.failureOption(exit.cause), {
            onNone: () => "interrupted",
            onSome: (e) => ((e as { readonly _tag?: unknown })._tag === "LockUnavailable" ? "unavailable" : "failed")
          })
        const waited = (performance.now() - started) / 1000
        if (settings.metrics) {
          leaseWait.unsafeUpdate(waited, labels("kind", l.kind, "policy", l.policy, "outcome", outcome, "unit", "s"))
        }
        span?.attribute(Attr.leaseOutcome, outcome)
        span?.attribute(Attr.leaseWaitMs, Math.round(waited * 1000))
      })
    if (!settings.spans) return Effect.onExit(effect, (exit) => record(exit, undefined))
    return Effect.useSpan(
      `${l.kind.split(".")[0]}.acquire`,
      spanOptions({ [Attr.kind]: l.kind, [Attr.policy]: l.policy, [Attr.lock]: l.lock }),
      (span) => Effect.onExit(Effect.withParentSpan(effect, span), (exit) => record(exit, span))
    )
  })

/**
 * @internal A lease held until the scope closes: its hold timed, in a span `<kind>.hold` (ended with the scope)
 * when spans are on. Returns what {@link leaseLost} needs.
 */
export const leaseHold = (lock: () => string) =>
  Effect.withFiberRuntime<Held | undefined, never, import("effect/Scope").Scope>((fiber) => {
    const settings = fiber.getFiberRef(currentSettings)
    if (!settings.spans && !settings.metrics) return Effect.succeed(undefined)
    const l = leaseLabels(lock())
    const started = performance.now()
    const timed = Effect.as(
      Effect.addFinalizer(() =>
        Effect.sync(() => {
          if (settings.metrics) {
            leaseHeld.unsafeUpdate(
              (performance.now() - started) / 1000,
              labels("kind", l.kind, "policy", l.policy, "unit", "s")
            )
          }
        })
      ),
      undefined
    )
    if (!settings.spans) return Effect.as(timed, { labels: l, metrics: settings.metrics, span: undefined })
    return Effect.flatMap(
      Effect.makeSpanScoped(
        `${l.kind.split(".")[0]}.hold`,
        spanOptions({ [Attr.kind]: l.kind, [Attr.policy]: l.policy, [Attr.lock]: l.lock })
      ),
      (span) => Effect.as(timed, { labels: l, metrics: settings.metrics, span })
    )
  })

/** @internal A lease being held, as {@link leaseHold} made it. */
export interface Held {
  readonly labels: LeaseLabels
  readonly metrics: boolean
  readonly span: Tracer.Span | undefined
}

/** @internal A held lease was lost (`reason`: Expired, Unconfirmed): counted, and annotated on its hold span. */
export const leaseLost = (held: Held | undefined, reason: string): void => {
  if (held === undefined) return
  if (held.metrics) {
    leaseLostCount.unsafeUpdate(1, labels("kind", held.labels.kind, "policy", held.labels.policy, "reason", reason))
  }
  held.span?.attribute(Attr.leaseLostReason, reason)
}

// Pipes.

const count = (pipe: string, operation: "send" | "receive" | "abandoned") =>
  pipeMessages.unsafeUpdate(1, labels("policy", pipe, "operation", operation))

/**
 * @internal A pipe's operation (`send`, or one `receive` of a stream: `end` is its end-of-stream value): counted
 * when it hands a message over (a receive that finds the pipe abandoned counts `abandoned`), and in a span
 * `Pipe.<operation>` when spans are on.
 */
export const pipeOperation = <A, E, R>(
  pipe: string,
  operation: "send" | "receive",
  effect: Effect.Effect<A, E, R>,
  end?: unknown
): Effect.Effect<A, E, R> =>
  Effect.withFiberRuntime((fiber) => {
    const settings = fiber.getFiberRef(currentSettings)
    if (!settings.spans && !settings.metrics) return effect
    const counted = settings.metrics
      ? effect.pipe(
        Effect.tap((a) => {
          if (a !== end || operation === "send") count(pipe, operation)
        }),
        Effect.tapError((e) => {
          if ((e as { readonly _tag?: unknown })._tag === "PipeAbandoned") count(pipe, "abandoned")
          return Effect.void
        })
      )
      : effect
    if (!settings.spans) return counted
    return Effect.withSpan(counted, `Pipe.${operation}`, {
      kind: "internal",
      attributes: { [Attr.kind]: "Pipe", [Attr.policy]: pipe, [Attr.pipeOperation]: operation }
    }).pipe(Effect.tapError((e) =>
      (e as { readonly _tag?: unknown })._tag === "PipeAbandoned"
        ? Effect.annotateCurrentSpan(Attr.pipeOperation, "abandoned")
        : Effect.void
    ))
  })
