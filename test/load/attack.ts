/**
 * An open-model, constant-rate HTTP attack, as vegeta's `attack -rate=R -duration=T` does: request i
 * is due at t0 + i/R and is sent then, whether or not earlier requests have returned. Nothing waits
 * for a response before sending the next request, so a slow server cannot slow the attack down (the
 * closed model's coordinated omission); it only grows the number of requests in flight.
 *
 * - Schedule: the i-th due time is computed from t0 (never from the previous send), so lateness
 *   never accumulates. The loop sleeps with `setTimeout` until about 1 ms before the next due time,
 *   then (at rates of at most 250/s) finishes the wait on `setImmediate` turns, which still serve I/O,
 *   so a request leaves within tens of µs of its due time. At higher rates it does not spin: each
 *   timer sends every request that is due, so sends may bunch by about a millisecond. Requests that
 *   fell behind (a blocked event loop) go out at once, as vegeta's do; each records its lag.
 * - Connections: one keep-alive `http.Agent` with no socket limit, so every request in flight has its
 *   own connection and idle ones are reused.
 * - Latency: from just before the request is written to the last byte of the response body.
 * - `attack` only sends to the URL it is given; whether that URL may be attacked is the caller's
 *   decision (see `isLoopback`).
 */
import * as http from "node:http"
import * as https from "node:https"
import { isIP } from "node:net"
import { performance } from "node:perf_hooks"

export interface AttackOptions {
  /** The URL every request goes to. */
  readonly target: string | URL
  /** Requests per second (> 0). */
  readonly rate: number
  /** How long the attack sends, in milliseconds (> 0): `floor(rate · duration)` requests, at least 1. */
  readonly durationMs: number
  /** Default `GET`. */
  readonly method?: string | undefined
  readonly headers?: Readonly<Record<string, string>> | undefined
  /** A request with no complete response after this long fails with `timeout`. Default 30 000 ms (vegeta's). */
  readonly timeoutMs?: number | undefined
  /** Stops scheduling new requests; those in flight still complete. */
  readonly signal?: AbortSignal | undefined
}

/** One request's outcome. Times are milliseconds after t0, the attack's origin on `performance.now()`. */
export interface Hit {
  /** 0, 1, 2, …: the request's place in the schedule. */
  readonly seq: number
  /** When it was due: `seq / rate` seconds after t0. */
  readonly dueMs: number
  /** When it was sent. */
  readonly sentMs: number
  /** From the send to the response's last byte (or to the failure). */
  readonly latencyMs: number
  /** The HTTP status, or 0 when there was no response. */
  readonly status: number
  /** Why there was no response (`status` 0), else undefined. */
  readonly error: string | undefined
  /** Bytes of the response body. */
  readonly bytesIn: number
}

export interface AttackResult {
  readonly target: string
  readonly method: string
  readonly rate: number
  readonly durationMs: number
  /** The requests the schedule holds: `floor(rate · duration)`, at least 1. */
  readonly planned: number
  /** t0 on the wall clock (`Date.now()` when the attack started, epoch milliseconds). */
  readonly startEpochMs: number
  /** Every request sent, in schedule order (fewer than `planned` only if the signal stopped it). */
  readonly hits: ReadonlyArray<Hit>
  /** The most requests in flight at once. */
  readonly maxInFlight: number
}

const SPIN_MS = 1
/** Above this rate the loop does not spin on setImmediate (it would keep a core busy). */
const SPIN_MAX_RATE = 250

/** Runs the attack; resolves when every request sent has completed or failed. */
export const attack = (options: AttackOptions): Promise<AttackResult> => {
  const url = new URL(options.target)
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    return Promise.reject(new Error(`attack: the target must be an http or https URL, got ${url.href}`))
  }
  if (!(options.rate > 0 && Number.isFinite(options.rate))) {
    return Promise.reject(new Error(`attack: the rate must be a positive number, got ${options.rate}`))
  }
  if (!(options.durationMs > 0 && Number.isFinite(options.durationMs))) {
    return Promise.reject(new Error(`attack: the duration must be positive, got ${options.durationMs} ms`))
  }
  const method = options.method ?? "GET"
  const timeoutMs = options.timeoutMs ?? 30_000
  const rate = options.rate
  const planned = Math.max(1, Math.floor((rate * options.durationMs) / 1000 + 1e-9))
  const intervalMs = 1000 / rate
  const spin = rate <= SPIN_MAX_RATE
  const client = url.protocol === "https:" ? https : http
  const agent = url.protocol === "https:"
    ? new https.Agent({ keepAlive: true, maxSockets: Infinity })
    : new http.Agent({ keepAlive: true, maxSockets: Infinity })
  const headers = { ...options.headers }

  return new Promise((resolve) => {
    const hits: Array<Hit> = []
    let inFlight = 0
    let maxInFlight = 0
    let next = 0
    let stopped = false
    const t0 = performance.now()
    // The wall clock, which the server's clock shares on loopback (performance.timeOrigin may drift from it).
    const startEpochMs = Date.now()

    const finish = () => {
      if (inFlight > 0 || !(stopped || next >= planned)) return
      agent.destroy()
      hits.sort((a, b) => a.seq - b.seq)
      resolve({
        target: url.href,
        method,
        rate,
        durationMs: options.durationMs,
        planned,
        startEpochMs,
        hits,
        maxInFlight
      })
    }

    const send = (seq: number) => {
      const dueMs = seq * intervalMs
      const start = performance.now()
      let bytesIn = 0
      let done = false
      inFlight++
      if (inFlight > maxInFlight) maxInFlight = inFlight
      const complete = (status: number, error: string | undefined) => {
        if (done) return
        done = true
        inFlight--
        hits.push({ seq, dueMs, sentMs: start - t0, latencyMs: performance.now() - start, status, error, bytesIn })
        finish()
      }
      const request = client.request(url, { method, headers, agent }, (response) => {
        response.on("data", (chunk: Buffer) => {
          bytesIn += chunk.length
        })
        response.on("end", () => complete(response.statusCode ?? 0, undefined))
        response.on("error", (cause) => complete(0, cause.message))
      })
      request.setTimeout(timeoutMs, () => request.destroy(new Error("timeout")))
      request.on("error", (cause) => complete(0, cause.message))
      request.end()
    }

    const tick = () => {
      if (stopped) return
      // Send everything that is due (more than one only when the loop fell behind, or at high rates).
      while (next < planned && t0 + next * intervalMs <= performance.now()) send(next++)
      if (next >= planned) {
        options.signal?.removeEventListener("abort", onAbort)
        finish()
        return
      }
      const wait = t0 + next * intervalMs - performance.now()
      if (spin && wait <= SPIN_MS) setImmediate(tick)
      else setTimeout(tick, spin ? wait - SPIN_MS : wait)
    }

    const onAbort = () => {
      stopped = true
      finish()
    }
    if (options.signal?.aborted === true) {
      stopped = true
      finish()
      return
    }
    options.signal?.addEventListener("abort", onAbort, { once: true })
    tick()
  })
}

/**
 * Whether a URL's host is a loopback address: `localhost`, an address in 127.0.0.0/8, `::1`, or an
 * IPv4-mapped loopback (`::ffff:127.0.0.1`, which the URL parser writes `::ffff:7f00:1`). Any other
 * name is not resolved and counts as remote.
 */
export const isLoopback = (target: string | URL): boolean => {
  // The URL parser has already normalised IPv4 forms (`127.1`, `0x7f000001`) and IPv6 text.
  const host = new URL(target).hostname.replace(/^\[(.*)\]$/, "$1").toLowerCase().replace(/\.$/, "")
  if (host === "localhost") return true
  if (isIP(host) === 4) return host.split(".")[0] === "127"
  if (isIP(host) !== 6) return false
  if (host === "::1") return true
  // IPv4-mapped: ::ffff:7fxx:xxxx is ::ffff:127.x.x.x.
  return /^::ffff:7f[0-9a-f]{2}:[0-9a-f]{1,4}$/.test(host)
}
