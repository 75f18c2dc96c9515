/**
 * @internal Pipe: the pipe value (send, close, receive), `heartbeat` and `duplex`. Its scripts are in
 * internal/pipe/scripts.ts, its receiver's state machine in internal/pipe/receiver.ts.
 */
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as ParseResult from "effect/ParseResult"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import * as Capability from "../Capability.js"
import type * as Pipe from "../Pipe.js"
import type * as Redis from "../Redis.js"
import { bounded, positive, toMillis } from "./duration.js"
import * as keepAlive from "./keepAlive.js"
import * as key from "./key.js"
import { type Keys, receiver } from "./pipe/receiver.js"
import { BEAT_SCRIPT, CLOSE_SCRIPT, SEND } from "./pipe/scripts.js"
import * as access from "./redis.js"
import { runOn } from "./script.js"
import * as core from "./service.js"
import * as telemetry from "./telemetry.js"

const KIND = "Pipe"

/** @internal */
export const TypeId: Pipe.TypeId = Symbol.for("wakuwaku/Pipe") as Pipe.TypeId

/** @internal */
export const isPipe = (u: unknown): u is Pipe.Pipe<never, unknown> => typeof u === "object" && u !== null && TypeId in u

/** @internal */
export const entity: Pipe.Entity = Capability.entity(KIND)

/**
 * @internal Why JSON would not give back exactly `value` (an encoded message), or undefined when it
 * would: strings, booleans, null, finite numbers (-0 arrives as 0, which every equivalence counts
 * equal), and dense arrays and plain objects of those. Anything else JSON loses or changes (NaN and the
 * infinities, undefined, bigints, functions, symbols, holes, instances such as a `Date` or a `Map`,
 * symbol keys, a value that contains itself), and the path to it, such as `message.items[2] is NaN`.
 */
export const lossOf = (value: unknown, path: string, parents: Array<object>): string | undefined => {
  switch (typeof value) {
    case "string":
    case "boolean":
      return undefined
    case "number":
      return Number.isFinite(value) ? undefined : `${path} is ${value}, which JSON writes as null`
    case "undefined":
      return `${path} is undefined, which JSON drops (omit it instead)`
    case "bigint":
      return `${path} is a bigint, which JSON cannot write (encode it as a string)`
    case "function":
    case "symbol":
      return `${path} is a ${typeof value}, which JSON drops`
  }
  if (value === null) return undefined
  const object = value as object
  if (parents.includes(object)) return `${path} contains itself, which JSON cannot write`
  parents.push(object)
  try {
    if (Array.isArray(object)) {
      for (let i = 0; i < object.length; i++) {
        if (!(i in object)) return `${path}[${i}] is a hole, which JSON writes as null`
        const loss = lossOf(object[i], `${path}[${i}]`, parents)
        if (loss !== undefined) return loss
      }
      return undefined
    }
    const proto = Object.getPrototypeOf(object) as { readonly constructor?: unknown } | null
    if (proto !== Object.prototype && proto !== null) {
      const kind = typeof proto?.constructor === "function" && proto.constructor.name !== ""
        ? proto.constructor.name
        : "object"
      return `${path} is an instance of ${kind}, which JSON does not keep`
    }
    if (Object.getOwnPropertySymbols(object).length > 0) return `${path} has symbol keys, which JSON drops`
    for (const key of Object.keys(object)) {
      const loss = lossOf((object as Record<string, unknown>)[key], `${path}.${key}`, parents)
      if (loss !== undefined) return loss
    }
    return undefined
  } finally {
    parents.pop()
  }
}

class PipeImpl<Name extends Redis.KeyName, A> implements Pipe.Pipe<Name, A> {
  readonly [TypeId]: Pipe.TypeId = TypeId
  readonly label: string
  readonly ttlMillis: number
  readonly encode: (a: A) => Either.Either<unknown, ParseResult.ParseError>
  readonly decodeJson: (u: unknown) => Either.Either<A, ParseResult.ParseError>
  constructor(readonly namespace: string, readonly schema: Pipe.MessageSchema<A>, readonly ttl: Duration.Duration) {
    this.label = `Pipe(${namespace})`
    this.ttlMillis = toMillis(ttl)
    // The encoded type is not named (Schema is invariant in it): rebuilt from the AST as unknown.
    const message = Schema.make<A, unknown, never>(schema.ast)
    this.encode = Schema.encodeEither(message)
    this.decodeJson = Schema.decodeUnknownEither(Schema.parseJson(message))
    Object.freeze(this)
  }

  keys(operation: string, name: Name): Either.Either<Keys, Redis.InvalidInput> {
    return Either.map(key.encodeNameOf(this.label, operation, name), (encoded) => ({
      name: encoded,
      messages: key.taggedKey(KIND, this.namespace, encoded, "messages"),
      closed: key.taggedKey(KIND, this.namespace, encoded, "closed"),
      inflight: key.taggedKey(KIND, this.namespace, encoded, "inflight"),
      receiver: key.taggedKey(KIND, this.namespace, encoded, "receiver")
    }))
  }

  /**
   * The JSON of a message's encoded form, or why it cannot travel: its encoding failed, or JSON would
   * not give back exactly that encoded form (see {@link lossOf}), so the receiver would not decode an
   * equal message.
   */
  payload(message: A): string | { readonly message: string } {
    const encoded = this.encode(message)
    if (Either.isLeft(encoded)) return { message: ParseResult.TreeFormatter.formatErrorSync(encoded.left) }
    const loss = lossOf(encoded.right, "message", [])
    return loss === undefined
      ? JSON.stringify(encoded.right)
      : { message: `the message would not arrive as sent: ${loss}` }
  }

  readonly send = (
    name: Name,
    message: A
  ): Effect.Effect<void, Redis.RedisError | Redis.InvalidInput, Pipe.Requirements> => {
    const keys = this.keys("send", name)
    if (Either.isLeft(keys)) return Effect.fail(keys.left)
    const payload = this.payload(message)
    if (typeof payload !== "string") {
      return Effect.fail(
        new core.InvalidInput({ operation: `${this.label}.send`, argument: "message", message: payload.message })
      )
    }
    const { closed, inflight, messages } = keys.right
    const args = [payload, String(this.ttlMillis)]
    const sent = access.write(entity, (redis) => runOn(redis, SEND, [messages, closed, inflight], args))
    return telemetry.pipeOperation(this.namespace, "send", sent)
  }

  readonly close = (name: Name): Effect.Effect<void, Redis.RedisError | Redis.InvalidInput, Pipe.Requirements> => {
    const keys = this.keys("close", name)
    if (Either.isLeft(keys)) return Effect.fail(keys.left)
    const { closed, inflight, messages } = keys.right
    return access.write(
      entity,
      (redis) => runOn(redis, CLOSE_SCRIPT, [messages, closed, inflight], [String(this.ttlMillis)])
    )
  }

  readonly receive = (
    name: Name,
    options?: Pipe.ReceiveOptions
  ): Stream.Stream<A, Pipe.ReceiveError, Pipe.Requirements> => {
    const keys = this.keys("receive", name)
    if (Either.isLeft(keys)) return Stream.fail(keys.left)
    const delivery: unknown = options?.delivery
    if (delivery !== undefined && delivery !== "at-most-once" && delivery !== "at-least-once") {
      return Stream.fail(
        new core.InvalidInput({
          operation: `${this.label}.receive`,
          argument: "delivery",
          message: `delivery must be "at-most-once" or "at-least-once", got ${key.preview(delivery)}`
        })
      )
    }
    return Stream.unwrapScoped(
      Effect.flatMap(access.write(entity, Effect.succeed), (redis) => receiver(this, keys.right, redis, options))
    )
  }

  toString() {
    return `${this.label}: ttl ${this.ttlMillis} ms`
  }
}

/** @internal */
export const make = <Name extends Redis.KeyName, A>(
  namespace: string,
  schema: Pipe.MessageSchema<A>,
  ttl: Duration.DurationInput
): Pipe.Pipe<Name, A> =>
  new PipeImpl<Name, A>(key.validateNamespace(KIND, namespace), schema, bounded(ttl, `Pipe(${namespace}) ttl`))

/** @internal */
export const heartbeat = <Name extends Redis.KeyName, A>(
  pipe: Pipe.Pipe<Name, A>,
  name: Name,
  every: Duration.DurationInput | undefined
): Effect.Effect<never, Redis.RedisError | Redis.InvalidInput, Pipe.Requirements> => {
  const label = `Pipe(${pipe.namespace})`
  const ttlMillis = toMillis(pipe.ttl)
  // Not a lease: a beat that fails ends the heartbeat, so no retry needs room (unlike renewEvery).
  const period = every === undefined ? keepAlive.defaultEvery(pipe.ttl) : positive(every, `${label} heartbeat period`)
  const encoded = key.encodeNameOf(label, "heartbeat", name)
  if (Either.isLeft(encoded)) return Effect.fail(encoded.left)
  const keys = [
    key.taggedKey(KIND, pipe.namespace, encoded.right, "messages"),
    key.taggedKey(KIND, pipe.namespace, encoded.right, "closed"),
    key.taggedKey(KIND, pipe.namespace, encoded.right, "inflight")
  ]
  const beat = access.write(entity, (redis) => runOn(redis, BEAT_SCRIPT, keys, [String(ttlMillis)]))
  return Effect.forever(Effect.zipRight(beat, Effect.sleep(period)))
}

class DuplexImpl<Name extends Redis.KeyName, Out, In> implements Pipe.Duplex<Name, Out, In> {
  constructor(readonly outgoing: Pipe.Pipe<Name, Out>, readonly incoming: Pipe.Pipe<Name, In>) {
    Object.freeze(this)
  }
  get send() {
    return this.outgoing.send
  }
  get close() {
    return this.outgoing.close
  }
  get receive() {
    return this.incoming.receive
  }
  get flip(): Pipe.Duplex<Name, In, Out> {
    return new DuplexImpl(this.incoming, this.outgoing)
  }
}

/** @internal */
export const duplex = <Name extends Redis.KeyName, Out, In>(
  outgoing: Pipe.Pipe<Name, Out>,
  incoming: Pipe.Pipe<Name, In>
): Pipe.Duplex<Name, Out, In> => {
  if (outgoing.namespace === incoming.namespace) {
    throw new TypeError(
      `wakuwaku: Pipe.duplex needs two pipes with different namespaces, got ${JSON.stringify(outgoing.namespace)} twice`
    )
  }
  return new DuplexImpl(outgoing, incoming)
}
