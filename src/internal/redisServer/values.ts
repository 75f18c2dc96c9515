/**
 * @internal RedisServer's tag and error. A leaf under RedisServer.ts: it imports the public module for
 * types only, so that RedisServer.ts and internal/redisServer.ts never import each other.
 */
import * as Context from "effect/Context"
import * as Schema from "effect/Schema"
import type * as Public from "../../RedisServer.js"

/** @internal */
export const RedisServer: Context.Tag<Public.RedisServer, Public.Server> = Context.GenericTag<
  Public.RedisServer,
  Public.Server
>("wakuwaku/RedisServer")

/** @internal */
export const RedisServerErrorReason: Public.RedisServerErrorReasonSchema = Schema.Literal(
  "NotInstalled",
  "StartFailed",
  "Timeout"
)

/** @internal */
export class RedisServerError extends Schema.TaggedError<Public.RedisServerError>("wakuwaku/RedisServerError")(
  "RedisServerError",
  { reason: RedisServerErrorReason, message: Schema.String }
) {}
