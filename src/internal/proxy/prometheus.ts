/**
 * @internal Effect's metric registry (`Metric.unsafeSnapshot()`: every Effect Metric the process has
 * updated, the library's and the application's) in the Prometheus text exposition format 0.0.4, for the
 * admin port's `/metrics` (./admin.ts).
 *
 * Names follow what @opentelemetry/exporter-prometheus writes for the same metrics exported through
 * @effect/opentelemetry, so that a dashboard works with either: every character outside `[a-zA-Z0-9_]`
 * becomes `_` (a run of them one), and a monotonic counter (an incremental Effect counter) is named with
 * the suffix `_total` (`wakuwaku_proxy_requests` is `wakuwaku_proxy_requests_total`). A counter that is not
 * incremental is a gauge; a frequency is a counter with the label `key`; a histogram has its `_bucket`
 * lines (cumulative, up to `le="+Inf"`), `_sum` and `_count`; a summary its `quantile` lines, `_sum` and
 * `_count`. Labels are the metric's tags as they are (the `unit` tag of a histogram included, as the
 * OpenTelemetry bridge keeps it too).
 */
import * as Metric from "effect/Metric"
import * as MetricKeyType from "effect/MetricKeyType"
import type * as MetricPair from "effect/MetricPair"
import * as MetricState from "effect/MetricState"
import * as Option from "effect/Option"

/** @internal The `Content-Type` of the format. */
export const CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

/** A name as Prometheus takes it: `[a-zA-Z_][a-zA-Z0-9_]*`. */
const sanitize = (name: string): string => {
  const clean = name.replace(/[^a-zA-Z0-9_]/g, "_").replace(/_{2,}/g, "_")
  return /^[0-9]/.test(clean) ? `_${clean}` : clean
}

/** A label value: backslash, double quote and line feed escaped. */
const escapeValue = (value: string): string => value.replace(/\\/g, "\\\\").replace(/"/g, "\\\"").replace(/\n/g, "\\n")

/** A `# HELP` text: backslash and line feed escaped. */
const escapeHelp = (text: string): string => text.replace(/\\/g, "\\\\").replace(/\n/g, "\\n")

/** A sample value: `+Inf`, `-Inf`, `NaN` or the number. */
const valueOf = (value: number | bigint): string =>
  typeof value === "bigint"
    ? value.toString()
    : value === Infinity
    ? "+Inf"
    : value === -Infinity
    ? "-Inf"
    : String(value)

/** `{a="1",b="2"}`, or nothing without labels. */
const labelsOf = (pairs: ReadonlyArray<readonly [string, string]>): string =>
  pairs.length === 0 ? "" : `{${pairs.map(([k, v]) => `${sanitize(k)}="${escapeValue(v)}"`).join(",")}}`

type Type = "counter" | "gauge" | "histogram" | "summary"

interface Family {
  readonly type: Type
  help: string
  readonly lines: Array<string>
}

/** The family of one metric: its type and its name in the format. */
const familyOf = (pair: MetricPair.MetricPair.Untyped): { readonly type: Type; readonly name: string } | undefined => {
  const { keyType, name } = pair.metricKey
  const base = sanitize(name)
  const total = base.endsWith("_total") ? base : `${base}_total`
  if (MetricKeyType.isCounterKey(keyType)) {
    return keyType.incremental ? { type: "counter", name: total } : { type: "gauge", name: base }
  }
  if (MetricKeyType.isGaugeKey(keyType)) return { type: "gauge", name: base }
  if (MetricKeyType.isHistogramKey(keyType)) return { type: "histogram", name: base }
  if (MetricKeyType.isSummaryKey(keyType)) return { type: "summary", name: base }
  if (MetricKeyType.isFrequencyKey(keyType)) return { type: "counter", name: total }
  return undefined
}

/** The sample lines of one metric, named `name`, with its tags `tags`. */
const samplesOf = (
  name: string,
  state: MetricState.MetricState.Untyped,
  tags: ReadonlyArray<readonly [string, string]>
): Array<string> => {
  if (MetricState.isCounterState(state)) return [`${name}${labelsOf(tags)} ${valueOf(state.count)}`]
  if (MetricState.isGaugeState(state)) return [`${name}${labelsOf(tags)} ${valueOf(state.value)}`]
  if (MetricState.isFrequencyState(state)) {
    return [...state.occurrences].map(([key, count]) => `${name}${labelsOf([...tags, ["key", key]])} ${count}`)
  }
  if (MetricState.isHistogramState(state)) {
    const lines = state.buckets.map(([le, cumulated]) =>
      `${name}_bucket${labelsOf([...tags, ["le", valueOf(le)]])} ${cumulated}`
    )
    // Effect's boundaries end with +Inf; a histogram made otherwise gets it here.
    if (state.buckets.at(-1)?.[0] !== Infinity) {
      lines.push(`${name}_bucket${labelsOf([...tags, ["le", "+Inf"]])} ${state.count}`)
    }
    lines.push(`${name}_sum${labelsOf(tags)} ${valueOf(state.sum)}`, `${name}_count${labelsOf(tags)} ${state.count}`)
    return lines
  }
  if (MetricState.isSummaryState(state)) {
    const lines = state.quantiles.map(([q, value]) =>
      `${name}${labelsOf([...tags, ["quantile", String(q)]])} ${
        Option.match(value, {
          onNone: () => "NaN",
          onSome: valueOf
        })
      }`
    )
    lines.push(`${name}_sum${labelsOf(tags)} ${valueOf(state.sum)}`, `${name}_count${labelsOf(tags)} ${state.count}`)
    return lines
  }
  return []
}

/**
 * @internal The text of `snapshot` (default: Effect's global registry now): one family per name, sorted by name,
 * with `# HELP` (the first description given) and `# TYPE`; a metric whose name another of another type already
 * took is left out.
 */
export const render = (snapshot: ReadonlyArray<MetricPair.MetricPair.Untyped> = Metric.unsafeSnapshot()): string => {
  const families = new Map<string, Family>()
  for (const pair of snapshot) {
    const family = familyOf(pair)
    if (family === undefined) continue
    let found = families.get(family.name)
    if (found === undefined) families.set(family.name, found = { type: family.type, help: "", lines: [] })
    else if (found.type !== family.type) continue
    if (found.help === "") found.help = Option.getOrElse(pair.metricKey.description, () => "")
    const tags = pair.metricKey.tags.map((label) => [label.key, label.value] as const)
    found.lines.push(...samplesOf(family.name, pair.metricState, tags))
  }
  const out: Array<string> = []
  for (const name of [...families.keys()].sort()) {
    const family = families.get(name)!
    if (family.help !== "") out.push(`# HELP ${name} ${escapeHelp(family.help)}`)
    out.push(`# TYPE ${name} ${family.type}`, ...family.lines)
  }
  return out.length === 0 ? "" : `${out.join("\n")}\n`
}
