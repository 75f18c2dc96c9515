/**
 * Route matching, in process: what choosing a request's route costs `wakuwaku proxy` (the router of
 * src/internal/proxy/routes.ts, as the handler calls it: the query cut off, the method, the `Host` and the path,
 * the path read as the upstream may read it when a route asks for it). No server and no socket.
 *
 * Rows: the default route alone (no routes: what every proxy without a file pays); 20 routes (methods, hosts,
 * exact paths, prefixes, `*` segments) against a mix of requests that take an early route, a late one, or none;
 * and the worst request for them: one that matches none, spelled so that its path is decoded (capitals, `%XX`,
 * `//`), read against every route. Target (issue 28): ≤ 2 µs per request with 20 routes.
 *
 * Run: `npm run build && npx tsx --tsconfig test/bench/tsconfig.json test/bench/routes.ts [--quick]`.
 */
import * as routes from "wakuwaku/internal/proxy/routes"
import { median, stat } from "./measure.js"
import { TWENTY } from "./twentyRoutes.js"

const QUICK = process.argv.includes("--quick")
const ROUNDS = QUICK ? 5 : 21
const CALLS = QUICK ? 200_000 : 1_000_000

interface Route {
  readonly name: string
  readonly match?: routes.Match | undefined
}

/** Requests: [method, Host, target]. */
const MIX: ReadonlyArray<readonly [string, string, string]> = [
  ["POST", "example.com", "/login"],
  ["GET", "example.com", "/health"],
  ["GET", "example.com", "/api/users/42"],
  ["GET", "example.com", "/api/users/42/posts?page=2"],
  ["POST", "example.com", "/api/orders/17"],
  ["GET", "example.com", "/api/orders?status=open"],
  ["GET", "example.com", "/api/search?q=x"],
  ["GET", "example.com", "/static/app.js"],
  ["GET", "example.com", "/api/other"],
  ["GET", "example.com", "/"],
  ["GET", "acme.tenants.example.com", "/api/x"],
  ["GET", "example.com", "/about"]
]

/** The worst: a path decoded and read against every route, which takes none. */
const WORST: ReadonlyArray<readonly [string, string, string]> = [
  ["GET", "example.com:8080", "/Some//%70lace/Else/"]
]

/** The router as the handler calls it: the query cut off first. */
const routerOf = (list: ReadonlyArray<Route>) => {
  const choose = routes.compile<Route>(list, { name: "default" })
  return (method: string, host: string, target: string) => {
    const q = target.indexOf("?")
    return choose(method, host, q < 0 ? target : target.slice(0, q))
  }
}

/** CPU µs per call of `requests` (cycled) through `router`. */
const measure = (router: ReturnType<typeof routerOf>, requests: ReadonlyArray<readonly [string, string, string]>) => {
  let sink = 0
  const before = process.cpuUsage()
  for (let i = 0; i < CALLS; i++) {
    const [method, host, target] = requests[i % requests.length]!
    sink += router(method, host, target).name.length
  }
  const used = process.cpuUsage(before)
  if (sink === 0) throw new Error("nothing routed")
  return (used.user + used.system) / CALLS
}

const rows = {
  "the default route alone (no routes)": () => measure(routerOf([]), MIX),
  "20 routes, a mix of 12 requests (early, late, none)": () => measure(routerOf(TWENTY), MIX),
  "20 routes, the worst request (decoded, matches none)": () => measure(routerOf(TWENTY), WORST)
}

const results = new Map<string, Array<number>>()
for (let round = 0; round <= ROUNDS; round++) {
  for (const [name, row] of Object.entries(rows)) {
    const us = row()
    // The first round warms up.
    if (round > 0) results.set(name, [...(results.get(name) ?? []), us])
  }
}

console.log(`\nRoute matching, CPU µs per request, median over ${ROUNDS} rounds of ${CALLS} (min–max):\n`)
console.log("| row | µs per request |")
console.log("|---|---:|")
for (const [name, us] of results) console.log(`| ${name} | ${stat(us, 3)} |`)
const worst = Math.max(...[...results.values()].map(median))
console.log(
  `\n- route matching with 20 routes ≤ 2 µs per request: ${worst <= 2 ? "MET" : "MISSED"} (${worst.toFixed(3)} µs)`
)
