/**
 * @internal The denial memory: a store's denial, remembered in this process until its `retryAfter`, so
 * that a client flooding past its limit costs no store call per request.
 *
 * What it holds: only denials the store repeats when asked again. A decision's denial is not remembered
 * as it came: ./decision.ts asks the store again (`Limits.check`, which writes nothing), after the
 * request's own refunds have landed, when each limiter that denied would allow; only those that still deny
 * are remembered, each with the retry it gives then. On a Cluster, several limits are decided per slot,
 * and a group that allowed is refunded when another denies (../limits.ts): a request that read a limiter
 * between that spend and its refund was denied by a spend that is gone, and the check, which comes after,
 * no longer sees it. On one Redis or the embedded store nothing is refunded, and the check repeats the
 * decision.
 *
 * Why it changes no decision: a remembered denial says that at the moment the store answered the check, the
 * name had less than the cost left, and when the same cost fits again if nobody else spends. A token bucket
 * cannot refill into an earlier allowance, a fixed window's count only grows until the window ends, and
 * other replicas can only spend more; so until then the same cost is denied. The exceptions are what gives
 * back: a `reset` or a `TokenBucket.refund` elsewhere, which this process does not see until the
 * remembered denial ends; and on a Cluster, another request's per-slot spend that is still in flight when
 * the check reads the limiter (it may be refunded a moment later, and the denial it caused stays
 * remembered).
 *
 * Two instants per denial, both on this process's monotonic clock:
 * - it **ends** at (when the check was sent) + `retryAfter` − 1 ms: no later than the store's own
 *   instant (`retryAfter` is rounded up to whole milliseconds, and the store answered after the check was
 *   sent), so a request the store would allow is never refused from memory;
 * - its `Retry-After` counts to (when the check's reply came) + `retryAfter`: no earlier than the store's,
 *   so the advertised time is never early.
 *
 * A denial is recalled for the same cost only (a larger cost has a later `retryAfter`; a smaller one may
 * pass). The memory holds at most `maxEntries` names: past it, the one remembered longest ago is dropped
 * (its next request asks the store again). Expired entries are dropped when met.
 */
import { performance } from "node:perf_hooks"

interface Entry {
  readonly cost: number
  /** When the denial ends (ms, monotonic). */
  readonly ends: number
  /** What `Retry-After` counts to (ms, monotonic). */
  readonly retryAt: number
}

/** @internal */
export class Denials {
  private readonly entries = new Map<string, Entry>()
  constructor(readonly maxEntries: number) {}

  /** How many names are remembered now (expired ones included until met). */
  get size(): number {
    return this.entries.size
  }

  /** The milliseconds until the remembered denial of `name` at `cost` may be retried; undefined if none. */
  recall(name: string, cost: number, now: number = performance.now()): number | undefined {
    const entry = this.entries.get(name)
    if (entry === undefined) return undefined
    if (now >= entry.ends) {
      this.entries.delete(name)
      return undefined
    }
    return entry.cost === cost ? entry.retryAt - now : undefined
  }

  /** Remembers a store's denial of `name` at `cost` (its check), asked at `sentAt`, answered at `receivedAt`. */
  remember(name: string, cost: number, retryAfterMs: number, sentAt: number, receivedAt: number): void {
    if (this.entries.has(name)) this.entries.delete(name)
    else if (this.entries.size >= this.maxEntries) {
      // The oldest first: Map iterates in insertion order.
      const oldest = this.entries.keys().next()
      if (oldest.done !== true) this.entries.delete(oldest.value)
    }
    // retryAfter is rounded up to whole ms: the store's instant is later than retryAfter - 1 after its decision.
    this.entries.set(name, { cost, ends: sentAt + retryAfterMs - 1, retryAt: receivedAt + retryAfterMs })
  }
}

/** @internal The monotonic clock the memory counts on, in ms. */
export const now = (): number => performance.now()

/** @internal Checks a bound for the memory: 0 (none) or a positive safe integer. */
export const validMaxEntries = (value: unknown, what: string): number => {
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < 0) {
    throw new RangeError(`${what} must be 0 (off) or a positive safe integer, got ${String(value)}`)
  }
  return value
}
