/**
 * An in-process A/B of the decision, the middleware and the proxy's handler: this tree's sources against
 * another tree's (`--base DIR`, a checkout of the code before a change, whose `src/` is imported), in one
 * process, rounds alternated, CPU per call (`process.cpuUsage`). No server and no socket: what the code
 * itself costs, not lost in the spread of a server's CPU per request.
 *
 * - **decide**: `decision.make(…).decide` on the embedded store, one limiter and two decided as one, an
 *   allow-everything token bucket (10^9, refilled 10^9 a second) and fixed window; and the bucket enforced
 *   with the window as a shadow limit (one group call: compare it with "one limiter" in this tree).
 * - **middleware**: `RateLimit.middleware` on one request (`HttpServerRequest.fromWeb`), allowed; and a
 *   remembered denial (a bucket of 1 refilled once an hour, `rememberDenials`), the 429 rendered.
 * - **proxy 429**: `Proxy.layer`'s request handler on a plain object request and response, a remembered
 *   denial: keyed, recalled, rendered, written (no fiber runs); its response closed, so that a tree with
 *   ./observe.ts counts it (and, in the second row, writes its access log line to a function that drops it).
 *
 * Run: `npx tsx test/bench/verdict.ts --base /path/to/old/tree [--quick]`.
 */
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import { Effect, ManagedRuntime } from "effect"
import type * as Http from "node:http"
import { resolve } from "node:path"
import { median, stat } from "./measure.js"

const QUICK = process.argv.includes("--quick")
/** Many short rounds, alternated, so that both trees see the same load on a shared machine. */
const ROUNDS = QUICK ? 5 : 40
const CALLS = QUICK ? 5_000 : 5_000
const baseArg = process.argv.indexOf("--base")
if (baseArg < 0 || process.argv[baseArg + 1] === undefined) throw new Error("usage: verdict.ts --base DIR")
const BASE = resolve(process.argv[baseArg + 1]!, "src")
const HERE = resolve(import.meta.dirname, "../../src")

/** The modules a tree is measured through (the public Proxy.ts first, as the package loads them: see issue 26 §2). */
const load = async (root: string) => ({
  Proxy: (await import(`${root}/Proxy.js`)) as typeof import("../../src/Proxy.js"),
  Redis: (await import(`${root}/Redis.js`)) as typeof import("../../src/Redis.js"),
  Rate: (await import(`${root}/Rate.js`)) as typeof import("../../src/Rate.js"),
  TokenBucket: (await import(`${root}/TokenBucket.js`)) as typeof import("../../src/TokenBucket.js"),
  FixedWindow: (await import(`${root}/FixedWindow.js`)) as typeof import("../../src/FixedWindow.js"),
  RateLimit: (await import(`${root}/RateLimit.js`)) as typeof import("../../src/RateLimit.js"),
  decision: (await import(`${root}/internal/http/decision.js`)) as typeof import("../../src/internal/http/decision.js"),
  server: (await import(`${root}/internal/proxy/server.js`)) as typeof import("../../src/internal/proxy/server.js"),
  exchange:
    (await import(`${root}/internal/proxy/exchange.js`)) as typeof import("../../src/internal/proxy/exchange.js"),
  clientIp: (await import(`${root}/internal/http/clientIp.js`)) as typeof import("../../src/internal/http/clientIp.js"),
  // A tree before issue 28 has none: its handler takes no observer.
  observe: (await import(`${root}/internal/proxy/observe.js`).catch(() => undefined)) as
    | typeof import("../../src/internal/proxy/observe.js")
    | undefined
})
type Tree = Awaited<ReturnType<typeof load>>

const cpuMicros = () => {
  const { system, user } = process.cpuUsage()
  return user + system
}

const hello = Effect.succeed(HttpServerResponse.text("hello"))

/** The rows of one tree: each a function that runs `n` calls. */
const rowsOf = async (t: Tree, tag: string) => {
  const runtime = ManagedRuntime.make(t.Redis.layerMemory())
  const many = t.TokenBucket.make<string>(`${tag}-b`, 1e9, t.Rate.make(1e9, "1 second"))
  const window = t.FixedWindow.make<string>(`${tag}-w`, 1e9, "1 second")
  const one = t.decision.make({ limiter: many, onStoreFailure: "fail-open" })
  const two = t.decision.make<unknown>({ limiter: [many, window] as const, onStoreFailure: "fail-open" })
  // One enforced limiter and one shadow one (a tree without shadow limits: the two enforced, the closest call).
  const shadowOf = (t.RateLimit as { readonly shadow?: (l: typeof window) => unknown }).shadow
  const shadowed = shadowOf === undefined
    ? two
    : t.decision.make<unknown>({ limiter: [many, shadowOf(window)] as never, onStoreFailure: "fail-open" })
  const request = HttpServerRequest.fromWeb(new Request("http://127.0.0.1/"))
  const allowed = Effect.provideService(
    t.RateLimit.middleware({ limiter: many, onStoreFailure: "fail-open" })(hello),
    HttpServerRequest.HttpServerRequest,
    request
  )
  const scarce = t.TokenBucket.make<string>(`${tag}-s`, 1, t.Rate.make(1, "1 hour"))
  const denied = Effect.provideService(
    t.RateLimit.middleware({ limiter: scarce, key: () => "k", onStoreFailure: "fail-open", rememberDenials: 10 })(
      hello
    ),
    HttpServerRequest.HttpServerRequest,
    request
  )
  // Spend the one token, then the denial that is remembered.
  await runtime.runPromise(denied)
  await runtime.runPromise(denied)

  const proxyLimit = t.decision.make({ limiter: scarce, onStoreFailure: "fail-open", rememberDenials: 10 })
  await runtime.runPromise(proxyLimit.decide("127.0.0.1", 1))
  const handlerOf = async (accessLog: boolean) =>
    t.server.handler({
      forwarding: t.exchange.resolve({ upstream: "http://127.0.0.1:9" }),
      agents: {} as never,
      limit: proxyLimit,
      key: t.clientIp.resolver(),
      maxHeaderLines: 100,
      runtime: (await runtime.runtime()),
      closing: () => false,
      observer: t.observe?.make(accessLog ? { format: "json", write: () => {} } : undefined) as never
    })
  const handle = await handlerOf(false)
  const handleLogged = await handlerOf(true)
  const proxyRequest = {
    rawHeaders: ["Host", "127.0.0.1"],
    httpVersionMajor: 1,
    url: "/",
    method: "GET",
    headers: { host: "127.0.0.1" },
    socket: { remoteAddress: "127.0.0.1" },
    complete: true
  } as unknown as Http.IncomingMessage
  let status = 0
  let onClose: (() => void) | undefined
  const proxyResponse = {
    destroyed: false,
    headersSent: true,
    statusCode: 429,
    req: proxyRequest,
    writeHead: (s: number) => {
      status = s
    },
    end: () => {},
    // The one listener ./observe.ts adds, called as Node calls it once the response is sent.
    on: (_event: string, listener: () => void) => {
      onClose = listener
    }
  } as unknown as Http.ServerResponse
  const closed = () => {
    onClose?.call(proxyResponse)
    onClose = undefined
  }
  // The store's denial, remembered.
  await new Promise<void>((done) => {
    ;(proxyResponse as unknown as { end: () => void }).end = done
    handle(proxyRequest, proxyResponse)
  })
  ;(proxyResponse as unknown as { end: () => void }).end = closed
  handle(proxyRequest, proxyResponse)
  if (status !== 429) throw new Error(`${tag}: the proxy's remembered denial answered ${status}`)

  const loop = (effect: Effect.Effect<unknown, unknown, never>) => async (n: number) => {
    for (let i = 0; i < n; i++) await runtime.runPromise(effect)
  }
  return {
    "decide, one limiter": loop(
      Effect.suspend(() => one.decide("client", 1)) as Effect.Effect<unknown, unknown, never>
    ),
    "decide, two as one": loop(Effect.suspend(() => two.decide("client", 1)) as Effect.Effect<unknown, unknown, never>),
    "decide, one + one shadow (base: two as one)": loop(
      Effect.suspend(() => shadowed.decide("client", 1)) as Effect.Effect<unknown, unknown, never>
    ),
    "middleware, allowed": loop(allowed as Effect.Effect<unknown, unknown, never>),
    "middleware, remembered 429": loop(denied as Effect.Effect<unknown, unknown, never>),
    "proxy handler, remembered 429": (n: number) => {
      for (let i = 0; i < n; i++) handle(proxyRequest, proxyResponse)
      return Promise.resolve()
    },
    "proxy handler, remembered 429, access log on (base: off)": (n: number) => {
      for (let i = 0; i < n; i++) handleLogged(proxyRequest, proxyResponse)
      return Promise.resolve()
    }
  } as Record<string, (n: number) => Promise<void>>
}

const main = async () => {
  const trees = [
    { name: "base", rows: await rowsOf(await load(BASE), "base") },
    { name: "this", rows: await rowsOf(await load(HERE), "this") }
  ]
  const names = Object.keys(trees[0]!.rows)
  const results = new Map<string, Array<number>>()
  for (let round = 0; round <= ROUNDS; round++) {
    for (const name of names) {
      // Alternated, the order turned each round.
      const order = round % 2 === 0 ? trees : [...trees].reverse()
      for (const tree of order) {
        const before = cpuMicros()
        await tree.rows[name]!(CALLS)
        const us = (cpuMicros() - before) / CALLS
        // The first round warms up.
        if (round > 0) results.set(`${name}|${tree.name}`, [...(results.get(`${name}|${tree.name}`) ?? []), us])
      }
    }
  }
  console.log(`\nCPU µs per call, median over ${ROUNDS} rounds of ${CALLS} (min–max):\n`)
  console.log("| row | base | this | this − base |")
  console.log("|---|---:|---:|---:|")
  for (const name of names) {
    const base = results.get(`${name}|base`)!
    const mine = results.get(`${name}|this`)!
    const delta = ((median(mine) - median(base)) / median(base)) * 100
    console.log(`| ${name} | ${stat(base, 2)} | ${stat(mine, 2)} | ${delta >= 0 ? "+" : ""}${delta.toFixed(1)}% |`)
  }
}

await main()
process.exit(0)
