/**
 * The floors of a batched acquire, measured beside the library in the TokenBucket part: the same work
 * with no library code.
 *
 * - `promiseFloor`: a plain-Promise batcher. Calls made in one turn of the event loop are queued and sent
 *   at its end, at most `max` per EVALSHA of the library's own batch script (the bucket's shape once per
 *   call, as the library sends it), and each call's promise is resolved with its raw reply. No Effect.
 * - `effectFloor`: the same batcher driven by `Effect.async` (no canceler) from fibers: what any Effect
 *   code pays to suspend a fiber per acquire and resume it with its reply.
 *
 * Neither decodes the reply, checks a capability, builds a key from a name or handles interruption,
 * deadlines or a cluster: the distance from these floors is what the library's own code costs.
 */
import { Effect } from "effect"
import type { Redis as IORedis } from "ioredis"

/** The calls of one turn: KEYS and ARGV laid end to end as the batch script reads them. */
interface Pending {
  keys: Array<string>
  args: Array<string>
  settle: Array<(reply: unknown) => void>
}

/**
 * A batcher of calls to `sha1` (a batch script: 1 KEY per call, `shared` leading ARGV sent once, then
 * `perCall` ARGV per call), at most `max` calls per script call.
 */
export const batcher = (
  client: IORedis,
  sha1: string,
  shared: ReadonlyArray<string>,
  max: number
) => {
  let open: Pending | undefined
  const flush = (batch: Pending) => {
    if (open === batch) open = undefined
    client.evalsha(sha1, batch.keys.length, ...batch.keys, ...shared, ...batch.args).then(
      (replies) => {
        const all = replies as ReadonlyArray<unknown>
        for (let i = 0; i < batch.settle.length; i++) batch.settle[i]!(all[i])
      },
      (error: unknown) => {
        for (const settle of batch.settle) settle(error)
      }
    )
  }
  return (key: string, args: ReadonlyArray<string>, settle: (reply: unknown) => void): void => {
    let batch = open
    if (batch === undefined) {
      const fresh: Pending = { keys: [], args: [], settle: [] }
      open = batch = fresh
      queueMicrotask(() => {
        if (open === fresh) flush(fresh)
      })
    }
    batch.keys.push(key)
    for (const arg of args) batch.args.push(arg)
    batch.settle.push(settle)
    if (batch.settle.length === max) flush(batch)
  }
}

/** `ops` calls through `call`, `inFlight` promise loops at a time. */
export const promiseFloor = async (
  call: ReturnType<typeof batcher>,
  keyOf: (i: number) => string,
  args: ReadonlyArray<string>,
  ops: number,
  inFlight: number
): Promise<void> => {
  let next = 0
  const one = (key: string) => new Promise<unknown>((resolve) => call(key, args, resolve))
  const loop = async (): Promise<void> => {
    while (next < ops) await one(keyOf(next++))
  }
  await Promise.all(Array.from({ length: inFlight }, loop))
}

/** `ops` calls through `call`, each an `Effect.async`, from `inFlight` fibers in a loop. */
export const effectFloor = (
  call: ReturnType<typeof batcher>,
  keyOf: (i: number) => string,
  args: ReadonlyArray<string>,
  ops: number,
  inFlight: number
): Promise<void> => {
  let next = 0
  const one = (key: string) =>
    Effect.async<unknown>((resume) => call(key, args, (reply) => resume(Effect.succeed(reply))))
  const loop = Effect.whileLoop({ while: () => next < ops, body: () => one(keyOf(next++)), step: () => {} })
  return Effect.runPromise(
    Effect.all(Array.from({ length: inFlight }, () => loop), { concurrency: "unbounded", discard: true })
  )
}
