/**
 * @internal The `Redis` service over an ioredis client: each request with its deadline, EVALSHA with the
 * NOSCRIPT fallback, and the routing of each kind of call: scripts (batched when they can be: ./client/batch.ts),
 * commands (keyspace commands on every master of a cluster: ./client/cluster.ts) and dedicated connections
 * (./client/dedicated.ts).
 */
import * as Effect from "effect/Effect"
import type * as Fiber from "effect/Fiber"
import type * as FiberStatus from "effect/FiberStatus"
import { Cluster } from "ioredis"
import type { Redis as IORedis } from "ioredis"
import type * as Redis from "../Redis.js"
import type * as Script from "../Script.js"
import * as batch from "./client/batch.js"
import { decodedExit, type Outcome, toEffect } from "./client/batch.js"
import { EVERY_MASTER, onEveryMaster } from "./client/cluster.js"
import type { Deadlines } from "./client/deadlines.js"
import { dedicated } from "./client/dedicated.js"
import { redisError, timedOut } from "./errors.js"
import { checkKeys, scriptEntry, type ScriptOn } from "./script.js"
import * as core from "./service.js"
import * as telemetry from "./telemetry.js"

export { Deadlines } from "./client/deadlines.js"

const isNoScript = (cause: unknown) => cause instanceof Error && cause.message.startsWith("NOSCRIPT")

/**
 * @internal The service over a client.
 *
 * - `deadlines`, when given, bounds how long a call waits for its reply.
 * - `last`, when given (an owned client's, see `watch` in ./errors.ts), is the last error the connection
 *   reported: a call that could not be sent fails with it, the socket's or the server's words.
 * - A script's reply is decoded by its decoder; a script with a `many` variant is batched (./client/batch.ts).
 */
export const make = (client: IORedis | Cluster, deadlines?: Deadlines, last?: () => unknown): Redis.Service => {
  /** Requests sent and not yet answered. */
  let inFlight = 0
  const server: telemetry.Server = client instanceof Cluster
    ? { system: telemetry.SYSTEM.redis }
    : { system: telemetry.SYSTEM.redis, address: client.options.host, port: client.options.port }

  /** Sends one request and hands its outcome to `settle`, once: the reply, a failure or the deadline. */
  const send = (
    operation: () => string,
    run: () => Promise<unknown>,
    retry: ((cause: unknown) => Promise<unknown> | undefined) | undefined,
    settle: (outcome: Outcome) => void,
    call: telemetry.Call
  ) => {
    let done = false
    inFlight++
    const finish = (outcome: Outcome) => {
      if (done) return
      done = true
      inFlight--
      call.end("error" in outcome ? outcome.error : undefined)
      if (entry) deadlines!.untrack(entry)
      settle(outcome)
    }
    const entry = deadlines?.track(() => finish({ error: redisError(operation(), timedOut(deadlines.timeout, last)) }))
    const onError = (cause: unknown) => finish({ error: redisError(operation(), cause, last) })
    const onReply = (reply: unknown) => finish({ reply })
    run().then(onReply, (cause: unknown) => {
      const again = retry?.(cause)
      if (again) again.then(onReply, onError)
      else onError(cause)
    })
  }

  /**
   * EVALSHA, and EVAL when the server has lost its script cache (a restart, SCRIPT FLUSH): NOSCRIPT.
   * A read-only script goes as EVALSHA_RO / EVAL_RO, which replicas serve.
   */
  const sendScript = (
    script: Script.Script<unknown>,
    keys: ReadonlyArray<string>,
    args: ReadonlyArray<string>,
    settle: (outcome: Outcome) => void,
    traces: ReadonlyArray<telemetry.Trace | undefined>
  ) =>
    send(
      () => `script ${script.name}`,
      script.readOnly === true
        ? () => client.call("evalsha_ro", script.sha1, keys.length, ...keys, ...args)
        : () => client.evalsha(script.sha1, keys.length, ...keys, ...args),
      (cause) =>
        !isNoScript(cause)
          ? undefined
          : script.readOnly === true
          ? client.call("eval_ro", script.lua, keys.length, ...keys, ...args)
          : client.eval(script.lua, keys.length, ...keys, ...args),
      settle,
      telemetry.storeCall(traces, server, script.readOnly ? "EVALSHA_RO" : "EVALSHA", script.name, traces.length)
    )

  const batched = batch.make(sendScript, () => inFlight === 0, client instanceof Cluster)

  const scriptOn = <A>(
    fiber: Fiber.RuntimeFiber<unknown, unknown>,
    status: FiberStatus.Running,
    script: Script.Script<A>,
    keys: ReadonlyArray<string>,
    args: ReadonlyArray<string>
  ): Effect.Effect<A, Redis.RedisError> => {
    const call = script as Script.Script<unknown>
    const wrong = checkKeys(call, keys)
    const run: Effect.Effect<unknown, Redis.RedisError> = wrong !== undefined
      ? Effect.dieMessage(wrong)
      : call.many !== undefined
      ? batched(fiber, status, call, keys, args)
      : Effect.async((resume) =>
        sendScript(call, keys, args, (outcome) => resume(decodedExit(call, outcome)), [telemetry.traceOf(fiber)])
      )
    return run as Effect.Effect<A, Redis.RedisError>
  }

  const service: Redis.Service & ScriptOn = {
    [core.TypeId]: core.TypeId,
    ...scriptEntry(scriptOn),
    command: (name, args) =>
      Effect.withFiberRuntime((fiber) =>
        Effect.async((resume) =>
          send(
            () => name,
            client instanceof Cluster && EVERY_MASTER.has(name.toUpperCase())
              ? () => onEveryMaster(client, name, args)
              : () => client.call(name, ...args),
            undefined,
            (o) => resume(toEffect(o)),
            telemetry.storeCall([telemetry.traceOf(fiber)], server, name.toUpperCase(), undefined, 1)
          )
        )
      ),
    dedicated: dedicated(client, (id, via) =>
      Effect.async((resume) =>
        send(
          () => "CLIENT KILL",
          () => (via ?? (client as IORedis)).call("CLIENT", "KILL", "ID", id),
          undefined,
          (o) => resume(toEffect(o)),
          telemetry.storeCall([], server, "CLIENT", undefined, 1)
        )
      ))
  }
  return service
}
