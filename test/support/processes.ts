/**
 * Several OS processes released at once, for the concurrency tests. Each runs `script` (TypeScript,
 * bundled by ./spawn.ts) with `args`, prints "ready" once connected, waits for "go" on stdin, does its work and
 * prints one result line.
 */
import { Redis as IORedis } from "ioredis"
import { type ChildProcessWithoutNullStreams, spawn } from "node:child_process"
import { createInterface } from "node:readline"
import { nodeArgs } from "./spawn.js"

const lines = (child: ChildProcessWithoutNullStreams) => {
  const queue: Array<string> = []
  const waiting: Array<(line: string) => void> = []
  createInterface({ input: child.stdout }).on("line", (line) => {
    const next = waiting.shift()
    if (next) next(line)
    else queue.push(line)
  })
  return () => new Promise<string>((resolve) => queue.length > 0 ? resolve(queue.shift()!) : waiting.push(resolve))
}

/** Server time in µs. */
export const serverTime = async (client: IORedis): Promise<number> => {
  const [s, us] = await client.time()
  return Number(s) * 1_000_000 + Number(us)
}

/**
 * Starts `count` processes, waits until all are ready, runs `beforeGo`, releases them at once, and
 * collects their result lines, with the server time (µs) before the release and after the last result.
 * `args` are every process's, or a function of its index for processes that play different parts.
 */
export const runProcesses = async (
  client: IORedis,
  script: string,
  count: number,
  args: ReadonlyArray<string | number> | ((index: number) => ReadonlyArray<string | number>),
  beforeGo: () => Promise<void> = async () => {}
): Promise<{ readonly results: ReadonlyArray<string>; readonly started: number; readonly ended: number }> => {
  const program = nodeArgs(script)
  const children = Array.from({ length: count }, (_, index) => {
    const own = typeof args === "function" ? args(index) : args
    const child = spawn(process.execPath, [...program, ...own.map(String)], {
      stdio: ["pipe", "pipe", "pipe"]
    })
    let stderr = ""
    child.stderr.on("data", (chunk) => (stderr += chunk))
    const exited = new Promise<void>((resolve, reject) =>
      child.on("exit", (code) => code === 0 ? resolve() : reject(new Error(`${script} exited ${code}: ${stderr}`)))
    )
    return { child, next: lines(child), exited }
  })
  for (const { next } of children) {
    const line = await next()
    if (line !== "ready") throw new Error(`expected "ready", got ${JSON.stringify(line)}`)
  }
  const started = await serverTime(client)
  await beforeGo()
  for (const { child } of children) child.stdin.write("go\n")
  const results = await Promise.all(children.map(({ next }) => next()))
  const ended = await serverTime(client)
  await Promise.all(children.map(({ exited }) => exited))
  return { results, started, ended }
}

/** In a worker: prints "ready", then resolves when the parent says "go". */
export const readyThenGo = (): Promise<void> =>
  new Promise((resolve) => {
    const input = createInterface({ input: process.stdin })
    input.on("line", (line) => {
      if (line.trim() === "go") {
        input.close()
        resolve()
      }
    })
    process.stdout.write("ready\n")
  })
