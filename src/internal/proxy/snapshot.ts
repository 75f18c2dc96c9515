/**
 * @internal Effect's metric registry as plain data, so that the workers of `wakuwaku proxy --workers` can send
 * theirs to the primary over the cluster's IPC channel (JSON), and the primary can add them up into one
 * registry's worth of metrics, which ./prometheus.ts renders as it renders one process's.
 *
 * - **One series** is a metric key (its name, kind and parameters, its tags) and its state. Series of the same
 *   key from several processes are **merged**: counters, gauges (requests in flight: the sum is the proxy's),
 *   frequencies and histograms (each bucket, the count and the sum) are added, min and max kept as such. A
 *   summary's quantiles cannot be added: merged from more than one process they are left unknown (`NaN`), its
 *   count and sum added.
 * - **Numbers cross as strings** where they may not be finite (`Infinity` is a histogram's last bound; JSON
 *   has no word for it), and a bigint counter's value as its digits.
 */
import * as Duration from "effect/Duration"
import * as Metric from "effect/Metric"
import * as MetricBoundaries from "effect/MetricBoundaries"
import * as MetricKey from "effect/MetricKey"
import * as MetricKeyType from "effect/MetricKeyType"
import * as MetricLabel from "effect/MetricLabel"
import * as MetricPair from "effect/MetricPair"
import * as MetricState from "effect/MetricState"
import * as Option from "effect/Option"

/** A number as `String` writes it (`Infinity`, `NaN` included), or a bigint's digits. */
type Num = string

/** @internal A metric's kind and parameters: what, beside its name and tags, makes its key. */
export type Kind =
  | { readonly _tag: "Counter"; readonly incremental: boolean; readonly bigint: boolean }
  | { readonly _tag: "Gauge"; readonly bigint: boolean }
  | { readonly _tag: "Histogram"; readonly boundaries: ReadonlyArray<Num> }
  | { readonly _tag: "Frequency"; readonly preregisteredWords: ReadonlyArray<string> }
  | {
    readonly _tag: "Summary"
    readonly maxAgeMs: number
    readonly maxSize: number
    readonly error: number
    readonly quantiles: ReadonlyArray<number>
  }

/** @internal A metric's state, by kind. */
export type State =
  | { readonly _tag: "Counter" | "Gauge"; readonly value: Num }
  | {
    readonly _tag: "Histogram"
    readonly buckets: ReadonlyArray<readonly [Num, number]>
    readonly count: number
    readonly min: Num
    readonly max: Num
    readonly sum: Num
  }
  | { readonly _tag: "Frequency"; readonly occurrences: ReadonlyArray<readonly [string, number]> }
  | {
    readonly _tag: "Summary"
    readonly quantiles: ReadonlyArray<readonly [number, Num | null]>
    readonly count: number
    readonly min: Num
    readonly max: Num
    readonly sum: Num
  }

/** @internal One series of a registry, as plain data. */
export interface Series {
  readonly name: string
  readonly description: string | null
  readonly tags: ReadonlyArray<readonly [string, string]>
  readonly kind: Kind
  readonly state: State
}

const kindOf = (keyType: MetricKeyType.MetricKeyType.Untyped): Kind | undefined => {
  if (MetricKeyType.isCounterKey(keyType)) {
    return { _tag: "Counter", incremental: keyType.incremental, bigint: keyType.bigint }
  }
  if (MetricKeyType.isGaugeKey(keyType)) return { _tag: "Gauge", bigint: keyType.bigint }
  if (MetricKeyType.isHistogramKey(keyType)) {
    return { _tag: "Histogram", boundaries: keyType.boundaries.values.map(String) }
  }
  if (MetricKeyType.isFrequencyKey(keyType)) {
    return { _tag: "Frequency", preregisteredWords: keyType.preregisteredWords }
  }
  if (MetricKeyType.isSummaryKey(keyType)) {
    const { error, maxSize, quantiles } = keyType
    return { _tag: "Summary", maxAgeMs: Duration.toMillis(keyType.maxAge), maxSize, error, quantiles }
  }
  return undefined
}

const stateOf = (state: MetricState.MetricState.Untyped): State | undefined => {
  if (MetricState.isCounterState(state)) return { _tag: "Counter", value: String(state.count) }
  if (MetricState.isGaugeState(state)) return { _tag: "Gauge", value: String(state.value) }
  if (MetricState.isHistogramState(state)) {
    const { count, max, min, sum } = state
    const buckets = state.buckets.map(([le, n]) => [String(le), n] as const)
    return { _tag: "Histogram", buckets, count, min: String(min), max: String(max), sum: String(sum) }
  }
  if (MetricState.isFrequencyState(state)) return { _tag: "Frequency", occurrences: [...state.occurrences] }
  if (MetricState.isSummaryState(state)) {
    const { count, max, min, sum } = state
    const quantiles = state.quantiles.map(([q, v]) => [q, Option.getOrNull(Option.map(v, String))] as const)
    return { _tag: "Summary", quantiles, count, min: String(min), max: String(max), sum: String(sum) }
  }
  return undefined
}

/** @internal `pairs` (default: this process's registry now) as plain data; kinds unknown to this module left out. */
export const take = (pairs: ReadonlyArray<MetricPair.MetricPair.Untyped> = Metric.unsafeSnapshot()): Array<Series> =>
  pairs.flatMap((pair): Array<Series> => {
    const kind = kindOf(pair.metricKey.keyType)
    const state = stateOf(pair.metricState)
    if (kind === undefined || state === undefined || kind._tag !== state._tag) return []
    const { description, name, tags } = pair.metricKey
    const plain = tags.map((label) => [label.key, label.value] as const)
    return [{ name, description: Option.getOrNull(description), tags: plain, kind, state }]
  })

/** The identity of a series: its key. */
const idOf = (series: Series): string => JSON.stringify([series.name, series.kind, series.tags])

const add = (a: Num, b: Num, bigint: boolean): Num =>
  bigint ? String(BigInt(a) + BigInt(b)) : String(Number(a) + Number(b))

const min = (a: Num, b: Num): Num => String(Math.min(Number(a), Number(b)))
const max = (a: Num, b: Num): Num => String(Math.max(Number(a), Number(b)))

/** Two states of one key merged; `undefined` when they are not of one kind (never, for one key). */
const mergeState = (kind: Kind, a: State, b: State): State | undefined => {
  if ((a._tag === "Counter" || a._tag === "Gauge") && b._tag === a._tag) {
    return { _tag: a._tag, value: add(a.value, b.value, "bigint" in kind && kind.bigint) }
  }
  if (a._tag === "Histogram" && b._tag === "Histogram") {
    return {
      _tag: "Histogram",
      buckets: a.buckets.map(([le, n], i) => [le, n + (b.buckets[i]?.[1] ?? 0)] as const),
      count: a.count + b.count,
      min: min(a.min, b.min),
      max: max(a.max, b.max),
      sum: add(a.sum, b.sum, false)
    }
  }
  if (a._tag === "Frequency" && b._tag === "Frequency") {
    const occurrences = new Map(a.occurrences)
    for (const [word, n] of b.occurrences) occurrences.set(word, (occurrences.get(word) ?? 0) + n)
    return { _tag: "Frequency", occurrences: [...occurrences] }
  }
  if (a._tag === "Summary" && b._tag === "Summary") {
    return {
      _tag: "Summary",
      // Quantiles of two processes do not add up to the quantiles of both: unknown.
      quantiles: a.quantiles.map(([q]) => [q, null] as const),
      count: a.count + b.count,
      min: min(a.min, b.min),
      max: max(a.max, b.max),
      sum: add(a.sum, b.sum, false)
    }
  }
  return undefined
}

/** @internal The series of several registries, one per key: those of one key merged, in order of first sight. */
export const merge = (registries: ReadonlyArray<ReadonlyArray<Series>>): Array<Series> => {
  const merged = new Map<string, Series>()
  for (const registry of registries) {
    for (const series of registry) {
      const id = idOf(series)
      const found = merged.get(id)
      const state = found === undefined ? series.state : mergeState(series.kind, found.state, series.state)
      if (state !== undefined) merged.set(id, { ...(found ?? series), state })
    }
  }
  return [...merged.values()]
}

const keyOf = (series: Series): MetricKey.MetricKey.Untyped => {
  const { kind, name } = series
  const description = series.description ?? undefined
  switch (kind._tag) {
    case "Counter":
      return kind.bigint
        ? MetricKey.counter(name, { description, bigint: true, incremental: kind.incremental })
        : MetricKey.counter(name, { description, incremental: kind.incremental })
    case "Gauge":
      return kind.bigint ? MetricKey.gauge(name, { description, bigint: true }) : MetricKey.gauge(name, { description })
    case "Histogram":
      return MetricKey.histogram(name, MetricBoundaries.fromIterable(kind.boundaries.map(Number)), description)
    case "Frequency":
      return MetricKey.frequency(name, { description, preregisteredWords: kind.preregisteredWords })
    case "Summary":
      return MetricKey.summary({
        name,
        description,
        maxAge: Duration.millis(kind.maxAgeMs),
        maxSize: kind.maxSize,
        error: kind.error,
        quantiles: kind.quantiles
      })
  }
}

const effectStateOf = (kind: Kind, state: State): MetricState.MetricState.Untyped => {
  switch (state._tag) {
    case "Counter":
      return kind._tag === "Counter" && kind.bigint
        ? MetricState.counter(BigInt(state.value))
        : MetricState.counter(Number(state.value))
    case "Gauge":
      return kind._tag === "Gauge" && kind.bigint
        ? MetricState.gauge(BigInt(state.value))
        : MetricState.gauge(Number(state.value))
    case "Histogram":
      return MetricState.histogram({
        buckets: state.buckets.map(([le, n]) => [Number(le), n] as const),
        count: state.count,
        min: Number(state.min),
        max: Number(state.max),
        sum: Number(state.sum)
      })
    case "Frequency":
      return MetricState.frequency(new Map(state.occurrences))
    case "Summary":
      return MetricState.summary({
        error: kind._tag === "Summary" ? kind.error : 0,
        quantiles: state.quantiles.map(([q, v]) => [q, v === null ? Option.none() : Option.some(Number(v))] as const),
        count: state.count,
        min: Number(state.min),
        max: Number(state.max),
        sum: Number(state.sum)
      })
  }
}

/** @internal Series back as Effect's metric pairs, which ./prometheus.ts renders. */
export const toPairs = (series: ReadonlyArray<Series>): Array<MetricPair.MetricPair.Untyped> =>
  series.map((one) => {
    const key = MetricKey.taggedWithLabels(
      keyOf(one),
      one.tags.map(([k, v]) => MetricLabel.make(k, v))
    )
    return MetricPair.unsafeMake(key, effectStateOf(one.kind, one.state))
  })
