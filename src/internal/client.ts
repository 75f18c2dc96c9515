/**
 * @internal The `Redis` service over an ioredis client: command deadlines, EVALSHA with the NOSCRIPT
 * fallback, and batching of concurrent script calls.
 */
import keySlot from "cluster-key-slot"
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import { Cluster, Redis as IORedisClient } from "ioredis"
import type { Redis as IORedis } from "ioredis"
import * as Redis from "../Redis.js"
import type * as Script from "../Script.js"
import { redisError } from "./errors.js"
import { checkKeys } from "./script.js"

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
  /** How many ARGV each call brought. */
  readonly argCounts: Array<number>
  /** Where each call's reply goes; unset once the call is interrupted. */
  readonly resumes: Array<Resume | undefined>
  sent: boolean
}

/**
 * @internal The service over a client.
 *
 * - `deadlines`, when given, bounds how long a call waits for its reply.
 * - A script with a `many` variant is batched: calls made while others are in flight on the
 *   connection, in the same turn of the event loop, are queued and sent at the end of that turn as one
 *   call of `many` (on a cluster, one per hash slot), whose reply holds one reply (or error) per call,
 *   in order. A call on an idle connection is sent at once, as the script itself. A call interrupted
 *   before its batch is sent is left out of it.
 */
export const make = (client: IORedis | Cluster, deadlines?: Deadlines): Redis.Service => {
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

  /**
   * EVALSHA, and EVAL when the server has lost its script cache (a restart, SCRIPT FLUSH): NOSCRIPT.
   * A read-only script goes as EVALSHA_RO / EVAL_RO, which replicas serve.
   */
  const sendScript = (
    script: Script.Script<unknown>,
    keys: ReadonlyArray<string>,
    args: ReadonlyArray<string>,
    settle: (outcome: Outcome) => void
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
      settle
    )

  /** Open batches by script, and on a cluster by hash slot too: one script call runs on one node. */
  const open = new Map<Script.Script<unknown>, Map<number, Batch>>()
  const slotOf = client instanceof Cluster ? (keys: ReadonlyArray<string>) => keySlot(keys[0]!) : () => 0

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
    sendScript(sent, keys, args, (outcome) => {
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
        const error = new Redis.RedisError({
          reason: "Reply",
          operation: `script ${sent.name}`,
          cause: new Error(`expected ${resumes.length} replies, got ${JSON.stringify(outcome.reply)}`)
        })
        for (const resume of resumes) resume?.(Effect.fail(error))
      }
    })
  }

  const batched = (script: Script.Script<unknown>, keys: ReadonlyArray<string>, args: ReadonlyArray<string>) =>
    Effect.async<unknown, Redis.RedisError>((resume) => {
      const slot = slotOf(keys)
      let bySlot = open.get(script)
      let batch = bySlot?.get(slot)
      if (batch === undefined && inFlight === 0) {
        // Nothing to wait for: an idle connection sends a lone call at once.
        return sendScript(script, keys, args, (outcome) => resume(toEffect(outcome)))
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

  return {
    [Redis.TypeId]: Redis.TypeId,
    script: (script, keys, args) => {
      const wrong = checkKeys(script, keys)
      return wrong !== undefined
        ? Effect.dieMessage(wrong)
        : script.many !== undefined
        ? batched(script, keys, args)
        : Effect.async((resume) => sendScript(script, keys, args, (outcome) => resume(toEffect(outcome))))
    },
    command: (name, args) =>
      Effect.async((resume) =>
        send(
          () => name,
          client instanceof Cluster && EVERY_MASTER.has(name.toUpperCase())
            ? () => onEveryMaster(client, name, args)
            : () => client.call(name, ...args),
          undefined,
          (o) => resume(toEffect(o))
        )
      ),
    dedicated: dedicated(client, (id, via) =>
      Effect.async((resume) =>
        send(
          () => "CLIENT KILL",
          () => (via ?? (client as IORedis)).call("CLIENT", "KILL", "ID", id),
          undefined,
          (o) => resume(toEffect(o))
        )
      ))
  }
}

/**
 * A connection of its own for blocking commands on `key`, connected for the scope, with its server-side
 * id; dropped at the end. On a standalone client, a duplicate; on a cluster, a connection to the master
 * serving `key`'s slot now. `kill` sends `CLIENT KILL ID` over `killer` (a connection to the same server,
 * within the service's deadline), then drops the socket.
 */
const dedicated = (
  client: IORedis | Cluster,
  killer: (id: number, via: IORedis | undefined) => Effect.Effect<unknown, Redis.RedisError>
) =>
(key: string): Effect.Effect<Redis.Dedicated, Redis.RedisError, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.tryPromise({
      try: async () => {
        // Never reconnected, never re-sent: a blocking command re-sent after `CLIENT KILL` could still
        // move a message after its owner gave the connection up.
        // No command timeout of the parent's either: a blocking command waits as long as it says.
        const own = {
          lazyConnect: true,
          autoResendUnfulfilledCommands: false,
          retryStrategy: () => null,
          commandTimeout: undefined,
          socketTimeout: undefined
        } as const
        let via: IORedis | undefined
        let connection: IORedis
        if (client instanceof Cluster) {
          via = masterOf(client, key)
          connection = new IORedisClient(via.options.port ?? 6379, via.options.host ?? "127.0.0.1", {
            ...client.options.redisOptions,
            ...own
          })
        } else {
          connection = client.duplicate(own)
        }
        connection.on("error", () => {})
        try {
          await connection.connect()
          return { connection, id: Number(await connection.client("ID")), via }
        } catch (cause) {
          connection.disconnect()
          throw cause
        }
      },
      catch: (cause) => redisError("connect (dedicated)", cause)
    }),
    ({ connection }) => Effect.sync(() => drop(connection))
  ).pipe(
    Effect.map(({ connection, id, via }) => ({
      id,
      command: (name: string, args: ReadonlyArray<string | number>) =>
        Effect.tryPromise({ try: () => connection.call(name, ...args), catch: (cause) => redisError(name, cause) }),
      close: Effect.sync(() => drop(connection)),
      kill: Effect.ensuring(Effect.ignore(killer(id, via)), Effect.sync(() => drop(connection)))
    }))
  )

const drop = (connection: IORedis) => {
  connection.disconnect()
  connection.stream?.destroy()
}

/** Keyless commands about the whole keyspace: on a cluster they run on every master, and the replies merge. */
const EVERY_MASTER = new Set(["SCAN", "KEYS", "DBSIZE", "FLUSHALL", "FLUSHDB"])

/**
 * Runs a keyspace command on every master: SCAN scans each to the end (the reply is cursor "0" and every
 * key), KEYS concatenates, DBSIZE sums, FLUSHALL flushes each.
 */
const onEveryMaster = async (
  cluster: Cluster,
  name: string,
  args: ReadonlyArray<string | number>
): Promise<unknown> => {
  const masters = cluster.nodes("master")
  switch (name.toUpperCase()) {
    case "SCAN": {
      const rest = args.slice(1)
      const keys = await Promise.all(masters.map(async (node) => {
        const found: Array<string> = []
        let cursor = "0"
        do {
          const [next, batch] = (await node.call("SCAN", cursor, ...rest)) as [string, Array<string>]
          found.push(...batch)
          cursor = next
        } while (cursor !== "0")
        return found
      }))
      return ["0", keys.flat()]
    }
    case "KEYS":
      return (await Promise.all(masters.map((node) => node.call(name, ...args) as Promise<Array<string>>))).flat()
    case "DBSIZE":
      return (await Promise.all(masters.map((node) => node.call(name, ...args) as Promise<number>))).reduce(
        (a, b) => a + b,
        0
      )
    default:
      await Promise.all(masters.map((node) => node.call(name, ...args)))
      return "OK"
  }
}

/** The connection of `cluster` to the master that serves `key`'s slot. */
const masterOf = (cluster: Cluster, key: string): IORedis => {
  const address = cluster.slots[keySlot(key)]?.[0]
  const master = cluster.nodes("master").find((node) => `${node.options.host}:${node.options.port}` === address)
  if (master === undefined) {
    throw new Error(`no master known for the slot of ${JSON.stringify(key)} (is the cluster ready?)`)
  }
  return master
}

type Outcome = { readonly reply: unknown } | { readonly error: Redis.RedisError }

const toEffect = (outcome: Outcome): Effect.Effect<unknown, Redis.RedisError> =>
  "error" in outcome ? Effect.fail(outcome.error) : Effect.succeed(outcome.reply)

/**
 * Calls per batch. A full batch goes at once, so with many calls in flight several batches are in
 * flight together and Node builds one while Redis runs another. Measured (docs/benchmarks.md): with
 * 64 lock round trips in flight, batches of 64 made Node and Redis take turns (0.90× redis-semaphore)
 * where 32 overlapped them (1.14×); with 256 acquires in flight, all 256 in one call took turns
 * (43 000/s) and 16 paid too much per call.
 */
const MAX_BATCH = 32
