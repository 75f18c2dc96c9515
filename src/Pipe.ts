/**
 * Pipe: typed, ordered messages from one sender to one receiver anywhere in the cluster, like one
 * direction of a websocket. The receiver is an Effect `Stream` that ends when the sender closes the
 * pipe.
 *
 * **What lives in Redis.** Per name, up to four keys in one cluster hash slot
 * (`@@wakuwaku:Pipe:{<namespace>:<name>}:<suffix>`), each with a TTL:
 * - `messages`, a list of JSON payloads waiting for the receiver, plus in-band sentinels (`!close`
 *   after the last message, `!beat` for a heartbeat); every `send` and `close` restarts its TTL;
 * - `closed`, a marker set by `close` for one TTL, while which later sends are dropped;
 * - `receiver`, the receiver's lease (a random token), renewed every third of the TTL;
 * - `inflight`, the messages the receiver has taken from `messages` and not finished, behind a
 *   placeholder element that keeps the list (and its TTL) alive.
 *
 * **Guarantees.**
 * - Messages arrive in the order they were sent. They wait in Redis while no receiver listens, for one
 *   TTL after the last send, so the receiver may start before or after the sender.
 * - `close` ends the receiver's stream after every message sent before it; a message sent after it is
 *   accepted and never read. A receiver started on a closed, drained pipe ends at once.
 * - One receiver per name: a second one fails with {@link PipeBusy}.
 * - Interrupting the receiver never loses a message: whatever it took from Redis and did not hand to
 *   the stream goes back to the head of the pipe, in order, before the interruption completes.
 * - At-most-once (the default): a message handed to the stream is gone; a receiver process that crashes
 *   loses what it had taken. At-least-once: a message stays in Redis until the stream is pulled for the
 *   next one (its handler succeeded); a receiver that restarts after a crash gets it again first.
 * - A receiver that gets nothing for a whole TTL fails with {@link PipeAbandoned}: a sender that may
 *   stay quiet longer runs {@link heartbeat}.
 *
 * **Caveats.** The receiver blocks (BLMOVE) on a connection of its own (`Redis.dedicated`; on a
 * cluster, to the master of the pipe's slot), and stops it with `CLIENT KILL`, which needs the CLIENT
 * permission under ACLs. The receiver's lease, like any lease, assumes a receiver is not paused for
 * longer than a TTL.
 *
 * @example
 * ```ts
 * import { Effect, Schema, Stream } from "effect"
 * import { Pipe, Redis } from "wakuwaku"
 *
 * class Frame extends Schema.Class<Frame>("Frame")({ text: Schema.String }) {}
 * export const TO_CLIENT = Pipe.make<string, Frame>("to-client", Frame, "60 seconds")
 *
 * export const program = Effect.gen(function*() {
 *   yield* TO_CLIENT.send("session-1", new Frame({ text: "hello" }))
 *   yield* TO_CLIENT.close("session-1")
 *   yield* TO_CLIENT.receive("session-1").pipe(Stream.runForEach((frame) => Effect.log(frame.text)))
 * }).pipe(Effect.provide(Redis.layer({ url: "redis://127.0.0.1:6379" })))
 * ```
 *
 * @since 0.1.0
 */
import type * as Cause from "effect/Cause"
import type * as Duration from "effect/Duration"
import type * as Effect from "effect/Effect"
import { dual } from "effect/Function"
import type * as Schema from "effect/Schema"
import type * as SchemaAST from "effect/SchemaAST"
import type * as Stream from "effect/Stream"
import type * as Capability from "./Capability.js"
import * as internal from "./internal/pipe.js"
import * as errors from "./internal/pipe/errors.js"
import type * as Redis from "./Redis.js"

/**
 * @since 0.2.0
 * @category type ids
 */
export const TypeId: unique symbol = internal.TypeId

/**
 * @since 0.2.0
 * @category type ids
 */
export type TypeId = typeof TypeId

/**
 * Whether a value is a pipe made by {@link make}.
 *
 * @since 0.2.0
 * @category guards
 */
export const isPipe: (u: unknown) => u is Pipe<never, unknown> = internal.isPipe

/**
 * @since 0.1.0
 * @category capabilities
 */
export type Entity = Capability.Entity<"Pipe">

/**
 * @since 0.1.0
 * @category capabilities
 */
export const entity: Entity = internal.entity

/**
 * What an operation needs: `Redis` and the right to write (`Requirements<"write">`, the default) or read
 * pipes, as every structure's `Requirements` says it. Every operation writes: taking a message removes it.
 *
 * @since 0.1.0
 * @category capabilities
 */
export type Requirements<Access extends "read" | "write" = "write"> =
  | Redis.Redis
  // Spelled out rather than through the `Entity` alias, so that compile errors name the entity.
  | (Access extends "write" ? Capability.Write<Capability.Entity<"Pipe">>
    : Capability.Read<Capability.Entity<"Pipe">>)

/**
 * What a pipe needs of a message schema: its type, no requirements, and its AST. Every
 * `Schema.Schema<A, I, never>` is one, whatever its encoded type `I`; messages travel as the JSON of
 * that encoded form.
 *
 * @since 0.1.0
 * @category models
 */
export interface MessageSchema<A> {
  readonly Type: A
  readonly Context: never
  readonly ast: SchemaAST.AST
}

/**
 * How the receiver hands messages over.
 *
 * - `at-most-once`: a message is removed from Redis as the stream emits it. A receiver that crashes
 *   (its process dies) loses the messages it had taken; none is ever delivered twice.
 * - `at-least-once`: a message is removed only when the stream is pulled for the next one, that is,
 *   once the consumer's handler for it succeeded. A receiver that restarts after a crash gets the
 *   unfinished message again first; that one message is the only duplicate.
 *
 * Interruption loses nothing in either mode: what was taken and not handed over goes back.
 *
 * @since 0.1.0
 * @category models
 */
export type Delivery = "at-most-once" | "at-least-once"

/**
 * Options of {@link Pipe.receive}.
 *
 * @since 0.1.0
 * @category models
 */
export interface ReceiveOptions {
  /** Default `at-most-once`. */
  readonly delivery?: Delivery | undefined
}

/**
 * How a receiver's stream can fail.
 *
 * @since 0.1.0
 * @category errors
 */
export type ReceiveError = Redis.RedisError | Redis.InvalidInput | MessageError | PipeAbandoned | PipeBusy

/**
 * A pipe: a plain immutable value, declared once as a module-level constant. Each name is its own
 * pipe, with one sender and one receiver.
 *
 * @since 0.1.0
 * @category models
 */
export interface Pipe<in Name extends Redis.KeyName, A> {
  readonly [TypeId]: TypeId
  /** A one-line description for logs. */
  toString(): string
  readonly namespace: string
  /** How long a message waits for the receiver, and how long the receiver waits for a message. */
  readonly ttl: Duration.Duration
  /** The message schema; payloads are the JSON of its encoded form. */
  readonly schema: MessageSchema<A>
  /**
   * Appends a message and restarts the TTL of the message list. A message that cannot be encoded, or
   * whose encoded form JSON would not give back exactly (`NaN`, `undefined`, a bigint, a `Date` left
   * unencoded, …; `-0` arrives as `0`), fails with `InvalidInput` and nothing is sent. On a closed pipe
   * the message is accepted and dropped.
   */
  readonly send: (name: Name, message: A) => Effect.Effect<void, Redis.RedisError | Redis.InvalidInput, Requirements>
  /**
   * Closes the pipe: the receiver's stream ends after every message sent before this, and later sends
   * are dropped for one TTL. Closing a closed pipe does nothing.
   */
  readonly close: (name: Name) => Effect.Effect<void, Redis.RedisError | Redis.InvalidInput, Requirements>
  /**
   * The messages, in order, as a stream that ends when the pipe is closed. It holds a connection of its
   * own and the receiver's lease while it runs, and gives both up when it ends, however it ends.
   */
  readonly receive: (name: Name, options?: ReceiveOptions) => Stream.Stream<A, ReceiveError, Requirements>
}

/**
 * Declares a pipe of messages of `schema`, with a TTL of `ttl` (under a millisecond counts as one).
 * Give both type arguments or none: without them, names are strings and the message type is the
 * schema's. A `ttl` that is not a duration longer than zero and at most 10^11 ms (about 3.2 years)
 * throws a `RangeError` here, and a namespace that is not a short word a `TypeError`: declare pipes as
 * module-level constants, so a bad one fails at start-up.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = <Name extends Redis.KeyName = string, A = never>(
  namespace: string,
  schema: MessageSchema<A>,
  ttl: Duration.DurationInput
): Pipe<Name, A> => internal.make<Name, A>(namespace, schema, ttl)

/**
 * {@link Pipe.send} as a module function,
 * beside the method `pipe.send(name, message)`. Dual: `send(pipe, name, message)` or `send(name, message)(pipe)`.
 *
 * @since 0.2.0
 * @category operations
 */
export const send: {
  <Name extends Redis.KeyName, A>(
    name: Name,
    message: A
  ): (pipe: Pipe<Name, A>) => Effect.Effect<void, Redis.RedisError | Redis.InvalidInput, Requirements>
  <Name extends Redis.KeyName, A>(
    pipe: Pipe<Name, A>,
    name: Name,
    message: A
  ): Effect.Effect<void, Redis.RedisError | Redis.InvalidInput, Requirements>
} = dual(
  (args) => internal.isPipe(args[0]),
  <Name extends Redis.KeyName, A>(
    pipe: Pipe<Name, A>,
    name: Name,
    message: A
  ): Effect.Effect<void, Redis.RedisError | Redis.InvalidInput, Requirements> => pipe.send(name, message)
)

/**
 * {@link Pipe.close} as a module function,
 * beside the method `pipe.close(name)`. Dual: `close(pipe, name)` or `close(name)(pipe)`.
 *
 * @since 0.2.0
 * @category operations
 */
export const close: {
  <Name extends Redis.KeyName>(
    name: Name
  ): <A>(pipe: Pipe<Name, A>) => Effect.Effect<void, Redis.RedisError | Redis.InvalidInput, Requirements>
  <Name extends Redis.KeyName, A>(
    pipe: Pipe<Name, A>,
    name: Name
  ): Effect.Effect<void, Redis.RedisError | Redis.InvalidInput, Requirements>
} = dual(
  (args) => internal.isPipe(args[0]),
  <Name extends Redis.KeyName, A>(
    pipe: Pipe<Name, A>,
    name: Name
  ): Effect.Effect<void, Redis.RedisError | Redis.InvalidInput, Requirements> => pipe.close(name)
)

/**
 * {@link Pipe.receive} as a module function,
 * beside the method `pipe.receive(name, options)`.
 * Dual: `receive(pipe, name, options)` or `receive(name, options)(pipe)`.
 *
 * @since 0.2.0
 * @category operations
 */
export const receive: {
  <Name extends Redis.KeyName>(
    name: Name,
    options?: ReceiveOptions
  ): <A>(pipe: Pipe<Name, A>) => Stream.Stream<A, ReceiveError, Requirements>
  <Name extends Redis.KeyName, A>(
    pipe: Pipe<Name, A>,
    name: Name,
    options?: ReceiveOptions
  ): Stream.Stream<A, ReceiveError, Requirements>
} = dual(
  (args) => internal.isPipe(args[0]),
  <Name extends Redis.KeyName, A>(
    pipe: Pipe<Name, A>,
    name: Name,
    options?: ReceiveOptions
  ): Stream.Stream<A, ReceiveError, Requirements> => pipe.receive(name, options)
)

/**
 * Keeps a pipe alive while the sender has nothing to say: every `every` (default a third of the TTL)
 * it restarts the TTL of the message list, and puts a heartbeat in it when it is empty, which wakes the
 * receiver without handing it anything. Run it beside the sender (`Effect.fork`, or race it against
 * the sending) for as long as the pipe should stay open; it stops doing anything once the pipe is
 * closed. It fails only when Redis does. An `every` that is not finite and longer than zero throws a
 * `RangeError` here.
 *
 * @since 0.1.0
 * @category combinators
 */
export const heartbeat = <Name extends Redis.KeyName, A>(
  pipe: Pipe<Name, A>,
  name: Name,
  every?: Duration.DurationInput
): Effect.Effect<never, Redis.RedisError | Redis.InvalidInput, Requirements> => internal.heartbeat(pipe, name, every)

/**
 * Two pipes paired into one two-way channel per name: messages of `Out` go out through `outgoing`,
 * messages of `In` come in through `incoming`. The other end pairs the same two pipes the other way
 * round.
 *
 * @since 0.1.0
 * @category models
 */
export interface Duplex<in Name extends Redis.KeyName, Out, In> {
  readonly outgoing: Pipe<Name, Out>
  readonly incoming: Pipe<Name, In>
  /** `outgoing.send`. */
  readonly send: (name: Name, message: Out) => Effect.Effect<void, Redis.RedisError | Redis.InvalidInput, Requirements>
  /** `outgoing.close`: closes this end's direction only. */
  readonly close: (name: Name) => Effect.Effect<void, Redis.RedisError | Redis.InvalidInput, Requirements>
  /** `incoming.receive`. */
  readonly receive: (name: Name, options?: ReceiveOptions) => Stream.Stream<In, ReceiveError, Requirements>
  /** The other end: the same pipes, the other way round. */
  readonly flip: Duplex<Name, In, Out>
}

/**
 * Pairs two pipes into a {@link Duplex}. They must have different namespaces (throws a `TypeError`
 * otherwise), or both directions would share one pipe.
 *
 * @since 0.1.0
 * @category constructors
 */
export const duplex = <Name extends Redis.KeyName, Out, In>(
  outgoing: Pipe<Name, Out>,
  incoming: Pipe<Name, In>
): Duplex<Name, Out, In> => internal.duplex(outgoing, incoming)

/**
 * The receiver got nothing, not even a heartbeat, for a whole TTL: the sender is presumed gone. The
 * receiver's lease has been given up; receiving again is allowed.
 *
 * @since 0.1.0
 * @category errors
 */
export interface PipeAbandoned extends Omit<Cause.YieldableError, "pipe"> {
  readonly _tag: "PipeAbandoned"
  /** Such as `Pipe(to-client)`. */
  readonly pipe: string
  /** The name, as encoded into the key. */
  readonly name: string
  /** The TTL it waited for. */
  readonly ttl: Duration.Duration
}

/**
 * The class of {@link PipeAbandoned}, and its schema.
 *
 * @since 0.1.0
 * @category errors
 */
export const PipeAbandoned: Schema.TaggedErrorClass<PipeAbandoned, "PipeAbandoned", {
  readonly _tag: Schema.tag<"PipeAbandoned">
  readonly pipe: typeof Schema.String
  readonly name: typeof Schema.String
  readonly ttl: typeof Schema.Duration
}> = errors.PipeAbandoned

/**
 * The type of the schema {@link PipeBusyReason}.
 *
 * @since 0.2.0
 * @category errors
 */
export type PipeBusyReasonSchema = Schema.Literal<["Held", "Lost"]>

/**
 * Why a receiver cannot receive: see {@link PipeBusy}.
 *
 * @since 0.2.0
 * @category errors
 */
export type PipeBusyReason = PipeBusyReasonSchema["Type"]

/**
 * The schema of {@link PipeBusyReason}.
 *
 * @since 0.2.0
 * @category errors
 */
export const PipeBusyReason: PipeBusyReasonSchema = errors.PipeBusyReason

/**
 * No receiving: `Held`, another receiver holds the pipe (its lease runs until it stops, or one TTL
 * after it died); `Lost`, this receiver's own lease ran out (its end came with no renewal confirmed),
 * so it stopped rather than split the messages with a receiver that may have taken over.
 *
 * @since 0.1.0
 * @category errors
 */
export interface PipeBusy extends Omit<Cause.YieldableError, "pipe"> {
  readonly _tag: "PipeBusy"
  readonly pipe: string
  readonly name: string
  readonly reason: PipeBusyReason
}

/**
 * The class of {@link PipeBusy}, and its schema.
 *
 * @since 0.1.0
 * @category errors
 */
export const PipeBusy: Schema.TaggedErrorClass<PipeBusy, "PipeBusy", {
  readonly _tag: Schema.tag<"PipeBusy">
  readonly pipe: typeof Schema.String
  readonly name: typeof Schema.String
  readonly reason: PipeBusyReasonSchema
}> = errors.PipeBusy

/**
 * A payload that does not decode through the pipe's schema. It has been taken out of the pipe, so it
 * does not block the next receiver: this error is its only delivery, and the stream ends with it.
 *
 * @since 0.1.0
 * @category errors
 */
export interface MessageError extends Omit<Cause.YieldableError, "pipe"> {
  readonly _tag: "MessageError"
  readonly pipe: string
  readonly name: string
  /** The payload exactly as Redis held it. */
  readonly raw: string
  /** Why it did not decode: the `ParseError` (in JSON, as `Schema.Defect` encodes it). */
  readonly cause: unknown
}

/**
 * The class of {@link MessageError}, and its schema.
 *
 * @since 0.1.0
 * @category errors
 */
export const MessageError: Schema.TaggedErrorClass<MessageError, "MessageError", {
  readonly _tag: Schema.tag<"MessageError">
  readonly pipe: typeof Schema.String
  readonly name: typeof Schema.String
  readonly raw: typeof Schema.String
  readonly cause: typeof Schema.Defect
}> = errors.MessageError
