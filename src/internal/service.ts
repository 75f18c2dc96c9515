/**
 * @internal The values of the `Redis` service that its implementations share with `Redis.ts`: the type
 * ids, the tag and the errors. A leaf: it imports no module of this library at run time, so that
 * `Redis.ts` and the internals it loads never import each other.
 */
import * as Context from "effect/Context"
import * as Schema from "effect/Schema"
import type * as Public from "../Redis.js"

/** @internal */
export const TypeId: Public.TypeId = Symbol.for("wakuwaku/Redis") as Public.TypeId

/** @internal */
export const MemoryStoreTypeId: Public.MemoryStoreTypeId = Symbol.for(
  "wakuwaku/MemoryStore"
) as Public.MemoryStoreTypeId

/** @internal */
export const Redis: Context.Tag<Public.Redis, Public.Service> = Context.GenericTag<Public.Redis, Public.Service>(
  "wakuwaku/Redis"
)

/** @internal */
export const RedisErrorReason: Public.RedisErrorReasonSchema = Schema.Literal(
  "Connection",
  "Authentication",
  "Url",
  "Timeout",
  "ReadOnly",
  "OutOfMemory",
  "Script",
  "Reply",
  "Server"
)

/** @internal */
export class RedisError extends Schema.TaggedError<Public.RedisError>("wakuwaku/RedisError")("RedisError", {
  reason: RedisErrorReason,
  operation: Schema.String,
  cause: Schema.Defect
}) {
  override get message(): string {
    const cause = this.cause instanceof Error ? this.cause.message : String(this.cause)
    return `Redis ${this.operation} failed (${this.reason}): ${cause}`
  }
}

/** @internal */
export class InvalidInput extends Schema.TaggedError<Public.InvalidInput>("wakuwaku/InvalidInput")("InvalidInput", {
  operation: Schema.String,
  argument: Schema.String,
  message: Schema.String
}) {}
