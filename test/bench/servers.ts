/**
 * The servers of the HTTP benchmarks (proxy.ts, proxyDelay.ts): processes spawned so that they die with the
 * bench (setpriv --pdeathsig), stopped with SIGTERM, free ports, and waiting until one listens.
 */
import { type ChildProcess, spawn, type SpawnOptionsWithStdioTuple } from "node:child_process"
import { existsSync, openSync } from "node:fs"
import { connect, createServer } from "node:net"
import { delimiter, join } from "node:path"
import { fileURLToPath } from "node:url"

/** The project's root: the servers' working directory. */
export const ROOT = fileURLToPath(new URL("../../", import.meta.url))

export const onPath = (binary: string) =>
  (process.env["PATH"] ?? "").split(delimiter).some((dir) => dir !== "" && existsSync(join(dir, binary)))

export interface Running {
  readonly child: ChildProcess
  readonly pid: number
  readonly output: () => string
}

/**
 * Spawns a server that dies with this process (setpriv --pdeathsig), keeping its output; its stdout to the file
 * `stdoutTo` when given (an access log), kept out of this process.
 */
export const start = (
  command: string,
  args: ReadonlyArray<string>,
  env: NodeJS.ProcessEnv = process.env,
  stdoutTo?: string
): Running => {
  const options: SpawnOptionsWithStdioTuple<"ignore", "pipe", "pipe"> = {
    cwd: ROOT,
    env,
    stdio: ["ignore", stdoutTo === undefined ? "pipe" : openSync(stdoutTo, "w") as unknown as "pipe", "pipe"]
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

export const stop = (running: Running): Promise<void> =>
  new Promise((resolve) => {
    if (running.child.exitCode !== null || running.child.signalCode !== null) return resolve()
    const timer = setTimeout(() => running.child.kill("SIGKILL"), 5000)
    running.child.once("exit", () => {
      clearTimeout(timer)
      resolve()
    })
    running.child.kill("SIGTERM")
  })

export const freePort = (): Promise<number> =>
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
export const listening = async (running: Running, port: number, what: string): Promise<void> => {
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

/**
 * Resolves once the process has printed `text` (a banner that says every worker listens); fails if it exits or
 * 15 s pass. Its output is the last 4000 characters, so call it soon after the start.
 */
export const printed = async (running: Running, text: string, what: string): Promise<void> => {
  const deadline = Date.now() + 15_000
  while (!running.output().includes(text)) {
    if (running.child.exitCode !== null) {
      throw new Error(`${what} exited with ${running.child.exitCode}: ${running.output()}`)
    }
    if (Date.now() > deadline) throw new Error(`${what} did not print "${text}" within 15 s: ${running.output()}`)
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
}
