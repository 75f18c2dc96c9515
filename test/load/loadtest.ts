/**
 * `npm run loadtest`: the classic vegeta scenario (20 req/s for 10 s against 10 per second), reproduced.
 * An open-model attack at a constant rate (`attack.ts`) against a rate-limited target, a vegeta-like
 * report (`report.ts`), the theoretical success ratio of the configured policy (`theory.ts`), and
 * whether the measurement is within ±3 percentage points of it (exit 0) or not (exit 1). Bad flags and
 * refused targets exit 2.
 *
 * Without `--target` it starts its own target in this process (`target.ts`): a local upstream and a
 * limiting server in front of it, on the memory store or on Redis. With `--target` the policy flags
 * only describe the target's policy, for the theory. Only loopback targets are attacked unless
 * `--allow-remote` is given.
 */
import { Effect } from "effect"
import { resolve } from "node:path"
import { fileURLToPath } from "node:url"
import { parseArgs } from "node:util"
import { attack, isLoopback } from "./attack.js"
import { formatReport, metrics } from "./report.js"
import type { Store, Target } from "./target.js"
import { describePolicy, startTarget } from "./target.js"
import type { Policy } from "./theory.js"
import { plannedRequests, theory } from "./theory.js"

/** The tolerance the docs state: measured within ±3 percentage points of theory. */
export const TOLERANCE_PP = 3

export const USAGE = `usage: npm run loadtest -- [flags]
  --target URL                  attack this URL (default: start a proxy and an upstream in this process)
  --rate N[/D]                  requests per D (default 1s): 20, 20/s, 5/500ms (default 20)
  --duration D                  how long to send: 10s, 500ms, 1m (default 10s)
  --algorithm A                 fixed-window or token-bucket (default fixed-window)
  --limit N --window D          fixed window: N requests per window D (default 10 per 1s)
  --capacity N --refill N[/D]   token bucket: capacity N, refilled N per D (default 10, 10/s)
  --store S                     memory or redis, for the built-in target (default memory;
                                redis: REDIS_URL, else a throwaway redis-server)
  --timeout D                   a request fails after D without a response (default 30s)
  --allow-remote                allow a --target that is not a loopback address`

export interface LoadTestOptions {
  readonly target: string | undefined
  readonly rate: number
  readonly durationMs: number
  readonly policy: Policy
  readonly store: Store
  readonly timeoutMs: number
  readonly allowRemote: boolean
}

const UNITS: Readonly<Record<string, number>> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 }

/** `10s`, `500ms`, `1.5m`, `1h` in milliseconds, or undefined. */
export const parseDuration = (text: string): number | undefined => {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h)$/.exec(text.trim())
  if (m === null) return undefined
  const ms = Number(m[1]) * (UNITS[m[2] ?? ""] ?? Number.NaN)
  return ms > 0 && Number.isFinite(ms) ? ms : undefined
}

/** `20`, `20/s`, `20/1s`, `5/500ms`: a count per period (default one second), or undefined. */
export const parseRate = (text: string): { readonly count: number; readonly periodMs: number } | undefined => {
  const m = /^(\d+(?:\.\d+)?)(?:\/(.+))?$/.exec(text.trim())
  if (m === null) return undefined
  const count = Number(m[1])
  const unit = m[2]
  const periodMs = unit === undefined ? 1000 : parseDuration(/^\d/.test(unit) ? unit : `1${unit}`)
  return periodMs !== undefined && count > 0 ? { count, periodMs } : undefined
}

class UsageError extends Error {}

const fail = (message: string): never => {
  throw new UsageError(message)
}

const wholeNumber = (flag: string, text: string): number => {
  const n = Number(text)
  return /^\d+$/.test(text.trim()) && Number.isSafeInteger(n)
    ? n
    : fail(`--${flag} must be a whole number, got ${JSON.stringify(text)}`)
}

/** The options from the command line, or a one-line error. */
export const parseOptions = (argv: ReadonlyArray<string>): LoadTestOptions | { readonly error: string } => {
  try {
    const { values } = parseArgs({
      args: [...argv],
      strict: true,
      allowPositionals: false,
      options: {
        target: { type: "string" },
        rate: { type: "string", default: "20" },
        duration: { type: "string", default: "10s" },
        algorithm: { type: "string", default: "fixed-window" },
        // Defaults below: a flag of the other algorithm is an error, so these must tell given from default.
        limit: { type: "string" },
        window: { type: "string" },
        capacity: { type: "string" },
        refill: { type: "string" },
        store: { type: "string" },
        timeout: { type: "string", default: "30s" },
        "allow-remote": { type: "boolean", default: false }
      }
    })
    const duration = (flag: string, text: string, example: string): number =>
      parseDuration(text) ?? fail(`--${flag} must be a duration such as ${example}, got ${JSON.stringify(text)}`)
    const rate = parseRate(values.rate)
    if (rate === undefined) {
      fail(`--rate must be a positive count per period such as 20 or 20/1s, got ${JSON.stringify(values.rate)}`)
    }
    const durationMs = duration("duration", values.duration, "10s")
    const timeoutMs = duration("timeout", values.timeout, "30s")
    if (values.algorithm !== "fixed-window" && values.algorithm !== "token-bucket") {
      fail(`--algorithm must be fixed-window or token-bucket, got ${JSON.stringify(values.algorithm)}`)
    }
    const others = values.algorithm === "fixed-window" ? ["capacity", "refill"] as const : ["limit", "window"] as const
    for (const flag of others) {
      if (values[flag] !== undefined) fail(`--${flag} applies to the other algorithm, not ${values.algorithm}`)
    }
    let policy: Policy
    if (values.algorithm === "fixed-window") {
      const windowMs = duration("window", values.window ?? "1s", "1s")
      policy = { algorithm: "fixed-window", limit: wholeNumber("limit", values.limit ?? "10"), windowMs }
    } else {
      const refill = parseRate(values.refill ?? "10/s")
      if (refill === undefined || !Number.isSafeInteger(refill.count)) {
        fail(
          `--refill must be a whole number of tokens per period such as 10/s or 1/100ms, got ${
            JSON.stringify(values.refill)
          }`
        )
      }
      policy = {
        algorithm: "token-bucket",
        capacity: wholeNumber("capacity", values.capacity ?? "10"),
        refillTokens: refill!.count,
        refillPeriodMs: refill!.periodMs
      }
    }
    if (values.store !== undefined && values.store !== "memory" && values.store !== "redis") {
      fail(`--store must be memory or redis, got ${JSON.stringify(values.store)}`)
    }
    if (values.store !== undefined && values.target !== undefined) {
      fail("--store applies to the built-in target only; a --target keeps its own store")
    }
    if (values.target !== undefined) {
      let url: URL | undefined
      try {
        url = new URL(values.target)
      } catch {
        fail(`--target must be a URL such as http://127.0.0.1:8080/, got ${JSON.stringify(values.target)}`)
      }
      if (url!.protocol !== "http:" && url!.protocol !== "https:") {
        fail(`--target must be an http or https URL, got ${url!.href}`)
      }
      if (!values["allow-remote"] && !isLoopback(url!)) {
        fail(`refusing to attack ${url!.host}: not a loopback address (pass --allow-remote to attack it anyway)`)
      }
    }
    return {
      target: values.target,
      rate: (rate!.count * 1000) / rate!.periodMs,
      durationMs,
      policy,
      store: (values.store ?? "memory") as Store,
      timeoutMs,
      allowRemote: values["allow-remote"]
    }
  } catch (error) {
    // parseArgs throws TypeErrors with a readable message for unknown flags and missing values.
    return { error: error instanceof Error ? error.message : String(error) }
  }
}

const pp = (x: number) => `${x >= 0 ? "+" : "−"}${Math.abs(x).toFixed(2)} pp`

/** Runs one load test and prints its report; resolves with the exit code (0 within tolerance, 1 not). */
export const run = (options: LoadTestOptions, log: (line: string) => void = console.log): Promise<number> =>
  Effect.runPromise(
    Effect.scoped(
      Effect.gen(function*() {
        const target: Target = options.target !== undefined
          ? {
            url: options.target,
            description: `${options.target} (its policy as given: ${describePolicy(options.policy)})`
          }
          : yield* startTarget({ policy: options.policy, store: options.store })
        log(`target: ${target.description}`)
        const schedule = { rate: options.rate, durationMs: options.durationMs }
        log(
          `attack: GET ${target.url} at ${Number(options.rate.toFixed(3))}/s for ${options.durationMs / 1000}s ` +
            `(${
              plannedRequests(schedule)
            } requests), open model: each sent on schedule, whether or not earlier ones returned\n`
        )
        const controller = new AbortController()
        const onSigint = () => controller.abort()
        process.once("SIGINT", onSigint)
        const result = yield* Effect.promise(() =>
          attack({
            target: target.url,
            rate: options.rate,
            durationMs: options.durationMs,
            timeoutMs: options.timeoutMs,
            signal: controller.signal
          })
        ).pipe(Effect.ensuring(Effect.sync(() => process.removeListener("SIGINT", onSigint))))
        const m = metrics(result)
        log(formatReport(m))
        // The server's windows follow its clock; on loopback that is this machine's clock, so the
        // attack's start pins the alignment. A remote server's clock is not ours: then the mean.
        const t = theory(options.policy, schedule, isLoopback(target.url) ? result.startEpochMs : undefined)
        const diff = (m.successRatio - t.ratio) * 100
        const within = Math.abs(diff) <= TOLERANCE_PP
        log(`\ntheory: ${t.text}`)
        log(
          `measured ${(m.successRatio * 100).toFixed(2)}% − theory ${(t.ratio * 100).toFixed(2)}% = ${pp(diff)}: ` +
            `${within ? "within" : "OUTSIDE"} the tolerance of ±${TOLERANCE_PP} pp`
        )
        const sendRateOff = Math.abs(m.sendRate / options.rate - 1)
        if (result.hits.length < result.planned) {
          log(`stopped early: ${result.hits.length} of ${result.planned} requests sent`)
        } else if (sendRateOff > 0.02 || m.lagP99Ms > 50) {
          log(
            `warning: the attack fell behind its schedule (send rate ${
              m.sendRate.toFixed(2)
            }/s for ${options.rate}/s, ` +
              `lag p99 ${m.lagP99Ms.toFixed(1)} ms): the machine is too busy for this rate`
          )
        }
        if (m.latencies.p99Ms > 100) {
          log(
            `warning: the target answered slowly (latency p99 ${
              m.latencies.p99Ms.toFixed(1)
            } ms): a target that falls ` +
              `behind admits late requests on later refills or windows, so the theory may not apply`
          )
        }
        return within ? 0 : 1
      })
    )
  )

const isMain = process.argv[1] !== undefined && fileURLToPath(import.meta.url) === resolve(process.argv[1])
if (isMain) {
  const argv = process.argv.slice(2)
  if (argv.includes("--help") || argv.includes("-h")) {
    console.log(USAGE)
  } else {
    const options = parseOptions(argv)
    if ("error" in options) {
      console.error(`loadtest: ${options.error}`)
      process.exitCode = 2
    } else {
      run(options).then(
        (code) => {
          process.exitCode = code
        },
        (error: unknown) => {
          console.error(`loadtest: ${error instanceof Error ? error.message : String(error)}`)
          process.exitCode = 2
        }
      )
    }
  }
}
