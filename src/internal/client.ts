/**
 * @internal The `Redis` service over an ioredis client: command deadlines, EVALSHA with the NOSCRIPT
 * fallback, and batching of concurrent script calls.
 */
import * as Effect from "effect/Effect"
import type { Cluster, Redis as IORedis } from "ioredis"
import * as Redis from "../Redis.js"
import { redisError } from "./errors.js"

type Resume = (effect: Effect.Effect<unknown, Redis.RedisError>) => void

/**
 * @internal Command deadlines, kept here rather than by ioredis, whose `commandTimeout` arms a timer per
 * command (about 4 µs of CPU and 6 µs of latency per call in the benchmark). Calls enter a set in the
 * order they start; all share one timeout, so that order is deadline order, and one interval fails the
 * overdue ones from the front. A call fails between `timeout` and `timeout + tick` after it started.
 */
export class Deadlines {
  private readonly pending = new Set<{ readonly deadline: number; readonly expire: () => void }>()
  private readonly timer: ReturnType<typeof setInterval>
  constructor(readonly timeout: number) {
    this.timer = setInterval(() => this.sweep(), Math.max(5, Math.min(100, timeout / 10)))
    this.timer.unref()
  }
  track(expire: () => void) {
    const entry = { deadline: performance.now() + this.timeout, expire }
    this.pending.add(entry)
    return entry
  }
  untrack(entry: { readonly deadline: number; readonly expire: () => void }) {
    this.pending.delete(entry)
  }
  private sweep() {
    const now = performance.now()
    for (const entry of this.pending) {
      if (entry.deadline > now) return
      this.pending.delete(entry)
      entry.expire()
    }
  }
  close() {
    clearInterval(this.timer)
  }
}

const isNoScript = (cause: unknown) => cause instanceof Error && cause.message.startsWith("NOSCRIPT")

/** Calls of one script waiting to be sent together: their KEYS and ARGV, already laid end to end. */
interface Batch {
  readonly keys: Array<string>
  readonly args: Array<string>
  /** Where each call's reply goes; unset once the call is interrupted. */
  readonly resumes: Array<Resume | undefined>
  sent: boolean
}

/**
 * @internal The service over a client.
 *
 * - `deadlines`, when given, bounds how long a call waits for its reply.
 * - A script with a `many` variant is batched: calls made in the same turn of the event loop (while
 *   replies to earlier calls are being handled, say) are queued and sent, at the end of that turn, as
 *   one call of `many`, whose reply holds one reply per call, in order. A lone call is sent as the
 *   script itself. A call interrupted before its batch is sent is left out of it.
 */
export const make = (client: IORedis | Cluster, deadlines?: Deadlines): Redis.Redis => {
  /** Requests sent and not yet answered. */
  let inFlight = 0

  /** Sends one request and hands its outcome to `settle`, once: the reply, a failure or the deadline. */
  const send = (
    operation: () => string,
    run: () => Promise<unknown>,
    retry: ((cause: unknown) => Promise<unknown> | undefined) | undefined,
    settle: (outcome: Outcome) => void
  ) => {
    let done = false
    inFlight++
    const finish = (outcome: Outcome) => {
      if (done) return
      done = true
      inFlight--
      if (entry) deadlines!.untrack(entry)
      settle(outcome)
    }
    const entry = deadlines?.track(() =>
      finish({ error: redisError(operation(), new Error(`Command timed out after ${deadlines.timeout} ms`)) })
    )
    const onError = (cause: unknown) => finish({ error: redisError(operation(), cause) })
    const onReply = (reply: unknown) => finish({ reply })
    run().then(onReply, (cause: unknown) => {
      const again = retry?.(cause)
      if (again) again.then(onReply, onError)
      else onError(cause)
    })
  }

  /** EVALSHA, and EVAL when the server has lost its script cache (a restart, SCRIPT FLUSH): NOSCRIPT. */
  const sendScript = (
    script: Redis.Script,
    keys: ReadonlyArray<string>,
    args: ReadonlyArray<string>,
    settle: (outcome: Outcome) => void
  ) =>
    send(
      () => `script ${script.name}`,
      () => client.evalsha(script.sha1, keys.length, ...keys, ...args),
      (cause) => isNoScript(cause) ? client.eval(script.lua, keys.length, ...keys, ...args) : undefined,
      settle
    )

  const open = new Map<Redis.Script, Batch>()

  const flush = (script: Redis.Script, batch: Batch) => {
    if (batch.sent) return
    batch.sent = true
    if (open.get(script) === batch) open.delete(script)
    let { args, keys, resumes } = batch
    if (resumes.includes(undefined)) {
      // Leave out the calls interrupted while they waited (each has script.keys keys, args.length / n args).
      const perArgs = args.length / resumes.length
      const kept = resumes.flatMap((resume, i) => resume ? [i] : [])
      keys = kept.flatMap((i) => keys.slice(i * script.keys, (i + 1) * script.keys))
      args = kept.flatMap((i) => args.slice(i * perArgs, (i + 1) * perArgs))
      resumes = kept.map((i) => resumes[i])
    }
    if (resumes.length === 0) return
    const many = resumes.length > 1 ? script.many! : script
    sendScript(many, keys, args, (outcome) => {
      if ("error" in outcome) {
        for (const resume of resumes) resume?.(Effect.fail(outcome.error))
      } else if (resumes.length === 1) {
        resumes[0]?.(Effect.succeed(outcome.reply))
      } else if (Array.isArray(outcome.reply) && outcome.reply.length === resumes.length) {
        const replies: ReadonlyArray<unknown> = outcome.reply
        for (let i = 0; i < resumes.length; i++) resumes[i]?.(Effect.succeed(replies[i]))
      } else {
        const error = new Redis.RedisError({
          reason: "Reply",
          operation: `script ${many.name}`,
          cause: new Error(`expected ${resumes.length} replies, got ${JSON.stringify(outcome.reply)}`)
        })
        for (const resume of resumes) resume?.(Effect.fail(error))
      }
    })
  }

  const batched = (script: Redis.Script, keys: ReadonlyArray<string>, args: ReadonlyArray<string>) =>
    Effect.async<unknown, Redis.RedisError>((resume) => {
      let batch = open.get(script)
      if (batch === undefined && inFlight === 0) {
        // Nothing to wait for: an idle connection sends a lone call at once.
        return sendScript(script, keys, args, (outcome) => resume(toEffect(outcome)))
      }
      if (batch === undefined) {
        const fresh: Batch = { keys: [], args: [], resumes: [], sent: false }
        open.set(script, fresh)
        queueMicrotask(() => flush(script, fresh))
        batch = fresh
      }
      const index = batch.resumes.push(resume) - 1
      for (const key of keys) batch.keys.push(key)
      for (const arg of args) batch.args.push(arg)
      // A full batch goes at once and the next call opens another, so batches overlap with the server's work.
      if (batch.resumes.length === MAX_BATCH) flush(script, batch)
      const resumes = batch.resumes
      return Effect.sync(() => {
        resumes[index] = undefined
      })
    })

  return {
    [Redis.TypeId]: Redis.TypeId,
    script: (script, keys, args) =>
      keys.length !== script.keys
        ? Effect.dieMessage(`wakuwaku: script ${script.name} declares ${script.keys} keys, got ${keys.length}`)
        : script.many !== undefined
        ? batched(script, keys, args)
        : Effect.async((resume) => sendScript(script, keys, args, (outcome) => resume(toEffect(outcome)))),
    command: (name, args) =>
      Effect.async((resume) => send(() => name, () => client.call(name, ...args), undefined, (o) => resume(toEffect(o))))
  }
}

type Outcome = { readonly reply: unknown } | { readonly error: Redis.RedisError }

const toEffect = (outcome: Outcome): Effect.Effect<unknown, Redis.RedisError> =>
  "error" in outcome ? Effect.fail(outcome.error) : Effect.succeed(outcome.reply)

/**
 * Calls per batch. Measured with 256 acquires in flight: 64 lets Node build one batch while Redis runs
 * the one before; 256 made them take turns, 16 paid too much per call (docs/benchmarks.md).
 */
const MAX_BATCH = 64
