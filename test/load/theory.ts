/**
 * The success ratio a limit policy should give under a constant-rate attack of `rate` requests per
 * second for `duration` (all from one client, so one key), to compare a load test's measurement with.
 *
 * - Token bucket, capacity C, refill r per second, attacked at R per second for T seconds: the bucket
 *   starts full, so C requests pass at once, and then as many as it refills: (C + r·T) / (R·T),
 *   capped at 1. (The last request is sent at T − 1/R, so the discrete count can fall short of the
 *   formula by r/R tokens: 0.5 of 200 requests in the vegeta scenario, 0.25 percentage points.)
 * - Fixed window, L per W, attacked at R per second for T seconds: windows are aligned to the
 *   server's clock (epoch multiples of W), not to the attack, so the attack touches T/W windows when
 *   it starts exactly on a window's edge and one more otherwise (10 or 11 for 10 s of 1 s windows).
 *   Each window admits min(L, its arrivals). When R·W > L every inner window is full, and what moves
 *   the ratio is how the first and last partial windows share the arrivals: at 20/s against 10 per
 *   second for 10 s, 100 of 200 (50%) when aligned, up to 110 (55%) when the attack starts half-way
 *   through a window; 52.5% on average over alignments. The original run's 104 of 200 is one such alignment.
 *   Given the attack's start on the wall clock, the expected count at that alignment is exact.
 */

export type Policy =
  | {
    readonly algorithm: "fixed-window"
    /** Requests admitted per window. */
    readonly limit: number
    /** The window, in milliseconds. */
    readonly windowMs: number
  }
  | {
    readonly algorithm: "token-bucket"
    readonly capacity: number
    /** The bucket refills `refillTokens` every `refillPeriodMs` milliseconds, continuously. */
    readonly refillTokens: number
    readonly refillPeriodMs: number
  }

export interface Schedule {
  /** Requests per second. */
  readonly rate: number
  /** The attack's length in milliseconds: `floor(rate · duration)` requests, one every 1/rate. */
  readonly durationMs: number
}

export interface Theory {
  /** The ratio to compare with: at this run's alignment when given (fixed window), else the mean. */
  readonly ratio: number
  /** The lowest ratio over every alignment to the server's windows (token bucket: `ratio`). */
  readonly low: number
  /** The highest. */
  readonly high: number
  /** One line: the policy, the formula or the range, and the figure. */
  readonly text: string
}

const pct = (x: number) => `${(x * 100).toFixed(2)}%`
const num = (x: number) => (Number.isInteger(x) ? String(x) : String(Number(x.toFixed(3))))

export const plannedRequests = (schedule: Schedule): number =>
  Math.max(1, Math.floor((schedule.rate * schedule.durationMs) / 1000 + 1e-9))

/**
 * Admitted requests when the schedule's first request falls `phaseMs` after the start of a window
 * (0 ≤ phaseMs < windowMs). A request exactly on an edge belongs to the window it opens.
 */
export const fixedWindowAdmitted = (limit: number, windowMs: number, schedule: Schedule, phaseMs: number): number => {
  const n = plannedRequests(schedule)
  const interval = 1000 / schedule.rate
  let admitted = 0
  let window = Number.NaN
  let inWindow = 0
  for (let i = 0; i < n; i++) {
    const w = Math.floor((phaseMs + i * interval) / windowMs + 1e-12)
    if (w !== window) {
      admitted += Math.min(limit, inWindow)
      window = w
      inWindow = 0
    }
    inWindow++
  }
  return admitted + Math.min(limit, inWindow)
}

/**
 * The alignments to evaluate, each with the share of all alignments it stands for: every phase at
 * which some request crosses a window's edge (the admitted count changes only there), or, when there
 * are too many for the schedule's length, a uniform grid (so the range and mean are then estimates).
 */
const alignments = (windowMs: number, schedule: Schedule): Array<{ phase: number; weight: number }> => {
  const n = plannedRequests(schedule)
  const interval = 1000 / schedule.rate
  // About 5·10^7 request steps in all, at most 2000 alignments.
  const cap = Math.max(16, Math.min(2000, Math.floor(5e7 / n)))
  // Request i crosses an edge at phase (W − i·interval mod W) mod W.
  const edges = new Set<number>([0])
  for (let i = 0; i < n && edges.size <= cap; i++) {
    edges.add(Number(((windowMs - ((i * interval) % windowMs)) % windowMs).toFixed(6)) % windowMs)
  }
  const sorted = edges.size <= cap
    ? [...edges].sort((a, b) => a - b)
    : Array.from({ length: cap }, (_, k) => (k * windowMs) / cap)
  return sorted.map((phase, k) => ({ phase, weight: ((sorted[k + 1] ?? windowMs) - phase) / windowMs }))
}

/**
 * The theory for a policy and a schedule. `startEpochMs` (the first request's due time on the wall
 * clock, which the server's clock shares on loopback) pins a fixed window's alignment.
 */
export const theory = (policy: Policy, schedule: Schedule, startEpochMs?: number): Theory => {
  const n = plannedRequests(schedule)
  const seconds = schedule.durationMs / 1000
  const attack = `${num(schedule.rate)}/s for ${num(seconds)}s (${n} requests)`
  if (policy.algorithm === "token-bucket") {
    const c = policy.capacity
    const r = (policy.refillTokens * 1000) / policy.refillPeriodMs
    const ratio = Math.min(1, (c + r * seconds) / (schedule.rate * seconds))
    return {
      ratio,
      low: ratio,
      high: ratio,
      text: `token bucket, capacity ${num(c)}, refill ${num(r)}/s, under ${attack}: ` +
        `min(1, (C + r·T)/(R·T)) = min(1, (${num(c)} + ${num(r)}·${num(seconds)})/(${num(schedule.rate)}·${
          num(seconds)
        })) = ${pct(ratio)}` +
        (ratio < 1
          ? ` (the last request leaves at T − 1/R, so the bucket can refill only C + r·(T − 1/R) = ${
            num(c + r * (seconds - 1 / schedule.rate))
          } tokens: ${pct((c + r * (seconds - 1 / schedule.rate)) / n)})`
          : "")
    }
  }
  const { limit, windowMs } = policy
  const phases = alignments(windowMs, schedule)
  const ratios = phases.map(({ phase }) => fixedWindowAdmitted(limit, windowMs, schedule, phase) / n)
  const low = Math.min(...ratios)
  const high = Math.max(...ratios)
  const mean = phases.reduce((sum, { weight }, k) => sum + weight * (ratios[k] ?? 0), 0)
  const span = ((n - 1) * 1000) / schedule.rate
  const touched = Math.floor(span / windowMs) + 1
  const windows = `${touched} or ${touched + 1} windows touched`
  const head = `fixed window, ${num(limit)} per ${num(windowMs / 1000)}s, under ${attack}: ` +
    `${pct(low)}–${pct(high)} by alignment to the server's windows (${windows}), mean ${pct(mean)}`
  if (startEpochMs === undefined) return { ratio: mean, low, high, text: head }
  const phase = ((startEpochMs % windowMs) + windowMs) % windowMs
  const at = fixedWindowAdmitted(limit, windowMs, schedule, phase)
  return {
    ratio: at / n,
    low,
    high,
    text: `${head}; at this run's alignment (first request ${(phase / windowMs).toFixed(3)} into its window): ` +
      `${at}/${n} = ${pct(at / n)}`
  }
}
