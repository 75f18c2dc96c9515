/**
 * `wakuwaku proxy --workers N` (src/internal/proxy/workers.ts) with real processes: a primary and its workers on
 * one port, sharing their limits through the suite's Redis; a worker killed and replaced; SIGHUP and SIGTERM
 * passed to every worker; the embedded store refused.
 */
import { mkdtempSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
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
    "2 workers on one port share the limit; a killed worker is replaced; SIGHUP and SIGTERM reach every worker",
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
          "2"
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

      // One limit for both: 8 requests, each on a connection of its own (the primary hands them out in turn).
      const statuses = []
      for (let i = 0; i < 8; i++) statuses.push((await request(port)).status)
      expect(statuses.sort()).toEqual([200, 200, 200, 200, 429, 429, 429, 429])

      // A worker killed is replaced, and the event logged.
      process.kill(Number(a), "SIGKILL")
      const [, replacement] = await logged(new RegExp(`worker ${a} was killed by SIGKILL; worker (\\d+) replaces it`))
      pids.add(Number(replacement))
      expect(alive(Number(replacement))).toBe(true)
      await logged(new RegExp(`worker ${replacement} listens`))

      // SIGHUP to the primary: every worker, the replacement among them, reads the file again.
      write(6)
      child.kill("SIGHUP")
      await logged(/SIGHUP passed to 2 workers/)
      await logged(/(?:[^]*reloaded: 0 routes and the default route){2}/)
      for (let i = 0; i < 4; i++) {
        expect(valueOf(await request(port), "ratelimit-policy")).toBe(`"${ns}";q=6;w=21600`)
      }

      // SIGTERM to the primary: every worker drains and exits, then the primary, with code 0.
      child.kill("SIGTERM")
      const exit = await exited
      expect(exit.code).toBe(0)
      for (const pid of [Number(b), Number(replacement)]) expect(alive(pid)).toBe(false)
    },
    90_000
  )
})
