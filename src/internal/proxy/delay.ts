/**
 * @internal The proxy's delay mode, as nginx's `limit_req … burst=N delay=0`: a request over the rate is not
 * refused at once but waits its turn, then is forwarded.
 *
 * - **One store call per request.** Each request reserves its cost in the route's token bucket
 *   (`TokenBucket.reserve`, ../http/decision.ts's {@link decision.reserving}) with the route's `maxWait`: granted,
 *   it sleeps the wait the store gave and is forwarded; refused (its turn further than `maxWait` away), it is
 *   answered 429 with `Retry-After` (when the same reservation would be granted), as enforce mode's denials are.
 * - **Waits on the server's clock.** A grant's wait counts from Redis's `TIME` when it was granted, so the
 *   starts of every replica and worker that share the bucket keep to one bound: in any interval T, at most
 *   capacity + rate × T requests start (docs/token-bucket.md, "Why the bound holds"), each late by the reply's
 *   way back and its own scheduling, never early.
 * - **Bounded per process.** A {@link Waiting} counts the requests this process holds from their reservation
 *   asked until they are forwarded or refused (every route of the server shares it). Past its bound a request
 *   is answered 503 with `Proxy-Status` at once, with no store call; the first of an episode is logged.
 * - **A client gone gives its turn back.** The request's fiber is interrupted when its connection closes
 *   while it waits: its reservation goes back by `cancel`, which returns its tokens if its turn is still the
 *   end of the queue and otherwise lets it lapse, so the calls behind it keep their turns and the bound holds.
 *   A grant of the fallback store (the store down) is not given back to the store.
 *
 * What it does not do: a request keeps its place only in the process that holds it (a process that dies
 * lets its turns lapse); a refusal remembered by the denial memory lasts until its `Retry-After` even if a
 * turn ahead is given back meanwhile.
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import type * as Redis from "../../Redis.js"
import type * as TokenBucket from "../../TokenBucket.js"
import * as decision from "../http/decision.js"
import * as render from "../http/render.js"
import * as exchange from "./exchange.js"

/** @internal The most requests a process holds waiting by default. */
export const MAX_WAITING = 1000

/**
 * @internal The longest `maxWait`: 2^31 − 1 ms (24d 20h 31m 23.647s), the longest a timer waits (Effect's clock never
 * wakes a longer sleep, so a turn further away would be waited until its client left).
 */
export const MAX_WAIT: Duration.Duration = Duration.millis(2 ** 31 - 1)

/** @internal Checks `maxWait`: at most {@link MAX_WAIT} (a `RangeError` otherwise, naming `at`). */
export const validMaxWait = (maxWait: Duration.Duration, at: string): Duration.Duration => {
  if (Duration.greaterThan(maxWait, MAX_WAIT)) {
    throw new RangeError(
      `wakuwaku/Proxy: ${at} must be at most ${Duration.format(MAX_WAIT)} (the longest a timer waits), got ${
        Duration.format(maxWait)
      }`
    )
  }
  return maxWait
}

/** @internal Checks `maxWaiting`: a positive safe integer (a `RangeError` otherwise). */
export const validMaxWaiting = (value: unknown): number => {
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < 1) {
    throw new RangeError(`wakuwaku/Proxy: maxWaiting must be a positive safe integer, got ${String(value)}`)
  }
  return value
}

/** @internal The requests one process holds waiting, and its bound: shared by every delayed route of a server. */
export class Waiting {
  /** How many requests are held now. */
  count = 0
  /** Whether the bound was met and not yet left (the first refusal of an episode is logged). */
  full = false
  /** The bound (a reload may change it; the requests held past a lowered bound finish). */
  constructor(public max: number) {}
}

/** @internal What a delayed request comes to. */
export type Outcome =
  /** The limit decided: forwarded at its turn (`pass`, after `waitedMs`), or refused (429, 413, 503). */
  | { readonly _tag: "Decided"; readonly verdict: decision.Verdict; readonly waitedMs: number }
  /** The process holds its most waiting requests: 503, nothing asked of the store. */
  | { readonly _tag: "Full" }

const FULL: Outcome = { _tag: "Full" }

/** @internal The 503 past the bound: its header lines (a new object per call) and body (of the bound now). */
export interface Full {
  readonly headers: () => Record<string, string>
  readonly body: () => string
}

/** @internal The 503 of a process that holds its most waiting requests (`waiting.max`), for a limit of `field`. */
export const fullResponse = (field: string, waiting: Waiting): Full => {
  const proxyStatus = exchange.generatedStatus("proxy_internal_response", "too many requests waiting")
  let max = -1
  let body = ""
  return {
    headers: () => ({
      "content-type": render.PROBLEM_JSON,
      "ratelimit-policy": field,
      "proxy-status": proxyStatus,
      "cache-control": "no-store"
    }),
    body: () => {
      // Made again only when a reload changed the bound.
      if (max !== waiting.max) {
        max = waiting.max
        body = JSON.stringify({
          type: "about:blank",
          title: "Service Unavailable",
          status: 503,
          detail: `The proxy holds its most requests waiting their turn (${max}).`
        })
      }
      return body
    }
  }
}

/** @internal A route's delay: its reserving limit, and how a request goes through it. */
export interface Delay<LR> {
  /** The reserving limit: its policy field, its denial memory (`recall`). */
  readonly limit: decision.Limit<LR>
  readonly waiting: Waiting
  /** The 503 past the bound: its header lines (a new object per call) and body. */
  readonly full: Full
  /**
   * One request of `cost` keyed `name`: a {@link Outcome}, once its turn has come (the fiber sleeps the wait).
   * Interrupted while it waits (its client gone), its reservation is given back.
   */
  readonly decide: (names: decision.Names, units: number) => Effect.Effect<Outcome, Redis.InvalidInput, LR>
}

/**
 * @internal The delay of a limit (the default route's `rateLimit` with `delay`, or a route in delay mode): its
 * limiter must be one token bucket (a `TypeError` otherwise, from {@link decision.reserving}), `maxWait` a
 * duration; `waiting` is the server's.
 */
export const make = <LR>(
  options: decision.LimitOptions<LR>,
  maxWait: Duration.Duration,
  waiting: Waiting,
  route?: string
): Delay<LR> => {
  validMaxWait(maxWait, route === undefined ? "maxWait" : `route ${route}'s maxWait`)
  const limit = decision.reserving<LR>(options, maxWait, route)
  const listed = options.limiter
  const bucket = (Array.isArray(listed) ? listed[0] : listed) as unknown as TokenBucket.TokenBucket<string>
  const giveBack = (names: decision.Names, verdict: decision.Verdict, granted: TokenBucket.Granted) =>
    // A fallback store's grant is not the store's to take back; its turn lapses there. The bucket needs LR:
    // what it was given as.
    (verdict.decision === "allowed"
      ? Effect.ignore(bucket.cancel(typeof names === "string" ? names : names[0]!, granted))
      : Effect.void) as Effect.Effect<
        void,
        never,
        LR
      >
  const leave = Effect.sync(() => {
    waiting.count--
    // Below half the bound, the episode is over: the next time it is met is logged again.
    if (waiting.count <= waiting.max / 2) waiting.full = false
  })
  const decide = (names: decision.Names, units: number): Effect.Effect<Outcome, Redis.InvalidInput, LR> =>
    Effect.suspend(() => {
      if (waiting.count >= waiting.max) {
        if (waiting.full) return Effect.succeed(FULL)
        waiting.full = true
        return Effect.as(
          Effect.logWarning(
            `proxy: ${waiting.max} requests are waiting their turn, the most this process holds; ` +
              "503 until one leaves (--max-waiting)"
          ),
          FULL
        )
      }
      waiting.count++
      return Effect.uninterruptibleMask((restore) =>
        Effect.flatMap(limit.decide(names, units), (verdict): Effect.Effect<Outcome, never, LR> => {
          const granted = verdict.granted
          const ms = granted === undefined ? 0 : Duration.toMillis(granted.wait)
          if (granted === undefined || ms === 0) return Effect.succeed({ _tag: "Decided", verdict, waitedMs: 0 })
          return restore(Effect.sleep(granted.wait)).pipe(
            Effect.onInterrupt(() => giveBack(names, verdict, granted)),
            Effect.as<Outcome>({ _tag: "Decided", verdict, waitedMs: ms })
          )
        }).pipe(Effect.ensuring(leave))
      )
    })
  return { limit, waiting, full: fullResponse(limit.field, waiting), decide }
}
