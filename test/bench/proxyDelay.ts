/**
 * `npm run bench` (after proxy.ts): delay mode holding 1000 waiting requests, its memory, and its bound (issue 28
 * §7). The built `wakuwaku proxy` (`node dist/bin.js proxy`, embedded store) with a file whose one route is in
 * `delay` mode: a token bucket of 1 refilled 1 every 10 minutes, `maxWait` 168h, 7 days (the 1000th turn is 10 000
 * minutes away: it is granted, and none comes within the run), `maxWaiting` 1000, and the admin port on. Per
 * round, a proxy of its own (so that one round's heap does not carry into the next):
 *
 * 1. one request takes the bucket's one token and is forwarded (200); 50 requests held and let go warm up the
 *    waiting path; the proxy's RSS (`VmRSS` of /proc/<pid>/status) is read once the waiting count is back to 0;
 * 2. 1000 requests, each on a connection of its own (raw sockets), all held: the bench waits until the admin
 *    port's `wakuwaku_proxy_requests_in_flight` reads 1000 and none has been answered, then reads the RSS:
 *    (RSS held − RSS before) / 1000 is the memory per waiting request (the proxy's objects, the fiber, the
 *    socket's user-space buffers; the kernel's socket buffers are not in RSS);
 * 3. the bound: the 1001st request gets 503 with `Proxy-Status` at once (its time is printed), then 1000 more at
 *    once, every one a 503, and the RSS after them (the bound keeps memory where it was);
 * 4. the 1000 clients disconnect: the waiting count (the in-flight gauge) back to 0, how long it took, and the
 *    RSS after (a process's RSS seldom shrinks: V8 keeps the heap it grew).
 *
 * The RSS is the only memory figure: the admin port exports no process metrics (no heap). `--quick`: one round,
 * still 1000 requests; the full run: 3 rounds. It needs about 2 × 1000 + 100 open files in this process (the
 * 1000 held connections and the 1000 refused ones), as `ulimit -n` allows here; the bench says so if not.
 *
 * Run: `npm run build && npx tsx --tsconfig test/bench/tsconfig.json test/bench/proxyDelay.ts [--quick]`.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { createServer as createHttpServer } from "node:http"
import { connect, type Socket } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { median, stat } from "./measure.js"
import { freePort, listening, printed, type Running, start, stop } from "./servers.js"

const QUICK = process.argv.includes("--quick")
const ROUNDS = QUICK ? 1 : 3
const HELD = 1000
const WARM = 50
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/** The file: one route in delay mode whose turns are 10 minutes apart, the waiting bound `HELD`. */
const delayFile = (upstream: string) => ({
  upstream,
  maxWaiting: HELD,
  routes: [{
    name: "held",
    match: { prefix: "/" },
    mode: "delay",
    // Under 24.8 days: Effect's clock never wakes a sleep longer than a JS timer holds (2^31 − 1 ms).
    maxWait: "168h",
    limits: [{ name: "held", algorithm: "token-bucket", capacity: 1, refill: "1/10m" }]
  }]
})

/** The soft limit of open files of this process (/proc/self/limits). */
const openFilesLimit = (): number =>
  Number(/^Max open files\s+(\d+|unlimited)/m.exec(readFileSync("/proc/self/limits", "utf8"))?.[1] ?? 0) ||
  Number.POSITIVE_INFINITY

/** The resident set of a process, in bytes (`VmRSS` of /proc/<pid>/status). */
const rss = (pid: number): number =>
  Number(/^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1] ?? Number.NaN) * 1024

/** A metric's value on the admin port (the sum of its series with `label` in them, when given). */
const metric = async (admin: number, name: string, label = ""): Promise<number> => {
  const text = await (await fetch(`http://127.0.0.1:${admin}/metrics`)).text()
  return [...text.matchAll(new RegExp(`^${name}(\\{[^}]*\\})? (\\S+)$`, "gm"))]
    .filter((m) => (m[1] ?? "").includes(label))
    .reduce((sum, m) => sum + Number(m[2]), 0)
}

/** What the process keeps alive: its heap after a full collection (heapOnSignal.mjs), and its RSS then, in bytes. */
interface Memory {
  readonly heap: number
  readonly rss: number
}

/** Signals the proxy (heapOnSignal.mjs preloaded) and reads the `n`th line it writes; the RSS from /proc then. */
const memory = async (proxy: Running, n: number): Promise<Memory> => {
  process.kill(proxy.pid, "SIGUSR2")
  const deadline = Date.now() + 10_000
  for (;;) {
    const m = new RegExp(`heap-after-gc ${n} (\\d+)`).exec(proxy.output())
    if (m !== null) return { heap: Number(m[1]), rss: rss(proxy.pid) }
    if (Date.now() > deadline) throw new Error(`no heap-after-gc ${n} within 10 s: ${proxy.output()}`)
    await sleep(10)
  }
}

/** Polls the in-flight gauge until it reads `count`; the milliseconds it took. */
const inFlightReaches = async (admin: number, count: number, what: string): Promise<number> => {
  const started = performance.now()
  const deadline = Date.now() + 30_000
  for (;;) {
    const now = await metric(admin, "wakuwaku_proxy_requests_in_flight")
    if (now === count) return performance.now() - started
    if (Date.now() > deadline) throw new Error(`${what}: requests in flight ${now}, not ${count}, after 30 s`)
    await sleep(20)
  }
}

/** A client on a connection of its own: its request sent, what came back so far. */
interface Client {
  readonly socket: Socket
  readonly received: () => string
}

const open = (port: number, path: string): Promise<Client> =>
  new Promise((resolve, reject) => {
    let received = ""
    const socket = connect(port, "127.0.0.1", () => {
      socket.write(`GET ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n`)
      resolve({ socket, received: () => received })
    })
    socket.on("data", (chunk: Buffer) => (received += chunk.toString("latin1")))
    socket.once("error", reject)
  })

/** `n` clients, opened 100 at a time (the listen backlog is 511). */
const openMany = async (port: number, n: number, prefix: string): Promise<Array<Client>> => {
  const clients: Array<Client> = []
  for (let i = 0; i < n; i += 100) {
    const batch = Array.from({ length: Math.min(100, n - i) }, (_, j) => open(port, `${prefix}/${i + j}`))
    clients.push(...(await Promise.all(batch)))
  }
  return clients
}

/** Resolves with the client's status line and head once its response head has come. */
const head = async (client: Client): Promise<string> => {
  const deadline = Date.now() + 10_000
  while (!client.received().includes("\r\n\r\n")) {
    if (Date.now() > deadline) throw new Error(`no response within 10 s: ${JSON.stringify(client.received())}`)
    await sleep(1)
  }
  return client.received().slice(0, client.received().indexOf("\r\n\r\n"))
}

const statusOf = (text: string): number => Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1] ?? Number.NaN)

interface Round {
  readonly before: Memory
  readonly held: Memory
  readonly firstRefusedMs: number
  readonly firstRefused: string
  readonly pastBound: Memory
  readonly drainMs: number
  readonly after: Memory
  /** Requests counted with status 499 (the client left before the response began), the warm-up's included. */
  readonly gone: number
}

const round = async (file: string): Promise<Round> => {
  const [port, admin] = [await freePort(), await freePort()]
  const args = ["--host", "127.0.0.1", "--port", String(port), "--config", file, "--admin-port", String(admin)]
  const proxy: Running = start(
    process.execPath,
    ["--expose-gc", "--import", "./test/bench/heapOnSignal.mjs", "dist/bin.js", "proxy", ...args],
    { ...process.env, REDIS_URL: "" }
  )
  try {
    await listening(proxy, port, "wakuwaku proxy")
    await printed(proxy, "listening on", "wakuwaku proxy")
    // 1. The one token, then the waiting path warmed up and let go.
    const primer = await open(port, "/primer")
    if (statusOf(await head(primer)) !== 200) throw new Error(`the first request: ${primer.received()}`)
    primer.socket.destroy()
    const warm = await openMany(port, WARM, "/warm")
    await inFlightReaches(admin, WARM, "warming up")
    for (const c of warm) c.socket.destroy()
    await inFlightReaches(admin, 0, "after the warm-up")
    const before = await memory(proxy, 1)

    // 2. 1000 held.
    const held = await openMany(port, HELD, "/held")
    await inFlightReaches(admin, HELD, "holding")
    const heldMemory = await memory(proxy, 2)
    const answered = held.filter((c) => c.received() !== "").length
    if (answered > 0) throw new Error(`${answered} of the held requests were answered: ${held[0]!.received()}`)

    // 3. The bound: the 1001st at once, then 1000 more.
    const sent = performance.now()
    const next = await open(port, "/one-more")
    const firstRefused = await head(next)
    const firstRefusedMs = performance.now() - sent
    next.socket.destroy()
    if (statusOf(firstRefused) !== 503 || !/^proxy-status:/im.test(firstRefused)) {
      throw new Error(`the ${HELD + 1}st request: ${firstRefused}`)
    }
    const more = await openMany(port, HELD, "/more")
    const statuses = await Promise.all(more.map(async (c) => statusOf(await head(c))))
    for (const c of more) c.socket.destroy()
    const not503 = statuses.filter((s) => s !== 503).length
    if (not503 > 0) throw new Error(`${not503} of the ${HELD} requests past the bound did not get a 503`)
    await inFlightReaches(admin, HELD, "past the bound")
    const pastBound = await memory(proxy, 3)

    // 4. The clients leave.
    for (const c of held) c.socket.destroy()
    const drainMs = await inFlightReaches(admin, 0, "after the clients left")
    return {
      before,
      held: heldMemory,
      firstRefusedMs,
      firstRefused: firstRefused.split("\r\n").filter((l) => /^(HTTP|proxy-status)/i.test(l)).join("; "),
      pastBound,
      drainMs,
      after: await memory(proxy, 4),
      gone: await metric(admin, "wakuwaku_proxy_requests_total", "status=\"499\"")
    }
  } finally {
    await stop(proxy)
  }
}

const main = async (): Promise<void> => {
  const limit = openFilesLimit()
  if (limit < 2 * HELD + 100) {
    throw new Error(`open files: ${limit} allowed, ${2 * HELD + 100} needed (raise it: ulimit -n 4096)`)
  }
  const upstream = createHttpServer((_, response) => response.end("hello, world\n"))
  await new Promise<void>((resolve) => upstream.listen(0, "127.0.0.1", resolve))
  const address = upstream.address()
  const upstreamUrl = `http://127.0.0.1:${typeof address === "object" && address !== null ? address.port : 0}`
  const dir = mkdtempSync(join(tmpdir(), "wakuwaku-delay-"))
  const file = join(dir, "delay.json")
  writeFileSync(file, JSON.stringify(delayFile(upstreamUrl), null, 2))
  console.log(
    `wakuwaku proxy (embedded store), one route in delay mode (a bucket of 1, 1 back every 10 minutes, maxWait 168h), ` +
      `maxWaiting ${HELD}; ${HELD} requests held, each on a connection of its own; ${ROUNDS} round(s), a proxy each; ` +
      `open files allowed here: ${limit}\n`
  )
  const rounds: Array<Round> = []
  try {
    for (let i = 1; i <= ROUNDS; i++) {
      const r = await round(file)
      rounds.push(r)
      const mb = (bytes: number) => `${(bytes / 2 ** 20).toFixed(1)} MiB`
      const at = (m: Memory) => `heap ${mb(m.heap)}, RSS ${mb(m.rss)}`
      console.log(
        `round ${i}: before: ${at(r.before)}; ${HELD} waiting: ${at(r.held)}; the ${HELD + 1}st: ${r.firstRefused} ` +
          `in ${r.firstRefusedMs.toFixed(1)} ms; ${HELD} more refused: ${at(r.pastBound)}; the clients gone: ` +
          `waiting back to 0 in ${r.drainMs.toFixed(0)} ms (${r.gone} counted as 499 in all), ${at(r.after)}`
      )
    }
  } finally {
    upstream.close()
    rmSync(dir, { recursive: true, force: true })
  }
  const cell = (xs: ReadonlyArray<number>) => stat(xs.map((x) => x / 1024), 0, true)
  const perRequest = (pick: (m: Memory) => number) =>
    stat(rounds.map((r) => (pick(r.held) - pick(r.before)) / HELD), 0, true)
  console.log(`\nmemory of the proxy after a full GC, KiB, median over ${ROUNDS} round(s) (min–max):\n`)
  console.log(
    `| | before | ${HELD} waiting | ${HELD} more refused past the bound | the clients gone | bytes per waiting request |`
  )
  console.log("|---|---:|---:|---:|---:|---:|")
  for (const [name, pick] of [["heap used", (m: Memory) => m.heap], ["RSS", (m: Memory) => m.rss]] as const) {
    console.log(
      `| ${name} | ${cell(rounds.map((r) => pick(r.before)))} | ${cell(rounds.map((r) => pick(r.held)))} | ${
        cell(rounds.map((r) => pick(r.pastBound)))
      } | ${cell(rounds.map((r) => pick(r.after)))} | ${perRequest(pick)} |`
    )
  }
  const refusedMs = median(rounds.map((r) => r.firstRefusedMs))
  const grew = median(rounds.map((r) => r.pastBound.heap - r.held.heap)) / 1024
  console.log(
    `\n- the bound: the ${HELD + 1}st request got 503 with Proxy-Status in ${refusedMs.toFixed(1)} ms (median); ` +
      `${HELD} more, all 503; the heap kept meanwhile ${grew >= 0 ? "+" : ""}${grew.toFixed(0)} KiB`
  )
  console.log(
    `- the clients gone: the waiting count back to 0 in ${median(rounds.map((r) => r.drainMs)).toFixed(0)} ms (median)`
  )
}

main().catch((error: unknown) => {
  console.error(error)
  process.exitCode = 1
})
