/** @internal Errors of Redis calls. */
import * as Redis from "../Redis.js"

const messageOf = (cause: unknown): string => cause instanceof Error ? cause.message : String(cause)

/** @internal Sorts an ioredis or server failure into a reason. */
export const reasonOf = (cause: unknown): Redis.RedisErrorReason => {
  const message = messageOf(cause)
  if (message.startsWith("Command timed out")) return "Timeout"
  if (message.startsWith("READONLY")) return "ReadOnly"
  if (message.startsWith("OOM")) return "OutOfMemory"
  if (
    message.startsWith("Connection is closed") || message.startsWith("Reached the max retries") ||
    message.startsWith("Stream isn't writeable") || message.startsWith("connect ") || message.includes("ECONN") ||
    message.includes("EPIPE") || message.includes("ETIMEDOUT") || message.startsWith("LOADING")
  ) return "Connection"
  if (message.includes("user_script") || message.startsWith("NOSCRIPT") || message.includes("Error running script")) {
    return "Script"
  }
  return "Server"
}

/** @internal */
export const redisError = (operation: string, cause: unknown): Redis.RedisError =>
  new Redis.RedisError({ reason: reasonOf(cause), operation, cause })
