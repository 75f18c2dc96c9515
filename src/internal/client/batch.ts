/**
 * @internal Batching of script calls: calls of a script with a `many` variant, made while others are in
 * flight on the connection, are queued and sent as one call of `many` once the event loop has run the
 * callbacks it is running (`setImmediate`, not a microtask: an HTTP server gets each request in an I/O
 * callback of its own, and those of one poll phase then go together: fewer calls, less CPU per request;
 * docs/performance.md, "Figures behind design choices", has the figures). On a cluster, one call per hash
 * slot; only calls whose `shared` leading ARGV are equal go together, and those ARGV go once. The reply
 * holds one reply (or error) per call, in order, each decoded by the script's decoder. A call on an idle
 * connection is sent at once, as the script itself.
 *
 * **Interruption.** A call whose fiber is interrupted before its batch is sent is left out of it: at flush
 * time the batcher asks each waiting fiber whether it has been interrupted (in an interruptible region),
 * which is when Effect would have run a canceler. No canceler is registered per call: Effect runs each
 * one inside `onInterrupt`, which cost CPU per call, most of it garbage (docs/performance.md). (A fiber runtime
 * without the check falls back to a canceler per call.) A call interrupted after its batch is sent may
 * have run on the server: its reply is dropped.
 */
import keySlot from "cluster-key-slot"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import type * as Fiber from "effect/Fiber"
import type * as FiberStatus from "effect/FiberStatus"
import * as RuntimeFlags from "effect/RuntimeFlags"
import type * as Redis from "../../Redis.js"
import type * as Script from "../../Script.js"
import { redisError } from "../errors.js"
import { decodedReply, unexpectedReply } from "../script.js"
import * as core from "../service.js"
import * as telemetry from "../telemetry.js"

/** @internal The outcome of one request: its reply, or its failure. */
export type Outcome = { readonly reply: unknown } | { readonly error: Redis.RedisError }

/** @internal An outcome as an Effect. */
export const toEffect = (outcome: Outcome): Effect.Effect<unknown, Redis.RedisError> =>
  "error" in outcome ? Exit.fail(outcome.error) : Exit.succeed(outcome.reply)

/** @internal How the batcher sends: one script call, its outcome handed to `settle` once. */
export type SendScript = (
  script: Script.Script<unknown>,
  keys: ReadonlyArray<string>,
  args: ReadonlyArray<string>,
  settle: (outcome: Outcome) => void,
  /** The telemetry of each call the request carries (./telemetry.ts). */
  traces: ReadonlyArray<telemetry.Trace | undefined>
) => void

type Resume = (effect: Effect.Effect<unknown, Redis.RedisError>) => void

/** @internal The outcome of a call of `script`, decoded, as an Exit for its fiber to resume with. */
export const decodedExit = (script: Script.Script<unknown>, outcome: Outcome): Exit.Exit<unknown, Redis.RedisError> =>
  "error" in outcome ? Exit.fail(outcome.error) : decodedReply(script, outcome.reply)

/** @internal A fiber that can say whether it has been interrupted (Effect's FiberRuntime does). */
export interface Interruptible {
  readonly isInterrupted: () => boolean
}
const canAsk = (
  fiber: Fiber.RuntimeFiber<unknown, unknown>
): fiber is Fiber.RuntimeFiber<unknown, unknown> & Interruptible =>
  typeof (fiber as Partial<Interruptible>).isInterrupted === "function"

/** Calls of one script (and slot, and shared ARGV) waiting to be sent together. */
interface Batch {
  readonly script: Script.Script<unknown>
  readonly group: Map<string, Batch>
  readonly id: string
  readonly shared: ReadonlyArray<string>
  /** The calls' KEYS, laid end to end. */
  readonly keys: Array<string>
  /** The calls' own ARGV (after the shared ones), laid end to end. */
  readonly args: Array<string>
  /** How many own ARGV each call brought. */
  readonly argCounts: Array<number>
  /** Where each call's outcome goes; unset once the call is interrupted (the canceler fallback). */
  readonly resumes: Array<Resume | undefined>
  /** Each call's fiber, to ask at flush time whether it was interrupted; unset when it cannot be. */
  readonly fibers: Array<(Fiber.RuntimeFiber<unknown, unknown> & Interruptible) | undefined>
  /** Each call's telemetry. */
  readonly traces: Array<telemetry.Trace | undefined>
  sent: boolean
}

/**
 * @internal A batching call of a script, on the fiber making it, over `send`. `idle` says whether nothing is
 * in flight on the connection; `cluster` routes batches per hash slot.
 */
export const make = (
  send: SendScript,
  idle: () => boolean,
  cluster: boolean,
  /** Whether a fiber can be asked if it was interrupted (Effect's can; the tests can say no). */
  ask: (fiber: Fiber.RuntimeFiber<unknown, unknown>) => fiber is Fiber.RuntimeFiber<unknown, unknown> & Interruptible =
    canAsk
) => {
  /** Open batches by script, then by slot and shared ARGV: one script call runs on one node. */
  const open = new Map<Script.Script<unknown>, Map<string, Batch>>()

  const flush = (batch: Batch) => {
    if (batch.sent) return
    batch.sent = true
    if (batch.group.get(batch.id) === batch) batch.group.delete(batch.id)
    const { script } = batch
    let { args, keys, resumes, traces } = batch
    let dropped = false
    for (let i = 0; i < resumes.length; i++) {
      const fiber = batch.fibers[i]
      if (resumes[i] === undefined || (fiber !== undefined && fiber.isInterrupted())) {
        resumes[i] = undefined
        dropped = true
      }
    }
    if (dropped) {
      // Leave out the calls interrupted while they waited.
      const kept = {
        keys: [] as Array<string>,
        args: [] as Array<string>,
        resumes: [] as Array<Resume>,
        traces: [] as Array<telemetry.Trace | undefined>
      }
      let argAt = 0
      for (let i = 0; i < resumes.length; i++) {
        const count = batch.argCounts[i]!
        const resume = resumes[i]
        if (resume !== undefined) {
          for (let k = i * script.keys; k < (i + 1) * script.keys; k++) kept.keys.push(keys[k]!)
          for (let a = argAt; a < argAt + count; a++) kept.args.push(args[a]!)
          kept.resumes.push(resume)
          kept.traces.push(traces[i])
        }
        argAt += count
      }
      ;({ args, keys, resumes, traces } = kept)
    }
    if (resumes.length === 0) return
    if (resumes.length === 1) {
      const resume = resumes[0]!
      send(script, keys, [...batch.shared, ...args], (outcome) => resume(decodedExit(script, outcome)), traces)
      return
    }
    const many = script.many!
    send(many, keys, batch.shared.length === 0 ? args : [...batch.shared, ...args], (outcome) => {
      if ("error" in outcome) {
        // Failures name the script the caller ran, not its batch.
        const { cause, reason } = outcome.error
        const error = new core.RedisError({ reason, operation: `script ${script.name}`, cause })
        for (const resume of resumes) resume!(Exit.fail(error))
      } else if (Array.isArray(outcome.reply) && outcome.reply.length === resumes.length) {
        // Each call gets its own reply, or its own error: the batch script runs each call protected.
        const replies: ReadonlyArray<unknown> = outcome.reply
        for (let i = 0; i < resumes.length; i++) {
          const reply = replies[i]
          resumes[i]!(reply instanceof Error ? Exit.fail(scriptError(script, reply)) : decodedReply(script, reply))
        }
      } else {
        const error = unexpectedReply(`script ${many.name}`, outcome.reply, `an array of ${resumes.length} replies`)
        for (const resume of resumes) resume!(Exit.fail(error))
      }
    }, traces)
  }

  /**
   * A batch's id among its script's open ones: the shared ARGV (only equal ones go together), and on a
   * cluster the slot too. No allocation on the hot path (one shared ARGV, standalone).
   */
  const idOf = (script: Script.Script<unknown>, keys: ReadonlyArray<string>, args: ReadonlyArray<string>) => {
    const shared = script.many!.shared
    const own = shared === 0 ? "" : shared === 1 ? args[0]! : JSON.stringify(args.slice(0, shared))
    return cluster ? `${keySlot(keys[0]!)} ${own}` : own
  }

  /** The batch a call joins: the open one of its script and id, or a fresh one. */
  const batchOf = (script: Script.Script<unknown>, id: string, args: ReadonlyArray<string>) => {
    let group = open.get(script)
    if (group === undefined) open.set(script, group = new Map<string, Batch>())
    let batch = group.get(id)
    if (batch === undefined) {
      const fresh: Batch = {
        script,
        group,
        id,
        shared: script.many!.shared === 0 ? NONE : args.slice(0, script.many!.shared),
        keys: [],
        args: [],
        argCounts: [],
        resumes: [],
        fibers: [],
        traces: [],
        sent: false
      }
      group.set(id, fresh)
      setImmediate(() => flush(fresh))
      batch = fresh
    }
    return batch
  }

  /** Queues a call; returns its index in the batch. */
  const enqueue = (
    batch: Batch,
    keys: ReadonlyArray<string>,
    args: ReadonlyArray<string>,
    resume: Resume,
    fiber: (Fiber.RuntimeFiber<unknown, unknown> & Interruptible) | undefined,
    trace: telemetry.Trace | undefined
  ) => {
    const shared = batch.shared.length
    const index = batch.resumes.push(resume) - 1
    batch.fibers.push(fiber)
    batch.traces.push(trace)
    for (let i = 0; i < keys.length; i++) batch.keys.push(keys[i]!)
    for (let i = shared; i < args.length; i++) batch.args.push(args[i]!)
    batch.argCounts.push(args.length - shared)
    // A full batch goes at once and the next call opens another, so batches overlap with the server's work.
    if (batch.resumes.length === MAX_BATCH) flush(batch)
    return index
  }

  /** A call of `script` made by `fiber` (running with `status`): batched, or sent at once on an idle connection. */
  const on = (
    fiber: Fiber.RuntimeFiber<unknown, unknown>,
    status: FiberStatus.Running,
    script: Script.Script<unknown>,
    keys: ReadonlyArray<string>,
    args: ReadonlyArray<string>
  ): Effect.Effect<unknown, Redis.RedisError> => {
    const id = idOf(script, keys, args)
    const trace = telemetry.traceOf(fiber)
    if (idle() && open.get(script)?.get(id) === undefined) {
      // Nothing to wait for: an idle connection sends a lone call at once.
      return Effect.async((resume) =>
        send(script, keys, args, (outcome) => resume(decodedExit(script, outcome)), [trace])
      )
    }
    if (!RuntimeFlags.interruptible(status.runtimeFlags)) {
      // Nothing can interrupt the call while it waits.
      return Effect.async((resume) => {
        enqueue(batchOf(script, id, args), keys, args, resume, undefined, trace)
      })
    }
    if (ask(fiber)) {
      return Effect.async((resume) => {
        enqueue(batchOf(script, id, args), keys, args, resume, fiber, trace)
      })
    }
    return Effect.async((resume) => {
      const batch = batchOf(script, id, args)
      const index = enqueue(batch, keys, args, resume, undefined, trace)
      return Effect.sync(() => {
        batch.resumes[index] = undefined
      })
    })
  }
  return on
}

const NONE: ReadonlyArray<string> = []

/** A failure raised inside a batched call: a Script failure of the script the caller ran. */
const scriptError = (script: Script.Script<unknown>, cause: Error) => {
  const error = redisError(`script ${script.name}`, cause)
  return error.reason === "Server"
    ? new core.RedisError({ reason: "Script", operation: error.operation, cause })
    : error
}

/**
 * Calls per batch. A full batch goes at once, so with many calls in flight several batches are in
 * flight together and Node builds one while Redis runs another. Larger batches made Node and Redis take
 * turns, smaller ones paid too much per call (docs/performance.md, "Figures behind design choices").
 */
const MAX_BATCH = 32
