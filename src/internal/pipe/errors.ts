/**
 * @internal Pipe's errors. A leaf under Pipe.ts: it imports the public modules for types only, so that
 * Pipe.ts and the internals it loads never import each other.
 */
import * as Schema from "effect/Schema"
import type * as Pipe from "../../Pipe.js"

/** The pipe's label: the `pipe` field, which shadows Pipeable's `pipe` method on these classes. */
const pipeOf = (error: { readonly pipe: unknown }): string => String(error.pipe)

/** @internal */
export class PipeAbandoned extends Schema.TaggedError<Pipe.PipeAbandoned>("wakuwaku/PipeAbandoned")("PipeAbandoned", {
  pipe: Schema.String,
  name: Schema.String,
  ttl: Schema.Duration
}) {
  override get message(): string {
    return `${pipeOf(this)} ${JSON.stringify(this.name)}: nothing arrived for a whole TTL`
  }
}

/** @internal */
export const PipeBusyReason: Pipe.PipeBusyReasonSchema = Schema.Literal("Held", "Lost")

/** @internal */
export class PipeBusy extends Schema.TaggedError<Pipe.PipeBusy>("wakuwaku/PipeBusy")("PipeBusy", {
  pipe: Schema.String,
  name: Schema.String,
  reason: PipeBusyReason
}) {
  override get message(): string {
    return this.reason === "Held"
      ? `${pipeOf(this)} ${JSON.stringify(this.name)} already has a receiver`
      : `${pipeOf(this)} ${JSON.stringify(this.name)}: the receiver's lease was lost`
  }
}

/** @internal */
export class MessageError extends Schema.TaggedError<Pipe.MessageError>("wakuwaku/MessageError")("MessageError", {
  pipe: Schema.String,
  name: Schema.String,
  raw: Schema.String,
  cause: Schema.Defect
}) {
  override get message(): string {
    const cause = this.cause instanceof Error ? this.cause.message : String(this.cause)
    return `${pipeOf(this)} ${JSON.stringify(this.name)}: a message did not decode: ${cause}`
  }
}
