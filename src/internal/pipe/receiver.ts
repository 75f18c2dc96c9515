/**
 * @internal The Pipe receiver's state machine, and why it loses nothing:
 *
 * - Everything the receiver takes from `messages` is moved, atomically, to the tail of `inflight`
 *   (BLMOVE, or LPOP + RPUSH in FETCH), so `inflight` holds, in order, every message this receiver took
 *   and has not finished, behind a placeholder `!<mode>:<done>`.
 * - The receiver counts in memory the messages it finished since it opened (`done`: handed to the
 *   stream in at-most-once, pulled past in at-least-once; heartbeats and the close sentinel count too).
 *   FETCH and RELEASE drop the finished prefix of `inflight` up to that count; the placeholder records
 *   how many were already dropped, so a call whose reply was lost can be repeated safely.
 * - On release (every end of the stream, interruption included): the dedicated connection is killed
 *   first (`CLIENT KILL ID`, over the shared connection), so a BLMOVE still on its socket can no longer
 *   move anything; then RELEASE puts the unfinished messages back at the head of `messages`, in order;
 *   then the connection is dropped.
 */
import * as Channel from "effect/Channel"
import * as Chunk from "effect/Chunk"
import * as Clock from "effect/Clock"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import type * as ParseResult from "effect/ParseResult"
import * as Stream from "effect/Stream"
import type * as Pipe from "../../Pipe.js"
import type * as Redis from "../../Redis.js"
import { defaultEvery, keepAlive } from "../keepAlive.js"
import * as lease from "../lease.js"
import { runOn, unexpectedReply } from "../script.js"
import * as telemetry from "../telemetry.js"
import * as errors from "./errors.js"
import { BATCH, BEAT, CLOSE, FETCH, MODE, OPEN, RELEASE, RENEW } from "./scripts.js"

/** A pull's value at the close sentinel: the stream ends. */
const END: unique symbol = Symbol("wakuwaku/Pipe/end")

/** @internal The keys of one name. */
export interface Keys {
  readonly name: string
  readonly messages: string
  readonly closed: string
  readonly inflight: string
  readonly receiver: string
}

/** @internal What the receiver needs of its pipe. */
export interface Receiving<A> {
  readonly namespace: string
  readonly label: string
  readonly ttl: Duration.Duration
  readonly ttlMillis: number
  readonly decodeJson: (u: unknown) => Either.Either<A, ParseResult.ParseError>
}

/**
 * The receiver, set up in the stream's scope: the dedicated connection, the lease (with its renewal)
 * and the release, then the stream of messages. Finalizers run in reverse order of registration:
 * renewal stopped, CLIENT KILL and RELEASE, connection dropped.
 */
/** @internal */
export const receiver = <A>(
  pipe: Receiving<A>,
  keys: Keys,
  redis: Redis.Service,
  options: Pipe.ReceiveOptions | undefined
) =>
  Effect.gen(function*() {
    const delivery = options?.delivery ?? "at-most-once"
    const atLeastOnce = delivery === "at-least-once"
    const batch = String(BATCH[delivery])
    const ttl = String(pipe.ttlMillis)
    const inflightTtl = String(2 * pipe.ttlMillis)
    // BLMOVE's timeout is in seconds, decimals allowed.
    const blockSeconds = String(pipe.ttlMillis / 1000)
    const { closed, inflight, messages, receiver } = keys
    const busy = (reason: "Held" | "Lost") => new errors.PipeBusy({ pipe: pipe.label, name: keys.name, reason })

    const dedicated = yield* redis.dedicated(messages)
    const token = lease.secret()
    const state = {
      /** Messages finished since the receiver opened (see the module doc). */
      done: 0,
      /** At-least-once: the last message emitted is not finished until the next pull. */
      handed: false,
      /** Moved to inflight, not yet handed over. */
      buffer: [] as Array<string>,
      at: 0,
      lost: false
    }
    // CLIENT KILL from another connection ends a BLMOVE still on the dedicated socket for good.
    const kill = dedicated.kill
    const release = Effect.suspend(() =>
      Effect.zipRight(
        kill,
        Effect.ignore(runOn(redis, RELEASE, [receiver, inflight, messages], [token, String(state.done), ttl]))
      )
    )
    // The lease runs from before the request that took it, at the latest.
    const opening = yield* Clock.currentTimeMillis
    const opened = yield* Effect.acquireRelease(
      runOn(redis, OPEN, [receiver, inflight, messages, closed], [token, ttl, MODE[delivery], inflightTtl]),
      (opened) => opened === 1 ? release : Effect.void
    )
    if (opened === 0) return yield* Effect.fail(busy("Held"))
    if (opened === 2) return Stream.empty

    // Renewal: the lease is lost when a renewal finds another token, or its end comes with none confirmed
    // (keepAlive.ts; an OPEN answered after its lease would have ended is lost at once). Then the blocked
    // BLMOVE is cut off, here and on the server, and the pull fails with PipeBusy (Lost).
    // Completed when the lease is lost: a pull waiting for FETCH's reply stops waiting then.
    const lostNow = yield* Deferred.make<void>()
    const early = yield* keepAlive({
      ttl: pipe.ttl,
      every: defaultEvery(pipe.ttl),
      since: opening,
      renew: runOn(redis, RENEW, [receiver, inflight], [token, ttl, inflightTtl]),
      onLost: () => {
        state.lost = true
        return Effect.zipRight(Deferred.succeed(lostNow, undefined), Effect.zipRight(dedicated.close, kill))
      }
    })
    // Lost before the first pull: nothing is blocked yet, and the release cuts the connection off anyway.
    if (early !== undefined) state.lost = true

    // What it moved, if it ran, stays in inflight, which the release puts back.
    const fetch = Effect.raceFirst(
      Effect.suspend(() => runOn(redis, FETCH, [receiver, inflight, messages], [token, String(state.done), batch])),
      Effect.zipRight(Deferred.await(lostNow), Effect.fail(busy("Lost")))
    )
    // A lost lease ends the wait at once, whatever the server does with the BLMOVE: the renewal marks it
    // lost and then closes the connection, which fails the command here.
    const block = dedicated.command("BLMOVE", [messages, inflight, "LEFT", "RIGHT", blockSeconds])

    /** Hands over the next payload of the buffer, or says there is none (undefined). Synchronous. */
    const next = (): Effect.Effect<A | typeof END, Pipe.ReceiveError> | undefined => {
      while (state.at < state.buffer.length) {
        const raw = state.buffer[state.at++]!
        if (raw === BEAT) {
          state.done++
          continue
        }
        if (raw === CLOSE) {
          state.done++
          return Effect.succeed(END)
        }
        const decoded = pipe.decodeJson(raw)
        if (Either.isLeft(decoded)) {
          state.done++
          return Effect.fail(new errors.MessageError({ pipe: pipe.label, name: keys.name, raw, cause: decoded.left }))
        }
        if (atLeastOnce) state.handed = true
        else state.done++
        return Effect.succeed(decoded.right)
      }
      state.buffer = []
      state.at = 0
      return undefined
    }

    const failRedis = (error: Redis.RedisError | Pipe.PipeBusy) => Effect.fail(state.lost ? busy("Lost") : error)

    // Waits for Redis only inside `restore`; every change of `state` happens outside it, uninterruptibly,
    // so it always matches what Redis holds.
    const pull: Effect.Effect<A | typeof END, Pipe.ReceiveError> = Effect.uninterruptibleMask((restore) => {
      if (state.handed) {
        state.handed = false
        state.done++
      }
      // Once the lease is lost, nothing more is handed over, not even what was already fetched.
      if (state.lost) return Effect.fail(busy("Lost"))
      const take = (): Effect.Effect<A | typeof END, Pipe.ReceiveError> => next() ?? fetching()
      const fetching = () =>
        Effect.matchEffect(restore(fetch), {
          onFailure: failRedis,
          onSuccess: (reply) => {
            if (reply === null) return Effect.fail(busy("Lost"))
            if (reply.length === 0) return blocking()
            state.buffer = reply as Array<string>
            return take()
          }
        })
      const blocking = () =>
        Effect.matchEffect(restore(block), {
          onFailure: failRedis,
          onSuccess: (moved) => {
            if (moved === null) {
              return Effect.fail(new errors.PipeAbandoned({ pipe: pipe.label, name: keys.name, ttl: pipe.ttl }))
            }
            if (typeof moved !== "string") return Effect.fail(unexpectedReply("BLMOVE", moved, "a payload or nil"))
            state.buffer = [moved]
            return take()
          }
        })
      return take()
    })
    // One message per chunk (a consumer that stops early, say with `Stream.take`, leaves nothing handed
    // over and unread), as a channel that loops: cheaper per message than `Stream.repeatEffectOption`.
    const loop: Channel.Channel<Chunk.Chunk<A>, unknown, Pipe.ReceiveError, unknown, void, unknown> = Channel.flatMap(
      Channel.fromEffect(telemetry.pipeOperation(pipe.namespace, "receive", pull, END)),
      (a) => a === END ? Channel.void : Channel.zipRight(Channel.write(Chunk.of(a)), Channel.suspend(() => loop))
    )
    return Stream.fromChannel(loop)
  })
