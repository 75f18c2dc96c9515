/**
 * The classic vegeta experiment (20 req/s for 10 s against 10 per second) with a third-party load
 * generator: npm's `loadtest` holding 20 requests per second for 10 s (`--rps 20 -n 200 -c 1 -k`)
 * through `wakuwaku proxy` on Redis, against a fixed window of 10 per second, compared with the theory
 * (test/load/theory.ts) at the run's own alignment to the server's windows.
 *
 * `npx tsx test/load/thirdParty.ts`: starts a throwaway redis-server, the upstream (test/load/upstream.ts)
 * and `wakuwaku proxy` (from the sources), each in a process of its own, runs loadtest, prints its output,
 * the split and the verdict; exit code 0 within ±3 points of the theory, 1 otherwise. Loopback only.
 */
import { type ChildProcess, spawn } from "node:child_process"
import { fileURLToPath } from "node:url"
import { theory } from "./theory.js"

const ROOT = fileURLToPath(new URL("../../", import.meta.url))
const RATE = 20
const REQUESTS = 200

const run = (command: string, args: ReadonlyArray<string>): ChildProcess =>
  spawn(command, args, { cwd: ROOT, stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, REDIS_URL: "" } })

/** Resolves with the first match of `pattern` in the child's output. */
const waitFor = (child: ChildProcess, pattern: RegExp): Promise<RegExpExecArray> =>
  new Promise((resolve, reject) => {
    let seen = ""
    const onData = (chunk: Buffer) => {
      seen += chunk.toString()
      const match = pattern.exec(seen)
      if (match !== null) resolve(match)
    }
    child.stdout?.on("data", onData)
    child.stderr?.on("data", onData)
    child.once("exit", (code) => reject(new Error(`exited with ${code} before ${pattern}: ${seen}`)))
  })

const children: Array<ChildProcess> = []
try {
  const redis = run("redis-server", ["--port", "0", "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
  children.push(redis)
  // Port 0 is refused by redis-server: take one from the proxy's own free-port logic instead.
  await new Promise((resolve) => redis.once("exit", resolve))
  children.pop()
  const net = await import("node:net")
  const freePort = () =>
    new Promise<number>((resolve) => {
      const server = net.createServer().listen(0, "127.0.0.1", () => {
        const { port } = server.address() as import("node:net").AddressInfo
        server.close(() => resolve(port))
      })
    })
  const redisPort = await freePort()
  const server = run("redis-server", [
    "--port",
    String(redisPort),
    "--bind",
    "127.0.0.1",
    "--save",
    "",
    "--appendonly",
    "no"
  ])
  children.push(server)
  await waitFor(server, /Ready to accept connections/)
  const upstream = run(process.execPath, ["--import", "tsx", "test/load/upstream.ts", "0"])
  children.push(upstream)
  const upstreamUrl = (await waitFor(upstream, /listening (http:\/\/\S+)/))[1]!
  const proxyArgs = [
    "src/bin.ts",
    "proxy",
    "--upstream",
    upstreamUrl,
    "--host",
    "127.0.0.1",
    "--port",
    "0",
    "--algorithm",
    "fixed-window",
    "--limit",
    "10",
    "--window",
    "1s",
    "--redis",
    `redis://127.0.0.1:${redisPort}`,
    "--on-store-failure",
    "fail-closed",
    "--namespace",
    `loadtest-${process.pid}`
  ]
  const proxy = run(process.execPath, ["--import", "tsx", ...proxyArgs])
  children.push(proxy)
  const port = (await waitFor(proxy, /listening on http:\/\/127\.0\.0\.1:(\d+)/))[1]!
  const url = `http://127.0.0.1:${port}/`
  const command = ["loadtest", "--rps", String(RATE), "-n", String(REQUESTS), "-c", "1", "-k", url]
  console.log(`$ npx ${command.join(" ")}   # through: tsx ${proxyArgs.join(" ")}\n`)
  const started = Date.now()
  const loadtest = spawn("npx", command, { cwd: ROOT, stdio: ["ignore", "pipe", "pipe"] })
  let output = ""
  loadtest.stdout.on("data", (chunk: Buffer) => (output += chunk.toString()))
  loadtest.stderr.on("data", (chunk: Buffer) => (output += chunk.toString()))
  await new Promise((resolve) => loadtest.once("exit", resolve))
  console.log(output.trimEnd())
  const completed = Number(/Completed requests:\s+(\d+)/.exec(output)?.[1] ?? Number.NaN)
  // loadtest 8 counts every response that is not a 2xx as an error, under the code -1; behind this proxy, with
  // an upstream that always answers 200, those are the 429s.
  const denied = Number(/Total errors:\s+(\d+)/.exec(output)?.[1] ?? Number.NaN)
  const allowed = completed - denied
  // loadtest starts after npx has: its first request's alignment to the server's windows is not known here, so the
  // comparison is with the mean over alignments, and the range is printed.
  const result = theory({ algorithm: "fixed-window", limit: 10, windowMs: 1000 }, {
    rate: RATE,
    durationMs: (REQUESTS / RATE) * 1000
  })
  const measured = allowed / completed
  const difference = (measured - result.ratio) * 100
  console.log(
    `\nsplit: ${allowed} × 200, ${denied} × 429 of ${completed}: ${
      (measured * 100).toFixed(2)
    }%; theory ${result.text}` +
      `\ndifference from the mean: ${difference >= 0 ? "+" : "−"}${
        Math.abs(difference).toFixed(2)
      } points; within the ` +
      `range ${(result.low * 100).toFixed(2)}–${(result.high * 100).toFixed(2)}%: ${
        measured >= result.low - 0.03 && measured <= result.high + 0.03 ? "yes" : "NO"
      } (started ${new Date(started).toISOString()})`
  )
  process.exitCode = Math.abs(difference) <= 3 ? 0 : 1
} finally {
  for (const child of children) child.kill("SIGTERM")
}
