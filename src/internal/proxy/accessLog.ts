/**
 * @internal The proxy's access log: one JSON line per request (`Proxy.AccessLogOptions`), made by
 * ./observe.ts when the response is done. It carries no header value at all, and the query string only
 * when asked (`query: true`): both are where credentials travel (`Authorization`, cookies, `?token=`).
 *
 * Written to stdout by default, the lines of one turn of the event loop in one write (stdout is a
 * synchronous stream for files and pipes on Linux: a write per request would block per request), and what
 * is pending is written when the proxy stops.
 */

/** @internal What a line says. */
export interface Entry {
  readonly method: string
  /** The request target without its query. */
  readonly path: string
  /** The query without `?`, written only when the log is configured to. */
  readonly query: string | undefined
  readonly status: number
  readonly route: string
  readonly decision: string
  readonly deniedBy: ReadonlyArray<string> | undefined
  readonly retryAfter: number | undefined
  readonly wouldDeny: ReadonlyArray<string> | undefined
  readonly upstreamMs: number | undefined
  readonly waitedMs: number | undefined
  readonly totalMs: number
}

/** Milliseconds to the microsecond. */
const ms = (value: number): number => Math.round(value * 1000) / 1000

const str = JSON.stringify

/** A list of names, or `null`. */
const names = (list: ReadonlyArray<string> | undefined): string => list === undefined ? "null" : str(list)

/** The ISO instant of the last millisecond asked: requests that end in the same millisecond share it. */
let lastMillis = -1
let lastIso = ""

/** @internal Now, in ISO 8601 with milliseconds, made once per millisecond. */
export const now = (): string => {
  const millis = Date.now()
  if (millis !== lastMillis) {
    lastMillis = millis
    lastIso = new Date(millis).toISOString()
  }
  return lastIso
}

/**
 * @internal The line of `entry` (with its line feed), `time` the ISO instant it ended: a JSON object, its keys in
 * a fixed order; `query` only when the log writes queries, `wouldDeny` and `waitedMs` only when they apply, the
 * rest always (`null` when none). Every string goes through `JSON.stringify`, so no request can break a line.
 */
export const line = (time: string, entry: Entry, withQuery: boolean): string =>
  `{"time":"${time}","method":${str(entry.method)},"path":${str(entry.path)}${
    withQuery ? `,"query":${entry.query === undefined ? "null" : str(entry.query)}` : ""
  },"status":${entry.status},"route":${str(entry.route)},"decision":${str(entry.decision)},"deniedBy":${
    names(entry.deniedBy)
  },"retryAfter":${entry.retryAfter ?? "null"}${
    entry.wouldDeny === undefined ? "" : `,"wouldDeny":${str(entry.wouldDeny)}`
  },"upstreamMs":${entry.upstreamMs === undefined ? "null" : ms(entry.upstreamMs)}${
    entry.waitedMs === undefined ? "" : `,"waitedMs":${ms(entry.waitedMs)}`
  },"totalMs":${ms(entry.totalMs)}}\n`

/** @internal Where lines go: `write` takes one, `flush` writes what is pending. */
export interface Sink {
  readonly write: (line: string) => void
  readonly flush: () => void
}

/** @internal A sink that hands each line to `write` at once. */
export const direct = (write: (line: string) => void): Sink => ({ write, flush: () => {} })

/** @internal Lines to `out` (stdout by default), batched per turn of the event loop. */
export const batched = (out: { readonly write: (chunk: string) => unknown } = process.stdout): Sink => {
  let pending: Array<string> = []
  let scheduled = false
  const flush = () => {
    scheduled = false
    if (pending.length === 0) return
    const chunk = pending.join("")
    pending = []
    out.write(chunk)
  }
  return {
    write: (text) => {
      pending.push(text)
      if (!scheduled) {
        scheduled = true
        setImmediate(flush)
      }
    },
    flush
  }
}
