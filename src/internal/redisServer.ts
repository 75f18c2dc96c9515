/** @internal Throwaway redis-server processes and local clusters, for `wakuwaku/testing`. */
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import type * as Scope from "effect/Scope"
import { Redis as IORedis } from "ioredis"
import { type ChildProcess, spawn } from "node:child_process"
import { existsSync, mkdtempSync, rmSync } from "node:fs"
import { createServer } from "node:net"
import { tmpdir } from "node:os"
import { delimiter, join } from "node:path"
import type * as Redis from "../Redis.js"
import type * as RedisServer from "../RedisServer.js"
import { toMillis } from "./duration.js"
import * as redis from "./redis.js"
import * as values from "./redisServer/values.js"

const READY = "Ready to accept connections"
const IN_USE = "Address already in use"

const onPath = (binary: string) =>
  (process.env["PATH"] ?? "").split(delimiter).some((dir) => dir !== "" && existsSync(join(dir, binary)))

const freePort = Effect.async<number, RedisServer.RedisServerError>((resume) => {
  const server = createServer()
  server.unref()
  server.on("error", (cause) => resume(Effect.fail(failure("StartFailed", `no free port: ${cause.message}`))))
  server.listen(0, "127.0.0.1", () => {
    const address = server.address()
    const port = typeof address === "object" && address !== null ? address.port : 0
    server.close(() => resume(Effect.succeed(port)))
  })
})

const failure = (reason: RedisServer.RedisServerError["reason"], message: string) =>
  new values.RedisServerError({ reason, message })

type Attempt = { readonly _tag: "Started"; readonly child: ChildProcess } | { readonly _tag: "InUse" }

const spawnOnce = (binary: string, port: number, args: ReadonlyArray<string>, timeoutMs: number) =>
  Effect.async<Attempt, RedisServer.RedisServerError>((resume) => {
    const argv = [
      "--port",
      String(port),
      "--bind",
      "127.0.0.1",
      "--save",
      "",
      "--appendonly",
      "no",
      "--daemonize",
      "no",
      "--logfile",
      "",
      ...args
    ]
    // With setpriv the server gets SIGKILL when this process dies, however it dies.
    const child = onPath("setpriv")
      ? spawn("setpriv", ["--pdeathsig", "SIGKILL", "--", binary, ...argv], { stdio: ["ignore", "pipe", "pipe"] })
      : spawn(binary, argv, { stdio: ["ignore", "pipe", "pipe"] })
    let output = ""
    let settled = false
    const settle = (effect: Effect.Effect<Attempt, RedisServer.RedisServerError>) => {
      if (settled) return
      settled = true
      clearTimeout(timer)
      child.stdout?.removeListener("data", onData)
      child.removeListener("exit", onExit)
      resume(effect)
    }
    const onData = (chunk: Buffer) => {
      output += chunk.toString()
      if (output.includes(READY)) settle(Effect.succeed({ _tag: "Started", child }))
    }
    const onExit = (code: number | null) =>
      settle(
        output.includes(IN_USE)
          ? Effect.succeed({ _tag: "InUse" })
          : Effect.fail(failure("StartFailed", `redis-server exited with ${code}: ${output.trim().slice(-500)}`))
      )
    const timer = setTimeout(() => {
      child.kill("SIGKILL")
      settle(Effect.fail(failure("Timeout", `redis-server was not ready within ${timeoutMs} ms`)))
    }, timeoutMs)
    child.stdout?.on("data", onData)
    // Keep draining the logs, or a full pipe would stall the server.
    child.stderr?.resume()
    child.on("exit", onExit)
    child.on("error", (cause) => settle(Effect.fail(failure("StartFailed", cause.message))))
    return Effect.sync(() => {
      settled = true
      clearTimeout(timer)
      child.kill("SIGKILL")
    })
  })

const stop = (child: ChildProcess) =>
  Effect.async<void>((resume) => {
    if (child.exitCode !== null || child.signalCode !== null) return resume(Effect.void)
    const timer = setTimeout(() => child.kill("SIGKILL"), 2000)
    child.once("exit", () => {
      clearTimeout(timer)
      resume(Effect.void)
    })
    child.kill("SIGTERM")
  })

/** @internal */
export const make = (
  options: RedisServer.Options = {},
  /** Arguments that depend on the port chosen (a cluster's bus port). */
  argsOf: (port: number) => ReadonlyArray<string> = () => []
): Effect.Effect<RedisServer.Server, RedisServer.RedisServerError, Scope.Scope> => {
  const binary = options.binary ?? "redis-server"
  const timeoutMs = toMillis(options.startTimeout ?? "10 seconds")
  const attempt = (
    left: number,
    dir: string
  ): Effect.Effect<ChildProcess & { port: number }, RedisServer.RedisServerError> =>
    Effect.flatMap(
      options.port === undefined ? freePort : Effect.succeed(options.port),
      (port) =>
        Effect.flatMap(
          spawnOnce(binary, port, ["--dir", dir, ...(options.args ?? []), ...argsOf(port)], timeoutMs),
          (result) => {
            if (result._tag === "Started") return Effect.succeed(Object.assign(result.child, { port }))
            return left > 1 && options.port === undefined
              ? attempt(left - 1, dir)
              : Effect.fail(failure("StartFailed", `port ${port}: ${IN_USE}`))
          }
        )
    )
  return Effect.suspend(() =>
    onPath(binary) || binary.includes("/")
      ? Effect.flatMap(
        // A working directory of its own, deleted with it: a replica's full sync writes its RDB there.
        Effect.acquireRelease(
          Effect.sync(() => mkdtempSync(join(tmpdir(), "wakuwaku-redis-"))),
          (dir) => Effect.sync(() => rmSync(dir, { recursive: true, force: true }))
        ),
        (dir) => Effect.acquireRelease(attempt(5, dir), stop)
      )
      : Effect.fail(failure("NotInstalled", `${binary} is not on PATH (Debian: apt-get install redis-server)`))
  ).pipe(
    Effect.map((child) => {
      // Drain the logs from here on.
      child.stdout?.resume()
      return Object.freeze({
        host: "127.0.0.1",
        port: child.port,
        url: `redis://127.0.0.1:${child.port}`,
        pid: child.pid ?? -1
      })
    })
  )
}

/** @internal */
export const layer = (
  options: RedisServer.Options = {},
  client: Omit<Redis.Options, "url"> = {}
): Layer.Layer<Redis.ReadWrite | RedisServer.RedisServer, RedisServer.RedisServerError | Redis.RedisError> =>
  Layer.unwrapScoped(
    Effect.map(
      make(options),
      (server) => Layer.merge(Layer.succeed(values.RedisServer, server), redis.layer({ ...client, url: server.url }))
    )
  )

/** @internal Runs a command to completion; fails with its output when it exits non-zero. */
const run = (command: string, args: ReadonlyArray<string>, timeoutMs: number) =>
  Effect.async<string, RedisServer.RedisServerError>((resume) => {
    const child = spawn(command, args, { stdio: ["ignore", "pipe", "pipe"] })
    let output = ""
    child.stdout?.on("data", (chunk: Buffer) => (output += chunk.toString()))
    child.stderr?.on("data", (chunk: Buffer) => (output += chunk.toString()))
    const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs)
    child.on("error", (cause) => resume(Effect.fail(failure("StartFailed", `${command}: ${cause.message}`))))
    child.on("exit", (code) => {
      clearTimeout(timer)
      resume(
        code === 0
          ? Effect.succeed(output)
          : Effect.fail(
            failure("StartFailed", `${command} ${args.join(" ")} exited with ${code}: ${output.trim().slice(-500)}`)
          )
      )
    })
    return Effect.sync(() => {
      clearTimeout(timer)
      child.kill("SIGKILL")
    })
  })

/** A call to a node while the cluster forms; a failure is StartFailed, with what was being done. */
const ask = <A>(what: string, call: () => Promise<A>) =>
  Effect.tryPromise({
    try: call,
    catch: (cause) => failure("StartFailed", `${what}: ${cause instanceof Error ? cause.message : String(cause)}`)
  })

/**
 * Polls `check` every 50 ms until it holds, for at most `timeoutMs` of Effect's clock. A failing check
 * (a node not answering yet) counts as not yet.
 */
const until = (what: string, timeoutMs: number, check: () => Promise<boolean>) =>
  Effect.gen(function*() {
    const deadline = (yield* Clock.currentTimeMillis) + timeoutMs
    while (!(yield* Effect.orElseSucceed(ask(what, check), () => false))) {
      if ((yield* Clock.currentTimeMillis) > deadline) {
        return yield* Effect.fail(failure("Timeout", `${what} not within ${timeoutMs} ms`))
      }
      yield* Effect.sleep("50 millis")
    }
  })

/** @internal */
export const makeCluster = (
  options: RedisServer.ClusterOptions = {}
): Effect.Effect<RedisServer.RedisCluster, RedisServer.RedisServerError, Scope.Scope> =>
  Effect.gen(function*() {
    const masters = options.masters ?? 3
    const replicas = options.replicasPerMaster ?? 1
    const timeoutMs = toMillis(options.startTimeout ?? "30 seconds")
    if (!Number.isSafeInteger(masters) || masters < 3 || !Number.isSafeInteger(replicas) || replicas < 0) {
      return yield* Effect.fail(
        failure(
          "StartFailed",
          `a cluster needs at least 3 masters and 0 or more replicas each, got ${masters} and ${replicas}`
        )
      )
    }
    // Each node's cluster state lives in a file of this directory, deleted with the cluster.
    const dir = yield* Effect.acquireRelease(
      Effect.sync(() => mkdtempSync(join(tmpdir(), "wakuwaku-cluster-"))),
      (dir) => Effect.sync(() => rmSync(dir, { recursive: true, force: true }))
    )
    const nodes = yield* Effect.all(
      Array.from({ length: masters * (1 + replicas) }, (_, i) =>
        make({
          ...(options.binary === undefined ? {} : { binary: options.binary }),
          args: [
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            join(dir, `nodes-${i}.conf`),
            "--cluster-node-timeout",
            "2000",
            "--repl-diskless-sync-delay",
            "0"
          ]
        }, (port) => ["--cluster-port", String(port + 100)])),
      { concurrency: "unbounded" }
    )
    yield* run("redis-cli", [
      "--cluster",
      "create",
      ...nodes.map((node) => `${node.host}:${node.port}`),
      "--cluster-replicas",
      String(replicas),
      "--cluster-yes"
    ], timeoutMs)
    const clients = yield* Effect.acquireRelease(
      Effect.sync(() =>
        nodes.map((node) => new IORedis(node.port, node.host, { lazyConnect: true, maxRetriesPerRequest: 1 }))
      ),
      (clients) => Effect.sync(() => clients.forEach((client) => client.disconnect()))
    )
    yield* until("cluster_state:ok on every node", timeoutMs, async () =>
      (await Promise.all(clients.map((client) =>
        client.cluster("INFO")
      ))).every((info) =>
        String(info).includes("cluster_state:ok")
      ))
    const roles = yield* ask("INFO replication", () =>
      Promise.all(clients.map((client) => client.info("replication"))))
    const isReplica = roles.map((info) => String(info).includes("role:slave"))
    yield* until("every replica's master_link_status:up", timeoutMs, async () =>
      (await Promise.all(
        clients.filter((_, i) => isReplica[i]).map((client) => client.info("replication"))
      ))
        .every((info) => String(info).includes("master_link_status:up")))
    if (replicas > 0) {
      // CLUSTER SLOTS lists a replica only once its replication offset is not 0, which takes one write
      // on its master: without it a client would see no replica to read from (scaleReads).
      yield* ask(
        "FLUSHALL on the masters",
        () => Promise.all(clients.filter((_, i) => !isReplica[i]).map((client) => client.flushall()))
      )
      yield* until("every replica listed in CLUSTER SLOTS", timeoutMs, async () =>
        (await Promise.all(clients.map((client) =>
          client.cluster("SLOTS") as Promise<Array<Array<unknown>>>
        )))
          .every((ranges) =>
            ranges.every((range) => range.length >= 3 + replicas)
          ))
    }
    return Object.freeze({
      nodes,
      masters: nodes.filter((_, i) => !isReplica[i]),
      replicas: nodes.filter((_, i) => isReplica[i])
    })
  })
