/**
 * `wakuwaku proxy --workers N` (src/internal/proxy/workers.ts) with real processes: a primary and its workers on
 * one port, sharing their limits through the suite's Redis; one admin port, the primary's (src/internal/proxy/
 * fleet.ts), whose `/metrics` adds up the workers' and `/readyz` asks them all; a worker stopped (it cannot answer),
 * then killed and replaced; SIGHUP and SIGTERM passed to every worker; the embedded store refused.
 */
import { mkdtempSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import parsePrometheus from "parse-prometheus-text-format"
import { afterEach, describe, expect, it } from "vitest"
import { cleanEnv, outcome, request, runCli, spawnCli, upstream, valueOf } from "./support/proxy.js"
import { freshNamespace, redisUrl } from "./support/redis.js"

const cleanups: Array<() => Promise<unknown>> = []
afterEach(async () => {
  await Promise.all(cleanups.splice(0).map((cleanup) => cleanup()))
})

/** Whether a process is alive. */
const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0)
    return true
  } catch {
    return false
  }
}

/** `/metrics` of the admin port, as text and parsed by the third-party parser. */
const scrape = async (admin: number) => {
  const reply = await request(admin, { path: "/metrics" })
  expect(reply.status).toBe(200)
  const text = reply.body.toString()
  const families = parsePrometheus(text)
  const samples = (name: string) => families.find((f) => f.name === name)?.metrics ?? []
  return {
    text,
    /** The sum of a family's samples over every label set (a histogram's `_count`s). */
    sum: (name: string): number => samples(name).reduce((n, m) => n + Number(m.value ?? m.buckets?.["+Inf"] ?? 0), 0),
    /** The one sample of a family with `labels`. */
    value: (name: string, labels: Record<string, string> = {}): number | undefined => {
      const found = samples(name).filter((m) => Object.entries(labels).every(([k, v]) => m.labels?.[k] === v))
      return found.length === 1 ? Number(found[0]!.value) : undefined
    }
  }
}

/** `/readyz` of the admin port. */
const readyz = (admin: number) =>
  request(admin, { path: "/readyz" }).then((reply) => ({ status: reply.status, body: reply.body.toString() }))

describe("wakuwaku proxy --workers", () => {
  it("with the embedded store, more than one worker is refused: why, and what to do", async () => {
    const { code, stderr, stdout } = await runCli(
      ["proxy", "--upstream", "http://127.0.0.1:3000", "--workers", "2"],
      cleanEnv()
    )
    expect(code).toBe(2)
    expect(stdout).toBe("")
    expect(stderr).toBe(
      "wakuwaku proxy: --workers (2 processes) with the embedded store: each worker would keep limits of its own, so " +
        "a client would get 2 times its limit; give --redis URL (or REDIS_URL) so that the workers share their " +
        "limits, or run one worker (--workers 1) (see wakuwaku proxy --help)\n"
    )
  })

  it(
    "2 workers on one port share the limit and one admin port; a killed worker is replaced and counted; SIGHUP " +
      "and SIGTERM reach every worker, /readyz turning 503 first",
    async () => {
      const up = await upstream((_, res) => res.end(String(process.pid)))
      cleanups.push(up.close)
      const ns = freshNamespace("workers")
      const dir = mkdtempSync(join(tmpdir(), "wakuwaku-workers-"))
      const file = join(dir, "proxy.json")
      const write = (capacity: number) =>
        writeFileSync(
          file,
          JSON.stringify({
            default: { limits: [{ name: ns, algorithm: "token-bucket", capacity, refill: "1/1h" }] }
          })
        )
      write(4)
      const child = spawnCli(
        [
          "proxy",
          "--host",
          "127.0.0.1",
          "--port",
          "0",
          "--config",
          file,
          "--upstream",
          up.url,
          "--redis",
          redisUrl,
          "--on-store-failure",
          "fail-closed",
          "--store-timeout",
          "5s",
          "--shutdown-timeout",
          "2s",
          "--workers",
          "2",
          "--admin-port",
          "0",
          "--drain-delay",
          "1s"
        ],
        cleanEnv()
      )
      const exited = outcome(child)
      let output = ""
      child.stdout?.on("data", (chunk: Buffer) => (output += chunk.toString()))
      child.stderr?.on("data", (chunk: Buffer) => (output += chunk.toString()))
      const pids = new Set<number>()
      cleanups.push(async () => {
        child.kill("SIGKILL")
        for (const pid of pids) if (alive(pid)) process.kill(pid, "SIGKILL")
        await exited
      })
      let gone = false
      void exited.then(() => (gone = true))
      /** The first match of `pattern` in what the primary and its workers wrote; fails if they exit first. */
      const logged = (pattern: RegExp) =>
        new Promise<RegExpExecArray>((resolve, reject) => {
          const check = () => {
            const match = pattern.exec(output)
            if (match !== null) resolve(match)
            else if (gone) reject(new Error(`exited before ${pattern}: ${output}`))
            else setTimeout(check, 10)
          }
          check()
        })
      const port = Number((await logged(/listening on http:\/\/127\.0\.0\.1:(\d+)/))[1])
      // The banner is the primary's, once both workers listen.
      const [, a, b] = await logged(/workers: {2}2 processes \((\d+), (\d+)\), sharing the port and the store/)
      pids.add(Number(a)).add(Number(b))
      expect(pids.size).toBe(2)
      for (const pid of pids) expect(alive(pid)).toBe(true)

      // One admin port, the primary's: the banner names one, and the workers bind none of their own.
      const admin = Number((await logged(/admin: {4}http:\/\/127\.0\.0\.1:(\d+)\/metrics, \/healthz, \/readyz\n/))[1])
      expect(output.match(/admin: /g)).toHaveLength(1)
      expect(await readyz(admin)).toEqual({ status: 200, body: "ready\n" })

      // One limit for both: 40 requests, each on a connection of its own (the primary hands them out in turn).
      const statuses: Array<number> = []
      for (let i = 0; i < 40; i++) statuses.push((await request(port)).status)
      expect(statuses.filter((status) => status === 200)).toHaveLength(4)
      expect(statuses.filter((status) => status === 429)).toHaveLength(36)

      // Every scrape adds up both workers (one worker's share would fall short of 40), and the primary's own.
      for (let i = 0; i < 3; i++) {
        const metrics = await scrape(admin)
        expect(metrics.sum("wakuwaku_proxy_requests_total")).toBe(40)
        expect(metrics.value("wakuwaku_proxy_requests_total", { decision: "allowed", status: "200" })).toBe(4)
        expect(metrics.value("wakuwaku_proxy_requests_total", { decision: "denied", status: "429" })).toBe(36)
        expect(metrics.sum("wakuwaku_proxy_upstream_duration_seconds")).toBe(4)
        expect(metrics.sum("wakuwaku_limiter_decisions_total")).toBe(40)
        expect(metrics.value("wakuwaku_proxy_requests_in_flight")).toBe(0)
        expect(metrics.value("wakuwaku_proxy_worker_restarts_total")).toBe(0)
        expect([metrics.value("wakuwaku_proxy_workers"), metrics.value("wakuwaku_proxy_workers_unanswered")])
          .toEqual([2, 0])
      }

      // A worker that cannot answer (stopped) neither hangs a scrape nor counts: it is named, and /readyz says so.
      process.kill(Number(a), "SIGSTOP")
      const partial = await scrape(admin)
      expect(partial.text).toContain(
        `# wakuwaku: worker ${a} did not answer within 1s: its counts are missing from this scrape\n`
      )
      expect([partial.value("wakuwaku_proxy_workers"), partial.value("wakuwaku_proxy_workers_unanswered")])
        .toEqual([2, 1])
      // What the other served: both served some.
      const share = partial.sum("wakuwaku_proxy_requests_total")
      expect(share).toBeGreaterThan(0)
      expect(share).toBeLessThan(40)
      expect(await readyz(admin)).toEqual({ status: 503, body: `not ready: worker ${a}: did not answer within 2s\n` })

      // A worker killed is replaced, the event logged and counted; its counts are gone with it.
      process.kill(Number(a), "SIGKILL")
      const [, replacement] = await logged(new RegExp(`worker ${a} was killed by SIGKILL; worker (\\d+) replaces it`))
      pids.add(Number(replacement))
      expect(alive(Number(replacement))).toBe(true)
      await logged(new RegExp(`worker ${replacement} listens`))
      const replaced = await scrape(admin)
      expect(replaced.value("wakuwaku_proxy_worker_restarts_total")).toBe(1)
      expect(replaced.sum("wakuwaku_proxy_requests_total")).toBe(share)
      expect([replaced.value("wakuwaku_proxy_workers"), replaced.value("wakuwaku_proxy_workers_unanswered")])
        .toEqual([2, 0])
      expect(await readyz(admin)).toEqual({ status: 200, body: "ready\n" })

      // SIGHUP to the primary: every worker, the replacement among them, reads the file again.
      write(6)
      child.kill("SIGHUP")
      await logged(/SIGHUP passed to 2 workers/)
      await logged(/(?:[^]*reloaded: 0 routes and the default route){2}/)
      for (let i = 0; i < 4; i++) {
        expect(valueOf(await request(port), "ratelimit-policy")).toBe(`"${ns}";q=6;w=21600`)
      }

      // SIGTERM to the primary: /readyz turns 503 first, the workers serve on for the drain delay, then drain and
      // exit, then the primary, with code 0.
      child.kill("SIGTERM")
      await expect.poll(() => readyz(admin)).toEqual({
        status: 503,
        body: "not ready: not serving (starting or shutting down)\n"
      })
      expect(valueOf(await request(port), "ratelimit-policy")).toBe(`"${ns}";q=6;w=21600`)
      const exit = await exited
      expect(exit.code).toBe(0)
      for (const pid of [Number(b), Number(replacement)]) expect(alive(pid)).toBe(false)
    },
    90_000
  )
})
