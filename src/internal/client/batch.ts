/**
 * @internal Batching of script calls: calls of a script with a `many` variant, made while others are in
 * flight on the connection, in the same turn of the event loop, are queued and sent at the end of that
 * turn as one call of `many` (on a cluster, one per hash slot), whose reply holds one reply (or error)
 * per call, in order. A call on an idle connection is sent at once, as the script itself. A call
 * interrupted before its batch is sent is left out of it.
 */
import keySlot from "cluster-key-slot"
import * as Effect from "effect/Effect"
import * as Redis from "../../Redis.js"
import type * as Script from "../../Script.js"
import { redisError } from "../errors.js"
import { unexpectedReply } from "../script.js"

/** @internal The outcome of one request: its reply, or its failure. */
export type Outcome = { readonly reply: unknown } | { readonly error: Redis.RedisError }

/** @internal An outcome as an Effect. */
export const toEffect = (outcome: Outcome): Effect.Effect<unknown, Redis.RedisError> =>
  "error" in outcome ? Effect.fail(outcome.error) : Effect.succeed(outcome.reply)

/** @internal How the batcher sends: one script call, its outcome handed to `settle` once. */
export type SendScript = (
  script: Script.Script<unknown>,
  keys: ReadonlyArray<string>,
  args: ReadonlyArray<string>,
  settle: (outcome: Outcome) => void
) => void

type Resume = (effect: Effect.Effect<unknown, Redis.RedisError>) => void

/** Calls of one script waiting to be sent together: their KEYS and ARGV, already laid end to end. */
interface Batch {
  readonly keys: Array<string>
  readonly args: Array<string>
  /** How many ARGV each call brought. */
  readonly argCounts: Array<number>
  /** Where each call's reply goes; unset once the call is interrupted. */
  readonly resumes: Array<Resume | undefined>
  sent: boolean
}

/**
 * @internal A batching `script` call over `send`. `idle` says whether nothing is in flight on the
 * connection; `cluster` routes batches per hash slot.
 */
export const make = (send: SendScript, idle: () => boolean, cluster: boolean) => {
  /** Open batches by script, and on a cluster by hash slot too: one script call runs on one node. */
  const open = new Map<Script.Script<unknown>, Map<number, Batch>>()
  const slotOf = cluster ? (keys: ReadonlyArray<string>) => keySlot(keys[0]!) : () => 0

  const flush = (script: Script.Script<unknown>, slot: number, batch: Batch) => {
    if (batch.sent) return
    batch.sent = true
    const bySlot = open.get(script)
    if (bySlot?.get(slot) === batch) bySlot.delete(slot)
    let { args, keys, resumes } = batch
    if (resumes.includes(undefined)) {
      // Leave out the calls interrupted while they waited.
      const kept: { keys: Array<string>; args: Array<string>; resumes: Array<Resume> } = {
        keys: [],
        args: [],
        resumes: []
      }
      let argAt = 0
      batch.resumes.forEach((resume, i) => {
        const count = batch.argCounts[i]!
        if (resume) {
          kept.keys.push(...keys.slice(i * script.keys, (i + 1) * script.keys))
          kept.args.push(...args.slice(argAt, argAt + count))
          kept.resumes.push(resume)
        }
        argAt += count
      })
      ;({ args, keys, resumes } = kept)
    }
    if (resumes.length === 0) return
    const alone = resumes.length === 1
    const sent = alone ? script : script.many!
    send(sent, keys, args, (outcome) => {
      // Failures name the script the caller ran, not its batch; one raised inside it is a Script failure.
      const fail = (cause: unknown) => {
        const error = redisError(`script ${script.name}`, cause)
        return Effect.fail(
          error.reason === "Server"
            ? new Redis.RedisError({ reason: "Script", operation: error.operation, cause })
            : error
        )
      }
      if ("error" in outcome) {
        const { cause, reason } = outcome.error
        const error = new Redis.RedisError({ reason, operation: `script ${script.name}`, cause })
        for (const resume of resumes) resume?.(Effect.fail(error))
      } else if (alone) {
        resumes[0]?.(Effect.succeed(outcome.reply))
      } else if (Array.isArray(outcome.reply) && outcome.reply.length === resumes.length) {
        // Each call gets its own reply, or its own error: the batch script runs each call protected.
        const replies: ReadonlyArray<unknown> = outcome.reply
        for (let i = 0; i < resumes.length; i++) {
          const reply = replies[i]
          resumes[i]?.(reply instanceof Error ? fail(reply) : Effect.succeed(reply))
        }
      } else {
        const error = unexpectedReply(`script ${sent.name}`, outcome.reply, `an array of ${resumes.length} replies`)
        for (const resume of resumes) resume?.(Effect.fail(error))
      }
    })
  }

  return (script: Script.Script<unknown>, keys: ReadonlyArray<string>, args: ReadonlyArray<string>) =>
    Effect.async<unknown, Redis.RedisError>((resume) => {
      const slot = slotOf(keys)
      let bySlot = open.get(script)
      let batch = bySlot?.get(slot)
      if (batch === undefined && idle()) {
        // Nothing to wait for: an idle connection sends a lone call at once.
        return send(script, keys, args, (outcome) => resume(toEffect(outcome)))
      }
      if (batch === undefined) {
        const fresh: Batch = { keys: [], args: [], argCounts: [], resumes: [], sent: false }
        if (bySlot === undefined) open.set(script, bySlot = new Map())
        bySlot.set(slot, fresh)
        queueMicrotask(() => flush(script, slot, fresh))
        batch = fresh
      }
      const index = batch.resumes.push(resume) - 1
      for (const key of keys) batch.keys.push(key)
      for (const arg of args) batch.args.push(arg)
      batch.argCounts.push(args.length)
      // A full batch goes at once and the next call opens another, so batches overlap with the server's work.
      if (batch.resumes.length === MAX_BATCH) flush(script, slot, batch)
      const resumes = batch.resumes
      return Effect.sync(() => {
        resumes[index] = undefined
      })
    })
}

/**
 * Calls per batch. A full batch goes at once, so with many calls in flight several batches are in
 * flight together and Node builds one while Redis runs another. Measured (docs/benchmarks.md): with
 * 64 lock round trips in flight, batches of 64 made Node and Redis take turns (0.90× redis-semaphore)
 * where 32 overlapped them (1.14×); with 256 acquires in flight, all 256 in one call took turns
 * (43 000/s) and 16 paid too much per call.
 */
const MAX_BATCH = 32
