/**
 * `npm run bench` (fourth part): what `wakuwaku proxy` costs in front of an upstream, direct against
 * proxied, in the same run, rounds alternated A B C A B C.
 *
 * - Upstream: `test/load/upstream.ts` (node:http on loopback, `200` with a 13-byte body, keep-alive) in
 *   a process of its own.
 * - Proxy: the built CLI, `node dist/bin.js proxy`, in a process of its own, in front of that upstream,
 *   with an allow-everything limit (a token bucket of capacity 10^9 refilled 10^9 per second, on the
 *   embedded memory store, keyed by client IP): every request is limited, and every one is allowed.
 * - Max throughput: `wrk -c 64 -t 2 -d 10s --timeout 10s --latency`, direct to the upstream and
 *   through the proxy: requests per second, and latency p50 and p99 from wrk's distribution (its
 *   `--timeout` raised from 2 s, so that slow responses count in the latencies instead of being dropped).
 * - Same fixed rate: the open-model attacker of `npm run loadtest` (`test/load/attack.ts`) from this
 *   process (wrk2 is not available), direct and proxied, at 100 and at 1000 requests per second for
 *   5 s each: p50 and p99 over 500 and 5000 requests. An open model keeps sending when the server
 *   falls behind, so a rate above the proxy's capacity shows as queueing in its latencies.
 * - Reference (no target): a bare node:http reverse proxy (`test/bench/rawProxy.ts`: no Effect, no
 *   limiter, no header rewriting) in a process of its own, measured the same way: what forwarding alone
 *   costs in Node on this machine.
 *
 * One untimed warm-up of each kind per path, then 5 timed rounds of each; medians over rounds with
 * min–max. Every response must be a 200 and every request sent on schedule, or the benchmark stops.
 * CPU per request (wrk rounds) is utime + stime of the upstream and the proxy from /proc/<pid>/stat; the
 * CPU other processes used meanwhile is /proc/stat minus the three servers, this process and its
 * reaped children (wrk).
 */
import { type ChildProcess, spawn, type SpawnOptionsWithStdioTuple } from "node:child_process"
import { existsSync, readFileSync } from "node:fs"
import { connect, createServer } from "node:net"
import { availableParallelism } from "node:os"
import { delimiter, join } from "node:path"
import { fileURLToPath } from "node:url"
import { attack } from "../load/attack.js"
import { metrics } from "../load/report.js"
import { clockTicks, machineTicks, median, otherCpuLine, processTicks, stat } from "./measure.js"

/** `--quick` (development): one timed round of shorter runs. */
const QUICK = process.argv.includes("--quick")
const ROUNDS = QUICK ? 1 : 5
const WRK_SECONDS = QUICK ? 3 : 10
const WRK_CONNECTIONS = 64
const WRK_THREADS = 2
/** Fixed rates: one well within the proxy's capacity, one at the figure the issue suggests. */
const FIXED_RATES = [100, 1000] as const
const FIXED_MS = QUICK ? 2000 : 5000
const ROOT = fileURLToPath(new URL("../../", import.meta.url))

// ---------------------------------------------------------------------------------------------------
// Processes

const onPath = (binary: string) =>
  (process.env["PATH"] ?? "").split(delimiter).some((dir) => dir !== "" && existsSync(join(dir, binary)))

interface Running {
  readonly child: ChildProcess
  readonly pid: number
  readonly output: () => string
}

/** Spawns a server that dies with this process (setpriv --pdeathsig), keeping its output. */
const start = (command: string, args: ReadonlyArray<string>, env: NodeJS.ProcessEnv = process.env): Running => {
  const options: SpawnOptionsWithStdioTuple<"ignore", "pipe", "pipe"> = {
    cwd: ROOT,
    env,
    stdio: ["ignore", "pipe", "pipe"]
  }
  const child = onPath("setpriv")
    ? spawn("setpriv", ["--pdeathsig", "SIGKILL", "--", command, ...args], options)
    : spawn(command, args, options)
  let output = ""
  child.stdout?.on("data", (chunk: Buffer) => (output = (output + chunk.toString()).slice(-4000)))
  child.stderr?.on("data", (chunk: Buffer) => (output = (output + chunk.toString()).slice(-4000)))
  if (child.pid === undefined) throw new Error(`could not start ${command}`)
  return { child, pid: child.pid, output: () => output }
}

const stop = (running: Running): Promise<void> =>
  new Promise((resolve) => {
    if (running.child.exitCode !== null || running.child.signalCode !== null) return resolve()
    const timer = setTimeout(() => running.child.kill("SIGKILL"), 5000)
    running.child.once("exit", () => {
      clearTimeout(timer)
      resolve()
    })
    running.child.kill("SIGTERM")
  })

const freePort = (): Promise<number> =>
  new Promise((resolve, reject) => {
    const server = createServer()
    server.once("error", reject)
    server.listen(0, "127.0.0.1", () => {
      const address = server.address()
      const port = typeof address === "object" && address !== null ? address.port : 0
      server.close(() => resolve(port))
    })
  })

/** Resolves once something accepts connections on the port; fails if the process exits or 15 s pass. */
const listening = async (running: Running, port: number, what: string): Promise<void> => {
  const deadline = Date.now() + 15_000
  for (;;) {
    if (running.child.exitCode !== null) {
      throw new Error(`${what} exited with ${running.child.exitCode}: ${running.output()}`)
    }
    const ok = await new Promise<boolean>((resolve) => {
      const socket = connect(port, "127.0.0.1")
      socket.once("connect", () => {
        socket.destroy()
        resolve(true)
      })
      socket.once("error", () => resolve(false))
    })
    if (ok) return
    if (Date.now() > deadline) throw new Error(`${what} did not listen on ${port} within 15 s: ${running.output()}`)
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
}

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
}

const UNIT_MS: Readonly<Record<string, number>> = { us: 0.001, ms: 1, s: 1000, m: 60_000, h: 3_600_000 }

/** A wrk latency (`812.00us`, `1.44ms`, `2.01s`) in milliseconds. */
const wrkLatency = (text: string): number => {
  const m = /^([\d.]+)(us|ms|s|m|h)$/.exec(text)
  return m === null ? Number.NaN : Number(m[1]) * (UNIT_MS[m[2] ?? ""] ?? Number.NaN)
}

/** The figures of `wrk --latency`'s output; throws on non-2xx responses or output it cannot read. */
export const parseWrk = (output: string): WrkResult => {
  const percentile = (p: string) => wrkLatency(new RegExp(`^\\s+${p}%\\s+(\\S+)\\s*$`, "m").exec(output)?.[1] ?? "")
  const errors = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(output)
  const result = {
    requestsPerSecond: Number(/Requests\/sec:\s+([\d.]+)/.exec(output)?.[1] ?? Number.NaN),
    p50Ms: percentile("50"),
    p99Ms: percentile("99"),
    requests: Number(/(\d+) requests in /.exec(output)?.[1] ?? Number.NaN),
    socketErrors: errors === null ? 0 : errors.slice(1).reduce((sum, n) => sum + Number(n), 0)
  }
  const non2xx = /Non-2xx or 3xx responses: (\d+)/.exec(output)?.[1]
  if (non2xx !== undefined || Object.values(result).some(Number.isNaN)) {
    throw new Error(`wrk: not every response was a 2xx, or its output is unreadable:\n${output}`)
  }
  return result
}

const wrk = (url: string, seconds: number): Promise<WrkResult> =>
  new Promise((resolve, reject) => {
    // --timeout 10s: wrk's default (2 s) drops slower responses from its latencies instead of counting them.
    const args = [
      "-c",
      String(WRK_CONNECTIONS),
      "-t",
      String(WRK_THREADS),
      "-d",
      `${seconds}s`,
      "--timeout",
      "10s",
      "--latency",
      url
    ]
    const child = spawn("wrk", args, { stdio: ["ignore", "pipe", "pipe"] })
    let output = ""
    child.stdout.on("data", (chunk: Buffer) => (output += chunk.toString()))
    child.stderr.on("data", (chunk: Buffer) => (output += chunk.toString()))
    child.on("error", reject)
    child.on("exit", (code) => {
      if (code !== 0) return reject(new Error(`wrk exited with ${code}: ${output}`))
      try {
        resolve(parseWrk(output))
      } catch (error) {
        reject(error)
      }
    })
  })

// ---------------------------------------------------------------------------------------------------
// The fixed-rate comparison

interface RateResult {
  readonly p50Ms: number
  readonly p99Ms: number
}

const atFixedRate = async (url: string, rate: number, durationMs: number): Promise<RateResult> => {
  const result = await attack({ target: url, rate, durationMs })
  const m = metrics(result)
  const failed = result.hits.filter((h) => h.status !== 200)
  if (failed.length > 0) {
    throw new Error(`fixed rate: ${failed.length} requests did not get a 200, e.g. ${JSON.stringify(failed[0])}`)
  }
  if (Math.abs(m.sendRate / rate - 1) > 0.02) {
    throw new Error(`fixed rate: the attack sent at ${m.sendRate.toFixed(1)}/s for ${rate}/s (machine too busy)`)
  }
  return { p50Ms: m.latencies.p50Ms, p99Ms: m.latencies.p99Ms }
}

// ---------------------------------------------------------------------------------------------------

interface Path {
  readonly label: string
  readonly url: string
  /** The proxy's process, or undefined for the direct path. */
  readonly proxy: Running | undefined
  readonly wrk: Array<WrkResult & { readonly upstreamCpuUs: number; readonly proxyCpuUs: number }>
  /** Per fixed rate (as in FIXED_RATES), the rounds' results. */
  readonly rate: ReadonlyArray<Array<RateResult>>
}

const main = async (): Promise<void> => {
  const ticksPerSecond = clockTicks()
  const [upstreamPort, proxyPort, rawPort] = [await freePort(), await freePort(), await freePort()]
  const upstreamUrl = `http://127.0.0.1:${upstreamPort}`
  const proxyArgs = [
    "dist/bin.js",
    "proxy",
    "--upstream",
    upstreamUrl,
    "--host",
    "127.0.0.1",
    "--port",
    String(proxyPort),
    "--algorithm",
    "token-bucket",
    "--capacity",
    "1000000000",
    "--refill",
    "1000000000/1s"
  ]
  const servers: Array<Running> = []
  try {
    const upstream = start(process.execPath, ["--import", "tsx", "test/load/upstream.ts", String(upstreamPort)])
    servers.push(upstream)
    // The embedded store: no REDIS_URL for the proxy, whatever this process has.
    const proxy = start(process.execPath, proxyArgs, { ...process.env, REDIS_URL: "" })
    servers.push(proxy)
    const raw = start(process.execPath, ["--import", "tsx", "test/bench/rawProxy.ts", String(rawPort), upstreamUrl])
    servers.push(raw)
    await listening(upstream, upstreamPort, "the upstream")
    await listening(proxy, proxyPort, "the proxy")
    await listening(raw, rawPort, "the reference proxy")
    const path = (label: string, port: number, running: Running | undefined): Path => ({
      label,
      url: `http://127.0.0.1:${port}/`,
      proxy: running,
      wrk: [],
      rate: FIXED_RATES.map(() => [])
    })
    const direct = path("direct to the upstream", upstreamPort, undefined)
    const proxied = path("through `wakuwaku proxy` (allow-everything token bucket, memory store)", proxyPort, proxy)
    const reference = path("through a bare node:http proxy (reference: no Effect, no limiter)", rawPort, raw)
    const paths = [direct, proxied, reference] as const

    console.log(
      `node ${process.version}, ${availableParallelism()} cores, CLK_TCK ${ticksPerSecond}; upstream pid ${upstream.pid} ` +
        `(${upstreamUrl}), wakuwaku proxy pid ${proxy.pid} (node ${
          proxyArgs.join(" ")
        }), reference proxy pid ${raw.pid}`
    )
    console.log(
      `max throughput: wrk -c ${WRK_CONNECTIONS} -t ${WRK_THREADS} -d ${WRK_SECONDS}s --timeout 10s --latency; fixed rate: ` +
        `${FIXED_RATES.join(" and ")} req/s for ${
          FIXED_MS / 1000
        } s each (open model, this process); ${ROUNDS} timed ` +
        `rounds each after 1 warm-up, alternating\n`
    )

    // Warm-up, untimed.
    for (const p of paths) {
      await wrk(p.url, 3)
      for (const rate of FIXED_RATES) await atFixedRate(p.url, rate, 1000)
    }

    const serverTicks = () => servers.reduce((sum, s) => sum + processTicks(s.pid), 0)
    const machineBefore = machineTicks()
    const selfBefore = process.cpuUsage()
    const childrenBefore = childrenTicks()
    const serversBefore = serverTicks()

    for (let round = 1; round <= ROUNDS; round++) {
      for (const p of paths) {
        const upstreamTicks = processTicks(upstream.pid)
        const proxyTicks = p.proxy === undefined ? 0 : processTicks(p.proxy.pid)
        const w = await wrk(p.url, WRK_SECONDS)
        const perRequest = (ticks: number) => (ticks / ticksPerSecond) * 1e6 / w.requests
        const sample = {
          ...w,
          upstreamCpuUs: perRequest(processTicks(upstream.pid) - upstreamTicks),
          proxyCpuUs: p.proxy === undefined ? Number.NaN : perRequest(processTicks(p.proxy.pid) - proxyTicks)
        }
        p.wrk.push(sample)
        console.log(
          `round ${round} wrk     ${p.label}: ${Math.round(w.requestsPerSecond)} req/s, p50 ${
            w.p50Ms.toFixed(2)
          } ms, ` +
            `p99 ${w.p99Ms.toFixed(2)} ms; CPU/request upstream ${sample.upstreamCpuUs.toFixed(1)} µs` +
            (p.proxy === undefined ? "" : `, proxy ${sample.proxyCpuUs.toFixed(1)} µs`) +
            (w.socketErrors > 0 ? `; ${w.socketErrors} socket errors` : "")
        )
      }
      for (const [k, rate] of FIXED_RATES.entries()) {
        for (const p of paths) {
          const r = await atFixedRate(p.url, rate, FIXED_MS)
          p.rate[k]?.push(r)
          console.log(`round ${round} ${rate}/s ${p.label}: p50 ${r.p50Ms.toFixed(3)} ms, p99 ${r.p99Ms.toFixed(3)} ms`)
        }
      }
    }

    const self = process.cpuUsage(selfBefore)
    const known = (serverTicks() - serversBefore) + (childrenTicks() - childrenBefore)
    const otherSeconds = (machineTicks() - machineBefore - known) / ticksPerSecond - (self.user + self.system) / 1e6
    console.log(
      "\n" + otherCpuLine(otherSeconds)
    )

    console.log("\nmedian over rounds (min–max):\n")
    const rateColumns = FIXED_RATES.map((rate) => `at ${rate} req/s: p50 ms | p99 ms`).join(" | ")
    console.log(
      `| path | wrk -c ${WRK_CONNECTIONS}: req/s | p50 ms | p99 ms | ${rateColumns} | upstream CPU µs/req | proxy CPU µs/req |`
    )
    console.log(`|---|---:|---:|---:|${FIXED_RATES.map(() => "---:|---:|").join("")}---:|---:|`)
    for (const p of paths) {
      const rates = p.rate.map((rs) => `${stat(rs.map((r) => r.p50Ms), 3)} | ${stat(rs.map((r) => r.p99Ms), 3)}`).join(
        " | "
      )
      console.log(
        `| ${p.label} | ${stat(p.wrk.map((w) => w.requestsPerSecond), 0, true)} | ${
          stat(p.wrk.map((w) => w.p50Ms), 2)
        } | ` +
          `${stat(p.wrk.map((w) => w.p99Ms), 2)} | ${rates} | ${stat(p.wrk.map((w) => w.upstreamCpuUs), 1)} | ` +
          `${p.proxy === undefined ? "—" : stat(p.wrk.map((w) => w.proxyCpuUs), 1)} |`
      )
    }

    const throughput = (p: Path) => median(p.wrk.map((w) => w.requestsPerSecond))
    const ratio = throughput(proxied) / throughput(direct)
    const signed = (x: number) => `${x >= 0 ? "+" : "−"}${Math.abs(x).toFixed(3)} ms`
    console.log("\ntargets (wakuwaku proxy against direct):")
    console.log(
      `- throughput proxied/direct (wrk -c ${WRK_CONNECTIONS}) = ${ratio.toFixed(3)}× (target ≥ 0.5×): ${
        ratio >= 0.5 ? "MET" : "MISSED"
      }` +
        ` (the reference proxy: ${(throughput(reference) / throughput(direct)).toFixed(3)}×)`
    )
    for (const [k, rate] of FIXED_RATES.entries()) {
      const p50 = (p: Path) => median((p.rate[k] ?? []).map((r) => r.p50Ms))
      const added = p50(proxied) - p50(direct)
      console.log(
        `- p50 added at ${rate} req/s = ${signed(added)} (target ≤ +1 ms): ${added <= 1 ? "MET" : "MISSED"}` +
          ` (the reference proxy: ${signed(p50(reference) - p50(direct))})`
      )
    }
    const wrkP50 = (p: Path) => median(p.wrk.map((w) => w.p50Ms))
    const addedAtMax = wrkP50(proxied) - wrkP50(direct)
    console.log(
      `- p50 added at max throughput (wrk -c ${WRK_CONNECTIONS}) = ${signed(addedAtMax)} (target ≤ +1 ms): ${
        addedAtMax <= 1 ? "MET" : "MISSED"
      } (at saturation p50 is mostly queueing, ${WRK_CONNECTIONS} connections / throughput; the reference proxy: ${
        signed(wrkP50(reference) - wrkP50(direct))
      })`
    )
  } finally {
    await Promise.all(servers.map(stop))
  }
}

main().catch((error: unknown) => {
  console.error(error)
  process.exitCode = 1
})
