/**
 * `npm run bench` (fifth part): `wakuwaku proxy` against what a TypeScript team would run instead, in one
 * run, every contender in a process of its own in front of the same static upstream, rounds alternated.
 *
 * - **Upstream**: nginx `return 200` (a 13-byte body, keep-alive) when nginx is on PATH or at
 *   /usr/sbin/nginx, else `test/load/upstream.ts` (node:http); the bench says which.
 * - **Contenders**: direct to the upstream; nginx `limit_req` per address + `proxy_pass` (keep-alive), the
 *   native reference (skipped, with a line saying so, when nginx is missing); a bare node:http proxy
 *   (`rawProxy.ts`: keep-alive agent, `pipe`, no limiter) and its floors (forwarding with undici; asking
 *   `TokenBucket.acquire` first, on each store); fastify 5 + @fastify/rate-limit +
 *   @fastify/http-proxy (`fastifyProxy.ts`) with its memory store and with its Redis store; the built
 *   `wakuwaku proxy` (`node dist/bin.js proxy`) on its embedded store and with `--redis`, and on its embedded
 *   store with the admin port on (`--admin-port 0`: its metrics, the library's telemetry metrics among them)
 *   and with the access log on (`--access-log json`, stdout to a file); on its embedded store with `--config` and
 *   `--admin-port 0`, a file of 20 routes (twentyRoutes.ts's, each with an allow-everything limit, every fourth
 *   with an allow-everything shadow limit too), wrk asking for a path that goes through the first 19 and takes
 *   the 20th (1 limit + 1 shadow; checked on /metrics after the warm-up); and `--redis` with `--workers 1` and
 *   `--workers 2` (node:cluster; the embedded store refuses more than one worker), whose CPU is the whole
 *   process tree's (the primary and its workers; wrk runs on the same cores). With `--base DIR` (below), the
 *   embedded and `--redis` rows of another checkout too. Every limit
 *   allows everything (a token bucket of 10^9 refilled 10^9 per second, nginx's 10^6 r/s with a burst), so
 *   every request is counted and forwarded. The Redis contenders share one throwaway redis-server.
 * - **Throughput and CPU**: `wrk -t1 -c32 -d<s>s` per contender per round after one warm-up; CPU per
 *   request is the contender's utime + stime (/proc/<pid>/stat) over the requests wrk completed, and for
 *   the Redis contenders redis-server's too, shown apart.
 * - **p50 added at 1000 req/s**: the open-model attacker of `npm run loadtest` at 1000 req/s, direct, through
 *   the bare proxy, its floor on Redis and `wakuwaku proxy` (both stores); added = the contender's p50 −
 *   direct's.
 * - **Flood**: one address over its limit (a bucket of 1, refilled 1 per hour), `wrk -t1 -c32`, against
 *   `wakuwaku proxy` on each store: 429s per second, against the proxy's forwarding throughput of the same
 *   round, and Redis commands per 429 after the first denial (redis-server's `total_commands_processed`).
 * - **Middleware**: an @effect/platform-node `HttpServer` app answering a fixed text, with and without
 *   `RateLimit.middleware` (embedded store, allow-everything), `wrk -t1 -c32`: CPU per request of each.
 *
 * `--only TEXT[,TEXT]`: only the contenders whose label contains one of the texts (a text that ends with `$`:
 * whose label ends with it, as `'embedded store$'` picks the single rule's row, not those that add to it),
 * beside direct (the p50s, floods, middleware apps and targets are then left out; the lines of the admin port,
 * the access log, the 20 routes, the workers and `--base` stay, for the rows that are there); with `--rounds N`:
 * to compare a few rows with more rounds. A `--base` row is picked with its row of this tree (`--only
 * embedded,redis`: the base rows too).
 *
 * `--base DIR`: issue 24's "within 5% of before". DIR is another checkout of the project with dist/ built
 * (`npm ci && npm run build` there); its CLI (`node DIR/dist/bin.js proxy`) runs as two more contenders,
 * "`wakuwaku proxy` (base), embedded store" and "`wakuwaku proxy --redis` (base)", with the same arguments as
 * this tree's two rows (only flags the CLI had before issue 24; its `--redis` row under another namespace of
 * the same length), in the same rounds; then a table of today / base (throughput, CPU µs per request) and a
 * verdict per store: within 5% (throughput ≥ 0.95×, CPU per request ≤ 1.05×).
 *
 * The targets of issue 28 §7 printed after the table: 20 routes with the admin port ≥ 0.95× the single rule's
 * throughput (embedded store); the access log's cost (CPU µs per request over the embedded row's, throughput
 * ratio); `--workers 2` against `--workers 1` (measured, no target). Delay mode's memory is proxyDelay.ts.
 *
 * `--quick`: one round of 2 s runs. The full run: 3 rounds of 4 s (a few minutes in all), the middleware
 * apps 7 (their differences are a few µs in about 100), in an order that rotates. The CPU other processes
 * used during the measurement is printed at the end.
 */
import { spawn } from "node:child_process"
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { createConnection } from "node:net"
import { availableParallelism, tmpdir } from "node:os"
import { dirname, join, resolve } from "node:path"
import { attack } from "../load/attack.js"
import { metrics } from "../load/report.js"
import { clockTicks, machineTicks, median, otherCpuLine, processTicks, stat, treeTicks } from "./measure.js"
import { freePort, listening, onPath, printed, type Running, start, stop } from "./servers.js"
import { LAST_PATH, TWENTY } from "./twentyRoutes.js"

const QUICK = process.argv.includes("--quick")
const roundsArg = process.argv.indexOf("--rounds")
const ROUNDS = roundsArg >= 0 ? Number(process.argv[roundsArg + 1]) : QUICK ? 1 : 3
/** Rounds of the middleware apps (the first `ROUNDS` of them alternate with the contenders). */
const APP_ROUNDS = QUICK ? 1 : 7
const WRK_SECONDS = QUICK ? 2 : 4
const WRK_CONNECTIONS = 32
const WRK_THREADS = 1
const FIXED_RATE = 1000
const FIXED_MS = QUICK ? 2000 : 3000
const onlyArg = process.argv.indexOf("--only")
/** `--only`'s texts; undefined: every contender, and every part of the bench. */
const ONLY = onlyArg < 0 ? undefined : (process.argv[onlyArg + 1] ?? "").split(",").filter((t) => t !== "")
/** Whether `--only`'s text picks a label: contained in it, or, a text ending with `$`, ending it. */
const picks = (text: string, label: string) =>
  text.endsWith("$") ? label.endsWith(text.slice(0, -1)) : label.includes(text)
const wanted = (label: string) => ONLY === undefined || label.startsWith("direct") || ONLY.some((t) => picks(t, label))
const baseArg = process.argv.indexOf("--base")
/** `--base DIR`: another checkout of the project, with dist/ built, whose `wakuwaku proxy` is measured beside. */
const BASE = baseArg < 0 ? undefined : resolve(process.argv[baseArg + 1] ?? "")
if (BASE !== undefined && !existsSync(join(BASE, "dist/bin.js"))) {
  throw new Error(`--base ${BASE}: no dist/bin.js there (run npm run build in it)`)
}
const NGINX = ["nginx", "/usr/sbin/nginx"].find((binary) => binary.includes("/") ? existsSync(binary) : onPath(binary))

// ---------------------------------------------------------------------------------------------------
// Processes

/** utime + stime of this process's reaped children (wrk), in clock ticks: fields 16 and 17 of /proc/self/stat. */
const childrenTicks = (): number => {
  const stat = readFileSync("/proc/self/stat", "utf8")
  const rest = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
  return Number(rest[13]) + Number(rest[14])
}

// ---------------------------------------------------------------------------------------------------
// wrk

interface WrkResult {
  readonly requestsPerSecond: number
  readonly p50Ms: number
  readonly p99Ms: number
  readonly requests: number
  /** wrk's socket errors (connect, read, write, timeout), summed; 0 when it printed none. */
  readonly socketErrors: number
  /** Responses that were not 2xx or 3xx. */
  readonly non2xx: number
}

const UNIT_MS: Readonly<Record<string, number>> = { us: 0.001, ms: 1, s: 1000, m: 60_000, h: 3_600_000 }

/** A wrk latency (`812.00us`, `1.44ms`, `2.01s`) in milliseconds. */
const wrkLatency = (text: string): number => {
  const m = /^([\d.]+)(us|ms|s|m|h)$/.exec(text)
  return m === null ? Number.NaN : Number(m[1]) * (UNIT_MS[m[2] ?? ""] ?? Number.NaN)
}

/** The figures of `wrk --latency`'s output; throws on non-2xx responses (unless allowed) or output it cannot read. */
export const parseWrk = (output: string, allowNon2xx = false): WrkResult => {
  const percentile = (p: string) => wrkLatency(new RegExp(`^\\s+${p}%\\s+(\\S+)\\s*$`, "m").exec(output)?.[1] ?? "")
  const errors = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(output)
  const result = {
    requestsPerSecond: Number(/Requests\/sec:\s+([\d.]+)/.exec(output)?.[1] ?? Number.NaN),
    p50Ms: percentile("50"),
    p99Ms: percentile("99"),
    requests: Number(/(\d+) requests in /.exec(output)?.[1] ?? Number.NaN),
    socketErrors: errors === null ? 0 : errors.slice(1).reduce((sum, n) => sum + Number(n), 0),
    non2xx: Number(/Non-2xx or 3xx responses: (\d+)/.exec(output)?.[1] ?? 0)
  }
  if ((result.non2xx > 0 && !allowNon2xx) || Object.values(result).some(Number.isNaN)) {
    throw new Error(`wrk: not every response was a 2xx, or its output is unreadable:\n${output}`)
  }
  return result
}

const wrk = (url: string, seconds: number, allowNon2xx = false): Promise<WrkResult> =>
  new Promise((resolve, reject) => {
    // --timeout 10s: wrk's default (2 s) drops slower responses from its latencies instead of counting them.
    const args = ["-c", String(WRK_CONNECTIONS), "-t", String(WRK_THREADS), "-d", `${seconds}s`, "--timeout", "10s"]
    args.push("--latency", url)
    const child = spawn("wrk", args, { stdio: ["ignore", "pipe", "pipe"] })
    let output = ""
    child.stdout.on("data", (chunk: Buffer) => (output += chunk.toString()))
    child.stderr.on("data", (chunk: Buffer) => (output += chunk.toString()))
    child.on("error", reject)
    child.on("exit", (code) => {
      if (code !== 0) return reject(new Error(`wrk exited with ${code}: ${output}`))
      try {
        resolve(parseWrk(output, allowNon2xx))
      } catch (error) {
        reject(error instanceof Error ? error : new Error(String(error)))
      }
    })
  })

// ---------------------------------------------------------------------------------------------------
// nginx and redis-server

/** An nginx in the foreground, one process (no master), with its files in a temporary directory. */
const startNginx = (binary: string, server: string): Running => {
  const dir = mkdtempSync(join(tmpdir(), "wakuwaku-nginx-"))
  const conf = `worker_processes 1;
daemon off;
master_process off;
pid ${dir}/nginx.pid;
error_log stderr warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path ${dir}/body;
  proxy_temp_path ${dir}/proxy;
  fastcgi_temp_path ${dir}/fastcgi;
  uwsgi_temp_path ${dir}/uwsgi;
  scgi_temp_path ${dir}/scgi;
  keepalive_requests 1000000;
  ${server}
}
`
  writeFileSync(join(dir, "nginx.conf"), conf)
  return start(binary, ["-p", dir, "-c", join(dir, "nginx.conf"), "-e", "stderr"])
}

/** A line of `redis-cli INFO` read over a raw connection. */
const redisInfo = (port: number, field: string): Promise<number> =>
  new Promise((resolve, reject) => {
    const socket = createConnection(port, "127.0.0.1", () => socket.write("INFO stats\r\n"))
    let data = ""
    socket.on("data", (chunk: Buffer) => {
      data += chunk.toString()
      const match = new RegExp(`${field}:(\\d+)`).exec(data)
      if (match?.[1] !== undefined) {
        socket.destroy()
        resolve(Number(match[1]))
      }
    })
    socket.on("error", reject)
  })

// ---------------------------------------------------------------------------------------------------

interface Contender {
  readonly label: string
  readonly url: string
  readonly running: Running | undefined
  /** Whether its store is the shared redis-server, whose CPU is then reported with it. */
  readonly redis: boolean
  /** Whether its CPU is its whole process tree's (`--workers 2`: the primary and its workers), not one process's. */
  readonly tree: boolean
  readonly rounds: Array<{ readonly rps: number; readonly cpuUs: number; readonly redisCpuUs: number }>
}

interface Flood {
  readonly label: string
  readonly url: string
  readonly running: Running
  readonly redis: boolean
  readonly rounds: Array<{ readonly rps429: number; readonly commandsPer429: number; readonly cpuUs: number }>
}

const wrkRound = async (c: Contender, redisPid: number, ticksPerSecond: number) => {
  const ticks = (pid: number) => c.tree ? treeTicks(pid) : processTicks(pid)
  const before = c.running === undefined ? 0 : ticks(c.running.pid)
  const redisBefore = processTicks(redisPid)
  const w = await wrk(c.url, WRK_SECONDS)
  const perRequest = (ticks: number) => (ticks / ticksPerSecond) * 1e6 / w.requests
  const sample = {
    rps: w.requestsPerSecond,
    cpuUs: c.running === undefined ? Number.NaN : perRequest(ticks(c.running.pid) - before),
    redisCpuUs: c.redis ? perRequest(processTicks(redisPid) - redisBefore) : Number.NaN
  }
  c.rounds.push(sample)
  return sample
}

/** A limit of the 20-route file that allows everything, as `ALLOW` does on the command line. */
const allowAll = (name: string) => ({ name, algorithm: "token-bucket", capacity: 1e9, refill: "1000000000/1s" })

/**
 * The 20-route row's file: twentyRoutes.ts's routes, each with its own allow-everything limit, every fourth (the
 * 20th among them) with an allow-everything shadow limit too; denials remembered as `ALLOW`'s rows do.
 */
const twentyRoutesFile = () => ({
  rememberDenials: 10000,
  routes: TWENTY.map((route, i) => ({
    name: route.name,
    match: route.match,
    limits: [allowAll(route.name)],
    ...((i + 1) % 4 === 0 ? { shadow: [allowAll(`${route.name}-shadow`)] } : {})
  }))
})

/** The routes `/metrics` counted requests under (the admin URL read from the banner): to check which one wrk takes. */
const countedRoutes = async (running: Running): Promise<ReadonlyArray<string>> => {
  const url = /admin:\s+(http:\/\/\S+\/metrics)/.exec(running.output())?.[1]
  if (url === undefined) throw new Error(`no admin URL in the banner: ${running.output()}`)
  const text = await (await fetch(url)).text()
  const counted = [...text.matchAll(/^wakuwaku_proxy_requests_total\{[^}]*route="([^"]+)"[^}]*\} (\d+)/gm)]
  return [...new Set(counted.filter((m) => Number(m[2]) > 0).map((m) => m[1]!))]
}

/**
 * Issue 24's "within 5% of before": each store's row of this tree against the same row of `--base DIR`'s, a
 * table of today / base, and a verdict line per store.
 */
const baseLines = (
  pairs: ReadonlyArray<readonly [Contender, Contender | undefined, string]>,
  present: (...cs: ReadonlyArray<Contender>) => boolean
) => {
  const measured = pairs.filter((pair): pair is readonly [Contender, Contender, string] =>
    pair[1] !== undefined && present(pair[0], pair[1])
  )
  if (measured.length === 0) return
  const rps = (c: Contender) => median(c.rounds.map((r) => r.rps))
  const cpu = (c: Contender) => median(c.rounds.map((r) => r.cpuUs))
  const redisCpu = (c: Contender) => median(c.rounds.map((r) => r.redisCpuUs))
  const fmt = (x: number, digits: number) => digits === 0 ? Math.round(x).toLocaleString("en-US") : x.toFixed(digits)
  const ratio = (today: number, before: number, digits: number) =>
    `${fmt(today, digits)} / ${fmt(before, digits)} = ${(today / before).toFixed(3)}×`
  console.log(`\ntoday / base (--base ${BASE}), medians of this run:\n`)
  console.log("| store | req/s, today / base | CPU µs/request, today / base |")
  console.log("|---|---:|---:|")
  for (const [today, before, store] of measured) {
    const redis = today.redis ? ` (redis-server ${ratio(redisCpu(today), redisCpu(before), 1)})` : ""
    console.log(
      `| ${store} | ${ratio(rps(today), rps(before), 0)} | ${ratio(cpu(today), cpu(before), 1)}${redis} |`
    )
  }
  console.log("")
  for (const [today, before, store] of measured) {
    const throughput = rps(today) / rps(before)
    const perRequest = cpu(today) / cpu(before)
    const ok = throughput >= 0.95 && perRequest <= 1.05
    console.log(
      `- ${store}: within 5% of base (throughput ≥ 0.95×, CPU per request ≤ 1.05×): ${ok ? "MET" : "MISSED"} ` +
        `(${throughput.toFixed(3)}×, ${perRequest.toFixed(3)}×)`
    )
  }
}

const main = async (): Promise<void> => {
  const ticksPerSecond = clockTicks()
  const servers: Array<Running> = []
  const port = async () => await freePort()
  try {
    // The upstream.
    const upstreamPort = await port()
    const upstream = NGINX === undefined
      ? start(process.execPath, ["--import", "tsx", "test/load/upstream.ts", String(upstreamPort)])
      : startNginx(
        NGINX,
        `server { listen 127.0.0.1:${upstreamPort}; keepalive_timeout 60s; location / { default_type text/plain; return 200 "hello, world\\n"; } }`
      )
    servers.push(upstream)
    await listening(upstream, upstreamPort, "the upstream")
    const upstreamUrl = `http://127.0.0.1:${upstreamPort}`

    // The store the Redis contenders share.
    const redisPort = await port()
    const redis = start("redis-server", [
      "--port",
      String(redisPort),
      "--bind",
      "127.0.0.1",
      "--save",
      "",
      "--appendonly",
      "no",
      "--logfile",
      ""
    ])
    servers.push(redis)
    await listening(redis, redisPort, "redis-server")
    const redisUrl = `redis://127.0.0.1:${redisPort}`

    const contenders: Array<Contender> = []
    const add = async (
      label: string,
      command: string | undefined,
      args: (port: number) => ReadonlyArray<string>,
      options: {
        readonly redis?: boolean
        readonly env?: NodeJS.ProcessEnv
        readonly stdoutTo?: string
        /** The path wrk asks for (default `/`). */
        readonly path?: string
        /** Its CPU is its process tree's, and it is ready once it printed its banner (`--workers`). */
        readonly tree?: boolean
        /** The row it is measured against (a base row's row of this tree): wanted when that one is. */
        readonly twin?: Contender
      } = {}
    ) => {
      const want = wanted(label) || (options.twin !== undefined && wanted(options.twin.label))
      const p = await port()
      const running = command === undefined || !want
        ? undefined
        : start(command, args(p), options.env, options.stdoutTo)
      if (running !== undefined) {
        servers.push(running)
        await listening(running, p, label)
        // The primary accepts once one worker listens; its banner says they all do.
        if (options.tree === true) await printed(running, "listening on", label)
      }
      const c: Contender = {
        label,
        url: `http://127.0.0.1:${command === undefined ? upstreamPort : p}${options.path ?? "/"}`,
        running,
        redis: options.redis ?? false,
        tree: options.tree ?? false,
        rounds: []
      }
      if (want) contenders.push(c)
      return c
    }
    const tsx = (script: string, ...rest: ReadonlyArray<string>) => (p: number) => [
      "--import",
      "tsx",
      script,
      String(p),
      ...rest
    ]
    const wakuwaku = (extra: ReadonlyArray<string>, bin = "dist/bin.js") => (p: number) => [
      bin,
      "proxy",
      "--upstream",
      upstreamUrl,
      "--host",
      "127.0.0.1",
      "--port",
      String(p),
      ...extra
    ]
    const ALLOW = ["--capacity", "1000000000", "--refill", "1000000000/1s", "--remember-denials", "10000"]
    const noRedisEnv = { ...process.env, REDIS_URL: "" }

    const direct = await add("direct to the upstream", undefined, () => [])
    let nginx: Contender | undefined
    if (!wanted("nginx")) {
      // Left out by --only.
    } else if (NGINX === undefined) {
      console.log("nginx: not on PATH nor at /usr/sbin/nginx: its row is skipped")
    } else {
      const p = await port()
      const running = startNginx(
        NGINX,
        `limit_req_zone $binary_remote_addr zone=per_ip:10m rate=1000000r/s;
  upstream up { server 127.0.0.1:${upstreamPort}; keepalive 64; }
  server {
    listen 127.0.0.1:${p};
    keepalive_timeout 60s;
    location / {
      limit_req zone=per_ip burst=100000 nodelay;
      proxy_pass http://up;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }
  }`
      )
      servers.push(running)
      await listening(running, p, "nginx")
      nginx = {
        label: "nginx `limit_req` + `proxy_pass` (keep-alive)",
        url: `http://127.0.0.1:${p}/`,
        running,
        redis: false,
        tree: false,
        rounds: []
      }
      contenders.push(nginx)
    }
    const bare = await add(
      "bare node:http proxy (keep-alive agent, `pipe`, no limiter)",
      process.execPath,
      tsx("test/bench/rawProxy.ts", upstreamUrl)
    )
    const bareLimited = await add(
      "floor: the bare proxy asking the limiter first (TokenBucket.acquire on a prepared runtime, nothing else)",
      process.execPath,
      tsx("test/bench/rawProxy.ts", upstreamUrl, "limited")
    )
    const bareUndici = await add(
      "floor: the bare proxy forwarding with undici (a keep-alive Pool, each chunk written straight to the client)",
      process.execPath,
      tsx("test/bench/rawProxy.ts", upstreamUrl, "undici")
    )
    const bareLimitedRedis = await add(
      "floor: the bare proxy asking the limiter first, on Redis",
      process.execPath,
      tsx("test/bench/rawProxy.ts", upstreamUrl, "limited", redisUrl),
      { redis: true }
    )
    const fastify = await add(
      "fastify + @fastify/rate-limit (memory) + @fastify/http-proxy",
      process.execPath,
      tsx("test/bench/fastifyProxy.ts", upstreamUrl)
    )
    const fastifyRedis = await add(
      "the same with @fastify/rate-limit's Redis store",
      process.execPath,
      tsx("test/bench/fastifyProxy.ts", upstreamUrl, redisUrl),
      { redis: true }
    )
    const embedded = await add("`wakuwaku proxy`, embedded store", process.execPath, wakuwaku(ALLOW), {
      env: noRedisEnv
    })
    const withRedis = await add(
      "`wakuwaku proxy --redis`",
      process.execPath,
      wakuwaku([...ALLOW, "--redis", redisUrl, "--on-store-failure", "fail-closed"]),
      { redis: true }
    )
    const withAdmin = await add(
      "`wakuwaku proxy`, embedded store, `--admin-port 0` (metrics on)",
      process.execPath,
      wakuwaku([...ALLOW, "--admin-port", "0"]),
      { env: noRedisEnv }
    )
    const accessLogFile = join(mkdtempSync(join(tmpdir(), "wakuwaku-log-")), "access.log")
    const withAccessLog = await add(
      "`wakuwaku proxy`, embedded store, `--access-log json` (stdout to a file)",
      process.execPath,
      wakuwaku([...ALLOW, "--access-log", "json"]),
      { env: noRedisEnv, stdoutTo: accessLogFile }
    )

    // Issue 28: 20 routes from a file, shadow limits on some, the admin port on; wrk's request takes the 20th.
    const configDir = mkdtempSync(join(tmpdir(), "wakuwaku-config-"))
    const configFile = join(configDir, "twenty.json")
    writeFileSync(configFile, JSON.stringify(twentyRoutesFile(), null, 2))
    const twenty = await add(
      "`wakuwaku proxy`, embedded store, `--config`: 20 routes (5 with a shadow limit), the request taking the 20th " +
        "(1 limit + 1 shadow), `--admin-port 0`",
      process.execPath,
      wakuwaku(["--config", configFile, "--admin-port", "0"]),
      { env: noRedisEnv, path: LAST_PATH }
    )
    // Issue 28: --workers 2 beside 1, on Redis (the embedded store refuses more than one), CPU of the process tree.
    const withWorkers = (n: number) =>
      add(
        `\`wakuwaku proxy --redis --workers ${n}\``,
        process.execPath,
        wakuwaku([...ALLOW, "--redis", redisUrl, "--on-store-failure", "fail-closed", "--workers", String(n)]),
        { redis: true, tree: true }
      )
    const workers1 = await withWorkers(1)
    const workers2 = await withWorkers(2)
    // Issue 24: the same two rows as the CLI was before (--base DIR), measured in the same rounds. Its --redis row
    // keys another namespace of the same length: the two trees' keys may not hold the same layout.
    const base = BASE === undefined ? [] : [
      await add(
        "`wakuwaku proxy` (base), embedded store",
        process.execPath,
        wakuwaku(ALLOW, join(BASE, "dist/bin.js")),
        { env: noRedisEnv, twin: embedded }
      ),
      await add(
        "`wakuwaku proxy --redis` (base)",
        process.execPath,
        wakuwaku(
          [...ALLOW, "--redis", redisUrl, "--on-store-failure", "fail-closed", "--namespace", "based"],
          join(BASE, "dist/bin.js")
        ),
        { redis: true, twin: withRedis }
      )
    ]

    // The middleware's two apps.
    const plainApp = await add(
      "@effect/platform app, no middleware",
      process.execPath,
      tsx("test/bench/platformApp.ts", "plain")
    )
    const acquireApp = await add(
      "floor: the same app running TokenBucket.acquire itself",
      process.execPath,
      tsx("test/bench/platformApp.ts", "acquire")
    )
    const limitedApp = await add(
      "the same app with `RateLimit.middleware` (embedded store)",
      process.execPath,
      tsx("test/bench/platformApp.ts", "limited")
    )
    const apps = ONLY === undefined ? [plainApp, acquireApp, limitedApp] : []
    // The apps have rounds of their own (under --only, none).
    for (const app of [plainApp, acquireApp, limitedApp]) {
      if (contenders.includes(app)) contenders.splice(contenders.indexOf(app), 1)
    }

    // The floods: one address over its limit.
    const DENY = ["--capacity", "1", "--refill", "1/1h", "--remember-denials", "10000"]
    const floods: Array<Flood> = []
    for (
      const [label, extra, onRedis] of ONLY !== undefined ? [] : [
        ["`wakuwaku proxy`, embedded store", DENY, false],
        ["`wakuwaku proxy --redis`", [
          ...DENY,
          "--redis",
          redisUrl,
          "--on-store-failure",
          "fail-closed",
          "--namespace",
          "flood"
        ], true]
      ] as const
    ) {
      const p = await port()
      const running = start(process.execPath, wakuwaku(extra)(p), noRedisEnv)
      servers.push(running)
      await listening(running, p, label)
      floods.push({ label, url: `http://127.0.0.1:${p}/`, running, redis: onRedis, rounds: [] })
    }

    console.log(
      `node ${process.version}, ${availableParallelism()} cores, CLK_TCK ${ticksPerSecond}; upstream: ${
        NGINX === undefined ? "node:http (test/load/upstream.ts)" : `nginx return 200 (${NGINX})`
      } at ${upstreamUrl}; redis-server at ${redisUrl}`
    )
    console.log(
      `wrk -t${WRK_THREADS} -c${WRK_CONNECTIONS} -d${WRK_SECONDS}s per contender per round, ${ROUNDS} rounds after one ` +
        `warm-up (the middleware apps ${APP_ROUNDS}), alternating; ${FIXED_RATE} req/s for ${
          FIXED_MS / 1000
        } s (open model, this process)\n`
    )

    const rated = ONLY === undefined ? [direct, bare, bareLimitedRedis, embedded, withRedis] : []
    const p50s = new Map<Contender, Array<number>>(rated.map((c) => [c, []]))
    // Warm-up, untimed.
    for (const c of [...contenders, ...apps]) await wrk(c.url, 2)
    for (const c of rated) await attack({ target: c.url, rate: FIXED_RATE, durationMs: 1000 })
    for (const f of floods) {
      await wrk(f.url, 1, true)
    }
    if (twenty.running !== undefined) {
      const taken = await countedRoutes(twenty.running)
      if (taken.join() !== TWENTY[19]!.name) {
        throw new Error(`the 20-route row's requests took the routes ${taken.join(", ")}, not the 20th alone`)
      }
    }

    const serverTicks = () => servers.reduce((sum, s) => sum + treeTicks(s.pid), 0)
    const machineBefore = machineTicks()
    const selfBefore = process.cpuUsage()
    const childrenBefore = childrenTicks()
    const serversBefore = serverTicks()

    for (let round = 1; round <= Math.max(ROUNDS, APP_ROUNDS); round++) {
      // The apps' differences are a few µs in about 100: more rounds, in an order that rotates.
      const shift = (round - 1) % apps.length
      const rotated = [...apps.slice(shift), ...apps.slice(0, shift)]
      // Under --only, a few rows compared: their order reversed every other round.
      const ordered = ONLY !== undefined && round % 2 === 0 ? [...contenders].reverse() : contenders
      for (const c of round <= ROUNDS ? [...ordered, ...rotated] : rotated) {
        const s = await wrkRound(c, redis.pid, ticksPerSecond)
        console.log(
          `round ${round} ${c.label}: ${Math.round(s.rps)} req/s` +
            (Number.isNaN(s.cpuUs) ? "" : `, CPU ${s.cpuUs.toFixed(1)} µs/request`) +
            (Number.isNaN(s.redisCpuUs) ? "" : ` (+ redis-server ${s.redisCpuUs.toFixed(1)})`)
        )
      }
      if (round > ROUNDS) continue
      for (const c of rated) {
        const result = await attack({ target: c.url, rate: FIXED_RATE, durationMs: FIXED_MS })
        const m = metrics(result)
        const failed = result.hits.filter((h) => h.status !== 200).length
        if (failed > 0) throw new Error(`${c.label}: ${failed} requests at ${FIXED_RATE}/s did not get a 200`)
        p50s.get(c)?.push(m.latencies.p50Ms)
        console.log(`round ${round} at ${FIXED_RATE} req/s ${c.label}: p50 ${m.latencies.p50Ms.toFixed(3)} ms`)
      }
      for (const f of floods) {
        const commandsBefore = await redisInfo(redisPort, "total_commands_processed")
        const before = processTicks(f.running.pid)
        const w = await wrk(f.url, WRK_SECONDS, true)
        const cpu = (processTicks(f.running.pid) - before) / ticksPerSecond * 1e6 / w.requests
        // The INFO that reads the count is itself one command.
        const commands = (await redisInfo(redisPort, "total_commands_processed")) - commandsBefore - 1
        const sample = {
          rps429: w.non2xx / (w.requests / w.requestsPerSecond),
          commandsPer429: commands / w.non2xx,
          cpuUs: cpu
        }
        if (w.non2xx !== w.requests) {
          throw new Error(`${f.label}: ${w.requests - w.non2xx} flood requests were not refused`)
        }
        f.rounds.push(sample)
        console.log(
          `round ${round} flood ${f.label}: ${Math.round(sample.rps429)} 429s/s, CPU ${cpu.toFixed(1)} µs/429` +
            (f.redis ? `, ${sample.commandsPer429.toFixed(4)} Redis commands per 429` : "")
        )
      }
    }

    const self = process.cpuUsage(selfBefore)
    const known = (serverTicks() - serversBefore) + (childrenTicks() - childrenBefore)
    const otherSeconds = (machineTicks() - machineBefore - known) / ticksPerSecond - (self.user + self.system) / 1e6
    console.log("\n" + otherCpuLine(otherSeconds))

    const rps = (c: Contender) => median(c.rounds.map((r) => r.rps))
    const cpu = (c: Contender) => median(c.rounds.map((r) => r.cpuUs))
    const p50 = (c: Contender) => median(p50s.get(c) ?? [])
    console.log("\nmedian over rounds (min–max):\n")
    console.log("| contender | req/s | CPU µs/request | p50 added at 1000 req/s, ms |")
    console.log("|---|---:|---:|---:|")
    for (const c of contenders) {
      const redisCpu = c.redis ? ` + ${stat(c.rounds.map((r) => r.redisCpuUs), 1)} redis-server` : ""
      const added = p50s.has(c) && c !== direct ? (p50(c) - p50(direct)).toFixed(3) : "—"
      console.log(
        `| ${c.label} | ${stat(c.rounds.map((r) => r.rps), 0, true)} | ${
          c.running === undefined ? "—" : stat(c.rounds.map((r) => r.cpuUs), 1) + redisCpu
        } | ${added} |`
      )
    }
    // Not there when --only left its row out.
    const logged = existsSync(accessLogFile) ? readFileSync(accessLogFile) : Buffer.alloc(0)
    rmSync(dirname(accessLogFile), { recursive: true, force: true })
    rmSync(configDir, { recursive: true, force: true })
    const verdict = (ok: boolean) => ok ? "MET" : "MISSED"
    const present = (...cs: ReadonlyArray<Contender>) => cs.every((c) => contenders.includes(c))
    for (const [c, what] of [[withAdmin, "the admin port (metrics on)"], [withAccessLog, "the access log"]] as const) {
      if (!contenders.includes(c) || !contenders.includes(embedded)) continue
      const added = cpu(c) - cpu(embedded)
      console.log(
        `\n${what}: ${added.toFixed(1)} µs of CPU per request over the embedded store's (${
          ((added / cpu(embedded)) * 100).toFixed(1)
        }%), throughput ${(rps(c) / rps(embedded)).toFixed(3)}×`
      )
    }
    if (contenders.includes(withAccessLog)) {
      const lines = logged.toString().split("\n").length - 1
      console.log(`the access log: ${lines} lines, ${(logged.length / Math.max(1, lines)).toFixed(0)} bytes a line`)
    }
    if (present(twenty, embedded)) {
      const ratio = rps(twenty) / rps(embedded)
      console.log(
        `\n20 routes from a file, the request taking the 20th (1 limit + 1 shadow), with the admin port, against the ` +
          `single rule (embedded store): throughput ${ratio.toFixed(3)}× (≥ 0.95×): ${verdict(ratio >= 0.95)}; CPU ${
            (cpu(twenty) - cpu(embedded)).toFixed(1)
          } µs per request more`
      )
    }
    if (present(workers1, workers2)) {
      const redisCpu = (c: Contender) => median(c.rounds.map((r) => r.redisCpuUs)).toFixed(1)
      console.log(
        `\n--workers 2 / --workers 1 (both --redis): throughput ${(rps(workers2) / rps(workers1)).toFixed(3)}×, ` +
          `CPU per request ${(cpu(workers2) / cpu(workers1)).toFixed(3)}× (each its whole process tree's; ` +
          `redis-server ${redisCpu(workers2)} against ${redisCpu(workers1)} µs); no target: wrk runs on the same ` +
          `${availableParallelism()} cores as the workers`
      )
    }
    baseLines(
      [[embedded, base[0], "embedded store"], [withRedis, base[1], "`--redis`"]],
      present
    )
    if (ONLY !== undefined) return
    console.log("\n| flood from one address over its limit | 429s/s | CPU µs per 429 | Redis commands per 429 |")
    console.log("|---|---:|---:|---:|")
    for (const f of floods) {
      console.log(
        `| ${f.label} | ${stat(f.rounds.map((r) => r.rps429), 0, true)} | ${stat(f.rounds.map((r) => r.cpuUs), 1)} | ${
          f.redis ? stat(f.rounds.map((r) => r.commandsPer429), 4) : "—"
        } |`
      )
    }
    console.log("\n| middleware app | req/s | CPU µs/request |")
    console.log("|---|---:|---:|")
    for (const c of apps) {
      console.log(
        `| ${c.label} | ${stat(c.rounds.map((r) => r.rps), 0, true)} | ${stat(c.rounds.map((r) => r.cpuUs), 1)} |`
      )
    }

    console.log("\ntargets (ratios of medians within this run):")
    const t1 = rps(embedded) / rps(fastify)
    console.log(`- throughput, embedded store / fastify memory store = ${t1.toFixed(2)}× (≥ 1.0×): ${verdict(t1 >= 1)}`)
    const t2 = rps(withRedis) / rps(fastifyRedis)
    console.log(`- throughput, --redis / fastify Redis store = ${t2.toFixed(2)}× (≥ 1.0×): ${verdict(t2 >= 1)}`)
    const t3 = cpu(embedded) / cpu(bare)
    console.log(`- proxy CPU per request, embedded / bare proxy = ${t3.toFixed(2)}× (≤ 1.25×): ${verdict(t3 <= 1.25)}`)
    console.log(
      `  (floor: the bare proxy asking the limiter = ${(cpu(bareLimited) / cpu(bare)).toFixed(2)}× the bare proxy)`
    )
    console.log(
      `  (floor: the bare proxy forwarding with undici = ${(cpu(bareUndici) / cpu(bare)).toFixed(2)}× the bare proxy)`
    )
    const t3r = cpu(withRedis) / cpu(bare)
    console.log(`  (--redis / bare proxy = ${t3r.toFixed(2)}×, the proxy's own CPU, redis-server's apart)`)
    const bareAdded = p50(bare) - p50(direct)
    for (const c of [embedded, withRedis]) {
      const added = p50(c) - p50(direct)
      console.log(
        `- p50 added at ${FIXED_RATE} req/s, ${c.label} = ${added.toFixed(3)} ms; bare proxy ${
          bareAdded.toFixed(3)
        } ms ` +
          `(≤ bare + 0.1 ms): ${verdict(added <= bareAdded + 0.1)}`
      )
    }
    console.log(
      `  (floor: the bare proxy asking the limiter on Redis adds ${
        (p50(bareLimitedRedis) - p50(direct)).toFixed(3)
      } ms)`
    )
    for (const f of floods) {
      const ratio = median(f.rounds.map((r) => r.rps429)) / rps(f.redis ? withRedis : embedded)
      console.log(
        `- flood, ${f.label}: 429s/s / forwarding req/s = ${ratio.toFixed(2)}× (≥ 2×): ${verdict(ratio >= 2)}`
      )
      if (f.redis) {
        const perDenial = median(f.rounds.map((r) => r.commandsPer429))
        console.log(`  Redis commands per 429 = ${perDenial.toFixed(4)} (≤ 0.05): ${verdict(perDenial <= 0.05)}`)
      }
    }
    const mw = cpu(limitedApp) - cpu(plainApp)
    console.log(`- RateLimit.middleware adds ${mw.toFixed(1)} µs CPU per request (≤ 15 µs): ${verdict(mw <= 15)}`)
    console.log(
      `  (floor: TokenBucket.acquire alone in the app adds ${(cpu(acquireApp) - cpu(plainApp)).toFixed(1)} µs)`
    )
    if (nginx !== undefined) {
      console.log(
        `- reference: nginx ${(rps(nginx) / rps(embedded)).toFixed(2)}× wakuwaku's throughput, ` +
          `${(cpu(embedded) / cpu(nginx)).toFixed(2)}× less CPU per request`
      )
    }
  } finally {
    await Promise.all(servers.map(stop))
  }
}

main().catch((error: unknown) => {
  console.error(error)
  process.exitCode = 1
})
