/**
 * Real sockets for the proxy's tests: upstream servers (node:http) on free loopback ports, the
 * `wakuwaku` command run as a child process, raw HTTP/1.1 exchanges, deterministic data streams with
 * checksums, and a child's resident memory.
 */
import { type ChildProcess, spawn } from "node:child_process"
import { createHash, type Hash } from "node:crypto"
import { readFileSync } from "node:fs"
import * as Http from "node:http"
import type { AddressInfo } from "node:net"
import * as Net from "node:net"
import { Readable } from "node:stream"
import { fileURLToPath } from "node:url"
import { nodeArgs } from "./spawn.js"

export const ROOT = fileURLToPath(new URL("../..", import.meta.url))

/** A local upstream server. */
export interface Upstream {
  readonly port: number
  readonly url: string
  readonly close: () => Promise<void>
}

/** Starts a node:http server on a free loopback port. */
export const upstream = async (handler: Http.RequestListener): Promise<Upstream> => {
  const server = Http.createServer(handler)
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  const port = (server.address() as AddressInfo).port
  return {
    port,
    url: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      })
  }
}

/** A port nothing listens on: bound, then released. */
export const closedPort = async (): Promise<number> => {
  const server = Net.createServer()
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  const port = (server.address() as AddressInfo).port
  await new Promise<void>((resolve) => server.close(() => resolve()))
  return port
}

/** A response: its status, its header lines as sent, its body. */
export interface Reply {
  readonly status: number
  /** [name as sent, value], in order, one entry per header line. */
  readonly headers: ReadonlyArray<readonly [string, string]>
  readonly body: Buffer
}

/** Header values by lowercase name, in order. */
export const valuesOf = (reply: Reply, name: string): Array<string> =>
  reply.headers.filter(([n]) => n.toLowerCase() === name).map(([, v]) => v)

/** The one value of a header, or `undefined`; two lines of it fail the test. */
export const valueOf = (reply: Reply, name: string): string | undefined => {
  const values = valuesOf(reply, name)
  if (values.length > 1) throw new Error(`${values.length} ${name} lines: ${JSON.stringify(values)}`)
  return values[0]
}

/**
 * Sends one request on a fresh connection, with exactly the headers given (Node adds only `Host` when
 * absent, and `Connection` or `Transfer-Encoding` when those are not given), and reads the response.
 */
export const request = (
  port: number,
  options: {
    readonly method?: string
    readonly path?: string
    readonly headers?: Record<string, string | ReadonlyArray<string>>
    readonly body?: string | Buffer | Readable
    /** Receives the body instead of keeping it (then `body` is empty). */
    readonly onData?: (chunk: Buffer) => void
  } = {}
) =>
  new Promise<Reply>((resolve, reject) => {
    const req = Http.request({
      host: "127.0.0.1",
      port,
      agent: false,
      method: options.method ?? "GET",
      path: options.path ?? "/",
      headers: options.headers as Http.OutgoingHttpHeaders
    })
    req.on("response", (response) => {
      const chunks: Array<Buffer> = []
      response.on("data", options.onData ?? ((chunk: Buffer) => chunks.push(chunk)))
      response.on("end", () => {
        const headers: Array<readonly [string, string]> = []
        for (let i = 0; i < response.rawHeaders.length; i += 2) {
          headers.push([response.rawHeaders[i] ?? "", response.rawHeaders[i + 1] ?? ""])
        }
        resolve({ status: response.statusCode ?? 0, headers, body: Buffer.concat(chunks) })
      })
      response.on("error", reject)
    })
    req.on("error", reject)
    const body = options.body
    if (body instanceof Readable) body.pipe(req)
    else req.end(body)
  })

/** Deterministic bytes: `total` of them in 64 KiB chunks derived from `seed`, hashed as they are made. */
export const dataStream = (
  total: number,
  seed: number
): { readonly stream: Readable; readonly sha256: () => string } => {
  const hash = createHash("sha256")
  const block = Buffer.alloc(64 * 1024)
  let x = seed >>> 0 || 1
  for (let i = 0; i < block.length; i += 4) {
    x ^= x << 13
    x ^= x >>> 17
    x ^= x << 5
    block.writeUInt32LE(x >>> 0, i)
  }
  let sent = 0
  let n = 0
  const stream = new Readable({
    highWaterMark: 64 * 1024,
    read() {
      if (sent >= total) return void this.push(null)
      // Each chunk differs (its first 4 bytes count chunks), so a dropped or repeated chunk changes the hash.
      const size = Math.min(block.length, total - sent)
      const chunk = Buffer.from(block.subarray(0, size))
      if (size >= 4) chunk.writeUInt32LE(n++, 0)
      sent += size
      hash.update(chunk)
      this.push(chunk)
    }
  })
  return { stream, sha256: () => hash.digest("hex") }
}

/** Counts and hashes bytes going by. */
export const counter = (): {
  readonly add: (chunk: Buffer) => void
  readonly bytes: () => number
  readonly sha256: () => string
} => {
  const hash: Hash = createHash("sha256")
  let bytes = 0
  return {
    add: (chunk) => {
      bytes += chunk.length
      hash.update(chunk)
    },
    bytes: () => bytes,
    sha256: () => hash.digest("hex")
  }
}

/** The resident set size of a process, in bytes (Linux). */
export const rss = (pid: number): number => {
  const match = /VmRSS:\s+(\d+)\s+kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))
  return match?.[1] === undefined ? 0 : Number(match[1]) * 1024
}

/** Samples `rss(pid)` every `ms` until stopped; `max` is the largest sample. */
export const sampleRss = (pid: number, ms = 10) => {
  let max = rss(pid)
  const timer = setInterval(() => {
    try {
      max = Math.max(max, rss(pid))
    } catch {
      // The process has exited.
    }
  }, ms)
  return {
    stop: () => {
      clearInterval(timer)
      return max
    }
  }
}

/** The environment of a child: this one's, without any variable the command reads. */
export const cleanEnv = (extra: Record<string, string> = {}): NodeJS.ProcessEnv => {
  const env: NodeJS.ProcessEnv = {}
  for (const [name, value] of Object.entries(process.env)) {
    if (!name.startsWith("WAKUWAKU_") && name !== "REDIS_URL") env[name] = value
  }
  return { ...env, ...extra }
}

/** Spawns `wakuwaku <args>` from the sources (bundled: ./spawn.ts), as its own process. */
export const spawnCli = (args: ReadonlyArray<string>, env: NodeJS.ProcessEnv = cleanEnv()): ChildProcess =>
  spawn(process.execPath, [...nodeArgs("src/bin.ts"), ...args], {
    cwd: ROOT,
    env,
    stdio: ["ignore", "pipe", "pipe"]
  })

/** What a finished command did. */
export interface Outcome {
  readonly code: number | null
  readonly signal: NodeJS.Signals | null
  readonly stdout: string
  readonly stderr: string
}

/** Collects a child's output until it exits. */
export const outcome = (child: ChildProcess): Promise<Outcome> =>
  new Promise((resolve, reject) => {
    let stdout = ""
    let stderr = ""
    child.stdout?.on("data", (chunk: Buffer) => (stdout += chunk.toString()))
    child.stderr?.on("data", (chunk: Buffer) => (stderr += chunk.toString()))
    child.on("error", reject)
    child.on("close", (code, signal) => resolve({ code, signal, stdout, stderr }))
  })

/** Runs `wakuwaku <args>` to the end. */
export const runCli = (args: ReadonlyArray<string>, env?: NodeJS.ProcessEnv): Promise<Outcome> =>
  outcome(spawnCli(args, env))

/** A running `wakuwaku proxy`: its process, its port, and how it ends. */
export interface RunningProxy {
  readonly child: ChildProcess
  readonly pid: number
  readonly port: number
  readonly exited: Promise<Outcome>
  /** Everything it has written to stdout so far. */
  readonly stdout: () => string
}

/** Starts `wakuwaku proxy <args> --host 127.0.0.1 --port 0` and waits until it listens. */
export const startProxy = async (args: ReadonlyArray<string>, env?: NodeJS.ProcessEnv): Promise<RunningProxy> => {
  const child = spawnCli(["proxy", "--host", "127.0.0.1", "--port", "0", ...args], env)
  const exited = outcome(child)
  let stdout = ""
  child.stdout?.on("data", (chunk: Buffer) => (stdout += chunk.toString()))
  const port = await new Promise<number>((resolve, reject) => {
    let seen = ""
    const onData = (chunk: Buffer) => {
      seen += chunk.toString()
      const match = /listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(seen)
      if (match?.[1] !== undefined) {
        child.stdout?.off("data", onData)
        resolve(Number(match[1]))
      }
    }
    child.stdout?.on("data", onData)
    void exited.then((o) => reject(new Error(`wakuwaku proxy exited (${o.code}) before listening: ${o.stderr}`)))
  })
  return { child, pid: child.pid!, port, exited, stdout: () => stdout }
}

/** A resolve hook that refuses every module of @effect/platform(-node). */
const REFUSING_HOOK = `export async function resolve(specifier, context, next) {
  const resolved = await next(specifier, context)
  if (/[\\\\/]node_modules[\\\\/]@effect[\\\\/]platform(-node)?[\\\\/]/.test(resolved.url)) {
    throw new Error("refused to load " + resolved.url)
  }
  return resolved
}`

/**
 * A module to `--import` (as a data URL) that registers {@link REFUSING_HOOK}: a process started with
 * it fails at once if anything loads the platform.
 */
export const REFUSE_PLATFORM = `import { register } from "node:module"
register(${JSON.stringify(`data:text/javascript,${encodeURIComponent(REFUSING_HOOK)}`)})`
