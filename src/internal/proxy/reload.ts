/**
 * @internal Reloading the proxy's configuration without a restart (`wakuwaku proxy --config FILE`, on SIGHUP).
 *
 * - **One swap.** `Proxy.layer` holds what a configuration makes for requests (its routes, their limits and
 *   forwarding, the default route) in one reference, which a reload replaces whole, once the new one is made in
 *   full. A request reads it once, on arrival, and keeps what it read to its end: requests in flight and those
 *   waiting their turn (delay mode) finish under the configuration they arrived under, and no request ever sees
 *   part of one configuration and part of another.
 * - **Unchanged routes keep their state.** A route of the new configuration equal to one of the old (the same
 *   name, match, mode, wait, upstream and timeout, and the same limiters, keys and costs: {@link sameRoute}), and
 *   a default route equal to the old one ({@link sameRateLimit}), keep what they were made of: their limit with
 *   its denial memory, their delay. Another route starts afresh (its limits' state in the store is the store's:
 *   a limiter of the same namespace and parameters reads the same keys).
 * - **A refused configuration changes nothing.** Options the proxy rejects (a `TypeError` or `RangeError` when
 *   made) leave the running one in place; `wakuwaku proxy` logs the reason and counts it ({@link reloads}).
 *
 * What a reload cannot change: where the server listens, its shutdown timeout and request timeout, and the store
 * (built once at start); `wakuwaku proxy` says so in a warning when the file changes them.
 */
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Metric from "effect/Metric"
import type * as Proxy from "../../Proxy.js"

/** @internal Reloads of the proxy's configuration, by `result`: `applied` or `refused`. */
export const reloads: Metric.Metric.Counter<number> = Metric.counter("wakuwaku_proxy_reloads", {
  description: "Reloads of the proxy's configuration (SIGHUP), by result: applied or refused",
  incremental: true
})

/**
 * @internal How `Proxy.layer` is reloaded: `reload(options)` makes the new configuration in full, then swaps it
 * in; it throws (a `TypeError` or `RangeError`) on options the proxy rejects, and then nothing changed. It
 * returns which routes kept their state (by name, `default` for the default route).
 */
export interface Reloader {
  readonly reload: (options: Proxy.LayerOptions<never>) => { readonly kept: ReadonlyArray<string> }
}

/** @internal The tag `Proxy.layer` provides its {@link Reloader} under (beside `Proxy.Server`). */
export const Reloader: Context.Tag<Reloader, Reloader> = Context.GenericTag<Reloader>("wakuwaku/Proxy/Reloader")

/** Two durations as options give them, equal when both are absent or they decode to the same length. */
const sameDuration = (a: Duration.DurationInput | undefined, b: Duration.DurationInput | undefined): boolean =>
  a === b || (a !== undefined && b !== undefined && Duration.equals(Duration.decode(a), Duration.decode(b)))

/** Two upstreams as options give them (a string or a URL), equal when they spell the same URL. */
const sameUrl = (a: string | URL | undefined, b: string | URL | undefined): boolean =>
  a === b || (a !== undefined && b !== undefined && String(a) === String(b))

/** Two values of plain data (a match, a list of names) equal as JSON writes them. */
const sameData = (a: unknown, b: unknown): boolean => a === b || JSON.stringify(a) === JSON.stringify(b)

/**
 * @internal What a route is made of besides itself, in the layer's options: the proxies trusted (its forwarding
 * and its default key), the default upstream and timeout, the store-failure policy and the denial memory.
 */
const sameSurroundings = (a: Proxy.LayerOptions<unknown>, b: Proxy.LayerOptions<unknown>): boolean =>
  sameData(a.trustedProxies, b.trustedProxies) && sameUrl(a.upstream, b.upstream) &&
  sameDuration(a.timeout, b.timeout) &&
  (a.onStoreFailure ?? a.rateLimit?.onStoreFailure) === (b.onStoreFailure ?? b.rateLimit?.onStoreFailure) &&
  (a.rememberDenials ?? a.rateLimit?.rememberDenials) === (b.rememberDenials ?? b.rateLimit?.rememberDenials)

/**
 * @internal Whether route `b` of options `bo` is route `a` of options `ao` again: the same name, match, mode, wait,
 * upstream and timeout, and the same limiters (the same values: a limiter is an immutable value, which
 * `wakuwaku proxy` makes once per definition), keys (the same functions) and costs, in the same options around.
 */
export const sameRoute = <LR>(
  ao: Proxy.LayerOptions<LR>,
  a: Proxy.Route<LR>,
  bo: Proxy.LayerOptions<LR>,
  b: Proxy.Route<LR>
): boolean => {
  if (a.name !== b.name || (a.mode ?? "enforce") !== (b.mode ?? "enforce") || !sameData(a.match, b.match)) {
    return false
  }
  if (!sameDuration(a.maxWait, b.maxWait) || !sameUrl(a.upstream, b.upstream) || !sameDuration(a.timeout, b.timeout)) {
    return false
  }
  const al = a.limits ?? []
  const bl = b.limits ?? []
  return al.length === bl.length &&
    al.every((l, i) => {
      const m = bl[i]!
      return l.limiter === m.limiter && l.key === m.key && (l.cost ?? 1) === (m.cost ?? 1) &&
        (l.shadow ?? false) === (m.shadow ?? false)
    }) &&
    sameSurroundings(ao, bo)
}

/** @internal Whether the default route's limit of `b` is that of `a` again (see {@link sameRoute}). */
export const sameRateLimit = <LR>(a: Proxy.LayerOptions<LR>, b: Proxy.LayerOptions<LR>): boolean => {
  const ar = a.rateLimit
  const br = b.rateLimit
  if (ar === undefined || br === undefined) return ar === br && sameSurroundings(a, b)
  return ar.limiter === br.limiter && ar.key === br.key && ar.onStoreFailure === br.onStoreFailure &&
    ar.rememberDenials === br.rememberDenials && sameDuration(ar.delay?.maxWait, br.delay?.maxWait) &&
    sameSurroundings(a, b)
}
