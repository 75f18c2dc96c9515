/**
 * A vegeta-like report of an attack (`vegeta report`'s text layout), plus what vegeta does not print:
 * how well the attack kept its schedule.
 *
 * As vegeta: the rate is requests / attack (first send to last send), throughput is successes /
 * (attack + wait), wait is from the last send to the last response; success is a status in 200–399;
 * every other status is an error named by its status line (`429 Too Many Requests`). Percentiles are
 * nearest-rank over every request (vegeta estimates them).
 */
import { STATUS_CODES } from "node:http"
import type { AttackResult } from "./attack.js"

export interface Latencies {
  readonly minMs: number
  readonly meanMs: number
  readonly p50Ms: number
  readonly p90Ms: number
  readonly p95Ms: number
  readonly p99Ms: number
  readonly maxMs: number
}

export interface Metrics {
  readonly requests: number
  /** Requests per second over the attack, as vegeta counts it: requests / attack. */
  readonly rate: number
  /** Successes per second over attack + wait. */
  readonly throughput: number
  readonly attackMs: number
  readonly waitMs: number
  readonly latencies: Latencies
  readonly bytesIn: number
  readonly success: number
  readonly successRatio: number
  /** Status → count, in ascending status order (0: no response). */
  readonly statusCodes: ReadonlyArray<readonly [status: number, count: number]>
  readonly errors: ReadonlyArray<string>
  /** The schedule actually kept: (requests − 1) / (last send − first send); equals the rate asked for when on time. */
  readonly sendRate: number
  /** How late requests left, against their due times. */
  readonly lagP50Ms: number
  readonly lagP99Ms: number
  readonly lagMaxMs: number
  readonly maxInFlight: number
}

/** The q-quantile (nearest rank) of ascending numbers. */
export const quantile = (sorted: ArrayLike<number>, q: number): number =>
  sorted.length === 0
    ? Number.NaN
    : sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))] ?? Number.NaN

const ascending = (xs: Iterable<number>): Float64Array => Float64Array.from(xs).sort()

export const metrics = (result: AttackResult): Metrics => {
  const hits = result.hits
  const n = hits.length
  const sent = ascending(hits.map((h) => h.sentMs))
  const first = sent[0] ?? 0
  const last = sent[n - 1] ?? 0
  const end = hits.reduce((max, h) => Math.max(max, h.sentMs + h.latencyMs), 0)
  const attackMs = last - first
  const waitMs = Math.max(0, end - last)
  const latencies = ascending(hits.map((h) => h.latencyMs))
  const lags = ascending(hits.map((h) => Math.max(0, h.sentMs - h.dueMs)))
  const codes = new Map<number, number>()
  const errors = new Set<string>()
  let success = 0
  let bytesIn = 0
  for (const h of hits) {
    codes.set(h.status, (codes.get(h.status) ?? 0) + 1)
    bytesIn += h.bytesIn
    if (h.status >= 200 && h.status < 400) success++
    else errors.add(h.error ?? `${h.status} ${STATUS_CODES[h.status] ?? ""}`.trim())
  }
  return {
    requests: n,
    rate: attackMs > 0 ? n / (attackMs / 1000) : Number.NaN,
    throughput: attackMs + waitMs > 0 ? success / ((attackMs + waitMs) / 1000) : Number.NaN,
    attackMs,
    waitMs,
    latencies: {
      minMs: latencies[0] ?? Number.NaN,
      meanMs: n > 0 ? latencies.reduce((a, b) => a + b, 0) / n : Number.NaN,
      p50Ms: quantile(latencies, 0.5),
      p90Ms: quantile(latencies, 0.9),
      p95Ms: quantile(latencies, 0.95),
      p99Ms: quantile(latencies, 0.99),
      maxMs: latencies[n - 1] ?? Number.NaN
    },
    bytesIn,
    success,
    successRatio: n > 0 ? success / n : Number.NaN,
    statusCodes: [...codes.entries()].sort((a, b) => a[0] - b[0]),
    errors: [...errors],
    sendRate: n > 1 && attackMs > 0 ? (n - 1) / (attackMs / 1000) : Number.NaN,
    lagP50Ms: quantile(lags, 0.5),
    lagP99Ms: quantile(lags, 0.99),
    lagMaxMs: lags[n - 1] ?? Number.NaN,
    maxInFlight: result.maxInFlight
  }
}

/** A duration as Go prints one (vegeta's format): `872.854µs`, `2.478ms`, `9.951s`. */
export const formatDuration = (ms: number): string => {
  if (!Number.isFinite(ms)) return "NaN"
  const trim = (x: number) => String(Number(x.toFixed(3)))
  if (ms >= 1000) return `${trim(ms / 1000)}s`
  if (ms >= 1) return `${trim(ms)}ms`
  if (ms >= 0.001) return `${trim(ms * 1000)}µs`
  return `${Math.round(ms * 1e6)}ns`
}

const row = (label: string, columns: string, values: string) => `${label.padEnd(14)}${columns.padEnd(34)}${values}`

/** `vegeta report`'s text, then the schedule the attack kept. */
export const formatReport = (m: Metrics): string => {
  const l = m.latencies
  const d = formatDuration
  return [
    row("Requests", "[total, rate, throughput]", `${m.requests}, ${m.rate.toFixed(2)}, ${m.throughput.toFixed(2)}`),
    row("Duration", "[total, attack, wait]", `${d(m.attackMs + m.waitMs)}, ${d(m.attackMs)}, ${d(m.waitMs)}`),
    row(
      "Latencies",
      "[min, mean, 50, 90, 95, 99, max]",
      [l.minMs, l.meanMs, l.p50Ms, l.p90Ms, l.p95Ms, l.p99Ms, l.maxMs].map(d).join(", ")
    ),
    row("Bytes In", "[total, mean]", `${m.bytesIn}, ${(m.requests > 0 ? m.bytesIn / m.requests : 0).toFixed(2)}`),
    row("Bytes Out", "[total, mean]", "0, 0.00"),
    row("Success", "[ratio]", `${(m.successRatio * 100).toFixed(2)}%`),
    row("Status Codes", "[code:count]", m.statusCodes.map(([code, count]) => `${code}:${count}  `).join("")),
    "Error Set:",
    ...m.errors,
    row(
      "Schedule",
      "[send rate, lag 50, 99, max]",
      `${m.sendRate.toFixed(2)}/s, ${d(m.lagP50Ms)}, ${d(m.lagP99Ms)}, ${d(m.lagMaxMs)}`
    ),
    row("In flight", "[max]", String(m.maxInFlight))
  ].join("\n")
}
