/**
 * @internal The store-failure policy, one model for every front end: what to do with a request when the
 * rate limiter's store fails. `RateLimit`'s `onStoreFailure` (`"fail-closed"`, `"fail-open"` or a
 * `RateLimit.fallback(…)`) and the proxy's `--on-store-failure` flag are each normalized once, here, into a
 * {@link StoreFailure}; the decisions (./decision.ts), the log lines and the proxy's start read only that.
 *
 * A leaf: no value import, so that the command line (../proxy/cli.ts) can check its flag with it without
 * loading the store.
 */
import type * as RateLimit from "../../RateLimit.js"

/**
 * @internal What each policy does, by the name the flag, the logs and the banner give it: the table a new
 * policy is added to (docs/CONTRIBUTING.md, "Store-failure policy").
 */
export const POLICIES = {
  "fail-closed": {
    /** The decision of a request the store failed to decide; undefined: the fallback store decides it. */
    decision: "fail-closed",
    /** Whether the request goes on. */
    pass: false,
    /** What happens to requests while the store is down: the end of the outage's first log line. */
    meanwhile: "requests are refused with 503 until it answers (fail-closed)",
    /** Whether a store that does not answer at the proxy's start fails the start. */
    needsStoreAtStart: true
  },
  "fail-open": {
    decision: "fail-open",
    pass: true,
    meanwhile: "requests pass until it answers (fail-open)",
    needsStoreAtStart: false
  },
  fallback: {
    decision: undefined,
    pass: undefined,
    meanwhile: "the local fallback decides until it answers",
    needsStoreAtStart: false
  }
} as const satisfies Record<string, Policy>

/** @internal One row of {@link POLICIES}. */
export interface Policy {
  readonly decision: RateLimit.Decision | undefined
  readonly pass: boolean | undefined
  readonly meanwhile: string
  readonly needsStoreAtStart: boolean
}

/** @internal A policy's name. */
export type Mode = keyof typeof POLICIES

/** @internal The policies' names, in the order the help and the messages list them. */
export const MODES: ReadonlyArray<Mode> = Object.keys(POLICIES) as Array<Mode>

/**
 * @internal A store-failure policy, normalized: its {@link Mode} and, for a fallback, the fallback (its
 * embedded store decides meanwhile).
 */
export type StoreFailure =
  | { readonly mode: "fail-closed" | "fail-open"; readonly fallback: undefined }
  | { readonly mode: "fallback"; readonly fallback: RateLimit.Fallback }

/** @internal */
export const FallbackTypeId: RateLimit.FallbackTypeId = Symbol.for(
  "wakuwaku/http/RateLimit/Fallback"
) as RateLimit.FallbackTypeId

/** @internal */
export const isFallback = (u: unknown): u is RateLimit.Fallback =>
  typeof u === "object" && u !== null && FallbackTypeId in u

const FAIL_CLOSED: StoreFailure = { mode: "fail-closed", fallback: undefined }
const FAIL_OPEN: StoreFailure = { mode: "fail-open", fallback: undefined }

/** `a, b or c`. */
const listed = (names: ReadonlyArray<string>): string =>
  names.length < 2 ? names.join("") : `${names.slice(0, -1).join(", ")} or ${names[names.length - 1]}`

/**
 * @internal Normalizes `onStoreFailure` as the middlewares and `Proxy.layer` take it: `"fail-closed"`,
 * `"fail-open"` or a `RateLimit.fallback(…)`, else a `TypeError`.
 */
export const fromOption = (onStoreFailure: unknown): StoreFailure => {
  if (onStoreFailure === "fail-closed") return FAIL_CLOSED
  if (onStoreFailure === "fail-open") return FAIL_OPEN
  if (isFallback(onStoreFailure)) return { mode: "fallback", fallback: onStoreFailure }
  throw new TypeError(
    `wakuwaku/http: onStoreFailure must be "fail-closed", "fail-open" or RateLimit.fallback(…), got ${
      String(onStoreFailure)
    }`
  )
}

/** @internal What the flag expects, for its error message: `expected fail-closed, fail-open or fallback`. */
export const FLAG_EXPECTED = `expected ${listed(MODES)}`

/** @internal Reads `--on-store-failure`'s value (surrounding blanks ignored): a {@link Mode}, else undefined. */
export const fromFlag = (value: string): Mode | undefined => {
  const name = value.trim()
  return Object.hasOwn(POLICIES, name) ? name as Mode : undefined
}

/**
 * @internal The `onStoreFailure` option of a {@link Mode} read from the flag; `fallback` makes one, with
 * `makeFallback` (`RateLimit.fallback` of the proxy's `--max-entries`).
 */
export const toOption = (mode: Mode, makeFallback: () => RateLimit.Fallback): RateLimit.OnStoreFailure =>
  mode === "fallback" ? makeFallback() : mode
